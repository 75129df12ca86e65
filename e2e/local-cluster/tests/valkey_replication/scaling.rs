//! Scenario 5: scaling data nodes and sentinels, in and out, with the data and a writer;
//! then a live config change.

use std::time::Instant;

use crd_types::cluster::SwitchoverOutcome;
use e2e_kit::replication_testing::{self, GroupWriter, Route, valkey_replication};
use serde_json::json;

use crate::env::{Env, FAILOVER, FORM, SETTLE};

/// Data nodes 3 -> 5 -> 2 and sentinels 3 -> 5 -> 3, with a switchover to data node 4 before
/// the scale-in so the primary itself must leave (it hands over first). After each change
/// the group is Ready, Valkey and every sentinel agree (each sentinel lists exactly the
/// members there are, removed ones forgotten through SENTINEL RESET), the keys read back,
/// and a Sentinel-aware writer loses nothing. The operator holds one subscription per
/// sentinel at the end (those it replaced are closed).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn data_nodes_and_sentinels_scale_out_and_in() {
    let env = Env::start().await;
    let name = "scale";
    let access = env
        .create_ready(valkey_replication(name, 3, 3, false))
        .await;
    let keys = access.load("scale", 2000).await.unwrap();
    let writer = GroupWriter::start(
        &access,
        Route::Sentinel(access.sentinel_service_ip.clone().unwrap()),
        "scale-w",
    );
    writer.progressed(200, SETTLE).await.unwrap();

    for (what, spec) in [
        ("data nodes 3 -> 5", json!({"replicas": 5})),
        (
            "sentinels 3 -> 5",
            json!({"sentinel": {"replicas": 5, "quorum": 3}}),
        ),
    ] {
        let started = Instant::now();
        env.apis.patch(name, json!({ "spec": spec })).await.unwrap();
        let status = env.ready_agreeing(name, None, FORM).await;
        eprintln!(
            "{name}: {what}: Ready and agreeing {:?} later",
            started.elapsed()
        );
        assert_eq!(
            status.members.len(),
            if what.starts_with("data") { 8 } else { 10 }
        );
        writer.progressed(100, SETTLE).await.unwrap();
    }

    // The primary moves to data node 4, which the scale-in below removes.
    env.apis
        .patch(
            name,
            json!({"spec": {"switchover": {"id": "to-4", "member": 4}}}),
        )
        .await
        .unwrap();
    env.wait("switchover to-4 to succeed", FAILOVER, || async {
        let status = env.apis.groups.get(name).await?.status.unwrap_or_default();
        Ok(match status.switchover {
            Some(s) if s.id == "to-4" && s.outcome == SwitchoverOutcome::Succeeded => Ok(()),
            other => Err(format!("status.switchover is {other:?}")),
        })
    })
    .await;
    env.ready_agreeing(name, Some("scale-4"), SETTLE).await;

    for (what, spec, members) in [
        // The switchover is done; it goes, or admission refuses a scale-in below it.
        (
            "data nodes 5 -> 2",
            json!({"replicas": 2, "switchover": null}),
            7,
        ),
        (
            "sentinels 5 -> 3",
            json!({"sentinel": {"replicas": 3, "quorum": 2}}),
            5,
        ),
    ] {
        let started = Instant::now();
        env.apis.patch(name, json!({ "spec": spec })).await.unwrap();
        let status = env.ready_agreeing(name, None, FORM).await;
        eprintln!(
            "{name}: {what}: Ready and agreeing {:?} later, primary {:?}",
            started.elapsed(),
            status.current_primary
        );
        assert_eq!(status.members.len(), members, "{status:?}");
        assert_eq!(env.apis.members(name).await.unwrap().len(), members);
        writer.progressed(100, SETTLE).await.unwrap();
    }
    let status = env.ready(name, SETTLE).await;
    assert!(
        ["scale-0", "scale-1"].contains(&status.current_primary.as_deref().unwrap()),
        "{status:?}"
    );
    let handed = env
        .apis
        .group_events(name, Some("HandedOver"))
        .await
        .unwrap();
    assert!(
        handed.iter().any(|e| e
            .note
            .as_deref()
            .is_some_and(|n| n.contains("before it is removed"))),
        "the leaving primary did not hand over"
    );
    for reason in ["MembersRemoved", "SentinelReset"] {
        assert!(
            !env.apis
                .group_events(name, Some(reason))
                .await
                .unwrap()
                .is_empty(),
            "no {reason} Event"
        );
    }

    let access = replication_testing::access(&env.apis, name).await.unwrap();
    access.verify(&keys).await.unwrap();
    // The operator subscribes once per sentinel: the subscriptions it replaced when the
    // sentinels changed are closed, not left open.
    env.wait(
        "one operator subscription on each sentinel",
        SETTLE,
        || async {
            let counts: Vec<(String, usize)> = access
                .sentinels
                .iter()
                .map(|s| {
                    let clients = access.sentinel_cli(&s.ip, &["CLIENT", "LIST"]);
                    let subscriptions = clients
                        .lines()
                        .filter(|l| l.contains(" user=operator ") && l.contains(" flags=P "))
                        .count();
                    (s.name.clone(), subscriptions)
                })
                .collect();
            Ok(if counts.iter().all(|(_, n)| *n == 1) {
                Ok(())
            } else {
                Err(format!("subscriptions per sentinel: {counts:?}"))
            })
        },
    )
    .await;

    // A live directive: every data node serves the new value with no restart (the same run
    // id), and status and an Event say it went live.
    let data_ips: Vec<String> = access.data.iter().map(|m| m.ip.clone()).collect();
    let run_ids = |access: &replication_testing::GroupAccess| -> Vec<Option<String>> {
        data_ips.iter().map(|ip| access.run_id(ip)).collect()
    };
    let before = run_ids(&access);
    assert!(before.iter().all(Option::is_some), "{before:?}");
    env.apis
        .patch(
            name,
            json!({"spec": {"template": {"config": {"maxmemory": "200mb"}}}}),
        )
        .await
        .unwrap();
    env.wait(
        "every data node to serve maxmemory 200mb",
        SETTLE,
        || async {
            for ip in &data_ips {
                let got = access.operator_cli(ip, &["CONFIG", "GET", "maxmemory"]);
                if got != "maxmemory\n209715200" {
                    return Ok(Err(format!("{ip} answers {got:?}")));
                }
            }
            Ok(Ok(()))
        },
    )
    .await;
    assert_eq!(run_ids(&access), before, "a data node restarted");
    let status = env.ready(name, SETTLE).await;
    let paths = status.config.unwrap();
    assert_eq!(
        paths.live,
        ["maxmemory", "min-replicas-max-lag", "min-replicas-to-write"]
    );
    let live = env
        .apis
        .group_events(name, Some("ConfigSetLive"))
        .await
        .unwrap();
    assert!(
        live.iter()
            .any(|e| e.note.as_deref().is_some_and(|n| n.contains("maxmemory"))),
        "{live:?}"
    );
    writer.progressed(100, SETTLE).await.unwrap();
    let report = writer.stop().await.unwrap();
    eprintln!("{name}: {}", report.summary());
    let lost = report.lost(&access).await.unwrap();
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged writes lost",
        lost.len(),
        report.acked.len()
    );
    env.finish().await;
}
