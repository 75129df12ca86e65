//! An in-memory replication group behind the [`Server`](crate::shared::commands::Server) and
//! [`SentinelNode`](crate::shared::commands::SentinelNode) traits: data nodes (plain servers)
//! and sentinels, answering the way Valkey 8.0 does where the controller depends on it.
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
//!
//! This file holds the group's state and what a test sets up and reads; `server` and
//! `sentinel` hold the commands of each role trait.

mod sentinel;
mod server;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::replication::model::{
    At, DEFAULT_PING_PERIOD, DataNode, Facts, Group, Members, Sentinel,
};
use crate::replication::observe::{ask_data, ask_sentinel};
use crate::replication::{PORT, SENTINEL_PORT};
use crate::shared::acl::AclUser;
use crate::shared::commands::{ErrorKind, ValkeyError};
use crate::shared::connections::Connections;
use crate::shared::fake::{FAKE_VERSION, live_defaults};

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
        told_monitored: true,
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
}
