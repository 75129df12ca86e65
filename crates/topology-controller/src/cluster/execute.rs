//! Carrying out a step (layer 6): the Valkey commands over the [`ClusterNode`] seam, and the
//! Kubernetes half (deleting a member, opening its roll gate) through [`MemberObjects`],
//! which the binary implements with the API server.

use std::time::Duration;

use futures::future::join_all;
use tokio::time::Instant;

use crate::cluster::atomic;
use crate::cluster::migrate::{self, End, Moved};
use crate::cluster::model::Member;
use crate::cluster::plan::{MarkerHeal, Step};
use crate::cluster::slots::Move;
use crate::shared::commands::{ClusterNode, CommandResultExt, SlotState, StepError};
use crate::shared::connections::Connections;
use crate::shared::execute::{MemberObjects, create_replication_user, set_config};
use crate::shared::roll::FailoverReason;

/// How long a failover may take before it is reported as not done.
pub const FAILOVER_WAIT: Duration = Duration::from_secs(20);
/// How often a failover's progress is looked at.
const FAILOVER_POLL: Duration = Duration::from_millis(200);

/// Clears a replica's stale marker for `slot` by `heal` (see [`MarkerHeal`]). A reset
/// replica knows nobody, and Valkey takes no stranger's PING: it meets its primary again,
/// whose gossip brings it the rest; the planner then attaches it.
async fn clear_stale_marker<V: ClusterNode>(
    slot: u16,
    (replica, primary): (&str, &str),
    owner_id: &str,
    heal: MarkerHeal,
    members: &[Member],
    conns: &Connections<V>,
) -> Result<(), StepError> {
    let setslot = |state: SlotState<'_>| format!("CLUSTER SETSLOT {slot} {state}");
    match heal {
        MarkerHeal::Stable => {
            let on = conns.get(primary)?;
            let stable = SlotState::Stable;
            on.set_slot(slot, stable).await.on(setslot(stable), primary)
        }
        MarkerHeal::Reopen => {
            let on = conns.get(primary)?;
            for state in [SlotState::Importing(owner_id), SlotState::Stable] {
                on.set_slot(slot, state).await.on(setslot(state), primary)?;
            }
            Ok(())
        }
        MarkerHeal::Resync => {
            let address = members
                .iter()
                .find(|m| m.name == primary)
                .and_then(|m| m.address.as_ref())
                .ok_or_else(|| StepError::NotAnswering(primary.to_string()))?;
            let on = conns.get(replica)?;
            on.reset_soft().await.on("CLUSTER RESET SOFT", replica)?;
            on.meet(&address.ip, address.port, address.bus_port)
                .await
                .on(
                    format!("CLUSTER MEET {}:{}", address.ip, address.port),
                    replica,
                )
        }
    }
}

/// What a step that ran did, for the log.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Done {
    /// Slots moved by a migration step.
    pub moved: Option<Moved>,
}

