//! The pod-level parts of a ValkeyNode spec, shared verbatim by ValkeyCluster and
//! ValkeyReplication templates so a topology stamps them onto each member unchanged.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, ResourceRequirements, Toleration, TopologySpreadConstraint,
};
use kube::KubeSchema;
use kube::core::Rule;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::config::ValkeyConfig;
use crate::pod_template::PodTemplate;

/// The default Valkey image for new nodes.
pub const DEFAULT_IMAGE: &str = "valkey/valkey:8.1";

/// The default exporter image: redis_exporter, pinned by tag. The e2e's local image is
/// Debian's build under this name, so a Debian update that moves the tag shows up there.
pub const DEFAULT_EXPORTER_IMAGE: &str = "oliver006/redis_exporter:v1.86.0";

/// An exporter image whose tag names redis_exporter older than v1.83.0, the first that can
/// turn its `/scrape` endpoint off (`REDIS_EXPORTER_DISABLE_SCRAPE_ENDPOINT`): without it,
/// anyone who reaches the port can make the exporter connect anywhere. Judged only for an
/// image named like an exporter with a version tag; a digest alone or `latest` is not.
const OLD_EXPORTER: &str = r"^([^@]*/)?[^/:@]*exporter[^/:@]*:v?(0\\.[0-9]+|1\\.([0-9]|[1-7][0-9]|8[0-2]))\\.[0-9]+([-+][^/@]*)?(@.*)?$";

/// What runs the node's single pod.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum WorkloadType {
    /// A StatefulSet with one replica: stable pod name, at-most-one pod semantics.
    #[default]
    StatefulSet,
    /// A Deployment with one replica and the Recreate strategy.
    Deployment,
}

/// Which address the node announces to its peers and clients.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum Announce {
    /// The ClusterIP of the node's own Service: stable across pod restarts (needs service-controller).
    #[default]
    Service,
    /// The pod IP: changes whenever the pod is recreated; for deployments without service-controller.
    PodIP,
}

/// What happens to the PVC when its ValkeyNode is deleted.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ReclaimPolicy {
    /// Keep the PVC (and its data) after the ValkeyNode is gone.
    #[default]
    Retain,
    /// Delete the PVC once the node's pod is gone.
    Delete,
}

/// The parts of a ValkeyNode that describe its pod; a topology's `template`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("!has(self.memoryOnly) || !has(self.persistence)").message("memoryOnly and persistence exclude each other: a memory-only node keeps no data on disk; remove one of them"),
    validation = Rule::new("!has(self.memoryOnly) || !has(self.config) || !('appendonly' in self.config || 'save' in self.config)").message("config cannot set appendonly or save with memoryOnly: a memory-only node writes no append-only file and no RDB (the operator renders appendonly no and save \"\"); remove them")
)]
pub struct ValkeyNodeTemplate {
    /// Container image running valkey-server / valkey-sentinel (for example valkey/valkey:8.1).
    #[serde(default = "default_image")]
    #[x_kube(validation = Rule::new("self.size() > 0").message("image must name a Valkey container image, such as valkey/valkey:8.1"))]
    pub image: String,

    /// Image pull policy for the Valkey container (Always, IfNotPresent or Never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self in ['Always', 'IfNotPresent', 'Never']").message("imagePullPolicy must be Always, IfNotPresent or Never"))]
    pub image_pull_policy: Option<String>,

