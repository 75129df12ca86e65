//! Scenario: `kubectl drain` of a Kubernetes Node that holds two shards' primaries.

use std::collections::BTreeMap;
use std::process::Command;

use crd_types::cluster::SwitchoverOutcome;
use crd_types::names::statefulset_pod_name;
use e2e_kit::cluster_testing::{AckedWriter, valkey_cluster};
use serde_json::json;

use crate::env::{Env, FAILOVER, FORM, SETTLE};
use crate::planned_departure::manual_failovers_started;

/// One shard's primary on the drained Node, and the replica that takes over.
struct Leaving {
    shard: usize,
    primary: String,
    primary_id: String,
    successor: String,
    successor_ip: String,
    successor_id: String,
    started_before: u64,
}

/// Two shards' primaries are put on one Kubernetes Node, and the third shard's primary off
/// it when the Node holds a member of that shard too (a switchover where needed: the spread
/// constraint keeps a shard's members apart, not the shards). With a WAIT-acked writer
/// running, `kubectl drain` cordons the Node and evicts its pods,
/// asking again while a disruption budget refuses: each primary's preStop hook hands its
/// shard to its replica with a manual failover (counted on the replica) before its server
/// stops, and the third shard keeps its primary. Once the Node is uncordoned the evicted
/// members come back as replicas of their successors, and no acknowledged write is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn draining_a_node_with_two_primaries_hands_each_over_first() {
    let env = Env::start_own().await;
    let name = "drain";
    let access = env.create_ready(valkey_cluster(name, 3, 1, true)).await;

    // The members by Kubernetes Node; one Node with members of two shards.
    let mut by_node: BTreeMap<String, Vec<(u32, u32, String)>> = BTreeMap::new();
    for m in &access.members {
        let pod = env
            .apis
            .pods
            .get(&statefulset_pod_name(&m.name))
            .await
            .unwrap();
        let node = pod.spec.and_then(|s| s.node_name).unwrap();
        by_node
            .entry(node)
            .or_default()
            .push((m.shard, m.member, m.name.clone()));
    }
    // The shard spread constraint keeps a shard's members on different Nodes; one per shard.
    let (node, on_node) = by_node
        .iter()
        .find_map(|(node, members)| {
            let mut shards: Vec<(u32, u32, String)> = Vec::new();
            for m in members {
                if shards.iter().all(|s| s.0 != m.0) {
                    shards.push(m.clone());
                }
            }
            (shards.len() >= 2).then(|| (node.clone(), shards))
        })
        .unwrap_or_else(|| panic!("no Node holds members of two shards: {by_node:?}"));
    for (i, (shard, member, member_name)) in on_node.iter().enumerate() {
        let status = env.ready(name, SETTLE).await;
        let is_primary =
            status.shards[*shard as usize].primary.as_deref() == Some(member_name.as_str());
        // The first two on the Node become primaries; a third shard's member there must not be.
        let member = match (i < 2, is_primary) {
            (true, true) | (false, false) => continue,
            (true, false) => *member,
            (false, true) => 1 - *member,
        };
        let id = format!("d{i}");
        env.apis
            .patch(
                name,
                json!({"spec": {"switchover": {"id": id, "shard": shard, "member": member}}}),
            )
            .await
            .unwrap();
        env.wait(&format!("switchover {id} to succeed"), FAILOVER, || async {
            let status = env.status(name).await?;
            Ok(match status.switchover {
                Some(s) if s.id == id && s.outcome == SwitchoverOutcome::Succeeded => Ok(()),
                other => Err(format!("status.switchover is {other:?}")),
            })
        })
        .await;
    }
    env.ready(name, SETTLE).await;
    env.healthy(name, &access, 3, 1).await;
    let status = env.ready(name, SETTLE).await;
    let leaving: Vec<Leaving> = on_node[..2]
        .iter()
        .map(|(shard, _, primary)| {
            let shard = *shard as usize;
            assert_eq!(status.shards[shard].primary.as_ref(), Some(primary));
            let successor = status.shards[shard]
                .members
                .iter()
                .find(|m| &m.name != primary)
                .unwrap()
                .name
                .clone();
            let successor_ip = access.ip(&successor).unwrap().to_string();
            Leaving {
                shard,
                primary: primary.clone(),
                primary_id: access.node_id(access.ip(primary).unwrap()).unwrap(),
                successor_id: access.node_id(&successor_ip).unwrap(),
                started_before: manual_failovers_started(&access, &successor_ip),
                successor,
                successor_ip,
            }
        })
        .collect();
    let staying = (0..3)
        .find(|s| leaving.iter().all(|l| l.shard != *s))
        .unwrap();
    let staying_primary = status.shards[staying].primary.clone();

    let writer = AckedWriter::start(&access).await.unwrap();
    writer.progressed(200, SETTLE).await.unwrap();
    let kubeconfig = env.cluster.admin_kubeconfig.clone();
    let drained = node.clone();
    let drain = tokio::task::spawn_blocking(move || {
        Command::new("kubectl")
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .args([
                "drain",
                &drained,
                "--ignore-daemonsets",
                "--delete-emptydir-data",
            ])
            .arg("--timeout=300s")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    eprintln!(
        "{name}: kubectl drain {node}:\n{}{}",
        String::from_utf8_lossy(&drain.stdout),
        String::from_utf8_lossy(&drain.stderr)
    );
    assert!(drain.status.success(), "kubectl drain {node} failed");

    for l in &leaving {
        let view = access.nodes_seen_by(&l.successor_ip).unwrap();
        let me = view.iter().find(|n| n.id == l.successor_id).unwrap();
        assert!(
            me.is_primary() && me.slot_count() > 0,
            "{} is not shard {}'s primary after the drain: {me:?}",
            l.successor,
            l.shard
        );
        assert_eq!(
            manual_failovers_started(&access, &l.successor_ip),
            l.started_before + 1,
            "{} took over shard {} by a manual failover, asked for by the stopping {}",
            l.successor,
            l.shard,
            l.primary
        );
    }

    env.apis.set_schedulable(true).await.unwrap();
    env.ready(name, FORM).await;
    env.healthy(name, &access, 3, 1).await;
    let status = env.ready(name, SETTLE).await;
    assert_eq!(
        status.shards[staying].primary, staying_primary,
        "shard {staying} had no primary on {node} and kept it"
    );
    for l in &leaving {
        env.rejoined_as_replica(&access, &l.primary, &l.primary_id, &l.successor_id)
            .await;
    }
    writer.progressed(200, SETTLE).await.unwrap();
    env.nothing_lost(name, "through the drain", writer, &access)
        .await;
    env.finish().await;
}
