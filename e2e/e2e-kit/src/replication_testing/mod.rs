//! Helpers for the ValkeyReplication e2e tests (`tests/valkey_replication/`): a fixture,
//! the status contract (when is a group Ready), reaching the data nodes and sentinels on
//! their Service ClusterIPs ([`GroupAccess`]) and what Valkey and Sentinel themselves say.

mod access;
mod data;
pub mod full_restart;
mod probe;
mod writer;

use std::collections::BTreeSet;
use std::ops::Deref;

use anyhow::Result;
use crd_types::cluster::Phase;
use crd_types::conditions::{self, types};
use crd_types::names::{self, labels};
use crd_types::node::Role;
use crd_types::replication::SentinelSpec;
use crd_types::topology::TopologySpec;
use crd_types::{ValkeyNode, ValkeyReplication, ValkeyReplicationSpec, ValkeyReplicationStatus};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::events::v1::Event;
use kube::{Api, ResourceExt};

use crate::topology::{self, Topology, TopologyApis, fixture_template};

pub use access::{GroupAccess, MemberAddr, SentinelView, access};
pub use data::Keys;
pub use probe::WriteProbes;
pub use writer::{GroupWriter, GroupWriterReport, Route};

pub use crate::topology::{Progress, TOPOLOGY_CONTROLLER, ValkeyClient, poll_until, wait_until};

impl Topology for ValkeyReplication {
    type Status = ValkeyReplicationStatus;
    const KIND: &'static str = "ValkeyReplication";
    const MEMBER_LABEL: &'static str = labels::REPLICATION;

    fn not_ready(&self, members: &[ValkeyNode]) -> Option<String> {
        not_ready(self, members)
    }

    fn into_status(self) -> Option<ValkeyReplicationStatus> {
        self.status
    }
}

/// The APIs the replication tests use, in one namespace: those of every topology (through
/// [`Deref`]: `create`, `patch`, `members`, `kill_pod`, the nodes, pods, Secrets and
/// Events), the groups by their own name, and the Services.
#[derive(Clone)]
pub struct ReplicationApis {
    /// The ValkeyReplications ([`TopologyApis::topologies`] by its name here).
    pub groups: Api<ValkeyReplication>,
    pub services: Api<Service>,
    topology: TopologyApis<ValkeyReplication>,
}

impl Deref for ReplicationApis {
    type Target = TopologyApis<ValkeyReplication>;

    fn deref(&self) -> &Self::Target {
        &self.topology
    }
}

impl ReplicationApis {
    pub fn new(client: &kube::Client, namespace: &str) -> Self {
        let topology = TopologyApis::new(client, namespace);
        Self {
            groups: topology.topologies.clone(),
            services: Api::namespaced(client.clone(), namespace),
            topology,
        }
    }

    /// Events about the group reported by topology-controller, with `reason` when given.
    pub async fn group_events(&self, group: &str, reason: Option<&str>) -> Result<Vec<Event>> {
        self.events_about(group, reason).await
    }
}

/// A ValkeyReplication fixture: `data` data nodes, `sentinels` sentinels (quorum: a
/// majority), `maxmemory 100mb` and, when `persistent`, a 1Gi volume per data node
/// (reclaimPolicy Delete).
pub fn valkey_replication(
    name: &str,
    data: i32,
    sentinels: i32,
    persistent: bool,
) -> ValkeyReplication {
    ValkeyReplication::new(
        name,
        ValkeyReplicationSpec {
            replicas: data,
            sentinel: SentinelSpec {
                replicas: sentinels,
                quorum: sentinels / 2 + 1,
                ..Default::default()
            },
            common: TopologySpec {
                template: fixture_template(persistent),
                ..Default::default()
            },
            ..Default::default()
        },
    )
}

/// The member names the spec asks for: data nodes, then sentinels.
pub fn desired_members(name: &str, spec: &ValkeyReplicationSpec) -> BTreeSet<String> {
    let data = (0..spec.replicas.max(0) as u32).map(|i| names::replication_member_name(name, i));
    let sentinels =
        (0..spec.sentinel.replicas.max(0) as u32).map(|j| names::sentinel_member_name(name, j));
    data.chain(sentinels).collect()
}

/// Why the group is not Ready per its status (topology-controller's contract), or `None`
/// when it is: phase Ready, the current generation observed, Ready True (Degraded and
/// Progressing not True), a current primary, every data node and sentinel counted ready,
/// exactly the desired members in status, all ready, one of them primary.
pub fn not_ready(group: &ValkeyReplication, members: &[ValkeyNode]) -> Option<String> {
    let name = group.name_any();
    let spec = &group.spec;
    let Some(status) = &group.status else {
        return Some("no status yet".into());
    };
    let why = |reason: String| Some(format!("{reason} (status: {})", describe_status(status)));
    if status.phase != Some(Phase::Ready) {
        return why(format!("phase is {:?}", status.phase));
    }
    if status.observed_generation != group.metadata.generation {
        return why("the current generation is not observed".into());
    }
    if !conditions::is_true(&status.conditions, types::READY) {
        return why("condition Ready is not True".into());
    }
    for type_ in [types::DEGRADED, types::PROGRESSING] {
        if conditions::is_true(&status.conditions, type_) {
            return why(format!("condition {type_} is True"));
        }
    }
    if status.ready_replicas != spec.replicas || status.ready_sentinels != spec.sentinel.replicas {
        return why(format!(
            "readyReplicas {} of {}, readySentinels {} of {}",
            status.ready_replicas, spec.replicas, status.ready_sentinels, spec.sentinel.replicas
        ));
    }
    let desired = desired_members(&name, spec);
    let in_status: BTreeSet<String> = status.members.iter().map(|m| m.name.clone()).collect();
    if in_status != desired {
        return why(format!(
            "members in status {in_status:?}, desired {desired:?}"
        ));
    }
    if let Some(m) = status.members.iter().find(|m| !m.ready) {
        return why(format!("member {} is not ready", m.name));
    }
    let primaries: Vec<&str> = status
        .members
        .iter()
        .filter(|m| m.role == Some(Role::Primary))
        .map(|m| m.name.as_str())
        .collect();
    if primaries.len() != 1 || status.current_primary.as_deref() != primaries.first().copied() {
        return why(format!(
            "currentPrimary {:?}, members with role Primary {primaries:?}",
            status.current_primary
        ));
    }
    let existing: BTreeSet<String> = members.iter().map(|n| n.name_any()).collect();
    if existing != desired {
        return why(format!("ValkeyNodes {existing:?}, desired {desired:?}"));
    }
    None
}

/// A one-line summary of a group's status, for failure messages.
pub fn describe_status(status: &ValkeyReplicationStatus) -> String {
    let conditions: Vec<String> = status
        .conditions
        .iter()
        .map(|c| format!("{}={} {} {:?}", c.type_, c.status, c.reason, c.message))
        .collect();
    let members: Vec<String> = status
        .members
        .iter()
        .map(|m| format!("{}:{:?}:{}", m.name, m.role, m.ready))
        .collect();
    format!(
        "phase {:?}, primary {:?}, ready {}/{}, switchover {:?}, conditions [{}], members [{}]",
        status.phase,
        status.current_primary,
        status.ready_replicas,
        status.ready_sentinels,
        status.switchover,
        conditions.join("; "),
        members.join(" ")
    )
}

/// The group's status once [`not_ready`] finds nothing wrong.
pub async fn ready_status(
    apis: &ReplicationApis,
    name: &str,
) -> Result<Progress<ValkeyReplicationStatus>> {
    topology::ready_status::<ValkeyReplication>(apis, name).await
}
