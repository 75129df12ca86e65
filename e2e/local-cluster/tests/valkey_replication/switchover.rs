//! Scenario 4: planned primary changes (a switchover to a named member, the hand-over in a
//! roll) pause writes until every replica holds them: nothing acknowledged is lost.

use std::time::Instant;

use crd_types::cluster::SwitchoverOutcome;
use e2e_kit::replication_testing::{self, GroupAccess, GroupWriter, Route, valkey_replication};
use kube::ResourceExt;
use serde_json::json;

use crate::env::{Env, FAILOVER, SETTLE, nothing_lost};
use crate::restarts::pod_uids;

/// A writer through the read-write Service and a Sentinel-aware one.
fn writers(access: &GroupAccess) -> [GroupWriter; 2] {
    [
        GroupWriter::start(
            access,
            Route::Service(access.service_ip.clone().unwrap()),
            "svc",
        ),
        GroupWriter::start(
            access,
            Route::Sentinel(access.sentinel_service_ip.clone().unwrap()),
            "snt",
        ),
    ]
}

async fn progressed(writers: &[GroupWriter; 2]) {
    for w in writers {
        w.progressed(200, SETTLE).await.unwrap();
    }
}

/// Switchover s1 makes data node 2 the primary while two writers run: Succeeded once, the
/// read-write Service and the sentinels follow, the old primary is a replica, nothing
/// acknowledged is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_switchover_to_a_named_member_loses_nothing() {
    let env = Env::start().await;
    let name = "switch";
    let access = env
        .create_ready(valkey_replication(name, 3, 3, false))
        .await;
    let old = env.ready(name, SETTLE).await.current_primary.unwrap();
    let target = access
        .data
        .iter()
        .find(|m| m.name != old)
        .unwrap()
        .name
        .clone();
    let index = access.data.iter().find(|m| m.name == target).unwrap().index;
    let writers = writers(&access);
    progressed(&writers).await;

    let acked = writers[0].acked();
    let requested = Instant::now();
    env.apis
        .patch(
            name,
            json!({"spec": {"switchover": {"id": "s1", "member": index}}}),
        )
        .await
        .unwrap();
    env.wait("switchover s1 to succeed", FAILOVER, || async {
        let status = env.apis.groups.get(name).await?.status.unwrap_or_default();
        Ok(match status.switchover {
            Some(s) if s.id == "s1" && s.outcome == SwitchoverOutcome::Succeeded => Ok(()),
            Some(s) if s.id == "s1" && s.outcome == SwitchoverOutcome::Failed => {
                panic!("switchover s1 failed: {}", s.message)
            }
            other => Err(format!("status.switchover is {other:?}")),
        })
    })
    .await;
    eprintln!(
        "{name}: switchover to {target} Succeeded {:?} after the request",
        requested.elapsed()
    );
    let service = access.service_ip.clone().unwrap();
    env.wait(
        "the read-write Service to reach the new primary",
        SETTLE,
        || async { Ok(env.serves_as_primary(&access, &service, &target)) },
    )
    .await;
    writers[0].progressed(1, SETTLE).await.unwrap();
    eprintln!(
        "{name}: the Service writer's first write on {target} acknowledged {:?} after the request ({acked} before)",
        requested.elapsed()
    );
    env.ready_agreeing(name, Some(&target), SETTLE).await;
    progressed(&writers).await;
    let handed = env
        .apis
        .group_events(name, Some("HandedOver"))
        .await
        .unwrap();
    let note = handed
        .first()
        .and_then(|e| e.note.clone())
        .unwrap_or_default();
    assert_eq!(
        note,
        format!("{old} hands over to {target} as requested by spec.switchover")
    );
    // Every other member followed the new primary with a partial resync: nobody was left
    // ahead of it (a replication PING from the paused old primary after the promotion
    // forced full resyncs and ~7 s of NOREPLICAS before the hand-over quietened it).
    let stats = access.cli(access.ip(&target).unwrap(), &["INFO", "stats"]);
    let stat = |field: &str| {
        stats
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .map(|v| v.trim().to_string())
    };
    assert_eq!(stat("sync_full").as_deref(), Some("0"), "{stats}");
    let partial: u32 = stat("sync_partial_ok").unwrap().parse().unwrap();
    assert!(
        partial >= 2,
        "the old primary and the other replica: {stats}"
    );
    let reports = nothing_lost(name, writers, &access).await;
    for r in &reports {
        eprintln!("{name}: {} longest pause {:?}", r.route, r.longest_pause);
    }
    // Done once: a later reconcile does not switch again.
    env.ready_agreeing(name, Some(&target), SETTLE).await;
    env.finish().await;
}

/// A new image rolls every member one at a time, replicas and sentinels first, the primary
/// handing over before it restarts, while two writers run: every pod is replaced, the group
/// is Ready with a new primary, nothing acknowledged is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_image_rolls_every_member_and_loses_nothing() {
    let env = Env::start().await;
    let name = "roll";
    let access = env.create_ready(valkey_replication(name, 3, 3, true)).await;
    let old = env.ready(name, SETTLE).await.current_primary.unwrap();
    let before = pod_uids(&env, name).await;
    let writers = writers(&access);
    progressed(&writers).await;

    let started = Instant::now();
    env.apis
        .patch(
            name,
            json!({"spec": {"template": {"image": "valkey/valkey:8.0"}}}),
        )
        .await
        .unwrap();
    env.wait(
        "every member to run the new template",
        crate::env::FORM * 3,
        || async {
            for node in env.apis.members(name).await? {
                let name = node.name_any();
                let w = node.status.and_then(|s| s.workload).unwrap_or_default();
                if w.revision.is_none() || w.revision != w.desired_revision || !w.ready {
                    return Ok(Err(format!(
                        "{name} at {:?}, wants {:?}",
                        w.revision, w.desired_revision
                    )));
                }
            }
            Ok(Ok(()))
        },
    )
    .await;
    let status = env.ready_agreeing(name, None, SETTLE).await;
    eprintln!(
        "{name}: rolled and Ready {:?} after the change",
        started.elapsed()
    );
    let new = status.current_primary.unwrap();
    assert_ne!(new, old, "the primary handed over before it restarted");
    let after = pod_uids(&env, name).await;
    for (pod, uid) in &before {
        assert_ne!(after.get(pod), Some(uid), "{pod} was not replaced");
    }
    let handed = env
        .apis
        .group_events(name, Some("HandedOver"))
        .await
        .unwrap();
    assert!(
        handed.iter().any(|e| e
            .note
            .as_deref()
            .is_some_and(|n| n.contains("before it restarts"))),
        "no hand-over before the primary restarted"
    );
    progressed(&writers).await;
    let access = replication_testing::access(&env.apis, name).await.unwrap();
    nothing_lost(name, writers, &access).await;
    env.finish().await;
}
