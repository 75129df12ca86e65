//! Label keys, field managers and the names of every object derived from a custom resource.
//!
//! Kept in one place so the controllers (which never call each other) agree on them.

/// Label keys set on objects the operator creates.
pub mod labels {
    pub const NAME: &str = "app.kubernetes.io/name";
    pub const INSTANCE: &str = "app.kubernetes.io/instance";
    pub const COMPONENT: &str = "app.kubernetes.io/component";
    pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
    pub const PART_OF: &str = "app.kubernetes.io/part-of";
    /// The ValkeyNode a pod, Service, ConfigMap or PVC belongs to.
    pub const NODE: &str = "valkey.rs/node";
    /// The ValkeyCluster a ValkeyNode is a member of.
    pub const CLUSTER: &str = "valkey.rs/cluster";
    /// The ValkeyReplication a ValkeyNode is a member of.
    pub const REPLICATION: &str = "valkey.rs/replication";
    /// Shard index (0-based) of a ValkeyCluster member.
    pub const SHARD: &str = "valkey.rs/shard";
    /// Member index inside its shard or replication group (0-based).
    pub const MEMBER: &str = "valkey.rs/member";
    /// On a ValkeyReplication's data pods: `primary` or `replica`, kept by
    /// topology-controller; the read-write and read-only Services select by it.
    pub const ROLE: &str = "valkey.rs/role";

    /// Values of [`ROLE`].
    pub const ROLE_PRIMARY: &str = "primary";
    pub const ROLE_REPLICA: &str = "replica";

    /// Value of [`NAME`] on everything that runs Valkey.
    pub const NAME_VALUE: &str = "valkey";
    /// Value of [`MANAGED_BY`].
    pub const MANAGED_BY_VALUE: &str = "valkey-operator";
}

/// Annotation keys.
pub mod annotations {
    /// On a node's claim, written by pvc-resizer with each growth: when it asked for the
    /// larger size (RFC 3339). A restarted pvc-resizer finds its cooldown there.
    pub const LAST_RESIZE: &str = "valkey.rs/last-resize-time";
    /// Written with [`LAST_RESIZE`] when usage was known: the file system capacity (bytes)
    /// the kubelet reported then. Until it reports more, its usage predates the growth.
    pub const CAPACITY_BEFORE_RESIZE: &str = "valkey.rs/capacity-before-resize";
    /// On the pod of a node with TLS (node-controller): the interval, in seconds, at which
    /// its server reloads changed certificate files, if it is Valkey 9.1 or later (the start
    /// shell gives it `tls-auto-reload-interval` only then). topology-controller leaves a
    /// 9.1 sentinel with it to reload a renewed certificate itself rather than restarting it.
    pub const TLS_AUTO_RELOAD_SECONDS: &str = "valkey.rs/tls-auto-reload-seconds";
    /// On a pod: the file its preStop hooks read the operator password from (follows the Secret).
    pub const OPERATOR_PASSWORD_FILE: &str = "valkey.rs/operator-password-file";
    /// On a ValkeyCluster or ValkeyReplication whose CA the operator keeps: a new value
    /// replaces the CA (a key that may have leaked). topology-controller writes the value it
    /// answered on `<topology>-ca-key`; one set at creation asks for nothing.
    pub const REPLACE_CA: &str = "valkey.rs/replace-ca";
    /// On a ValkeyCluster or ValkeyReplication: while set (to anything but `false`), topology-controller
    /// takes no step on it (no roll, scaling, failover following or rotation) and its status
    /// says `Paused`; Kubernetes and Valkey keep serving.
    pub const PAUSED: &str = "valkey.rs/paused";
}

/// Server-side-apply field managers: one per controller, so each owns its fields and
/// conditions and a conflict between two controllers is visible in managedFields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldManager {
    Node,
    Service,
    Topology,
    PvcResizer,
}

impl FieldManager {
    pub const fn as_str(self) -> &'static str {
        match self {
            FieldManager::Node => "valkey-operator/node",
            FieldManager::Service => "valkey-operator/service",
            FieldManager::Topology => "valkey-operator/topology",
            FieldManager::PvcResizer => "valkey-operator/pvc-resizer",
        }
    }
}

impl std::fmt::Display for FieldManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The longest ValkeyNode name. The workload is named after the node and a StatefulSet's
/// `controller-revision-hash` label value is `<name>-<10 char hash>`, which must fit in 63.
pub const MAX_NODE_NAME_LEN: usize = 52;
/// The longest ValkeyCluster / ValkeyReplication name: leaves room for the member suffix.
pub const MAX_TOPOLOGY_NAME_LEN: usize = 40;

/// The container running valkey-server or valkey-sentinel in a node's pod (node-controller
/// builds it; topology-controller reads its state).
pub const VALKEY_CONTAINER: &str = "valkey";

