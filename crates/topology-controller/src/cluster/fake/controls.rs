//! What a test does to the fake cluster and reads of it besides commands: keys and slots,
//! open-slot markers, injected faults, versions, atomic migrations held in flight.

use std::collections::{BTreeMap, BTreeSet};

use crd_types::live_config::Version;

use super::{FakeCluster, Sync};
use crate::shared::commands::Fields;
use crate::shared::fake::live_defaults;

impl FakeCluster {
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

    /// Every command sent so far.
    pub fn log(&self) -> Vec<String> {
        self.lock().log.clone()
    }

    /// Connections opened and not yet closed.
    pub fn open_connections(&self) -> usize {
        let state = self.lock();
        state.opened - state.closed
    }
}
