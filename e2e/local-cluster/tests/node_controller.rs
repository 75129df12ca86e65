//! node-controller end to end, with the node agent running real valkey-server pods: a
//! ValkeyNode becomes a ConfigMap, a PVC and a singleton StatefulSet or Deployment whose pod
//! announces the node's Service ClusterIP; the pod comes back after a delete with its data
//! (Kubernetes restarts it, not the operator); a claim that cannot bind is reported on the
//! node while a healthy node stays healthy; a container that cannot start for a missing
//! Secret is reported, warned about and retried with a growing delay; an exporter sidecar
//! (the real redis_exporter) scrapes as the read-only monitoring user; a node whose image
//! lacks Valkey is reported as such (ImageIncomplete), not as a bare crash loop; every knob of
//! `template.pod` reaches the pod, and a change to one rolls it with the data kept.

use crd_types::ValkeyNode;
use crd_types::conditions::{self, types};
use crd_types::names::labels;
use crd_types::node::Mode;
use crd_types::template::WorkloadType;
use k8s_openapi::api::apps::v1::StatefulSet;
use std::collections::BTreeMap;

use std::time::{Duration, Instant};

use crd_types::template::{
    Auth, DEFAULT_EXPORTER_IMAGE, MONITORING_PASSWORD_PREFIX, SecretKeyRef, derived_password,
};
use e2e_kit::testing::{
    cluster_with_operator, controller, events_about, ready_node, valkey_cli, valkey_cli_as,
    valkey_node,
};
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Secret, Service};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use local_cluster::controller_pods::PodController;
use local_cluster::{LocalCluster, operator};

const NS: &str = "default";

/// The failure label of a reconcile stopped by a container that waits for the user
/// (node-controller's `Error::ContainerBlocked`).
const CONTAINER_CONFIG: &str = "container_config";

struct Apis {
    nodes: Api<ValkeyNode>,
    pods: Api<Pod>,
    services: Api<Service>,
    events: Api<Event>,
}

impl Apis {
    fn new(client: &Client) -> Self {
        Self {
            nodes: Api::namespaced(client.clone(), NS),
            pods: Api::namespaced(client.clone(), NS),
            services: Api::namespaced(client.clone(), NS),
            events: Api::namespaced(client.clone(), NS),
        }
    }
}

