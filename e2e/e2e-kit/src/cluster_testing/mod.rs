//! Helpers for the ValkeyCluster e2e tests (`tests/valkey_cluster/`): a ValkeyCluster
//! fixture, waiting with a timeout of the caller's choosing (slot moves outlast the launcher's
//! 120 s) for phase Ready, Valkey's own view of the cluster (`CLUSTER NODES`,
//! `valkey-cli --cluster check`), a key set loaded and read back with the fred cluster client
//! (keys of a slot left open by a cut-off migration over plain connections, see
//! [`DataSet::missing`]), a background writer that records every write a replica acknowledged
//! (`WAIT 1`), and a watch over a roll through the members' roll gates.
//!
//! Every member is reached on its Service ClusterIP, port 6379: the address it announces, a
//! loopback address the test process reaches through the node agent's proxy.

mod access;
mod cluster_view;
mod data;
mod plain;
mod roll;
mod status;
mod writer;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use crd_types::cluster::ValkeyClusterSpec;
use crd_types::config::ValkeyConfig;
use crd_types::names::{self, labels};
use crd_types::template::{Persistence, ReclaimPolicy, ValkeyNodeTemplate};
use crd_types::{ValkeyCluster, ValkeyNode};
use k8s_openapi::api::core::v1::{Node, Pod, Secret};
use k8s_openapi::api::events::v1::Event;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};

use local_cluster::LocalCluster;

pub use access::{Access, MemberAddr, access, check_passed};
pub use cluster_view::{
    ClusterNode, open_slot_numbers, open_slots, parse_cluster_nodes, shape, slots_by_primary,
};
pub use data::DataSet;
pub use roll::RollWatch;
pub use status::{
    count_slots, describe_status, desired_members, not_ready, ready_status, status_matches_valkey,
    wait_ready,
};
pub use writer::{AckedWriter, StreamReport, WriterReport, tag_for};

/// Hash slots of a Valkey cluster.
pub const SLOTS: u32 = 16384;
/// The client port of every member, on its ClusterIP.
pub const PORT: u16 = names::ports::VALKEY as u16;
/// The reporting controller of the topology-controller's Events.
pub const TOPOLOGY_CONTROLLER: &str = "topology-controller";

/// A fred client (the name `Client` is kube's in this crate's tests).
pub type ValkeyClient = fred::clients::Client;

/// "Not yet, because ..." (`Err`) or the awaited value (`Ok`).
pub type Progress<T> = std::result::Result<T, String>;

/// The APIs the cluster tests use, in one namespace.
#[derive(Clone)]
pub struct ClusterApis {
    pub clusters: Api<ValkeyCluster>,
    pub nodes: Api<ValkeyNode>,
    pub pods: Api<Pod>,
    pub secrets: Api<Secret>,
    pub events: Api<Event>,
    /// Kubernetes Nodes (cluster-scoped).
    pub k8s_nodes: Api<Node>,
}

impl ClusterApis {
    pub fn new(client: &kube::Client, namespace: &str) -> Self {
        Self {
            clusters: Api::namespaced(client.clone(), namespace),
            nodes: Api::namespaced(client.clone(), namespace),
            pods: Api::namespaced(client.clone(), namespace),
            secrets: Api::namespaced(client.clone(), namespace),
            events: Api::namespaced(client.clone(), namespace),
            k8s_nodes: Api::all(client.clone()),
        }
    }

    /// Creates the cluster.
    pub async fn create(&self, cluster: &ValkeyCluster) -> Result<ValkeyCluster> {
        self.clusters
            .create(&PostParams::default(), cluster)
            .await
            .with_context(|| format!("creating ValkeyCluster {}", cluster.name_any()))
    }

    /// A JSON merge patch of the cluster (its spec, typically).
    pub async fn patch(&self, name: &str, patch: serde_json::Value) -> Result<ValkeyCluster> {
        self.clusters
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .with_context(|| format!("patching ValkeyCluster {name} with {patch}"))
    }

    /// The cluster's members, by the `valkey.rs/cluster` label, in name order.
    pub async fn members(&self, cluster: &str) -> Result<Vec<ValkeyNode>> {
        let selector = format!("{}={cluster}", labels::CLUSTER);
        let mut nodes = self
            .nodes
            .list(&ListParams::default().labels(&selector))
            .await?
            .items;
        nodes.sort_by_key(|n| n.name_any());
        Ok(nodes)
    }

