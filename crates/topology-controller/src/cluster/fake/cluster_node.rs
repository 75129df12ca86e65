//! The cluster commands ([`ClusterNode`]): membership, slots and their migration.

use std::collections::BTreeSet;

use super::{FakeCluster, FakeConn, State, Sync, refused, take_over};
use crate::shared::commands::{ClusterNode, Fields, Key, SlotState, ValkeyError};

impl FakeConn {
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
