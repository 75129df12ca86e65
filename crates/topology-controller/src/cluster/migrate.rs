//! Moving slots between primaries with the classic protocol (IMPORTING on the target,
//! MIGRATING on the source, MIGRATE the keys, NODE everywhere), several slots at a time.
//!
//! A slot is opened only while every replica of both ends is online on its primary: Valkey
//! 8.0 copies slot states only to replicas online at that moment (valkey-io/valkey#998), and
//! a replica whose full sync snapshots an open slot keeps that marker after the move ends.
//! A move cut short (the budget, a replica starting to sync, a crash) leaves no slot half
//! open except one whose command failed; the planner finishes or clears that one.

use std::time::Duration;

use futures::StreamExt;
use futures::future::join_all;
use futures::stream::FuturesUnordered;
use tokio::time::Instant;

use crate::cluster::slots::Move;
use crate::shared::commands::{ClusterNode, CommandResultExt, SlotState, StepError};
use crate::shared::info::ReplicationInfo;
use crate::shared::member_facts::Address;

/// Slot moves stop after this long so status and the rest of the plan get a turn.
pub const BUDGET: Duration = Duration::from_secs(20);
/// Keys per GETKEYSINSLOT / MIGRATE batch.
const BATCH: u32 = 500;
/// Slots in flight at once. Each slot's own commands stay in order; interleaving slots hides
/// the round trips, which dominate when most slots hold few keys.
const SLOTS_IN_FLIGHT: usize = 16;

/// A primary that answered, as one end of a move.
pub struct End<'a, V> {
    pub name: &'a str,
    pub conn: &'a V,
    pub id: &'a str,
    pub address: &'a Address,
    /// How many replicas it has (its own CLUSTER NODES): all must be online before a slot
    /// opens.
    pub replicas: usize,
}

/// How far a call to [`migrate`] got.
#[derive(Debug, PartialEq, Eq)]
pub struct Moved {
    pub slots: usize,
    /// The keys MIGRATE moved with them; `None` where Valkey moves them itself (atomic slot
    /// migration reports no count).
    pub keys: Option<u64>,
    /// Why it stopped before moving every slot asked for; `None` when it moved them all.
    pub stopped: Option<Stopped>,
}

/// Why [`migrate`] stopped early.
#[derive(Debug, PartialEq, Eq)]
pub enum Stopped {
    /// The time budget ran out.
    Budget,
    /// A replica of an end is not online (syncing, or not connected).
    ReplicaNotOnline(String),
}