/// StatefulSet or Deployment running the node's pod.
pub fn workload_name(node: &str) -> String {
    node.to_string()
}

/// The per-node ClusterIP Service; its ClusterIP is the address the node announces.
pub fn service_name(node: &str) -> String {
    node.to_string()
}

/// The ConfigMap holding the rendered valkey.conf.
pub fn config_map_name(node: &str) -> String {
    format!("{node}-config")
}

/// The operator-created PersistentVolumeClaim mounted at /data.
pub fn pvc_name(node: &str) -> String {
    format!("{node}-data")
}

/// The pod of a StatefulSet-run node (a Deployment's pod name is generated by Kubernetes).
pub fn statefulset_pod_name(node: &str) -> String {
    format!("{node}-0")
}

/// In-cluster DNS name of the node's Service.
pub fn service_dns_name(node: &str, namespace: &str) -> String {
    format!("{}.{namespace}.svc", service_name(node))
}

/// ValkeyNode of member `member` of shard `shard` of a ValkeyCluster.
pub fn cluster_member_name(cluster: &str, shard: u32, member: u32) -> String {
    format!("{cluster}-{shard}-{member}")
}

/// Data ValkeyNode `index` of a ValkeyReplication.
pub fn replication_member_name(replication: &str, index: u32) -> String {
    format!("{replication}-{index}")
}

/// Sentinel ValkeyNode `index` of a ValkeyReplication.
pub fn sentinel_member_name(replication: &str, index: u32) -> String {
    format!("{replication}-sentinel-{index}")
}

/// A ValkeyReplication's read-write Service: it follows the current primary.
pub fn primary_service_name(replication: &str) -> String {
    replication.to_string()
}

/// A ValkeyReplication's read-only Service: its replicas.
pub fn replicas_service_name(replication: &str) -> String {
    format!("{replication}-replicas")
}

/// A ValkeyReplication's Service in front of its sentinels, for Sentinel-aware clients.
pub fn sentinel_service_name(replication: &str) -> String {
    format!("{replication}-sentinel")
}

/// The Secret the topology controller generates for the sentinels' password when none is
/// named.
pub fn generated_sentinel_secret_name(replication: &str) -> String {
    format!("{replication}-sentinel-auth")
}

/// The Secret the topology controller generates for client auth when none is named.
pub fn generated_auth_secret_name(topology: &str) -> String {
    format!("{topology}-auth")
}

/// The Secret the topology controller generates for the `operator` ACL user when none is
/// named.
pub fn generated_operator_secret_name(topology: &str) -> String {
    format!("{topology}-operator")
}

/// The Secret keeping the operator password every member of `topology` was last brought
/// to: the controller logs in with it while members have not taken a changed one.
pub fn applied_operator_secret_name(topology: &str) -> String {
    format!("{topology}-operator-applied")
}

/// The Secret holding the password generated for user `user` of `topology`.
pub fn generated_user_secret_name(topology: &str, user: &str) -> String {
    format!("{topology}-user-{user}")
}

/// The Secret with the certificate of the CA topology-controller keeps for a topology
/// whose `spec.tls` names no Secret (`ca.crt` only): what clients trust, safe to let
/// applications read.
pub fn topology_ca_secret_name(topology: &str) -> String {
    format!("{topology}-ca")
}

/// The Secret with that CA's key (`ca.crt`, `ca.key`) and the certificate the operator
/// presents (`tls.crt`, `tls.key`): for topology-controller alone.
pub fn topology_ca_key_secret_name(topology: &str) -> String {
    format!("{topology}-ca-key")
}

/// The Secret with the certificate topology-controller issues member `member` from its
/// topology's CA.
pub fn member_tls_secret_name(member: &str) -> String {
    format!("{member}-tls")
}

/// The Secret topology-controller keeps a topology's ACL `user` lines in (hashes only).
pub fn users_secret_name(topology: &str) -> String {
    format!("{topology}-users")
}

/// Values of the [`labels::COMPONENT`] label on the objects of a ValkeyNode: what runs in
/// its pod.
pub mod components {
    use crate::node::Mode;

    /// A valkey-server (mode Standalone or Cluster).
    pub const SERVER: &str = "server";
    /// A valkey-sentinel (mode Sentinel).
    pub const SENTINEL: &str = "sentinel";

    /// The component of a node in `mode`.
    pub const fn for_mode(mode: Mode) -> &'static str {
        match mode {
            Mode::Standalone | Mode::Cluster => SERVER,
            Mode::Sentinel => SENTINEL,
        }
    }
}

