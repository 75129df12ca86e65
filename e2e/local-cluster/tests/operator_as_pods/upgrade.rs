//! An operator upgrade from the release `release/previous` names (its image built by
//! `hack/previous-image.sh` from its own commit, installed from its own deploy/) to this
//! build while a ValkeyCluster and a ValkeyReplication take writes, two ways: this build's
//! manifest applied server-side, as `kubectl apply --server-side -f install.yaml` does, and
//! this build's chart taking the manifest install over with `helm install --take-ownership`
//! (the previous release has no chart). The promise of docs/upgrades.md: no data pod
//! restarts, no acknowledged write is lost, Ready never goes False, and the new controllers
//! go on writing status.

use std::time::{Duration, Instant};

use e2e_kit::cluster_testing::{AckedWriter, ClusterApis, access, valkey_cluster};
use e2e_kit::replication_testing::{
    GroupWriter, ReplicationApis, Route, access as group_access, valkey_replication,
};
use e2e_kit::sampler::{Sampler, Samples};
use e2e_kit::topology::TopologyStatus;
use local_cluster::operator_pods::{self, OperatorImage};
use local_cluster::{LocalCluster, Options, repo_root, run_script};
use serde_json::json;

use super::{FORM, Installed, NS, OPERATOR_NS, SERIAL, chart_deployments, data_pods, helm};

/// How the new build replaces the previous release.
#[derive(Debug, Clone, Copy)]
enum Upgrade {
    /// This build's deploy/overlays/all, applied server-side, CRDs first.
    Manifest,
    /// This build's chart, installed over the manifest install, taking its objects over.
    HelmTakingOver,
}

impl Upgrade {
    /// Runs the upgrade; returns the operator's Deployments after it.
    async fn run(self, env: &Installed) -> Vec<String> {
        match self {
            Upgrade::Manifest => operator_pods::install(
                &env.cluster,
                &repo_root().join("deploy/overlays/all"),
                &env.image.reference,
            )
            .await
            .unwrap()
            .into_iter()
            .map(|(_, name)| name)
            .collect(),
            Upgrade::HelmTakingOver => {
                let (_, digest) = env.image.reference.split_once('@').unwrap();
                let chart = repo_root().join("charts/valkey-operator");
                let out = helm(
                    env,
                    &[
                        "install",
                        "valkey-operator",
                        chart.to_str().unwrap(),
                        "--namespace",
                        OPERATOR_NS,
                        "--take-ownership",
                        "--force-conflicts",
                        "--set",
                        &format!("image.tag={}", env.image.tag().unwrap()),
                        "--set",
                        &format!("image.digest={digest}"),
                    ],
                );
                eprintln!("helm install --take-ownership:\n{out}");
                let deployments = chart_deployments(env).await;
                for name in &deployments {
                    operator_pods::wait_rolled_out(&env.cluster, OPERATOR_NS, name)
                        .await
                        .unwrap();
                }
                helm_owns_every_object(env).await;
                deployments
            }
        }
    }
}

/// Every object of the release carries Helm's ownership marks, so a later `helm upgrade`
/// or `helm uninstall` acts on it.
async fn helm_owns_every_object(env: &Installed) {
    let manifest = helm(
        env,
        &[
            "get",
            "manifest",
            "valkey-operator",
            "--namespace",
            OPERATOR_NS,
        ],
    );
    let objects = local_cluster::operator::documents(&manifest).unwrap();
    assert!(
        objects.len() > 30,
        "{} objects in the release",
        objects.len()
    );
    let client = &env.client;
    for object in objects {
        let live = local_cluster::operator::get_live(client, &object)
            .await
            .unwrap();
        let what = format!(
            "{} {}",
            object.types.as_ref().unwrap().kind,
            object.metadata.name.as_deref().unwrap_or_default()
        );
        assert_eq!(
            live.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("meta.helm.sh/release-name"))
                .map(String::as_str),
            Some("valkey-operator"),
            "{what}: not the release's"
        );
        assert_eq!(
            live.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("app.kubernetes.io/managed-by"))
                .map(String::as_str),
            Some("Helm"),
            "{what}: not managed by Helm"
        );
    }
}

/// The release the upgrade starts from.
struct Previous {
    version: String,
    image: OperatorImage,
    /// Its checkout, for its own deploy/.
    source: std::path::PathBuf,
}