/// Moves the slots of `moves` between the primaries `ends`, for at most `budget` (slots in
/// flight then finish). Every other primary among `primaries` is told each new owner too
/// (best effort: gossip spreads it anyway).
pub async fn migrate<V: ClusterNode>(
    moves: &[Move<String>],
    ends: &[End<'_, V>],
    primaries: &[&V],
    budget: Duration,
) -> Result<Moved, StepError> {
    let end = |name: &str| {
        ends.iter()
            .find(|e| e.name == name)
            .ok_or_else(|| StepError::NotAnswering(name.to_string()))
    };
    let started = Instant::now();
    let (mut moved, mut keys) = (0, 0);
    for m in moves {
        let (source, target) = (end(&m.from)?, end(&m.to)?);
        let mut slots = m.slots.0..=m.slots.1;
        let mut in_flight = FuturesUnordered::new();
        let mut stopped = None;
        loop {
            while stopped.is_none() && in_flight.len() < SLOTS_IN_FLIGHT {
                let Some(slot) = slots.next() else { break };
                in_flight.push(next_slot(slot, source, target, primaries, started, budget));
            }
            match in_flight.next().await {
                Some(Ok(Ok(slot_keys))) => {
                    moved += 1;
                    keys += slot_keys;
                }
                // Slots already in flight still finish: none is left half open.
                Some(Ok(Err(why))) => stopped = stopped.or(Some(why)),
                Some(Err(e)) => return Err(e),
                None => break,
            }
        }
        if stopped.is_some() {
            return Ok(Moved {
                slots: moved,
                keys: Some(keys),
                stopped,
            });
        }
    }
    Ok(Moved {
        slots: moved,
        keys: Some(keys),
        stopped: None,
    })
}

/// Moves `slot` (the keys it held) unless the budget is spent or a replica of an end is not
/// online: then says why it did not start.
async fn next_slot<V: ClusterNode>(
    slot: u16,
    source: &End<'_, V>,
    target: &End<'_, V>,
    primaries: &[&V],
    started: Instant,
    budget: Duration,
) -> Result<Result<u64, Stopped>, StepError> {
    if started.elapsed() >= budget {
        return Ok(Err(Stopped::Budget));
    }
    if let Some(why) = not_online(source, target).await? {
        return Ok(Err(Stopped::ReplicaNotOnline(why)));
    }
    Ok(Ok(move_slot(slot, source, target, primaries).await?))
}

/// Why a replica of `source` or `target` is not online, from each primary's own
/// `INFO replication` (the view Valkey itself uses to decide whom it copies slot states
/// to); `None` when all are.
async fn not_online<V: ClusterNode>(
    source: &End<'_, V>,
    target: &End<'_, V>,
) -> Result<Option<String>, StepError> {
    for end in [source, target] {
        if end.replicas == 0 {
            continue;
        }
        let text = end
            .conn
            .info(&["replication"])
            .await
            .on("INFO replication", end.name)?;
        let info = ReplicationInfo::parse(&text).map_err(|e| StepError::Command {
            command: "INFO replication".into(),
            member: end.name.into(),
            source: crate::shared::commands::ValkeyError::new(
                crate::shared::commands::ErrorKind::Protocol,
                e.to_string(),
            ),
        })?;
        if let Some(why) = info.replicas_not_online(end.replicas) {
            return Ok(Some(format!("on {}, {why}", end.name)));
        }
    }
    Ok(None)
}

/// One slot: IMPORTING on the target, MIGRATING on the source, the keys in batches with
/// MIGRATE, then the new owner on the target, the source and every other primary. The keys
/// it moved.
async fn move_slot<V: ClusterNode>(
    slot: u16,
    source: &End<'_, V>,
    target: &End<'_, V>,
    primaries: &[&V],
) -> Result<u64, StepError> {
    let setslot = |state: SlotState<'_>| format!("SETSLOT {slot} {state}");
    let mut moved = 0;
    target
        .conn
        .set_slot(slot, SlotState::Importing(source.id))
        .await
        .on(setslot(SlotState::Importing(source.id)), target.name)?;
    source
        .conn
        .set_slot(slot, SlotState::Migrating(target.id))
        .await
        .on(setslot(SlotState::Migrating(target.id)), source.name)?;
    loop {
        let keys = source
            .conn
            .keys_in_slot(slot, BATCH)
            .await
            .on(format!("GETKEYSINSLOT {slot}"), source.name)?;
        if keys.is_empty() {
            break;
        }
        moved += keys.len() as u64;
        source
            .conn
            .migrate(&target.address.ip, target.address.port, keys)
            .await
            .on(
                format!("MIGRATE slot {slot} to {}", target.name),
                source.name,
            )?;
    }
    // Target first: once it owns the slot, the source's redirects point at it.
    let node = SlotState::Node(target.id);
    target
        .conn
        .set_slot(slot, node)
        .await
        .on(setslot(node), target.name)?;
    // A source that gave away its last slot may already have turned into a replica of the
    // target (cluster-allow-replica-migration) and refuse SETSLOT: it knows anyway.
    if let Err(e) = source.conn.set_slot(slot, node).await
        && !e.says("only with masters")
    {
        return Err(e).on(setslot(node), source.name);
    }
    let is_end = |p: &&&V| std::ptr::eq(**p, source.conn) || std::ptr::eq(**p, target.conn);
    let others = primaries.iter().filter(|p| !is_end(p));
    join_all(others.map(|other| other.set_slot(slot, node))).await;
    Ok(moved)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::fake::{FakeCluster, FakeConn, node_id};

    /// The ends of a move between two primaries of `cluster`, with their replicas.
    struct Ends {
        names: Vec<String>,
        conns: Vec<FakeConn>,
        addresses: Vec<Address>,
        replicas: Vec<Vec<Address>>,
    }

    impl Ends {
        fn of(cluster: &FakeCluster, primaries: &[String], replicas: &[Vec<String>]) -> Self {
            let address = |id: &str| {
                let (ip, port) = cluster.address(id);
                Address {
                    ip,
                    port,
                    bus_port: port + 10000,
                }
            };
            Self {
                names: (0..primaries.len()).map(|i| format!("m{i}")).collect(),
                conns: primaries.iter().map(|id| cluster.conn(id)).collect(),
                addresses: primaries.iter().map(|id| address(id)).collect(),
                replicas: replicas
                    .iter()
                    .map(|rs| rs.iter().map(|id| address(id)).collect())
                    .collect(),
            }
        }

        fn ends<'a>(&'a self, ids: &'a [String]) -> Vec<End<'a, FakeConn>> {
            (0..self.names.len())
                .map(|i| End {
                    name: &self.names[i],
                    conn: &self.conns[i],
                    id: &ids[i],
                    address: &self.addresses[i],
                    replicas: self.replicas[i].len(),
                })
                .collect()
        }
    }

    fn moving(first: u16, last: u16, from: &str, to: &str) -> Move<String> {
        Move {
            slots: (first, last),
            from: from.into(),
            to: to.into(),
        }
    }

    #[tokio::test]
    async fn moves_keys_and_ownership_and_leaves_no_marker() {
        let (cluster, ids) = FakeCluster::formed(2, 1);
        for slot in 0..40 {
            cluster.load(slot, 3);
        }
        cluster.load(8000, 1200); // more than one MIGRATE batch
        let keys_before = cluster.total_keys();
        let replicas = vec![vec![node_id(100)], vec![node_id(110)]];
        let setup = Ends::of(&cluster, &ids, &replicas);
        let ends = setup.ends(&ids);
        let moves = [moving(0, 39, "m0", "m1"), moving(8000, 8000, "m0", "m1")];

        let moved = migrate(&moves, &ends, &[], BUDGET).await.unwrap();

        assert_eq!(
            moved,
            Moved {
                slots: 41,
                keys: Some(40 * 3 + 1200),
                stopped: None
            }
        );
        assert_eq!(cluster.total_keys(), keys_before, "no key lost or doubled");
        let on_target = cluster.keys(&ids[1]);
        assert_eq!(on_target.get(&8000), Some(&1200));
        assert_eq!(on_target.get(&39), Some(&3));
        assert!(
            (0..40)
                .chain([8000])
                .all(|s| cluster.owner(s).as_deref() == Some(&ids[1]))
        );
        for id in ids.iter().chain(replicas.iter().flatten()) {
            assert_eq!(
                cluster.markers(id),
                Default::default(),
                "markers left on {id}"
            );
        }
    }

    #[tokio::test]
    async fn each_slot_opens_on_the_target_before_the_source_and_closes_target_first() {
        let (cluster, ids) = FakeCluster::formed(2, 0);
        cluster.load(5, 2);
        let setup = Ends::of(&cluster, &ids, &[vec![], vec![]]);
        migrate(&[moving(5, 5, "m0", "m1")], &setup.ends(&ids), &[], BUDGET)
            .await
            .unwrap();
        let (a, b) = ("10.0.0.0:6379", "10.0.0.1:6379");
        let expected = [
            format!("{b} CLUSTER SETSLOT 5 IMPORTING {}", ids[0]),
            format!("{a} CLUSTER SETSLOT 5 MIGRATING {}", ids[1]),
            format!("{a} CLUSTER GETKEYSINSLOT 5 500"),
            format!("{a} MIGRATE 10.0.0.1 6379 KEYS (2 keys)"),
            format!("{a} CLUSTER GETKEYSINSLOT 5 500"),
            format!("{b} CLUSTER SETSLOT 5 NODE {}", ids[1]),
            format!("{a} CLUSTER SETSLOT 5 NODE {}", ids[1]),
        ];
        assert_eq!(cluster.log(), expected);
    }

    #[tokio::test(start_paused = true)]
    async fn the_budget_stops_new_slots_and_leaves_none_open() {
        let (cluster, ids) = FakeCluster::formed(2, 0);
        let cluster = cluster.with_latency(Duration::from_millis(10));
        for slot in 0..2000 {
            cluster.load(slot, 1);
        }
        let setup = Ends::of(&cluster, &ids, &[vec![], vec![]]);
        let moved = migrate(
            &[moving(0, 1999, "m0", "m1")],
            &setup.ends(&ids),
            &[],
            Duration::from_secs(1),
        )
        .await
        .unwrap();

        assert_eq!(moved.stopped, Some(Stopped::Budget));
        assert!(moved.slots > 0 && moved.slots < 2000, "{moved:?}");
        let now_on_target = (0..2000)
            .filter(|s| cluster.owner(*s).as_deref() == Some(&ids[1]))
            .count();
        assert_eq!(now_on_target, moved.slots);
        assert_eq!(cluster.markers(&ids[0]), Default::default());
        assert_eq!(cluster.markers(&ids[1]), Default::default());
        assert_eq!(cluster.total_keys(), 2000);
    }

    #[tokio::test]
    async fn no_slot_opens_while_a_replica_of_an_end_syncs() {
        let (cluster, ids) = FakeCluster::formed(2, 1);
        cluster.load(3, 1);
        let replicas = vec![vec![node_id(100)], vec![node_id(110)]];
        cluster.begin_full_sync(&node_id(110));
        let setup = Ends::of(&cluster, &ids, &replicas);

        let moved = migrate(&[moving(3, 9, "m0", "m1")], &setup.ends(&ids), &[], BUDGET)
            .await
            .unwrap();

        assert_eq!(moved.slots, 0);
        let Some(Stopped::ReplicaNotOnline(why)) = moved.stopped else {
            panic!("{moved:?}")
        };
        assert!(
            why.contains("on m1, a replica (connected from 10.1.0.110:6379) is wait_bgsave"),
            "{why}"
        );
        assert!(
            !cluster.log().iter().any(|c| c.contains("SETSLOT")),
            "nothing opened: {:?}",
            cluster.log()
        );
    }

    #[tokio::test]
    async fn a_crash_mid_move_leaves_the_slot_open_and_the_next_run_finishes_it() {
        let (cluster, ids) = FakeCluster::formed(2, 0);
        cluster.load(0, 1200);
        // The source's connection dies after MIGRATING, one GETKEYSINSLOT and one MIGRATE.
        cluster.die_after(&ids[0], 3);
        let setup = Ends::of(&cluster, &ids, &[vec![], vec![]]);

        let error = migrate(&[moving(0, 0, "m0", "m1")], &setup.ends(&ids), &[], BUDGET)
            .await
            .unwrap_err();

        assert!(error.to_string().contains("connection reset"), "{error}");
        assert_eq!(
            cluster.total_keys(),
            1200,
            "every key is on one side or the other"
        );
        assert_eq!(
            cluster.keys(&ids[1]).get(&0),
            Some(&500),
            "cut after one batch"
        );
        assert_eq!(cluster.markers(&ids[1]).0.get(&0), Some(&ids[0]));
        assert_eq!(cluster.markers(&ids[0]).1.get(&0), Some(&ids[1]));
        assert_eq!(cluster.owner(0).as_deref(), Some(ids[0].as_str()));

        // The next controller finishes that slot, as the planner's FixOpenSlot step asks.
        cluster.revive(&ids[0]);
        let setup = Ends::of(&cluster, &ids, &[vec![], vec![]]);
        let moved = migrate(&[moving(0, 0, "m0", "m1")], &setup.ends(&ids), &[], BUDGET)
            .await
            .unwrap();
        assert_eq!(moved.slots, 1);
        assert_eq!(cluster.keys(&ids[1]).get(&0), Some(&1200));
        assert_eq!(cluster.owner(0).as_deref(), Some(ids[1].as_str()));
        assert_eq!(cluster.markers(&ids[0]), Default::default());
        assert_eq!(cluster.markers(&ids[1]), Default::default());
        assert_eq!(cluster.total_keys(), 1200);
    }
}
