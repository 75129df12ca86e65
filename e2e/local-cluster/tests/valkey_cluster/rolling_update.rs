//! Scenario 4: a live directive changes on the running members with no restart; a directive
//! read only at start rolls one member at a time; neither loses a write.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::Instant;

use crd_types::names::statefulset_pod_name;
use crd_types::node::Role;
use e2e_kit::cluster_testing::{AckedWriter, RollWatch, ready_status, valkey_cluster};
use e2e_kit::testing::events_about;
use kube::ResourceExt;
use serde_json::json;

use crate::env::{Env, ROLL, SETTLE};

/// Scenario 4, with a writer running throughout:
/// - maxmemory 100mb -> 200mb is set live: every member serves it, no pod is replaced or
///   restarted, no revision moves, status lists it as live and an Event says so;
/// - tcp-backlog 511 -> 256 (read only at start) rolls every member, one at a time and replicas
///   first in each shard, and the cluster ends Ready serving it;
/// - no acknowledged write is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rolling_update_keeps_acknowledged_writes() {
    let env = Env::start().await;
    let name = "roll";
    let access = env.create_ready(valkey_cluster(name, 3, 1, true)).await;
    let writer = AckedWriter::start(&access).await.unwrap();
    writer.progressed(200, SETTLE).await.unwrap();

    let members = env.apis.members(name).await.unwrap();
    let mut old_uids = BTreeMap::new();
    for node in &members {
        let workload = node
            .status
            .as_ref()
            .and_then(|s| s.workload.clone())
            .unwrap();
        assert!(workload.revision.is_some());
        assert_eq!(workload.revision, workload.desired_revision, "{node:?}");
        let pod = env
            .apis
            .pods
            .get(&statefulset_pod_name(&node.name_any()))
            .await
            .unwrap();
        old_uids.insert(node.name_any(), pod.uid().unwrap());
    }
    let pods_before = env.pod_starts(&members).await;

    // Live: every member serves the new value, and nothing restarted.
    env.apis
        .patch(
            name,
            json!({"spec": {"template": {"config": {"maxmemory": "200mb"}}}}),
        )
        .await
        .unwrap();
    env.wait("every member to serve maxmemory 200mb", ROLL, || async {
        for node in env.apis.members(name).await? {
            let member = node.name_any();
            let Some(ip) = access.ip(&member) else {
                return Ok(Err(format!("{member} has no address")));
            };
            let got = access.admin_cli(ip, &["CONFIG", "GET", "maxmemory"]);
            if got != "maxmemory\n209715200" {
                return Ok(Err(format!("{member} answers {got:?}")));
            }
        }
        Ok(ready_status(&env.apis, name).await?.map(drop))
    })
    .await;
    let after_live = env.apis.members(name).await.unwrap();
    assert_eq!(
        env.pod_starts(&after_live).await,
        pods_before,
        "a pod restarted"
    );
    for node in &after_live {
        let workload = node
            .status
            .as_ref()
            .and_then(|s| s.workload.clone())
            .unwrap();
        assert_eq!(workload.revision, workload.desired_revision, "{node:?}");
    }
    let revisions = |nodes: &[crd_types::ValkeyNode]| -> Vec<Option<String>> {
        nodes
            .iter()
            .map(|n| n.status.as_ref()?.workload.as_ref()?.revision.clone())
            .collect()
    };
    assert_eq!(
        revisions(&after_live),
        revisions(&members),
        "a revision moved"
    );
    let status = env.apis.clusters.get(name).await.unwrap().status.unwrap();
    let paths = status.config.unwrap();
    // The defaults every member gets (model::member_config) are live directives too.
    assert_eq!(
        paths.live,
        [
            "busy-reply-threshold",
            "cluster-allow-replica-migration",
            "cluster-node-timeout",
            "maxmemory"
        ]
    );
    assert!(paths.restart.is_empty(), "{paths:?}");
    let events = events_about(&env.apis.events, "ValkeyCluster", name, "ConfigSetLive")
        .await
        .unwrap();
    // Only the change asked for: a member never ran a directive at another value than its
    // config (at formation, say).
    assert!(!events.is_empty());
    for e in &events {
        let note = e.note.as_deref().unwrap_or_default();
        assert!(note.starts_with("setting maxmemory live"), "{note}");
    }

    // Restart-only: every member rolls.
    let watch = RefCell::new(RollWatch::new(&after_live));
    let started = Instant::now();
    env.apis
        .patch(
            name,
            json!({"spec": {"template": {"config": {"tcp-backlog": "256"}}}}),
        )
        .await
        .unwrap();
    env.wait(
        "every member to roll and the cluster to be Ready",
        ROLL,
        || async {
            let members = env.apis.members(name).await?;
            if let Err(why) = watch.borrow_mut().sample_until_rolled(&members) {
                return Ok(Err(why));
            }
            Ok(ready_status(&env.apis, name).await?.map(drop))
        },
    )
    .await;
    eprintln!("{name}: rolled in {:?}", started.elapsed());

    let watch = watch.into_inner();
    eprintln!(
        "{name}: {} samples, gate order {:?}",
        watch.samples, watch.gate_order
    );
    assert!(
        watch.max_rolling <= 1,
        "members rolling at once: {:?}",
        watch.worst
    );
    assert!(
        watch.max_not_ready <= 1,
        "{} members were not ready at once",
        watch.max_not_ready
    );
    assert_eq!(
        watch.gate_order.len(),
        members.len(),
        "{:?}",
        watch.gate_order
    );
    for shard in 0..3 {
        let prefix = format!("{name}-{shard}-");
        let first = watch
            .gate_order
            .iter()
            .find(|(n, _)| n.starts_with(&prefix))
            .unwrap();
        assert_eq!(
            first.1,
            Some(Role::Replica),
            "shard {shard} rolled {first:?} first"
        );
    }
    for (member, uid) in &old_uids {
        let pod = env
            .apis
            .pods
            .get(&statefulset_pod_name(member))
            .await
            .unwrap();
        assert_ne!(
            pod.uid().as_ref(),
            Some(uid),
            "{member}'s pod was not replaced"
        );
        let ip = access.ip(member).unwrap();
        assert_eq!(
            access.admin_cli(ip, &["CONFIG", "GET", "tcp-backlog"]),
            "tcp-backlog\n256",
            "{member}"
        );
        // The live value survived the restart: it is in the file the server reads at start.
        assert_eq!(
            access.admin_cli(ip, &["CONFIG", "GET", "maxmemory"]),
            "maxmemory\n209715200",
            "{member}"
        );
    }
    let paths = env
        .apis
        .clusters
        .get(name)
        .await
        .unwrap()
        .status
        .unwrap()
        .config
        .unwrap();
    assert_eq!(
        (paths.live, paths.restart),
        (
            vec![
                "busy-reply-threshold".to_string(),
                "cluster-allow-replica-migration".to_string(),
                "cluster-node-timeout".to_string(),
                "maxmemory".to_string()
            ],
            vec!["tcp-backlog".to_string()]
        )
    );
    env.healthy(name, &access, 3, 1).await;

    writer.progressed(200, SETTLE).await.unwrap();
    env.nothing_lost(name, "during the roll", writer, &access)
        .await;
    env.finish().await;
}
