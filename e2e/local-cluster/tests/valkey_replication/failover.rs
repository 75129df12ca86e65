//! Scenario 2: Sentinel fails over a frozen primary, and a killed one; the read-write
//! Service follows and the old primary rejoins as a replica. A primary deleted gracefully
//! hands over through Sentinel before it stops.

use std::time::Instant;

use agent_services::ControlClient;
use crd_types::names::statefulset_pod_name;
use e2e_kit::platform::{enforce_restricted, runs_as_assigned, with_assigned_identity};
use e2e_kit::replication_testing::{self, GroupAccess, GroupWriter, Route, valkey_replication};
use local_cluster::images::BUSYBOX_IMAGE;

use crate::env::{Env, FAILOVER, SETTLE};

/// A writer through the read-write Service and one asking the sentinels, each past 200
/// acknowledged writes.
async fn two_writers(access: &GroupAccess) -> [GroupWriter; 2] {
    let service = access.service_ip.clone().unwrap();
    let sentinels = access.sentinel_service_ip.clone().unwrap();
    let writers = [
        GroupWriter::start(access, Route::Service(service), "svc"),
        GroupWriter::start(access, Route::Sentinel(sentinels), "snt"),
    ];
    for writer in &writers {
        writer.progressed(200, SETTLE).await.unwrap();
    }
    writers
}

/// The primary status names once it is another than `old`.
pub(crate) async fn successor(env: &Env, name: &str, old: &str) -> String {
    env.wait(
        "Sentinel to fail over and status to follow",
        FAILOVER,
        || async {
            let status = env.apis.groups.get(name).await?.status.unwrap_or_default();
            Ok(match status.current_primary {
                Some(p) if p != old => Ok(p),
                other => Err(format!("currentPrimary is {other:?}")),
            })
        },
    )
    .await
}

/// After `what` happened to the primary `old` at `since`: the successor Sentinel names,
/// once the group is Ready and healthy again, fresh access, and what `old`'s start script
/// said of the sentinels with its log ([`said_at_start`]).
pub(crate) async fn failed_over(
    env: &Env,
    name: &str,
    old: &str,
    what: &str,
    since: Instant,
) -> (String, GroupAccess, Vec<String>, String) {
    let new = successor(env, name, old).await;
    eprintln!(
        "{name}: {new} named primary {:?} after the {what}",
        since.elapsed()
    );
    env.ready(name, FAILOVER).await;
    eprintln!("{name}: Ready again {:?} after the {what}", since.elapsed());
    let access = replication_testing::access(&env.apis, name).await.unwrap();
    env.healthy(&access, &new).await;
    let (said, log) = said_at_start(env, name, old).await;
    (new, access, said, log)
}

/// What the start script of `member`'s restarted pod said of the sentinels, and its log.
pub(crate) async fn said_at_start(env: &Env, name: &str, member: &str) -> (Vec<String>, String) {
    let log = start_log(env, member).await.unwrap();
    let said: Vec<String> = log
        .lines()
        .filter(|l| l.contains("sentinels"))
        .map(str::to_owned)
        .collect();
    eprintln!("{name}: {member} at start: {said:?}");
    (said, log)
}

/// The log of `member`'s pod: an error while the pod is gone (killed, not yet recreated)
/// or its container has not started.
pub(crate) async fn start_log(env: &Env, member: &str) -> kube::Result<String> {
    env.apis
        .pods
        .logs(&statefulset_pod_name(member), &Default::default())
        .await
}

/// Each writer past 200 more writes, then stopped; every acknowledged write reads back.
async fn nothing_lost(name: &str, writers: [GroupWriter; 2], access: &GroupAccess) {
    for writer in &writers {
        writer.progressed(200, SETTLE).await.unwrap();
    }
    crate::env::nothing_lost(name, writers, access).await;
}