    /// StatefulSet or Deployment. Immutable: the two keep their pod and volume differently.
    #[serde(default)]
    #[x_kube(
        validation = Rule::new("self in ['StatefulSet', 'Deployment']").message("workloadType must be StatefulSet or Deployment"),
        validation = Rule::new("self == oldSelf").message("workloadType is immutable: create a new ValkeyNode with the other workload type and move the data to it")
    )]
    pub workload_type: WorkloadType,

    /// Address announced to peers: the node's Service ClusterIP (Service) or its pod IP (PodIP).
    #[serde(default)]
    #[x_kube(validation = Rule::new("self in ['Service', 'PodIP']").message("announce must be Service or PodIP"))]
    pub announce: Announce,

    /// valkey.conf directives (name: value). Directives the operator manages are refused.
    #[serde(default, skip_serializing_if = "ValkeyConfig::is_empty")]
    pub config: ValkeyConfig,

    /// A PersistentVolumeClaim for /data. Without it /data is an emptyDir and data lives only
    /// as long as the pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistence: Option<Persistence>,

    /// A cache: Valkey writes no append-only file and no RDB, /data is scratch (the
    /// volume named here), and a member that restarts empty never leads while another holds
    /// its data (docs/memory-only.md). Excludes `persistence`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_only: Option<MemoryOnly>,

    /// CPU and memory for the Valkey container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,

    /// Where the pod may run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling: Option<Scheduling>,

    /// A Prometheus exporter sidecar; absent means none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exporter: Option<Exporter>,

    /// What a platform adds to the pod: labels, annotations, pull secrets, a service
    /// account, the grace period, env, volumes, sidecars and init containers
    /// (docs/pod-template.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodTemplate>,
}

fn default_image() -> String {
    DEFAULT_IMAGE.to_string()
}

// By hand so the schema default of an omitted `template` carries the default image.
impl Default for ValkeyNodeTemplate {
    fn default() -> Self {
        Self {
            image: default_image(),
            image_pull_policy: None,
            workload_type: WorkloadType::default(),
            announce: Announce::default(),
            config: ValkeyConfig::default(),
            persistence: None,
            memory_only: None,
            resources: None,
            scheduling: None,
            exporter: None,
            pod: None,
        }
    }
}

impl ValkeyConfig {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A memory-only node (`memoryOnly`): the dataset lives in memory alone.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemoryOnly {
    /// What backs /data, which holds no dataset (a cluster member's nodes.conf, a replica's
    /// sync scratch): EmptyDir (the Kubernetes node's disk) or Memory (tmpfs, counted
    /// against the pod's memory limit). No default: say which.
    #[x_kube(validation = Rule::new("self in ['EmptyDir', 'Memory']").message("memoryOnly.volume must be EmptyDir (the node's disk) or Memory (tmpfs, counted against the memory limit)"))]
    pub volume: ScratchVolume,
}

/// What backs a memory-only node's /data.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ScratchVolume {
    /// An emptyDir on the Kubernetes node's disk.
    #[default]
    EmptyDir,
    /// An emptyDir with `medium: Memory` (tmpfs): counted against the pod's memory limit.
    Memory,
}

impl ValkeyNodeTemplate {
    /// Whether the node keeps its dataset in memory alone (`memoryOnly`).
    pub fn is_memory_only(&self) -> bool {
        self.memory_only.is_some()
    }
}

/// An operator-created PersistentVolumeClaim mounted at /data.
/// How many pods may mount a node's volume at once.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum AccessMode {
    /// One pod in the whole cluster: the fence against two servers on one data directory.
    #[default]
    ReadWriteOncePod,
    /// One Kubernetes node; two pods on that node could share it.
    ReadWriteOnce,
}

