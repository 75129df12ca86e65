//! The controller killed after each command of a slot move, once or twice in a row: a
//! fresh controller, starting from nothing but what the members show, converges. Classic
//! moves (IMPORTING, MIGRATING, GETKEYSINSLOT, MIGRATE, NODE on target, source and others)
//! and atomic 9.x moves (MIGRATESLOTS and the job polls), for a scale-out, a scale-in and a
//! rebalance, each with every replica online and with a replica in a full sync from the
//! moment of the crash (its snapshot carries whatever its primary had open then).
//! Converged means: every slot owned once by a wanted primary, the split even, no slot
//! marker on any member, and every key on its slot's owner.

use super::tests::{Objects, layout, observe_all, shape};
use super::*;
use crate::cluster::fake::FakeCluster;
use crate::cluster::model::{Position, Shape};
use crate::cluster::plan::progress::{Attempts, Seen};
use crate::cluster::plan::{Circumstances, decide};
use crd_types::versions::Version;

#[derive(Clone, Copy, Debug)]
enum Change {
    ScaleOut,
    ScaleIn,
    Rebalance,
}

/// A fake cluster about to be changed, 1 replica per shard, with keys in every 97th slot.
struct Scenario {
    cluster: FakeCluster,
    layout: Vec<(String, Position)>,
    shape: Shape,
    keys: usize,
}

fn scenario(change: Change, atomic: bool) -> Scenario {
    let (cluster, shape, layout) = match change {
        Change::ScaleOut => {
            let (cluster, _) = FakeCluster::formed(2, 1);
            cluster.add_node(2);
            cluster.add_node(120);
            (cluster, shape(3, 1), layout(3, 1))
        }
        Change::ScaleIn => (FakeCluster::formed(3, 1).0, shape(2, 1), layout(3, 1)),
        Change::Rebalance => {
            let (cluster, ids) = FakeCluster::formed(2, 1);
            cluster.give(6000, 9999, &ids[0]);
            (cluster, shape(2, 1), layout(2, 1))
        }
    };
    let mut keys = 0;
    for slot in (0..16384).step_by(97) {
        cluster.load(slot, 3);
        keys += 3;
    }
    let shape = if atomic {
        for id in cluster.ids() {
            cluster.set_version(&id, Version::new(9, 1));
        }
        Shape {
            image: "valkey/valkey:9.1".into(),
            ..shape
        }
    } else {
        shape
    };
    Scenario {
        cluster,
        layout,
        shape,
        keys,
    }
}

/// How one controller's run ended.
#[derive(Debug, PartialEq)]
enum Ended {
    Idle,
    Died,
}

/// One controller process, from what the members show, until it is idle or dies;
/// `between(i)` runs before its reconcile `i`. A removed member's pod goes away.
async fn run_controller(sc: &mut Scenario, mut between: impl FnMut(usize)) -> Ended {
    let mut attempts = Attempts::default();
    let mut taken = Vec::new();
    for i in 0..80 {
        between(i);
        let (members, conns) = observe_all(&sc.cluster, &sc.layout).await;
        if sc.cluster.crashed() {
            conns.close().await;
            return Ended::Died;
        }
        let circumstances = Circumstances {
            attempts: Some(&attempts),
            ..Default::default()
        };
        let step = decide(&sc.shape, &members, &circumstances);
        let result = execute(&step, &members, &conns, &Objects::default()).await;
        conns.close().await;
        if sc.cluster.crashed() {
            return Ended::Died;
        }
        attempts.record(&step, Seen::of(&members));
        if let Step::Remove(names) = &step {
            for name in names {
                let at = sc
                    .layout
                    .iter()
                    .position(|(_, at)| format!("c-{}-{}", at.shard, at.member) == *name);
                let (id, _) = sc.layout.remove(at.expect("a member"));
                sc.cluster.set_answering(&id, false);
            }
        }
        if step == Step::Idle {
            return Ended::Idle;
        }
        taken.push(format!("{step} -> {result:?}"));
    }
    panic!("no convergence in 80 reconciles: {taken:#?}")
}

