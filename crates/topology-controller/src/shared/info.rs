//! Parser (layer 1): `INFO replication`, the version in `INFO server`, and the state in
//! `CLUSTER INFO`, as Valkey 8 prints them.

use std::collections::BTreeMap;

use crd_types::node::Role;

/// INFO text that does not have the expected shape.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InfoError {
    #[error("malformed INFO line ({reason}): {line:?}")]
    Line { line: String, reason: String },
    #[error("INFO has no {0} field")]
    MissingField(&'static str),
}

/// `INFO replication`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicationInfo {
    /// `role`: master is [`Role::Primary`], slave [`Role::Replica`].
    pub role: Role,
    /// `connected_slaves`.
    pub connected_replicas: u32,
    /// The `slaveN` lines.
    pub replicas: Vec<ConnectedReplica>,
    /// `master_repl_offset`: this node's replication offset.
    pub repl_offset: i64,
    /// The `master_*` and `slave_repl_offset` fields; `Some` on a replica.
    pub primary: Option<PrimaryLink>,
}

/// A `slaveN:ip=...,port=...,state=...,offset=...,lag=...` line of a primary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectedReplica {
    pub ip: String,
    pub port: u16,
    /// `online` once in sync; `wait_bgsave`, `send_bulk`... before.
    pub state: String,
    pub offset: i64,
    /// Seconds since the replica last acknowledged.
    pub lag: i64,
}

/// A replica's link to its primary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrimaryLink {
    /// `master_host`.
    pub host: String,
    /// `master_port`.
    pub port: u16,
    /// `master_link_status:up`.
    pub link_up: bool,
    /// `master_sync_in_progress:1`: a full sync is running.
    pub sync_in_progress: bool,
    /// `slave_repl_offset`: how far this replica has applied the stream.
    pub repl_offset: i64,
}

impl ReplicationInfo {
    /// Parses the `INFO replication` reply (`\r\n` or `\n` line ends; other sections are
    /// fine too).
    pub fn parse(text: &str) -> Result<Self, InfoError> {
        let fields = InfoFields::parse(text)?;
        let role = match fields.required("role")? {
            "master" | "primary" => Role::Primary,
            "slave" | "replica" => Role::Replica,
            other => return Err(info_error("role", other, "expected master or slave")),
        };
        let primary = match role {
            Role::Replica => Some(PrimaryLink {
                host: fields.required("master_host")?.to_string(),
                port: fields.number("master_port")?,
                link_up: fields.required("master_link_status")? == "up",
                sync_in_progress: fields.number::<u8>("master_sync_in_progress")? != 0,
                repl_offset: fields.number("slave_repl_offset")?,
            }),
            _ => None,
        };
        let mut numbered: Vec<(u32, &str, &str)> = fields
            .0
            .iter()
            .filter_map(|(&key, &value)| Some((replica_index(key)?, key, value)))
            .collect();
        // slave10 sorts before slave2 as text.
        numbered.sort_unstable_by_key(|&(index, _, _)| index);
        let replicas = numbered
            .into_iter()
            .map(|(_, key, value)| parse_connected_replica(key, value))
            .collect::<Result<_, _>>()?;
        Ok(ReplicationInfo {
            role,
            connected_replicas: fields.number("connected_slaves")?,
            replicas,
            repl_offset: fields.number("master_repl_offset")?,
            primary,
        })
    }
}

impl ReplicationInfo {
    /// Why this primary cannot count on all `expected` replicas (its own CLUSTER NODES
    /// count) receiving what it sends right now; `None` when every one is `online`. Valkey
    /// copies slot states only to online replicas. Replicas are counted, not matched by
    /// address: a `slaveN` line shows the address the replica connects from (its pod IP in
    /// cluster mode), not the one it announces.
    pub fn replicas_not_online(&self, expected: usize) -> Option<String> {
        if let Some(r) = self.replicas.iter().find(|r| r.state != "online") {
            return Some(format!(
                "a replica (connected from {}:{}) is {}",
                r.ip, r.port, r.state
            ));
        }
        let online = self.replicas.len();
        (online < expected).then(|| format!("{online} of {expected} replicas are connected"))
    }
}

