//! ValkeyCluster: a sharded, cluster-mode Valkey built from ValkeyNodes.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::topology::TopologySpec;

/// Most shards a ValkeyCluster may have (Valkey recommends at most ~1000 nodes in all).
pub const MAX_SHARDS: u32 = 500;
/// Most replicas per shard.
pub const MAX_REPLICAS_PER_SHARD: u32 = 5;

/// A Valkey cluster: `shards` primaries, each with `replicasPerShard` replicas, all 16384 slots
/// spread evenly.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[kube(
    group = "valkey.rs",
    version = "v1alpha1",
    kind = "ValkeyCluster",
    namespaced,
    status = "ValkeyClusterStatus",
    shortname = "vkc",
    category = "valkey",
    doc = "A sharded Valkey cluster built from ValkeyNodes.",
    printcolumn(name = "Shards", type_ = "integer", json_path = ".spec.shards"),
    printcolumn(name = "Replicas", type_ = "integer", json_path = ".spec.replicasPerShard"),
    printcolumn(name = "Ready", type_ = "integer", json_path = ".status.readyShards"),
    printcolumn(name = "Slots", type_ = "integer", json_path = ".status.slotsAssigned"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = Rule::new("self.metadata.name.size() <= 40").message("ValkeyCluster names are at most 40 characters: member names add a shard and member suffix"),
    validation = Rule::new("self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')").message("ValkeyCluster names must start with a letter and hold only lower-case letters, digits and '-'")
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("!has(self.switchover) || self.switchover.shard < self.shards").message("switchover.shard must name an existing shard: shards are numbered from 0 to shards - 1"),
    validation = Rule::new("!has(self.switchover) || self.switchover.member <= self.replicasPerShard").message("switchover.member must name an existing member: members are numbered from 0 to replicasPerShard"),
    validation = crate::template::operator_secret_ref_is_kept(),
    validation = crate::template::tls_is_set_at_creation(),
    validation = crate::monitoring::pod_monitor_needs_an_exporter()
)]
pub struct ValkeyClusterSpec {
    /// Number of shards (primaries), 1 to 500. Changing it moves slots online.
    #[x_kube(
        validation = Rule::new("self >= 1").message("shards must be at least 1"),
        validation = Rule::new(format!("self <= {MAX_SHARDS}")).message(format!("shards must be at most {MAX_SHARDS}").as_str())
    )]
    pub shards: i32,

    /// Replicas of each shard's primary, 0 to 5.
    #[serde(default = "default_replicas_per_shard")]
    #[x_kube(
        validation = Rule::new("self >= 0").message("replicasPerShard cannot be negative; use 0 for primaries without replicas"),
        validation = Rule::new(format!("self <= {MAX_REPLICAS_PER_SHARD}")).message(format!("replicasPerShard must be at most {MAX_REPLICAS_PER_SHARD}").as_str())
    )]
    pub replicas_per_shard: i32,

    /// The members' pod, auth, users, NetworkPolicy and TLS (see [`TopologySpec`]).
    #[serde(flatten)]
    pub common: TopologySpec,

    /// A request to make a given member its shard's primary (a safe CLUSTER FAILOVER).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switchover: Option<ClusterSwitchover>,
}

fn default_replicas_per_shard() -> i32 {
    1
}

/// Make `member` the primary of `shard`. Performed once per `id`; the outcome is in
/// `status.switchover`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSwitchover {
    /// Identifies the request; change it to ask again.
    #[x_kube(validation = Rule::new("self.size() > 0").message("switchover.id must not be empty: any unique value, changed for each new request"))]
    pub id: String,
    /// Shard index, from 0.
    #[x_kube(validation = Rule::new("self >= 0").message("switchover.shard cannot be negative"))]
    pub shard: i32,
    /// Member index inside the shard, from 0.
    #[x_kube(validation = Rule::new("self >= 0").message("switchover.member cannot be negative"))]
    pub member: i32,
}

/// Overall state of a topology.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum Phase {
    /// Members are being created and joined.
    Creating,
    /// Serving with the shape the spec asks for.
    Ready,
    /// Shards or replicas are being added or removed.
    Scaling,
    /// Members are rolling to a new template.
    Updating,
    /// Serving, but a member or slot is unhealthy.
    Degraded,
    /// Not serving.
    Failed,
    /// The `valkey.rs/paused` annotation is set: topology-controller takes no step (no
    /// roll, scaling, failover following or rotation) while Valkey keeps serving.
    Paused,
}

