//! `spec.users`: ACL users for applications, on every data node, live and across restarts.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crd_types::names::{self, statefulset_pod_name};
use crd_types::template::SecretKeyRef;
use crd_types::users::{USERS_KEY, User};
use e2e_kit::replication_testing::{GroupAccess, MemberAddr, valkey_replication};
use e2e_kit::testing::valkey_cli_as;
use e2e_kit::topology::logins;
use futures::future::try_join_all;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ObjectMeta, PostParams};
use local_cluster::controller_pods::Outage;
use serde_json::json;

use crate::env::{Env, FORM, SETTLE};
use crate::restarts::pod_uids;

/// Long enough that the old password is surely still accepted when the test looks, right
/// after the new one works (within the operator's 10 s look).
const OVERLAP_SECONDS: i64 = 40;

fn user(name: &str, rules: &[&str], secret: Option<&str>) -> User {
    User {
        name: name.into(),
        rules: rules.iter().map(|r| r.to_string()).collect(),
        password_secret_ref: secret.map(|s| SecretKeyRef {
            name: s.into(),
            key: "password".into(),
        }),
        password_overlap_seconds: OVERLAP_SECONDS,
    }
}

fn password_secret(name: &str, password: &str) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            "password".to_string(),
            ByteString(password.as_bytes().to_vec()),
        )])),
        ..Default::default()
    }
}

/// What `user` with `password` gets for `args` on `ip`.
fn as_user(ip: &str, user: &str, password: &str, args: &[&str]) -> String {
    valkey_cli_as(ip, Some((Some(user), password)), args)
}

/// The group's `UsersReady` condition as `(status, reason, message)`.
async fn users_ready(env: &Env, name: &str) -> Option<(String, String, String)> {
    let group = env.apis.groups.get_status(name).await.ok()?;
    let conditions = group.status?.conditions;
    let c = conditions.into_iter().find(|c| c.type_ == "UsersReady")?;
    Some((c.status, c.reason, c.message))
}

/// Waits until `UsersReady` has `reason` and a message `mentioning`; the message.
async fn users_reason(env: &Env, name: &str, reason: &str, mentioning: &str) -> String {
    let what = format!("UsersReady {reason} mentioning {mentioning:?}");
    env.wait(&what, SETTLE, || async {
        Ok(match users_ready(env, name).await {
            Some((_, r, message)) if r == reason && message.contains(mentioning) => Ok(message),
            other => Err(format!("UsersReady is {other:?}")),
        })
    })
    .await
}

/// Waits until `check` holds on every data node.
pub(crate) async fn on_every_data_node(
    env: &Env,
    access: &GroupAccess,
    what: &str,
    timeout: Duration,
    check: impl Fn(&str) -> Result<(), String>,
) {
    on_every(env, &access.data, what, timeout, check).await
}

/// Waits until `check` holds on every one of `members` (given each one's IP).
pub(crate) async fn on_every(
    env: &Env,
    members: &[MemberAddr],
    what: &str,
    timeout: Duration,
    check: impl Fn(&str) -> Result<(), String>,
) {
    let members = members.iter().map(|m| (m.name.as_str(), m.ip.as_str()));
    env.wait(what, timeout, || async {
        Ok(logins::on_each(members.clone(), &check))
    })
    .await
}

