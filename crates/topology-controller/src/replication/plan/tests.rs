use super::*;
use crate::replication::PORT;
use crate::replication::sim::*;
use crate::shared::auth::PasswordError;
use crate::shared::guard::Holds;
use crd_types::template::SecretKeyRef;

#[test]
fn a_new_group_waits_for_every_member_then_attaches_then_monitors() {
    let g = group(3, 3);
    let mut m = fresh(3, 3);
    m.sentinels[2].answer = None;
    let (reason, why) = wait_of(next_step(&g, &m, None, None));
    assert_eq!(reason, Waiting::Forming);
    assert!(why.contains("5 of 6"), "{why}");

    let m = fresh(3, 3);
    assert_eq!(
        next_step(&g, &m, None, None),
        Step::ReplicaOf {
            member: "g-1".into(),
            primary: "g-0".into(),
            ip: ip(0),
            demote: false,
        },
        "data node 0 is the first primary; the others are empty primaries"
    );

    let m = formed_unmonitored(3, 3);
    assert_eq!(
        next_step(&g, &m, None, None),
        Step::Monitor {
            sentinel: "g-sentinel-0".into(),
            primary: "g-0".into(),
            ip: ip(0),
        }
    );
    assert_eq!(next_step(&g, &formed(3, 3), None, None), Step::Idle);
}

#[test]
fn the_sentinels_majority_names_the_primary() {
    let g = group(3, 3);
    // A failover made g-2 primary; g-0 came back serving as primary on its own.
    let mut m = formed(3, 3);
    promote(&mut m, 2);
    m.data[0] = data_primary(0, 0);
    assert_eq!(
        next_step(&g, &m, Some("g-0"), None),
        Step::ReplicaOf {
            member: "g-0".into(),
            primary: "g-2".into(),
            ip: ip(2),
            demote: true,
        }
    );
    // Two sentinels of three still name g-0: the majority wins, and it does not serve.
    let mut m = formed(3, 3);
    promote(&mut m, 2);
    for s in &mut m.sentinels[..2] {
        s.answer
            .as_mut()
            .unwrap()
            .monitored
            .as_mut()
            .unwrap()
            .primary = (ip(0), PORT);
    }
    let (reason, why) = wait_of(next_step(&g, &m, None, None));
    assert_eq!(reason, Waiting::NoPrimary);
    assert!(
        why.contains("g-0 is the primary but does not serve"),
        "{why}"
    );
}

#[test]
fn split_sentinels_name_nobody() {
    let g = group(3, 2);
    let mut m = formed(3, 2);
    monitored_mut(&mut m, 1).primary = (ip(1), PORT);
    let (reason, why) = wait_of(next_step(&g, &m, None, None));
    assert_eq!(reason, Waiting::NoPrimary);
    assert!(why.contains("disagree"), "{why}");
}

#[test]
fn sentinels_get_the_specs_options() {
    let mut g = group(2, 3);
    g.options.quorum = 3;
    let m = formed(2, 3);
    assert_eq!(
        next_step(&g, &m, None, None),
        Step::Configure {
            sentinel: "g-sentinel-0".into(),
            options: vec![("quorum".into(), "3".into())],
        }
    );
}

#[test]
fn a_foreign_member_and_password_problems_come_first() {
    let g = group(1, 1);
    let m = formed(1, 1);
    let c = Circumstances {
        holds: Holds {
            foreign_member: Some("g-0"),
            ..Default::default()
        },
        ..Default::default()
    };
    assert_eq!(wait_of(decide(&g, &m, &c)).0, Waiting::ForeignMember);
    let missing = PasswordError::SecretMissing(SecretKeyRef {
        name: "g-auth".into(),
        key: "password".into(),
    });
    let c = Circumstances {
        holds: Holds {
            default_password_problems: &[&missing],
            ..Default::default()
        },
        ..Default::default()
    };
    assert_eq!(
        wait_of(decide(&g, &m, &c)).0,
        Waiting::DefaultPasswordUnreadable
    );
    assert_eq!(decide(&g, &m, &Circumstances::default()), Step::Idle);
}

fn switchover_to(g: &mut Group, member: u32) {
    g.switchover = Some(crate::shared::member_facts::SwitchoverRequest {
        id: "s1".into(),
        target: format!("g-{member}"),
    });
}

/// Sets what data node `i` and every sentinel say of its replica-priority.
fn priority(m: &mut Members, i: u32, priority: u32) {
    m.data[i as usize].answer.as_mut().unwrap().priority = Some(priority);
    for s in &mut m.sentinels {
        for r in &mut s
            .answer
            .as_mut()
            .unwrap()
            .monitored
            .as_mut()
            .unwrap()
            .replicas
        {
            if r.ip == ip(i) {
                r.priority = Some(priority);
            }
        }
    }
}