#[tokio::test]
async fn nodes_run_real_valkey_pods_that_survive_deletion() {
    let run = tempfile::tempdir().unwrap();
    let (mut cluster, controllers) = cluster_with_operator(run.path()).await.unwrap();
    let client = cluster.client().await.unwrap();
    let apis = Apis::new(&client);

    statefulset_node(&cluster, &client, &apis).await;
    deployment_node(&cluster, &apis).await;
    unbound_claim(&cluster, &client, &apis).await;
    owned_directive_in_another_case(&cluster, &client, &apis).await;
    authenticated_node(&cluster, &client, &apis).await;
    exporter_node(&cluster, &apis).await;
    incomplete_image(&cluster, &apis).await;

    // --- The controller never failed a reconcile on the way, but for the node that waited
    // for its Secrets (f), which is reported as a failure on purpose.
    let metrics = node_controller(&controllers)
        .metrics(&client)
        .await
        .unwrap();
    let failures: Vec<&str> = metrics
        .lines()
        .filter(|l| {
            l.starts_with(
                r#"valkey_operator_reconcile_failures_total{controller="node-controller""#,
            )
        })
        .filter(|l| !l.contains(&format!(r#"error="{CONTAINER_CONFIG}""#)))
        .collect();
    assert!(failures.is_empty(), "{failures:?}");
    cluster.check_restarts("the end of the test").await.unwrap();
    cluster.stop().unwrap();
}

/// `pod` (docs/pod-template.md): a ValkeyNode with every knob set comes up Ready and its pod,
/// read from the API server, carries them all; a new pod label rolls the pod (a new uid) and
/// the key written before is read back from its volume after.
///
/// The node agent runs an init container with `restartPolicy: Always` like any init
/// container (to completion, it says so in its log): the sidecar here is a `sleep` that ends,
/// so the pod goes on to Valkey, and its status shows it ran. A kubelet keeps it running.
#[tokio::test]
async fn pod_template_knobs_reach_the_pod_and_a_change_rolls_it() {
    use k8s_openapi::api::core::v1::ServiceAccount;

    let run = tempfile::tempdir().unwrap();
    let (mut cluster, _controllers) = cluster_with_operator(run.path()).await.unwrap();
    let client = cluster.client().await.unwrap();
    let apis = Apis::new(&client);
    let name = "platform";

    // The ServiceAccount the pod names (admission refuses a pod naming a missing one) and
    // the pull Secret (the local registry needs none; the pod only has to name it).
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), NS);
    accounts
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({
                "metadata": {"name": "valkey-data"},
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({
                "metadata": {"name": "registry-pull"},
                "type": "kubernetes.io/dockerconfigjson",
                "stringData": {".dockerconfigjson": "{\"auths\":{}}"},
            }))
            .unwrap(),
        )
        .await
        .unwrap();

    let mut node = valkey_node(name, WorkloadType::StatefulSet, true, None);
    let image = node.spec.template.image.clone();
    node.spec.template.pod = Some(
        serde_json::from_value(serde_json::json!({
            "labels": {"team": "payments"},
            "annotations": {"backup.example.com/hook": "bgsave"},
            "imagePullSecrets": [{"name": "registry-pull"}],
            "serviceAccountName": "valkey-data",
            "terminationGracePeriodSeconds": 120,
            "env": [{"name": "TZ", "value": "UTC"}],
            "volumes": [{"name": "scratch", "emptyDir": {}}],
            "volumeMounts": [{"name": "scratch", "mountPath": "/mnt/scratch"}],
            "sidecars": [{"name": "idle", "image": image, "command": ["sleep", "2"]}],
        }))
        .unwrap(),
    );
    let started = Instant::now();
    apis.nodes
        .create(&PostParams::default(), &node)
        .await
        .unwrap();
    let (workload, cluster_ip) = cluster
        .wait_for_value("the node with every pod knob to be ready", || {
            ready_node(&apis.nodes, &apis.pods, name, None)
        })
        .await
        .unwrap();
    eprintln!("ready after {:?}", started.elapsed());

    let pod_name = workload.pod_name.unwrap();
    let pod = apis.pods.get(&pod_name).await.unwrap();
    let labels = pod.labels();
    assert_eq!(labels["team"], "payments");
    assert_eq!(labels[labels::NODE], name, "ours are there too");
    assert_eq!(pod.annotations()["backup.example.com/hook"], "bgsave");
    let spec = pod.spec.clone().unwrap();
    let pull: Vec<_> = spec
        .image_pull_secrets
        .iter()
        .flatten()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(pull, ["registry-pull"]);
    assert_eq!(spec.service_account_name.as_deref(), Some("valkey-data"));
    assert_eq!(spec.automount_service_account_token, Some(false));
    assert_eq!(spec.termination_grace_period_seconds, Some(120));
    let valkey = spec.containers.iter().find(|c| c.name == "valkey").unwrap();
    assert!(
        valkey
            .env
            .iter()
            .flatten()
            .any(|e| e.name == "TZ" && e.value.as_deref() == Some("UTC"))
    );
    assert!(
        valkey
            .volume_mounts
            .iter()
            .flatten()
            .any(|m| m.name == "scratch" && m.mount_path == "/mnt/scratch")
    );
    assert!(
        spec.volumes
            .iter()
            .flatten()
            .any(|v| v.name == "scratch" && v.empty_dir.is_some())
    );
    // No token volume: automount is off.
    assert!(
        !spec
            .volumes
            .iter()
            .flatten()
            .any(|v| v.name.starts_with("kube-api-access"))
    );
    let idle = spec
        .init_containers
        .iter()
        .flatten()
        .find(|c| c.name == "idle")
        .unwrap();
    assert_eq!(idle.restart_policy.as_deref(), Some("Always"));
    assert_eq!(idle.image.as_deref(), Some(image.as_str()));
    let idle_status = pod
        .status
        .as_ref()
        .and_then(|s| s.init_container_statuses.as_ref())
        .and_then(|s| s.iter().find(|c| c.name == "idle"))
        .cloned()
        .unwrap();
    let state = idle_status.state.unwrap_or_default();
    assert!(
        state.running.is_some() || state.terminated.as_ref().is_some_and(|t| t.exit_code == 0),
        "{state:?}"
    );

    // A new pod label rolls the pod; the key on its volume stays.
    assert_eq!(valkey_cli(&cluster_ip, &["SET", "kept", "yes"]), "OK");
    let old_uid = pod.uid().unwrap();
    let old_revision = workload.revision.clone();
    apis.nodes
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"pod": {"labels": {"team": "search"}}}})),
        )
        .await
        .unwrap();
    let rolled = Instant::now();
    let (after, ip_after) = cluster
        .wait_for_value("the pod to roll onto the new label", || {
            ready_node(&apis.nodes, &apis.pods, name, Some(&old_uid))
        })
        .await
        .unwrap();
    eprintln!("rolled after {:?}", rolled.elapsed());
    assert_ne!(after.revision, old_revision);
    let pod = apis
        .pods
        .get(after.pod_name.as_deref().unwrap())
        .await
        .unwrap();
    assert_ne!(pod.uid().unwrap(), old_uid);
    assert_eq!(pod.labels()["team"], "search");
    assert_eq!(valkey_cli(&ip_after, &["GET", "kept"]), "yes");

    cluster.check_restarts("the end of the test").await.unwrap();
    cluster.stop().unwrap();
}

fn node_controller(controllers: &[PodController]) -> &PodController {
    controller(controllers, "node-controller")
}

