//! A ValkeyNode's life on the local cluster with the real controllers: Kubernetes, not the
//! operator, keeps the pod alive through an operator outage and the controllers catch up
//! without rolling it; a config change rolls the pod once and keeps the data; the volume
//! grows with the spec; replication set up through Service addresses heals by itself after
//! the primary's pod is replaced.

use crd_types::ValkeyNode;
use crd_types::template::WorkloadType;
use e2e_kit::testing::{
    cluster_with_operator, controller, events_about, pod_ready, ready_node, valkey_cli, valkey_node,
};
use futures::future::try_join_all;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use local_cluster::LocalCluster;
use local_cluster::controller_pods::{Outage, PodController};

const NS: &str = "default";
const NAME: &str = "cache";
/// The controllers whose outage scenario 1 simulates.
const STOPPED: [&str; 2] = ["node-controller", "service-controller"];

/// `field:value` lines of an INFO section.
fn info_field(info: &str, field: &str) -> Option<String> {
    info.lines()
        .filter_map(|l| l.trim().split_once(':'))
        .find(|(k, _)| *k == field)
        .map(|(_, v)| v.to_string())
}

/// The value on the metric line `<series> <value>`.
fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// A storage quantity in bytes (plain or with a binary suffix, as claims carry them).
fn bytes(q: Option<&Quantity>) -> Option<u64> {
    let q = q?.0.as_str();
    for (suffix, factor) in [
        ("Ki", 1u64 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("Ti", 1 << 40),
    ] {
        if let Some(n) = q.strip_suffix(suffix) {
            return n.parse::<u64>().ok().map(|n| n * factor);
        }
    }
    q.parse().ok()
}

const TWO_GI: u64 = 2 << 30;

struct Apis {
    client: Client,
    nodes: Api<ValkeyNode>,
    pods: Api<Pod>,
    statefulsets: Api<StatefulSet>,
    claims: Api<PersistentVolumeClaim>,
    events: Api<Event>,
}

impl Apis {
    fn new(client: &Client) -> Self {
        Self {
            client: client.clone(),
            nodes: Api::namespaced(client.clone(), NS),
            pods: Api::namespaced(client.clone(), NS),
            statefulsets: Api::namespaced(client.clone(), NS),
            claims: Api::namespaced(client.clone(), NS),
            events: Api::namespaced(client.clone(), NS),
        }
    }

    async fn sts_generation(&self, name: &str) -> Option<i64> {
        self.statefulsets
            .get(name)
            .await
            .unwrap()
            .metadata
            .generation
    }

    async fn pod_uid(&self, name: &str) -> String {
        self.pods.get(name).await.unwrap().uid().unwrap()
    }
}

#[tokio::test]
async fn a_node_lives_through_outages_rolls_grows_and_replicates() {
    let run = tempfile::tempdir().unwrap();
    let (mut cluster, controllers) = cluster_with_operator(run.path()).await.unwrap();
    let client = cluster.client().await.unwrap();
    let apis = Apis::new(&client);

    let cluster_ip = operator_outage(&cluster, &controllers, &apis).await;
    config_change_rolls_once(&cluster, &apis, &cluster_ip).await;
    persistence_grows(&cluster, &apis).await;
    replication_through_services(&cluster, &apis).await;
    cluster.check_restarts("the end of the test").await.unwrap();
    cluster.stop().unwrap();
}

/// Scenario 1: with node-controller and service-controller scaled to zero, a deleted pod is
/// recreated by the StatefulSet with its data; scaled back up, the controllers catch up
/// without rolling it.
async fn operator_outage(
    cluster: &LocalCluster,
    controllers: &[PodController],
    apis: &Apis,
) -> String {
    apis.nodes
        .create(
            &PostParams::default(),
            &valkey_node(NAME, WorkloadType::StatefulSet, true, None),
        )
        .await
        .unwrap();
    let (_, cluster_ip) = cluster
        .wait_for_value("the node to be ready", || {
            ready_node(&apis.nodes, &apis.pods, NAME, None)
        })
        .await
        .unwrap();
    assert_eq!(valkey_cli(&cluster_ip, &["SET", "greeting", "hello"]), "OK");
    let generation = apis.sts_generation(NAME).await;
    let old_uid = apis.pod_uid("cache-0").await;

    // --- The outage.
    // stop() waits until no pod is left and the Lease was handed back.
    try_join_all(
        STOPPED.map(|name| controller(controllers, name).stop(cluster, Outage::ScaledDown)),
    )
    .await
    .unwrap();
    apis.pods
        .delete("cache-0", &DeleteParams::default())
        .await
        .unwrap();
    let new_uid = cluster
        .wait_for_value(
            "Kubernetes to recreate cache-0 ready, with the key",
            || async {
                let Some(pod) = apis.pods.get_opt("cache-0").await? else {
                    return Ok(None);
                };
                let uid = pod.uid().unwrap_or_default();
                if uid == old_uid || !pod_ready(&pod) {
                    return Ok(None);
                }
                let value = valkey_cli(&cluster_ip, &["GET", "greeting"]);
                Ok((value == "hello").then_some(uid))
            },
        )
        .await
        .unwrap();

    // Nobody updated the status meanwhile: it still names the deleted pod's IP (the node
    // agent hands out pod IPs round-robin, so the new pod has another one).
    let live_ip = apis
        .pods
        .get("cache-0")
        .await
        .unwrap()
        .status
        .and_then(|s| s.pod_ip)
        .unwrap();
    let stale = apis.nodes.get_status(NAME).await.unwrap().status.unwrap();
    let stale_ip = stale.workload.and_then(|w| w.pod_ip);
    assert_ne!(
        stale_ip.as_deref(),
        Some(live_ip.as_str()),
        "status moved without controllers"
    );

    // --- The controllers come back.
    try_join_all(STOPPED.map(|name| controller(controllers, name).start(cluster)))
        .await
        .unwrap();
    for name in STOPPED {
        let controller = controller(controllers, name);
        let series =
            format!(r#"valkey_operator_reconcile_duration_seconds_count{{controller="{name}"}}"#);
        cluster
            .wait_for(
                &format!("a finished reconcile of the restarted {name}"),
                || async {
                    let text = controller.metrics(&apis.client).await.ok();
                    Ok(text.and_then(|t| metric(&t, &series)).unwrap_or(0.0) >= 1.0)
                },
            )
            .await
            .unwrap();
    }
    let (workload, ip_after) = cluster
        .wait_for_value("status.workload to catch up with the recreated pod", || {
            ready_node(&apis.nodes, &apis.pods, NAME, Some(&old_uid))
        })
        .await
        .unwrap();
    let live = apis.pods.get("cache-0").await.unwrap();
    assert_eq!(workload.pod_name.as_deref(), Some("cache-0"));
    assert_eq!(
        workload.pod_ip.as_deref(),
        live.status.as_ref().and_then(|s| s.pod_ip.as_deref())
    );
    assert_eq!(ip_after, cluster_ip, "the announce address did not move");
    assert_eq!(workload.revision, workload.desired_revision);
    assert_eq!(
        apis.sts_generation(NAME).await,
        generation,
        "the restarted controller did not roll the StatefulSet"
    );
    assert_eq!(
        live.uid().as_deref(),
        Some(new_uid.as_str()),
        "the restarted controllers replaced the pod"
    );
    let rolling = events_about(&apis.events, "ValkeyNode", NAME, "Rolling")
        .await
        .unwrap();
    assert!(rolling.is_empty(), "{rolling:?}");
    assert_eq!(valkey_cli(&cluster_ip, &["GET", "greeting"]), "hello");
    cluster_ip
}

/// Scenario 2: maxmemory 100mb -> 200mb: one roll, the new value served, the data kept.
async fn config_change_rolls_once(cluster: &LocalCluster, apis: &Apis, cluster_ip: &str) {
    let generation = apis.sts_generation(NAME).await.unwrap();
    let old_uid = apis.pod_uid("cache-0").await;
    let rolling_before = events_about(&apis.events, "ValkeyNode", NAME, "Rolling")
        .await
        .unwrap()
        .len();
    apis.nodes
        .patch(
            NAME,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"config": {"maxmemory": "200mb"}}})),
        )
        .await
        .unwrap();
    cluster
        .wait_for("the new maxmemory served by a new pod", || async {
            let Some((workload, _)) =
                ready_node(&apis.nodes, &apis.pods, NAME, Some(&old_uid)).await?
            else {
                return Ok(false);
            };
            Ok(workload.revision.is_some()
                && workload.revision == workload.desired_revision
                && valkey_cli(cluster_ip, &["CONFIG", "GET", "maxmemory"])
                    == "maxmemory\n209715200")
        })
        .await
        .unwrap();
    assert_eq!(
        apis.sts_generation(NAME).await,
        Some(generation + 1),
        "exactly one template change"
    );
    let rolling = events_about(&apis.events, "ValkeyNode", NAME, "Rolling")
        .await
        .unwrap();
    assert_eq!(rolling.len(), rolling_before + 1, "{rolling:?}");
    assert!(
        rolling
            .iter()
            .all(|e| e.series.as_ref().is_none_or(|s| s.count <= 1)),
        "{rolling:?}"
    );
    assert_ne!(apis.pod_uid("cache-0").await, old_uid);
    assert_eq!(
        valkey_cli(cluster_ip, &["GET", "greeting"]),
        "hello",
        "the key survived the roll"
    );
}