impl AccessMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ReadWriteOncePod => "ReadWriteOncePod",
            Self::ReadWriteOnce => "ReadWriteOnce",
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("(has(self.storageClassName) ? self.storageClassName : '') == (has(oldSelf.storageClassName) ? oldSelf.storageClassName : '')").message("persistence.storageClassName is immutable: a volume cannot move to another storage class; create a new node instead"),
    validation = Rule::new("!has(self.autoResize) || !isQuantity(self.size) || !isQuantity(self.autoResize.limit) || quantity(self.autoResize.limit).compareTo(quantity(self.size)) >= 0").message("persistence.autoResize.limit must be at least persistence.size")
)]
pub struct Persistence {
    /// Requested volume size, a Kubernetes quantity such as 10Gi. It can grow, never shrink.
    #[schemars(length(max = 32))]
    #[x_kube(
        validation = Rule::new("isQuantity(self)").message("persistence.size must be a Kubernetes quantity such as 10Gi"),
        validation = Rule::new("!isQuantity(self) || quantity(self).isGreaterThan(quantity('0'))").message("persistence.size must be larger than zero"),
        validation = Rule::new("!isQuantity(self) || !isQuantity(oldSelf) || quantity(self).compareTo(quantity(oldSelf)) >= 0").message("persistence.size cannot shrink: volumes only grow, so keep the current size or a larger one")
    )]
    pub size: String,

    /// StorageClass of the PVC; the cluster default when absent. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,

    /// Retain (default) keeps the PVC after the ValkeyNode is deleted; Delete removes it once
    /// the pod is gone.
    #[serde(default)]
    #[x_kube(validation = Rule::new("self in ['Retain', 'Delete']").message("reclaimPolicy must be Retain or Delete"))]
    pub reclaim_policy: ReclaimPolicy,

    /// ReadWriteOncePod (default) lets only one pod in the whole cluster use the volume, so a
    /// replacement pod cannot open the data while the old server is still writing it (a
    /// Deployment creates the replacement at once). ReadWriteOnce is for storage whose
    /// provisioner does not offer ReadWriteOncePod (non-CSI volumes). Immutable.
    #[serde(default)]
    #[x_kube(
        validation = Rule::new("self in ['ReadWriteOncePod', 'ReadWriteOnce']").message("persistence.accessMode must be ReadWriteOncePod or ReadWriteOnce"),
        validation = Rule::new("self == oldSelf").message("persistence.accessMode is immutable: a claim's access mode cannot change; create a new node instead")
    )]
    pub access_mode: AccessMode,

    /// Grow the volume automatically when it fills up (pvc-resizer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_resize: Option<AutoResize>,
}

/// Automatic growth of a volume by pvc-resizer.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct AutoResize {
    /// Grow once used space exceeds this percentage of capacity (1-99).
    #[serde(default = "default_used_percent_threshold")]
    #[x_kube(validation = Rule::new("self >= 1 && self <= 99").message("autoResize.usedPercentThreshold must be between 1 and 99"))]
    pub used_percent_threshold: i32,

    /// How much to add each time: a quantity (5Gi) or a percentage of the current size (20%).
    #[serde(default = "default_increase")]
    #[schemars(length(max = 32))]
    #[x_kube(validation = Rule::new("isQuantity(self) || self.matches('^[1-9][0-9]?[0-9]?%$')").message("autoResize.increase must be a quantity such as 5Gi or a percentage from 1% to 999% such as 20%"))]
    pub increase: String,

    /// Never grow beyond this size, a quantity such as 100Gi.
    #[schemars(length(max = 32))]
    #[x_kube(validation = Rule::new("isQuantity(self)").message("autoResize.limit must be a Kubernetes quantity such as 100Gi"))]
    pub limit: String,

    /// The smallest growth, a quantity (1Gi by default), so a percentage of a small volume
    /// is not a few MiB: storage is often billed and allocated in GiB.
    #[serde(default = "default_min_increase")]
    #[schemars(length(max = 32))]
    #[x_kube(
        validation = Rule::new("isQuantity(self)").message("autoResize.minIncrease must be a Kubernetes quantity such as 1Gi"),
        validation = Rule::new("!isQuantity(self) || quantity(self).isGreaterThan(quantity('0'))").message("autoResize.minIncrease must be larger than zero")
    )]
    pub min_increase: String,

    /// Seconds to wait after a growth before the next one (300 by default, at most a day):
    /// volume stats lag behind a resize, and some clouds allow one change per volume every
    /// few hours.
    #[serde(default = "default_cooldown_seconds")]
    #[x_kube(validation = Rule::new("self >= 0 && self <= 86400").message("autoResize.cooldownSeconds must be between 0 and 86400 (a day)"))]
    pub cooldown_seconds: i32,
}

fn default_used_percent_threshold() -> i32 {
    80
}

fn default_increase() -> String {
    "20%".to_string()
}

fn default_min_increase() -> String {
    "1Gi".to_string()
}

fn default_cooldown_seconds() -> i32 {
    300
}

/// Placement of the node's pod.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Scheduling {
    /// Labels a Kubernetes node must carry.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Node and pod (anti-)affinity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// Taints the pod tolerates.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// How the pod spreads across zones and nodes; topologies add their own per shard.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub topology_spread_constraints: Vec<TopologySpreadConstraint>,
    /// PriorityClass of the pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
}

