//! Planner tests on a small simulated cluster: every member sees the same CLUSTER NODES
//! (with its own `myself`), unless a test edits one view.

use super::*;
use crate::info::ReplicationInfo;
use crate::model::{Position, Reply, Revisions, SwitchoverRequest};
use crate::slots::even_split;
use crd_types::names::cluster_member_name;

/// One simulated member.
#[derive(Clone)]
struct Sim {
    shard: u32,
    member: u32,
    /// Valkey node id; `None` while the member does not answer.
    id: Option<String>,
    /// Primary id when a replica.
    follows: Option<String>,
    slots: Vec<SlotRange>,
    ready: bool,
    revisions: Revisions,
    /// Extra flags on this node's line, as every view shows it ("fail", ...).
    flags: &'static str,
    synced: bool,
    offset: i64,
    /// Open-slot markers on its own line ("[42->-<id>]").
    markers: String,
    /// What CLUSTER INFO says (`None`: not asked).
    state_ok: Option<bool>,
}

fn ip(shard: u32, member: u32) -> String {
    format!("10.0.{shard}.{member}")
}

fn id(shard: u32, member: u32) -> String {
    format!("{:0>40}", format!("{shard}{member}"))
}

fn sim(shard: u32, member: u32) -> Sim {
    Sim {
        shard,
        member,
        id: Some(id(shard, member)),
        follows: None,
        slots: vec![],
        ready: true,
        revisions: Revisions {
            desired: Some("r1".into()),
            running: Some("r1".into()),
            allowed: None,
            observed: true,
        },
        flags: "",
        synced: true,
        offset: 100,
        markers: String::new(),
        state_ok: Some(true),
    }
}

/// A formed cluster: member 0 primary of each shard with the even split, others replicas.
fn formed(shards: u32, replicas: u32) -> Vec<Sim> {
    let split = even_split(shards as usize);
    let mut out = vec![];
    for shard in 0..shards {
        for member in 0..=replicas {
            let mut m = sim(shard, member);
            if member == 0 {
                m.slots = split[shard as usize].clone();
            } else {
                m.follows = Some(id(shard, 0));
            }
            out.push(m);
        }
    }
    out
}

fn line(s: &Sim, myself: bool) -> Option<String> {
    let id = s.id.as_ref()?;
    let mut flags = vec![];
    if myself {
        flags.push("myself");
    }
    flags.push(if s.follows.is_some() {
        "slave"
    } else {
        "master"
    });
    if !s.flags.is_empty() {
        flags.push(s.flags);
    }
    let slots: Vec<String> = s.slots.iter().map(|r| slots::format_range(*r)).collect();
    let mut text = format!(
        "{id} {}:6379@16379 {} {} 0 0 1 connected {}",
        ip(s.shard, s.member),
        flags.join(","),
        s.follows.as_deref().unwrap_or("-"),
        slots.join(" ")
    );
    if myself && !s.markers.is_empty() {
        text.push(' ');
        text.push_str(&s.markers);
    }
    Some(text.trim_end().to_string())
}

fn members(sims: &[Sim]) -> Vec<Member> {
    members_with(sims, |_, _| true)
}

/// Members whose views list only the nodes `knows(viewer, node)` allows.
fn members_with(sims: &[Sim], knows: impl Fn(&Sim, &Sim) -> bool) -> Vec<Member> {
    sims.iter()
        .map(|me| {
            let reply = me.id.as_ref().filter(|_| me.flags != "fail").map(|_| {
                let text: Vec<String> = sims
                    .iter()
                    .filter(|other| std::ptr::eq(*other, me) || knows(me, other))
                    .filter_map(|other| line(other, std::ptr::eq(other, me)))
                    .collect();
                let replication = match &me.follows {
                    Some(p) => {
                        let primary = sims.iter().find(|s| s.id.as_deref() == Some(p)).unwrap();
                        format!(
                            "role:slave\nmaster_host:{}\nmaster_port:6379\nmaster_link_status:{}\n\
                             master_sync_in_progress:0\nslave_repl_offset:{}\nconnected_slaves:0\n\
                             master_repl_offset:{}\n",
                            ip(primary.shard, primary.member),
                            if me.synced { "up" } else { "down" },
                            me.offset,
                            me.offset
                        )
                    }
                    None => format!(
                        "role:master\nconnected_slaves:0\nmaster_repl_offset:{}\n",
                        me.offset
                    ),
                };
                Reply {
                    view: ClusterView::parse(&text.join("\n")).unwrap(),
                    replication: ReplicationInfo::parse(&replication).unwrap(),
                    shard_groups: None,
                    cluster_state_ok: me.state_ok,
                }
            });
            Member {
                name: cluster_member_name("c", me.shard, me.member),
                at: Position {
                    shard: me.shard,
                    member: me.member,
                },
                address: Some(Address {
                    ip: ip(me.shard, me.member),
                    port: 6379,
                    bus_port: 16379,
                }),
                ready: me.ready,
                revisions: me.revisions.clone(),
                reply,
            }
        })
        .collect()
}

