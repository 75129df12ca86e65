//! An in-memory replication group behind the [`Server`] and [`SentinelNode`] traits: data nodes
//! (plain servers) and sentinels, answering the way Valkey 8.0 does where the controller depends on it.
//!
//! Data nodes: `INFO replication` and `server`, `ROLE`, `REPLICAOF` (a replica is in sync at
//! once), `CLIENT PAUSE WRITE` / `UNPAUSE` / `KILL`, `CONFIG SET replica-priority`. Cluster
//! commands are refused as a server without cluster support refuses them.
//!
//! Sentinels: `SENTINEL MASTER`, `GET-MASTER-ADDR-BY-NAME`, `REPLICAS`, `SENTINELS`,
//! `MONITOR`, `SET`, `RESET`. A sentinel finds replicas and other sentinels when asked for
//! them, as time passing does for a real one (replicas from the primary's INFO, sentinels
//! from hello messages): it adds the current ones and never forgets one until RESET.
//!
//! Data node `i` is at `10.96.0.<i>:6379`, sentinel `j` at `10.96.1.<j>:26379`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::replication::execute::QUIET_PING_PERIOD;
use crate::replication::model::{
    At, DEFAULT_PING_PERIOD, DataNode, Facts, Group, Members, Sentinel,
};
use crate::replication::observe::{ask_data, ask_sentinel};
use crate::replication::{PORT, SENTINEL_PORT};
use crate::shared::acl::{self, AclUser};
use crate::shared::commands::{ErrorKind, Fields, SentinelNode, Server, ValkeyError};
use crate::shared::connections::Connections;
use crate::shared::fake::{FAKE_VERSION, config_reply, live_defaults};

/// A data node's live directives at their defaults, but for the one a group's data nodes
/// start with from the spec's defaults (`minReplicasToWrite` 1 with replicas).
fn default_config(data_nodes: usize) -> BTreeMap<String, String> {
    let mut config = live_defaults(FAKE_VERSION);
    let to_write = if data_nodes > 1 { "1" } else { "0" };
    config.insert("min-replicas-to-write".into(), to_write.into());
    config
}

#[derive(Clone, Debug)]
struct Data {
    ip: String,
    /// The primary's address when a replica.
    primary: Option<String>,
    /// A primary's offset; a replica's when it has none.
    offset: i64,
    /// How far a replica's acknowledged offset stays behind its primary's.
    lag: i64,
    priority: u32,
    /// `repl-ping-replica-period`.
    ping_period: u32,
    /// The live directives as `CONFIG GET` reports them, at their defaults at first.
    config: BTreeMap<String, String>,
    paused: bool,
    killed: u64,
    answering: bool,
    run_id: String,
    /// ACL users by name, as `ACL GETUSER` shows them (none at start).
    users: BTreeMap<String, AclUser>,
}

#[derive(Clone, Debug)]
struct Monitor {
    name: String,
    primary: String,
    quorum: u32,
    down_after: u64,
    failover_timeout: u64,
    parallel_syncs: u32,
    auth_user: Option<String>,
    replicas: BTreeSet<String>,
    sentinels: BTreeSet<String>,
}

#[derive(Clone, Debug)]
struct SentinelState {
    ip: String,
    monitor: Option<Monitor>,
    answering: bool,
}

#[derive(Debug, Default)]
struct State {
    data: Vec<Data>,
    sentinels: Vec<SentinelState>,
    log: Vec<String>,
    /// Members that had to full-resync after a promotion.
    full_resyncs: usize,
    opened: usize,
    closed: usize,
}

impl State {
    /// What sentinel `j` finds now: the replicas of its primary and the sentinels that
    /// monitor the same name, added to what it knew.
    fn discover(&mut self, j: usize) {
        let Some(m) = &self.sentinels[j].monitor else {
            return;
        };
        let replicas: Vec<String> = self
            .data
            .iter()
            .filter(|d| d.primary.as_deref() == Some(m.primary.as_str()))
            .map(|d| d.ip.clone())
            .collect();
        let name = m.name.clone();
        let sentinels: Vec<String> = self
            .sentinels
            .iter()
            .enumerate()
            .filter(|(o, s)| *o != j && s.monitor.as_ref().is_some_and(|m| m.name == name))
            .map(|(_, s)| s.ip.clone())
            .collect();
        let m = self.sentinels[j].monitor.as_mut().expect("checked above");
        m.replicas.extend(replicas);
        m.sentinels.extend(sentinels);
    }
}

/// The group; clones share it.
#[derive(Clone, Debug, Default)]
pub struct FakeGroup {
    state: Arc<Mutex<State>>,
}

/// Which member a connection reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Who {
    Data(usize),
    Sentinel(usize),
}

