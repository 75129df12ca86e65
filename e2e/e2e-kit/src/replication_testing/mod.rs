//! Helpers for the ValkeyReplication e2e tests (`tests/valkey_replication/`): a fixture,
//! the status contract (when is a group Ready), reaching the data nodes and sentinels on
//! their Service ClusterIPs ([`GroupAccess`]) and what Valkey and Sentinel themselves say.

mod access;
mod data;
pub mod full_restart;
mod probe;
mod writer;

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context, Result};
use crd_types::cluster::Phase;
use crd_types::conditions::{self, types};
use crd_types::config::ValkeyConfig;
use crd_types::names::{self, labels};
use crd_types::node::Role;
use crd_types::replication::SentinelSpec;
use crd_types::template::{Persistence, ReclaimPolicy, ValkeyNodeTemplate};
use crd_types::{ValkeyNode, ValkeyReplication, ValkeyReplicationSpec, ValkeyReplicationStatus};
use k8s_openapi::api::core::v1::{Pod, Secret, Service};
use k8s_openapi::api::events::v1::Event;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};

use crate::cluster_testing::{Progress, TOPOLOGY_CONTROLLER};

pub use access::{GroupAccess, MemberAddr, SentinelView, access};
pub use data::Keys;
pub use probe::WriteProbes;
pub use writer::{GroupWriter, GroupWriterReport, Route};

/// The APIs the replication tests use, in one namespace.
#[derive(Clone)]
pub struct ReplicationApis {
    pub groups: Api<ValkeyReplication>,
    pub nodes: Api<ValkeyNode>,
    pub pods: Api<Pod>,
    pub secrets: Api<Secret>,
    pub services: Api<Service>,
    pub events: Api<Event>,
}

impl ReplicationApis {
    pub fn new(client: &kube::Client, namespace: &str) -> Self {
        Self {
            groups: Api::namespaced(client.clone(), namespace),
            nodes: Api::namespaced(client.clone(), namespace),
            pods: Api::namespaced(client.clone(), namespace),
            secrets: Api::namespaced(client.clone(), namespace),
            services: Api::namespaced(client.clone(), namespace),
            events: Api::namespaced(client.clone(), namespace),
        }
    }

    pub async fn create(&self, group: &ValkeyReplication) -> Result<ValkeyReplication> {
        self.groups
            .create(&PostParams::default(), group)
            .await
            .with_context(|| format!("creating ValkeyReplication {}", group.name_any()))
    }

    /// A JSON merge patch of the group.
    pub async fn patch(&self, name: &str, patch: serde_json::Value) -> Result<ValkeyReplication> {
        self.groups
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .with_context(|| format!("patching ValkeyReplication {name} with {patch}"))
    }

    /// The group's members, by the `valkey.rs/replication` label, in name order.
    pub async fn members(&self, group: &str) -> Result<Vec<ValkeyNode>> {
        let selector = format!("{}={group}", labels::REPLICATION);
        let mut nodes = self
            .nodes
            .list(&ListParams::default().labels(&selector))
            .await?
            .items;
        nodes.sort_by_key(|n| n.name_any());
        Ok(nodes)
    }

    /// Deletes a pod with grace period 0: the process is killed, the object gone at once.
    pub async fn kill_pod(&self, pod: &str) -> Result<()> {
        let grace = kube::api::DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        };
        self.pods
            .delete(pod, &grace)
            .await
            .with_context(|| format!("killing pod {pod}"))?;
        Ok(())
    }

    /// Events about the group reported by topology-controller, with `reason` when given.
    pub async fn group_events(&self, group: &str, reason: Option<&str>) -> Result<Vec<Event>> {
        Ok(self
            .events
            .list(&Default::default())
            .await?
            .items
            .into_iter()
            .filter(|e| {
                let regarding = e.regarding.as_ref();
                regarding.and_then(|r| r.kind.as_deref()) == Some("ValkeyReplication")
                    && regarding.and_then(|r| r.name.as_deref()) == Some(group)
                    && e.reporting_controller.as_deref() == Some(TOPOLOGY_CONTROLLER)
                    && reason.is_none_or(|r| e.reason.as_deref() == Some(r))
            })
            .collect())
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
    let group = apis.groups.get(name).await?;
    let members = apis.members(name).await?;
    Ok(match not_ready(&group, &members) {
        Some(why) => Err(why),
        None => Ok(group.status.unwrap_or_default()),
    })
}