/// Users reach every data node live with the spec's rules; a rule Valkey refuses is
/// reported (condition and one Event per change), never reaches the Secret the pods start
/// with (a group created with it forms) and changes nothing; a changed password works next
/// to the old one for the overlap, then alone; a removed user is gone everywhere, a user
/// made by hand stays; a data node restarted with topology-controller scaled to zero comes
/// back with the users; the Secret members read holds hashes only; no pod restarts for any
/// of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn users_follow_the_spec_on_every_data_node() {
    let env = Env::start_own().await;
    let name = "users";
    let secrets = &env.apis.secrets;
    let reader_secret = "reader-password";
    let post = PostParams::default();
    secrets
        .create(&post, &password_secret(reader_secret, "reader-one"))
        .await
        .unwrap();
    let mut group = valkey_replication(name, 2, 1, false);
    group.spec.common.users = Some(vec![
        user("app", &["~app:*", "+@read", "+@write", "-@dangerous"], None),
        user("reader", &["~*", "+@read"], Some(reader_secret)),
        user("broken", &["+nosuchcommand"], None),
    ]);
    let created = Instant::now();
    let access = env.create_ready(group).await;
    let refused = users_reason(&env, name, "RulesRefused", "user broken").await;
    eprintln!("users: RulesRefused {:?} after creation", created.elapsed());
    assert!(
        refused.contains("user broken") && refused.contains("nosuchcommand"),
        "{refused}"
    );
    let generated = names::generated_user_secret_name(name, "app");
    let app_password = secrets.get(&generated).await.unwrap().data.unwrap()["password"].clone();
    let app_password = String::from_utf8(app_password.0).unwrap();
    let primary = access
        .data
        .iter()
        .find(|m| access.cli(&m.ip, &["ROLE"]).starts_with("master"))
        .unwrap();
    assert_eq!(
        as_user(&primary.ip, "app", &app_password, &["SET", "app:1", "v"]),
        "OK"
    );
    on_every_data_node(
        &env,
        &access,
        "app and reader to work as their rules say",
        SETTLE,
        |ip| {
            let got = as_user(ip, "reader", "reader-one", &["GET", "app:1"]);
            (got == "v")
                .then_some(())
                .ok_or(format!("reader GET app:1: {got}"))?;
            let got = as_user(ip, "app", &app_password, &["GET", "app:1"]);
            (got == "v")
                .then_some(())
                .ok_or(format!("app GET app:1: {got}"))?;
            for (user, password, args) in [
                ("app", app_password.as_str(), &["GET", "other:1"][..]),
                ("app", &app_password, &["FLUSHALL"]),
                ("app", &app_password, &["CONFIG", "GET", "requirepass"]),
                ("reader", "reader-one", &["SET", "app:2", "v"]),
            ] {
                let got = as_user(ip, user, password, args);
                got.starts_with("NOPERM")
                    .then_some(())
                    .ok_or(format!("{user} {args:?}: {got}"))?;
            }
            Ok(())
        },
    )
    .await;
    let users_secret = secrets.get(&names::users_secret_name(name)).await.unwrap();
    let text = String::from_utf8(users_secret.data.unwrap()[USERS_KEY].0.clone()).unwrap();
    assert!(
        !text.contains("reader-one") && !text.contains(&app_password),
        "{text}"
    );
    assert_eq!(text.matches(" #").count(), 2, "one hash per user: {text}");
    assert!(
        !text.contains("broken"),
        "a refused user never reaches the Secret: {text}"
    );
    let uids = pod_uids(&env, name).await;

    // A rule no version knows: refused, said once, nothing changes.
    let env_ref = &env;
    let patch = |users: serde_json::Value| async move {
        let spec = json!({"spec": {"users": users}});
        env_ref.apis.patch(name, spec).await.unwrap();
    };
    let reader_spec = json!({"name": "reader", "rules": ["~*", "+@read"], "passwordSecretRef": {"name": reader_secret}, "passwordOverlapSeconds": OVERLAP_SECONDS});
    patch(json!([
        {"name": "app", "rules": ["~app:*", "+@read", "+@write", "-@dangerous", "+nosuchcommand"], "passwordOverlapSeconds": OVERLAP_SECONDS},
        reader_spec.clone(),
    ]))
    .await;
    let refused = users_reason(&env, name, "RulesRefused", "user app").await;
    assert!(
        refused.contains("user app") && refused.contains("nosuchcommand"),
        "{refused}"
    );
    for m in &access.data {
        assert_eq!(
            as_user(&m.ip, "app", &app_password, &["GET", "app:1"]),
            "v",
            "{}",
            m.name
        );
    }

    // A new reader password: both work during the overlap, then only the new one.
    let changed = Instant::now();
    secrets
        .replace(
            reader_secret,
            &post,
            &password_secret(reader_secret, "reader-two"),
        )
        .await
        .unwrap();
    on_every_data_node(
        &env,
        &access,
        "the new reader password to work",
        SETTLE,
        |ip| {
            let got = as_user(ip, "reader", "reader-two", &["GET", "app:1"]);
            (got == "v").then_some(()).ok_or(got)
        },
    )
    .await;
    eprintln!(
        "users: the new password works {:?} after the Secret changed",
        changed.elapsed()
    );
    for m in &access.data {
        let old = as_user(&m.ip, "reader", "reader-one", &["GET", "app:1"]);
        assert_eq!(
            old, "v",
            "{}: the old password works during the overlap",
            m.name
        );
    }
    on_every_data_node(
        &env,
        &access,
        "the old reader password to stop working",
        FORM,
        |ip| {
            let got = as_user(ip, "reader", "reader-one", &["GET", "app:1"]);
            logins::refused(&got).then_some(()).ok_or(got)
        },
    )
    .await;
    eprintln!(
        "users: the old password refused {:?} after the Secret changed (overlap {OVERLAP_SECONDS} s)",
        changed.elapsed()
    );
    for m in &access.data {
        assert_eq!(
            as_user(&m.ip, "reader", "reader-two", &["GET", "app:1"]),
            "v"
        );
    }

    // One UsersRefused Event per refusal (broken's, then app's), not one per look.
    let events = env.apis.group_events(name, Some("UsersRefused"));
    let events = events.await.unwrap();
    assert_eq!(events.len(), 2, "{events:?}");
    for e in &events {
        assert_eq!(e.series, None, "told once: {e:?}");
    }

    // app removed (and the bad rule with it): gone everywhere; a user made by hand stays.
    let hand_made = access.operator_cli(
        &primary.ip,
        &["ACL", "SETUSER", "handmade", "on", ">pw", "+ping"],
    );
    assert_eq!(hand_made, "OK");
    patch(json!([reader_spec])).await;
    on_every_data_node(&env, &access, "app to be deleted", SETTLE, |ip| {
        let got = as_user(ip, "app", &app_password, &["PING"]);
        logins::refused(&got).then_some(()).ok_or(got)
    })
    .await;
    users_reason(&env, name, "UsersApplied", "reader on all 2 data nodes").await;
    assert_eq!(as_user(&primary.ip, "handmade", "pw", &["PING"]), "PONG");
    assert_eq!(pod_uids(&env, name).await, uids, "no pod restarted");

    // With topology-controller scaled to zero, a restarted data node has the users of the
    // Secret it starts with.
    let topology = env.topology_controller();
    topology
        .stop(&env.cluster, Outage::ScaledDown)
        .await
        .unwrap();
    let replica = access.data.iter().find(|m| m.name != primary.name).unwrap();
    env.apis
        .kill_pod(&statefulset_pod_name(&replica.name))
        .await
        .unwrap();
    env.wait("the replica to come back", FORM, || async {
        let got = as_user(&replica.ip, "reader", "reader-two", &["GET", "app:1"]);
        Ok((got == "v").then_some(()).ok_or(got))
    })
    .await;
    let old = as_user(&replica.ip, "reader", "reader-one", &["PING"]);
    assert!(logins::refused(&old), "{old}");
    let app = as_user(&replica.ip, "app", &app_password, &["PING"]);
    assert!(logins::refused(&app), "{app}");
    try_join_all([topology.start(&env.cluster)]).await.unwrap();
    users_reason(&env, name, "UsersApplied", "reader on all 2 data nodes").await;
    env.finish().await;
}