/// A connection to one member of a [`FakeGroup`].
#[derive(Debug)]
pub struct FakeGroupConn {
    group: FakeGroup,
    who: Who,
}

impl FakeGroup {
    /// `data` data nodes, every one an empty primary, and `sentinels` sentinels that monitor
    /// nothing.
    pub fn new(data: usize, sentinels: usize) -> Self {
        let state = State {
            data: (0..data)
                .map(|i| Data {
                    ip: format!("10.96.0.{i}"),
                    primary: None,
                    offset: 0,
                    lag: 0,
                    priority: 100,
                    ping_period: DEFAULT_PING_PERIOD,
                    config: default_config(data),
                    paused: false,
                    killed: 0,
                    answering: true,
                    run_id: format!("{i:040x}"),
                    users: BTreeMap::new(),
                })
                .collect(),
            sentinels: (0..sentinels)
                .map(|j| SentinelState {
                    ip: format!("10.96.1.{j}"),
                    monitor: None,
                    answering: true,
                })
                .collect(),
            ..Default::default()
        };
        Self {
            state: Arc::new(Mutex::new(state)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Connects to the member at `ip:port`, as the controller does.
    pub fn connect(&self, ip: &str, port: u16) -> Result<FakeGroupConn, ValkeyError> {
        let mut state = self.lock();
        let who = if port == PORT {
            state
                .data
                .iter()
                .position(|d| d.ip == ip && d.answering)
                .map(Who::Data)
        } else if port == SENTINEL_PORT {
            state
                .sentinels
                .iter()
                .position(|s| s.ip == ip && s.answering)
                .map(Who::Sentinel)
        } else {
            None
        };
        let who = who.ok_or_else(|| {
            ValkeyError::new(
                ErrorKind::Unreachable,
                format!("{ip}:{port}: connection refused"),
            )
        })?;
        state.opened += 1;
        Ok(FakeGroupConn {
            group: self.clone(),
            who,
        })
    }

    /// A connection to data node `i`.
    pub fn conn_data(&self, i: usize) -> FakeGroupConn {
        let ip = self.lock().data[i].ip.clone();
        self.connect(&ip, PORT).expect("data node answers")
    }

    /// Data node `i` takes `writes` writes (its replicas follow at once); refused while its
    /// writes are paused.
    pub fn write(&self, i: usize, writes: i64) -> bool {
        let mut state = self.lock();
        if state.data[i].paused {
            return false;
        }
        state.data[i].offset += writes;
        true
    }

    /// Replica `i` acknowledges `lag` bytes less than its primary has.
    pub fn lag(&self, i: usize, lag: i64) {
        self.lock().data[i].lag = lag;
    }

    /// Whether data node `i`'s writes are paused.
    pub fn paused(&self, i: usize) -> bool {
        self.lock().data[i].paused
    }

    /// The address a majority of the sentinels name.
    pub fn named_primary(&self) -> Option<String> {
        let state = self.lock();
        let named: Vec<&str> = state
            .sentinels
            .iter()
            .filter_map(|s| s.monitor.as_ref().map(|m| m.primary.as_str()))
            .collect();
        named
            .iter()
            .find(|ip| named.iter().filter(|o| o == ip).count() * 2 > state.sentinels.len())
            .map(|ip| ip.to_string())
    }

    /// The primary address data node `i` replicates, if any.
    pub fn primary_of(&self, i: usize) -> Option<String> {
        self.lock().data[i].primary.clone()
    }

    /// How many members had to full-resync after a promotion.
    pub fn full_resyncs(&self) -> usize {
        self.lock().full_resyncs
    }

    /// How many times data node `i` disconnected its clients.
    pub fn clients_killed(&self, i: usize) -> u64 {
        self.lock().data[i].killed
    }

    /// Every command sent so far, as "<member address> <COMMAND ...>".
    pub fn log(&self) -> Vec<String> {
        self.lock().log.clone()
    }

    /// Connections opened and not yet closed.
    pub fn open_connections(&self) -> usize {
        let state = self.lock();
        state.opened - state.closed
    }
}

/// Asks every member of `group` as a reconcile does: the members (every one ready, at its
/// fake address) and their connections.
pub async fn observe_all(fake: &FakeGroup, group: &Group) -> (Members, Connections<FakeGroupConn>) {
    let (data_ips, sentinel_ips): (Vec<String>, Vec<String>) = {
        let state = fake.lock();
        (
            state.data.iter().map(|d| d.ip.clone()).collect(),
            state.sentinels.iter().map(|s| s.ip.clone()).collect(),
        )
    };
    let facts = |at: At, ip: &str| Facts {
        name: group.member_name(at),
        at,
        address: Some(ip.to_string()),
        ready: true,
        revisions: crate::shared::member_facts::Revisions {
            observed: true,
            ..Default::default()
        },
        pod: None,
    };
    let mut members = Members::default();
    let mut conns = Connections::default();
    for (i, ip) in data_ips.iter().enumerate() {
        let facts = facts(At::Data(i as u32), ip);
        let mut answer = None;
        if let Ok(conn) = fake.connect(ip, PORT)
            && let Ok(a) = ask_data(&conn).await
        {
            answer = Some(a);
            conns.insert(facts.name.clone(), conn);
        }
        members.data.push(DataNode { facts, answer });
    }
    for (j, ip) in sentinel_ips.iter().enumerate() {
        let facts = facts(At::Sentinel(j as u32), ip);
        let mut answer = None;
        if let Ok(conn) = fake.connect(ip, SENTINEL_PORT)
            && let Ok(a) = ask_sentinel(&conn, &group.name).await
        {
            answer = Some(a);
            conns.insert(facts.name.clone(), conn);
        }
        members.sentinels.push(Sentinel { facts, answer });
    }
    (members, conns)
}

fn refused(message: &str) -> ValkeyError {
    ValkeyError::new(ErrorKind::Refused, message)
}

fn fields(pairs: &[(&str, String)]) -> Fields {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

impl FakeGroupConn {
    /// Runs `command` on this connection's member under the group's lock.
    async fn run<T>(
        &self,
        text: String,
        command: impl FnOnce(&mut State, Who) -> Result<T, ValkeyError>,
    ) -> Result<T, ValkeyError> {
        let mut state = self.group.lock();
        let (ip, answering) = match self.who {
            Who::Data(i) => (state.data[i].ip.clone(), state.data[i].answering),
            Who::Sentinel(j) => (state.sentinels[j].ip.clone(), state.sentinels[j].answering),
        };
        if !answering {
            return Err(ValkeyError::new(
                ErrorKind::Unreachable,
                format!("{ip}: connection reset"),
            ));
        }
        state.log.push(format!("{ip} {text}"));
        command(&mut state, self.who)
    }

    /// Runs a data node command; a sentinel refuses it as unknown.
    async fn data<T>(
        &self,
        text: String,
        command: impl FnOnce(&mut State, usize) -> Result<T, ValkeyError>,
    ) -> Result<T, ValkeyError> {
        let name = text.split(' ').next().unwrap_or_default().to_string();
        self.run(text, move |state, who| match who {
            Who::Data(i) => command(state, i),
            Who::Sentinel(_) => Err(refused(&format!("ERR unknown command '{name}'"))),
        })
        .await
    }

    /// Runs a SENTINEL command; a data node refuses it as unknown.
    async fn sentinel<T>(
        &self,
        text: String,
        command: impl FnOnce(&mut State, usize) -> Result<T, ValkeyError>,
    ) -> Result<T, ValkeyError> {
        self.run(format!("SENTINEL {text}"), move |state, who| match who {
            Who::Sentinel(j) => command(state, j),
            Who::Data(_) => Err(refused("ERR unknown command 'SENTINEL'")),
        })
        .await
    }

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

    fn replication_text(state: &State, i: usize) -> String {
        let node = &state.data[i];
        match &node.primary {
            Some(primary) => {
                let p = state.data.iter().find(|d| &d.ip == primary);
                let up = p.is_some_and(|p| p.answering);
                let offset = p.map_or(node.offset, |p| p.offset - node.lag);
                format!(
                    "# Replication\r\nrole:slave\r\nmaster_host:{primary}\r\nmaster_port:{PORT}\r\n\
                     master_link_status:{}\r\nmaster_sync_in_progress:0\r\n\
                     slave_repl_offset:{offset}\r\nslave_priority:{}\r\nconnected_slaves:0\r\n\
                     master_repl_offset:{offset}\r\n",
                    if up { "up" } else { "down" },
                    node.priority,
                )
            }
            None => {
                let replicas: Vec<&Data> = state
                    .data
                    .iter()
                    .filter(|d| d.primary.as_deref() == Some(node.ip.as_str()) && d.answering)
                    .collect();
                let mut text = format!(
                    "# Replication\r\nrole:master\r\nconnected_slaves:{}\r\n",
                    replicas.len()
                );
                for (n, r) in replicas.iter().enumerate() {
                    text.push_str(&format!(
                        "slave{n}:ip={},port={PORT},state=online,offset={},lag=0\r\n",
                        r.ip,
                        node.offset - r.lag
                    ));
                }
                text.push_str(&format!("master_repl_offset:{}\r\n", node.offset));
                text
            }
        }
    }
}

impl Server for FakeGroupConn {
    async fn info(&self, sections: &[&'static str]) -> Result<String, ValkeyError> {
        let wanted = sections.to_vec();
        self.run(format!("INFO {}", sections.join(" ")), move |state, who| {
            let mut text = String::new();
            if wanted.contains(&"server") {
                let run_id = match who {
                    Who::Data(i) => state.data[i].run_id.clone(),
                    Who::Sentinel(j) => format!("{:040x}", 1000 + j),
                };
                text.push_str(&format!(
                    "# Server\r\nvalkey_version:8.0.1\r\nrun_id:{run_id}\r\n"
                ));
            }
            if let (true, Who::Data(i)) = (wanted.contains(&"replication"), who) {
                text.push_str(&Self::replication_text(state, i));
            }
            Ok(text)
        })
        .await
    }

    async fn role(&self) -> Result<String, ValkeyError> {
        self.run("ROLE".into(), |state, who| {
            Ok(match who {
                Who::Data(i) if state.data[i].primary.is_some() => "slave",
                Who::Data(_) => "master",
                Who::Sentinel(_) => "sentinel",
            }
            .to_string())
        })
        .await
    }

    async fn replica_of(&self, primary: Option<(&str, u16)>) -> Result<(), ValkeyError> {
        let primary = primary.map(|(ip, port)| (ip.to_string(), port));
        let text = match &primary {
            Some((ip, port)) => format!("REPLICAOF {ip} {port}"),
            None => "REPLICAOF NO ONE".into(),
        };
        self.data(text, move |state, i| {
            match primary {
                Some((ip, _)) => {
                    let offset = state.data.iter().find(|d| d.ip == ip).map(|p| p.offset);
                    let node = &mut state.data[i];
                    node.primary = Some(ip);
                    node.offset = offset.unwrap_or(node.offset);
                }
                None => {
                    // It keeps what it replicated.
                    let primary = state.data[i].primary.take();
                    let offset = primary
                        .and_then(|ip| state.data.iter().find(|d| d.ip == ip))
                        .map(|p| p.offset);
                    let node = &mut state.data[i];
                    node.offset = offset.unwrap_or(node.offset);
                }
            }
            Ok(())
        })
        .await
    }

    async fn pause_writes(&self, millis: u64) -> Result<(), ValkeyError> {
        self.data(format!("CLIENT PAUSE {millis} WRITE"), |state, i| {
            state.data[i].paused = true;
            Ok(())
        })
        .await
    }

    async fn unpause(&self) -> Result<(), ValkeyError> {
        self.data("CLIENT UNPAUSE".into(), |state, i| {
            state.data[i].paused = false;
            Ok(())
        })
        .await
    }

    async fn kill_clients(&self) -> Result<u64, ValkeyError> {
        self.data("CLIENT KILL TYPE normal".into(), |state, i| {
            state.data[i].killed += 1;
            Ok(1)
        })
        .await
    }

    async fn config_get(&self, names: &[&str]) -> Result<Vec<(String, String)>, ValkeyError> {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        self.data(
            format!("CONFIG GET {}", names.join(" ")),
            move |state, i| Ok(config_reply(&state.data[i].config, &names)),
        )
        .await
    }

    async fn config_set(&self, name: &str, value: &str) -> Result<(), ValkeyError> {
        let (name, value) = (name.to_string(), value.to_string());
        self.data(
            format!("CONFIG SET {name} {value}"),
            move |state, i| match name.as_str() {
                "replica-priority" => {
                    state.data[i].priority =
                        value.parse().map_err(|_| refused("ERR Invalid argument"))?;
                    Ok(())
                }
                "repl-ping-replica-period" => {
                    state.data[i].ping_period =
                        value.parse().map_err(|_| refused("ERR Invalid argument"))?;
                    Ok(())
                }
                other => match state.data[i].config.get_mut(other) {
                    Some(slot) => {
                        *slot = value;
                        Ok(())
                    }
                    None => Err(refused(&format!(
                        "ERR Unknown option or number of arguments for CONFIG SET - '{other}'"
                    ))),
                },
            },
        )
        .await
    }

    async fn acl_user(&self, user: &str) -> Result<Option<AclUser>, ValkeyError> {
        let user = user.to_string();
        self.data(format!("ACL GETUSER {user}"), move |state, i| {
            Ok(state.data[i].users.get(&user).cloned())
        })
        .await
    }

    async fn acl_setuser(&self, user: &str, rules: &[String]) -> Result<(), ValkeyError> {
        let (user, rules) = (user.to_string(), rules.to_vec());
        self.data(format!("ACL SETUSER {user}"), move |state, i| {
            let users = &mut state.data[i].users;
            let changed = acl::set_user(users.remove(&user), &rules);
            users.insert(user, changed);
            Ok(())
        })
        .await
    }

    async fn close(self) {
        self.group.lock().closed += 1;
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
