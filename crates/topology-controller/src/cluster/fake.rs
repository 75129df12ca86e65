//! An in-memory Valkey cluster behind the [`Server`](crate::shared::commands::Server) and
//! [`ClusterNode`](crate::shared::commands::ClusterNode) traits, for tests of the code that
//! talks to members (asking them, moving slots, carrying out steps) without a server.
//!
//! It answers the way Valkey 8.0 does where this controller depends on it: `CLUSTER NODES`
//! text (open-slot markers on the myself line only), `INFO replication` with each replica's
//! `state`, `SETSLOT` refused on replicas and replicated by a primary only to replicas that
//! are online at that moment (valkey-io/valkey#998), `MIGRATE` moving keys between nodes,
//! `CLUSTER FAILOVER` swapping a replica and its primary. Slot ownership is one shared truth
//! (gossip is instant here); open-slot markers are per node.
//!
//! Faults a test can inject: a node that stops answering, a node whose connection dies after
//! a number of commands (a controller crash in the middle of a move looks the same to the
//! cluster), and a replica in full sync that loads a snapshot of its primary's markers when
//! the sync ends, as Valkey's RDB carries them.
//!
//! This file holds the cluster's state and how commands change it; `controls` what a test
//! sets up and reads besides commands, `server` and `cluster_node` the commands of each
//! role trait.

mod cluster_node;
mod controls;
mod server;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crd_types::live_config::Version;

use crate::shared::acl::AclUser;
use crate::shared::commands::{ErrorKind, Fields, Key, SlotState, ValkeyError};
use crate::shared::fake::{FAKE_VERSION, live_defaults};

/// A replica's replication link, as its primary reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Sync {
    Online,
    /// Full sync under way: the RDB snapshot was taken with these open-slot markers.
    Full {
        importing: BTreeMap<u16, String>,
        migrating: BTreeMap<u16, String>,
    },
}

#[derive(Clone, Debug)]
struct Node {
    id: String,
    ip: String,
    port: u16,
    /// The primary this node replicates, if it is a replica.
    primary: Option<String>,
    sync: Sync,
    importing: BTreeMap<u16, String>,
    migrating: BTreeMap<u16, String>,
    /// Keys by slot (primaries only: replicas' copies are not modelled).
    keys: BTreeMap<u16, BTreeSet<Key>>,
    /// Node ids this node knows besides itself.
    known: BTreeSet<String>,
    answering: bool,
    /// `CLUSTER FAILOVER` is accepted but never completes (no primary agrees).
    stuck_failover: bool,
    /// A replica that applies none of the SETSLOTs its primary copies to it.
    deaf_to_setslot: bool,
    /// Commands this node still answers before its connections die; `None`: no limit.
    commands_left: Option<usize>,
    offset: i64,
    /// Directives as `CONFIG GET` reports them: the live ones, at their defaults.
    config: BTreeMap<String, String>,
    version: Version,
    /// Atomic slot migration jobs, newest first, as `CLUSTER GETSLOTMIGRATIONS` lists them.
    jobs: Vec<Fields>,
    /// ACL users by name, as `ACL GETUSER` shows them (none at start).
    users: BTreeMap<String, AclUser>,
}

#[derive(Debug, Default)]
struct State {
    nodes: Vec<Node>,
    /// Slot -> owner id.
    owners: BTreeMap<u16, String>,
    /// Every command sent, as "<node name or port> <COMMAND ...>".
    log: Vec<String>,
    /// Connections opened and closed.
    opened: usize,
    closed: usize,
    /// Atomic slot migrations stay in flight until [`FakeCluster::finish_slot_migrations`].
    hold_slot_migrations: bool,
    jobs_started: usize,
    /// Commands any node still answers before the controller dies (every connection with
    /// it); `None`: no limit.
    controller_commands_left: Option<usize>,
}

impl State {
    fn node(&self, id: &str) -> &Node {
        self.nodes.iter().find(|n| n.id == id).expect("known node")
    }

    fn node_mut(&mut self, id: &str) -> &mut Node {
        self.nodes
            .iter_mut()
            .find(|n| n.id == id)
            .expect("known node")
    }

    fn replicas_of(&self, id: &str) -> Vec<String> {
        self.nodes
            .iter()
            .filter(|n| n.primary.as_deref() == Some(id))
            .map(|n| n.id.clone())
            .collect()
    }

    fn slots_of(&self, id: &str) -> Vec<u16> {
        self.owners
            .iter()
            .filter(|(_, owner)| *owner == id)
            .map(|(slot, _)| *slot)
            .collect()
    }
}