/// Scenario 3: persistence.size 1Gi -> 2Gi: the claim asks for and gets 2Gi.
async fn persistence_grows(cluster: &LocalCluster, apis: &Apis) {
    apis.nodes
        .patch(
            NAME,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"persistence": {"size": "2Gi"}}})),
        )
        .await
        .unwrap();
    let claim_name = "cache-data";
    cluster
        .wait_for("the claim to be 2Gi (request and capacity)", || async {
            let claim = apis.claims.get(claim_name).await?;
            let requested = bytes(
                claim
                    .spec
                    .as_ref()
                    .and_then(|s| s.resources.as_ref())
                    .and_then(|r| r.requests.as_ref())
                    .and_then(|r| r.get("storage")),
            );
            let capacity = bytes(
                claim
                    .status
                    .as_ref()
                    .and_then(|s| s.capacity.as_ref())
                    .and_then(|c| c.get("storage")),
            );
            Ok(requested == Some(TWO_GI) && capacity == Some(TWO_GI))
        })
        .await
        .unwrap();
}

/// Scenario 4: a replica of a primary, both addressed by ClusterIP, re-links by itself after
/// the primary's pod is replaced.
async fn replication_through_services(cluster: &LocalCluster, apis: &Apis) {
    for name in ["primary", "replica"] {
        apis.nodes
            .create(
                &PostParams::default(),
                &valkey_node(name, WorkloadType::StatefulSet, false, None),
            )
            .await
            .unwrap();
    }
    let (_, primary_ip) = cluster
        .wait_for_value("the primary to be ready", || {
            ready_node(&apis.nodes, &apis.pods, "primary", None)
        })
        .await
        .unwrap();
    let (_, replica_ip) = cluster
        .wait_for_value("the replica to be ready", || {
            ready_node(&apis.nodes, &apis.pods, "replica", None)
        })
        .await
        .unwrap();
    assert_eq!(
        valkey_cli(&replica_ip, &["REPLICAOF", &primary_ip, "6379"]),
        "OK"
    );
    let linked = || async {
        let info = valkey_cli(&replica_ip, &["INFO", "replication"]);
        Ok(
            info_field(&info, "master_link_status").as_deref() == Some("up")
                && info_field(&info, "master_host").as_deref() == Some(primary_ip.as_str()),
        )
    };
    cluster
        .wait_for("the replica's link to the primary's ClusterIP", linked)
        .await
        .unwrap();
    assert_eq!(valkey_cli(&primary_ip, &["SET", "before", "1"]), "OK");
    cluster
        .wait_for("the first key on the replica", || async {
            Ok(valkey_cli(&replica_ip, &["GET", "before"]) == "1")
        })
        .await
        .unwrap();

    let old_uid = apis.pod_uid("primary-0").await;
    apis.pods
        .delete("primary-0", &DeleteParams::default())
        .await
        .unwrap();
    let (_, ip_after) = cluster
        .wait_for_value("the primary's pod to come back ready", || {
            ready_node(&apis.nodes, &apis.pods, "primary", Some(&old_uid))
        })
        .await
        .unwrap();
    assert_eq!(ip_after, primary_ip);
    assert_eq!(valkey_cli(&primary_ip, &["SET", "after", "2"]), "OK");
    cluster
        .wait_for(
            "the replica to re-link by itself and get the new key",
            || async { Ok(linked().await? && valkey_cli(&replica_ip, &["GET", "after"]) == "2") },
        )
        .await
        .unwrap();
}