#[test]
fn a_switchover_prefers_its_target_then_hands_over_once() {
    let mut g = group(3, 3);
    switchover_to(&mut g, 2);
    let mut m = formed(3, 3);
    assert_eq!(
        next_step(&g, &m, None, None),
        Step::SetPriority {
            member: "g-2".into(),
            priority: 1
        }
    );
    // Set on the replica, not yet read by the sentinels (every 10 s).
    m.data[2].answer.as_mut().unwrap().priority = Some(1);
    let (reason, why) = wait_of(next_step(&g, &m, None, None));
    assert_eq!(reason, Waiting::SentinelsCatchingUp);
    assert!(why.contains("does not prefer g-2"), "{why}");
    priority(&mut m, 2, 1);
    assert_eq!(
        next_step(&g, &m, None, None),
        Step::HandOver {
            primary: "g-0".into(),
            target: Some("g-2".into()),
            sentinel: "g-sentinel-0".into(),
            reason: FailoverReason::Switchover,
        }
    );
    // Done: g-2 is primary; recorded, the request is not done again and g-0, now a
    // replica, keeps the default priority.
    promote(&mut m, 2);
    priority(&mut m, 0, 100);
    assert_eq!(next_step(&g, &m, None, Some("s1")), Step::Idle);
    // A replica left preferred after an earlier switchover gets its priority back.
    priority(&mut m, 1, 1);
    assert_eq!(
        next_step(&g, &m, None, Some("s1")),
        Step::SetPriority {
            member: "g-1".into(),
            priority: 100
        }
    );
}

#[test]
fn a_replica_gets_its_priority_back_only_once_in_sync() {
    let g = group(3, 3);
    let mut m = formed(3, 3);
    // Restarted: priority 0 from its start script, its first sync not complete.
    priority(&mut m, 1, 0);
    let link = |m: &mut Members, up: bool| {
        let answer = m.data[1].answer.as_mut().unwrap();
        answer.replication.primary.as_mut().unwrap().link_up = up;
    };
    link(&mut m, false);
    assert_eq!(next_step(&g, &m, None, None), Step::Idle);
    link(&mut m, true);
    assert_eq!(
        next_step(&g, &m, None, None),
        Step::SetPriority {
            member: "g-1".into(),
            priority: 100
        }
    );
}

#[test]
fn a_roll_hands_over_only_through_a_sentinel_that_sees_an_electable_replica() {
    let g = group(2, 1);
    let mut m = formed(2, 1);
    let new = |f: &mut crate::replication::model::Facts| f.revisions.desired = Some("r2".into());
    let rolled = |f: &mut crate::replication::model::Facts| {
        new(f);
        f.revisions.running = Some("r2".into());
        f.revisions.allowed = Some("r2".into());
    };
    rolled(&mut m.data[0].facts);
    rolled(&mut m.data[1].facts);
    rolled(&mut m.sentinels[0].facts);
    m.data[0].facts.revisions.running = Some("r1".into());
    m.data[0].facts.revisions.allowed = None;
    // The replica rolled and synced; the sentinel still read its start-up priority 0.
    priority(&mut m, 1, 0);
    m.data[1].answer.as_mut().unwrap().priority = Some(100);
    let (reason, why) = wait_of(next_step(&g, &m, None, None));
    assert_eq!(reason, Waiting::SentinelsCatchingUp);
    assert!(why.contains("sees a replica it could elect"), "{why}");
    priority(&mut m, 1, 100);
    assert!(matches!(
        next_step(&g, &m, None, None),
        Step::HandOver {
            reason: FailoverReason::Roll,
            ..
        }
    ));
}

#[test]
fn a_switchover_target_must_be_an_in_sync_replica() {
    let mut g = group(3, 3);
    switchover_to(&mut g, 1);
    let mut m = formed(3, 3);
    priority(&mut m, 1, 1);
    m.data[1]
        .answer
        .as_mut()
        .unwrap()
        .replication
        .primary
        .as_mut()
        .unwrap()
        .link_up = false;
    let (reason, why) = wait_of(next_step(&g, &m, None, None));
    assert_eq!(reason, Waiting::NoReplicaInSync);
    assert!(
        why.contains("g-1 must be an in-sync replica of g-0"),
        "{why}"
    );
}

