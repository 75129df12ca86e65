//! The operator password of a ValkeyCluster rotated live (`valkey_replication::
//! operator_password` covers the sentinels): every member takes the new one as `operator`
//! next to the previous, replicas' `masterauth` follows, and after the overlap only the new
//! one works; the replica links again with a partial resync, no pod restarts, no
//! acknowledged write is lost, and a primary deleted afterwards still hands its slots over
//! (`CLUSTER FAILOVER`): its hook reads the password from the mounted Secret, not from the
//! environment it started with. Naming another Secret rolls the members onto it and rotates
//! the same way.

use std::collections::BTreeMap;
use std::time::Instant;

use crd_types::names::{self, statefulset_pod_name};
use crd_types::template::{Auth, REPLICATION_PASSWORD_PREFIX, SecretKeyRef, derived_password};
use e2e_kit::cluster_testing::{Access, AckedWriter, valkey_cluster};
use e2e_kit::testing::{events_about, ready_node};
use e2e_kit::topology::logins;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

use crate::env::{Env, FAILOVER, FORM, SETTLE};
use crate::planned_departure::manual_failovers_started;

/// What `operator` with `password` gets for `args` on the member at `ip`.
fn as_operator(ip: &str, password: &str, args: &[&str]) -> String {
    logins::answer(ip, 6379, (Some("operator"), password), args)
}

