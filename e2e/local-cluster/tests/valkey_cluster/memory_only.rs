//! Scenario: a memory-only cluster's primaries come back empty, one by a crash (its
//! container restarts in the same pod, with its nodes.conf) and one by its pod deleted at
//! once (a new pod, nothing in /data), under a writer. Neither serves its old address empty:
//! each has its replica take over first and rejoins as a new node, a replica of it, and no
//! acknowledged write is lost. Without the start-up guard, Valkey's replica full-syncs from
//! the empty server within about a second and the shard's data is gone.

use crd_types::names::statefulset_pod_name;
use crd_types::template::{MemoryOnly, ScratchVolume};
use e2e_kit::cluster_testing::{Access, AckedWriter, valkey_cluster};
use e2e_kit::testing::{signal, valkey_server_pid};

use crate::env::{Env, FAILOVER, FORM, Member, SETTLE};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn primaries_back_empty_hand_their_shards_over_and_lose_no_write() {
    let env = Env::start().await;
    let name = "cache";
    let mut cluster = valkey_cluster(name, 3, 1, false);
    cluster.spec.common.template.memory_only = Some(MemoryOnly {
        volume: ScratchVolume::Memory,
    });
    let access = env.create_ready(cluster).await;
    for m in &access.members {
        assert_eq!(
            access.admin_cli(&m.ip, &["CONFIG", "GET", "appendonly"]),
            "appendonly\nno"
        );
        assert_eq!(
            access.admin_cli(&m.ip, &["CONFIG", "GET", "save"]),
            "save",
            "no RDB snapshots"
        );
        let pod = env
            .apis
            .pods
            .get(&statefulset_pod_name(&m.name))
            .await
            .unwrap();
        let volumes = pod.spec.unwrap().volumes.unwrap();
        let data = volumes.iter().find(|v| v.name == "data").unwrap();
        let medium = data.empty_dir.as_ref().and_then(|e| e.medium.as_deref());
        assert_eq!(medium, Some("Memory"), "{}", m.name);
    }
    let writer = AckedWriter::start(&access).await.unwrap();
    writer.progressed(200, SETTLE).await.unwrap();

    // Shard 0: its primary's server is killed and its container starts again at once.
    let (old, successor) = env.primary_and_successor(name, &access, 0).await;
    let pod_ip = pod_ip(&env, &old.name).await;
    signal(valkey_server_pid(&pod_ip).unwrap(), "KILL").unwrap();
    back_as_new_replica(&env, name, &access, &old, &successor).await;
    writer.progressed(200, SETTLE).await.unwrap();

    // Shard 1: its primary's pod is deleted with no grace period, so no preStop hook hands
    // over: the new pod starts with an empty /data.
    let (old, successor) = env.primary_and_successor(name, &access, 1).await;
    env.apis
        .kill_pod(&statefulset_pod_name(&old.name))
        .await
        .unwrap();
    back_as_new_replica(&env, name, &access, &old, &successor).await;
    writer.progressed(200, SETTLE).await.unwrap();

    env.nothing_lost(name, "through two primaries back empty", writer, &access)
        .await;
    env.finish().await;
}

async fn pod_ip(env: &Env, member: &str) -> String {
    let pod = env
        .apis
        .pods
        .get(&statefulset_pod_name(member))
        .await
        .unwrap();
    pod.status.and_then(|s| s.pod_ip).unwrap()
}

/// `successor` serves `old`'s shard, and `old` is back under a new node id as its replica,
/// in a Ready and healthy cluster.
async fn back_as_new_replica(
    env: &Env,
    name: &str,
    access: &Access,
    old: &Member,
    successor: &Member,
) {
    env.wait(
        &format!("{} to take over from {}", successor.name, old.name),
        FAILOVER,
        || async {
            let view = access.nodes_seen_by(&successor.ip)?;
            Ok(match view.iter().find(|n| n.id == successor.id) {
                Some(n) if n.is_primary() && n.slot_count() > 0 => Ok(()),
                other => Err(format!("{} says {other:?}", successor.name)),
            })
        },
    )
    .await;
    env.ready(name, FORM).await;
    env.healthy(name, access, 3, 1).await;
    let id = access.node_id(&old.ip).unwrap();
    assert_ne!(id, old.id, "{} came back as its old identity", old.name);
    env.rejoined_as_replica(access, &old.name, &id, &successor.id)
        .await;
}
