//! The operator as users run it: installed from deploy/ with kustomize or from
//! charts/valkey-operator with helm, every controller a pod of its Deployment (two replicas,
//! leader election), running the image that `hack/operator-image.sh` built and the node agent
//! pulled from the local registry.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::Duration;

use e2e_kit::cluster_testing::{
    Access, ClusterApis, DataSet, Progress, access, open_slots, shape, slots_by_primary,
    valkey_cluster, wait_until,
};
use e2e_kit::testing::pod_ready;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams};
use kube::{Api, Client, ResourceExt};
use local_cluster::controller_pods::{PodController, container_pid};
use local_cluster::operator::{apply_all, documents, kustomize_build};
use local_cluster::operator_pods::{self, OperatorImage};
use local_cluster::{LocalCluster, Options, repo_root};
use serde_json::json;

#[path = "operator_as_pods/monitoring.rs"]
mod monitoring;
#[path = "operator_as_pods/plugin.rs"]
mod plugin;
#[path = "operator_as_pods/upgrade.rs"]
mod upgrade;

const OPERATOR_NS: &str = "valkey-operator-system";
const NS: &str = "default";
/// Start to Ready of a small cluster, or a Deployment's pods replaced.
const FORM: Duration = Duration::from_secs(240);
/// A scale step moving a quarter of 50k keys.
const RESHAPE: Duration = Duration::from_secs(300);

/// Each test starts whole local clusters; two at once would starve a 2-core machine.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

struct Installed {
    cluster: LocalCluster,
    client: Client,
    image: OperatorImage,
    /// Deployment names of the overlay's controllers.
    deployments: Vec<String>,
    _run: tempfile::TempDir,
}

async fn install(overlay: &str) -> Installed {
    install_with(overlay, &[]).await
}

/// As [`install`], with `(binary, name, value)` set in the controllers' environment.
async fn install_with(overlay: &str, env: &[(&str, &str, &str)]) -> Installed {
    let run = tempfile::tempdir().unwrap();
    let cluster = LocalCluster::start(Options::new(run.path())).await.unwrap();
    let client = cluster.client().await.unwrap();
    let image = operator_pods::push_image(&cluster).await.unwrap();
    let overlay_dir = repo_root().join("deploy/overlays").join(overlay);
    let deployments =
        operator_pods::install_with_env(&cluster, &overlay_dir, &image.reference, env)
            .await
            .unwrap()
            .into_iter()
            .map(|(namespace, name)| {
                assert_eq!(namespace, OPERATOR_NS);
                name
            })
            .collect();
    Installed {
        cluster,
        client,
        image,
        deployments,
        _run: run,
    }
}

impl Installed {
    async fn wait<T, F, Fut>(&self, what: &str, timeout: Duration, check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = anyhow::Result<Progress<T>>>,
    {
        wait_until(&self.cluster, what, timeout, check)
            .await
            .unwrap_or_else(|e| panic!("{e:#}"))
    }

    /// The pods of a controller's Deployment, by its component label.
    async fn controller_pods(&self, component: &str) -> Vec<Pod> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), OPERATOR_NS);
        pods.list(&ListParams::default().labels(&format!(
            "app.kubernetes.io/name=valkey-operator,app.kubernetes.io/component={component}"
        )))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
    }

    /// The holder of a controller's Lease.
    async fn leader(&self, component: &str) -> Option<String> {
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), OPERATOR_NS);
        leases
            .get_opt(component)
            .await
            .unwrap()
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
    }

    /// Every controller: two Ready pods of the pinned image, one of them holding the Lease.
    async fn controllers_run_as_deployed(&self) {
        let digest = self.image.reference.split('@').nth(1).unwrap().to_string();
        for deployment in &self.deployments {
            let component = deployment.trim_start_matches("valkey-operator-");
            let pods = self.controller_pods(component).await;
            assert_eq!(pods.len(), 2, "{deployment}: two replicas");
            for pod in &pods {
                assert!(pod_ready(pod), "{deployment}: {} not Ready", pod.name_any());
                let status = &pod
                    .status
                    .as_ref()
                    .unwrap()
                    .container_statuses
                    .as_ref()
                    .unwrap()[0];
                assert_eq!(status.image, self.image.reference);
                assert!(
                    status.image_id.ends_with(&digest),
                    "{deployment}: runs {} instead of {digest}",
                    status.image_id
                );
            }
            let names: BTreeSet<String> = pods.iter().map(|p| p.name_any()).collect();
            let leader = self
                .wait(&format!("{component}'s Lease to be held"), FORM, || async {
                    Ok(match self.leader(component).await {
                        Some(holder) if names.contains(&holder) => Ok(holder),
                        other => Err(format!("held by {other:?}, pods {names:?}")),
                    })
                })
                .await;
            eprintln!("{deployment}: pods {names:?}, leader {leader}");
        }
    }

    async fn apply_sample(&self) -> String {
        let path = repo_root().join("deploy/samples/valkeycluster.yaml");
        let mut objects = documents(&std::fs::read_to_string(path).unwrap()).unwrap();
        for o in &mut objects {
            o.metadata.namespace.get_or_insert_with(|| NS.into());
        }
        apply_all(&self.client, &objects).await.unwrap();
        objects[0].name_any()
    }
}

