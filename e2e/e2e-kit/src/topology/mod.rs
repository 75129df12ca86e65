//! What the ValkeyCluster and ValkeyReplication kits share, with the topology as a
//! parameter ([`Topology`]): the APIs of one namespace ([`TopologyApis`]: create, patch,
//! members, Events, pods), readiness per the status contract ([`ready_status`]), waiting
//! with the reason why not yet ([`wait_until`]), the fixtures' member template, the
//! passwords' Secrets, and plain connections to one member for writers that must know
//! which connection carried a write ([`connect_one`], [`WriterCount`]).
//!
//! What differs stays with each topology: its fixture and status contract, how its members
//! are reached (shards and slots, or data nodes and sentinels), its writers and key sets.

pub mod ca_replacement;
pub mod freeze;
pub mod issued;
pub mod logins;
pub mod paused;
pub mod upgrades;

mod apis;
mod connection;
mod status;
mod wait;
mod writer;

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use crd_types::ValkeyNode;
use crd_types::config::ValkeyConfig;
use crd_types::template::{Persistence, ReclaimPolicy, ValkeyNodeTemplate};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use serde::Serialize;
use serde::de::DeserializeOwned;

pub use apis::TopologyApis;
pub use connection::{ValkeyClient, connect_one, raw};
pub use status::TopologyStatus;
pub use wait::{Progress, TOPOLOGY_CONTROLLER, poll_until, wait_until};
pub use writer::WriterCount;

/// A topology kind: ValkeyCluster or ValkeyReplication.
pub trait Topology:
    kube::Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + std::fmt::Debug
    + DeserializeOwned
    + Serialize
    + Send
    + Sync
    + 'static
{
    /// What topology-controller writes in its status.
    type Status: TopologyStatus;
    /// The kind, as Events, owner references and failure messages name it.
    const KIND: &'static str;
    /// The label on each member's ValkeyNode that names the topology (`valkey.rs/cluster`,
    /// `valkey.rs/replication`).
    const MEMBER_LABEL: &'static str;

    /// Why it is not Ready per its status (topology-controller's contract), `members`
    /// being its ValkeyNodes, or `None` when it is.
    fn not_ready(&self, members: &[ValkeyNode]) -> Option<String>;

    /// Its status, taken.
    fn into_status(self) -> Option<Self::Status>;
}

/// Its status once [`Topology::not_ready`] finds nothing wrong.
pub async fn ready_status<T: Topology>(
    apis: &TopologyApis<T>,
    name: &str,
) -> Result<Progress<T::Status>> {
    let topology = apis.topologies.get(name).await?;
    let members = apis.members(name).await?;
    Ok(match topology.not_ready(&members) {
        Some(why) => Err(why),
        None => Ok(topology.into_status().unwrap_or_default()),
    })
}

/// The member template of the fixtures: `maxmemory 100mb` and, when `persistent`, a 1Gi
/// volume per member in the default StorageClass (reclaimPolicy Delete, so removing a member
/// leaves nothing).
pub fn fixture_template(persistent: bool) -> ValkeyNodeTemplate {
    ValkeyNodeTemplate {
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
    }
}

/// The ClusterIP of the member's Service, once its status has one.
pub fn cluster_ip(node: &ValkeyNode) -> Option<String> {
    node.status
        .as_ref()
        .and_then(|s| s.endpoint.as_ref())
        .and_then(|e| e.cluster_ip.clone())
}

/// Key `key` of Secret `name` (a password), as text.
pub async fn secret_value(secrets: &Api<Secret>, name: &str, key: &str) -> Result<String> {
    let secret = secrets.get(name).await?;
    let value = secret
        .data
        .and_then(|d| d.get(key).cloned())
        .with_context(|| {
            format!(
                "Secret {} has no key {key}",
                secret.metadata.name.unwrap_or_default()
            )
        })?;
    Ok(String::from_utf8(value.0)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster_testing::valkey_cluster;
    use crate::replication_testing::valkey_replication;
    use crate::testing::valkey_node;
    use crd_types::template::WorkloadType;

    /// The template as each fixture gave it before they shared it, as JSON.
    fn spelled_out(persistent: bool, storage_class: Option<&str>) -> serde_json::Value {
        let mut template = json(ValkeyNodeTemplate::default());
        template["config"] = serde_json::json!({"maxmemory": "100mb"});
        if persistent {
            let mut volume = Persistence::default();
            (volume.size, volume.reclaim_policy) = ("1Gi".into(), ReclaimPolicy::Delete);
            volume.storage_class_name = storage_class.map(str::to_string);
            template["persistence"] = json(volume);
        }
        template
    }

    fn json(value: impl Serialize) -> serde_json::Value {
        serde_json::to_value(value).unwrap()
    }

    #[test]
    fn every_fixture_has_the_template_it_spelled_out() {
        for persistent in [false, true] {
            let template = spelled_out(persistent, None);
            assert_eq!(json(fixture_template(persistent)), template);
            let cluster = valkey_cluster("c", 3, 1, persistent);
            assert_eq!(json(&cluster.spec.common.template), template);
            assert_eq!(
                (cluster.spec.shards, cluster.spec.replicas_per_shard),
                (3, 1)
            );
            let group = valkey_replication("r", 3, 3, persistent);
            assert_eq!(json(&group.spec.common.template), template);
            assert_eq!((group.spec.replicas, group.spec.sentinel.quorum), (3, 2));
            for class in [None, Some("local-sized")] {
                let node = valkey_node("n", WorkloadType::StatefulSet, persistent, class);
                let mut want = spelled_out(persistent, class);
                want["workloadType"] = json(WorkloadType::StatefulSet);
                assert_eq!(json(&node.spec.template), want);
            }
        }
    }
}
