//! The default user's password rotated live: a changed Secret works at once on every data
//! node next to the previous password, which goes after the overlap; the sentinels' own
//! password the same way on the sentinels; no pod restarts, the readiness probe never needs
//! a password, no acknowledged write is lost.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crd_types::names::{self, statefulset_pod_name};
use crd_types::template::Auth;
use e2e_kit::replication_testing::{GroupAccess, GroupWriter, Route, valkey_replication};
use e2e_kit::testing::valkey_cli_as;
use e2e_kit::topology::logins;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::env::{Env, FORM, SETTLE, nothing_lost};
use crate::restarts::pod_uids;
use crate::users::{on_every, on_every_data_node};

/// Long enough that the previous password surely still works when the test looks, after a
/// data node restarted during the overlap and got it back.
const OVERLAP_SECONDS: i64 = 90;

/// A probe's failure threshold (2) times its period (5 s), with a period to spare: a probe
/// logging in with a dropped password would have made a pod unready within this.
const PROBE_WINDOW: Duration = Duration::from_secs(15);

/// What the default user with `password` gets for `args` on `ip`.
fn as_default(ip: &str, password: &str, args: &[&str]) -> String {
    valkey_cli_as(ip, Some((None, password)), args)
}

/// What `login` gets for `args` on the sentinel at `ip`.
fn on_sentinel(ip: &str, login: (Option<&str>, &str), args: &[&str]) -> String {
    let args: Vec<&str> = ["-p", "26379"]
        .into_iter()
        .chain(args.iter().copied())
        .collect();
    valkey_cli_as(ip, Some(login), &args)
}

/// What the sentinels' default user with `password` gets for `args` on `ip`.
fn as_sentinel_default(ip: &str, password: &str, args: &[&str]) -> String {
    on_sentinel(ip, (None, password), args)
}

/// Each member's pod's Ready condition: its status and when it last changed.
async fn readiness(env: &Env, access: &GroupAccess) -> BTreeMap<String, (String, Option<Time>)> {
    let mut out = BTreeMap::new();
    for m in access.data.iter().chain(&access.sentinels) {
        let pod = env
            .apis
            .pods
            .get(&statefulset_pod_name(&m.name))
            .await
            .unwrap();
        let ready = pod
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == "Ready")
            .map(|c| (c.status, c.last_transition_time))
            .unwrap_or_default();
        out.insert(m.name.clone(), ready);
    }
    out
}

/// The group's `status.passwordRotations` as (user, membersWithNew, members).
async fn rotations(env: &Env, name: &str) -> Vec<(String, i32, i32)> {
    let group = env.apis.groups.get_status(name).await.unwrap();
    group
        .status
        .map(|s| s.password_rotations)
        .unwrap_or_default()
        .into_iter()
        .map(|r| (r.user.as_str().to_string(), r.members_with_new, r.members))
        .collect()
}

