//! An in-memory Valkey cluster behind the [`Server`] and [`ClusterNode`] traits, for tests of
//! the code that talks to members (asking them, moving slots, carrying out steps) without a server.
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

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crd_types::live_config::Version;

use crate::shared::acl::{self, AclUser};
use crate::shared::commands::{
    ClusterNode, ErrorKind, Fields, Key, Server, SlotState, ValkeyError,
};
use crate::shared::fake::{FAKE_VERSION, config_reply, live_defaults};

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

    /// Puts `count` keys into `slot` on its owner.
    pub fn load(&self, slot: u16, count: usize) {
        let mut state = self.lock();
        let owner = state.owners.get(&slot).cloned().expect("slot has an owner");
        let node = state.node_mut(&owner);
        let keys = node.keys.entry(slot).or_default();
        for i in 0..count {
            keys.insert(format!("key:{slot}:{i}").into_bytes());
        }
        node.offset += count as i64;
    }

    /// Keys held per slot by node `id`.
    pub fn keys(&self, id: &str) -> BTreeMap<u16, usize> {
        self.lock()
            .node(id)
            .keys
            .iter()
            .filter(|(_, keys)| !keys.is_empty())
            .map(|(slot, keys)| (*slot, keys.len()))
            .collect()
    }

    /// Total keys on every node; a key is never lost or doubled by a move.
    pub fn total_keys(&self) -> usize {
        self.lock()
            .nodes
            .iter()
            .flat_map(|n| n.keys.values())
            .map(BTreeSet::len)
            .sum()
    }

    /// The owner of `slot`.
    pub fn owner(&self, slot: u16) -> Option<String> {
        self.lock().owners.get(&slot).cloned()
    }

    /// Slots owned by `id`.
    pub fn slots_of(&self, id: &str) -> Vec<u16> {
        self.lock().slots_of(id)
    }

    /// Open-slot markers on node `id`: (importing, migrating).
    pub fn markers(&self, id: &str) -> (BTreeMap<u16, String>, BTreeMap<u16, String>) {
        let state = self.lock();
        let node = state.node(id);
        (node.importing.clone(), node.migrating.clone())
    }

    /// Sets markers on node `id` directly (a state left by an earlier run).
    pub fn set_markers(&self, id: &str, importing: &[(u16, &str)], migrating: &[(u16, &str)]) {
        let mut state = self.lock();
        let node = state.node_mut(id);
        node.importing = importing.iter().map(|(s, n)| (*s, n.to_string())).collect();
        node.migrating = migrating.iter().map(|(s, n)| (*s, n.to_string())).collect();
    }

    /// Node `id` stops answering (or answers again).
    pub fn set_answering(&self, id: &str, answering: bool) {
        self.lock().node_mut(id).answering = answering;
    }

    /// Node `id` answers `commands` more commands, then its connections die, as if the
    /// controller holding them had been killed.
    pub fn die_after(&self, id: &str, commands: usize) {
        self.lock().node_mut(id).commands_left = Some(commands);
    }

    /// `CLUSTER FAILOVER` on replica `id` is accepted but never completes.
    pub fn stick_failover(&self, id: &str) {
        self.lock().node_mut(id).stuck_failover = true;
    }

    /// Replica `id` applies none of the SETSLOTs its primary copies to it (whatever the
    /// cause: the heal must not rely on one path).
    pub fn deafen_to_setslot(&self, id: &str) {
        self.lock().node_mut(id).deaf_to_setslot = true;
    }

    /// The controller dies after `commands` more commands to any node: every later one
    /// fails as a dead connection does, until [`FakeCluster::new_controller`].
    pub fn crash_after(&self, commands: usize) {
        self.lock().controller_commands_left = Some(commands);
    }

    /// Whether the controller set to die by [`FakeCluster::crash_after`] is dead.
    pub fn crashed(&self) -> bool {
        self.lock().controller_commands_left == Some(0)
    }

    /// A new controller process: every command is answered again.
    pub fn new_controller(&self) {
        self.lock().controller_commands_left = None;
    }

    /// The primary node `id` replicates, if it is a replica.
    pub fn primary_of(&self, id: &str) -> Option<String> {
        self.lock().node(id).primary.clone()
    }

    /// Every node's id.
    pub fn ids(&self) -> Vec<String> {
        self.lock().nodes.iter().map(|n| n.id.clone()).collect()
    }

    /// Slots `first..=last` with their keys go to primary `id` (an uneven start).
    pub fn give(&self, first: u16, last: u16, id: &str) {
        let mut state = self.lock();
        for slot in first..=last {
            let Some(owner) = state.owners.insert(slot, id.to_string()) else {
                continue;
            };
            let keys = state.node_mut(&owner).keys.remove(&slot);
            if let Some(keys) = keys {
                state.node_mut(id).keys.insert(slot, keys);
            }
        }
    }

    /// Keys held by a node that does not own their slot (a client could not read them).
    pub fn misplaced_keys(&self) -> usize {
        let state = self.lock();
        state
            .nodes
            .iter()
            .flat_map(|n| n.keys.iter().map(move |(slot, keys)| (n, slot, keys)))
            .filter(|(n, slot, _)| state.owners.get(slot) != Some(&n.id))
            .map(|(_, _, keys)| keys.len())
            .sum()
    }

    /// Node `id` answers every command again (a new controller process connects).
    pub fn revive(&self, id: &str) {
        self.lock().node_mut(id).commands_left = None;
    }

    /// Replica `id` starts a full sync: its primary snapshots its own markers now.
    pub fn begin_full_sync(&self, id: &str) {
        let mut state = self.lock();
        let primary = state.node(id).primary.clone().expect("a replica");
        let (importing, migrating) = {
            let p = state.node(&primary);
            (p.importing.clone(), p.migrating.clone())
        };
        state.node_mut(id).sync = Sync::Full {
            importing,
            migrating,
        };
    }

    /// Replica `id` finishes its full sync: it loads the snapshot's markers, as Valkey's
    /// RDB aux field restores them, whatever happened meanwhile.
    pub fn finish_full_sync(&self, id: &str) {
        let mut state = self.lock();
        let node = state.node_mut(id);
        if let Sync::Full {
            importing,
            migrating,
        } = std::mem::replace(&mut node.sync, Sync::Online)
        {
            node.importing.extend(importing);
            node.migrating.extend(migrating);
        }
    }

    /// Every command sent so far.
    /// Node `id` runs `version` (INFO server, its live directives, the commands it knows).
    pub fn set_version(&self, id: &str, version: Version) {
        let mut state = self.lock();
        let node = state.node_mut(id);
        node.version = version;
        node.config = live_defaults(version);
    }

    /// Atomic slot migrations started from now on stay in flight (`snapshotting`).
    pub fn hold_slot_migrations(&self) {
        self.lock().hold_slot_migrations = true;
    }

    /// Completes every atomic slot migration in flight, and no longer holds new ones.
    pub fn finish_slot_migrations(&self) {
        let mut state = self.lock();
        state.hold_slot_migrations = false;
        let in_flight: Vec<(String, Fields)> = state
            .nodes
            .iter()
            .flat_map(|n| n.jobs.iter().map(move |j| (n.id.clone(), j.clone())))
            .filter(|(_, j)| j["operation"] == "EXPORT" && j["state"] == "snapshotting")
            .collect();
        for (source, job) in in_flight {
            Self::complete_job(&mut state, &source, &job["name"]);
        }
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

    pub fn log(&self) -> Vec<String> {
        self.lock().log.clone()
    }

    /// Connections opened and not yet closed.
    pub fn open_connections(&self) -> usize {
        let state = self.lock();
        state.opened - state.closed
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

    fn nodes_text(state: &State, me: &str) -> String {
        let mut lines = Vec::new();
        let myself = state.node(me);
        let mut ids: Vec<&str> = myself.known.iter().map(String::as_str).collect();
        ids.push(me);
        ids.sort();
        for id in ids {
            let Some(node) = state.nodes.iter().find(|n| n.id == id) else {
                continue;
            };
            let mut flags = Vec::new();
            if id == me {
                flags.push("myself");
            }
            flags.push(if node.primary.is_some() {
                "slave"
            } else {
                "master"
            });
            if !node.answering && id != me {
                flags.push("fail");
            }
            let mut line = format!(
                "{id} {}:{}@{} {} {} 0 0 1 connected",
                node.ip,
                node.port,
                node.port + 10000,
                flags.join(","),
                node.primary.as_deref().unwrap_or("-"),
            );
            if node.primary.is_none() {
                for (first, last) in ranges(&state.slots_of(id)) {
                    if first == last {
                        line.push_str(&format!(" {first}"));
                    } else {
                        line.push_str(&format!(" {first}-{last}"));
                    }
                }
            }
            if id == me {
                for (slot, to) in &node.migrating {
                    line.push_str(&format!(" [{slot}->-{to}]"));
                }
                for (slot, from) in &node.importing {
                    line.push_str(&format!(" [{slot}-<-{from}]"));
                }
            }
            lines.push(line);
        }
        lines.join("\n") + "\n"
    }

    fn replication_text(state: &State, me: &str) -> String {
        let node = state.node(me);
        match &node.primary {
            Some(primary) => {
                let p = state.node(primary);
                let online = node.sync == Sync::Online && p.answering;
                format!(
                    "# Replication\r\nrole:slave\r\nmaster_host:{}\r\nmaster_port:{}\r\n\
                     master_link_status:{}\r\nmaster_sync_in_progress:{}\r\n\
                     slave_repl_offset:{}\r\nconnected_slaves:0\r\nmaster_repl_offset:{}\r\n",
                    p.ip,
                    p.port,
                    if online { "up" } else { "down" },
                    u8::from(node.sync != Sync::Online),
                    p.offset,
                    p.offset,
                )
            }
            None => {
                let replicas = state.replicas_of(me);
                let mut text = format!(
                    "# Replication\r\nrole:master\r\nconnected_slaves:{}\r\n",
                    replicas.len()
                );
                for (i, id) in replicas.iter().enumerate() {
                    let r = state.node(id);
                    let sync_state = if r.sync == Sync::Online {
                        "online"
                    } else {
                        "wait_bgsave"
                    };
                    // The address it connects from (its pod's), as in cluster mode a replica
                    // does not tell its primary the address it announces.
                    text.push_str(&format!(
                        "slave{i}:ip={},port={},state={sync_state},offset={},lag=0\r\n",
                        r.ip.replacen("10.0.", "10.1.", 1),
                        r.port,
                        node.offset
                    ));
                }
                text.push_str(&format!("master_repl_offset:{}\r\n", node.offset));
                text
            }
        }
    }
}

/// Consecutive slots as (first, last) ranges.
fn ranges(slots: &[u16]) -> Vec<(u16, u16)> {
    let mut out: Vec<(u16, u16)> = Vec::new();
    for &slot in slots {
        match out.last_mut() {
            Some((_, last)) if *last + 1 == slot => *last = slot,
            _ => out.push((slot, slot)),
        }
    }
    out
}

impl Server for FakeConn {
    async fn info(&self, sections: &[&'static str]) -> Result<String, ValkeyError> {
        let wanted: Vec<&'static str> = sections.to_vec();
        self.run(format!("INFO {}", sections.join(" ")), move |state, me| {
            let mut text = String::new();
            if wanted.contains(&"server") {
                let v = state.node(me).version;
                text.push_str(&format!("# Server\r\nvalkey_version:{v}.1\r\n"));
            }
            if wanted.contains(&"replication") {
                text.push_str(&Self::replication_text(state, me));
            }
            Ok(text)
        })
        .await
    }

    async fn role(&self) -> Result<String, ValkeyError> {
        self.run("ROLE".into(), |state, me| {
            Ok(if state.node(me).primary.is_some() {
                "slave".into()
            } else {
                "master".into()
            })
        })
        .await
    }

    async fn replica_of(&self, _: Option<(&str, u16)>) -> Result<(), ValkeyError> {
        self.run("REPLICAOF".into(), |_, _| {
            Err(refused("ERR REPLICAOF not allowed in cluster mode."))
        })
        .await
    }

    async fn pause_writes(&self, _: u64) -> Result<(), ValkeyError> {
        self.run("CLIENT PAUSE".into(), |_, _| {
            Err(not_modelled("CLIENT PAUSE"))
        })
        .await
    }

    async fn unpause(&self) -> Result<(), ValkeyError> {
        self.run("CLIENT UNPAUSE".into(), |_, _| {
            Err(not_modelled("CLIENT UNPAUSE"))
        })
        .await
    }

    async fn kill_clients(&self) -> Result<u64, ValkeyError> {
        self.run("CLIENT KILL".into(), |_, _| {
            Err(not_modelled("CLIENT KILL"))
        })
        .await
    }

    async fn config_get(&self, names: &[&str]) -> Result<Vec<(String, String)>, ValkeyError> {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        self.run(
            format!("CONFIG GET {}", names.join(" ")),
            move |state, me| Ok(config_reply(&state.node(me).config, &names)),
        )
        .await
    }

    /// Only the live directives are modelled; values are stored as given (callers send
    /// `CONFIG GET`'s form).
    async fn config_set(&self, name: &str, value: &str) -> Result<(), ValkeyError> {
        let (name, value) = (name.to_string(), value.to_string());
        self.run(
            format!("CONFIG SET {name} {value}"),
            move |state, me| match state.node_mut(me).config.get_mut(&name) {
                Some(slot) => {
                    *slot = value;
                    Ok(())
                }
                None => Err(not_modelled("CONFIG SET of a directive that is not live")),
            },
        )
        .await
    }

    async fn acl_user(&self, user: &str) -> Result<Option<AclUser>, ValkeyError> {
        let user = user.to_string();
        self.run(format!("ACL GETUSER {user}"), move |state, me| {
            Ok(state.node(me).users.get(&user).cloned())
        })
        .await
    }

    async fn acl_setuser(&self, user: &str, rules: &[String]) -> Result<(), ValkeyError> {
        let (user, rules) = (user.to_string(), rules.to_vec());
        self.run(format!("ACL SETUSER {user}"), move |state, me| {
            let users = &mut state.node_mut(me).users;
            let changed = acl::set_user(users.remove(&user), &rules);
            users.insert(user, changed);
            Ok(())
        })
        .await
    }

    async fn close(self) {
        self.cluster.lock().closed += 1;
    }
}

impl ClusterNode for FakeConn {
    async fn cluster_nodes(&self) -> Result<String, ValkeyError> {
        self.run("CLUSTER NODES".into(), |state, me| {
            Ok(Self::nodes_text(state, me))
        })
        .await
    }

    async fn cluster_shards(&self) -> Result<Vec<Vec<String>>, ValkeyError> {
        self.run("CLUSTER SHARDS".into(), |state, _| {
            Ok(state
                .nodes
                .iter()
                .filter(|n| n.primary.is_none())
                .map(|p| {
                    std::iter::once(p.id.clone())
                        .chain(state.replicas_of(&p.id))
                        .collect()
                })
                .collect())
        })
        .await
    }

    async fn cluster_info(&self) -> Result<String, ValkeyError> {
        self.run("CLUSTER INFO".into(), |state, _| {
            let assigned = state.owners.len();
            let ok = assigned == usize::from(crate::cluster::slots::SLOTS);
            let size = state
                .nodes
                .iter()
                .filter(|n| !state.slots_of(&n.id).is_empty())
                .count();
            Ok(format!(
                "cluster_state:{}\r\ncluster_slots_assigned:{assigned}\r\n\
                 cluster_slots_ok:{assigned}\r\ncluster_slots_pfail:0\r\n\
                 cluster_slots_fail:0\r\ncluster_known_nodes:{}\r\n\
                 cluster_size:{size}\r\ncluster_current_epoch:0\r\n",
                if ok { "ok" } else { "fail" },
                state.nodes.len(),
            ))
        })
        .await
    }

    async fn meet(&self, ip: &str, port: u16, _bus_port: u16) -> Result<(), ValkeyError> {
        let (ip, port_) = (ip.to_string(), port);
        self.run(format!("CLUSTER MEET {ip} {port}"), move |state, me| {
            let Some(other) = state
                .nodes
                .iter()
                .find(|n| n.ip == ip && n.port == port_)
                .map(|n| n.id.clone())
            else {
                return Ok(()); // Valkey accepts it and the handshake never completes.
            };
            if other != me {
                // Gossip, instantly: both sides' clusters become one.
                let mut all: BTreeSet<String> = state.node(me).known.clone();
                all.extend(state.node(&other).known.iter().cloned());
                all.insert(me.to_string());
                all.insert(other.clone());
                for id in &all {
                    let node = state.node_mut(id);
                    node.known = all.iter().filter(|k| *k != id).cloned().collect();
                }
            }
            Ok(())
        })
        .await
    }

    async fn add_slots_ranges(&self, ranges: &[(u16, u16)]) -> Result<(), ValkeyError> {
        let ranges = ranges.to_vec();
        self.run(
            format!("CLUSTER ADDSLOTSRANGE {ranges:?}"),
            move |state, me| {
                for &(first, last) in &ranges {
                    for slot in first..=last {
                        if state.owners.contains_key(&slot) {
                            return Err(refused(&format!("ERR Slot {slot} is already busy")));
                        }
                    }
                }
                for (first, last) in ranges {
                    for slot in first..=last {
                        state.owners.insert(slot, me.to_string());
                    }
                }
                Ok(())
            },
        )
        .await
    }

    async fn replicate(&self, primary_id: &str) -> Result<(), ValkeyError> {
        let primary_id = primary_id.to_string();
        self.run(
            format!("CLUSTER REPLICATE {primary_id}"),
            move |state, me| {
                if !state.slots_of(me).is_empty() {
                    return Err(refused(
                        "ERR To set a master the node must be empty and without assigned slots.",
                    ));
                }
                let node = state.node_mut(me);
                node.primary = Some(primary_id);
                node.sync = Sync::Online;
                Ok(())
            },
        )
        .await
    }

    async fn forget(&self, node_id: &str) -> Result<(), ValkeyError> {
        let node_id = node_id.to_string();
        self.run(format!("CLUSTER FORGET {node_id}"), move |state, me| {
            if node_id == me {
                return Err(refused("ERR I tried hard but I can't forget myself..."));
            }
            if state.node(me).primary.as_deref() == Some(node_id.as_str()) {
                return Err(refused("ERR Can't forget my master!"));
            }
            state.node_mut(me).known.remove(&node_id);
            Ok(())
        })
        .await
    }

    /// As Valkey: refused on a primary holding keys; a replica drops its data and turns
    /// into an empty primary; both forget the others and every slot marker.
    async fn reset_soft(&self) -> Result<(), ValkeyError> {
        self.run("CLUSTER RESET SOFT".into(), |state, me| {
            let node = state.node(me);
            if node.primary.is_none() && node.keys.values().any(|k| !k.is_empty()) {
                return Err(refused(
                    "ERR CLUSTER RESET can't be called with master nodes containing keys",
                ));
            }
            for slot in state.slots_of(me) {
                state.owners.remove(&slot);
            }
            let node = state.node_mut(me);
            node.primary = None;
            node.sync = Sync::Online;
            node.deaf_to_setslot = false;
            node.keys.clear();
            node.known.clear();
            node.importing.clear();
            node.migrating.clear();
            Ok(())
        })
        .await
    }

    async fn failover(&self) -> Result<(), ValkeyError> {
        self.run("CLUSTER FAILOVER".into(), take_over).await
    }

    async fn failover_force(&self) -> Result<(), ValkeyError> {
        self.run("CLUSTER FAILOVER FORCE".into(), take_over).await
    }

    async fn set_slot(&self, slot: u16, how: SlotState<'_>) -> Result<(), ValkeyError> {
        let owned = how;
        self.run(format!("CLUSTER SETSLOT {slot} {owned}"), move |state, me| {
            let node = state.node(me);
            if node.primary.is_some() {
                return Err(refused("ERR Please use SETSLOT only with masters."));
            }
            let owner = state.owners.get(&slot).cloned();
            match owned {
                SlotState::Importing(_) if owner.as_deref() == Some(me) => {
                    return Err(refused(&format!(
                        "ERR I'm already the owner of hash slot {slot}"
                    )));
                }
                SlotState::Migrating(_) if owner.as_deref() != Some(me) => {
                    return Err(refused(&format!(
                        "ERR I'm not the owner of hash slot {slot}"
                    )));
                }
                SlotState::Node(new_owner)
                    if new_owner != me
                        && owner.as_deref() == Some(me)
                        && node.keys.get(&slot).is_some_and(|k| !k.is_empty()) =>
                {
                    return Err(refused(&format!(
                        "ERR Can't assign hashslot {slot} to a different node while I still hold keys for this hash slot."
                    )));
                }
                _ => {}
            }
            FakeCluster::apply_set_slot(state, me, slot, &owned);
            // Valkey 8.0 replicates SETSLOT only to replicas online right now.
            for replica in state.replicas_of(me) {
                let r = state.node(&replica);
                if r.sync == Sync::Online && r.answering && !r.deaf_to_setslot {
                    FakeCluster::apply_set_slot(state, &replica, slot, &owned);
                }
            }
            state.node_mut(me).offset += 1;
            Ok(())
        })
        .await
    }

    async fn keys_in_slot(&self, slot: u16, count: u32) -> Result<Vec<Key>, ValkeyError> {
        self.run(
            format!("CLUSTER GETKEYSINSLOT {slot} {count}"),
            move |state, me| {
                Ok(state
                    .node(me)
                    .keys
                    .get(&slot)
                    .map(|keys| keys.iter().take(count as usize).cloned().collect())
                    .unwrap_or_default())
            },
        )
        .await
    }

    async fn migrate(&self, ip: &str, port: u16, keys: Vec<Key>) -> Result<(), ValkeyError> {
        let ip = ip.to_string();
        self.run(
            format!("MIGRATE {ip} {port} KEYS ({} keys)", keys.len()),
            move |state, me| {
                let target = state
                    .nodes
                    .iter()
                    .find(|n| n.ip == ip && n.port == port && n.answering)
                    .map(|n| n.id.clone())
                    .ok_or_else(|| refused("IOERR error or timeout connecting to the client"))?;
                for key in keys {
                    let slot = state
                        .node(me)
                        .keys
                        .iter()
                        .find(|(_, ks)| ks.contains(&key))
                        .map(|(slot, _)| *slot);
                    let Some(slot) = slot else { continue };
                    state.node_mut(me).keys.get_mut(&slot).unwrap().remove(&key);
                    state
                        .node_mut(&target)
                        .keys
                        .entry(slot)
                        .or_default()
                        .insert(key);
                }
                Ok(())
            },
        )
        .await
    }

    /// One job per group, as 9.x runs them: refused up front for slots this node does not
    /// serve; a target before 9.0 fails the job at its handshake.
    async fn migrate_slots_atomically(
        &self,
        groups: &[(Vec<(u16, u16)>, String)],
    ) -> Result<(), ValkeyError> {
        let groups = groups.to_vec();
        let text = groups
            .iter()
            .map(|(ranges, node)| {
                let r: Vec<String> = ranges.iter().map(|(s, e)| format!("{s} {e}")).collect();
                format!("SLOTSRANGE {} NODE {node}", r.join(" "))
            })
            .collect::<Vec<_>>()
            .join(" ");
        self.run(format!("CLUSTER MIGRATESLOTS {text}"), move |state, me| {
            if state.node(me).version < crate::cluster::slot_jobs::SINCE {
                return Err(refused("ERR unknown subcommand 'MIGRATESLOTS'"));
            }
            for (ranges, _) in &groups {
                let served = ranges
                    .iter()
                    .all(|(s, e)| (*s..=*e).all(|slot| state.owners.get(&slot).map(String::as_str) == Some(me)));
                if !served {
                    return Err(refused("ERR Slots are not served by this node."));
                }
            }
            for (ranges, target) in groups {
                state.jobs_started += 1;
                let name = format!("{:040x}", 0xa70_0000 + state.jobs_started);
                let slot_ranges = ranges
                    .iter()
                    .map(|(s, e)| if s == e { s.to_string() } else { format!("{s}-{e}") })
                    .collect::<Vec<_>>()
                    .join(" ");
                let target_ok = state.node(&target).version >= crate::cluster::slot_jobs::SINCE;
                let (state_now, message) = match (target_ok, state.hold_slot_migrations) {
                    (false, _) => (
                        "failed",
                        "Received error during handshake to target: -ERR unknown subcommand 'SYNCSLOTS'.",
                    ),
                    (true, true) => ("snapshotting", ""),
                    (true, false) => ("success", ""),
                };
                for (holder, operation) in [(me.to_string(), "EXPORT"), (target.clone(), "IMPORT")] {
                    let job: Fields = [
                        ("name", name.as_str()),
                        ("operation", operation),
                        ("slot_ranges", slot_ranges.as_str()),
                        ("target_node", target.as_str()),
                        ("source_node", me),
                        ("state", if state_now == "success" { "snapshotting" } else { state_now }),
                        ("message", message),
                    ]
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect();
                    state.node_mut(&holder).jobs.insert(0, job);
                }
                if state_now == "success" {
                    FakeCluster::complete_job(state, me, &name);
                }
            }
            Ok(())
        })
        .await
    }

    async fn slot_migrations(&self) -> Result<Vec<Fields>, ValkeyError> {
        self.run("CLUSTER GETSLOTMIGRATIONS".into(), |state, me| {
            let node = state.node(me);
            if node.version < crate::cluster::slot_jobs::SINCE {
                return Err(refused("ERR unknown subcommand 'GETSLOTMIGRATIONS'"));
            }
            Ok(node.jobs.clone())
        })
        .await
    }
}

/// A command the in-memory cluster does not model; cluster steps never send it (a test that
/// does fails on this error).
fn not_modelled(command: &str) -> ValkeyError {
    refused(&format!(
        "ERR {command} is not modelled by the fake cluster"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::cluster_nodes::ClusterView;
    use crate::shared::info::ReplicationInfo;

    #[tokio::test]
    async fn it_speaks_the_formats_the_parsers_read() {
        let (cluster, primaries) = FakeCluster::formed(3, 1);
        let conn = cluster.conn(&primaries[0]);
        let view = ClusterView::parse(&conn.cluster_nodes().await.unwrap()).unwrap();
        assert_eq!(view.nodes().len(), 6);
        assert_eq!(view.assigned_slot_count(), 16384);
        assert_eq!(view.myself().id, primaries[0]);
        let info = ReplicationInfo::parse(&conn.info(&["replication"]).await.unwrap()).unwrap();
        assert_eq!(info.replicas.len(), 1);
        assert_eq!(info.replicas[0].state, "online");
        conn.close().await;
        assert_eq!(cluster.open_connections(), 0);
    }

    #[tokio::test]
    async fn setslot_reaches_only_online_replicas() {
        let (cluster, primaries) = FakeCluster::formed(2, 1);
        let (a, b) = (&primaries[0], &primaries[1]);
        let replica_of_b = node_id(110);
        cluster.begin_full_sync(&replica_of_b);
        let slot = cluster.slots_of(a)[0];
        let target = cluster.conn(b);
        target
            .set_slot(slot, SlotState::Importing(a))
            .await
            .unwrap();
        // The replica is syncing: it did not get the marker now...
        assert!(cluster.markers(&replica_of_b).0.is_empty());
        // ...but its snapshot, taken when the sync began, had none either; a new sync would.
        cluster.finish_full_sync(&replica_of_b);
        cluster.begin_full_sync(&replica_of_b);
        target.set_slot(slot, SlotState::Node(b)).await.unwrap();
        cluster.finish_full_sync(&replica_of_b);
        // Loaded after the move finished: the stale marker of valkey-io/valkey#998.
        assert_eq!(cluster.markers(&replica_of_b).0.get(&slot), Some(a));
        // A replica refuses SETSLOT from a client.
        let err = cluster
            .conn(&replica_of_b)
            .set_slot(slot, SlotState::Stable)
            .await
            .unwrap_err();
        assert!(err.says("only with masters"), "{err}");
        // Re-sent on its primary while it is online, NODE clears it.
        target.set_slot(slot, SlotState::Node(b)).await.unwrap();
        assert!(cluster.markers(&replica_of_b).0.is_empty());
    }
}
