//! The operator password rotated live: a changed Secret works at once as `operator` on
//! every member next to the previous password, the members' own logins (replicas'
//! `masterauth`, the sentinel's `sentinel-pass` and `auth-pass`) follow it, and after the
//! overlap only the new one works. Replicas reconnect with a partial resync, the sentinel
//! still watches the primary, no pod restarts, no acknowledged write is lost, and a primary
//! deleted afterwards still hands over before it stops: its hook reads the password from the
//! mounted Secret, not from the environment it started with.

use std::time::Instant;

use crd_types::names::{self, statefulset_pod_name};
use crd_types::template::{Auth, REPLICATION_PASSWORD_PREFIX, derived_password};
use e2e_kit::replication_testing::{self, GroupAccess, GroupWriter, Route, valkey_replication};
use e2e_kit::topology::logins;

use crate::env::{Env, FAILOVER, FORM, SETTLE, nothing_lost};
use crate::failover::{said_at_start, successor};
use crate::restarts::pod_uids;
use crate::users::{on_every, on_every_data_node};

/// What `operator` with `password` gets for `args` on the data node at `ip`.
fn as_operator(ip: &str, password: &str, args: &[&str]) -> String {
    logins::answer(ip, 6379, (Some("operator"), password), args)
}

/// What `operator` with `password` gets for `args` on the sentinel at `ip`.
fn as_operator_on_sentinel(ip: &str, password: &str, args: &[&str]) -> String {
    logins::answer(ip, 26379, (Some("operator"), password), args)
}