/// Every overlay installs from deploy/ on a fresh cluster, its controllers run as pods, and
/// the sample ValkeyCluster becomes Ready where the overlay can run it. The minimal overlay
/// (no service-controller) reports why its members have no address instead of hanging.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_overlay_installs_and_runs_the_sample() {
    let _serial = SERIAL.lock().await;
    for overlay in ["all", "cluster", "minimal"] {
        let env = install(overlay).await;
        env.controllers_run_as_deployed().await;
        let name = env.apply_sample().await;
        let apis = ClusterApis::new(&env.client, NS);
        if overlay == "minimal" {
            let message = env
                .wait("the sample to report what it lacks", FORM, || async {
                    let vc = apis.clusters.get(&name).await?;
                    let status = vc.status.unwrap_or_default();
                    Ok(status
                        .conditions
                        .iter()
                        .find(|c| c.message.contains("service-controller"))
                        .map(|c| format!("{}={}: {}", c.type_, c.status, c.message))
                        .ok_or_else(|| format!("conditions: {:?}", status.conditions)))
                })
                .await;
            eprintln!("{overlay}: {message}");
        } else {
            let status = env
                .wait("the sample to be Ready", FORM, || {
                    e2e_kit::cluster_testing::ready_status(&apis, &name)
                })
                .await;
            eprintln!("{overlay}: sample Ready, phase {:?}", status.phase);
            let access = access(&apis, &name).await.unwrap();
            env.wait("the sample's 3x1 shape", FORM, || async {
                shape(&access, 3, 1)
            })
            .await;
        }
        let mut env = env;
        env.cluster.stop().unwrap();
    }
}

/// Whether a scale-out to 4 shards is under way or done, as the first members see it.
fn slots_moving(access: &Access) -> Option<String> {
    let views = access.views().unwrap_or_default();
    let open = open_slots(&views);
    let counts = views
        .values()
        .next()
        .map(|v| slots_by_primary(v))
        .unwrap_or_default();
    let moved = counts.len() == 4 && counts.values().any(|c| *c != 4096);
    (!open.is_empty() || moved).then(|| format!("slots per primary {counts:?}, open {open:?}"))
}