/// Carries out `step` on the members that answered (`conns`). An error is for status and
/// the Event: the next reconcile looks again from scratch.
pub async fn execute<V: ClusterNode, O: MemberObjects>(
    step: &Step,
    members: &[Member],
    conns: &Connections<V>,
    objects: &O,
) -> Result<Done, StepError> {
    match step {
        Step::Wait { .. } | Step::Idle => {}
        Step::Meet(meets) | Step::Refresh(meets) => {
            for (via, targets) in meets {
                let from = conns.get(via)?;
                for t in targets {
                    from.meet(&t.ip, t.port, t.bus_port)
                        .await
                        .on(format!("CLUSTER MEET {}:{}", t.ip, t.port), via)?;
                }
            }
        }
        Step::Forget { node_id, on } => {
            // All together, inside the 60 s ban that keeps gossip from bringing it back.
            let forgotten = join_all(on.iter().map(|member| async move {
                conns
                    .get(member)?
                    .forget(node_id)
                    .await
                    .on(format!("CLUSTER FORGET {node_id}"), member)
            }))
            .await;
            forgotten.into_iter().collect::<Result<Vec<()>, _>>()?;
        }
        Step::AddSlots(assign) => {
            for (member, ranges) in assign {
                conns
                    .get(member)?
                    .add_slots_ranges(ranges)
                    .await
                    .on("CLUSTER ADDSLOTSRANGE", member)?;
            }
        }
        Step::FixOpenSlot {
            slot,
            source,
            target,
        } => {
            let moves = [Move {
                slots: (*slot, *slot),
                from: source.clone(),
                to: target.clone(),
            }];
            return migrate_slots(&moves, members, conns).await;
        }
        Step::Stabilize { slot, on } => {
            for member in on {
                conns
                    .get(member)?
                    .set_slot(*slot, SlotState::Stable)
                    .await
                    .on(format!("CLUSTER SETSLOT {slot} STABLE"), member)?;
            }
        }
        Step::ClearStaleMarker {
            slot,
            replica,
            primary,
            owner_id,
            heal,
            ..
        } => clear_stale_marker(*slot, (replica, primary), owner_id, *heal, members, conns).await?,
        Step::SetConfig(changes) => set_config(changes, conns).await?,
        Step::CreateReplicationUser { members, password } => {
            create_replication_user(members, password, conns).await?
        }
        Step::Replicate(attaches) => {
            for (member, primary_id) in attaches {
                conns
                    .get(member)?
                    .replicate(primary_id)
                    .await
                    .on(format!("CLUSTER REPLICATE {primary_id}"), member)?
            }
        }
        Step::Migrate(moves) => return migrate_slots(moves, members, conns).await,
        Step::MigrateAtomically(moves) => {
            let ends = ends(members, conns);
            let moved = atomic::migrate(moves, &ends, migrate::BUDGET).await?;
            return Ok(Done { moved: Some(moved) });
        }
        Step::Remove(names) => {
            for member in names {
                objects.delete(member).await?;
            }
        }
        Step::Failover { member, reason } => {
            let force = *reason == FailoverReason::PrimaryGone;
            failover(conns.get(member)?, member, force).await?
        }
        Step::AllowRoll { member, revision } => objects.allow_roll(member, revision).await?,
    }
    Ok(Done::default())
}

/// `CLUSTER FAILOVER` (`FORCE` when its primary is gone) on the replica `member`, then waits
/// until it reports itself primary.
async fn failover<V: ClusterNode>(conn: &V, member: &str, force: bool) -> Result<(), StepError> {
    if force {
        conn.failover_force()
            .await
            .on("CLUSTER FAILOVER FORCE", member)?;
    } else {
        conn.failover().await.on("CLUSTER FAILOVER", member)?;
    }
    let started = Instant::now();
    while started.elapsed() < FAILOVER_WAIT {
        if conn.role().await.is_ok_and(|r| r == "master") {
            return Ok(());
        }
        tokio::time::sleep(FAILOVER_POLL).await;
    }
    Err(StepError::FailoverTimedOut {
        member: member.to_string(),
        seconds: FAILOVER_WAIT.as_secs(),
    })
}

async fn migrate_slots<V: ClusterNode>(
    moves: &[Move<String>],
    members: &[Member],
    conns: &Connections<V>,
) -> Result<Done, StepError> {
    let ends = ends(members, conns);
    let primaries: Vec<&V> = ends.iter().map(|e| e.conn).collect();
    let moved = migrate::migrate(moves, &ends, &primaries, migrate::BUDGET).await?;
    Ok(Done { moved: Some(moved) })
}