/// The value of the metric line that starts with `series` (name and labels), 0 when absent.
fn sample(metrics: &str, series: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// A ValkeyNode naming a Secret that does not exist: its valkey container cannot be created
/// (CreateContainerConfigError), and only creating the Secret helps. The node says so,
/// node-controller fails the reconcile with a Warning Event naming the Secret and looks
/// again after a growing delay, and the node starts once the Secret exists without waiting
/// out that delay.
#[tokio::test]
async fn a_missing_secret_warns_and_backs_off() {
    let run = tempfile::tempdir().unwrap();
    let (mut cluster, controllers) = cluster_with_operator(run.path()).await.unwrap();
    let client = cluster.client().await.unwrap();
    let apis = Apis::new(&client);
    // One pod's counters across the window: a change of leader would fail the test anyway
    // (a controller container restarted), but not with a counter going backwards.
    let leader = node_controller(&controllers)
        .leader_endpoint(&client)
        .await
        .unwrap();
    let (name, secret) = ("orphan", "orphan-auth");
    let mut node = valkey_node(name, WorkloadType::StatefulSet, false, None);
    node.spec.auth = Some(Auth {
        password_secret_ref: Some(SecretKeyRef {
            name: secret.into(),
            key: "password".into(),
        }),
        operator_secret_ref: None,
        ..Default::default()
    });
    apis.nodes
        .create(&PostParams::default(), &node)
        .await
        .unwrap();

    let event = cluster
        .wait_for_value("a ReconcileFailed Event about the container", || async {
            Ok(
                events_about(&apis.events, "ValkeyNode", name, "ReconcileFailed")
                    .await?
                    .into_iter()
                    .find(|e| {
                        e.note
                            .as_deref()
                            .is_some_and(|n| n.contains("CreateContainerConfigError"))
                    }),
            )
        })
        .await
        .unwrap();
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(
        event.reporting_controller.as_deref(),
        Some("node-controller")
    );
    let note = event.note.unwrap_or_default();
    assert!(note.contains(&format!("secret \"{secret}\"")), "{note}");
    // The status was written before the reconcile failed.
    let status = apis.nodes.get_status(name).await.unwrap().status.unwrap();
    let ready = conditions::find(&status.conditions, types::WORKLOAD_READY).unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "ContainerWaiting"),
        "{ready:?}"
    );
    assert!(ready.message.contains(secret), "{}", ready.message);

    // A minute of retries. The node agent, like the kubelet, writes the pod status only when
    // it changes: it retries the container every 5 s with the same message, and a write
    // would wake the reconcile whatever its delay. The pod's resourceVersion shows it did not.
    let failed = format!(
        r#"valkey_operator_reconcile_failures_total{{controller="node-controller",error="{CONTAINER_CONFIG}"}}"#
    );
    let runs = r#"valkey_operator_reconcile_runs_total{controller="node-controller"}"#;
    let pod = format!("{name}-0");
    let pod_version = apis.pods.get(&pod).await.unwrap().resource_version();
    let before = leader.metrics().await.unwrap();
    let window = Instant::now();
    tokio::time::sleep(Duration::from_secs(60)).await;
    let after = leader.metrics().await.unwrap();
    let elapsed = window.elapsed();
    let failures = sample(&after, &failed) - sample(&before, &failed);
    let reconciles = sample(&after, runs) - sample(&before, runs);
    println!(
        "in {elapsed:?}: {failures} {CONTAINER_CONFIG} failures ({} before, {} after), {reconciles} reconciles; a flat 10 s retry makes 6",
        sample(&before, &failed),
        sample(&after, &failed)
    );
    assert_eq!(
        apis.pods.get(&pod).await.unwrap().resource_version(),
        pod_version,
        "the pod status was rewritten during the window"
    );
    assert!(failures >= 1, "the node is still looked at: {failures}");
    assert!(
        failures < 6,
        "no growing delay: {failures} failures in a minute"
    );

    // The Secret appears: the container starts, and that pod change wakes the reconcile.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    let s = Secret {
        metadata: ObjectMeta {
            name: Some(secret.into()),
            ..Default::default()
        },
        string_data: Some(BTreeMap::from([(
            "password".to_string(),
            "s3cret".to_string(),
        )])),
        ..Default::default()
    };
    secrets.create(&PostParams::default(), &s).await.unwrap();
    let created = Instant::now();
    cluster
        .wait_for_value("the node to be ready once its Secret exists", || {
            ready_node(&apis.nodes, &apis.pods, name, None)
        })
        .await
        .unwrap();
    println!("ready {:?} after the Secret was created", created.elapsed());
    cluster.check_restarts("the end of the test").await.unwrap();
    cluster.stop().unwrap();
}