fn shape(shards: u32, replicas: u32) -> Shape {
    Shape {
        cluster: "c".into(),
        shards,
        replicas_per_shard: replicas,
        switchover: None,
    }
}

fn step(d: &Shape, sims: &[Sim]) -> Step {
    next_step(d, &members(sims), None)
}

#[test]
fn nothing_to_do_on_a_healthy_cluster() {
    assert_eq!(step(&shape(3, 1), &formed(3, 1)), Step::Idle);
}

#[test]
fn formation_waits_for_every_member_then_meets_then_assigns() {
    let d = shape(2, 1);
    let mut sims: Vec<Sim> = (0..2)
        .flat_map(|s| (0..2).map(move |m| sim(s, m)))
        .collect();
    sims[3].id = None;
    assert!(
        matches!(step(&d, &sims), Step::Wait { reason: Waiting::Forming, message: w } if w.contains("3 of 4"))
    );

    // Everyone answers but knows only itself: the anchor meets the other three.
    sims[3].id = Some(id(1, 1));
    let lonely = members_with(&sims, |_, _| false);
    match next_step(&d, &lonely, None) {
        Step::Meet { via, targets } => {
            assert_eq!(via, "c-0-0");
            assert_eq!(targets.len(), 3);
        }
        other => panic!("{other:?}"),
    }

    // All joined, no slots: member 0 of each shard takes its half.
    match step(&d, &sims) {
        Step::AddSlots(assign) => assert_eq!(
            assign,
            vec![
                ("c-0-0".to_string(), vec![(0, 8191)]),
                ("c-1-0".to_string(), vec![(8192, 16383)]),
            ]
        ),
        other => panic!("{other:?}"),
    }

    // Slots assigned: the other members follow their shard's member 0.
    sims[0].slots = vec![(0, 8191)];
    sims[2].slots = vec![(8192, 16383)];
    assert_eq!(
        step(&d, &sims),
        Step::Replicate {
            member: "c-0-1".into(),
            primary_id: id(0, 0)
        }
    );
}

#[test]
fn formation_interrupted_after_some_slots_assigns_the_rest() {
    let d = shape(2, 0);
    let mut sims = vec![sim(0, 0), sim(1, 0)];
    sims[0].slots = vec![(0, 8191)];
    assert_eq!(
        step(&d, &sims),
        Step::AddSlots(vec![("c-1-0".into(), vec![(8192, 16383)])])
    );
}