/// Converged, as the module says.
fn assert_converged(sc: &Scenario, what: &str) {
    let c = &sc.cluster;
    let primaries: Vec<&String> = sc
        .layout
        .iter()
        .filter(|(id, _)| !c.slots_of(id).is_empty())
        .map(|(id, _)| id)
        .collect();
    assert_eq!(
        primaries.len(),
        sc.shape.shards as usize,
        "{what}: primaries"
    );
    let owned: usize = primaries.iter().map(|id| c.slots_of(id).len()).sum();
    assert_eq!(owned, 16384, "{what}: slots owned by wanted primaries");
    let fair = 16384 / sc.shape.shards as usize;
    for id in &primaries {
        let held = c.slots_of(id).len();
        assert!(held.abs_diff(fair) <= 1, "{what}: {id} holds {held} slots");
    }
    for (id, _) in &sc.layout {
        assert_eq!(c.markers(id), Default::default(), "{what}: markers on {id}");
    }
    assert_eq!(c.total_keys(), sc.keys, "{what}: keys kept");
    assert_eq!(
        c.misplaced_keys(),
        0,
        "{what}: keys away from their slot's owner"
    );
}

/// The commands of one uninterrupted run's slot move to crash after (indices into the
/// fake's log): classic, every command of the first slot moved that holds keys (its
/// IMPORTING to its last NODE, with the MIGRATE after its GETKEYSINSLOT); atomic, the
/// MIGRATESLOTS and the three commands after it.
fn crash_points(log: &[String]) -> Vec<usize> {
    if let Some(start) = log.iter().position(|c| c.contains("MIGRATESLOTS")) {
        return (start..(start + 4).min(log.len())).collect();
    }
    // The first slot moved that holds keys (listed twice: a batch, then nothing), so the
    // MIGRATE is among the points. The fake answers at once, so a slot's commands are
    // consecutive in the log.
    let slot_of = |c: &str| {
        let words: Vec<&str> = c.split(' ').collect();
        let at = words
            .iter()
            .position(|w| *w == "SETSLOT" || *w == "GETKEYSINSLOT")?;
        words.get(at + 1).map(|s| s.to_string())
    };
    let listings = |slot: &str| {
        let listing = format!("GETKEYSINSLOT {slot} ");
        log.iter().filter(|c| c.contains(&listing)).count()
    };
    let (start, slot) = log
        .iter()
        .enumerate()
        .filter(|(_, c)| c.contains("IMPORTING"))
        .filter_map(|(i, c)| Some((i, slot_of(c)?)))
        .find(|(_, slot)| listings(slot) >= 2)
        .expect("a classic move of a slot with keys");
    let mentions = |c: &str| {
        c.contains(&format!("SETSLOT {slot} ")) || c.contains(&format!("GETKEYSINSLOT {slot} "))
    };
    let last = log.iter().rposition(|c| mentions(c)).unwrap();
    let mut points = Vec::new();
    let mut after_listing = false;
    for (i, c) in log.iter().enumerate().take(last + 1).skip(start) {
        if mentions(c) {
            points.push(i);
            after_listing = c.contains("GETKEYSINSLOT");
        } else if after_listing && c.contains("MIGRATE ") {
            points.push(i);
            after_listing = false;
        }
    }
    points
}