/// What `just previous-image` built (`hack/previous-image.sh --no-build` says where).
fn previous() -> Previous {
    let out = run_script("hack/previous-image.sh", &["--no-build"], &[])
        .expect("the previous release's image: run `just previous-image` first");
    let fields: Vec<&str> = out.split_whitespace().collect();
    let [version, reference, layout, source] = fields[..] else {
        panic!("unexpected output of hack/previous-image.sh: {out:?}");
    };
    Previous {
        version: version.into(),
        image: OperatorImage {
            reference: reference.into(),
            layout: layout.into(),
        },
        source: source.into(),
    }
}

/// Reads both topologies' Ready condition on each of the sampler's turns; what it returns
/// is every reading that was not True (a missing condition included).
fn not_ready(
    clusters: ClusterApis,
    groups: ReplicationApis,
    names: (&'static str, &'static str),
) -> impl FnMut() -> Vec<String> + Send + 'static {
    // The sampler runs on a thread of its own; the API calls go through the test's runtime.
    let runtime = tokio::runtime::Handle::current();
    let started = Instant::now();
    move || {
        runtime.block_on(async {
            let readings = [
                ("ValkeyCluster", ready_of(clusters.status(names.0).await)),
                ("ValkeyReplication", ready_of(groups.status(names.1).await)),
            ];
            readings
                .into_iter()
                .filter(|(_, reading)| reading != "True")
                .map(|(kind, reading)| format!("{:?}: {kind} Ready {reading}", started.elapsed()))
                .collect()
        })
    }
}

/// The Ready condition's status and reason, or why it could not be read.
fn ready_of<S: TopologyStatus>(status: anyhow::Result<S>) -> String {
    match status {
        Ok(status) => match status.conditions().iter().find(|c| c.type_ == "Ready") {
            Some(c) if c.status == "True" => "True".into(),
            Some(c) => format!("{} ({}: {})", c.status, c.reason, c.message),
            None => "missing".into(),
        },
        Err(e) => format!("unreadable: {e:#}"),
    }
}

/// Each writer gets 100 more writes acknowledged.
async fn both_write(cluster: &AckedWriter, group: &GroupWriter) {
    let within = Duration::from_secs(60);
    cluster.progressed(100, within).await.unwrap();
    group.progressed(100, within).await.unwrap();
}

