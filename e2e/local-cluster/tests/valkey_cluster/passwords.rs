//! The default password of a ValkeyCluster rotated live (`valkey_replication::passwords`
//! covers a restart during the overlap and the pods' readiness): every member takes the new
//! one next to the previous, which goes once the overlap has run, with no pod restarted and
//! no acknowledged write lost.

use std::collections::BTreeMap;
use std::time::Instant;

use crd_types::names::{self, statefulset_pod_name};
use crd_types::template::Auth;
use e2e_kit::cluster_testing::{Access, AckedWriter, valkey_cluster};
use e2e_kit::platform::{enforce_restricted, runs_as_assigned, with_assigned_identity};
use e2e_kit::testing::{events_about, valkey_cli_as};
use e2e_kit::topology::logins;
use kube::ResourceExt;

use crate::env::{Env, SETTLE};

/// Short: the drop must come when the overlap ends (the reconcile looks again then), well
/// before the 300 s idle look, within [`SETTLE`].
const OVERLAP_SECONDS: i64 = 10;

/// What the default user with `password` gets for PING on every member, by member.
fn pings(access: &Access, password: &str) -> BTreeMap<String, String> {
    access
        .members
        .iter()
        .map(|m| {
            let got = valkey_cli_as(&m.ip, Some((None, password)), &["PING"]);
            (m.name.clone(), got)
        })
        .collect()
}

/// Waits until every member answers PING with the default user's `password` as `wanted`
/// says.
async fn wait_pings(
    env: &Env,
    access: &Access,
    what: &str,
    password: &str,
    wanted: fn(&str) -> bool,
) {
    env.wait(what, SETTLE, || async {
        let got = pings(access, password);
        let all = got.values().all(|a| wanted(a));
        Ok(all.then_some(()).ok_or(format!("{got:?}")))
    })
    .await
}

/// Under a platform-assigned UID and fsGroup in a restricted namespace (as on OpenShift).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_default_password_rotates_on_every_member() {
    let env = Env::start().await;
    let ns = env.namespace.as_str();
    let name = "rotate";
    enforce_restricted(&env.client, ns).await.unwrap();
    let mut cluster = valkey_cluster(name, 3, 1, false);
    cluster.spec.common.auth = Some(Auth {
        password_overlap_seconds: Some(OVERLAP_SECONDS),
        ..Default::default()
    });
    with_assigned_identity(&mut cluster.spec.common.template);
    let access = env.create_ready(cluster).await;
    for m in &access.members {
        let info = access.cli(&m.ip, &["INFO", "server"]);
        runs_as_assigned(&info).unwrap_or_else(|e| panic!("{}: {e:#}", m.name));
    }
    let old = access.password.clone().unwrap();
    let new = "a new default password";
    let uids = async || {
        let mut uids = BTreeMap::new();
        for m in &access.members {
            let pod = env.apis.pods.get(&statefulset_pod_name(&m.name)).await;
            uids.insert(m.name.clone(), pod.unwrap().uid());
        }
        uids
    };
    let before = uids().await;
    let writer = AckedWriter::start(&access).await.unwrap();
    writer.progressed(100, SETTLE).await.unwrap();

    let changed = Instant::now();
    let secret = names::generated_auth_secret_name(name);
    logins::set_password(&env.apis.secrets, &secret, new)
        .await
        .unwrap();
    wait_pings(&env, &access, "the new password to work", new, |a| {
        a == "PONG"
    })
    .await;
    eprintln!(
        "passwords: the new password works {:?} after the Secret changed",
        changed.elapsed()
    );
    let previous = pings(&access, &old);
    assert!(
        previous.values().all(|a| a == "PONG"),
        "the previous one works in the overlap: {previous:?}"
    );
    let refused = |a: &str| a.starts_with("NOAUTH") || a.contains("WRONGPASS");
    wait_pings(
        &env,
        &access,
        "the previous password to stop working",
        &old,
        refused,
    )
    .await;
    eprintln!(
        "passwords: the previous password refused {:?} after the Secret changed (overlap {OVERLAP_SECONDS} s)",
        changed.elapsed()
    );
    let dropped = events_about(
        &env.apis.events,
        "ValkeyCluster",
        name,
        "PreviousPasswordDropped",
    );
    assert!(
        !dropped.await.unwrap().is_empty(),
        "a PreviousPasswordDropped Event"
    );
    let rotations = logins::rotations(&env.apis, name).await.unwrap();
    assert!(rotations.is_empty(), "{rotations:?}");
    // The writer's connections, logged in before, keep writing.
    writer.progressed(100, SETTLE).await.unwrap();
    assert_eq!(uids().await, before, "no pod restarted");
    let access = Access {
        password: Some(new.to_string()),
        ..access
    };
    env.nothing_lost(name, "through the rotation", writer, &access)
        .await;
    env.finish().await;
}
