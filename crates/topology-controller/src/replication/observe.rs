//! Asking a group's members over the [`Server`] and [`SentinelNode`] seams: a data node's INFO,
//! a sentinel's view of the group (SENTINEL MASTER, GET-MASTER-ADDR-BY-NAME, REPLICAS, SENTINELS), read into
//! the model.

use crd_types::template::REPLICATION_USER;

use crate::replication::model::{DataAnswer, Monitored, Peer, SentinelAnswer, SentinelOptions};
use crate::shared::commands::{ErrorKind, Fields, SentinelNode, Server, ValkeyError};
use crate::shared::connections::live_config;
use crate::shared::info::{ReplicationInfo, info_field, server_version};

/// Asks a data node: INFO replication and server in one round trip, then CONFIG GET of its
/// live directives and ACL GETUSER of its `replication` user.
pub async fn ask_data<V: Server>(conn: &V) -> Result<DataAnswer, ValkeyError> {
    let info = conn.info(&["replication", "server"]).await?;
    let version = server_version(&info).ok();
    let live_config = live_config(conn, version.as_deref()).await?;
    let replication_user = conn.acl_user(REPLICATION_USER).await.ok();
    Ok(DataAnswer {
        replication: ReplicationInfo::parse(&info).map_err(unreadable)?,
        run_id: info_field(&info, "run_id"),
        version,
        priority: info_field(&info, "slave_priority").and_then(|p| p.parse().ok()),
        live_config,
        replication_user,
    })
}

/// Asks a sentinel what it knows of group `name`.
pub async fn ask_sentinel<V: SentinelNode>(
    conn: &V,
    name: &str,
) -> Result<SentinelAnswer, ValkeyError> {
    let info = conn.info(&["server"]).await?;
    let (version, run_id) = (server_version(&info).ok(), info_field(&info, "run_id"));
    let Some(primary) = conn.sentinel_primary(name).await? else {
        return Ok(SentinelAnswer {
            version,
            run_id,
            monitored: None,
        });
    };
    let address = conn.sentinel_primary_addr(name).await?;
    let replicas = conn.sentinel_replicas(name).await?;
    let sentinels = conn.sentinel_sentinels(name).await?;
    Ok(SentinelAnswer {
        version,
        run_id,
        monitored: Some(monitored(&primary, address, &replicas, &sentinels)?),
    })
}

/// A sentinel's view from its SENTINEL replies. `address` (GET-MASTER-ADDR-BY-NAME) wins over
/// MASTER's own ip and port: mid-failover it already names the promoted replica.
pub fn monitored(
    primary: &Fields,
    address: Option<(String, u16)>,
    replicas: &[Fields],
    sentinels: &[Fields],
) -> Result<Monitored, ValkeyError> {
    let number = |field: &str| -> Result<u64, ValkeyError> {
        primary
            .get(field)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| unreadable(format!("SENTINEL MASTER has no number {field}")))
    };
    let primary_address = match address {
        Some(a) => a,
        None => peer(primary)?
            .map(|p| (p.ip, p.port))
            .ok_or_else(|| unreadable("SENTINEL MASTER has no ip and port".to_string()))?,
    };
    Ok(Monitored {
        primary: primary_address,
        flags: flags(primary),
        options: SentinelOptions {
            quorum: number("quorum")? as u32,
            down_after_ms: number("down-after-milliseconds")?,
            failover_timeout_ms: number("failover-timeout")?,
            parallel_syncs: number("parallel-syncs")? as u32,
        },
        replicas: peers(replicas)?,
        sentinels: peers(sentinels)?,
    })
}

fn peers(entries: &[Fields]) -> Result<Vec<Peer>, ValkeyError> {
    Ok(entries
        .iter()
        .map(peer)
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .flatten()
        .collect())
}

/// One entry: `ip`, `port`, `flags` and, for a replica, `slave-priority`. `None` for an
/// entry without an address (Sentinel marks a sentinel whose address it doubts with port 0).
fn peer(entry: &Fields) -> Result<Option<Peer>, ValkeyError> {
    let (Some(ip), Some(port)) = (entry.get("ip"), entry.get("port")) else {
        return Err(unreadable(format!("entry without ip and port: {entry:?}")));
    };
    let port: u16 = port
        .parse()
        .map_err(|_| unreadable(format!("bad port {port:?}")))?;
    if port == 0 {
        return Ok(None);
    }
    Ok(Some(Peer {
        ip: ip.clone(),
        port,
        flags: flags(entry),
        priority: entry.get("slave-priority").and_then(|p| p.parse().ok()),
    }))
}

fn flags(entry: &Fields) -> Vec<String> {
    entry
        .get("flags")
        .map(|f| {
            f.split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

fn unreadable(e: impl std::fmt::Display) -> ValkeyError {
    ValkeyError::new(ErrorKind::Protocol, e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pairs: &[(&str, &str)]) -> Fields {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// Abridged from valkey-sentinel 8.0.1.
    fn master() -> Fields {
        fields(&[
            ("name", "m"),
            ("ip", "10.96.0.1"),
            ("port", "6379"),
            ("flags", "master"),
            ("down-after-milliseconds", "5000"),
            ("quorum", "2"),
            ("failover-timeout", "60000"),
            ("parallel-syncs", "1"),
        ])
    }

    #[test]
    fn a_sentinels_view_is_read_from_its_replies() {
        let replicas = [
            fields(&[
                ("ip", "10.96.0.2"),
                ("port", "6379"),
                ("flags", "slave"),
                ("slave-priority", "100"),
            ]),
            fields(&[
                ("ip", "10.96.0.3"),
                ("port", "6379"),
                ("flags", "s_down,slave,disconnected"),
                ("slave-priority", "1"),
            ]),
        ];
        let sentinels = [
            fields(&[
                ("ip", "10.96.1.1"),
                ("port", "26379"),
                ("flags", "sentinel"),
            ]),
            fields(&[("ip", "10.96.1.2"), ("port", "0"), ("flags", "sentinel")]),
        ];
        let m = monitored(
            &master(),
            Some(("10.96.0.2".into(), 6379)),
            &replicas,
            &sentinels,
        )
        .unwrap();
        assert_eq!(
            m.primary,
            ("10.96.0.2".to_string(), 6379),
            "GET-MASTER-ADDR wins"
        );
        assert_eq!(m.options.quorum, 2);
        assert_eq!(m.options.down_after_ms, 5000);
        assert_eq!(m.replicas.len(), 2);
        assert!(!m.replicas[0].is_down() && m.replicas[1].is_down());
        assert_eq!(m.replicas[1].priority, Some(1));
        assert_eq!(m.sentinels.len(), 1, "an entry with port 0 has no address");
        assert!(!m.failing_over());
        let without_addr = monitored(&master(), None, &[], &[]).unwrap();
        assert_eq!(without_addr.primary, ("10.96.0.1".to_string(), 6379));
    }

    #[test]
    fn a_malformed_master_entry_is_refused() {
        let mut no_quorum = master();
        no_quorum.remove("quorum");
        let e = monitored(&no_quorum, None, &[], &[]).unwrap_err();
        assert!(e.message.contains("quorum"), "{e}");
    }
}