/// A directive both kinds set live (CONFIG SET), so nothing rolls.
fn live_change() -> serde_json::Value {
    json!({"spec": {"template": {"config": {"maxmemory": "120mb"}}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_operator_upgrade_restarts_no_data_pod_and_loses_no_write() {
    upgrade_under_writers(Upgrade::Manifest).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn helm_taking_over_a_manifest_install_restarts_no_data_pod_and_loses_no_write() {
    upgrade_under_writers(Upgrade::HelmTakingOver).await;
}

async fn upgrade_under_writers(how: Upgrade) {
    let _serial = SERIAL.lock().await;
    let previous = previous();
    let run = tempfile::tempdir().unwrap();
    let mut cluster = LocalCluster::start(Options::new(run.path())).await.unwrap();
    let client = cluster.client().await.unwrap();
    operator_pods::push(&cluster, &previous.image)
        .await
        .unwrap();
    let image = operator_pods::push_image(&cluster).await.unwrap();
    assert_ne!(previous.image.reference, image.reference);
    let deployments = operator_pods::install(
        &cluster,
        &previous.source.join("deploy/overlays/all"),
        &previous.image.reference,
    )
    .await
    .unwrap();
    eprintln!(
        "installed {} ({}): {deployments:?}",
        previous.version, previous.image.reference
    );
    cluster.fail_on_restarts(OPERATOR_NS, "app.kubernetes.io/name=valkey-operator");
    let env = Installed {
        cluster,
        client: client.clone(),
        image,
        deployments: deployments.into_iter().map(|(_, name)| name).collect(),
        _run: run,
    };

    // A cluster and a group, formed by the previous release, under writers.
    let clusters = ClusterApis::new(&client, NS);
    let groups = ReplicationApis::new(&client, NS);
    let (cluster_name, group_name) = ("upgraded", "upgraded-group");
    clusters
        .create(&valkey_cluster(cluster_name, 3, 1, false))
        .await
        .unwrap();
    groups
        .create(&valkey_replication(group_name, 2, 3, false))
        .await
        .unwrap();
    env.wait("the cluster to be Ready", FORM, || {
        e2e_kit::cluster_testing::ready_status(&clusters, cluster_name)
    })
    .await;
    env.wait("the group to be Ready", FORM, || {
        e2e_kit::replication_testing::ready_status(&groups, group_name)
    })
    .await;
    let cluster_access = access(&clusters, cluster_name).await.unwrap();
    let group = group_access(&groups, group_name).await.unwrap();
    let cluster_writer = AckedWriter::start(&cluster_access).await.unwrap();
    let service = group.service_ip.clone().expect("the read-write Service");
    let group_writer = GroupWriter::start(&group, Route::Service(service), "upg");
    both_write(&cluster_writer, &group_writer).await;
    let before = data_pods(&env).await;
    assert_eq!(before.len(), 6 + 5, "{before:?}");
    let watch = Sampler::start(not_ready(
        clusters.clone(),
        groups.clone(),
        (cluster_name, group_name),
    ));

    let upgraded = how.run(&env).await;
    assert_eq!(upgraded.len(), 4, "{upgraded:?}");
    assert_eq!(
        upgraded.iter().collect::<std::collections::BTreeSet<_>>(),
        env.deployments.iter().collect(),
        "the upgrade renamed a controller"
    );
    env.controllers_run_as_deployed().await;
    eprintln!("upgraded ({how:?}) to {}", env.image.reference);
    // Writes go on while the new leaders take their first looks.
    both_write(&cluster_writer, &group_writer).await;
    // The cluster members run this build's live defaults (docs/upgrades.md), set while the
    // Ready watch runs: a release that brings a new one keeps Ready True.
    for m in &cluster_access.members {
        env.wait(
            "cluster-node-timeout 3000 on every member",
            FORM,
            || async {
                let got =
                    cluster_access.admin_cli(&m.ip, &["CONFIG", "GET", "cluster-node-timeout"]);
                Ok(if got.ends_with("\n3000") {
                    Ok(())
                } else {
                    Err(got)
                })
            },
        )
        .await;
    }
    let Samples { taken, failed } = watch.stop();
    eprintln!("Ready read {taken} times per topology during the upgrade");
    assert!(taken > 10, "the Ready watch ran {taken} times");
    assert!(failed.is_empty(), "Ready was not True: {failed:#?}");

    // The new controllers write status: a live change to both specs is observed and served
    // (Ready stays True while the directive is set, as it did for the members' new defaults
    // the new controllers set on their first look).
    for (generation, what) in [
        (
            clusters
                .patch(cluster_name, live_change())
                .await
                .unwrap()
                .metadata
                .generation,
            "cluster",
        ),
        (
            groups
                .patch(group_name, live_change())
                .await
                .unwrap()
                .metadata
                .generation,
            "group",
        ),
    ] {
        env.wait(
            &format!("the {what}'s status to observe generation {generation:?}"),
            FORM,
            || async {
                let observed = if what == "cluster" {
                    clusters.status(cluster_name).await?.observed_generation()
                } else {
                    groups.status(group_name).await?.observed_generation()
                };
                Ok(if observed == generation {
                    Ok(())
                } else {
                    Err(format!("observed {observed:?}"))
                })
            },
        )
        .await;
    }
    for ip in group.data.iter().map(|m| m.ip.clone()) {
        env.wait("maxmemory 120mb on every data node", FORM, || async {
            let got = group.operator_cli(&ip, &["CONFIG", "GET", "maxmemory"]);
            Ok(if got.contains("125829120") {
                Ok(())
            } else {
                Err(got)
            })
        })
        .await;
    }
    env.wait("the cluster to be Ready again", FORM, || {
        e2e_kit::cluster_testing::ready_status(&clusters, cluster_name)
    })
    .await;
    env.wait("the group to be Ready again", FORM, || {
        e2e_kit::replication_testing::ready_status(&groups, group_name)
    })
    .await;
    both_write(&cluster_writer, &group_writer).await;

    let cluster_report = cluster_writer.stop().await.unwrap();
    let group_report = group_writer.stop().await.unwrap();
    eprintln!(
        "cluster writer:\n{}\ngroup writer: {}",
        cluster_report.summary(),
        group_report.summary()
    );
    assert!(cluster_report.acked() > 0 && !group_report.acked.is_empty());
    let lost = cluster_report.lost(&cluster_access).await.unwrap();
    assert!(
        lost.is_empty(),
        "the cluster lost acknowledged writes: {lost:?}"
    );
    let lost = group_report.lost(&group).await.unwrap();
    assert!(
        lost.is_empty(),
        "the group lost acknowledged writes: {lost:?}"
    );
    assert_eq!(
        data_pods(&env).await,
        before,
        "a data pod changed in the upgrade"
    );
    let mut env = env;
    env.cluster.stop().unwrap();
}
