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

use std::ops::Deref;

use anyhow::Result;
use crd_types::cluster::ValkeyClusterSpec;
use crd_types::names::{self, labels};
use crd_types::topology::TopologySpec;
use crd_types::{ValkeyCluster, ValkeyClusterStatus, ValkeyNode};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};

use crate::topology::{Topology, TopologyApis, fixture_template};

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

pub use crate::topology::{Progress, TOPOLOGY_CONTROLLER, ValkeyClient, poll_until, wait_until};

/// Hash slots of a Valkey cluster.
pub const SLOTS: u32 = 16384;
/// The client port of every member, on its ClusterIP.
pub const PORT: u16 = names::ports::VALKEY as u16;

impl Topology for ValkeyCluster {
    type Status = ValkeyClusterStatus;
    const KIND: &'static str = "ValkeyCluster";
    const MEMBER_LABEL: &'static str = labels::CLUSTER;

    fn not_ready(&self, members: &[ValkeyNode]) -> Option<String> {
        not_ready(self, members)
    }

    fn into_status(self) -> Option<ValkeyClusterStatus> {
        self.status
    }
}

/// The APIs the cluster tests use, in one namespace: those of every topology (through
/// [`Deref`]: `create`, `patch`, `members`, `kill_pod`, the nodes, pods, Secrets and
/// Events), the clusters by their own name, and the Kubernetes Nodes.
#[derive(Clone)]
pub struct ClusterApis {
    /// The ValkeyClusters ([`TopologyApis::topologies`] by its name here).
    pub clusters: Api<ValkeyCluster>,
    /// Kubernetes Nodes (cluster-scoped).
    pub k8s_nodes: Api<Node>,
    topology: TopologyApis<ValkeyCluster>,
}

impl Deref for ClusterApis {
    type Target = TopologyApis<ValkeyCluster>;

    fn deref(&self) -> &Self::Target {
        &self.topology
    }
}

impl ClusterApis {
    pub fn new(client: &kube::Client, namespace: &str) -> Self {
        let topology = TopologyApis::new(client, namespace);
        Self {
            clusters: topology.topologies.clone(),
            k8s_nodes: Api::all(client.clone()),
            topology,
        }
    }

    /// Events about the cluster reported by topology-controller.
    pub async fn topology_events(&self, cluster: &str) -> Result<Vec<Event>> {
        self.events_about(cluster, None).await
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
            common: TopologySpec {
                template: fixture_template(persistent),
                ..Default::default()
            },
            ..Default::default()
        },
    )
}