/// The group's `status.passwordRotations` of the operator user as (membersWithNew, members).
async fn operator_rotation(env: &Env, name: &str) -> Option<(i32, i32)> {
    let rotations = logins::rotations(&env.apis, name).await.unwrap();
    rotations
        .into_iter()
        .find(|(user, ..)| user == "operator")
        .map(|(_, with_new, members)| (with_new, members))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_operator_password_rotates_live_and_hooks_follow_it() {
    let env = Env::start().await;
    let name = "oprot";
    let mut group = valkey_replication(name, 2, 1, true);
    // Below the operator's least overlap for this password (120 s), which it keeps.
    group.spec.common.auth = Some(Auth {
        password_overlap_seconds: Some(30),
        ..Default::default()
    });
    let access = env.create_ready(group).await;
    let old = access.operator_password.clone();
    let new = "second operator password";
    let new_replication = derived_password(REPLICATION_PASSWORD_PREFIX, new);
    let members: Vec<_> = access
        .data
        .iter()
        .chain(&access.sentinels)
        .cloned()
        .collect();

    let service = access.service_ip.clone().unwrap();
    let writer = GroupWriter::start(&access, Route::Service(service), "op");
    writer.progressed(100, SETTLE).await.unwrap();
    let uids = pod_uids(&env, name).await;
    let primary = env.ready(name, SETTLE).await.current_primary.unwrap();
    let primary_ip = access
        .data
        .iter()
        .find(|m| m.name == primary)
        .unwrap()
        .ip
        .clone();

    let changed = Instant::now();
    let secret = names::generated_operator_secret_name(name);
    logins::set_password(&env.apis.secrets, &secret, new)
        .await
        .unwrap();

    // Overlap: both passwords log in as operator everywhere.
    on_every_data_node(
        &env,
        &access,
        "the new operator password to work",
        SETTLE,
        |ip| {
            let got = as_operator(ip, new, &["PING"]);
            logins::answers(got, "PONG")
        },
    )
    .await;
    let what = "the new operator password to work on the sentinel";
    on_every(&env, &access.sentinels, what, SETTLE, |ip| {
        let got = as_operator_on_sentinel(ip, new, &["PING"]);
        logins::answers(got, "PONG")
    })
    .await;
    eprintln!(
        "operator password: the new one works {:?} after the Secret changed",
        changed.elapsed()
    );
    for m in &access.data {
        assert_eq!(as_operator(&m.ip, &old, &["PING"]), "PONG", "{}", m.name);
    }
    for s in &access.sentinels {
        let got = as_operator_on_sentinel(&s.ip, &old, &["PING"]);
        assert_eq!(
            got, "PONG",
            "{}: the previous one works in the overlap",
            s.name
        );
    }
    // The members' own logins follow.
    on_every_data_node(&env, &access, "masterauth to follow", SETTLE, |ip| {
        let got = as_operator(ip, new, &["CONFIG", "GET", "masterauth"]);
        (got == format!("masterauth\n{new_replication}"))
            .then_some(())
            .ok_or(got)
    })
    .await;
    on_every(
        &env,
        &access.sentinels,
        "sentinel-pass to follow",
        SETTLE,
        |ip| {
            let got =
                as_operator_on_sentinel(ip, new, &["SENTINEL", "CONFIG", "GET", "sentinel-pass"]);
            (got == format!("sentinel-pass\n{new}"))
                .then_some(())
                .ok_or(got)
        },
    )
    .await;
    env.wait("status to show the rotation", SETTLE, || async {
        let now = operator_rotation(&env, name).await;
        Ok((now == Some((3, 3)))
            .then_some(())
            .ok_or(format!("{now:?}")))
    })
    .await;

    // After the overlap: only the new one.
    let what = "the previous operator password to stop working";
    on_every(&env, &members, what, FORM, |ip| {
        let on_data = access.data.iter().any(|m| m.ip == ip);
        let got = match on_data {
            true => as_operator(ip, &old, &["PING"]),
            false => as_operator_on_sentinel(ip, &old, &["PING"]),
        };
        logins::refused(&got).then_some(()).ok_or(got)
    })
    .await;
    eprintln!(
        "operator password: the previous one refused {:?} after the Secret changed",
        changed.elapsed()
    );
    env.wait("status to show no operator rotation", SETTLE, || async {
        let now = operator_rotation(&env, name).await;
        Ok(now.is_none().then_some(()).ok_or(format!("{now:?}")))
    })
    .await;
    assert_eq!(pod_uids(&env, name).await, uids, "no pod restarted");

    // Replicas log in again with the new replication password: a partial resync.
    let stats = |what: &str| {
        let info = as_operator(&primary_ip, new, &["INFO", "stats"]);
        logins::info_field(&info, what).unwrap_or_else(|| panic!("{what} in {info}"))
    };
    let full_before = stats("sync_full");
    let partial_before: u64 = stats("sync_partial_ok").parse().unwrap();
    let killed = as_operator(&primary_ip, new, &["CLIENT", "KILL", "TYPE", "replica"]);
    assert_eq!(killed, "1", "the replica's link was cut");
    let replicas: Vec<_> = access
        .data
        .iter()
        .filter(|m| m.name != primary)
        .cloned()
        .collect();
    on_every(&env, &replicas, "the replica to link again", SETTLE, |ip| {
        let info = as_operator(ip, new, &["INFO", "replication"]);
        let status = logins::info_field(&info, "master_link_status");
        (status.as_deref() == Some("up")).then_some(()).ok_or(info)
    })
    .await;
    env.wait(
        "the primary to count the partial resync",
        SETTLE,
        || async {
            let partial: u64 = stats("sync_partial_ok").parse().unwrap();
            Ok((partial > partial_before)
                .then_some(())
                .ok_or(format!("{partial}")))
        },
    )
    .await;
    assert_eq!(stats("sync_full"), full_before, "no full resync");
    // The sentinel still watches the primary, logging in with the new password.
    for s in &access.sentinels {
        let got = as_operator_on_sentinel(&s.ip, new, &["SENTINEL", "MASTER", name]);
        let flags = got.lines().skip_while(|l| *l != "flags").nth(1);
        assert_eq!(flags, Some("master"), "{}: {got}", s.name);
    }
    for reason in [
        "OperatorPasswordAdded",
        "OperatorLoginsSwitched",
        "PreviousPasswordDropped",
    ] {
        let events = env.apis.group_events(name, Some(reason)).await.unwrap();
        assert!(!events.is_empty(), "an {reason} Event");
    }
    let refused = env.apis.group_events(name, Some("OperatorPasswordRefused"));
    assert_eq!(refused.await.unwrap(), [], "no member refused");

    // The primary's pod, started with the previous password in its environment, is deleted:
    // its hook hands over through the sentinel with the new one.
    env.apis
        .pods
        .delete(&statefulset_pod_name(&primary), &Default::default())
        .await
        .unwrap();
    let next = successor(&env, name, &primary).await;
    env.ready(name, FAILOVER).await;
    let (said, log) = said_at_start(&env, name, &primary).await;
    assert!(
        !said.is_empty() && said.iter().all(|l| l.contains("starting as its replica")),
        "the sentinel named {next} primary before {primary} stopped: {log}"
    );

    let access = GroupAccess {
        operator_password: new.to_string(),
        ..replication_testing::access(&env.apis, name).await.unwrap()
    };
    writer.progressed(100, SETTLE).await.unwrap();
    nothing_lost(name, [writer], &access).await;
    env.finish().await;
}