#[test]
fn replicas_and_sentinels_roll_first_then_the_primary_hands_over() {
    let g = group(2, 1);
    let mut m = formed(2, 1);
    let new = |f: &mut crate::replication::model::Facts| f.revisions.desired = Some("r2".into());
    new(&mut m.data[0].facts);
    new(&mut m.data[1].facts);
    new(&mut m.sentinels[0].facts);
    assert_eq!(
        next_step(&g, &m, None, None),
        Step::AllowRoll {
            member: "g-1".into(),
            revision: "r2".into()
        }
    );
    m.data[1].facts.revisions.running = Some("r2".into());
    m.data[1].facts.revisions.allowed = Some("r2".into());
    assert_eq!(
        next_step(&g, &m, None, None),
        Step::AllowRoll {
            member: "g-sentinel-0".into(),
            revision: "r2".into()
        }
    );
    m.sentinels[0].facts.revisions.running = Some("r2".into());
    m.sentinels[0].facts.revisions.allowed = Some("r2".into());
    assert_eq!(
        next_step(&g, &m, None, None),
        Step::HandOver {
            primary: "g-0".into(),
            target: None,
            sentinel: "g-sentinel-0".into(),
            reason: FailoverReason::Roll,
        }
    );
    // With the replica resyncing, the primary waits.
    m.data[1]
        .answer
        .as_mut()
        .unwrap()
        .replication
        .primary
        .as_mut()
        .unwrap()
        .sync_in_progress = true;
    assert_eq!(
        wait_of(next_step(&g, &m, None, None)).0,
        Waiting::MemberRolling
    );
}

#[test]
fn scaling_in_removes_replicas_first_and_hands_a_leaving_primary_over() {
    // 3 -> 1 data nodes while g-2 is primary: g-1 goes at once, g-2 hands over first.
    let g = group(1, 3);
    let mut m = formed(3, 3);
    promote(&mut m, 2);
    assert_eq!(
        next_step(&g, &m, None, None),
        Step::Remove(vec!["g-1".into()])
    );
    m.data.remove(1);
    // The sentinels forget g-1 first, so Sentinel cannot pick it.
    assert_eq!(
        next_step(&g, &m, None, None),
        Step::Reset {
            sentinel: "g-sentinel-0".into()
        }
    );
    for s in &mut m.sentinels {
        let m = s.answer.as_mut().unwrap().monitored.as_mut().unwrap();
        m.replicas.retain(|r| r.ip != ip(1));
    }
    assert_eq!(
        next_step(&g, &m, None, None),
        Step::HandOver {
            primary: "g-2".into(),
            target: None,
            sentinel: "g-sentinel-0".into(),
            reason: FailoverReason::Removal,
        }
    );
    // Handed over: g-0 is primary, g-2 a replica that goes now.
    m.data[0] = data_primary(0, 1);
    m.data[1] = data_replica(2, 0);
    for s in &mut m.sentinels {
        s.answer
            .as_mut()
            .unwrap()
            .monitored
            .as_mut()
            .unwrap()
            .primary
            .0 = ip(0);
    }
    assert_eq!(
        next_step(&g, &m, None, None),
        Step::Remove(vec!["g-2".into()])
    );
}

#[test]
fn sentinels_forget_the_departed_one_at_a_time() {
    // Sentinel 2 is gone; 0 and 1 still list it, and data node 2 left too.
    let g = group(2, 2);
    let mut m = formed(3, 3);
    m.data.pop();
    m.sentinels.pop();
    assert_eq!(
        next_step(&g, &m, None, None),
        Step::Reset {
            sentinel: "g-sentinel-0".into()
        }
    );
    // Reset: g-sentinel-0 has not found g-sentinel-1 again yet, so 1 waits.
    m.sentinels[0] = sentinel(0, Some(0), 2, 2);
    monitored_mut(&mut m, 0).sentinels.clear();
    let (reason, why) = wait_of(next_step(&g, &m, None, None));
    assert_eq!(reason, Waiting::SentinelsCatchingUp);
    assert!(
        why.contains("g-sentinel-1 lists members that are gone"),
        "{why}"
    );
    m.sentinels[0] = sentinel(0, Some(0), 2, 2);
    assert_eq!(
        next_step(&g, &m, None, None),
        Step::Reset {
            sentinel: "g-sentinel-1".into()
        }
    );
    m.sentinels[1] = sentinel(1, Some(0), 2, 2);
    assert_eq!(next_step(&g, &m, None, None), Step::Idle);
}

/// After a roll, g-sentinel-1 lists its own address as a peer (a hello of its previous
/// run replayed to it): it is reset once the others know the group, like one that lists
/// a member that is gone.
#[test]
fn a_sentinel_that_lists_itself_is_reset() {
    let g = group(3, 3);
    let mut m = formed(3, 3);
    monitored_mut(&mut m, 1)
        .sentinels
        .push(crate::replication::model::Peer {
            ip: sentinel_ip(1),
            port: 26379,
            flags: vec!["sentinel".into()],
            priority: None,
        });
    assert_eq!(
        next_step(&g, &m, None, None),
        Step::Reset {
            sentinel: "g-sentinel-1".into()
        }
    );
}