/// The server version from `INFO server`: `valkey_version`, or `redis_version` from a server
/// that predates it (Valkey also reports `redis_version:7.2.4` for client compatibility).
pub fn server_version(info: &str) -> Result<String, InfoError> {
    let fields = InfoFields::parse(info)?;
    fields
        .get("valkey_version")
        .or_else(|| fields.get("redis_version"))
        .map(str::to_string)
        .ok_or(InfoError::MissingField("valkey_version"))
}

/// One `key:value` field of an INFO reply (`run_id`, `slave_priority`...), if present.
pub fn info_field(info: &str, key: &str) -> Option<String> {
    InfoFields::parse(info).ok()?.get(key).map(str::to_string)
}

/// Whether `CLUSTER INFO` says `cluster_state:ok`: the node serves its slots. A node just
/// given slots, or one rejoining after a partition, still answers CLUSTERDOWN for a moment.
pub fn cluster_state_ok(cluster_info: &str) -> Result<bool, InfoError> {
    InfoFields::parse(cluster_info)?
        .get("cluster_state")
        .map(|state| state == "ok")
        .ok_or(InfoError::MissingField("cluster_state"))
}

/// `key:value` lines of an INFO reply, in key order.
pub(crate) struct InfoFields<'a>(BTreeMap<&'a str, &'a str>);

impl<'a> InfoFields<'a> {
    pub(crate) fn parse(text: &'a str) -> Result<Self, InfoError> {
        let mut fields = BTreeMap::new();
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (key, value) = line.split_once(':').ok_or_else(|| InfoError::Line {
                line: line.to_string(),
                reason: "no ':'".to_string(),
            })?;
            fields.insert(key, value);
        }
        Ok(InfoFields(fields))
    }

    pub(crate) fn get(&self, key: &str) -> Option<&'a str> {
        self.0.get(key).copied()
    }

    pub(crate) fn required(&self, key: &'static str) -> Result<&'a str, InfoError> {
        self.get(key).ok_or(InfoError::MissingField(key))
    }

    pub(crate) fn number<T: std::str::FromStr>(&self, key: &'static str) -> Result<T, InfoError> {
        let value = self.required(key)?;
        value
            .parse()
            .map_err(|_| info_error(key, value, "not a number"))
    }
}

fn info_error(key: &str, value: &str, reason: &str) -> InfoError {
    InfoError::Line {
        line: format!("{key}:{value}"),
        reason: reason.to_string(),
    }
}

/// N of a `slaveN` key.
fn replica_index(key: &str) -> Option<u32> {
    key.strip_prefix("slave")?.parse().ok()
}