#[test]
fn scale_out_joins_attaches_then_moves_a_quarter() {
    let d = shape(4, 1);
    let mut sims = formed(3, 1);
    sims.push(sim(3, 0));
    sims.push(sim(3, 1));
    // New members are known to nobody yet.
    let fresh = |s: &Sim| s.shard == 3;
    let m = members_with(&sims, |viewer, node| fresh(viewer) == fresh(node));
    assert!(matches!(next_step(&d, &m, None), Step::Meet { targets, .. } if targets.len() == 2));
    // Joined: the new replica follows the new empty primary first.
    assert_eq!(
        step(&d, &sims),
        Step::Replicate {
            member: "c-3-1".into(),
            primary_id: id(3, 0)
        }
    );
    sims[7].follows = Some(id(3, 0));
    match step(&d, &sims) {
        Step::Migrate(moves) => {
            assert!(moves.iter().all(|m| m.to == "c-3-0"));
            let moved: usize = moves.iter().map(|m| slots::slot_count(&[m.slots])).sum();
            assert_eq!(moved, 4096);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn slots_do_not_move_while_a_member_is_down_or_views_disagree() {
    let d = shape(4, 0);
    let mut sims = formed(3, 0);
    sims.push(sim(3, 0));
    sims[3].ready = false;
    assert!(
        matches!(step(&d, &sims), Step::Wait { reason: Waiting::MigrationEndNotReady, message: w } if w.contains("c-3-0 must answer"))
    );
    sims[3].ready = true;
    // c-1-0 believes slot 0 is its own.
    let mut m = members(&sims);
    let other = &mut m[1].reply.as_mut().unwrap().view;
    let text = [
        line(&sims[0], false).unwrap().replace(" 0-5460", " 1-5460"),
        line(&sims[1], true).unwrap().replace(" 5461-", " 0 5461-"),
        line(&sims[2], false).unwrap(),
        line(&sims[3], false).unwrap(),
    ]
    .join("\n");
    *other = ClusterView::parse(&text).unwrap();
    assert!(
        matches!(next_step(&d, &m, None), Step::Wait { reason: Waiting::MembersDisagree, message: w } if w.contains("agree"))
    );
}

#[test]
fn scale_in_drains_then_removes_then_forgets() {
    let d = shape(2, 1);
    let mut sims = formed(3, 1);
    match step(&d, &sims) {
        Step::Migrate(moves) => assert!(moves.iter().all(|m| m.from == "c-2-0")),
        other => panic!("{other:?}"),
    }
    // Drained: shard 2 goes.
    let split = even_split(2);
    sims[0].slots = split[0].clone();
    sims[2].slots = split[1].clone();
    sims[4].slots = vec![];
    assert_eq!(
        step(&d, &sims),
        Step::Remove(vec!["c-2-0".into(), "c-2-1".into()])
    );
    // Deleted: Valkey marks them failed; every member forgets them, one id per step.
    sims[4].flags = "fail";
    sims[5].flags = "fail";
    let m: Vec<Member> = members(&sims).into_iter().take(4).collect();
    match next_step(&d, &m, None) {
        Step::Forget { node_id, on } => {
            assert_eq!(node_id, id(2, 0));
            assert_eq!(on, vec!["c-0-0", "c-0-1", "c-1-0", "c-1-1"]);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_dead_node_that_is_not_failed_yet_is_not_forgotten() {
    let d = shape(1, 1);
    let mut sims = formed(1, 1);
    sims.push(sim(0, 2));
    sims[2].follows = Some(id(0, 0));
    sims[2].flags = "fail?";
    // c-0-2 is gone from the spec and from Kubernetes, but only suspected by Valkey.
    let m: Vec<Member> = members(&sims).into_iter().take(2).collect();
    assert_eq!(next_step(&d, &m, None), Step::Idle);
}

#[test]
fn fewer_replicas_removes_the_extra_member_but_a_primary_hands_over_first() {
    let d = shape(1, 1);
    let mut sims = formed(1, 2);
    assert_eq!(step(&d, &sims), Step::Remove(vec!["c-0-2".into()]));
    // The member to remove is the primary (after an earlier failover).
    sims[2].slots = std::mem::take(&mut sims[0].slots);
    sims[2].follows = None;
    sims[0].follows = Some(id(0, 2));
    sims[1].follows = Some(id(0, 2));
    sims[1].offset = 90;
    assert_eq!(
        step(&d, &sims),
        Step::Failover {
            member: "c-0-0".into(),
            reason: FailoverReason::Removal
        }
    );
}

#[test]
fn a_returning_empty_member_rejoins_as_replica_and_its_old_identity_is_forgotten() {
    let d = shape(1, 1);
    let mut sims = formed(1, 1);
    // c-0-0 failed over to c-0-1, then came back with an empty data directory: new id,
    // an empty primary; its old identity is failed.
    sims[1].slots = std::mem::take(&mut sims[0].slots);
    sims[1].follows = None;
    let mut old = sims[0].clone();
    old.member = 9; // not a member any more: only a line in the views
    old.flags = "fail";
    old.follows = Some(id(0, 1));
    sims[0].id = Some("f".repeat(40));
    sims[0].follows = None;
    sims.push(old);
    let mut m = members(&sims);
    m.pop();
    match next_step(&d, &m, None) {
        Step::Forget { node_id, .. } => assert_eq!(node_id, id(0, 0)),
        other => panic!("{other:?}"),
    }
    sims.pop();
    assert_eq!(
        step(&d, &sims),
        Step::Replicate {
            member: "c-0-0".into(),
            primary_id: id(0, 1)
        }
    );
}

#[test]
fn an_interrupted_migration_is_finished() {
    let d = shape(2, 0);
    let mut sims = formed(2, 0);
    sims[0].markers = format!("[100->-{}]", id(1, 0));
    sims[1].markers = format!("[100-<-{}]", id(0, 0));
    assert_eq!(
        step(&d, &sims),
        Step::FixOpenSlot {
            slot: 100,
            source: "c-0-0".into(),
            target: "c-1-0".into()
        }
    );
    // A marker towards a node that is no member: cleared.
    sims[1].markers.clear();
    sims[0].markers = format!("[100->-{}]", "e".repeat(40));
    assert_eq!(
        step(&d, &sims),
        Step::Stabilize {
            slot: 100,
            on: vec!["c-0-0".into()]
        }
    );
}

#[test]
fn rolls_replicas_first_one_at_a_time_and_fails_over_before_a_primary() {
    let d = shape(2, 1);
    let mut sims = formed(2, 1);
    for s in &mut sims {
        s.revisions.desired = Some("r2".into());
    }
    assert_eq!(
        step(&d, &sims),
        Step::AllowRoll {
            member: "c-0-1".into(),
            revision: "r2".into()
        }
    );
    // c-0-1 is restarting: nobody else rolls.
    sims[1].revisions.allowed = Some("r2".into());
    sims[1].ready = false;
    assert!(
        matches!(step(&d, &sims), Step::Wait { reason: Waiting::MemberRolling, message: w } if w.contains("c-0-1"))
    );
    // Back, but still resyncing: still waiting.
    sims[1].ready = true;
    sims[1].revisions.running = Some("r2".into());
    sims[1].synced = false;
    assert!(matches!(
        step(&d, &sims),
        Step::Wait {
            reason: Waiting::MemberRolling,
            ..
        }
    ));
    sims[1].synced = true;
    sims[3].revisions.running = Some("r2".into());
    sims[3].revisions.allowed = Some("r2".into());
    // Only primaries left: hand over to the in-sync replica first.
    assert_eq!(
        step(&d, &sims),
        Step::Failover {
            member: "c-0-1".into(),
            reason: FailoverReason::Roll
        }
    );
    // With its replica out of sync, the primary waits.
    sims[1].synced = false;
    sims[1].revisions.allowed = None;
    sims[1].revisions.running = Some("r2".into());
    assert!(matches!(
        step(&d, &sims),
        Step::Wait {
            reason: Waiting::MemberNotReady,
            ..
        }
    ));
}

#[test]
fn no_roll_until_node_controller_has_rendered_every_member() {
    let d = shape(1, 1);
    let mut sims = formed(1, 1);
    // The primary's new revision is known, its replica's not yet.
    sims[0].revisions.desired = Some("r2".into());
    sims[1].revisions.observed = false;
    assert!(
        matches!(step(&d, &sims), Step::Wait { reason: Waiting::SpecNotRendered, message: w } if w.contains("c-0-1"))
    );
    sims[1].revisions.observed = true;
    sims[1].revisions.desired = Some("r2".into());
    assert_eq!(
        step(&d, &sims),
        Step::AllowRoll {
            member: "c-0-1".into(),
            revision: "r2".into()
        }
    );
}

#[test]
fn a_reverted_bad_image_rolls_the_stuck_member_back() {
    let d = shape(1, 1);
    let mut sims = formed(1, 1);
    // c-0-1 was let roll to r2, whose image never starts; the spec went back to r1.
    sims[1].revisions = Revisions {
        desired: Some("r1".into()),
        running: Some("r2".into()),
        allowed: Some("r2".into()),
        observed: true,
    };
    sims[1].ready = false;
    sims[1].id = None; // does not answer
    assert_eq!(
        step(&d, &sims),
        Step::AllowRoll {
            member: "c-0-1".into(),
            revision: "r1".into()
        }
    );
}

#[test]
fn a_down_member_that_is_not_pending_holds_the_roll() {
    let d = shape(1, 1);
    let mut sims = formed(1, 1);
    sims[0].revisions.desired = Some("r2".into());
    sims[1].ready = false;
    assert!(
        matches!(step(&d, &sims), Step::Wait { reason: Waiting::MemberNotReady, message: w } if w.contains("c-0-1"))
    );
}

#[test]
fn a_primary_without_replicas_rolls_in_place() {
    let d = shape(1, 0);
    let mut sims = formed(1, 0);
    sims[0].revisions.desired = Some("r2".into());
    assert_eq!(
        step(&d, &sims),
        Step::AllowRoll {
            member: "c-0-0".into(),
            revision: "r2".into()
        }
    );
}

#[test]
fn switchover_fails_over_to_the_target_once() {
    let mut d = shape(1, 2);
    d.switchover = Some(SwitchoverRequest {
        id: "s1".into(),
        target: "c-0-2".into(),
    });
    let mut sims = formed(1, 2);
    sims[1].offset = 200; // the best replica, but not the target
    assert_eq!(
        next_step(&d, &members(&sims), None),
        Step::Failover {
            member: "c-0-2".into(),
            reason: FailoverReason::Switchover
        }
    );
    assert_eq!(switchover_outcome(&d, &members(&sims)), None);
    assert_eq!(next_step(&d, &members(&sims), Some("s1")), Step::Idle);
    // Done: c-0-2 holds the slots.
    sims[2].slots = std::mem::take(&mut sims[0].slots);
    sims[2].follows = None;
    sims[0].follows = Some(id(0, 2));
    sims[1].follows = Some(id(0, 2));
    assert!(matches!(
        switchover_outcome(&d, &members(&sims)),
        Some(Ok(_))
    ));
    d.switchover = Some(SwitchoverRequest {
        id: "s2".into(),
        target: "c-0-7".into(),
    });
    assert!(matches!(
        switchover_outcome(&d, &members(&sims)),
        Some(Err(_))
    ));
}

#[test]
fn two_members_of_a_shard_holding_slots_stops_the_planner() {
    let d = shape(1, 1);
    let mut sims = formed(1, 1);
    sims[1].follows = None;
    sims[1].slots = vec![(0, 10)];
    sims[0].slots = vec![(11, 16383)];
    assert!(
        matches!(step(&d, &sims), Step::Wait { reason: Waiting::TwoPrimariesInShard, message: w } if w.contains("resolve by hand"))
    );
}

#[test]
fn removed_nodes_still_listed_by_valkey_are_strangers_until_forgotten() {
    let d = shape(1, 1);
    let mut sims = formed(1, 2);
    sims[2].flags = "fail?";
    // c-0-2's ValkeyNode is gone; Valkey still lists it.
    let m: Vec<Member> = members(&sims).into_iter().take(2).collect();
    let survey = survey(&d, &m);
    assert_eq!(survey.strangers.len(), 1);
    assert!(survey.strangers[0].starts_with(&id(0, 2)));
    assert!(survey.shards[0].ready);
    assert!(
        super::survey(&d, &members(&formed(1, 1)))
            .strangers
            .is_empty()
    );
}

#[test]
fn a_replica_filed_under_another_shard_id_is_unsettled() {
    let d = shape(2, 1);
    let sims = formed(2, 1);
    let mut m = members(&sims);
    let settled = vec![vec![id(0, 0), id(0, 1)], vec![id(1, 0), id(1, 1)]];
    for member in &mut m {
        member.reply.as_mut().unwrap().shard_groups = Some(settled.clone());
    }
    assert_eq!(survey(&d, &m).unsettled_shard_ids, None);
    // c-1-1's view still has c-0-1 in a shard of its own.
    m[3].reply.as_mut().unwrap().shard_groups = Some(vec![
        vec![id(0, 0)],
        vec![id(0, 1)],
        vec![id(1, 0), id(1, 1)],
    ]);
    let unsettled = survey(&d, &m).unsettled_shard_ids.unwrap();
    assert!(
        unsettled.contains("c-1-1") && unsettled.contains(&id(0, 1)),
        "{unsettled}"
    );
}

#[test]
fn a_replicas_copy_of_a_slot_marker_is_left_to_its_primary() {
    let d = shape(2, 1);
    let mut sims = formed(2, 1);
    // c-1-1 (a replica) still shows an importing marker its primary no longer has.
    sims[3].markers = format!("[100-<-{}]", id(0, 0));
    assert_eq!(step(&d, &sims), Step::Idle);
    assert_eq!(survey(&d, &members(&sims)).open_slots, 0);
}

#[test]
fn a_member_answering_clusterdown_is_reported() {
    let d = shape(1, 1);
    let mut sims = formed(1, 1);
    assert_eq!(survey(&d, &members(&sims)).not_serving, None);
    sims[0].state_ok = Some(false);
    assert_eq!(
        survey(&d, &members(&sims)).not_serving.as_deref(),
        Some("c-0-0")
    );
    sims[0].state_ok = None;
    assert_eq!(survey(&d, &members(&sims)).not_serving, None);
}