/// A Prometheus exporter sidecar next to Valkey.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Exporter {
    /// Exporter image: redis_exporter v1.83.0 or later, which can turn off its /scrape
    /// endpoint. Default: oliver006/redis_exporter:v1.86.0.
    #[serde(default = "default_exporter_image")]
    #[x_kube(
        validation = Rule::new("self.size() > 0").message("exporter.image must name an exporter image"),
        validation = Rule::new(format!("!self.matches('{OLD_EXPORTER}')")).message("exporter.image: redis_exporter before v1.83.0 cannot turn off its /scrape endpoint, which lets anyone reaching the port make it connect anywhere; use v1.83.0 or later (the default is oliver006/redis_exporter:v1.86.0)")
    )]
    pub image: String,
    /// Port the exporter serves /metrics on.
    #[serde(default = "default_exporter_port")]
    #[x_kube(validation = Rule::new("self >= 1 && self <= 65535").message("exporter.port must be between 1 and 65535"))]
    pub port: i32,
    /// CPU and memory for the exporter container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
}

impl Default for Exporter {
    fn default() -> Self {
        Self {
            image: default_exporter_image(),
            port: default_exporter_port(),
            resources: None,
        }
    }
}

fn default_exporter_image() -> String {
    DEFAULT_EXPORTER_IMAGE.to_string()
}

fn default_exporter_port() -> i32 {
    9121
}

/// A key in a Secret in the object's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// Secret name.
    #[schemars(length(max = 253))]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')").message("a Secret name is a DNS subdomain: lower-case letters, digits, '-' and '.', starting and ending each part with a letter or digit, at most 253 characters"))]
    pub name: String,
    /// Key inside the Secret.
    #[serde(default = "default_password_key")]
    #[schemars(length(max = 253))]
    #[x_kube(validation = Rule::new("self.matches('^[-._a-zA-Z0-9]+$')").message("a Secret key is letters, digits, '-', '_' and '.'"))]
    pub key: String,
}

fn default_password_key() -> String {
    "password".to_string()
}

/// The ACL user the controllers log in as (all commands).
pub const OPERATOR_USER: &str = "operator";

/// The ACL user the readiness probe logs in as on a data node whose default user has a
/// password: it may run `PING` and nothing else, so it needs no password (`nopass`), and a
/// probe never fails because the default password changed under a running pod.
pub const PROBE_USER: &str = "probe";

/// What [`PROBE_USER`] may do.
pub const PROBE_USER_RULES: &str = "nopass resetchannels -@all +ping";

/// What the `default` user (the clients' password) may do on a data node that has an
/// [`OPERATOR_USER`], after its password: every key, channel and command but Valkey's
/// `@admin` ones, so a client cannot change or read the server's configuration (`CONFIG`,
/// whose `masterauth` is a password), users (`ACL SETUSER`, `ACL LIST`), replication or
/// cluster layout (`REPLICAOF`, `FAILOVER`, `CLUSTER SETSLOT|FORGET|RESET`...), stop it
/// (`SHUTDOWN`) or cut other clients (`CLIENT KILL|PAUSE`): those are the operator's. The
/// read-only ones clients and people use stay (`ROLE`, which Sentinel-aware and
/// primary/replica clients ask, `LASTSAVE`, `CLUSTER REPLICAS`, `CLIENT LIST`, slow log and
/// latency). Category, not list: an admin command a newer Valkey adds is denied too. Every
/// command named exists on 7.0+.
pub const DEFAULT_USER_RULES: &str = "~* &* +@all -@admin +role +lastsave \
     +cluster|replicas +cluster|slaves +client|list +slowlog|get +slowlog|len \
     +latency|latest +latency|history";

