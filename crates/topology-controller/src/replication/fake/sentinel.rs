//! The SENTINEL commands ([`SentinelNode`]); a data node refuses them.

use std::collections::BTreeSet;

use super::{FakeGroupConn, Monitor, State, refused};
use crate::replication::execute::QUIET_PING_PERIOD;
use crate::replication::{PORT, SENTINEL_PORT};
use crate::shared::commands::{Fields, SentinelNode, ValkeyError};

fn fields(pairs: &[(&str, String)]) -> Fields {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}
impl FakeGroupConn {
    /// Sentinel `j`'s monitor of `name`, or the error Sentinel gives.
    fn monitor_of<'a>(
        state: &'a mut State,
        j: usize,
        name: &str,
    ) -> Result<&'a mut Monitor, ValkeyError> {
        state.sentinels[j]
            .monitor
            .as_mut()
            .filter(|m| m.name == name)
            .ok_or_else(|| refused("ERR No such master with that name"))
    }
}

impl SentinelNode for FakeGroupConn {
    async fn sentinel_primary(&self, name: &str) -> Result<Option<Fields>, ValkeyError> {
        let name = name.to_string();
        self.sentinel(format!("MASTER {name}"), move |state, j| {
            let Some(m) = state.sentinels[j]
                .monitor
                .as_ref()
                .filter(|m| m.name == name)
            else {
                return Ok(None);
            };
            Ok(Some(fields(&[
                ("name", m.name.clone()),
                ("ip", m.primary.clone()),
                ("port", PORT.to_string()),
                ("flags", "master".into()),
                ("quorum", m.quorum.to_string()),
                ("down-after-milliseconds", m.down_after.to_string()),
                ("failover-timeout", m.failover_timeout.to_string()),
                ("parallel-syncs", m.parallel_syncs.to_string()),
            ])))
        })
        .await
    }

    async fn sentinel_primary_addr(
        &self,
        name: &str,
    ) -> Result<Option<(String, u16)>, ValkeyError> {
        let name = name.to_string();
        self.sentinel(
            format!("GET-MASTER-ADDR-BY-NAME {name}"),
            move |state, j| {
                Ok(state.sentinels[j]
                    .monitor
                    .as_ref()
                    .filter(|m| m.name == name)
                    .map(|m| (m.primary.clone(), PORT)))
            },
        )
        .await
    }

    async fn sentinel_replicas(&self, name: &str) -> Result<Vec<Fields>, ValkeyError> {
        let name = name.to_string();
        self.sentinel(format!("REPLICAS {name}"), move |state, j| {
            Self::monitor_of(state, j, &name)?;
            state.discover(j);
            let m = state.sentinels[j].monitor.as_ref().expect("checked above");
            Ok(m.replicas
                .iter()
                .map(|ip| {
                    let data = state.data.iter().find(|d| &d.ip == ip);
                    let down = data.is_none_or(|d| !d.answering);
                    fields(&[
                        ("ip", ip.clone()),
                        ("port", PORT.to_string()),
                        (
                            "flags",
                            if down {
                                "s_down,slave,disconnected"
                            } else {
                                "slave"
                            }
                            .into(),
                        ),
                        (
                            "slave-priority",
                            data.map_or(100, |d| d.priority).to_string(),
                        ),
                    ])
                })
                .collect())
        })
        .await
    }

    async fn sentinel_sentinels(&self, name: &str) -> Result<Vec<Fields>, ValkeyError> {
        let name = name.to_string();
        self.sentinel(format!("SENTINELS {name}"), move |state, j| {
            Self::monitor_of(state, j, &name)?;
            state.discover(j);
            let m = state.sentinels[j].monitor.as_ref().expect("checked above");
            Ok(m.sentinels
                .iter()
                .map(|ip| {
                    fields(&[
                        ("ip", ip.clone()),
                        ("port", SENTINEL_PORT.to_string()),
                        ("flags", "sentinel".into()),
                    ])
                })
                .collect())
        })
        .await
    }

    async fn sentinel_monitor(
        &self,
        name: &str,
        ip: &str,
        port: u16,
        quorum: u32,
    ) -> Result<(), ValkeyError> {
        let (name, ip) = (name.to_string(), ip.to_string());
        self.sentinel(
            format!("MONITOR {name} {ip} {port} {quorum}"),
            move |state, j| {
                if state.sentinels[j].monitor.is_some() {
                    return Err(refused("ERR Duplicated master name"));
                }
                state.sentinels[j].monitor = Some(Monitor {
                    name,
                    primary: ip,
                    quorum,
                    down_after: 30_000,
                    failover_timeout: 180_000,
                    parallel_syncs: 1,
                    auth_user: None,
                    replicas: BTreeSet::new(),
                    sentinels: BTreeSet::new(),
                });
                Ok(())
            },
        )
        .await
    }

