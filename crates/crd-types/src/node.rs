//! ValkeyNode: one Valkey server or sentinel process in one pod.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::template::{Auth, Tls, ValkeyNodeTemplate};

/// What the process in the pod is.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum Mode {
    /// A plain valkey-server: a standalone primary or a replica in a ValkeyReplication.
    #[default]
    Standalone,
    /// A valkey-server with cluster-enabled yes, member of a ValkeyCluster.
    Cluster,
    /// A valkey-sentinel watching a ValkeyReplication.
    Sentinel,
}

/// Who decides when the pod restarts for a template change.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum RolloutPolicy {
    /// Roll as soon as the template changes (a ValkeyNode created by hand).
    #[default]
    Immediate,
    /// Roll only when `allowedRevision` equals `status.workload.desiredRevision`; set by a
    /// topology parent so it restarts one member at a time, replicas first.
    Gated,
}

/// One Valkey server or sentinel process in one pod, run by a singleton StatefulSet or
/// Deployment with its own ConfigMap, PVC and ClusterIP Service.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[kube(
    group = "valkey.rs",
    version = "v1alpha1",
    kind = "ValkeyNode",
    namespaced,
    status = "ValkeyNodeStatus",
    shortname = "vkn",
    category = "valkey",
    doc = "One Valkey server or sentinel process in one pod.",
    printcolumn(name = "Mode", type_ = "string", json_path = ".spec.mode"),
    printcolumn(name = "Role", type_ = "string", json_path = ".status.valkey.role"),
    printcolumn(name = "Ready", type_ = "boolean", json_path = ".status.workload.ready"),
    printcolumn(name = "Address", type_ = "string", json_path = ".status.endpoint.clusterIP"),
    printcolumn(name = "Pod", type_ = "string", json_path = ".status.workload.podName", priority = 1),
    printcolumn(name = "Storage", type_ = "string", json_path = ".status.storage.capacity", priority = 1),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = Rule::new("self.metadata.name.size() <= 52").message("ValkeyNode names are at most 52 characters: the StatefulSet and its pod are named after the node"),
    validation = Rule::new("self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')").message("ValkeyNode names must start with a letter and hold only lower-case letters, digits and '-': the node's Service is named after it")
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = crate::template::tls_is_set_at_creation())]
#[x_kube(validation = Rule::new("!has(self.auth) || !has(self.auth.passwordOverlapSeconds)").message("auth.passwordOverlapSeconds is for ValkeyCluster and ValkeyReplication: a ValkeyNode made by hand takes a changed password when it restarts"))]
#[x_kube(validation = Rule::new("has(self.persistence) == has(oldSelf.persistence)").message("persistence cannot be added or removed after creation: the data would be lost or left behind; create a new ValkeyNode instead"))]
pub struct ValkeyNodeSpec {
    /// Standalone (plain server), Cluster (cluster-enabled server) or Sentinel. Immutable.
    #[serde(default)]
    #[x_kube(
        validation = Rule::new("self in ['Standalone', 'Cluster', 'Sentinel']").message("mode must be Standalone, Cluster or Sentinel"),
        validation = Rule::new("self == oldSelf").message("mode is immutable: the data and role of a node do not carry over; create a new ValkeyNode instead")
    )]
    pub mode: Mode,

    /// The pod: image, workload type, announce address, config, persistence, resources,
    /// scheduling and exporter.
    #[serde(flatten)]
    pub template: ValkeyNodeTemplate,

    /// Client authentication (the default user's password).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<Auth>,

    /// TLS for clients, replication and the cluster bus.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<Tls>,

    /// Immediate (default) restarts the pod as soon as its template changes; Gated waits for
    /// `allowedRevision`.
    #[serde(default)]
    #[x_kube(validation = Rule::new("self in ['Immediate', 'Gated']").message("rolloutPolicy must be Immediate or Gated"))]
    pub rollout_policy: RolloutPolicy,

    /// With rolloutPolicy Gated: the template revision the pod may roll to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_revision: Option<String>,

    /// A Secret whose `users.acl` key holds ACL `user` lines, added to a data node's users
    /// at start. Only `user <name> ...` lines are taken, each name once, not the operator's
    /// own users, none with quotes; others are skipped with a log line. Mounted optional:
    /// the pod starts without those users while it is missing. topology-controller names
    /// its `<topology>-users` Secret here on the members of a topology with `users`. A rule
    /// Valkey refuses still stops the server at start, so a hand-written Secret must hold
    /// valid rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')").message("usersSecretName is a Secret name: lower-case letters, digits, '-' and '.'"))]
    pub users_secret_name: Option<String>,

    /// The replication group this node is part of (set by topology-controller on a
    /// ValkeyReplication's members): read by the node at start, so it comes back in the
    /// right role without the operator. Not part of the pod's revision: it changes with
    /// every failover and must not restart anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replication: Option<NodeReplication>,

    /// What a memory-only ValkeyCluster member needs to know at start (set by
    /// topology-controller): a member that starts empty asks these peers whether one still
    /// replicates from its address. Not part of the pod's revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<NodeCluster>,
}

/// What a memory-only cluster member is told of its shard.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeCluster {
    /// Addresses (port 6379) of the other members of the member's shard.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub shard_peers: Vec<String>,
}

impl ValkeyNodeSpec {
    /// Whether the node serves clients in plain text on [`crate::names::ports::VALKEY_PLAIN`]
    /// next to TLS ([`crate::template::Tls::plain_text_clients`]): data nodes only, as
    /// sentinels serve TLS alone.
    pub fn serves_plain_text_beside_tls(&self) -> bool {
        self.mode != Mode::Sentinel && self.tls.as_ref().is_some_and(|t| t.plain_text_clients)
    }
}

