//! Parser (layer 1): a member's vital signs, the few fields of `CLUSTER INFO` (cluster
//! members only) and `INFO replication` that change when the topology's health does (state,
//! failure flags, epochs, roles, replication links) and never with traffic (no offsets, no
//! message counters). The binary's pulse compares them from one second to the next and
//! wakes the reconciles on any difference, so Ready follows Valkey without a full look
//! every few seconds.

use crd_types::node::Role;

use crate::shared::info::{InfoError, InfoFields, ReplicationInfo};

/// What a member shows of its topology's health; equal from one look to the next while
/// nothing happens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vitals {
    /// `CLUSTER INFO`'s part; `None` for a member not in cluster mode (a ValkeyReplication's).
    pub cluster: Option<ClusterVitals>,
    pub role: Role,
    /// A replica's primary (`master_host:master_port`) and whether its link is up.
    pub primary: Option<(String, u16, bool)>,
    /// A primary's replicas in state `online`.
    pub online_replicas: usize,
}

/// What a cluster member's `CLUSTER INFO` shows of the cluster's health.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterVitals {
    /// `cluster_state:ok`.
    pub state_ok: bool,
    /// `cluster_slots_assigned`, `_ok`, `_pfail`, `_fail`: a peer suspected or failed moves
    /// these first.
    pub slots: [u32; 4],
    /// `cluster_known_nodes` and `cluster_size` (primaries serving slots).
    pub known_nodes: u32,
    pub size: u32,
    /// `cluster_current_epoch`: moves with every failover and slot ownership change.
    pub current_epoch: u64,
}

impl Vitals {
    /// From the `CLUSTER INFO` reply (a cluster member's; `None` otherwise) and the `INFO
    /// replication` one.
    pub fn parse(cluster_info: Option<&str>, replication: &str) -> Result<Self, InfoError> {
        let replication = ReplicationInfo::parse(replication)?;
        Ok(Vitals {
            cluster: cluster_info.map(ClusterVitals::parse).transpose()?,
            role: replication.role,
            primary: replication
                .primary
                .map(|link| (link.host, link.port, link.link_up)),
            online_replicas: replication
                .replicas
                .iter()
                .filter(|r| r.state == "online")
                .count(),
        })
    }
}