/// What the `default` user (the clients' password) may do on a sentinel that has an
/// [`OPERATOR_USER`]: what a Sentinel-aware client asks (the primary's address, the group's
/// primaries, replicas and sentinels, `ROLE`, `INFO`, subscribing to `+switch-master`), and
/// not what changes the group: every `SENTINEL` subcommand is `@admin` in Sentinel, so
/// `SET`, `REMOVE`, `MONITOR`, `RESET`, `FAILOVER`, `CONFIG`, `IS-MASTER-DOWN-BY-ADDR` (a
/// vote in a leader election) and the rest go with `-@admin`, and `PUBLISH`, with which a
/// client could feed Sentinel a forged hello message naming another primary, is denied. The
/// subcommands named exist on 8.0+ (the `primary` names are 8.0's).
pub const SENTINEL_DEFAULT_USER_RULES: &str = "~* &* +@all -@admin -publish +role \
     +client|list +sentinel|get-master-addr-by-name +sentinel|get-primary-addr-by-name \
     +sentinel|masters +sentinel|primaries +sentinel|master +sentinel|primary \
     +sentinel|replicas +sentinel|slaves +sentinel|sentinels +sentinel|myid \
     +sentinel|ckquorum +sentinel|info-cache +sentinel|pending-scripts";

/// The ACL user replicas log in to their primary as. It may only replicate, so the
/// `masterauth` any client can read with `CONFIG GET` opens no admin account.
pub const REPLICATION_USER: &str = "replication";

/// What [`REPLICATION_USER`] may do, after its password: the commands a replica sends its
/// primary. (It can still copy the whole dataset, as any replica can.)
pub const REPLICATION_USER_RULES: &str = "resetchannels -@all +psync +sync +replconf +ping";

/// Added to [`REPLICATION_USER_RULES`] on cluster members of Valkey 9.0+: atomic slot
/// migration logs in to the target as the replication user and replays the slots' keys and
/// writes there as it (`CLUSTER SYNCSLOTS`, `SELECT`, any write with a key). The keyless
/// flushes are never replayed, so they stay denied. Older servers refuse
/// `cluster|syncslots` as an unknown command, so they never get these.
pub const ATOMIC_MIGRATION_RULES: &str =
    "+cluster|syncslots +select ~* +@write -flushall -flushdb -swapdb";

/// [`REPLICATION_USER`]'s password is derived from the operator password, one way:
/// the hex SHA-256 of this prefix followed by it. Both node-controller (rendering, in the
/// pod's shell) and topology-controller (creating the user live) derive it, so the
/// replication password needs no Secret of its own and changes with the operator's.
pub const REPLICATION_PASSWORD_PREFIX: &str = "valkey-operator replication user:";

/// The ACL user the exporter sidecar logs in as: it may read INFO and the latency and
/// slow-log counters (a sentinel's: what it monitors), nothing else (no key, no CONFIG, no
/// SLOWLOG GET: slow commands' arguments are data). Rendered next to an exporter on nodes
/// with passwords.
pub const MONITORING_USER: &str = "monitoring";

/// What [`MONITORING_USER`] may do: the commands redis_exporter sends on a scrape of
/// `/metrics` with `CONFIG` skipped (`REDIS_EXPORTER_CONFIG_COMMAND=-`).
pub const MONITORING_USER_RULES: &str = "resetchannels -@all +ping +info +client|setname \
     +command|info +latency|latest +latency|histogram +slowlog|len +cluster|info";

/// What [`MONITORING_USER`] may do on a sentinel: what redis_exporter asks Sentinel on a
/// scrape (INFO, then each monitored primary's replicas, sentinels and quorum).
pub const SENTINEL_MONITORING_USER_RULES: &str = "resetchannels -@all +ping +info \
     +client|setname +sentinel|masters +sentinel|replicas +sentinel|slaves \
     +sentinel|sentinels +sentinel|ckquorum";

/// Added to [`MONITORING_USER_RULES`] on Valkey 8.1+, which has COMMANDLOG (8.0 refuses the
/// rule as an unknown command, so it never gets it).
pub const COMMANDLOG_RULES: &str = "+commandlog|len";

/// [`MONITORING_USER`]'s password: the hex SHA-256 of this prefix followed by the operator
/// password (the default user's when there is no operator user), like the replication
/// user's. The exporter reads it from a file an init container derives.
pub const MONITORING_PASSWORD_PREFIX: &str = "valkey-operator monitoring user:";

