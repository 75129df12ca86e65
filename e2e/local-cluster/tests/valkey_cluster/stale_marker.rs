//! Scenario 7: a replica that missed the end of a slot move keeps a stale slot marker
//! (valkey-io/valkey#998); topology-controller clears it. Two shapes: the move finished
//! (its primary owns the slot), and the move abandoned (the other shard kept the slot:
//! issue 41, where `SETSLOT NODE owner` through the primary never reached the replica).

use std::cell::Cell;
use std::collections::BTreeMap;
use std::time::Instant;

use agent_services::ControlClient;
use anyhow::Context;
use crd_types::conditions::reasons::Degraded;
use crd_types::conditions::types;
use crd_types::names::statefulset_pod_name;
use e2e_kit::cluster_testing::{
    Access, ClusterNode, DataSet, PORT, describe_status, valkey_cluster,
};
use e2e_kit::testing::{events_about, ready_node};
use kube::ResourceExt;
use local_cluster::controller_pods::Outage;

use crate::env::{Env, FORM, SETTLE};

/// `field:value` of an INFO reply.
fn info<'a>(text: &'a str, field: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .map(str::trim)
}

/// A numeric INFO field of the member on `ip`.
fn info_number(access: &Access, ip: &str, section: &str, field: &str) -> i64 {
    let text = access.cli(ip, &["INFO", section]);
    info(&text, field)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("INFO {section} on {ip} has no number {field}: {text}"))
}

/// The state of the primary's only replica as the primary reports it: `wait_bgsave` until
/// the full sync's snapshot is sent, `online` after. Valkey 8.0 copies SETSLOT only to
/// replicas online at that moment.
fn replica_state(access: &Access, primary_ip: &str) -> String {
    let text = access.cli(primary_ip, &["INFO", "replication"]);
    info(&text, "slave0")
        .and_then(|l| l.split(',').find_map(|kv| kv.strip_prefix("state=")))
        .unwrap_or("not connected")
        .to_string()
}

/// The member's own line of its CLUSTER NODES.
fn myself(access: &Access, ip: &str) -> anyhow::Result<ClusterNode> {
    access
        .nodes_seen_by(ip)?
        .into_iter()
        .find(ClusterNode::is_myself)
        .with_context(|| format!("CLUSTER NODES on {ip} has no myself line"))
}

/// `CONFIG GET` of one parameter ("" for an empty value).
fn config_get(access: &Access, ip: &str, name: &str) -> String {
    let reply = access.admin_cli(ip, &["CONFIG", "GET", name]);
    reply.lines().nth(1).unwrap_or_default().to_string()
}

fn config_set(access: &Access, ip: &str, name: &str, value: &str) {
    let reply = access.admin_cli(ip, &["CONFIG", "SET", name, value]);
    assert_eq!(reply, "OK", "CONFIG SET {name} {value:?} on {ip}");
}

/// How many times topology-controller published the SlotRepaired Event with `note` (an
/// Event repeated as a series counts each time), and every SlotRepaired note, for messages.
async fn repairs(env: &Env, cluster: &str, note: &str) -> anyhow::Result<(i64, Vec<String>)> {
    let events = events_about(&env.apis.events, "ValkeyCluster", cluster, "SlotRepaired").await?;
    let count = events
        .iter()
        .filter(|e| e.note.as_deref() == Some(note))
        .map(|e| e.series.as_ref().map_or(1, |s| i64::from(s.count.max(1))))
        .sum();
    let notes = events.into_iter().filter_map(|e| e.note).collect();
    Ok((count, notes))
}

/// Waits until the replica on `replica_ip` is online on its primary on `primary_ip`, its
/// own sync done and link up.
async fn wait_in_sync(
    env: &Env,
    access: &Access,
    primary_ip: &str,
    replica: &str,
    replica_ip: &str,
) {
    env.wait(&format!("{replica} to be in sync"), SETTLE, || async {
        let state = replica_state(access, primary_ip);
        let text = access.cli(replica_ip, &["INFO", "replication"]);
        let syncing = info(&text, "master_sync_in_progress");
        let link = info(&text, "master_link_status");
        Ok(
            if state == "online" && syncing == Some("0") && link == Some("up") {
                Ok(())
            } else {
                Err(format!(
                    "state {state} on its primary, master_sync_in_progress {syncing:?}, master_link_status {link:?}"
                ))
            },
        )
    })
    .await;
}

/// How the slot move the replica misses ends.
#[derive(Clone, Copy, PartialEq)]
enum MoveEnd {
    /// The keys move and both ends get `SETSLOT NODE B`: B owns the slot.
    Finished,
    /// Both ends get `SETSLOT STABLE`: A keeps the slot and its keys (issue 41's shape).
    Abandoned,
}