/// A data node whose running config predates the `replication` user gets it before any
/// replica is re-pointed at it, even while Sentinel fails over.
#[test]
fn data_nodes_get_the_replication_user_first() {
    use crate::shared::acl::ReplicationPassword;
    let password = ReplicationPassword::from_operator("op");
    let g = Group {
        replication_password: Some(password.clone()),
        ..group(3, 3)
    };
    let mut m = formed(3, 3);
    m.data[2] = data_primary(2, 0);
    monitored_mut(&mut m, 1)
        .flags
        .push("failover_in_progress".into());
    let usable = crate::shared::acl::set_user(None, &password.setuser_rules(false));
    for (d, user) in m
        .data
        .iter_mut()
        .zip([None, Some(None), Some(Some(usable.clone()))])
    {
        d.answer.as_mut().unwrap().replication_user = user;
    }
    match next_step(&g, &m, Some("g-0"), None) {
        Step::CreateReplicationUser { members, .. } => {
            assert_eq!(members, [("g-1".to_string(), false)])
        }
        other => panic!("{other:?}"),
    }
    m.data[1].answer.as_mut().unwrap().replication_user = Some(Some(usable));
    let (reason, _) = wait_of(next_step(&g, &m, Some("g-0"), None));
    assert_eq!(reason, Waiting::SentinelsCatchingUp);
}

/// Sentinel's leader sent `REPLICAOF NO ONE` to g-2 and waits for its next INFO to see
/// the role; every sentinel still names g-0, which serves on (cut off from the others).
/// Demoting g-2 now would stall the failover until failover-timeout.
#[test]
fn a_replica_being_promoted_is_left_alone() {
    let g = group(3, 3);
    let mut m = formed(3, 3);
    m.data[2] = data_primary(2, 0);
    let mut promoting = m.clone();
    monitored_mut(&mut promoting, 1)
        .flags
        .push("failover_in_progress".into());
    let (reason, why) = wait_of(next_step(&g, &promoting, Some("g-0"), None));
    assert_eq!(reason, Waiting::SentinelsCatchingUp);
    assert!(why.contains("g-sentinel-1 runs a failover"), "{why}");
    // The leader does not answer, its pod Ready: g-2 may be its pick.
    let mut unheard = m.clone();
    unheard.sentinels[1].answer = None;
    let (reason, why) = wait_of(next_step(&g, &unheard, Some("g-0"), None));
    assert_eq!(reason, Waiting::SentinelsCatchingUp);
    assert!(
        why.contains("g-2 does not follow g-0, and g-sentinel-1 does not answer"),
        "{why}"
    );
    // Its pod is not Ready: it runs no failover, and g-2 is demoted.
    let mut gone = unheard.clone();
    gone.sentinels[1].facts.ready = false;
    assert!(matches!(
        next_step(&g, &gone, Some("g-0"), None),
        Step::ReplicaOf { demote: true, .. }
    ));
    // A leaving sentinel's failover holds everything too.
    let mut leaving = promoting.clone();
    let g2 = group(3, 1);
    leaving.sentinels.swap(0, 1);
    let (reason, _) = wait_of(next_step(&g2, &leaving, Some("g-0"), None));
    assert_eq!(reason, Waiting::SentinelsCatchingUp);
    // Every sentinel answers and none fails over: g-2 serves on its own and is demoted.
    assert_eq!(
        next_step(&g, &m, Some("g-0"), None),
        Step::ReplicaOf {
            member: "g-2".into(),
            primary: "g-0".into(),
            ip: ip(0),
            demote: true,
        }
    );
    // A new empty primary (a fresh data node) is attached even so.
    unheard.data[2] = data_primary(2, 0);
    unheard.data[2]
        .answer
        .as_mut()
        .unwrap()
        .replication
        .repl_offset = 0;
    assert!(matches!(
        next_step(&g, &unheard, Some("g-0"), None),
        Step::ReplicaOf { demote: false, .. }
    ));
}

#[test]
fn nothing_moves_while_a_sentinel_fails_over_and_a_stale_sentinel_monitors_afresh() {
    let g = group(3, 3);
    let mut m = formed(3, 3);
    monitored_mut(&mut m, 1)
        .flags
        .push("failover_in_progress".into());
    let (reason, why) = wait_of(next_step(&g, &m, None, None));
    assert_eq!(reason, Waiting::SentinelsCatchingUp);
    assert!(why.contains("g-sentinel-1 runs a failover"), "{why}");
    // Reset mid-failover, g-sentinel-2 kept the old address; the majority names g-0.
    let mut m = formed(3, 3);
    monitored_mut(&mut m, 2).primary.0 = ip(1);
    assert_eq!(
        next_step(&g, &m, None, None),
        Step::Remonitor {
            sentinel: "g-sentinel-2".into(),
            primary: "g-0".into(),
            ip: ip(0),
        }
    );
}
