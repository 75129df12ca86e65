//! Scenario: each primary's pod evicted in turn hands its shard over before it stops, and
//! the shard's disruption budget keeps its replica from being evicted meanwhile.

use crd_types::names::statefulset_pod_name;
use e2e_kit::cluster_testing::{Access, AckedWriter, valkey_cluster};
use e2e_kit::platform::{enforce_restricted, runs_as_assigned, with_assigned_identity};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;
use kube::api::{EvictParams, ListParams};
use local_cluster::images::BUSYBOX_IMAGE;

use crate::env::{Env, FAILOVER, FORM, SETTLE};

/// Manual failovers a member has started (`CLUSTER FAILOVER` without FORCE sends MFSTART
/// to its primary); CLUSTER INFO lists the counter once it is non-zero.
pub(crate) fn manual_failovers_started(access: &Access, ip: &str) -> u64 {
    access
        .cli(ip, &["CLUSTER", "INFO"])
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("cluster_stats_messages_mfstart_sent:")
        })
        .map_or(0, |n| n.parse().unwrap())
}

/// Each shard has a PodDisruptionBudget. With a WAIT-acked writer running, each shard's
/// primary pod is evicted in turn (as `kubectl drain` does), and the budget then refuses to
/// evict its replica until it is back. The evicted primary's preStop hook hands the slots
/// to the replica with a coordinated `CLUSTER FAILOVER` before the server gets SIGTERM: the replica is
/// primary by a manual failover (not an election after node-timeout), the other shards keep
/// their primaries (no failover storm), the old member's new pod rejoins as a replica of
/// its successor with its identity, and no acknowledged write is lost. On the busybox image
/// (docs/images.md): the start, probe and hook scripts run under busybox sh and applets; and
/// under a platform-assigned UID and fsGroup in a restricted namespace (as on OpenShift),
/// so the volumes, written and read back across the restarts, are the fsGroup's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_deleted_primary_hands_over_before_it_stops() {
    let env = Env::start().await;
    let ns = env.namespace.as_str();
    let name = "depart";
    enforce_restricted(&env.client, ns).await.unwrap();
    let mut cluster = valkey_cluster(name, 3, 1, true);
    cluster.spec.common.template.image = BUSYBOX_IMAGE.into();
    with_assigned_identity(&mut cluster.spec.common.template);
    let access = env.create_ready(cluster).await;
    let budgets: kube::Api<PodDisruptionBudget> = kube::Api::namespaced(env.client.clone(), ns);
    let mut names: Vec<String> = budgets
        .list(&ListParams::default().labels(&format!("valkey.rs/cluster={name}")))
        .await
        .unwrap()
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["depart-shard-0", "depart-shard-1", "depart-shard-2"]
    );
    // Evictions through a client that shows the budget's 429 instead of retrying it.
    let evictions: kube::Api<Pod> =
        kube::Api::namespaced(env.cluster.client_without_retry().await.unwrap(), ns);
    let writer = AckedWriter::start(&access).await.unwrap();
    writer.progressed(200, SETTLE).await.unwrap();

    for shard in 0..3 {
        let status = env.ready(name, SETTLE).await;
        let primaries: Vec<Option<String>> =
            status.shards.iter().map(|s| s.primary.clone()).collect();
        let old_primary = primaries[shard].clone().unwrap();
        let successor = status.shards[shard]
            .members
            .iter()
            .find(|m| m.name != old_primary)
            .unwrap()
            .name
            .clone();
        let successor_ip = access.ip(&successor).unwrap().to_string();
        let successor_id = access.node_id(&successor_ip).unwrap();
        let old_ip = access.ip(&old_primary).unwrap().to_string();
        let old_id = access.node_id(&old_ip).unwrap();
        let started_before = manual_failovers_started(&access, &successor_ip);
        let pod = statefulset_pod_name(&old_primary);
        let old_uid = env.apis.pods.get(&pod).await.unwrap().uid().unwrap();

        // As `kubectl drain` does: evict, and ask again while the budget refuses.
        env.wait(
            &format!("the eviction of {pod} to be admitted"),
            SETTLE,
            || async {
                Ok(
                    match env.apis.pods.evict(&pod, &EvictParams::default()).await {
                        Ok(_) => Ok(()),
                        Err(kube::Error::Api(e)) if e.code == 429 => Err(e.message),
                        Err(e) => return Err(e.into()),
                    },
                )
            },
        )
        .await;
        // Until the evicted pod is back and Ready, its shard's budget refuses the other.
        let refused = evictions
            .evict(&statefulset_pod_name(&successor), &EvictParams::default())
            .await;
        assert!(
            matches!(&refused, Err(kube::Error::Api(e)) if e.code == 429),
            "evicting {successor} with {old_primary} gone must wait: {refused:?}"
        );
        env.wait(
            &format!("{successor} to be shard {shard}'s primary in Valkey"),
            FAILOVER,
            || async {
                let view = access.nodes_seen_by(&successor_ip)?;
                let me = view.iter().find(|n| n.id == successor_id);
                Ok(match me {
                    Some(n) if n.is_primary() && n.slot_count() > 0 => Ok(()),
                    other => Err(format!("{successor} says {other:?}")),
                })
            },
        )
        .await;
        assert_eq!(
            manual_failovers_started(&access, &successor_ip),
            started_before + 1,
            "{successor} took over by a manual failover, asked for by the stopping primary"
        );

        // The replacement pod comes back as the successor's replica, with its identity.
        env.wait(
            &format!("{old_primary}'s pod to be replaced"),
            FORM,
            || async {
                let now = env.apis.pods.get_opt(&pod).await?;
                Ok(match now.and_then(|p| p.uid()) {
                    Some(uid) if uid != old_uid => Ok(()),
                    other => Err(format!("pod uid {other:?}")),
                })
            },
        )
        .await;
        env.ready(name, FORM).await;
        env.healthy(name, &access, 3, 1).await;
        // Read after `healthy`, which waits for the status to match Valkey: Ready may be
        // the status from before the hand-over, written before topology-controller looked.
        let status = env.ready(name, SETTLE).await;
        assert_eq!(access.node_id(&old_ip).unwrap(), old_id);
        env.rejoined_as_replica(&access, &old_primary, &old_id, &successor_id)
            .await;
        let info = access.cli(&old_ip, &["INFO", "server"]);
        runs_as_assigned(&info).unwrap_or_else(|e| panic!("{old_primary}: {e:#}"));
        let mut expected = primaries.clone();
        expected[shard] = Some(successor.clone());
        let now: Vec<Option<String>> = status.shards.iter().map(|s| s.primary.clone()).collect();
        assert_eq!(now, expected, "only shard {shard} changed its primary");
        writer.progressed(200, SETTLE).await.unwrap();
    }

    env.nothing_lost(name, "through the evictions", writer, &access)
        .await;
    env.finish().await;
}