    /// Events about the cluster reported by topology-controller.
    pub async fn topology_events(&self, cluster: &str) -> Result<Vec<Event>> {
        Ok(self
            .events
            .list(&Default::default())
            .await?
            .items
            .into_iter()
            .filter(|e| {
                let regarding = e.regarding.as_ref();
                regarding.and_then(|r| r.kind.as_deref()) == Some("ValkeyCluster")
                    && regarding.and_then(|r| r.name.as_deref()) == Some(cluster)
                    && e.reporting_controller.as_deref() == Some(TOPOLOGY_CONTROLLER)
            })
            .collect())
    }

    /// How many times topology-controller reported an Event about the cluster (an Event
    /// repeated as a series counts each time).
    pub async fn topology_event_count(&self, cluster: &str) -> Result<i64> {
        Ok(self
            .topology_events(cluster)
            .await?
            .iter()
            .map(|e| e.series.as_ref().map_or(1, |s| i64::from(s.count.max(1))))
            .sum())
    }

    /// Deletes a pod with grace period 0: the process is killed, the object gone at once.
    pub async fn kill_pod(&self, pod: &str) -> Result<()> {
        self.pods
            .delete(
                pod,
                &DeleteParams {
                    grace_period_seconds: Some(0),
                    ..Default::default()
                },
            )
            .await
            .with_context(|| format!("killing pod {pod}"))?;
        Ok(())
    }

    /// Cordons (`false`) or uncordons (`true`) every Kubernetes Node: while cordoned, a
    /// deleted pod's replacement stays Pending, as after the loss of its machine.
    pub async fn set_schedulable(&self, schedulable: bool) -> Result<()> {
        let unschedulable = if schedulable {
            serde_json::Value::Null
        } else {
            serde_json::Value::Bool(true)
        };
        for node in self.k8s_nodes.list(&Default::default()).await?.items {
            self.k8s_nodes
                .patch(
                    &node.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(serde_json::json!({"spec": {"unschedulable": unschedulable}})),
                )
                .await?;
        }
        Ok(())
    }
}

/// A ValkeyCluster fixture: `maxmemory 100mb` and, when `persistent`, a 1Gi volume per
/// member in the default StorageClass (reclaimPolicy Delete, so scale-in leaves nothing).
pub fn valkey_cluster(
    name: &str,
    shards: i32,
    replicas_per_shard: i32,
    persistent: bool,
) -> ValkeyCluster {
    ValkeyCluster::new(
        name,
        ValkeyClusterSpec {
            shards,
            replicas_per_shard,
            template: ValkeyNodeTemplate {
                config: ValkeyConfig(BTreeMap::from([(
                    "maxmemory".to_string(),
                    "100mb".to_string(),
                )])),
                persistence: persistent.then(|| Persistence {
                    size: "1Gi".into(),
                    reclaim_policy: ReclaimPolicy::Delete,
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        },
    )
}

/// Polls `check` every 250 ms until it yields a value. Fails after `timeout` with the last
/// "not yet" reason (or error), or as soon as a process of the run died.
pub async fn wait_until<T, F, Fut>(
    cluster: &LocalCluster,
    what: &str,
    timeout: Duration,
    check: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Progress<T>>>,
{
    poll_until(cluster, what, timeout, Duration::from_millis(250), check).await
}

/// [`wait_until`], polling every `every` (benchmarks time with it).
pub async fn poll_until<T, F, Fut>(
    cluster: &LocalCluster,
    what: &str,
    timeout: Duration,
    every: Duration,
    mut check: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Progress<T>>>,
{
    let started = Instant::now();
    let mut last;
    loop {
        cluster.check_running(what).await?;
        match check().await {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(why)) => last = why,
            Err(error) => last = format!("error: {error:#}"),
        }
        if started.elapsed() > timeout {
            // The controller that acts on topologies is what a timeout here usually waits on.
            bail!(
                "timed out after {timeout:?} waiting for {what}; last: {last}\n{}",
                cluster.controller_log(TOPOLOGY_CONTROLLER, 20).await
            );
        }
        tokio::time::sleep(every).await;
    }
}