/// Waits until `check` holds on every member of `access`.
async fn on_every(
    env: &Env,
    access: &Access,
    what: &str,
    timeout: std::time::Duration,
    check: impl Fn(&str) -> Result<(), String>,
) {
    let members = access
        .members
        .iter()
        .map(|m| (m.name.as_str(), m.ip.as_str()));
    env.wait(what, timeout, || async {
        Ok(logins::on_each(members.clone(), &check))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_operator_password_rotates_on_every_member() {
    let env = Env::start().await;
    let name = "oprot";
    let mut cluster = valkey_cluster(name, 1, 1, true);
    // Below the operator's least overlap for this password (120 s), which it keeps.
    cluster.spec.common.auth = Some(Auth {
        password_overlap_seconds: Some(30),
        ..Default::default()
    });
    let access = env.create_ready(cluster).await;
    let secret = names::generated_operator_secret_name(name);
    let data = env.apis.secrets.get(&secret).await.unwrap().data.unwrap();
    let ByteString(old) = data["password"].clone();
    let old = String::from_utf8(old).unwrap();
    let new = "a new operator password";
    let new_replication = derived_password(REPLICATION_PASSWORD_PREFIX, new);
    let uids = async || {
        let mut uids = Vec::new();
        for m in &access.members {
            let pod = env.apis.pods.get(&statefulset_pod_name(&m.name)).await;
            uids.push((m.name.clone(), pod.unwrap().uid()));
        }
        uids
    };
    let before = uids().await;
    let writer = AckedWriter::start(&access).await.unwrap();
    writer.progressed(100, SETTLE).await.unwrap();

    let changed = Instant::now();
    logins::set_password(&env.apis.secrets, &secret, new)
        .await
        .unwrap();
    on_every(
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
    eprintln!(
        "operator password: the new one works {:?} after the Secret changed",
        changed.elapsed()
    );
    for m in &access.members {
        let got = as_operator(&m.ip, &old, &["PING"]);
        assert_eq!(
            got, "PONG",
            "{}: the previous one works in the overlap",
            m.name
        );
    }
    on_every(&env, &access, "masterauth to follow", SETTLE, |ip| {
        let got = as_operator(ip, new, &["CONFIG", "GET", "masterauth"]);
        (got == format!("masterauth\n{new_replication}"))
            .then_some(())
            .ok_or(got)
    })
    .await;
    env.wait("status to show the rotation", SETTLE, || async {
        let now = logins::rotations(&env.apis, name).await?;
        let operator: Vec<_> = now
            .iter()
            .filter(|(user, ..)| user == "operator")
            .map(|&(_, with_new, members)| (with_new, members))
            .collect();
        Ok((operator == [(2, 2)])
            .then_some(())
            .ok_or(format!("{now:?}")))
    })
    .await;

    on_every(
        &env,
        &access,
        "the previous operator password to stop working",
        FORM,
        |ip| {
            let got = as_operator(ip, &old, &["PING"]);
            logins::refused(&got).then_some(()).ok_or(got)
        },
    )
    .await;
    eprintln!(
        "operator password: the previous one refused {:?} after the Secret changed",
        changed.elapsed()
    );
    env.wait("status to show no rotation", SETTLE, || async {
        let now = logins::rotations(&env.apis, name).await?;
        Ok(now.is_empty().then_some(()).ok_or(format!("{now:?}")))
    })
    .await;
    assert_eq!(uids().await, before, "no pod restarted");
    for reason in [
        "OperatorPasswordAdded",
        "OperatorLoginsSwitched",
        "PreviousPasswordDropped",
    ] {
        let events = events_about(&env.apis.events, "ValkeyCluster", name, reason);
        assert!(!events.await.unwrap().is_empty(), "an {reason} Event");
    }
    let refusals = events_about(
        &env.apis.events,
        "ValkeyCluster",
        name,
        "OperatorPasswordRefused",
    );
    assert_eq!(refusals.await.unwrap(), [], "no member refused");

    // The replica logs in again with the new replication password: a partial resync.
    let (primary, successor) = env.primary_and_successor(name, &access, 0).await;
    let stats = |what: &str| {
        let info = as_operator(&primary.ip, new, &["INFO", "stats"]);
        logins::info_field(&info, what).unwrap_or_else(|| panic!("{what} in {info}"))
    };
    let full_before = stats("sync_full");
    let partial_before: u64 = stats("sync_partial_ok").parse().unwrap();
    let killed = as_operator(&primary.ip, new, &["CLIENT", "KILL", "TYPE", "replica"]);
    assert_eq!(killed, "1", "the replica's link was cut");
    env.wait("the replica to link again", SETTLE, || async {
        let info = as_operator(&successor.ip, new, &["INFO", "replication"]);
        let up = logins::info_field(&info, "master_link_status").as_deref() == Some("up");
        let partial: u64 = stats("sync_partial_ok").parse().unwrap();
        Ok((up && partial > partial_before).then_some(()).ok_or(info))
    })
    .await;
    assert_eq!(stats("sync_full"), full_before, "no full resync");

    // The primary's pod, started with the previous password in its environment, is
    // deleted: its hook asks the replica for a coordinated failover with the new one.
    let started_before = manual_failovers_started(&access, &successor.ip);
    env.apis
        .pods
        .delete(&statefulset_pod_name(&primary.name), &Default::default())
        .await
        .unwrap();
    env.wait(
        &format!("{} to be primary in Valkey", successor.name),
        FAILOVER,
        || async {
            let view = access.nodes_seen_by(&successor.ip)?;
            let me = view.iter().find(|n| n.id == successor.id);
            Ok(match me {
                Some(n) if n.is_primary() && n.slot_count() > 0 => Ok(()),
                other => Err(format!("{} says {other:?}", successor.name)),
            })
        },
    )
    .await;
    assert_eq!(
        manual_failovers_started(&access, &successor.ip),
        started_before + 1,
        "{} took over by a manual failover, asked for by the stopping primary",
        successor.name
    );
    env.ready(name, FORM).await;
    env.healthy(name, &access, 1, 1).await;
    writer.progressed(100, SETTLE).await.unwrap();
    env.nothing_lost(name, "through the rotation", writer, &access)
        .await;
    env.finish().await;
}

/// `auth.operatorSecretRef` pointed at another Secret: the members roll onto it (their
/// environment and mount name it) while the rotation runs as for a changed value; the new
/// password ends up alone everywhere, with no acknowledged write lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn another_operator_secret_rolls_the_members_and_rotates_the_password() {
    let env = Env::start().await;
    let name = "opref";
    let secret = |name: &str, password: &str| Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        string_data: Some(BTreeMap::from([("password".into(), password.into())])),
        ..Default::default()
    };
    let (old, new) = (
        "the first operator password",
        "the second operator password",
    );
    for (secret_name, password) in [("op-first", old), ("op-second", new)] {
        env.apis
            .secrets
            .create(&PostParams::default(), &secret(secret_name, password))
            .await
            .unwrap();
    }
    let mut cluster = valkey_cluster(name, 1, 1, true);
    cluster.spec.common.auth = Some(Auth {
        operator_secret_ref: Some(SecretKeyRef {
            name: "op-first".into(),
            key: "password".into(),
        }),
        password_overlap_seconds: Some(30),
        ..Default::default()
    });
    let access = env.create_ready(cluster).await;
    for m in &access.members {
        assert_eq!(as_operator(&m.ip, old, &["PING"]), "PONG", "{}", m.name);
    }
    let uids = async || {
        let mut uids = Vec::new();
        for m in &access.members {
            let pod = env.apis.pods.get(&statefulset_pod_name(&m.name)).await;
            uids.push(pod.unwrap().uid());
        }
        uids
    };
    let before = uids().await;
    let writer = AckedWriter::start(&access).await.unwrap();
    writer.progressed(100, SETTLE).await.unwrap();

    let changed = Instant::now();
    let patch =
        json!({"spec": {"auth": {"operatorSecretRef": {"name": "op-second", "key": "password"}}}});
    env.apis
        .clusters
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    // Each member's pod replaced and ready: the revisions alone could still be the old
    // template's for a moment, before node-controller saw the change.
    env.wait(
        "every member's pod to be replaced and ready",
        FORM,
        || async {
            for (m, before) in access.members.iter().zip(&before) {
                let old = before.as_deref();
                if ready_node(&env.apis.nodes, &env.apis.pods, &m.name, old)
                    .await?
                    .is_none()
                {
                    return Ok(Err(format!("{} not replaced and ready yet", m.name)));
                }
            }
            Ok(Ok(()))
        },
    )
    .await;
    let after = uids().await;
    assert!(
        before.iter().zip(&after).all(|(b, a)| b != a),
        "every pod was replaced: {before:?} -> {after:?}"
    );
    eprintln!(
        "operator password: every member rolled onto the other Secret {:?} after the change",
        changed.elapsed()
    );
    on_every(
        &env,
        &access,
        "the previous operator password to stop working",
        FORM,
        |ip| {
            let got = as_operator(ip, old, &["PING"]);
            logins::refused(&got).then_some(()).ok_or(got)
        },
    )
    .await;
    eprintln!(
        "operator password: the previous one refused {:?} after the change",
        changed.elapsed()
    );
    for m in &access.members {
        assert_eq!(as_operator(&m.ip, new, &["PING"]), "PONG", "{}", m.name);
    }
    env.wait("status to show no rotation", SETTLE, || async {
        let now = logins::rotations(&env.apis, name).await?;
        Ok(now.is_empty().then_some(()).ok_or(format!("{now:?}")))
    })
    .await;
    env.ready(name, SETTLE).await;
    env.healthy(name, &access, 1, 1).await;
    writer.progressed(100, SETTLE).await.unwrap();
    env.nothing_lost(
        name,
        "through the roll onto another Secret",
        writer,
        &access,
    )
    .await;
    env.finish().await;
}