/// What a data node or sentinel of a ValkeyReplication needs to know at start.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeReplication {
    /// The name sentinels know the primary by.
    #[x_kube(validation = Rule::new("self.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')").message("replication.primaryName is a ValkeyReplication name"))]
    pub primary_name: String,
    /// The primary's address as topology-controller last saw it (at creation, the first
    /// primary's): what the node falls back to when no sentinel answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary: Option<String>,
    /// Sentinels already watch the group: a data node they still name primary while it
    /// starts waits for them to fail over, and a sentinel without state monitors the group
    /// by itself.
    #[serde(default)]
    pub monitored: bool,
    /// Addresses of the group's sentinels (port 26379), asked at start.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sentinels: Vec<String>,
    /// Addresses of the group's data nodes (port 6379).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub data_nodes: Vec<String>,
    /// Sentinel's quorum, down-after-milliseconds, failover-timeout and parallel-syncs.
    #[serde(default)]
    pub quorum: i32,
    #[serde(default)]
    pub down_after_milliseconds: i64,
    #[serde(default)]
    pub failover_timeout: i64,
    #[serde(default)]
    pub parallel_syncs: i32,
}

/// Observed state, in parts: each part and each condition has exactly one writer.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ValkeyNodeStatus {
    /// The pod and its workload; written by node-controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<WorkloadStatus>,
    /// The node's Service; written by service-controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<EndpointStatus>,
    /// The node's volume; written by pvc-resizer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<StorageStatus>,
    /// What Valkey itself reports; written by topology-controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub valkey: Option<ValkeyStatus>,
    /// Conditions, keyed by type; each type is written by one controller.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}

/// The workload and pod running the node (node-controller).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadStatus {
    /// StatefulSet or Deployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<crate::template::WorkloadType>,
    /// Name of the workload object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The current pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_name: Option<String>,
    /// The current pod's IP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "podIP")]
    pub pod_ip: Option<String>,
    /// The Kubernetes node the pod runs on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// The pod passes its readiness probe.
    #[serde(default)]
    pub ready: bool,
    /// Template revision the running pod was created from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// Template revision the spec asks for; differs from `revision` while a roll is pending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_revision: Option<String>,
    /// Container restarts of the current pod.
    #[serde(default)]
    pub restarts: i32,
    /// The spec generation this part reflects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// The node's Service (service-controller).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EndpointStatus {
    /// Name of the Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_name: Option<String>,
    /// The Service's ClusterIP: the address the node announces with `announce: Service`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "clusterIP")]
    pub cluster_ip: Option<String>,
    /// In-cluster DNS name of the Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_name: Option<String>,
    /// Ports the Service exposes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<EndpointPort>,
    /// The spec generation this part reflects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// One named port of the node's Service.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct EndpointPort {
    /// valkey, cluster-bus, sentinel or metrics.
    pub name: String,
    pub port: i32,
}

/// Lifecycle of the node's volume as pvc-resizer sees it; the StorageReady condition's
/// reason and message say more.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum StorageState {
    /// The PVC does not exist or is not bound yet.
    Pending,
    /// Bound with the requested capacity.
    Bound,
    /// A larger size was requested and the volume is growing.
    Resizing,
    /// The volume grew; the node still has to grow the file system.
    FileSystemResizePending,
    /// Usage is above the threshold and the volume reached autoResize.limit.
    LimitReached,
    /// The volume must grow and its StorageClass does not allow expansion.
    NotExpandable,
    /// A ResourceQuota refused the larger size.
    QuotaExceeded,
    /// autoResize is on and the kubelet's volume stats cannot be read.
    UsageUnknown,
    /// Growing failed otherwise (the API server refused it, or the storage driver failed).
    Failed,
}

/// The node's volume (pvc-resizer).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StorageStatus {
    /// Name of the PVC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_name: Option<String>,
    /// Size requested on the PVC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested: Option<String>,
    /// Capacity the volume reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<String>,
    /// Bytes in use, from the kubelet's volume stats.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_bytes: Option<i64>,
    /// Bytes still free, from the kubelet's volume stats.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<StorageState>,
    /// The last growth pvc-resizer asked for, and how the API server took it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_resize: Option<LastResize>,
    /// The spec generation this part reflects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// The member with the least free space on its volume, for a topology's status: computed by
/// topology-controller from the members' `status.storage` (written by pvc-resizer).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StorageHeadroom {
    /// The ValkeyNode with the least free space.
    pub member: String,
    /// Its free bytes (`status.storage.availableBytes`).
    pub min_available_bytes: i64,
    /// Its used share of the capacity, in percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_percent: Option<i32>,
}

/// One growth pvc-resizer asked for (pvc-resizer).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastResize {
    /// When it was asked for.
    pub time: Time,
    /// The size asked for.
    pub size: String,
    pub result: ResizeResult,
}

/// How the API server took a growth.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ResizeResult {
    /// The claim requests the larger size; the storage driver grows the volume.
    Requested,
    /// A ResourceQuota refused it.
    QuotaExceeded,
    /// The API server refused it otherwise.
    Refused,
}

/// Replication role as Valkey reports it.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum Role {
    Primary,
    Replica,
    Sentinel,
}

/// What Valkey reports about the node (topology-controller).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ValkeyStatus {
    /// Cluster node id (cluster mode) or run id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// Node id of the primary this replica follows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_node_id: Option<String>,
    /// Replication offset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replication_offset: Option<i64>,
    /// A replica's link to its primary is up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_up: Option<bool>,
    /// Valkey server version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}