/// (a) a StatefulSet node with a 1Gi claim serves on its ClusterIP with its config;
/// (b) its pod, deleted, comes back with the data and the same address.
async fn statefulset_node(cluster: &LocalCluster, client: &Client, apis: &Apis) {
    let name = "cache";
    let created = apis
        .nodes
        .create(
            &PostParams::default(),
            &valkey_node(name, WorkloadType::StatefulSet, true, None),
        )
        .await
        .unwrap();
    let (workload, cluster_ip) = cluster
        .wait_for_value("the StatefulSet node to be ready", || {
            ready_node(&apis.nodes, &apis.pods, name, None)
        })
        .await
        .unwrap();
    assert_eq!(workload.kind, Some(WorkloadType::StatefulSet));
    assert_eq!(workload.name.as_deref(), Some(name));
    assert_eq!(workload.pod_name.as_deref(), Some("cache-0"));
    assert!(workload.revision.is_some());
    assert_eq!(workload.revision, workload.desired_revision);
    assert_eq!(workload.observed_generation, created.metadata.generation);
    let status = apis.nodes.get_status(name).await.unwrap().status.unwrap();
    for (type_, want) in [
        (types::CONFIG_VALID, "True"),
        (types::ROLL_PENDING, "False"),
    ] {
        let c = conditions::find(&status.conditions, type_).unwrap();
        assert_eq!(c.status, want, "{c:?}");
    }

    // Served through the Service, with the spec's config and announcing the ClusterIP.
    assert_eq!(valkey_cli(&cluster_ip, &["PING"]), "PONG");
    assert_eq!(
        valkey_cli(&cluster_ip, &["CONFIG", "GET", "maxmemory"]),
        "maxmemory\n104857600"
    );
    assert_eq!(
        valkey_cli(&cluster_ip, &["CONFIG", "GET", "replica-announce-ip"]),
        format!("replica-announce-ip\n{cluster_ip}")
    );
    assert_eq!(valkey_cli(&cluster_ip, &["SET", "greeting", "hello"]), "OK");

    // What it is made of: owned ConfigMap, StatefulSet and (reclaimPolicy Delete) PVC.
    let node_uid = created.uid().unwrap();
    let owned_by_node =
        |owners: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference]| {
            owners.len() == 1 && owners[0].uid == node_uid && owners[0].controller == Some(true)
        };
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let cm = config_maps.get("cache-config").await.unwrap();
    assert!(owned_by_node(cm.owner_references()), "{cm:?}");
    let sts: Api<StatefulSet> = Api::namespaced(client.clone(), NS);
    let sts = sts.get(name).await.unwrap();
    assert!(owned_by_node(sts.owner_references()));
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    let claim = claims.get("cache-data").await.unwrap();
    assert!(owned_by_node(claim.owner_references()), "{claim:?}");
    assert_eq!(
        claim.spec.as_ref().and_then(|s| s.access_modes.clone()),
        Some(vec!["ReadWriteOncePod".to_string()])
    );
    assert_eq!(claim.status.and_then(|s| s.phase).as_deref(), Some("Bound"));
    let managers: Vec<String> = claim
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert!(
        managers.iter().any(|m| m == "valkey-operator/node"),
        "{managers:?}"
    );
    cluster
        .wait_for("a WorkloadCreated Event", || async {
            Ok(
                !events_about(&apis.events, "ValkeyNode", name, "WorkloadCreated")
                    .await?
                    .is_empty(),
            )
        })
        .await
        .unwrap();

    // --- (b) Delete the pod: the StatefulSet (Kubernetes) brings it back.
    let old_pod = apis.pods.get("cache-0").await.unwrap();
    let old_uid = old_pod.uid().unwrap();
    apis.pods
        .delete("cache-0", &DeleteParams::default())
        .await
        .unwrap();
    let (after, ip_after) = cluster
        .wait_for_value("cache-0 to come back ready", || {
            ready_node(&apis.nodes, &apis.pods, name, Some(&old_uid))
        })
        .await
        .unwrap();
    assert_eq!(after.pod_name.as_deref(), Some("cache-0"));
    assert_eq!(ip_after, cluster_ip, "the announce address did not move");
    let live_ip = apis
        .services
        .get(name)
        .await
        .unwrap()
        .spec
        .unwrap()
        .cluster_ip
        .unwrap();
    assert_eq!(live_ip, cluster_ip, "the Service keeps its ClusterIP");
    assert_eq!(
        valkey_cli(&cluster_ip, &["GET", "greeting"]),
        "hello",
        "the key survived the pod"
    );
}

