use super::*;
use crate::cluster::sim::*;
use crate::shared::auth::PasswordError;
use crate::shared::guard::Holds;
use crd_types::template::SecretKeyRef;

#[test]
fn slots_never_move_to_a_member_on_an_older_data_format() {
    use crate::shared::member_facts::LiveConfig;
    use crd_types::versions::Version;
    let d = shape(4, 1);
    let mut sims = formed(3, 1);
    sims.push(sim(3, 0));
    sims.push(sim(3, 1));
    sims[7].follows = Some(id(3, 0));
    let running = |version: Version| LiveConfig {
        version,
        values: Default::default(),
    };
    // Mid-upgrade: the old shards run 9.1, the new primary still 8.0.
    let mut members = members(&sims);
    for m in &mut members {
        let v = if m.at.shard == 3 {
            Version::new(8, 0)
        } else {
            Version::new(9, 1)
        };
        m.reply.as_mut().unwrap().live_config = Some(running(v));
    }
    let (reason, why) = wait_of(next_step(&d, &members, None));
    assert_eq!(reason, Waiting::MigrationAcrossVersions);
    assert!(why.contains("to c-3-0 (Valkey 8.0)"), "{why}");
    // Once it runs a version that reads them, they move: atomically, every end on 9.x,
    // unless the cluster asks for the classic way.
    for m in &mut members {
        m.reply.as_mut().unwrap().live_config = Some(running(Version::new(9, 1)));
    }
    let Step::MigrateAtomically(moves) = next_step(&d, &members, None) else {
        panic!("not atomic");
    };
    let classic = Shape {
        atomic_migration: false,
        ..d.clone()
    };
    assert_eq!(
        next_step(&classic, &members, None),
        Step::Migrate(moves.clone())
    );
    // From an older format to a newer one they move too, the classic way: the 8.0 end
    // never gets a 9.x command.
    for m in members.iter_mut().filter(|m| m.at.shard == 0) {
        m.reply.as_mut().unwrap().live_config = Some(running(Version::new(8, 0)));
    }
    assert!(moves.iter().any(|m| m.from == "c-0-0"), "{moves:?}");
    assert_eq!(next_step(&d, &members, None), Step::Migrate(moves));
}

#[test]
fn an_atomic_migration_in_flight_holds_every_later_step() {
    use crate::cluster::slot_jobs::SlotJob;
    let d = shape(3, 1);
    let mut sims = formed(3, 1);
    for s in &mut sims {
        s.revisions.desired = Some("r2".into());
    }
    let mut members = members(&sims);
    let job = SlotJob {
        name: "4dc0".into(),
        export: false,
        slot_ranges: "0-99".into(),
        source: id(0, 0),
        target: id(1, 0),
        state: "receiving-snapshot".into(),
        message: String::new(),
    };
    members[2].reply.as_mut().unwrap().slot_jobs = Some(vec![job.clone()]);
    let (reason, why) = wait_of(next_step(&d, &members, None));
    assert_eq!(reason, Waiting::SlotsMovingAtomically);
    assert_eq!(
        why,
        "slots 0-99 move atomically (receiving-snapshot, received by c-1-0)"
    );
    // Ended, it holds nothing: the roll goes on.
    let done = SlotJob {
        state: "success".into(),
        ..job
    };
    members[2].reply.as_mut().unwrap().slot_jobs = Some(vec![done]);
    assert!(matches!(
        next_step(&d, &members, None),
        Step::AllowRoll { .. }
    ));
}

#[test]
fn a_roll_waits_until_every_answering_member_has_the_replication_user() {
    use crate::shared::acl::AclUser;
    let password = ReplicationPassword::from_operator("op");
    let d = Shape {
        replication_password: Some(password.clone()),
        ..shape(2, 1)
    };
    let mut sims = formed(2, 1);
    for s in &mut sims {
        s.revisions.desired = Some("r2".into());
    }
    let rolling = next_step(&shape(2, 1), &members(&sims), None);
    assert!(
        matches!(rolling, Step::Failover { .. } | Step::AllowRoll { .. }),
        "{rolling:?}"
    );

    let mut members = members(&sims);
    let usable = crate::shared::acl::set_user(None, &password.setuser_rules(false));
    let stale = AclUser {
        password_hashes: vec!["0".repeat(64)],
        ..usable.clone()
    };
    let users = [
        Some(None),
        Some(Some(usable.clone())),
        None,
        Some(Some(stale)),
    ];
    for (m, user) in members.iter_mut().zip(users) {
        m.reply.as_mut().unwrap().replication_user = user;
    }
    // c-0-1 has it, c-1-0 was not read: both are left alone.
    match next_step(&d, &members, None) {
        Step::CreateReplicationUser { members, .. } => {
            let names: Vec<&str> = members.iter().map(|(m, _)| m.as_str()).collect();
            assert_eq!(names, ["c-0-0", "c-1-1"]);
        }
        other => panic!("{other:?}"),
    }
    for m in &mut members {
        m.reply.as_mut().unwrap().replication_user = Some(Some(usable.clone()));
    }
    assert_eq!(next_step(&d, &members, None), rolling);
}

#[test]
fn nothing_to_do_on_a_healthy_cluster() {
    assert_eq!(step(&shape(3, 1), &formed(3, 1)), Step::Idle);
}