/// The leading topology-controller pod is deleted in the middle of a scale-out: the standby
/// takes the Lease and finishes it with every key readable; the Deployment replaces the
/// pod; a controller process that dies is restarted in its pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn standby_takes_over_mid_scale_out() {
    let _serial = SERIAL.lock().await;
    let env = install("all").await;
    env.controllers_run_as_deployed().await;
    let apis = ClusterApis::new(&env.client, NS);
    let name = "handover";
    apis.create(&valkey_cluster(name, 3, 0, false))
        .await
        .unwrap();
    env.wait("the cluster to be Ready", FORM, || {
        e2e_kit::cluster_testing::ready_status(&apis, name)
    })
    .await;
    let access = access(&apis, name).await.unwrap();
    let data = DataSet::new("key", 50_000);
    data.load(&access).await.unwrap();

    let component = "topology-controller";
    let leader = env.leader(component).await.expect("a leader");
    apis.patch(name, json!({"spec": {"shards": 4}}))
        .await
        .unwrap();
    let seen = env
        .wait("slots to move", RESHAPE, || async {
            Ok(slots_moving(&access).ok_or_else(|| "no slot moved yet".to_string()))
        })
        .await;
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), OPERATOR_NS);
    pods.delete(&leader, &DeleteParams::default())
        .await
        .unwrap();
    eprintln!("deleted the leader {leader} on seeing {seen}");

    let standby = env
        .wait("the standby to take the Lease", FORM, || async {
            Ok(match env.leader(component).await {
                Some(holder) if holder != leader => Ok(holder),
                other => Err(format!("held by {other:?}")),
            })
        })
        .await;
    eprintln!("{standby} leads now");
    env.wait("the scale-out to finish", RESHAPE, || {
        e2e_kit::cluster_testing::ready_status(&apis, name)
    })
    .await;
    let access = e2e_kit::cluster_testing::access(&apis, name).await.unwrap();
    env.wait("4 shards, every slot served", RESHAPE, || async {
        shape(&access, 4, 0)
    })
    .await;
    env.wait("`--cluster check` to pass", RESHAPE, || async {
        Ok(access.check())
    })
    .await;
    data.verify(&access).await.unwrap();

    // The Deployment replaced the deleted pod.
    let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), OPERATOR_NS);
    env.wait("the Deployment to be whole again", FORM, || async {
        let d = deployments
            .get("valkey-operator-topology-controller")
            .await?;
        let pods = env.controller_pods(component).await;
        let ready = pods.iter().filter(|p| pod_ready(p)).count();
        Ok(
            if operator_pods::rolled_out(&d)
                && ready == 2
                && !pods.iter().any(|p| p.name_any() == leader)
            {
                Ok(())
            } else {
                Err(format!("{ready} of {} pods ready", pods.len()))
            },
        )
    })
    .await;

    // A controller process that exits is restarted in place (restartPolicy Always).
    let uid = pods.get(&standby).await.unwrap().uid().unwrap();
    let pid = container_pid(&env.cluster, component, &uid).unwrap();
    // SAFETY: kill(2) with a PID found above; no memory is involved.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    eprintln!("killed {standby}'s process {pid}");
    env.wait(
        "the killed controller to restart and be Ready",
        FORM,
        || async {
            let pod = pods.get(&standby).await?;
            let restarts = pod
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .map(|c| c[0].restart_count)
                .unwrap_or(0);
            Ok(if restarts >= 1 && pod_ready(&pod) {
                Ok(())
            } else {
                Err(format!("restarts {restarts}, ready {}", pod_ready(&pod)))
            })
        },
    )
    .await;
    let mut env = env;
    env.cluster.stop().unwrap();
}