/// A password derived one way from `base`: the hex SHA-256 of `prefix` followed by it, as
/// the pods' start scripts derive it with `sha256sum`.
pub fn derived_password(prefix: &str, base: &str) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(format!("{prefix}{base}"))
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The spec-level half of [`Tls`]'s rule: `tls` can be neither added nor removed. A `null`
/// counts as removed: the API server runs no rule on a null value (so [`Tls`]'s own rule
/// would not see it) and its `has()` is already false for one, but kube's client-side
/// evaluator says true.
pub fn tls_is_set_at_creation() -> Rule {
    Rule::new("(has(self.tls) && self.tls != null) == (has(oldSelf.tls) && oldSelf.tls != null)")
        .message(
            "tls cannot be added or removed after creation: TLS and plain-text members cannot talk \
         to each other; create a new object with tls instead",
        )
}

/// The topology rule keeping `auth.operatorSecretRef` once set: another Secret rotates the
/// operator password live (members roll onto it, their environment names it), but without
/// one the controller would fall back to `<name>-operator`, which may not exist.
pub fn operator_secret_ref_is_kept() -> Rule {
    Rule::new(
        "!has(oldSelf.auth) || !has(oldSelf.auth.operatorSecretRef) || \
         (has(self.auth) && has(self.auth.operatorSecretRef))",
    )
    .message(
        "auth.operatorSecretRef cannot be removed once set: to rotate the operator password, \
         change the password in the Secret it names or name another Secret; the operator \
         brings it to every member live",
    )
}

/// Client authentication.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Auth {
    /// Password of the default user. For topologies, generated into `<name>-auth` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_secret_ref: Option<SecretKeyRef>,
    /// Password of the `operator` ACL user (all commands), which the controllers log in as.
    /// Replicas log in to their primary as the `replication` user, whose password is derived
    /// from this one. For topologies, generated into `<name>-operator` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator_secret_ref: Option<SecretKeyRef>,
    /// ValkeyCluster and ValkeyReplication: after the default user's password changes (the
    /// Secret's value, or another Secret named), how long the previous password keeps
    /// working next to the new one on every data node (seconds; default 300), counted from
    /// when the last data node took the new one; 0 drops it as soon as every data node has
    /// the new one. Connections already logged in stay. Not on a ValkeyNode made by hand,
    /// which takes a changed password when it restarts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 0 && self <= 604800").message("auth.passwordOverlapSeconds is 0 to 604800 (a week)"))]
    pub password_overlap_seconds: Option<i64>,
}

/// The default of [`Auth::password_overlap_seconds`].
pub const DEFAULT_PASSWORD_OVERLAP_SECONDS: i64 = 300;

/// TLS for clients, replication, the cluster bus and Sentinel, from a Secret the user names.
/// Set at creation only (but for `plainTextClients`): TLS and plain-text members cannot talk
/// to each other, so turning it on or off would split a running topology. Certificates are
/// renewed by updating the Secret's content: members load it without a restart.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.secretName == oldSelf.secretName && self.authClients == oldSelf.authClients").message("tls cannot be changed after creation (but for plainTextClients): TLS and plain-text members cannot talk to each other; renew certificates by updating the Secret's content, which members load without a restart"))]
pub struct Tls {
    /// A Secret in the cert-manager layout (type kubernetes.io/tls): `tls.crt`, `tls.key`
    /// and `ca.crt`. Every member serves `tls.crt` and also presents it as its client
    /// certificate (to its primary, on the cluster bus, to sentinels), so the certificate
    /// must allow server authentication, and client authentication too in a ValkeyCluster
    /// (its bus requires client certificates) or with `authClients` Optional or Required.
    /// Valkey checks the chain to `ca.crt`, not the names in the certificate.
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')").message("tls.secretName is a Secret name: lower-case letters, digits, '-' and '.'"))]
    pub secret_name: String,
    /// Whether clients must present a certificate signed by `ca.crt`: `Never` (the default:
    /// passwords still apply), `Optional` or `Required`. The cluster bus always requires one.
    /// (Not No/Yes: YAML 1.1 parsers, kubectl's among them, read those as booleans.)
    #[serde(default)]
    #[x_kube(validation = Rule::new("self in ['Never', 'Optional', 'Required']").message("tls.authClients must be Never, Optional or Required"))]
    pub auth_clients: TlsAuthClients,
    /// A data node also serves clients in plain text, on port 6380 (`valkey-plain`, on its
    /// Service too), while clients move to TLS; replication, the cluster bus and Sentinel
    /// stay TLS, and so does port 6379. A cluster redirects each client to the port of its
    /// own kind. Sentinels name the TLS port, so a Sentinel-aware client must use TLS.
    /// Passwords apply on both ports. Off by default; may be turned on and off (the members
    /// roll, one at a time).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub plain_text_clients: bool,
}