/// The primaries that answered, as ends of a move, each with how many replicas its own
/// CLUSTER NODES lists.
fn ends<'a, V: ClusterNode>(members: &'a [Member], conns: &'a Connections<V>) -> Vec<End<'a, V>> {
    members
        .iter()
        .filter_map(|m| {
            let reply = m.reply.as_ref()?;
            let me = reply.view.myself();
            if !me.flags.primary {
                return None;
            }
            Some(End {
                name: &m.name,
                conn: conns.find(&m.name)?,
                id: &me.id,
                address: m.address.as_ref()?,
                replicas: reply.view.replicas_of(&me.id).count(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::cluster::fake::{FakeCluster, FakeConn, node_id};
    use crate::cluster::model::{Position, Shape};
    use crate::cluster::observe::ask;
    use crate::cluster::plan::progress::{Attempts, Seen};
    use crate::cluster::plan::{Circumstances, MarkerKind, decide, next_step};
    use crate::shared::acl::ReplicationPassword;
    use crate::shared::member_facts::{Address, Revisions};
    use crd_types::conditions::reasons::Waiting;

    /// Records what the Kubernetes half of a step was asked to do.
    #[derive(Default)]
    pub(super) struct Objects {
        calls: Mutex<Vec<String>>,
    }

    impl MemberObjects for Objects {
        async fn delete(&self, member: &str) -> Result<(), StepError> {
            self.calls.lock().unwrap().push(format!("delete {member}"));
            Ok(())
        }

        async fn allow_roll(&self, member: &str, revision: &str) -> Result<(), StepError> {
            self.calls
                .lock()
                .unwrap()
                .push(format!("allow {member} {revision}"));
            Ok(())
        }
    }

    /// The fake's nodes as cluster members `c-<shard>-<member>`: primary `p` of
    /// `FakeCluster::formed` is member 0 of shard `p`, its replica `r` member `r + 1`.
    pub(super) fn layout(shards: usize, replicas: usize) -> Vec<(String, Position)> {
        (0..shards)
            .flat_map(|p| {
                (0..=replicas).map(move |m| {
                    let n = if m == 0 { p } else { 100 + 10 * p + m - 1 };
                    let at = Position {
                        shard: p as u32,
                        member: m as u32,
                    };
                    (node_id(n), at)
                })
            })
            .collect()
    }

    /// Asks every node, as a reconcile does: the members and their connections.
    pub(super) async fn observe_all(
        cluster: &FakeCluster,
        layout: &[(String, Position)],
    ) -> (Vec<Member>, Connections<FakeConn>) {
        let mut members = Vec::new();
        let mut conns = Connections::default();
        for (id, at) in layout {
            let name = format!("c-{}-{}", at.shard, at.member);
            let (ip, port) = cluster.address(id);
            let mut member = Member {
                name: name.clone(),
                at: *at,
                address: Some(Address {
                    ip: ip.clone(),
                    port,
                    bus_port: port + 10000,
                }),
                ready: true,
                revisions: Revisions {
                    observed: true,
                    ..Default::default()
                },
                reply: None,
                gone: None,
            };
            if let Ok(conn) = cluster.connect(&ip, port)
                && let Ok(answer) = ask(&conn).await
            {
                member.reply = Some(answer.reply);
                conns.insert(name, conn);
            }
            members.push(member);
        }
        (members, conns)
    }

    pub(super) fn shape(shards: u32, replicas: u32) -> Shape {
        Shape {
            cluster: "c".into(),
            shards,
            config: Default::default(),
            image: crd_types::template::DEFAULT_IMAGE.into(),
            atomic_migration: true,
            replicas_per_shard: replicas,
            switchover: None,
            replication_password: None,
        }
    }

    /// Plans and carries out steps until the planner is idle (or `limit` steps ran); the
    /// steps taken.
    async fn settle(
        cluster: &FakeCluster,
        shape: &Shape,
        layout: &[(String, Position)],
    ) -> Vec<Step> {
        let mut taken = Vec::new();
        let mut attempts = Attempts::default();
        for _ in 0..20 {
            let (members, conns) = observe_all(cluster, layout).await;
            let circumstances = Circumstances {
                attempts: Some(&attempts),
                ..Default::default()
            };
            let step = decide(shape, &members, &circumstances);
            let result = execute(&step, &members, &conns, &Objects::default()).await;
            conns.close().await;
            attempts.record(&step, Seen::of(&members));
            result.unwrap_or_else(|e| panic!("{step}: {e}"));
            if matches!(step, Step::Idle | Step::Wait { .. }) {
                taken.push(step);
                return taken;
            }
            taken.push(step);
        }
        panic!("not settled after 20 steps: {taken:?}")
    }

    #[tokio::test]
    async fn members_whose_config_predates_the_replication_user_get_it_live_once() {
        let (cluster, _) = FakeCluster::formed(2, 1);
        let two = layout(2, 1);
        let with_user = Shape {
            replication_password: Some(ReplicationPassword::from_operator("op")),
            ..shape(2, 1)
        };
        // No member has the user (its running config predates it): every one gets it, in
        // one step, and then the cluster is as specified.
        let taken = settle(&cluster, &with_user, &two).await;
        match &taken[..] {
            [Step::CreateReplicationUser { members, .. }, Step::Idle] => {
                let names: Vec<&str> = members.iter().map(|(m, _)| m.as_str()).collect();
                assert_eq!(names, ["c-0-0", "c-0-1", "c-1-0", "c-1-1"]);
            }
            other => panic!("{other:?}"),
        }
        let (members, conns) = observe_all(&cluster, &two).await;
        conns.close().await;
        for m in &members {
            let user = m.reply.as_ref().unwrap().replication_user.clone().unwrap();
            assert!(
                with_user
                    .replication_password
                    .as_ref()
                    .unwrap()
                    .admits(user.as_ref()),
                "{}: {user:?}",
                m.name
            );
        }
        // Without the operator password the users are left alone.
        let (cluster, _) = FakeCluster::formed(1, 1);
        assert_eq!(
            settle(&cluster, &shape(1, 1), &layout(1, 1)).await,
            [Step::Idle]
        );
    }

    #[tokio::test]
    async fn a_replica_that_missed_the_end_of_a_move_is_found_and_healed() {
        let (cluster, ids) = FakeCluster::formed(2, 1);
        cluster.load(100, 30);
        let layout = layout(2, 1);
        let (a, b) = (&ids[0], &ids[1]);
        let replica_of_b = node_id(110);
        // A move of slot 100 from a to b, and b's replica starting a full sync while the
        // slot is open: its snapshot carries the importing marker.
        cluster
            .conn(b)
            .set_slot(100, SlotState::Importing(a))
            .await
            .unwrap();
        cluster
            .conn(a)
            .set_slot(100, SlotState::Migrating(b))
            .await
            .unwrap();
        cluster.begin_full_sync(&replica_of_b);

        // The planner does not finish the move while that replica syncs.
        let (members, conns) = observe_all(&cluster, &layout).await;
        match next_step(&shape(2, 1), &members, None) {
            Step::Wait { reason, message } => {
                assert_eq!(reason, Waiting::ReplicaNotSynced, "{message}");
            }
            other => panic!("{other:?}"),
        }
        conns.close().await;

        // The race the check cannot close: the move ends anyway (a controller that checked
        // just before the sync began), and the sync ends after it.
        let source = cluster.conn(a);
        for key in source.keys_in_slot(100, 100).await.unwrap() {
            source.migrate("10.0.0.1", 6379, vec![key]).await.unwrap();
        }
        cluster
            .conn(b)
            .set_slot(100, SlotState::Node(b))
            .await
            .unwrap();
        source.set_slot(100, SlotState::Node(b)).await.unwrap();
        cluster.finish_full_sync(&replica_of_b);
        assert_eq!(cluster.markers(&replica_of_b).0.get(&100), Some(a), "stale");

        let taken = settle(&cluster, &shape(2, 1), &layout).await;
        assert_eq!(
            taken[0],
            Step::ClearStaleMarker {
                slot: 100,
                marker: MarkerKind::Importing,
                replica: "c-1-1".into(),
                primary: "c-1-0".into(),
                owner_id: b.clone(),
                owner: "its primary c-1-0".into(),
                heal: MarkerHeal::Stable,
            }
        );
        // Then slot 100's move left the split one slot off, which a move back evens out.
        assert!(matches!(taken[1], Step::Migrate(_)), "{taken:?}");
        assert_eq!(taken.last(), Some(&Step::Idle));
        assert_eq!(cluster.markers(&replica_of_b), Default::default());
        assert_eq!(cluster.keys(b).get(&100), Some(&30));
    }

    #[tokio::test]
    async fn a_replicas_stale_import_of_a_slot_another_shard_owns_is_cleared() {
        // Issue 41: b's replica imports slot 100 from a, which owns it; b has no marker.
        // `SETSLOT 100 NODE a` through b would leave it (a replica drops an importing marker
        // only for its own primary); STABLE through b clears it at once.
        let (cluster, ids) = FakeCluster::formed(2, 1);
        cluster.load(100, 30);
        let (a, replica_of_b) = (&ids[0], node_id(110));
        cluster.set_markers(&replica_of_b, &[(100, a)], &[]);
        let taken = settle(&cluster, &shape(2, 1), &layout(2, 1)).await;
        match &taken[..] {
            [Step::ClearStaleMarker { heal, owner, .. }, Step::Idle] => {
                assert_eq!(*heal, MarkerHeal::Stable);
                assert_eq!(owner, "c-0-0 of another shard");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(cluster.markers(&replica_of_b), Default::default());
        assert_eq!(cluster.owner(100).as_ref(), Some(a));
        assert!(
            cluster
                .log()
                .iter()
                .any(|c| c.ends_with("CLUSTER SETSLOT 100 STABLE")),
            "{:?}",
            cluster.log()
        );
    }

    #[tokio::test]
    async fn a_marker_nothing_through_the_primary_reaches_ends_with_a_resync_of_the_replica() {
        let (cluster, ids) = FakeCluster::formed(2, 1);
        cluster.load(100, 30);
        let (a, replica_of_b) = (&ids[0], node_id(110));
        cluster.set_markers(&replica_of_b, &[(100, a)], &[]);
        cluster.deafen_to_setslot(&replica_of_b);
        let taken = settle(&cluster, &shape(2, 1), &layout(2, 1)).await;
        let heals: Vec<MarkerHeal> = taken
            .iter()
            .filter_map(|s| match s {
                Step::ClearStaleMarker { heal, .. } => Some(*heal),
                _ => None,
            })
            .collect();
        use MarkerHeal::*;
        assert_eq!(
            heals,
            [Stable, Stable, Stable, Reopen, Reopen, Reopen, Resync],
            "{taken:?}"
        );
        // Reset, it met its primary again and is attached again (a full sync), and nothing
        // is left open.
        let after: Vec<&Step> = taken.iter().skip(7).collect();
        assert!(
            matches!(after[..], [Step::Replicate(_), Step::Idle]),
            "{after:?}"
        );
        for id in cluster.ids() {
            assert_eq!(cluster.markers(&id), Default::default(), "{id}");
        }
        assert_eq!(cluster.primary_of(&replica_of_b).as_ref(), Some(&ids[1]));
        assert_eq!(cluster.keys(a).get(&100), Some(&30));
    }

    #[tokio::test]
    async fn on_9x_a_scale_out_moves_slots_atomically_and_never_opens_a_slot() {
        let (cluster, ids) = FakeCluster::formed(2, 0);
        for slot in (0..16384).step_by(64) {
            cluster.load(slot, 2);
        }
        let newcomer = cluster.add_node(2);
        for id in ids.iter().chain([&newcomer]) {
            cluster.set_version(id, crd_types::versions::Version::new(9, 1));
        }
        let mut layout = layout(2, 0);
        layout.push((
            newcomer.clone(),
            Position {
                shard: 2,
                member: 0,
            },
        ));
        let on_91 = Shape {
            image: "valkey/valkey:9.1".into(),
            ..shape(3, 0)
        };
        let taken = settle(&cluster, &on_91, &layout).await;
        assert!(
            taken
                .iter()
                .any(|s| matches!(s, Step::MigrateAtomically(_))),
            "{taken:?}"
        );
        assert!(
            !taken.iter().any(|s| matches!(s, Step::Migrate(_))),
            "{taken:?}"
        );
        assert_eq!(taken.last(), Some(&Step::Idle));
        let held = |id: &str| cluster.slots_of(id).len();
        assert!(
            [held(&ids[0]), held(&ids[1]), held(&newcomer)]
                .iter()
                .all(|n| (5461..=5462).contains(n))
        );
        assert_eq!(cluster.total_keys(), 2 * 16384 / 64);
        assert!(
            !cluster
                .log()
                .iter()
                .any(|c| c.contains("SETSLOT") || c.contains("MIGRATE "))
        );
    }

    #[tokio::test]
    async fn a_scale_out_on_the_fake_moves_a_third_of_the_slots_with_their_keys() {
        // Three primaries' slots spread over three shards after a two-shard start.
        let (cluster, ids) = FakeCluster::formed(2, 0);
        for slot in (0..16384).step_by(64) {
            cluster.load(slot, 2);
        }
        let newcomer = cluster.add_node(2);
        let mut layout = layout(2, 0);
        layout.push((
            newcomer.clone(),
            Position {
                shard: 2,
                member: 0,
            },
        ));
        let taken = settle(&cluster, &shape(3, 0), &layout).await;
        assert!(matches!(taken[0], Step::Meet(_)), "{taken:?}");
        assert!(
            taken.iter().any(|s| matches!(s, Step::Migrate(_))),
            "{taken:?}"
        );
        assert_eq!(taken.last(), Some(&Step::Idle));
        let held = |id: &str| cluster.slots_of(id).len();
        assert!(
            [held(&ids[0]), held(&ids[1]), held(&newcomer)]
                .iter()
                .all(|n| (5461..=5462).contains(n))
        );
        assert_eq!(cluster.total_keys(), 2 * 16384 / 64);
        for id in ids.iter().chain([&newcomer]) {
            assert_eq!(cluster.markers(id), Default::default());
        }
    }

    #[tokio::test]
    async fn each_step_sends_its_commands_to_the_named_members() {
        let (cluster, ids) = FakeCluster::formed(2, 1);
        let layout = layout(2, 1);
        let (members, conns) = observe_all(&cluster, &layout).await;
        let objects = Objects::default();
        let run = |step: Step| {
            let (members, conns, objects) = (&members, &conns, &objects);
            async move { execute(&step, members, conns, objects).await }
        };

        run(Step::Stabilize {
            slot: 7,
            on: vec!["c-0-0".into(), "c-1-0".into()],
        })
        .await
        .unwrap();
        run(Step::Forget {
            node_id: node_id(99),
            on: vec!["c-0-0".into()],
        })
        .await
        .unwrap();
        run(Step::Remove(vec!["c-1-1".into()])).await.unwrap();
        run(Step::AllowRoll {
            member: "c-0-1".into(),
            revision: "r2".into(),
        })
        .await
        .unwrap();
        run(Step::SetConfig(vec![(
            "c-0-1".into(),
            vec![
                ("maxmemory".into(), "1000".into()),
                ("hz".into(), "20".into()),
            ],
        )]))
        .await
        .unwrap();
        let log = cluster.log();
        let sent: Vec<&str> = log
            .iter()
            .filter(|l| {
                !l.contains("NODES")
                    && !l.contains("INFO")
                    && !l.contains("SHARDS")
                    && !l.contains("CONFIG GET")
                    && !l.contains("ACL GETUSER")
            })
            .map(String::as_str)
            .collect();
        assert_eq!(
            sent,
            [
                "10.0.0.0:6379 CLUSTER SETSLOT 7 STABLE",
                "10.0.0.1:6379 CLUSTER SETSLOT 7 STABLE",
                &format!("10.0.0.0:6379 CLUSTER FORGET {}", node_id(99)),
                "10.0.0.100:6379 CONFIG SET maxmemory 1000",
                "10.0.0.100:6379 CONFIG SET hz 20",
            ]
        );
        assert_eq!(
            *objects.calls.lock().unwrap(),
            ["delete c-1-1", "allow c-0-1 r2"]
        );

        // A failover waits until the replica is primary.
        run(Step::Failover {
            member: "c-0-1".into(),
            reason: FailoverReason::Roll,
        })
        .await
        .unwrap();
        assert_eq!(cluster.owner(0).as_deref(), Some(node_id(100).as_str()));
        assert_eq!(ids.len(), 2);
        conns.close().await;
    }

    #[tokio::test]
    async fn failures_name_the_command_and_the_member() {
        let (cluster, _) = FakeCluster::formed(1, 1);
        let layout = layout(1, 1);
        cluster.set_answering(&node_id(100), false);
        let (members, conns) = observe_all(&cluster, &layout).await;
        let objects = Objects::default();

        let step = Step::Replicate(vec![("c-0-1".into(), node_id(0))]);
        let e = execute(&step, &members, &conns, &objects)
            .await
            .unwrap_err();
        assert_eq!(e.to_string(), "c-0-1 does not answer");

        let step = Step::Replicate(vec![("c-0-0".into(), node_id(0))]);
        let e = execute(&step, &members, &conns, &objects)
            .await
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "CLUSTER REPLICATE {} on c-0-0: ERR To set a master the node must be empty and \
                 without assigned slots.",
                node_id(0)
            )
        );
        conns.close().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_failover_that_does_not_complete_is_reported() {
        let (cluster, _) = FakeCluster::formed(1, 1);
        cluster.stick_failover(&node_id(100));
        let (members, conns) = observe_all(&cluster, &layout(1, 1)).await;
        let step = Step::Failover {
            member: "c-0-1".into(),
            reason: FailoverReason::Switchover,
        };
        let e = execute(&step, &members, &conns, &Objects::default())
            .await
            .unwrap_err();
        assert_eq!(e.to_string(), "c-0-1 did not become primary within 20s");
        conns.close().await;
    }
}

#[cfg(test)]
mod crash_points;