#[test]
fn members_without_an_address_are_named_with_where_it_comes_from() {
    let d = shape(1, 1);
    let sims = vec![sim(0, 0), sim(0, 1)];
    let mut members = members_with(&sims, |_, _| false);
    for m in &mut members {
        m.address = None;
        m.reply = None;
    }
    let (reason, why) = wait_of(next_step(&d, &members, None));
    assert_eq!(reason, Waiting::NoMemberAnswers);
    assert!(why.contains("no address yet for c-0-0, c-0-1"), "{why}");
    assert!(why.contains("service-controller"), "{why}");

    // With addresses, the message stays short.
    let (_, why) = wait_of(next_step(&d, &members_with(&sims[..1], |_, _| false), None));
    assert!(!why.contains("address"), "{why}");
}

#[test]
fn formation_assigns_then_meets_replicas_through_their_primaries() {
    let d = shape(2, 1);
    let mut sims: Vec<Sim> = (0..2)
        .flat_map(|s| (0..2).map(move |m| sim(s, m)))
        .collect();
    sims[3].id = None;
    let (reason, why) = wait_of(step(&d, &sims));
    assert_eq!(reason, Waiting::Forming);
    assert!(why.contains("3 of 4"), "{why}");

    // Everyone answers, each knows only itself: member 0 of each shard takes its half.
    sims[3].id = Some(id(1, 1));
    let halves = Step::AddSlots(vec![
        ("c-0-0".to_string(), vec![(0, 8191)]),
        ("c-1-0".to_string(), vec![(8192, 16383)]),
    ]);
    assert_eq!(
        next_step(&d, &members_with(&sims, |_, _| false), None),
        halves
    );

    // Slots held, nobody met: the primaries meet each other, and each replica only its
    // own primary.
    sims[0].slots = vec![(0, 8191)];
    sims[2].slots = vec![(8192, 16383)];
    let addr = |s: &Sim| ip(s.shard, s.member);
    let met = |meets: &[(String, Vec<Address>)]| -> Vec<(String, Vec<String>)> {
        meets
            .iter()
            .map(|(via, t)| (via.clone(), t.iter().map(|a| a.ip.clone()).collect()))
            .collect()
    };
    match next_step(&d, &members_with(&sims, |_, _| false), None) {
        Step::Meet(meets) => assert_eq!(
            met(&meets),
            vec![
                ("c-0-0".to_string(), vec![addr(&sims[1]), addr(&sims[2])]),
                ("c-1-0".to_string(), vec![addr(&sims[3])]),
            ]
        ),
        other => panic!("{other:?}"),
    }

    // Met as asked (c-1-1 knows only its primary): both replicas follow their primaries
    // in one step, before the anchor meets c-1-1.
    let introduced = |v: &Sim, n: &Sim| v.shard == n.shard || (v.member == 0 && n.member == 0);
    assert_eq!(
        next_step(&d, &members_with(&sims, introduced), None),
        Step::Replicate(vec![("c-0-1".into(), id(0, 0)), ("c-1-1".into(), id(1, 0))])
    );

    // Following: every pair that has not met yet does, each once.
    sims[1].follows = Some(id(0, 0));
    sims[3].follows = Some(id(1, 0));
    match next_step(&d, &members_with(&sims, introduced), None) {
        Step::Meet(meets) => assert_eq!(
            met(&meets),
            vec![
                ("c-0-0".to_string(), vec![addr(&sims[3])]),
                ("c-0-1".to_string(), vec![addr(&sims[2]), addr(&sims[3])]),
            ]
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn two_members_of_a_shard_holding_slots_stops_the_planner() {
    let d = shape(1, 1);
    let mut sims = formed(1, 1);
    sims[1].follows = None;
    sims[1].slots = vec![(0, 10)];
    sims[0].slots = vec![(11, 16383)];
    let (reason, why) = wait_of(step(&d, &sims));
    assert_eq!(reason, Waiting::TwoPrimariesInShard);
    assert!(why.contains("resolve by hand"), "{why}");
}

#[test]
fn a_foreign_member_holds_everything_and_passwords_come_first() {
    let d = shape(1, 0);
    let sims = formed(1, 0);
    let foreign = Circumstances {
        holds: Holds {
            foreign_member: Some("c-0-0"),
            ..Default::default()
        },
        ..Default::default()
    };
    let (reason, why) = wait_of(decide(&d, &members(&sims), &foreign));
    assert_eq!(reason, Waiting::ForeignMember);
    assert!(why.contains("ValkeyNode c-0-0 exists"), "{why}");
    let missing = PasswordError::SecretMissing(SecretKeyRef {
        name: "c-operator".into(),
        key: "password".into(),
    });
    let no_password = Circumstances {
        holds: Holds {
            operator_password_problem: Some(&missing),
            ..foreign.holds
        },
        ..Default::default()
    };
    let (reason, _) = wait_of(decide(&d, &members(&sims), &no_password));
    assert_eq!(reason, Waiting::NoOperatorPassword);
    assert_eq!(
        decide(&d, &members(&sims), &Circumstances::default()),
        Step::Idle
    );
}

#[test]
fn a_step_describes_itself() {
    let failover = Step::Failover {
        member: "c-0-1".into(),
        reason: FailoverReason::Switchover,
    };
    assert_eq!(
        failover.to_string(),
        "c-0-1 takes over its shard as requested by spec.switchover"
    );
    let assign = Step::AddSlots(vec![("c-0-0".into(), vec![(0, 99), (200, 200)])]);
    assert_eq!(assign.to_string(), "assigning slots 0-99,200 to c-0-0");
    let wait = Step::wait(Waiting::Forming, "forming: 1 of 3 members answer");
    assert_eq!(wait.to_string(), "waiting: forming: 1 of 3 members answer");
}