/// (c) the same with a Deployment: the replacement pod has another name, and it may start
/// before the deleted one has stopped.
async fn deployment_node(cluster: &LocalCluster, apis: &Apis) {
    let name = "cache-deploy";
    apis.nodes
        .create(
            &PostParams::default(),
            &valkey_node(name, WorkloadType::Deployment, true, None),
        )
        .await
        .unwrap();
    let (workload, cluster_ip) = cluster
        .wait_for_value("the Deployment node to be ready", || {
            ready_node(&apis.nodes, &apis.pods, name, None)
        })
        .await
        .unwrap();
    assert_eq!(workload.kind, Some(WorkloadType::Deployment));
    assert_eq!(valkey_cli(&cluster_ip, &["PING"]), "PONG");
    assert_eq!(
        valkey_cli(&cluster_ip, &["CONFIG", "GET", "maxmemory"]),
        "maxmemory\n104857600"
    );
    assert_eq!(
        valkey_cli(&cluster_ip, &["SET", "greeting", "deployed"]),
        "OK"
    );
    // No SAVE first: what a client was told is written must survive the delete.
    for i in 0..200 {
        assert_eq!(
            valkey_cli(&cluster_ip, &["SET", &format!("k{i}"), "v"]),
            "OK"
        );
    }

    let pod_name = workload.pod_name.unwrap();
    let old_uid = apis.pods.get(&pod_name).await.unwrap().uid().unwrap();
    apis.pods
        .delete(&pod_name, &DeleteParams::default())
        .await
        .unwrap();
    // The ReplicaSet creates the replacement at once (Recreate only orders rollouts); the
    // ReadWriteOncePod claim keeps it unscheduled until the old pod is gone, so two servers
    // never share /data.
    let selector = ListParams::default().labels(&format!("{}={name}", labels::NODE));
    loop {
        let pods = apis.pods.list(&selector).await.unwrap().items;
        if !pods
            .iter()
            .any(|p| p.uid().as_deref() == Some(old_uid.as_str()))
        {
            break;
        }
        for replacement in pods.iter().filter(|p| p.uid().as_deref() != Some(&old_uid)) {
            let scheduled = replacement.spec.as_ref().and_then(|s| s.node_name.as_ref());
            assert!(
                scheduled.is_none(),
                "a replacement was scheduled while the old pod still held the volume: {replacement:?}"
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let (after, ip_after) = cluster
        .wait_for_value("the Deployment's pod to come back ready", || {
            ready_node(&apis.nodes, &apis.pods, name, Some(&old_uid))
        })
        .await
        .unwrap();
    assert_ne!(after.pod_name.as_deref(), Some(pod_name.as_str()));
    assert_eq!(ip_after, cluster_ip);
    assert_eq!(valkey_cli(&cluster_ip, &["GET", "greeting"]), "deployed");
    assert_eq!(valkey_cli(&cluster_ip, &["DBSIZE"]), "201");
}

/// (d) a claim on a StorageClass that does not exist stays Pending, and the node says why
/// (WorkloadReady False/ClaimNotBound and a Warning Event); the healthy node stays ready.
async fn unbound_claim(cluster: &LocalCluster, client: &Client, apis: &Apis) {
    let name = "nowhere";
    apis.nodes
        .create(
            &PostParams::default(),
            &valkey_node(
                name,
                WorkloadType::StatefulSet,
                true,
                Some("does-not-exist"),
            ),
        )
        .await
        .unwrap();
    let condition = condition_false(cluster, apis, name, types::WORKLOAD_READY, "ClaimNotBound")
        .await
        .unwrap();
    assert!(
        condition
            .message
            .contains("StorageClass \"does-not-exist\" does not exist"),
        "{}",
        condition.message
    );
    let event = first_event(cluster, apis, name, "ClaimNotBound").await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(
        event.reporting_controller.as_deref(),
        Some("node-controller")
    );
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    let claim = claims.get("nowhere-data").await.unwrap();
    assert_eq!(
        claim.status.and_then(|s| s.phase).as_deref(),
        Some("Pending")
    );

    // The healthy nodes are untouched.
    for healthy in ["cache", "cache-deploy"] {
        let status = apis
            .nodes
            .get_status(healthy)
            .await
            .unwrap()
            .status
            .unwrap();
        assert!(
            conditions::is_true(&status.conditions, types::WORKLOAD_READY),
            "{healthy}: {:?}",
            status.conditions
        );
    }
    let cluster_ip = apis
        .services
        .get("cache")
        .await
        .unwrap()
        .spec
        .unwrap()
        .cluster_ip
        .unwrap();
    assert_eq!(valkey_cli(&cluster_ip, &["GET", "greeting"]), "hello");
}

/// (i) A node on an image without Valkey (the exporter's): WorkloadReady False with
/// ImageIncomplete naming the program its start could not run and the image, a Warning
/// Event saying the same; the healthy nodes are untouched. Deleted after.
async fn incomplete_image(cluster: &LocalCluster, apis: &Apis) {
    let name = "no-valkey";
    let mut node = valkey_node(name, WorkloadType::StatefulSet, false, None);
    node.spec.template.image = DEFAULT_EXPORTER_IMAGE.into();
    apis.nodes
        .create(&PostParams::default(), &node)
        .await
        .unwrap();
    let condition = condition_false(
        cluster,
        apis,
        name,
        types::WORKLOAD_READY,
        "ImageIncomplete",
    )
    .await;
    let condition = match condition {
        Ok(c) => c,
        Err(e) => {
            let node = apis
                .nodes
                .get_status(name)
                .await
                .ok()
                .and_then(|n| n.status);
            let pod = apis.pods.get_status(&format!("{name}-0")).await.ok();
            let containers = pod.and_then(|p| p.status).map(|s| s.container_statuses);
            panic!("{e:#}\nnode status: {node:?}\ncontainers: {containers:?}");
        }
    };
    // Without auth the command is the server itself; with it, `sh` first.
    assert!(
        ["`valkey-server`", "`sh`"]
            .iter()
            .any(|p| condition.message.contains(&format!("has no {p}"))),
        "{}",
        condition.message
    );
    assert!(
        condition.message.contains(DEFAULT_EXPORTER_IMAGE),
        "{}",
        condition.message
    );
    let event = first_event(cluster, apis, name, "ImageIncomplete").await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(event.note.as_deref(), Some(condition.message.as_str()));
    let status = apis
        .nodes
        .get_status("cache")
        .await
        .unwrap()
        .status
        .unwrap();
    assert!(conditions::is_true(
        &status.conditions,
        types::WORKLOAD_READY
    ));
    apis.nodes
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
}

/// Node `name`'s condition `type_` once it is False with `reason`.
async fn condition_false(
    cluster: &LocalCluster,
    apis: &Apis,
    name: &str,
    type_: &str,
    reason: &str,
) -> anyhow::Result<Condition> {
    let what = format!("{type_} False/{reason}");
    cluster
        .wait_for_value(&what, || async {
            let status = apis
                .nodes
                .get_status(name)
                .await?
                .status
                .unwrap_or_default();
            Ok(conditions::find(&status.conditions, type_)
                .filter(|c| c.status == "False" && c.reason == reason)
                .cloned())
        })
        .await
}

/// The first Event `reason` about node `name`, once there is one.
async fn first_event(cluster: &LocalCluster, apis: &Apis, name: &str, reason: &str) -> Event {
    let what = format!("a {reason} Event");
    cluster
        .wait_for_value(&what, || async {
            Ok(events_about(&apis.events, "ValkeyNode", name, reason)
                .await?
                .into_iter()
                .next())
        })
        .await
        .unwrap()
}

/// (e) `Port` slips past the admission rule (CEL map keys are matched exactly), so the
/// node-controller refuses it: ConfigValid False/OwnedDirective, a Warning Event, no
/// workload; the healthy node keeps serving.
async fn owned_directive_in_another_case(cluster: &LocalCluster, client: &Client, apis: &Apis) {
    let name = "shouty";
    let mut node = valkey_node(name, WorkloadType::StatefulSet, false, None);
    node.spec
        .template
        .config
        .0
        .insert("Port".to_string(), "7000".to_string());
    apis.nodes
        .create(&PostParams::default(), &node)
        .await
        .unwrap();
    let condition = condition_false(cluster, apis, name, types::CONFIG_VALID, "OwnedDirective")
        .await
        .unwrap();
    assert!(condition.message.contains("Port"), "{}", condition.message);
    let event = first_event(cluster, apis, name, "ConfigInvalid").await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), NS);
    assert!(statefulsets.get_opt(name).await.unwrap().is_none());

    let status = apis
        .nodes
        .get_status("cache")
        .await
        .unwrap()
        .status
        .unwrap();
    assert!(conditions::is_true(
        &status.conditions,
        types::WORKLOAD_READY
    ));
}

/// (f) passwords from Secrets: the default user needs its password, the `operator` ACL user
/// logs in with its own, and neither appears in the ConfigMap or the pod spec. The node
/// is created before its Secrets exist: it waits (reported on the node) and starts once
/// they are there.
/// The `locked` node's passwords, operator's and default's: quotes, backslashes and spaces,
/// which Valkey 8.1 mangles on its command line and Sentinel 8.0/8.1 in their config
/// rewrites (see node-controller's auth_file_script and sentinel_auth_script).
const LOCKED_OPERATOR_PASSWORD: &str = "--op-pass'\"\\x41";
const LOCKED_PASSWORD: &str = "s3cret \\with spaces";

/// The `locked` node's Secrets (created by [`authenticated_node`]).
fn locked_auth() -> Auth {
    Auth {
        password_secret_ref: Some(SecretKeyRef {
            name: "locked-auth".into(),
            key: "password".into(),
        }),
        operator_secret_ref: Some(SecretKeyRef {
            name: "locked-operator".into(),
            key: "pw".into(),
        }),
        ..Default::default()
    }
}

async fn authenticated_node(cluster: &LocalCluster, client: &Client, apis: &Apis) {
    let name = "locked";
    // A backslash and spaces, which Valkey 8.1 would mangle on its command line too.
    let (password, operator_password) = (LOCKED_PASSWORD, LOCKED_OPERATOR_PASSWORD);
    let mut node = valkey_node(name, WorkloadType::StatefulSet, false, None);
    node.spec.auth = Some(locked_auth());
    apis.nodes
        .create(&PostParams::default(), &node)
        .await
        .unwrap();
    let waiting = cluster
        .wait_for_value("the node to report its missing Secret", || async {
            let status = apis
                .nodes
                .get_status(name)
                .await?
                .status
                .unwrap_or_default();
            Ok(conditions::find(&status.conditions, types::WORKLOAD_READY)
                .filter(|c| c.message.contains("CreateContainerConfigError"))
                .cloned())
        })
        .await
        .unwrap();
    assert_eq!(waiting.status, "False", "{waiting:?}");

    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    for (secret, key, value) in [
        ("locked-auth", "password", password),
        ("locked-operator", "pw", operator_password),
    ] {
        let s = Secret {
            metadata: ObjectMeta {
                name: Some(secret.into()),
                ..Default::default()
            },
            string_data: Some(BTreeMap::from([(key.to_string(), value.to_string())])),
            ..Default::default()
        };
        secrets.create(&PostParams::default(), &s).await.unwrap();
    }
    let (_, ip) = cluster
        .wait_for_value("the authenticated node to be ready", || {
            ready_node(&apis.nodes, &apis.pods, name, None)
        })
        .await
        .unwrap();

    assert!(
        valkey_cli(&ip, &["GET", "k"]).starts_with("NOAUTH"),
        "no password, no access"
    );
    let wrong = valkey_cli_as(&ip, Some((None, "wrong")), &["PING"]);
    assert!(
        wrong.contains("NOAUTH") || wrong.contains("WRONGPASS"),
        "{wrong}"
    );
    assert_eq!(
        valkey_cli_as(&ip, Some((None, password)), &["PING"]),
        "PONG"
    );
    let operator = Some((Some("operator"), operator_password));
    assert_eq!(valkey_cli_as(&ip, operator, &["ACL", "WHOAMI"]), "operator");
    assert_eq!(
        valkey_cli_as(&ip, operator, &["CONFIG", "GET", "masteruser"]),
        "masteruser\nreplication"
    );

    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let cm = serde_json::to_string(&config_maps.get("locked-config").await.unwrap()).unwrap();
    let sts: Api<StatefulSet> = Api::namespaced(client.clone(), NS);
    let sts = serde_json::to_string(&sts.get(name).await.unwrap()).unwrap();
    for text in [cm, sts] {
        assert!(
            !text.contains("s3cret") && !text.contains("op-pass"),
            "{text}"
        );
    }

    // An empty password would mean none at all to Valkey: the server refuses to start.
    let blank = "blank";
    let s = Secret {
        metadata: ObjectMeta {
            name: Some("blank-auth".into()),
            ..Default::default()
        },
        string_data: Some(BTreeMap::from([("password".to_string(), String::new())])),
        ..Default::default()
    };
    secrets.create(&PostParams::default(), &s).await.unwrap();
    let mut node = valkey_node(blank, WorkloadType::StatefulSet, false, None);
    node.spec.auth = Some(Auth {
        password_secret_ref: Some(SecretKeyRef {
            name: "blank-auth".into(),
            key: "password".into(),
        }),
        operator_secret_ref: None,
        ..Default::default()
    });
    apis.nodes
        .create(&PostParams::default(), &node)
        .await
        .unwrap();
    let refused = cluster
        .wait_for_value("the blank-password node to crash-loop", || async {
            let status = apis
                .nodes
                .get_status(blank)
                .await?
                .status
                .unwrap_or_default();
            let restarts = status.workload.as_ref().map_or(0, |w| w.restarts);
            Ok(conditions::find(&status.conditions, types::WORKLOAD_READY)
                .filter(|c| c.status == "False" && restarts >= 1)
                .cloned())
        })
        .await
        .unwrap();
    assert_eq!(refused.reason, "ContainerWaiting", "{refused:?}");
    let blank_ip = apis
        .services
        .get(blank)
        .await
        .unwrap()
        .spec
        .unwrap()
        .cluster_ip
        .unwrap();
    assert_ne!(valkey_cli(&blank_ip, &["PING"]), "PONG", "nothing serves");
}

/// A node with passwords and the real redis_exporter (Debian's build, v1.86.0 today, see
/// e2e/images): the exporter scrapes as the `monitoring` user with the password the
/// `exporter-auth` init container derived (its own environment holds none); that user reads
/// INFO and nothing else; `/scrape?target=` is gone. Uses the `locked` node's Secrets.
async fn exporter_node(cluster: &LocalCluster, apis: &Apis) {
    let name = "watched";
    let operator_password = LOCKED_OPERATOR_PASSWORD;
    let mut node = valkey_node(name, WorkloadType::StatefulSet, false, None);
    node.spec.auth = Some(locked_auth());
    let (ip, metrics) = start_with_exporter(cluster, apis, node).await;
    let metrics_addr = format!("{ip}:9121");
    for series in [
        "redis_connected_clients ",
        "redis_slowlog_length ",
        "redis_instance_info{",
    ] {
        assert!(
            metrics.lines().any(|l| l.starts_with(series)),
            "{series} missing from the exporter's metrics"
        );
    }
    let (status, _) =
        operator::http_get_status(&metrics_addr, &format!("/scrape?target=redis://{ip}:6379"))
            .await
            .unwrap();
    assert_eq!(status, 404, "/scrape is disabled");

    let monitoring_password = derived_password(MONITORING_PASSWORD_PREFIX, operator_password);
    let monitoring = Some((Some("monitoring"), monitoring_password.as_str()));
    assert!(
        valkey_cli_as(&ip, monitoring, &["INFO", "server"]).contains("valkey_version:"),
        "the monitoring user reads INFO"
    );
    for command in [
        &["SET", "k", "v"][..],
        &["GET", "k"],
        &["CONFIG", "GET", "masterauth"],
        &["SLOWLOG", "GET"],
        &["ACL", "LIST"],
        &["CLIENT", "LIST"],
    ] {
        let reply = valkey_cli_as(&ip, monitoring, command);
        assert!(
            reply.contains("NOPERM"),
            "{command:?} as monitoring: {reply}"
        );
    }

    // A sentinel's exporter: the same user, written into Sentinel's config copy by its
    // start-up shell, with the locked node's quoted passwords (on Valkey 8.1, the default
    // image, which re-reads arguments as config lines unescaped).
    let sentinel = "watched-sentinel";
    let mut node = valkey_node(sentinel, WorkloadType::StatefulSet, false, None);
    node.spec.mode = Mode::Sentinel;
    node.spec.template.config = Default::default();
    node.spec.auth = Some(locked_auth());
    let (ip, metrics) = start_with_exporter(cluster, apis, node).await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("redis_sentinel_masters ")),
        "the exporter read the sentinel's INFO"
    );
    let sentinel_cli = |login: (&str, &str), command: &[&str]| {
        let output = std::process::Command::new("valkey-cli")
            .args(["-h", &ip, "-p", "26379", "--user", login.0])
            .env("REDISCLI_AUTH", login.1)
            .args(command)
            .output()
            .unwrap();
        String::from_utf8_lossy(&output.stdout).trim().to_string()
    };
    let monitoring = ("monitoring", monitoring_password.as_str());
    let operator = ("operator", operator_password);
    assert_eq!(sentinel_cli(monitoring, &["SENTINEL", "MASTERS"]), "");
    for command in [
        &["SENTINEL", "SET", "g", "quorum", "1"][..],
        &["SENTINEL", "CONFIG", "GET", "*"],
        &["SENTINEL", "RESET", "*"],
        &["ACL", "LIST"],
    ] {
        let reply = sentinel_cli(monitoring, command);
        assert!(
            reply.contains("NOPERM"),
            "{command:?} as monitoring: {reply}"
        );
    }

    // Sentinel 8.1 writes its passwords back to its config unquoted (any state change does;
    // FLUSHCONFIG here), which its next start could not parse; its start-up shell writes
    // them again quoted, so the restarted container comes back with every login.
    assert_eq!(sentinel_cli(operator, &["SENTINEL", "FLUSHCONFIG"]), "OK");
    let pod = format!("{sentinel}-0");
    let restarts = || async {
        let pod = apis.pods.get(&pod).await?;
        anyhow::Ok(
            pod.status
                .and_then(|s| s.container_statuses)
                .into_iter()
                .flatten()
                .find(|c| c.name == "valkey")
                .map(|c| (c.restart_count, c.ready)),
        )
    };
    let before = restarts().await.unwrap().unwrap().0;
    sentinel_cli(operator, &["SHUTDOWN"]);
    let restarted = cluster
        .wait_for_value("the sentinel to restart and be ready", || async {
            Ok(restarts()
                .await?
                .filter(|&(count, ready)| count > before && ready))
        })
        .await;
    if let Err(error) = restarted {
        explain(cluster, apis, sentinel, error).await;
    }
    assert_eq!(sentinel_cli(operator, &["PING"]), "PONG");
    assert_eq!(sentinel_cli(monitoring, &["PING"]), "PONG");
    let default = valkey_cli_as(&ip, Some((None, LOCKED_PASSWORD)), &["-p", "26379", "PING"]);
    assert_eq!(default, "PONG");
}