/// The cluster; clones share it.
#[derive(Clone, Debug, Default)]
pub struct FakeCluster {
    state: Arc<Mutex<State>>,
    latency: Option<Duration>,
}

/// A connection to one node of a [`FakeCluster`].
#[derive(Debug)]
pub struct FakeConn {
    cluster: FakeCluster,
    id: String,
}

/// The 40-hex-character id of node number `n`.
pub fn node_id(n: usize) -> String {
    format!("{n:040x}")
}

impl FakeCluster {
    pub fn new() -> Self {
        Self::default()
    }

    /// Every command waits this long first (use with a paused tokio clock).
    pub fn with_latency(mut self, latency: Duration) -> Self {
        self.latency = Some(latency);
        self
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds node number `n` at `10.0.0.<n>:6379`, knowing nobody; returns its id.
    pub fn add_node(&self, n: usize) -> String {
        let id = node_id(n);
        self.lock().nodes.push(Node {
            id: id.clone(),
            ip: format!("10.0.0.{n}"),
            port: 6379,
            primary: None,
            sync: Sync::Online,
            importing: BTreeMap::new(),
            migrating: BTreeMap::new(),
            keys: BTreeMap::new(),
            known: BTreeSet::new(),
            answering: true,
            stuck_failover: false,
            deaf_to_setslot: false,
            commands_left: None,
            offset: 0,
            config: live_defaults(FAKE_VERSION),
            version: FAKE_VERSION,
            jobs: Vec::new(),
            users: BTreeMap::new(),
        });
        id
    }

    /// A formed cluster: `primaries` primaries splitting the slots evenly, each with
    /// `replicas` online replicas, everyone knowing everyone. Node numbers: primary `p` is
    /// `p`, its replicas `100 + 10 * p + r`. Returns the primaries' ids.
    pub fn formed(primaries: usize, replicas: usize) -> (Self, Vec<String>) {
        let cluster = Self::new();
        let mut ids = Vec::new();
        for p in 0..primaries {
            ids.push(cluster.add_node(p));
            for r in 0..replicas {
                let replica = cluster.add_node(100 + 10 * p + r);
                cluster.lock().node_mut(&replica).primary = Some(ids[p].clone());
            }
        }
        let split = crate::cluster::slots::even_split(primaries);
        {
            let mut state = cluster.lock();
            for (p, ranges) in split.into_iter().enumerate() {
                for (first, last) in ranges {
                    for slot in first..=last {
                        state.owners.insert(slot, ids[p].clone());
                    }
                }
            }
            let all: BTreeSet<String> = state.nodes.iter().map(|n| n.id.clone()).collect();
            for node in &mut state.nodes {
                node.known = all.iter().filter(|id| **id != node.id).cloned().collect();
            }
        }
        (cluster, ids)
    }

    /// Node `id`'s address.
    pub fn address(&self, id: &str) -> (String, u16) {
        let state = self.lock();
        let node = state.node(id);
        (node.ip.clone(), node.port)
    }

    /// Connects to the node at `ip:port`, as the controller does.
    pub fn connect(&self, ip: &str, port: u16) -> Result<FakeConn, ValkeyError> {
        let mut state = self.lock();
        let node = state
            .nodes
            .iter()
            .find(|n| n.ip == ip && n.port == port)
            .ok_or_else(|| unreachable(&format!("{ip}:{port}")))?;
        if !node.answering {
            return Err(unreachable(&format!("{ip}:{port}")));
        }
        let id = node.id.clone();
        state.opened += 1;
        Ok(FakeConn {
            cluster: self.clone(),
            id,
        })
    }

    /// Connects to node `id`.
    pub fn conn(&self, id: &str) -> FakeConn {
        let (ip, port) = self.address(id);
        self.connect(&ip, port).expect("node answers")
    }

    /// Moves a job's slots with their keys from `source` to its target; marks it done on both.
    fn complete_job(state: &mut State, source: &str, name: &str) {
        let job = state
            .node(source)
            .jobs
            .iter()
            .find(|j| j["name"] == name)
            .cloned()
            .expect("a job of the source");
        let target = job["target_node"].clone();
        for range in job["slot_ranges"].split(' ') {
            let (start, end) = range.split_once('-').unwrap_or((range, range));
            let (start, end): (u16, u16) = (start.parse().unwrap(), end.parse().unwrap());
            for slot in start..=end {
                let keys = state
                    .node_mut(source)
                    .keys
                    .remove(&slot)
                    .unwrap_or_default();
                state
                    .node_mut(&target)
                    .keys
                    .entry(slot)
                    .or_default()
                    .extend(keys);
                state.owners.insert(slot, target.clone());
            }
        }
        for id in [source.to_string(), target] {
            for j in state
                .node_mut(&id)
                .jobs
                .iter_mut()
                .filter(|j| j["name"] == name)
            {
                j.insert("state".into(), "success".into());
            }
        }
    }

    /// Applies `SETSLOT` on node `id` as Valkey does on a node of that role.
    fn apply_set_slot(state: &mut State, id: &str, slot: u16, how: &SlotState<'_>) {
        let owner = state.owners.get(&slot).cloned();
        let node = state.node_mut(id);
        let holds_keys = node.keys.get(&slot).is_some_and(|k| !k.is_empty());
        let primary = node.primary.clone();
        match how {
            SlotState::Importing(from) => {
                node.importing.insert(slot, from.to_string());
            }
            SlotState::Migrating(to) => {
                node.migrating.insert(slot, to.to_string());
            }
            SlotState::Stable => {
                node.importing.remove(&slot);
                node.migrating.remove(&slot);
            }
            SlotState::Node(new_owner) => {
                if !holds_keys {
                    node.migrating.remove(&slot);
                }
                let me = node.id.clone();
                if *new_owner == me || Some(new_owner.to_string()) == primary {
                    node.importing.remove(&slot);
                }
                if primary.is_none() && owner.as_deref() != Some(new_owner) {
                    state.owners.insert(slot, new_owner.to_string());
                }
            }
        }
    }
}

/// A replica's `CLUSTER FAILOVER` (with or without FORCE) as the fake runs it: it takes its
/// primary's slots, keys and offset, and the primary and its other replicas follow it.
fn take_over(state: &mut State, me: &str) -> Result<(), ValkeyError> {
    let Some(primary) = state.node(me).primary.clone() else {
        return Err(refused("ERR You should send CLUSTER FAILOVER to a replica"));
    };
    if state.node(me).stuck_failover {
        return Ok(());
    }
    for slot in state.slots_of(&primary) {
        state.owners.insert(slot, me.to_string());
    }
    let keys = std::mem::take(&mut state.node_mut(&primary).keys);
    let offset = state.node(&primary).offset;
    for sibling in state.replicas_of(&primary) {
        if sibling != me {
            state.node_mut(&sibling).primary = Some(me.to_string());
        }
    }
    let node = state.node_mut(me);
    node.primary = None;
    node.keys = keys;
    node.offset = offset;
    let old = state.node_mut(&primary);
    old.primary = Some(me.to_string());
    old.sync = Sync::Online;
    Ok(())
}

fn unreachable(what: &str) -> ValkeyError {
    ValkeyError::new(
        ErrorKind::Unreachable,
        format!("{what}: connection refused"),
    )
}

fn refused(message: &str) -> ValkeyError {
    ValkeyError::new(ErrorKind::Refused, message)
}

/// A command the in-memory cluster does not model; cluster steps never send it (a test that
/// does fails on this error).
fn not_modelled(command: &str) -> ValkeyError {
    refused(&format!(
        "ERR {command} is not modelled by the fake cluster"
    ))
}

impl FakeConn {
    /// Runs `command` on this connection's node under the cluster's lock, after the
    /// injected latency and faults.
    async fn run<T>(
        &self,
        text: String,
        command: impl FnOnce(&mut State, &str) -> Result<T, ValkeyError>,
    ) -> Result<T, ValkeyError> {
        if let Some(latency) = self.cluster.latency {
            tokio::time::sleep(latency).await;
        }
        let mut state = self.cluster.lock();
        if let Some(left) = state.controller_commands_left.as_mut() {
            if *left == 0 {
                return Err(ValkeyError::new(
                    ErrorKind::Unreachable,
                    "the controller is dead".to_string(),
                ));
            }
            *left -= 1;
        }
        let node = state.node_mut(&self.id);
        let who = format!("{}:{}", node.ip, node.port);
        if !node.answering {
            return Err(unreachable(&who));
        }
        if let Some(left) = node.commands_left.as_mut() {
            if *left == 0 {
                return Err(ValkeyError::new(
                    ErrorKind::Unreachable,
                    format!("{who}: connection reset"),
                ));
            }
            *left -= 1;
        }
        state.log.push(format!("{who} {text}"));
        command(&mut state, &self.id)
    }
}

#[cfg(test)]
mod tests;