/// With two writers (one through the read-write Service, one asking the sentinels), the
/// primary's pod is frozen (SIGSTOP) past down-after-milliseconds: Sentinel fails over,
/// status and the read-write Service follow, and once thawed the old primary rejoins as a
/// replica. No acknowledged write is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_frozen_primary_is_replaced_and_rejoins_as_replica() {
    let env = Env::start().await;
    let ns = env.namespace.as_str();
    let name = "freeze";
    let access = env
        .create_ready(valkey_replication(name, 3, 3, false))
        .await;
    let status = env.ready(name, SETTLE).await;
    let old = status.current_primary.clone().unwrap();
    let service = access.service_ip.clone().unwrap();
    env.wait(
        "the read-write Service to reach the primary",
        SETTLE,
        || async { Ok(env.serves_as_primary(&access, &service, &old)) },
    )
    .await;
    let [through_service, sentinel_aware] = two_writers(&access).await;

    let control = ControlClient::new(env.cluster.control_addr.unwrap());
    let pod = format!("{ns}/{}", statefulset_pod_name(&old));
    control.freeze(&pod).await.unwrap();
    let frozen = Instant::now();
    let new = successor(&env, name, &old).await;
    eprintln!(
        "{name}: {new} named primary {:?} after the freeze",
        frozen.elapsed()
    );
    env.wait(
        "the read-write Service to reach the new primary",
        SETTLE,
        || async { Ok(env.serves_as_primary(&access, &service, &new)) },
    )
    .await;
    eprintln!(
        "{name}: the read-write Service reaches {new} {:?} after the freeze",
        frozen.elapsed()
    );
    let acked = through_service.acked();
    through_service.progressed(1, SETTLE).await.unwrap();
    eprintln!(
        "{name}: first write acknowledged through the Service {:?} after the freeze ({acked} before)",
        frozen.elapsed()
    );

    control.thaw(&pod).await.unwrap();
    env.ready(name, FAILOVER).await;
    let access = replication_testing::access(&env.apis, name).await.unwrap();
    env.healthy(&access, &new).await;
    nothing_lost(name, [through_service, sentinel_aware], &access).await;
    let moved = env
        .apis
        .group_events(name, Some("PrimaryChanged"))
        .await
        .unwrap();
    let note = moved
        .first()
        .and_then(|e| e.note.clone())
        .unwrap_or_default();
    assert_eq!(note, format!("primary moved from {old} to {new}"));
    env.finish().await;
}

/// With two writers as above and persistence, the primary's pod is deleted (killed, grace
/// 0) and comes back at once: it does not serve as primary again (its replicas may hold
/// writes its append-only file missed) but waits until Sentinel fails over, then rejoins as
/// a replica of the new primary. No acknowledged write is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_deleted_primary_waits_for_the_failover_and_rejoins_as_replica() {
    let env = Env::start().await;
    let name = "kill";
    let access = env.create_ready(valkey_replication(name, 3, 3, true)).await;
    let old = env.ready(name, SETTLE).await.current_primary.unwrap();
    let writers = two_writers(&access).await;

    env.apis
        .kill_pod(&statefulset_pod_name(&old))
        .await
        .unwrap();
    let killed = Instant::now();
    let (_, access, said, log) = failed_over(&env, name, &old, "kill", killed).await;
    assert!(
        said.last()
            .is_some_and(|l| l.contains("starting as its replica")),
        "{log}"
    );
    nothing_lost(name, writers, &access).await;
    env.finish().await;
}

/// With two writers as above and persistence, the primary's pod is deleted gracefully (as a
/// drain or `kubectl delete pod` does): its preStop hook hands over through Sentinel before
/// the server stops, so when the pod comes back the sentinels already name another primary
/// and its start script follows it at once, never waiting for a failover. No acknowledged
/// write is lost. On the busybox image (docs/images.md): the start, probe, hook and sentinel
/// scripts run under busybox sh and applets; and under a platform-assigned UID and fsGroup
/// in a restricted namespace (as on OpenShift), data nodes and sentinels alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_deleted_primary_hands_over_through_sentinel_before_it_stops() {
    let env = Env::start().await;
    let ns = env.namespace.as_str();
    let name = "leave";
    enforce_restricted(&env.client, ns).await.unwrap();
    let mut group = valkey_replication(name, 3, 3, true);
    group.spec.common.template.image = BUSYBOX_IMAGE.into();
    with_assigned_identity(&mut group.spec.common.template);
    let access = env.create_ready(group).await;
    for m in &access.data {
        let info = access.cli(&m.ip, &["INFO", "server"]);
        runs_as_assigned(&info).unwrap_or_else(|e| panic!("{}: {e:#}", m.name));
    }
    for s in &access.sentinels {
        let info = access.sentinel_cli(&s.ip, &["INFO", "server"]);
        runs_as_assigned(&info).unwrap_or_else(|e| panic!("{}: {e:#}", s.name));
    }
    let old = env.ready(name, SETTLE).await.current_primary.unwrap();
    let writers = two_writers(&access).await;

    env.apis
        .pods
        .delete(&statefulset_pod_name(&old), &Default::default())
        .await
        .unwrap();
    let deleted = Instant::now();
    let (_, access, said, log) = failed_over(&env, name, &old, "delete", deleted).await;
    assert!(
        !said.is_empty() && said.iter().all(|l| l.contains("starting as its replica")),
        "the sentinels named another primary before {old} stopped: {log}"
    );
    nothing_lost(name, writers, &access).await;
    env.finish().await;
}