/// Every crash point of `change`: killed there once, then (`twice`) the next controller
/// killed again after its first few commands of repair; `syncing`: from the first crash,
/// a replica holding (or next to) an open slot is in a full sync that ends during the
/// next controller's run.
async fn crash_everywhere(change: Change, atomic: bool) {
    let mut clean = scenario(change, atomic);
    assert_eq!(run_controller(&mut clean, |_| {}).await, Ended::Idle);
    assert_converged(&clean, &format!("{change:?} uninterrupted"));
    let log = clean.cluster.log();
    let points = crash_points(&log);
    assert!(points.len() >= 2, "{change:?}: crash points {points:?}");
    let kinds: Vec<&str> = points
        .iter()
        .map(|&i| {
            let words: Vec<&str> = log[i].split(' ').skip(1).collect();
            match words.as_slice() {
                ["CLUSTER", "SETSLOT", _, how, ..] => how,
                [command, sub, ..] if *command == "CLUSTER" => sub,
                [command, ..] => command,
                [] => "?",
            }
        })
        .collect();
    eprintln!("{change:?} (atomic {atomic}): killed after each of {kinds:?}");
    // How many commands one look at every member takes.
    let look = {
        let sc = scenario(change, atomic);
        let (_, conns) = observe_all(&sc.cluster, &sc.layout).await;
        conns.close().await;
        sc.cluster.log().len()
    };
    for &point in &points {
        for (twice, syncing) in [(false, false), (false, true), (true, false), (true, true)] {
            let what = format!(
                "{change:?} (atomic {atomic}) killed after command {point} ({}), twice {twice}, syncing {syncing}",
                log[point]
            );
            let mut sc = scenario(change, atomic);
            sc.cluster.crash_after(point + 1);
            assert_eq!(run_controller(&mut sc, |_| {}).await, Ended::Died, "{what}");
            let syncing_ids = if syncing {
                start_sync(&sc.cluster)
            } else {
                vec![]
            };
            sc.cluster.new_controller();
            if twice {
                for extra in 1..=3 {
                    let what = format!("{what}, then after {extra} commands of repair");
                    sc.cluster.crash_after(look + extra);
                    let ended = run_controller(&mut sc, |_| {}).await;
                    sc.cluster.new_controller();
                    if ended == Ended::Idle {
                        assert_converged(&sc, &what);
                    }
                }
            }
            let cluster = sc.cluster.clone();
            let ended = run_controller(&mut sc, |i| {
                if i == 1 {
                    for id in &syncing_ids {
                        cluster.finish_full_sync(id);
                    }
                }
            })
            .await;
            assert_eq!(ended, Ended::Idle, "{what}");
            assert_converged(&sc, &what);
        }
    }
}

/// Starts a full sync on the replicas whose primary has a slot open, or on the first
/// replica when none has: the snapshot carries the primary's markers.
fn start_sync(cluster: &FakeCluster) -> Vec<String> {
    let replicas: Vec<String> = cluster
        .ids()
        .into_iter()
        .filter(|id| cluster.primary_of(id).is_some())
        .collect();
    let open: Vec<String> = replicas
        .iter()
        .filter(|r| {
            let (importing, migrating) = cluster.markers(&cluster.primary_of(r).unwrap());
            !importing.is_empty() || !migrating.is_empty()
        })
        .cloned()
        .collect();
    let chosen = if open.is_empty() {
        replicas.into_iter().take(1).collect()
    } else {
        open
    };
    for id in &chosen {
        cluster.begin_full_sync(id);
    }
    chosen
}

#[tokio::test]
async fn a_classic_scale_out_converges_after_a_crash_at_any_command() {
    crash_everywhere(Change::ScaleOut, false).await;
}

#[tokio::test]
async fn a_classic_scale_in_converges_after_a_crash_at_any_command() {
    crash_everywhere(Change::ScaleIn, false).await;
}

#[tokio::test]
async fn a_classic_rebalance_converges_after_a_crash_at_any_command() {
    crash_everywhere(Change::Rebalance, false).await;
}

#[tokio::test]
async fn an_atomic_scale_out_converges_after_a_crash_at_any_command() {
    crash_everywhere(Change::ScaleOut, true).await;
}

#[tokio::test]
async fn an_atomic_scale_in_converges_after_a_crash_at_any_command() {
    crash_everywhere(Change::ScaleIn, true).await;
}

#[tokio::test]
async fn an_atomic_rebalance_converges_after_a_crash_at_any_command() {
    crash_everywhere(Change::Rebalance, true).await;
}