/// `helm` against the local cluster with its admin kubeconfig, Helm's own files in the run
/// directory; panics with helm's output when it fails.
fn helm(env: &Installed, args: &[&str]) -> String {
    let home = env._run.path().join("helm");
    let output = Command::new("helm")
        .args(args)
        .arg("--kubeconfig")
        .arg(&env.cluster.admin_kubeconfig)
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .output()
        .expect("helm on PATH (hack/install-tools.sh builds it)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "helm {args:?} failed:\n{text}");
    text
}

/// Starts a local cluster and installs charts/valkey-operator with `helm install` into the
/// operator namespace, made first with deploy/base's labels (restricted pods), as the README
/// says.
async fn install_chart() -> Installed {
    let run = tempfile::tempdir().unwrap();
    let cluster = LocalCluster::start(Options::new(run.path())).await.unwrap();
    let client = cluster.client().await.unwrap();
    let image = operator_pods::push_image(&cluster).await.unwrap();
    let base = documents(&kustomize_build(&repo_root().join("deploy/base")).unwrap()).unwrap();
    let namespace: Vec<_> = base
        .into_iter()
        .filter(|o| o.types.as_ref().is_some_and(|t| t.kind == "Namespace"))
        .collect();
    apply_all(&client, &namespace).await.unwrap();
    let mut env = Installed {
        cluster,
        client,
        image,
        deployments: Vec::new(),
        _run: run,
    };
    let (_, digest) = env.image.reference.split_once('@').unwrap();
    let chart = repo_root().join("charts/valkey-operator");
    let out = helm(
        &env,
        &[
            "install",
            "valkey-operator",
            chart.to_str().unwrap(),
            "--namespace",
            OPERATOR_NS,
            "--set",
            &format!("image.tag={}", env.image.tag().unwrap()),
            "--set",
            &format!("image.digest={digest}"),
        ],
    );
    eprintln!("helm install:\n{out}");
    env.deployments = chart_deployments(&env).await;
    assert_eq!(env.deployments.len(), 4, "{:?}", env.deployments);
    for name in &env.deployments {
        operator_pods::wait_rolled_out(&env.cluster, OPERATOR_NS, name)
            .await
            .unwrap();
    }
    env.cluster
        .fail_on_restarts(OPERATOR_NS, "app.kubernetes.io/name=valkey-operator");
    env
}

/// topology-controller's leader's /metrics.
async fn topology_metrics(env: &Installed) -> String {
    let api: Api<Deployment> = Api::namespaced(env.client.clone(), OPERATOR_NS);
    let deployment = api
        .get("valkey-operator-topology-controller")
        .await
        .unwrap();
    // Only the metrics are read: no credentials needed.
    let controller =
        PodController::from_deployment(&deployment, env._run.path().join("unused")).unwrap();
    controller.metrics(&env.client).await.unwrap()
}

/// A series' value in a /metrics text.
fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// The sample (3 shards of a primary and a replica, Ready) as topology-controller's figures
/// and leader gauge tell it.
fn says_the_sample_is_whole(metrics: &str, name: &str) {
    let of = |metric: &str, extra: &str| {
        format!(r#"{metric}{{kind="ValkeyCluster",name="{name}",namespace="{NS}"{extra}}}"#)
    };
    for (series, want) in [
        (of("valkey_operator_topology_ready", ""), 1.0),
        (of("valkey_operator_topology_spec_observed", ""), 1.0),
        (of("valkey_operator_topology_shards", ""), 3.0),
        (of("valkey_operator_topology_shards_ready", ""), 3.0),
        (of("valkey_operator_topology_primaries", ""), 3.0),
        (
            of(
                "valkey_operator_topology_members_desired",
                r#",role="data""#,
            ),
            6.0,
        ),
        (
            of("valkey_operator_topology_members_ready", r#",role="data""#),
            6.0,
        ),
        (
            of("valkey_operator_topology_phase", r#",phase="Ready""#),
            1.0,
        ),
        (
            r#"valkey_operator_leader{controller="topology-controller"}"#.to_string(),
            1.0,
        ),
    ] {
        assert_eq!(sample(metrics, &series), Some(want), "{series}:\n{metrics}");
    }
}

/// The Deployments in the operator namespace.
async fn chart_deployments(env: &Installed) -> Vec<String> {
    let api: Api<Deployment> = Api::namespaced(env.client.clone(), OPERATOR_NS);
    let mut names: Vec<String> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|d| d.name_any())
        .collect();
    names.sort();
    names
}

/// Each data pod by name: its uid and each container's id and restart count. Equal before
/// and after means no data pod was replaced or restarted.
async fn data_pods(env: &Installed) -> BTreeMap<String, String> {
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), NS);
    pods.list(&ListParams::default().labels("valkey.rs/node"))
        .await
        .unwrap()
        .items
        .iter()
        .map(|p| {
            let containers: Vec<String> = p
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.clone())
                .unwrap_or_default()
                .iter()
                .map(|c| {
                    format!(
                        "{}={}/{}",
                        c.name,
                        c.container_id.clone().unwrap_or_default(),
                        c.restart_count
                    )
                })
                .collect();
            (p.name_any(), format!("{} {containers:?}", p.uid().unwrap()))
        })
        .collect()
}