/// The Secret's new password works on every data node within a pass, next to the previous
/// one, which a data node restarted meanwhile gets back; status shows the rotation; after the
/// overlap only the new one works, `CONFIG GET requirepass` says so, and the pods stayed
/// Ready (their probe logs in as `probe`, PING only) and were not restarted; a writer's
/// connection keeps writing throughout and loses nothing. The sentinels' Secret, changed at
/// the same time, rotates the same way on the sentinel.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_default_password_rotates_live_with_an_overlap() {
    let env = Env::start().await;
    let name = "rotate";
    let mut group = valkey_replication(name, 2, 1, false);
    group.spec.common.auth = Some(Auth {
        password_overlap_seconds: Some(OVERLAP_SECONDS),
        ..Default::default()
    });
    let access = env.create_ready(group).await;
    let old = access.password.clone();
    let new = "second default password";
    let old_sentinel = access.sentinel_password.clone();
    let new_sentinel = "second sentinel password";

    // The probe user answers PING without a password and may do nothing else.
    for m in &access.data {
        let probe = |args: &[&str]| valkey_cli_as(&m.ip, Some((Some("probe"), "any")), args);
        assert_eq!(probe(&["PING"]), "PONG", "{}", m.name);
        for args in [
            &["GET", "k"][..],
            &["CONFIG", "GET", "requirepass"],
            &["ACL", "LIST"],
        ] {
            let got = probe(args);
            assert!(
                got.starts_with("NOPERM"),
                "{}: probe {args:?}: {got}",
                m.name
            );
        }
    }
    // So does a sentinel's.
    for s in &access.sentinels {
        let probe = |args: &[&str]| on_sentinel(&s.ip, (Some("probe"), "any"), args);
        assert_eq!(probe(&["PING"]), "PONG", "{}", s.name);
        let got = probe(&["SENTINEL", "MASTERS"]);
        assert!(got.starts_with("NOPERM"), "{}: probe: {got}", s.name);
    }

    let service = access.service_ip.clone().unwrap();
    let writer = GroupWriter::start(&access, Route::Service(service), "rot");
    writer.progressed(100, SETTLE).await.unwrap();
    let secret = names::generated_auth_secret_name(name);
    let changed = Instant::now();
    logins::set_password(&env.apis.secrets, &secret, new)
        .await
        .unwrap();
    let sentinel_secret = names::generated_sentinel_secret_name(name);
    logins::set_password(&env.apis.secrets, &sentinel_secret, new_sentinel)
        .await
        .unwrap();
    on_every_data_node(&env, &access, "the new password to work", SETTLE, |ip| {
        let got = as_default(ip, new, &["PING"]);
        logins::answers(got, "PONG")
    })
    .await;
    eprintln!(
        "passwords: the new password works {:?} after the Secret changed",
        changed.elapsed()
    );
    for m in &access.data {
        let got = as_default(&m.ip, &old, &["PING"]);
        assert_eq!(
            got, "PONG",
            "{}: the previous one works in the overlap",
            m.name
        );
    }
    let what = "the new sentinels' password to work";
    on_every(&env, &access.sentinels, what, SETTLE, |ip| {
        let got = as_sentinel_default(ip, new_sentinel, &["PING"]);
        logins::answers(got, "PONG")
    })
    .await;
    for s in &access.sentinels {
        let got = as_sentinel_default(&s.ip, &old_sentinel, &["PING"]);
        assert_eq!(
            got, "PONG",
            "{}: the previous one works in the overlap",
            s.name
        );
    }
    env.wait("status to show the rotations", SETTLE, || async {
        let now = rotations(&env, name).await;
        let wanted = [
            ("default".to_string(), 2, 2),
            ("sentinels/default".to_string(), 1, 1),
        ];
        Ok((now == wanted).then_some(()).ok_or(format!("{now:?}")))
    })
    .await;

    // A data node restarted in the overlap starts with the new password and gets the
    // previous one back.
    let replica = access
        .data
        .iter()
        .find(|m| access.operator_cli(&m.ip, &["ROLE"]).starts_with("slave"))
        .unwrap();
    let replica_pod = statefulset_pod_name(&replica.name);
    let before = pod_uids(&env, name).await[&replica_pod].clone();
    env.apis.kill_pod(&replica_pod).await.unwrap();
    env.wait("the replica's pod to be replaced", FORM, || async {
        let uid = pod_uids(&env, name).await.get(&replica_pod).cloned();
        Ok(uid
            .filter(|u| *u != before)
            .map(drop)
            .ok_or(format!("still {before}")))
    })
    .await;
    env.wait(
        "the restarted replica to take the previous password again",
        FORM,
        || async {
            let got = as_default(&replica.ip, &old, &["PING"]);
            Ok(logins::answers(got, "PONG"))
        },
    )
    .await;
    assert_eq!(as_default(&replica.ip, new, &["PING"]), "PONG");
    eprintln!(
        "passwords: the restarted replica takes both {:?} after the Secret changed",
        changed.elapsed()
    );
    let ready = env
        .wait("every data pod to be Ready", SETTLE, || async {
            let ready = readiness(&env, &access).await;
            let all = ready.values().all(|(s, _)| s == "True");
            Ok(all.then_some(ready.clone()).ok_or(format!("{ready:?}")))
        })
        .await;
    let uids = pod_uids(&env, name).await;

    on_every_data_node(
        &env,
        &access,
        "the previous password to stop working",
        FORM,
        |ip| {
            let got = as_default(ip, &old, &["PING"]);
            logins::refused(&got).then_some(()).ok_or(got)
        },
    )
    .await;
    let dropped = Instant::now();
    eprintln!(
        "passwords: the previous password refused {:?} after the Secret changed (overlap {OVERLAP_SECONDS} s)",
        changed.elapsed()
    );
    for m in &access.data {
        assert_eq!(as_default(&m.ip, new, &["PING"]), "PONG", "{}", m.name);
        let requirepass = access.operator_cli(&m.ip, &["CONFIG", "GET", "requirepass"]);
        assert_eq!(requirepass, format!("requirepass\n{new}"), "{}", m.name);
    }
    let what = "the previous sentinels' password to stop working";
    on_every(&env, &access.sentinels, what, SETTLE, |ip| {
        let got = as_sentinel_default(ip, &old_sentinel, &["PING"]);
        logins::refused(&got).then_some(()).ok_or(got)
    })
    .await;
    for s in &access.sentinels {
        let got = as_sentinel_default(&s.ip, new_sentinel, &["SENTINEL", "MASTERS"]);
        assert!(got.contains(name), "{}: {got}", s.name);
    }
    env.wait("status to show no rotation", SETTLE, || async {
        let now = rotations(&env, name).await;
        Ok(now.is_empty().then_some(()).ok_or(format!("{now:?}")))
    })
    .await;
    // The writer's connection, logged in before, keeps writing.
    writer.progressed(100, SETTLE).await.unwrap();

    // Every probe since the drop logged in without the password: the pods stayed Ready.
    while dropped.elapsed() < PROBE_WINDOW {
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            readiness(&env, &access).await,
            ready,
            "no pod's readiness changed"
        );
    }
    assert_eq!(pod_uids(&env, name).await, uids, "no pod restarted");
    for reason in ["DefaultPasswordAdded", "PreviousPasswordDropped"] {
        let events = env.apis.group_events(name, Some(reason)).await.unwrap();
        assert!(!events.is_empty(), "a {reason} Event");
    }
    let refused = env.apis.group_events(name, Some("DefaultPasswordRefused"));
    assert_eq!(refused.await.unwrap(), [], "no member refused");

    let access = GroupAccess {
        password: new.to_string(),
        sentinel_password: new_sentinel.to_string(),
        ..access
    };
    nothing_lost(name, [writer], &access).await;
    env.finish().await;
}