/// Scenario 7: in a 2x1 cluster with 20k keys, the test (topology-controller stopped) opens
/// a slot from shard 0's primary A to shard 1's primary B while B's replica B' is in a full
/// sync whose snapshot was forked with the slot open, and ends the move (finished or
/// abandoned) before B' is online: B' loads the importing marker and keeps it. Restarted,
/// topology-controller clears it through B (Event SlotRepaired naming the shape and the
/// method), the cluster is Ready, `--cluster check` passes, every key reads back, and the
/// marker stays gone when B' restarts from its nodes.conf.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_that_missed_the_end_of_a_move_is_healed() {
    stale_marker_healed(MoveEnd::Finished).await;
}

/// Issue 41: the same with the move abandoned, so the stale marker imports a slot that
/// another shard owns.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_importing_a_slot_another_shard_kept_is_healed() {
    stale_marker_healed(MoveEnd::Abandoned).await;
}

async fn stale_marker_healed(end: MoveEnd) {
    let env = Env::start_own().await;
    let ns = env.namespace.as_str();
    let name = match end {
        MoveEnd::Finished => "stale",
        MoveEnd::Abandoned => "abandoned",
    };
    let access = env.create_ready(valkey_cluster(name, 2, 1, true)).await;
    let data = DataSet::new("key", 20_000);
    data.load(&access).await.unwrap();
    let status = env.ready(name, SETTLE).await;
    let a = status.shards[0].primary.clone().unwrap();
    let b = status.shards[1].primary.clone().unwrap();
    let replica = status.shards[1]
        .members
        .iter()
        .find(|m| m.name != b)
        .unwrap()
        .name
        .clone();
    let ip = |member: &str| access.ip(member).unwrap().to_string();
    let (a_ip, b_ip, r_ip) = (ip(&a), ip(&b), ip(&replica));
    let (a_id, b_id, r_id) = (
        access.node_id(&a_ip).unwrap(),
        access.node_id(&b_ip).unwrap(),
        access.node_id(&r_ip).unwrap(),
    );
    let password = access.password.clone().expect("a generated password");

    // From here on the test, not the operator, changes the topology.
    env.stop_topology_controller(Outage::ScaledDown).await;

    // The slot of A holding the most keys of the data set.
    let a_line = myself(&access, &a_ip).unwrap();
    let mut per_slot = BTreeMap::<u16, usize>::new();
    for i in 0..data.count {
        let slot = fred::util::redis_keyslot(data.key(i).as_bytes());
        if a_line.owns(slot) {
            *per_slot.entry(slot).or_default() += 1;
        }
    }
    let (slot, count) = per_slot.into_iter().max_by_key(|&(_, c)| c).unwrap();
    let s = slot.to_string();
    let listed = access.cli(&a_ip, &["CLUSTER", "GETKEYSINSLOT", &s, "1000"]);
    let keys: Vec<&str> = listed.lines().collect();
    assert_eq!(
        keys.len(),
        count,
        "CLUSTER GETKEYSINSLOT {slot} on {a}: {listed}"
    );
    let b_line = myself(&access, &b_ip).unwrap();
    let filler = (0..)
        .map(|n| format!("filler:{n}"))
        .find(|k| b_line.owns(fred::util::redis_keyslot(k.as_bytes())))
        .unwrap();
    eprintln!(
        "{name}: moving slot {slot} ({count} keys) from {a} to {b}; {replica} replicates {b}"
    );

    // B forks for nothing but the sync, and keeps too little backlog to resume B' from.
    let save = config_get(&access, &b_ip, "save");
    let backlog = config_get(&access, &b_ip, "repl-backlog-size");
    config_set(&access, &b_ip, "save", "");
    config_set(&access, &b_ip, "repl-backlog-size", "16384");
    env.wait(
        &format!("no snapshot in progress on {b}"),
        SETTLE,
        || async {
            let text = access.cli(&b_ip, &["INFO", "persistence"]);
            Ok(match info(&text, "rdb_bgsave_in_progress") {
                Some("0") => Ok(()),
                other => Err(format!("rdb_bgsave_in_progress {other:?}")),
            })
        },
    )
    .await;

    // The slot opens while B' is online: it has B's importing marker, as it should.
    let opened = access.admin_cli(&b_ip, &["CLUSTER", "SETSLOT", &s, "IMPORTING", &a_id]);
    assert_eq!(opened, "OK", "SETSLOT {slot} IMPORTING on {b}");
    let opened = access.admin_cli(&a_ip, &["CLUSTER", "SETSLOT", &s, "MIGRATING", &b_id]);
    assert_eq!(opened, "OK", "SETSLOT {slot} MIGRATING on {a}");

    // B' is frozen (SIGSTOP) so it cannot reconnect before its offset has left B's backlog:
    // its link is cut, then more is written to B than the backlog keeps.
    let control = ControlClient::new(env.cluster.control_addr.expect("the node agent runs"));
    let pod = format!("{ns}/{}", statefulset_pod_name(&replica));
    let full_syncs = info_number(&access, &b_ip, "stats", "sync_full");
    control.freeze(&pod).await.unwrap();
    let killed = access.admin_cli(&b_ip, &["CLIENT", "KILL", "TYPE", "replica"]);
    let cut = Instant::now();
    assert_eq!(killed, "1", "CLIENT KILL TYPE replica on {b}");
    let cut_offset = info_number(&access, &b_ip, "replication", "master_repl_offset");
    let value = "x".repeat(64 * 1024);
    for _ in 0..8 {
        assert_eq!(access.cli(&b_ip, &["SET", &filler, &value]), "OK");
    }
    let first = info_number(
        &access,
        &b_ip,
        "replication",
        "repl_backlog_first_byte_offset",
    );
    assert!(
        first > cut_offset + 1,
        "setup: {b}'s backlog starts at {first}, {replica} could resume from {cut_offset}"
    );
    // 1 ms per key makes the sync's snapshot take ~10 s; the child keeps the setting.
    config_set(&access, &b_ip, "rdb-key-save-delay", "1000");
    control.thaw(&pod).await.unwrap();

    env.wait(
        &format!("{b} to fork the snapshot of {replica}'s full sync"),
        SETTLE,
        || async {
            let state = replica_state(&access, &b_ip);
            let text = access.cli(&b_ip, &["INFO", "persistence"]);
            let forked = info(&text, "rdb_bgsave_in_progress") == Some("1");
            Ok(if state == "wait_bgsave" && forked {
                Ok(())
            } else {
                Err(format!(
                    "{replica} is {state}, snapshot in progress: {forked}"
                ))
            })
        },
    )
    .await;
    let fork = Instant::now();
    config_set(&access, &b_ip, "rdb-key-save-delay", "0");
    assert_eq!(
        info_number(&access, &b_ip, "stats", "sync_full"),
        full_syncs + 1,
        "setup: {b} counts no new full sync"
    );

    // The move ends while B' waits for its snapshot: Valkey copies no SETSLOT to it.
    if end == MoveEnd::Finished {
        let port = PORT.to_string();
        let mut migrate = vec![
            "MIGRATE", &b_ip, &port, "", "0", "10000", "AUTH", &password, "KEYS",
        ];
        migrate.extend(keys.iter().copied());
        assert_eq!(access.cli(&a_ip, &migrate), "OK", "MIGRATE on {a}");
    }
    let close = match end {
        MoveEnd::Finished => vec!["CLUSTER", "SETSLOT", &s, "NODE", &b_id],
        MoveEnd::Abandoned => vec!["CLUSTER", "SETSLOT", &s, "STABLE"],
    };
    for (member, ip) in [(&b, &b_ip), (&a, &a_ip)] {
        let reply = access.admin_cli(ip, &close);
        assert_eq!(reply, "OK", "{} on {member}", close.join(" "));
    }
    let moved = fork.elapsed();
    let state = replica_state(&access, &b_ip);
    assert_ne!(
        state, "online",
        "setup: {replica} was online when the move ended ({moved:?} after the fork)"
    );

    wait_in_sync(&env, &access, &b_ip, &replica, &r_ip).await;
    eprintln!(
        "{name}: {replica} was not online on {b} for {:?}: snapshot forked {:?} after the cut, \
         move ended {moved:?} after the fork, online {:?} after the fork",
        cut.elapsed(),
        fork.duration_since(cut),
        fork.elapsed()
    );
    config_set(&access, &b_ip, "save", &save);
    config_set(&access, &b_ip, "repl-backlog-size", &backlog);

    // Reproduced: the owner (B, or A after the abandoned move) holds the slot with no
    // marker, and so does B; B' loaded the importing marker.
    let marker = format!("[{slot}-<-{a_id}]");
    let (owner_name, owner_ip) = match end {
        MoveEnd::Finished => (&b, &b_ip),
        MoveEnd::Abandoned => (&a, &a_ip),
    };
    let owner = myself(&access, owner_ip).unwrap();
    assert!(
        owner.owns(slot) && owner.open_slots.is_empty(),
        "setup: {owner_name} should own slot {slot} with no marker: {owner:?}"
    );
    let primary = myself(&access, &b_ip).unwrap();
    assert!(
        primary.open_slots.is_empty(),
        "setup: {b} should have no marker: {primary:?}"
    );
    let stale = myself(&access, &r_ip).unwrap();
    assert_eq!(
        stale.open_slots,
        std::slice::from_ref(&marker),
        "setup: {replica} did not keep the stale marker: {stale:?}"
    );
    let complaint = access
        .check()
        .expect_err("valkey-cli --cluster check passes with a stale marker");
    assert!(
        complaint.contains(&format!("has slots in importing state {slot}")),
        "{complaint}"
    );
    eprintln!("{name}: {replica}'s myself line ends with {marker}, {b}'s has no marker");

    env.restart_topology_controller().await;
    let restarted = Instant::now();
    let owned_by = match end {
        MoveEnd::Finished => format!("its primary {b}"),
        MoveEnd::Abandoned => format!("{a} of another shard"),
    };
    let note = format!(
        "clearing the stale importing marker of slot {slot} (owned by {owned_by}) on replica \
         {replica}: SETSLOT {slot} STABLE through {b}"
    );
    let degraded = Cell::new(None);
    env.wait(
        &format!("a SlotRepaired Event \"{note}\""),
        SETTLE,
        || async {
            let status = env.status(name).await?;
            let stale_reported = status.conditions.iter().any(|c| {
                c.type_ == types::DEGRADED
                    && c.status == "True"
                    && c.reason == Degraded::StaleSlotMarker.as_str()
            });
            if stale_reported && degraded.get().is_none() {
                degraded.set(Some(restarted.elapsed()));
            }
            let (count, notes) = repairs(&env, name, &note).await?;
            Ok(if count > 0 {
                Ok(())
            } else {
                Err(format!(
                    "SlotRepaired notes: {notes:?}; status: {}",
                    describe_status(&status)
                ))
            })
        },
    )
    .await;
    env.wait(
        &format!("{replica}'s stale marker to be cleared"),
        SETTLE,
        || async {
            let line = myself(&access, &r_ip)?;
            Ok(if line.open_slots.is_empty() {
                Ok(())
            } else {
                Err(format!("{line:?}"))
            })
        },
    )
    .await;
    let cleared = restarted.elapsed();
    // The status said Degraded before the step ran: this Ready is written after the repair.
    env.ready(name, SETTLE).await;
    eprintln!(
        "{name}: marker cleared {cleared:?} after the restart (Degraded StaleSlotMarker seen: \
         {:?}), Ready {:?} after it",
        degraded.get(),
        restarted.elapsed()
    );
    let access = env.exact_access(name, 2, 1).await;
    env.healthy(name, &access, 2, 1).await;
    data.verify(&access).await.unwrap();

    // Killed (no shutdown save of nodes.conf), B' comes back from its own nodes.conf.
    let (repaired, _) = repairs(&env, name, &note).await.unwrap();
    let pod_name = statefulset_pod_name(&replica);
    let old_uid = env.apis.pods.get(&pod_name).await.unwrap().uid().unwrap();
    env.apis.kill_pod(&pod_name).await.unwrap();
    let killed = Instant::now();
    env.wait(
        &format!("{replica}'s pod to be replaced and ready"),
        FORM,
        || async {
            let ready =
                ready_node(&env.apis.nodes, &env.apis.pods, &replica, Some(&old_uid)).await?;
            Ok(ready.map(drop).ok_or_else(|| "not yet".to_string()))
        },
    )
    .await;
    let line = myself(&access, &r_ip).unwrap();
    assert_eq!(
        line.id, r_id,
        "{replica} kept its node id (nodes.conf on its volume)"
    );
    assert!(line.open_slots.is_empty(), "the marker came back: {line:?}");
    wait_in_sync(&env, &access, &b_ip, &replica, &r_ip).await;
    let line = myself(&access, &r_ip).unwrap();
    assert!(line.open_slots.is_empty(), "the marker came back: {line:?}");
    eprintln!(
        "{name}: {replica} back in sync {:?} after its pod was killed, with no marker",
        killed.elapsed()
    );
    env.ready(name, FORM).await;
    env.healthy(name, &access, 2, 1).await;
    let (again, _) = repairs(&env, name, &note).await.unwrap();
    assert_eq!(
        again, repaired,
        "the marker was cleared again after the restart"
    );
    env.finish().await;
}
