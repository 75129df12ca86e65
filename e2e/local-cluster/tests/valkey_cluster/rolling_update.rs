//! Scenario 4: a template change rolls one member at a time without losing a write.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::Instant;

use crd_types::names::statefulset_pod_name;
use crd_types::node::Role;
use kube::ResourceExt;
use local_cluster::cluster_testing::{AckedWriter, RollWatch, ready_status, valkey_cluster};
use serde_json::json;

use crate::env::{Env, ROLL, SETTLE};

/// Scenario 4: maxmemory 100mb -> 200mb with a writer running: every member rolls, one at a
/// time and replicas first in each shard, the cluster ends Ready serving the new config, and
/// no acknowledged write is lost.
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
    let watch = RefCell::new(RollWatch::new(&members));

    let started = Instant::now();
    env.apis
        .patch(
            name,
            json!({"spec": {"template": {"config": {"maxmemory": "200mb"}}}}),
        )
        .await
        .unwrap();
    env.wait(
        "every member to roll and the cluster to be Ready",
        ROLL,
        || async {
            let members = env.apis.members(name).await?;
            watch.borrow_mut().sample(&members);
            if !watch.borrow().all_rolled(&members) {
                let order: Vec<String> = watch
                    .borrow()
                    .gate_order
                    .iter()
                    .map(|(n, _)| n.clone())
                    .collect();
                return Ok(Err(format!("rolled so far: {order:?}")));
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
        assert_eq!(
            access.cli(access.ip(member).unwrap(), &["CONFIG", "GET", "maxmemory"]),
            "maxmemory\n209715200",
            "{member}"
        );
    }
    env.healthy(name, &access, 3, 1).await;

    writer.progressed(200, SETTLE).await.unwrap();
    let report = writer.stop().await.unwrap();
    eprintln!("{name}: writer during the roll\n{}", report.summary());
    for stream in &report.streams {
        assert!(!stream.acked.is_empty(), "{}", report.summary());
    }
    let lost = report.lost(&access).await.unwrap();
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged writes lost, e.g. {:?}",
        lost.len(),
        report.acked(),
        &lost[..lost.len().min(10)]
    );
    env.finish();
}