impl Phase {
    pub const fn as_str(self) -> &'static str {
        match self {
            Phase::Creating => "Creating",
            Phase::Ready => "Ready",
            Phase::Scaling => "Scaling",
            Phase::Updating => "Updating",
            Phase::Degraded => "Degraded",
            Phase::Failed => "Failed",
            Phase::Paused => "Paused",
        }
    }
}

/// Observed state of a ValkeyCluster (topology-controller).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ValkeyClusterStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// Shards whose primary and replicas are all ready and linked.
    #[serde(default)]
    pub ready_shards: i32,
    /// Slots assigned to a primary (16384 when complete).
    #[serde(default)]
    pub slots_assigned: i32,
    /// Members of each shard as Valkey sees them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<ShardStatus>,
    /// Outcome of the latest switchover request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switchover: Option<SwitchoverStatus>,
    /// The Valkey versions the members run, oldest first: several while an upgrade rolls.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub versions: Vec<String>,
    /// How each `spec.template.config` directive reaches the members.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<ConfigPaths>,
    /// The member whose volume has the least free space (from the members'
    /// `status.storage`; only members whose usage pvc-resizer reads, with autoResize).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<crate::node::StorageHeadroom>,
    /// Password rotations under way, one per user (today: `default`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["user".into()]))]
    pub password_rotations: Vec<crate::rotation::PasswordRotation>,
    /// The replacement of the operator's CA under way, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_replacement: Option<crate::rotation::CaReplacement>,
    /// The spec generation this status reflects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}

/// The two ways a config change reaches running members.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigPaths {
    /// Set on the running members with CONFIG SET: changing one restarts nothing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub live: Vec<String>,
    /// Read only at start: changing one rolls the members, one at a time.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub restart: Vec<String>,
}

impl ConfigPaths {
    /// Which of `config`'s directives are set live: those live on every supported version,
    /// the only ones node-controller keeps out of a pod's revision. `None` for no config.
    pub fn of(config: &crate::config::ValkeyConfig) -> Option<ConfigPaths> {
        if config.0.is_empty() {
            return None;
        }
        let (live, restart) = config
            .0
            .keys()
            .cloned()
            .partition(|name| crate::live_config::is_live_everywhere(name));
        Some(ConfigPaths { live, restart })
    }
}

/// One shard of a ValkeyCluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShardStatus {
    pub index: i32,
    /// ValkeyNode currently primary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary: Option<String>,
    /// Slot ranges owned by the shard, e.g. "0-5460".
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slots: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<MemberStatus>,
}

/// One member (ValkeyNode) of a topology.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberStatus {
    /// ValkeyNode name.
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<crate::node::Role>,
    #[serde(default)]
    pub ready: bool,
}

/// Where a switchover request stands.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum SwitchoverOutcome {
    /// Not done yet: waiting for the target to be an in-sync replica, or taking over.
    #[default]
    Pending,
    /// The target is its shard's primary.
    Succeeded,
    /// The request cannot be carried out; the message says why.
    Failed,
}

impl SwitchoverOutcome {
    pub fn is_finished(self) -> bool {
        self != SwitchoverOutcome::Pending
    }
}

/// Outcome of a switchover request.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SwitchoverStatus {
    /// The request id this reports on.
    pub id: String,
    pub outcome: SwitchoverOutcome,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Time>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ValkeyConfig;

    #[test]
    fn config_paths_split_live_from_restart_directives() {
        assert_eq!(ConfigPaths::of(&ValkeyConfig::default()), None);
        let config = ValkeyConfig(
            [
                ("maxmemory", "1gb"),
                ("tcp-backlog", "256"),
                // Live only from 9.1: node-controller cannot know the version, so it rolls.
                ("io-threads", "2"),
                ("timeout", "30"),
            ]
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .into(),
        );
        assert_eq!(
            ConfigPaths::of(&config),
            Some(ConfigPaths {
                live: vec!["maxmemory".into(), "timeout".into()],
                restart: vec!["io-threads".into(), "tcp-backlog".into()],
            })
        );
    }
}
