//! ValkeyReplication: one primary with replicas, watched by Sentinel, built from ValkeyNodes.

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::cluster::{ConfigPaths, Phase, SwitchoverStatus};
use crate::node::Role;
use crate::pod_template::PodTemplate;
use crate::template::SecretKeyRef;
use crate::topology::TopologySpec;

/// Most data nodes in a ValkeyReplication.
pub const MAX_REPLICAS: u32 = 32;
/// Most sentinels.
pub const MAX_SENTINELS: u32 = 9;

/// A primary and its replicas, with Sentinel electing a new primary when it fails.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[kube(
    group = "valkey.rs",
    version = "v1alpha1",
    kind = "ValkeyReplication",
    namespaced,
    status = "ValkeyReplicationStatus",
    shortname = "vkr",
    category = "valkey",
    doc = "A Valkey primary with replicas, watched by Sentinel, built from ValkeyNodes.",
    printcolumn(name = "Replicas", type_ = "integer", json_path = ".spec.replicas"),
    printcolumn(name = "Primary", type_ = "string", json_path = ".status.currentPrimary"),
    printcolumn(name = "Ready", type_ = "integer", json_path = ".status.readyReplicas"),
    printcolumn(name = "Sentinels", type_ = "integer", json_path = ".status.readySentinels"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = Rule::new("self.metadata.name.size() <= 40").message("ValkeyReplication names are at most 40 characters: member names add a suffix"),
    validation = Rule::new("self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')").message("ValkeyReplication names must start with a letter and hold only lower-case letters, digits and '-'")
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("!has(self.switchover) || self.switchover.member < self.replicas").message("switchover.member must name an existing data node: members are numbered from 0 to replicas - 1 (to scale in below a switchover already done, remove spec.switchover)"),
    validation = Rule::new("!has(self.minReplicasToWrite) || self.minReplicasToWrite < self.replicas").message("minReplicasToWrite must be below replicas: a primary has at most replicas - 1 replicas to count on"),
    validation = crate::template::operator_secret_ref_is_kept(),
    validation = crate::template::tls_is_set_at_creation(),
    validation = crate::monitoring::pod_monitor_needs_an_exporter()
)]
pub struct ValkeyReplicationSpec {
    /// Data nodes, the primary included (1 to 32).
    #[x_kube(
        validation = Rule::new("self >= 1").message("replicas counts data nodes including the primary and must be at least 1"),
        validation = Rule::new("self <= 32").message("replicas must be at most 32")
    )]
    pub replicas: i32,

    /// The Sentinel group that watches the primary.
    #[serde(default)]
    pub sentinel: SentinelSpec,

    /// The members' pod, auth, users, NetworkPolicy and TLS (see [`TopologySpec`]).
    #[serde(flatten)]
    pub common: TopologySpec,

    /// A request to make a given data node the primary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switchover: Option<ReplicationSwitchover>,

    /// The primary refuses writes unless this many replicas acknowledged its stream within
    /// `minReplicasMaxLag` seconds (`min-replicas-to-write`), so a primary cut off from its
    /// replicas stops taking writes that the next failover would throw away. Default: 1 when
    /// there is at least one replica, else 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 0").message("minReplicasToWrite cannot be negative; 0 turns the check off"))]
    pub min_replicas_to_write: Option<i32>,

    /// Seconds within which a replica must have acknowledged to count for
    /// `minReplicasToWrite` (`min-replicas-max-lag`). Default 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 1").message("minReplicasMaxLag must be at least 1 second"))]
    pub min_replicas_max_lag: Option<i32>,
}

/// `min-replicas-max-lag` when the spec does not say.
pub const DEFAULT_MIN_REPLICAS_MAX_LAG: i32 = 10;

impl ValkeyReplicationSpec {
    /// `min-replicas-to-write`: the spec's, else 1 with at least one replica.
    pub fn min_replicas_to_write(&self) -> i32 {
        self.min_replicas_to_write
            .unwrap_or(if self.replicas > 1 { 1 } else { 0 })
    }

    /// `min-replicas-max-lag`: the spec's, else [`DEFAULT_MIN_REPLICAS_MAX_LAG`].
    pub fn min_replicas_max_lag(&self) -> i32 {
        self.min_replicas_max_lag
            .unwrap_or(DEFAULT_MIN_REPLICAS_MAX_LAG)
    }
}