/// Port numbers and names of a ValkeyNode's pod and Service.
///
/// The Service's `targetPort`s are these names, so the pod's `containerPort`s must carry
/// exactly these names (node-controller) for the Service (service-controller) to reach them.
pub mod ports {
    /// Client port of valkey-server (modes Standalone and Cluster).
    pub const VALKEY: i32 = 6379;
    pub const VALKEY_NAME: &str = "valkey";
    /// Plain-text client port of a TLS data node whose `tls.plainTextClients` is on.
    pub const VALKEY_PLAIN: i32 = 6380;
    pub const VALKEY_PLAIN_NAME: &str = "valkey-plain";
    /// Cluster bus (mode Cluster): always the client port + 10000.
    pub const CLUSTER_BUS: i32 = VALKEY + 10000;
    pub const CLUSTER_BUS_NAME: &str = "cluster-bus";
    /// Port of valkey-sentinel (mode Sentinel).
    pub const SENTINEL: i32 = 26379;
    pub const SENTINEL_NAME: &str = "sentinel";
    /// The exporter sidecar's /metrics; the number is `exporter.port`.
    pub const METRICS_NAME: &str = "metrics";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_names_follow_the_node_name() {
        assert_eq!(workload_name("cache"), "cache");
        assert_eq!(service_name("cache"), "cache");
        assert_eq!(config_map_name("cache"), "cache-config");
        assert_eq!(pvc_name("cache"), "cache-data");
        assert_eq!(statefulset_pod_name("cache"), "cache-0");
        assert_eq!(service_dns_name("cache", "prod"), "cache.prod.svc");
    }

    #[test]
    fn member_names_are_predictable() {
        assert_eq!(cluster_member_name("orders", 2, 1), "orders-2-1");
        assert_eq!(replication_member_name("sessions", 0), "sessions-0");
        assert_eq!(sentinel_member_name("sessions", 2), "sessions-sentinel-2");
        assert_eq!(generated_auth_secret_name("orders"), "orders-auth");
        assert_eq!(generated_operator_secret_name("orders"), "orders-operator");
        assert_eq!(primary_service_name("sessions"), "sessions");
        assert_eq!(replicas_service_name("sessions"), "sessions-replicas");
        assert_eq!(sentinel_service_name("sessions"), "sessions-sentinel");
        assert_eq!(
            generated_sentinel_secret_name("sessions"),
            "sessions-sentinel-auth"
        );
    }

    #[test]
    fn longest_member_names_fit_a_node_name() {
        let topology = "t".repeat(MAX_TOPOLOGY_NAME_LEN);
        let shard = crate::cluster::MAX_SHARDS - 1;
        let member = crate::cluster::MAX_REPLICAS_PER_SHARD;
        assert!(cluster_member_name(&topology, shard, member).len() <= MAX_NODE_NAME_LEN);
        let sentinel = crate::replication::MAX_SENTINELS - 1;
        assert!(sentinel_member_name(&topology, sentinel).len() <= MAX_NODE_NAME_LEN);
        let data = crate::replication::MAX_REPLICAS - 1;
        assert!(replication_member_name(&topology, data).len() <= MAX_NODE_NAME_LEN);
    }

    #[test]
    fn longest_node_names_fit_their_objects() {
        let node = "n".repeat(MAX_NODE_NAME_LEN);
        // Service names are DNS-1035 labels.
        assert!(service_name(&node).len() <= 63);
        assert!(config_map_name(&node).len() <= 253);
        assert!(pvc_name(&node).len() <= 253);
        // controller-revision-hash label: "<statefulset>-<hash of up to 10 chars>".
        assert!(format!("{}-{}", workload_name(&node), "0123456789").len() <= 63);
    }

    #[test]
    fn field_managers_are_distinct() {
        let all = [
            FieldManager::Node,
            FieldManager::Service,
            FieldManager::Topology,
            FieldManager::PvcResizer,
        ];
        let mut names: Vec<_> = all.iter().map(|m| m.as_str()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), all.len());
        assert!(names.iter().all(|n| n.starts_with("valkey-operator/")));
    }

    #[test]
    fn port_names_are_valid_container_port_names() {
        // IANA_SVC_NAME: at most 15 characters, lower-case letters, digits and '-'.
        for name in [
            ports::VALKEY_NAME,
            ports::VALKEY_PLAIN_NAME,
            ports::CLUSTER_BUS_NAME,
            ports::SENTINEL_NAME,
            ports::METRICS_NAME,
        ] {
            assert!(name.len() <= 15, "{name}");
            assert!(
                name.chars().all(|c| c.is_ascii_lowercase() || c == '-'),
                "{name}"
            );
        }
        assert_eq!(ports::CLUSTER_BUS, 16379);
    }

    #[test]
    fn component_follows_the_mode() {
        use crate::node::Mode;
        assert_eq!(components::for_mode(Mode::Standalone), components::SERVER);
        assert_eq!(components::for_mode(Mode::Cluster), components::SERVER);
        assert_eq!(components::for_mode(Mode::Sentinel), components::SENTINEL);
    }
}