impl ClusterVitals {
    fn parse(cluster_info: &str) -> Result<Self, InfoError> {
        let cluster = InfoFields::parse(cluster_info)?;
        Ok(ClusterVitals {
            state_ok: cluster.required("cluster_state")? == "ok",
            slots: [
                cluster.number("cluster_slots_assigned")?,
                cluster.number("cluster_slots_ok")?,
                cluster.number("cluster_slots_pfail")?,
                cluster.number("cluster_slots_fail")?,
            ],
            known_nodes: cluster.number("cluster_known_nodes")?,
            size: cluster.number("cluster_size")?,
            current_epoch: cluster.number("cluster_current_epoch")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `CLUSTER INFO` of a healthy member of a 3-shard cluster (Valkey 8.1).
    const HEALTHY: &str = "cluster_enabled:1\r\ncluster_state:ok\r\ncluster_slots_assigned:16384\r\n\
        cluster_slots_ok:16384\r\ncluster_slots_pfail:0\r\ncluster_slots_fail:0\r\n\
        cluster_known_nodes:6\r\ncluster_size:3\r\ncluster_current_epoch:7\r\ncluster_my_epoch:2\r\n\
        cluster_stats_messages_ping_sent:1834\r\ncluster_stats_messages_pong_sent:1799\r\n\
        cluster_stats_messages_sent:3633\r\ncluster_stats_messages_ping_received:1799\r\n\
        cluster_stats_messages_pong_received:1834\r\ncluster_stats_messages_received:3633\r\n\
        total_cluster_links_buffer_limit_exceeded:0\r\n";

    const REPLICA: &str = "# Replication\r\nrole:slave\r\nmaster_host:10.96.0.12\r\n\
        master_port:6379\r\nmaster_link_status:up\r\nmaster_last_io_seconds_ago:1\r\n\
        master_sync_in_progress:0\r\nslave_read_repl_offset:4410\r\nslave_repl_offset:4410\r\n\
        slave_priority:100\r\nslave_read_only:1\r\nreplica_announced:1\r\nconnected_slaves:0\r\n\
        master_failover_state:no-failover\r\nmaster_replid:5e3f0c\r\nmaster_repl_offset:4410\r\n";

    fn healthy() -> Vitals {
        Vitals::parse(Some(HEALTHY), REPLICA).unwrap()
    }

    #[test]
    fn reads_the_health_fields() {
        let v = healthy();
        let cluster = v.cluster.clone().unwrap();
        assert!(cluster.state_ok);
        assert_eq!(cluster.slots, [16384, 16384, 0, 0]);
        assert_eq!(
            (cluster.known_nodes, cluster.size, cluster.current_epoch),
            (6, 3, 7)
        );
        assert_eq!(v.role, Role::Replica);
        assert_eq!(v.primary, Some(("10.96.0.12".to_string(), 6379, true)));
        assert_eq!(v.online_replicas, 0);
    }

    #[test]
    fn traffic_and_gossip_change_nothing() {
        let busier = HEALTHY
            .replace("ping_sent:1834", "ping_sent:1901")
            .replace("messages_sent:3633", "messages_sent:3712");
        let later = REPLICA.replace("offset:4410", "offset:98231");
        assert_eq!(Vitals::parse(Some(&busier), &later).unwrap(), healthy());
    }

    #[test]
    fn a_suspected_peer_a_failed_state_or_a_lost_link_is_a_change() {
        let suspected = HEALTHY
            .replace("slots_ok:16384", "slots_ok:10923")
            .replace("slots_pfail:0", "slots_pfail:5461");
        assert_ne!(Vitals::parse(Some(&suspected), REPLICA).unwrap(), healthy());
        let failed = HEALTHY.replace("cluster_state:ok", "cluster_state:fail");
        let failed = Vitals::parse(Some(&failed), REPLICA).unwrap();
        assert!(!failed.cluster.unwrap().state_ok);
        let lost = REPLICA.replace("master_link_status:up", "master_link_status:down");
        assert_ne!(Vitals::parse(Some(HEALTHY), &lost).unwrap(), healthy());
        let promoted = HEALTHY.replace("current_epoch:7", "current_epoch:8");
        assert_ne!(Vitals::parse(Some(&promoted), REPLICA).unwrap(), healthy());
    }

    #[test]
    fn a_primary_counts_only_online_replicas() {
        let primary = "role:master\r\nconnected_slaves:2\r\n\
            slave0:ip=10.0.0.3,port=6379,state=online,offset=10,lag=0\r\n\
            slave1:ip=10.0.0.4,port=6379,state=wait_bgsave,offset=0,lag=0\r\n\
            master_repl_offset:10\r\n";
        let v = Vitals::parse(Some(HEALTHY), primary).unwrap();
        assert_eq!(
            (v.role, v.primary, v.online_replicas),
            (Role::Primary, None, 1)
        );
    }

    #[test]
    fn a_member_outside_cluster_mode_has_only_replication_vitals() {
        let v = Vitals::parse(None, REPLICA).unwrap();
        assert_eq!(v.cluster, None);
        assert_eq!(v.primary, Some(("10.96.0.12".to_string(), 6379, true)));
        let lost = REPLICA.replace("master_link_status:up", "master_link_status:down");
        assert_ne!(Vitals::parse(None, &lost).unwrap(), v);
        let later = REPLICA.replace("offset:4410", "offset:98231");
        assert_eq!(Vitals::parse(None, &later).unwrap(), v);
    }

    #[test]
    fn a_reply_without_the_state_is_an_error() {
        assert_eq!(
            Vitals::parse(Some("cluster_enabled:1\r\n"), REPLICA),
            Err(InfoError::MissingField("cluster_state"))
        );
    }
}