    async fn sentinel_set(
        &self,
        name: &str,
        options: &[(String, String)],
    ) -> Result<(), ValkeyError> {
        let name = name.to_string();
        let options = options.to_vec();
        let shown: Vec<String> = options
            .iter()
            .map(|(k, v)| {
                if k == "auth-pass" {
                    format!("{k} <redacted>")
                } else {
                    format!("{k} {v}")
                }
            })
            .collect();
        self.sentinel(
            format!("SET {name} {}", shown.join(" ")),
            move |state, j| {
                let m = Self::monitor_of(state, j, &name)?;
                for (option, value) in options {
                    let number = || {
                        value
                            .parse::<u64>()
                            .map_err(|_| refused("ERR Invalid argument"))
                    };
                    match option.as_str() {
                        "quorum" => m.quorum = number()? as u32,
                        "down-after-milliseconds" => m.down_after = number()?,
                        "failover-timeout" => m.failover_timeout = number()?,
                        "parallel-syncs" => m.parallel_syncs = number()? as u32,
                        "auth-user" => m.auth_user = Some(value),
                        "auth-pass" => {}
                        other => return Err(refused(&format!("ERR Invalid argument '{other}'"))),
                    }
                }
                Ok(())
            },
        )
        .await
    }

    async fn sentinel_remove(&self, name: &str) -> Result<(), ValkeyError> {
        let name = name.to_string();
        self.sentinel(format!("REMOVE {name}"), move |state, j| {
            Self::monitor_of(state, j, &name)?;
            state.sentinels[j].monitor = None;
            Ok(())
        })
        .await
    }

    async fn sentinel_reset(&self, name: &str) -> Result<(), ValkeyError> {
        let name = name.to_string();
        self.sentinel(format!("RESET {name}"), move |state, j| {
            if let Ok(m) = Self::monitor_of(state, j, &name) {
                m.replicas.clear();
                m.sentinels.clear();
            }
            Ok(())
        })
        .await
    }

    /// Promotes the replica Sentinel would (lowest non-zero priority, then highest
    /// offset, then run id), moves the other replicas to it and tells every sentinel; the
    /// old primary is left serving, as Sentinel converts it only later.
    async fn sentinel_failover(&self, name: &str) -> Result<(), ValkeyError> {
        let name = name.to_string();
        self.sentinel(format!("FAILOVER {name}"), move |state, j| {
            let old = Self::monitor_of(state, j, &name)?.primary.clone();
            let primary_offset = state
                .data
                .iter()
                .find(|d| d.ip == old)
                .map_or(0, |p| p.offset);
            let chosen = state
                .data
                .iter()
                .enumerate()
                .filter(|(_, d)| {
                    d.primary.as_deref() == Some(old.as_str()) && d.answering && d.priority > 0
                })
                .min_by_key(|(_, d)| (d.priority, d.lag, d.run_id.clone()))
                .map(|(i, _)| i)
                .ok_or_else(|| refused("NOGOODSLAVE No suitable replica to promote"))?;
            let new = state.data[chosen].ip.clone();
            // The worst case of a primary that still pings: a PING after the promotion
            // puts the old primary and the replicas still following it ahead of the new
            // primary, so each full-resyncs once moved.
            let pinging = state
                .data
                .iter()
                .any(|d| d.ip == old && d.ping_period != QUIET_PING_PERIOD);
            if pinging {
                state.full_resyncs += state
                    .data
                    .iter()
                    .filter(|d| {
                        d.ip == old || (d.primary.as_deref() == Some(old.as_str()) && d.ip != new)
                    })
                    .count();
            }
            for d in &mut state.data {
                if d.ip == new {
                    d.primary = None;
                    d.offset = primary_offset - d.lag;
                    d.lag = 0;
                } else if d.primary.as_deref() == Some(old.as_str()) {
                    d.primary = Some(new.clone());
                }
            }
            for s in &mut state.sentinels {
                if let Some(m) = s.monitor.as_mut().filter(|m| m.name == name) {
                    m.primary = new.clone();
                }
            }
            Ok(())
        })
        .await
    }
}
