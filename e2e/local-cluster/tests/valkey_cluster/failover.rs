//! Scenario 2: a killed primary is replaced by its replica, then a switchover.

use std::time::Instant;

use crd_types::cluster::SwitchoverOutcome;
use crd_types::names::{cluster_member_name, statefulset_pod_name};
use e2e_kit::cluster_testing::{AckedWriter, valkey_cluster};
use serde_json::json;

use crate::env::{Env, FAILOVER, FORM, SETTLE};

/// Scenario 2: with a writer running, a primary's pod is killed (and, with every Kubernetes
/// Node cordoned, not replaced at once, as when its machine is lost): its replica takes
/// over, the old member comes back as a replica of it with its identity, the cluster is
/// Ready again. Then switchover s1 makes member 1 of shard 0 its primary. No acknowledged
/// write is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_primary_is_replaced_and_rejoins_as_replica() {
    let env = Env::start_own().await;
    let name = "heal";
    let access = env.create_ready(valkey_cluster(name, 3, 1, true)).await;
    let writer = AckedWriter::start(&access).await.unwrap();
    writer.progressed(200, SETTLE).await.unwrap();

    // Shard 1: its primary is killed, its replica must take over.
    let status = env.ready(name, SETTLE).await;
    let shard = &status.shards[1];
    let old_primary = shard.primary.clone().unwrap();
    let successor = shard
        .members
        .iter()
        .find(|m| m.name != old_primary)
        .unwrap()
        .name
        .clone();
    let old_ip = access.ip(&old_primary).unwrap().to_string();
    let old_id = access.node_id(&old_ip).unwrap();
    let successor_id = access.node_id(access.ip(&successor).unwrap()).unwrap();
    let witness = access.ip(&cluster_member_name(name, 0, 0)).unwrap();
    let old_pod = statefulset_pod_name(&old_primary);

    env.apis.set_schedulable(false).await.unwrap();
    env.apis.kill_pod(&old_pod).await.unwrap();
    let killed = Instant::now();
    env.wait(
        &format!("{successor} to take over shard 1 (status and CLUSTER NODES)"),
        FAILOVER,
        || async {
            let status = env.status(name).await?;
            let primary = status.shards.get(1).and_then(|s| s.primary.clone());
            if primary.as_deref() != Some(successor.as_str()) {
                return Ok(Err(format!("status.shards[1].primary is {primary:?}")));
            }
            let view = access.nodes_seen_by(witness)?;
            let line = view.iter().find(|n| n.id == successor_id);
            Ok(match line {
                Some(n) if n.is_primary() && n.slot_count() > 0 => Ok(()),
                other => Err(format!("CLUSTER NODES on {witness}: {other:?}")),
            })
        },
    )
    .await;
    eprintln!(
        "{name}: {successor} took over {:?} after the kill",
        killed.elapsed()
    );
    let replacement = env.apis.pods.get_opt(&old_pod).await.unwrap();
    assert!(
        replacement
            .as_ref()
            .is_none_or(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Pending")),
        "the killed pod was replaced while every Node was cordoned: {replacement:?}"
    );

    // The old member comes back, as a replica of its successor, with its own node id.
    env.apis.set_schedulable(true).await.unwrap();
    env.ready(name, FORM).await;
    env.healthy(name, &access, 3, 1).await;
    assert_eq!(
        access.node_id(&old_ip).unwrap(),
        old_id,
        "{old_primary} kept its identity (nodes.conf on its volume)"
    );
    env.rejoined_as_replica(&access, &old_primary, &old_id, &successor_id)
        .await;
    writer.progressed(200, SETTLE).await.unwrap();

    // Switchover: member 1 of shard 0 becomes its primary.
    let target = cluster_member_name(name, 0, 1);
    let target_id = access.node_id(access.ip(&target).unwrap()).unwrap();
    env.apis
        .patch(
            name,
            json!({"spec": {"switchover": {"id": "s1", "shard": 0, "member": 1}}}),
        )
        .await
        .unwrap();
    env.wait("switchover s1 to succeed", FAILOVER, || async {
        let status = env.status(name).await?;
        Ok(match status.switchover {
            Some(s) if s.id == "s1" && s.outcome == SwitchoverOutcome::Succeeded => Ok(()),
            Some(s) if s.id == "s1" && s.outcome == SwitchoverOutcome::Failed => {
                panic!("switchover s1 failed: {}", s.message)
            }
            other => Err(format!("status.switchover is {other:?}")),
        })
    })
    .await;
    let status = env.ready(name, SETTLE).await;
    assert_eq!(status.shards[0].primary.as_deref(), Some(target.as_str()));
    env.healthy(name, &access, 3, 1).await;
    let view = access.nodes_seen_by(witness).unwrap();
    let line = view.iter().find(|n| n.id == target_id).unwrap();
    assert!(line.is_primary() && line.slot_count() > 0, "{line:?}");

    writer.progressed(200, SETTLE).await.unwrap();
    env.nothing_lost(name, "through the kill and the switchover", writer, &access)
        .await;
    env.finish().await;
}