/// The chart on a fresh cluster: `helm install` runs all four controllers as the `all`
/// overlay does and they form the sample; `helm upgrade` with other values rolls every
/// controller and no data pod; `helm uninstall` removes the controllers and keeps the CRDs,
/// so the ValkeyCluster and its pods stay, serving every key, with no operator.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_chart_installs_upgrades_and_uninstalls_without_touching_valkey() {
    let _serial = SERIAL.lock().await;
    let env = install_chart().await;
    env.controllers_run_as_deployed().await;
    let name = env.apply_sample().await;
    let apis = ClusterApis::new(&env.client, NS);
    env.wait("the sample to be Ready", FORM, || {
        e2e_kit::cluster_testing::ready_status(&apis, &name)
    })
    .await;
    let access = access(&apis, &name).await.unwrap();
    env.wait("the sample's 3x1 shape", FORM, || async {
        shape(&access, 3, 1)
    })
    .await;
    let data = DataSet::new("chart", 5_000);
    data.load(&access).await.unwrap();
    let before = data_pods(&env).await;
    assert_eq!(before.len(), 6, "{before:?}");
    let metrics = topology_metrics(&env).await;
    says_the_sample_is_whole(&metrics, &name);
    let formed = |reason: &str| {
        format!(
            r#"valkey_operator_events_total{{controller="topology-controller",kind="ValkeyCluster",name="{name}",namespace="{NS}",reason="{reason}"}}"#
        )
    };
    for reason in ["MembersMet", "SlotsAssigned", "ReplicaAttached"] {
        assert!(
            sample(&metrics, &formed(reason)).is_some_and(|n| n >= 1.0),
            "{reason} counted:\n{metrics}"
        );
    }

    // An upgrade that changes every controller's pod template.
    let templates = |env: &Installed| {
        let api: Api<Deployment> = Api::namespaced(env.client.clone(), OPERATOR_NS);
        async move {
            let mut out = BTreeMap::new();
            for d in api.list(&ListParams::default()).await.unwrap().items {
                let template = serde_json::to_string(&d.spec.unwrap().template).unwrap();
                out.insert(d.metadata.name.unwrap(), template);
            }
            out
        }
    };
    let old = templates(&env).await;
    let chart = repo_root().join("charts/valkey-operator");
    let mut args = vec![
        "upgrade".to_string(),
        "valkey-operator".into(),
        chart.to_str().unwrap().into(),
        "--namespace".into(),
        OPERATOR_NS.into(),
        "--reuse-values".into(),
    ];
    for controller in [
        "nodeController",
        "serviceController",
        "topologyController",
        "pvcResizer",
    ] {
        args.push("--set".into());
        args.push(format!("{controller}.logLevel=debug"));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    eprintln!("helm upgrade:\n{}", helm(&env, &args));
    let new = templates(&env).await;
    for (deployment, template) in &old {
        assert_ne!(
            Some(template),
            new.get(deployment),
            "{deployment} not changed"
        );
        operator_pods::wait_rolled_out(&env.cluster, OPERATOR_NS, deployment)
            .await
            .unwrap();
    }
    env.controllers_run_as_deployed().await;
    let status = env
        .wait("the sample to be Ready after the upgrade", FORM, || {
            e2e_kit::cluster_testing::ready_status(&apis, &name)
        })
        .await;
    eprintln!("after the upgrade: phase {:?}", status.phase);
    // The new leader reads the same from its cache, with no history of its own.
    says_the_sample_is_whole(&topology_metrics(&env).await, &name);
    assert_eq!(
        data_pods(&env).await,
        before,
        "a data pod changed in the upgrade"
    );
    data.verify(&access).await.unwrap();

    // Uninstall: the controllers go, the CRDs and everything under them stay.
    eprintln!(
        "helm uninstall:\n{}",
        helm(
            &env,
            &["uninstall", "valkey-operator", "--namespace", OPERATOR_NS]
        )
    );
    env.wait("the controllers to be gone", FORM, || async {
        let left = chart_deployments(&env).await;
        let pods = env.controller_pods("topology-controller").await;
        Ok(if left.is_empty() && pods.is_empty() {
            Ok(())
        } else {
            Err(format!("Deployments {left:?}, {} pods", pods.len()))
        })
    })
    .await;
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(env.client.clone());
    for crd in [
        "valkeynodes.valkey.rs",
        "valkeyclusters.valkey.rs",
        "valkeyreplications.valkey.rs",
    ] {
        assert!(crds.get_opt(crd).await.unwrap().is_some(), "{crd} deleted");
    }
    assert!(apis.clusters.get_opt(&name).await.unwrap().is_some());
    assert_eq!(
        data_pods(&env).await,
        before,
        "a data pod changed in the uninstall"
    );
    data.verify(&access).await.unwrap();
    let mut env = env;
    env.cluster.stop().unwrap();
}