/// Creates `node` with the local exporter image as its sidecar and waits for it to be Ready
/// and for the exporter to scrape it (`redis_up 1`; the first scrape may come before the
/// server accepts clients, a later one must succeed). Returns the node's Service IP and the
/// metrics; on a timeout, panics with the node's and pod's status and every container's log.
async fn start_with_exporter(
    cluster: &LocalCluster,
    apis: &Apis,
    mut node: ValkeyNode,
) -> (String, String) {
    let name = node.name_any();
    let local = local_cluster::images::exporter_image().unwrap();
    assert_eq!(
        local, DEFAULT_EXPORTER_IMAGE,
        "the local exporter image (Debian's redis_exporter) moved: check that version and pin it \
         as DEFAULT_EXPORTER_IMAGE (crates/crd-types/src/template.rs)"
    );
    // `exporter: {}`: the CRD's default names the image.
    node.spec.template.exporter = None;
    let mut object = serde_json::to_value(&node).unwrap();
    object["spec"]["exporter"] = serde_json::json!({});
    apis.nodes
        .patch(
            &name,
            &PatchParams::apply("e2e").force(),
            &Patch::Apply(&object),
        )
        .await
        .unwrap();
    let ready = cluster
        .wait_for_value(&format!("{name} with an exporter to be ready"), || {
            ready_node(&apis.nodes, &apis.pods, &name, None)
        })
        .await;
    let ip = match ready {
        Ok((_, ip)) => ip,
        Err(error) => explain(cluster, apis, &name, error).await,
    };
    let metrics_addr = format!("{ip}:9121");
    let scraped = cluster
        .wait_for_value(&format!("{name}'s exporter to scrape it"), || async {
            let body = operator::http_get(&metrics_addr, "/metrics").await;
            Ok(body.filter(|b| b.lines().any(|l| l == "redis_up 1")))
        })
        .await;
    let metrics = match scraped {
        Ok(metrics) => metrics,
        Err(error) => explain(cluster, apis, &name, error).await,
    };
    let pod = apis.pods.get(&format!("{name}-0")).await.unwrap();
    let exporter = pod
        .spec
        .unwrap()
        .containers
        .into_iter()
        .find(|c| c.name == "exporter")
        .expect("an exporter container");
    assert_eq!(exporter.image.as_deref(), Some(DEFAULT_EXPORTER_IMAGE));
    (ip, metrics)
}

/// Panics with `error`, the node's and its pod's status, each container's log (the last
/// run's too, when one crashed) and the node agent's log tail.
async fn explain(cluster: &LocalCluster, apis: &Apis, name: &str, error: anyhow::Error) -> ! {
    let pod = format!("{name}-0");
    let status = apis.nodes.get_status(name).await.map(|n| n.status);
    let pod_status = apis.pods.get(&pod).await.map(|p| p.status);
    let mut logs = String::new();
    for container in ["valkey", "sentinel-config", "exporter-auth", "exporter"] {
        for previous in [false, true] {
            let params = kube::api::LogParams {
                container: Some(container.into()),
                previous,
                ..Default::default()
            };
            let log = apis.pods.logs(&pod, &params).await;
            logs.push_str(&format!("\n{container} (previous: {previous}): {log:?}"));
        }
    }
    let agent = cluster.log_tail("node-agent", 40);
    panic!("{error}\nnode: {status:?}\npod: {pod_status:?}{logs}\nagent: {agent}");
}