/// TLS of a ValkeyCluster or ValkeyReplication: from a Secret the user names, or, without
/// one, from a CA the operator keeps for the topology, which issues each member its own
/// certificate. Set at creation only (but for `plainTextClients`), like [`Tls`].
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("(has(self.secretName) ? self.secretName : '') == (has(oldSelf.secretName) ? oldSelf.secretName : '') && self.authClients == oldSelf.authClients").message("tls cannot be changed after creation (but for plainTextClients and caOverlapSeconds): TLS and plain-text members cannot talk to each other, and members keep the CA they trust; renew certificates by updating the Secret's content, which members load without a restart"))]
pub struct TopologyTls {
    /// A Secret in the cert-manager layout (`tls.crt`, `tls.key`, `ca.crt`) that every
    /// member serves, and presents as its client certificate: it must allow server and
    /// client authentication (client only where asked: a ValkeyCluster's bus, or
    /// `authClients` Optional or Required). Valkey checks the chain to `ca.crt`, not the
    /// names. Absent: topology-controller generates a CA (key in `<name>-ca-key`) and gives
    /// each member a Secret `<member>-tls` with a certificate of its own (its Service's
    /// names and ClusterIP, server and client use), renewed before it expires; clients
    /// trust `ca.crt` of `<name>-ca`, which holds nothing else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')").message("tls.secretName is a Secret name: lower-case letters, digits, '-' and '.'"))]
    pub secret_name: Option<String>,
    /// Whether clients must present a certificate signed by the CA: `Never` (the default:
    /// passwords still apply), `Optional` or `Required`. The cluster bus always requires one.
    /// (Not No/Yes: YAML 1.1 parsers, kubectl's among them, read those as booleans.)
    #[serde(default)]
    #[x_kube(validation = Rule::new("self in ['Never', 'Optional', 'Required']").message("tls.authClients must be Never, Optional or Required"))]
    pub auth_clients: TlsAuthClients,
    /// A data node also serves clients in plain text, on port 6380 (`valkey-plain`, on its
    /// Service too), while clients move to TLS; replication, the cluster bus and Sentinel
    /// stay TLS, and so does port 6379. A cluster redirects each client to the port of its
    /// own kind. Sentinels name the TLS port, so a Sentinel-aware client must use TLS.
    /// Passwords apply on both ports. Off by default; may be turned on and off (the members
    /// roll, one at a time).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub plain_text_clients: bool,
    /// Without `secretName`: while the operator replaces the topology's CA (a third of its
    /// ten years left, or the `valkey.rs/replace-ca` annotation given a new value), how
    /// long `ca.crt` of `<name>-ca` holds both CAs before members serve certificates of
    /// the new one: clients trusting only the old CA must re-read it by then. Default one
    /// day; may be changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 2_592_000))]
    pub ca_overlap_seconds: Option<u32>,
}

impl TopologyTls {
    /// Whether a topology with `tls` has its data nodes serve plain-text clients beside TLS
    /// (their port is then on the group's Services and in the NetworkPolicy too).
    pub fn serves_plain_text(tls: Option<&Self>) -> bool {
        tls.is_some_and(|t| t.plain_text_clients)
    }
}

/// Valkey's `tls-auth-clients`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum TlsAuthClients {
    #[default]
    Never,
    Optional,
    Required,
}

impl TlsAuthClients {
    /// The directive's value.
    pub fn directive(self) -> &'static str {
        match self {
            Self::Never => "no",
            Self::Optional => "optional",
            Self::Required => "yes",
        }
    }
}

/// Where members mount the TLS Secret (the whole Secret, so updates reach the files).
pub const TLS_DIR: &str = "/etc/valkey-tls";
/// The Secret's keys, cert-manager's layout.
pub const TLS_CERT_KEY: &str = "tls.crt";
pub const TLS_KEY_KEY: &str = "tls.key";
pub const TLS_CA_KEY: &str = "ca.crt";