/// The Sentinel group.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.quorum <= self.replicas").message("sentinel.quorum cannot exceed sentinel.replicas: no failover could ever be agreed; lower the quorum or add sentinels"))]
pub struct SentinelSpec {
    /// Number of sentinels (1 to 9); an odd number of at least 3 survives the loss of one.
    #[serde(default = "default_sentinels")]
    #[x_kube(
        validation = Rule::new("self >= 1").message("sentinel.replicas must be at least 1"),
        validation = Rule::new("self <= 9").message("sentinel.replicas must be at most 9")
    )]
    pub replicas: i32,
    /// Sentinels that must agree the primary is down before a failover.
    #[serde(default = "default_quorum")]
    #[x_kube(validation = Rule::new("self >= 1").message("sentinel.quorum must be at least 1"))]
    pub quorum: i32,
    /// Container image for the sentinels; the template's image when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// CPU and memory for each sentinel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// How long the primary may not answer before a sentinel counts it down, in milliseconds
    /// (`down-after-milliseconds`); a failover starts once `quorum` sentinels agree.
    #[serde(default = "default_down_after")]
    #[x_kube(validation = Rule::new("self >= 100").message("sentinel.downAfterMilliseconds must be at least 100"))]
    pub down_after_milliseconds: i64,
    /// Sentinel's `failover-timeout` in milliseconds: how long a failover may take before
    /// another is tried, and how long Sentinel waits before correcting a replica's primary.
    #[serde(default = "default_failover_timeout")]
    #[x_kube(validation = Rule::new("self >= 1000").message("sentinel.failoverTimeout must be at least 1000 (milliseconds)"))]
    pub failover_timeout: i64,
    /// Replicas moved to a new primary at once after a failover (`parallel-syncs`).
    #[serde(default = "default_parallel_syncs")]
    #[x_kube(validation = Rule::new("self >= 1").message("sentinel.parallelSyncs must be at least 1"))]
    pub parallel_syncs: i32,
    /// The password sentinels require from clients (the default user's). Generated into
    /// `<name>-sentinel-auth` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_secret_ref: Option<SecretKeyRef>,
    /// What a platform adds to each sentinel's pod, in place of what sentinels take from
    /// `template.pod` when this is absent (its labels, annotations, pull secrets, service
    /// account, identity and grace period, never the data nodes' env, volumes and
    /// containers). Here a sentinel may have env, volumes, sidecars and init containers of
    /// its own (docs/pod-template.md). A change rolls the sentinels one at a time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodTemplate>,
}

impl Default for SentinelSpec {
    fn default() -> Self {
        Self {
            replicas: default_sentinels(),
            quorum: default_quorum(),
            image: None,
            resources: None,
            down_after_milliseconds: default_down_after(),
            failover_timeout: default_failover_timeout(),
            parallel_syncs: default_parallel_syncs(),
            password_secret_ref: None,
            pod: None,
        }
    }
}

fn default_sentinels() -> i32 {
    3
}

fn default_quorum() -> i32 {
    2
}

fn default_down_after() -> i64 {
    5000
}

fn default_failover_timeout() -> i64 {
    60_000
}

fn default_parallel_syncs() -> i32 {
    1
}

/// Make data node `member` the primary. Performed once per `id`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicationSwitchover {
    /// Identifies the request; change it to ask again.
    #[x_kube(validation = Rule::new("self.size() > 0").message("switchover.id must not be empty: any unique value, changed for each new request"))]
    pub id: String,
    /// Data node index, from 0.
    #[x_kube(validation = Rule::new("self >= 0").message("switchover.member cannot be negative"))]
    pub member: i32,
}

/// Observed state of a ValkeyReplication (topology-controller).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ValkeyReplicationStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// ValkeyNode currently primary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_primary: Option<String>,
    /// Data nodes ready and, for replicas, linked to the primary.
    #[serde(default)]
    pub ready_replicas: i32,
    /// Sentinels ready and monitoring the primary.
    #[serde(default)]
    pub ready_sentinels: i32,
    /// Outcome of the latest switchover request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switchover: Option<SwitchoverStatus>,
    /// Data nodes and sentinels as Valkey reports them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<ReplicationMemberStatus>,
    /// The Valkey versions the members (data nodes and sentinels) run, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub versions: Vec<String>,
    /// How each directive of the data nodes' config reaches them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<ConfigPaths>,
    /// The member whose volume has the least free space (from the members'
    /// `status.storage`; only members whose usage pvc-resizer reads, with autoResize).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<crate::node::StorageHeadroom>,
    /// Password rotations under way, one per user: `default` on the data nodes,
    /// `sentinels/default` on the sentinels.
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

/// One member (data node or sentinel) of a ValkeyReplication.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicationMemberStatus {
    /// ValkeyNode name.
    pub name: String,
    /// Primary or Replica as the data node says; Sentinel for a sentinel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// The pod passes its readiness probe.
    #[serde(default)]
    pub ready: bool,
    /// A data node's replication offset, as of the status's last change: it is not written
    /// for the offset alone, which moves with every write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replication_offset: Option<i64>,
    /// A replica's link to the primary is up; for a sentinel, it monitors the primary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_up: Option<bool>,
}