fn parse_connected_replica(key: &str, value: &str) -> Result<ConnectedReplica, InfoError> {
    let attributes: BTreeMap<&str, &str> = value
        .split(',')
        .filter_map(|attribute| attribute.split_once('='))
        .collect();
    let bad = |reason: &str| info_error(key, value, reason);
    let field = |name: &str| {
        attributes
            .get(name)
            .copied()
            .ok_or_else(|| bad(&format!("no {name}")))
    };
    let number = |name: &str| {
        field(name)?
            .parse()
            .map_err(|_| bad(&format!("bad {name}")))
    };
    Ok(ConnectedReplica {
        ip: field("ip")?.to_string(),
        port: field("port")?.parse().map_err(|_| bad("bad port"))?,
        state: field("state")?.to_string(),
        offset: number("offset")?,
        lag: number("lag")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `INFO replication` of 7101, a primary with one replica.
    const INFO_PRIMARY: &str = "\
        # Replication\r\n\
        role:master\r\n\
        connected_slaves:1\r\n\
        slave0:ip=127.0.0.1,port=7104,state=online,offset=0,lag=1,type=replica\r\n\
        replicas_waiting_psync:0\r\n\
        master_failover_state:no-failover\r\n\
        master_replid:136d5a4585a71da00cf81a4d5c6421eb2f525331\r\n\
        master_replid2:0000000000000000000000000000000000000000\r\n\
        master_repl_offset:0\r\n\
        second_repl_offset:-1\r\n\
        repl_backlog_active:1\r\n\
        repl_backlog_size:10485760\r\n\
        repl_backlog_first_byte_offset:1\r\n\
        repl_backlog_histlen:0\r\n\
    ";

    /// `INFO replication` of 7104, its replica.
    const INFO_REPLICA: &str = "\
        # Replication\r\n\
        role:slave\r\n\
        master_host:127.0.0.1\r\n\
        master_port:7101\r\n\
        master_link_status:up\r\n\
        master_last_io_seconds_ago:1\r\n\
        master_sync_in_progress:0\r\n\
        slave_read_repl_offset:0\r\n\
        slave_repl_offset:0\r\n\
        replicas_repl_buffer_size:0\r\n\
        replicas_repl_buffer_peak:0\r\n\
        slave_priority:100\r\n\
        slave_read_only:1\r\n\
        replica_announced:1\r\n\
        connected_slaves:0\r\n\
        replicas_waiting_psync:0\r\n\
        master_failover_state:no-failover\r\n\
        master_replid:136d5a4585a71da00cf81a4d5c6421eb2f525331\r\n\
        master_replid2:0000000000000000000000000000000000000000\r\n\
        master_repl_offset:0\r\n\
        second_repl_offset:-1\r\n\
        repl_backlog_active:1\r\n\
        repl_backlog_size:10485760\r\n\
        repl_backlog_first_byte_offset:1\r\n\
        repl_backlog_histlen:0\r\n\
    ";

    /// `INFO replication` of 7101 just restarted as a replica of 7104, not connected yet.
    const INFO_REPLICA_LINK_DOWN: &str = "\
        # Replication\r\n\
        role:slave\r\n\
        master_host:127.0.0.1\r\n\
        master_port:7104\r\n\
        master_link_status:down\r\n\
        master_last_io_seconds_ago:-1\r\n\
        master_sync_in_progress:0\r\n\
        slave_read_repl_offset:0\r\n\
        slave_repl_offset:0\r\n\
        replicas_repl_buffer_size:0\r\n\
        replicas_repl_buffer_peak:0\r\n\
        master_link_down_since_seconds:-1\r\n\
        slave_priority:100\r\n\
        slave_read_only:1\r\n\
        replica_announced:1\r\n\
        connected_slaves:0\r\n\
        replicas_waiting_psync:0\r\n\
        master_failover_state:no-failover\r\n\
        master_replid:865d2d5a2d64eb0558815fd747904f4acaad3b38\r\n\
        master_replid2:0000000000000000000000000000000000000000\r\n\
        master_repl_offset:0\r\n\
        second_repl_offset:-1\r\n\
        repl_backlog_active:0\r\n\
        repl_backlog_size:10485760\r\n\
        repl_backlog_first_byte_offset:0\r\n\
        repl_backlog_histlen:0\r\n\
    ";

    /// The start of `INFO server` from Valkey 8.0.1.
    const INFO_SERVER: &str = "\
        # Server\r\n\
        redis_version:7.2.4\r\n\
        server_name:valkey\r\n\
        valkey_version:8.0.1\r\n\
        redis_git_sha1:00000000\r\n\
        redis_git_dirty:0\r\n\
        redis_build_id:39f7c371e0a96e3d\r\n\
        server_mode:cluster\r\n\
    ";

    #[test]
    fn reads_a_primarys_replication() {
        let info = ReplicationInfo::parse(INFO_PRIMARY).unwrap();
        assert_eq!(
            info,
            ReplicationInfo {
                role: Role::Primary,
                connected_replicas: 1,
                replicas: vec![ConnectedReplica {
                    ip: "127.0.0.1".to_string(),
                    port: 7104,
                    state: "online".to_string(),
                    offset: 0,
                    lag: 1,
                }],
                repl_offset: 0,
                primary: None,
            }
        );
    }

    #[test]
    fn reads_a_replicas_replication() {
        let info = ReplicationInfo::parse(INFO_REPLICA).unwrap();
        assert_eq!(info.role, Role::Replica);
        assert_eq!((info.connected_replicas, info.replicas.len()), (0, 0));
        assert_eq!(
            info.primary,
            Some(PrimaryLink {
                host: "127.0.0.1".to_string(),
                port: 7101,
                link_up: true,
                sync_in_progress: false,
                repl_offset: 0,
            })
        );

        let down = ReplicationInfo::parse(INFO_REPLICA_LINK_DOWN).unwrap();
        let link = down.primary.unwrap();
        assert_eq!((link.port, link.link_up), (7104, false));

        let syncing = INFO_REPLICA_LINK_DOWN
            .replace("master_sync_in_progress:0", "master_sync_in_progress:1")
            .replace("slave_repl_offset:0", "slave_repl_offset:1234");
        let link = ReplicationInfo::parse(&syncing).unwrap().primary.unwrap();
        assert!(link.sync_in_progress);
        assert_eq!(link.repl_offset, 1234);
    }

    #[test]
    fn reads_replicas_in_order_and_large_offsets() {
        let info = "role:master\nconnected_slaves:3\n\
            slave0:ip=10.0.0.5,port=6379,state=online,offset=9000000000,lag=0\n\
            slave10:ip=10.0.0.7,port=6379,state=send_bulk,offset=0,lag=0\n\
            slave1:ip=10.0.0.6,port=6379,state=wait_bgsave,offset=0,lag=3\n\
            master_repl_offset:9000000123\n";
        let info = ReplicationInfo::parse(info).unwrap();
        assert_eq!(info.repl_offset, 9_000_000_123);
        let states: Vec<(&str, &str, i64)> = info
            .replicas
            .iter()
            .map(|r| (r.ip.as_str(), r.state.as_str(), r.offset))
            .collect();
        assert_eq!(
            states,
            [
                ("10.0.0.5", "online", 9_000_000_000),
                ("10.0.0.6", "wait_bgsave", 0),
                ("10.0.0.7", "send_bulk", 0),
            ]
        );
    }

    #[test]
    fn malformed_replication_info_is_refused() {
        assert_eq!(
            ReplicationInfo::parse("# Replication\r\nconnected_slaves:0\r\n"),
            Err(InfoError::MissingField("role"))
        );
        let no_host = INFO_REPLICA.replace("master_host:127.0.0.1\r\n", "");
        assert_eq!(
            ReplicationInfo::parse(&no_host),
            Err(InfoError::MissingField("master_host"))
        );
        let bad_port = INFO_REPLICA.replace("master_port:7101", "master_port:seventy");
        assert_eq!(
            ReplicationInfo::parse(&bad_port).unwrap_err().to_string(),
            "malformed INFO line (not a number): \"master_port:seventy\""
        );
        let bad_replica = INFO_PRIMARY.replace("port=7104,", "");
        let error = ReplicationInfo::parse(&bad_replica)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("no port") && error.contains("slave0:ip=127.0.0.1,state=online"),
            "{error}"
        );
        let no_colon = format!("{INFO_PRIMARY}garbage\r\n");
        assert!(
            matches!(ReplicationInfo::parse(&no_colon), Err(InfoError::Line { line, .. }) if line == "garbage")
        );
        let sentinel = INFO_PRIMARY.replace("role:master", "role:sentinel");
        assert!(ReplicationInfo::parse(&sentinel).is_err());
    }

    #[test]
    fn reads_the_cluster_state() {
        let info = "cluster_enabled:1\r\ncluster_state:ok\r\ncluster_slots_assigned:16384\r\n";
        assert_eq!(cluster_state_ok(info), Ok(true));
        assert_eq!(cluster_state_ok("cluster_state:fail\r\n"), Ok(false));
        assert_eq!(
            cluster_state_ok("cluster_enabled:1\r\n"),
            Err(InfoError::MissingField("cluster_state"))
        );
    }

    #[test]
    fn reads_the_server_version() {
        assert_eq!(server_version(INFO_SERVER).unwrap(), "8.0.1");
        assert_eq!(
            server_version("# Server\r\nredis_version:7.2.4\r\n").unwrap(),
            "7.2.4"
        );
        assert_eq!(
            server_version("# Server\r\nos:Linux\r\n"),
            Err(InfoError::MissingField("valkey_version"))
        );
    }
}
