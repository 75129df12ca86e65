//! Scenario: a primary cut off from its peers but alive is Valkey's business: the operator,
//! which still reaches it and sees its pod running, forces no failover.

use std::time::Instant;

use agent_services::ControlClient;
use crd_types::names::statefulset_pod_name;
use e2e_kit::cluster_testing::{AckedWriter, valkey_cluster};

use crate::env::{Env, FAILOVER, FORM, SETTLE};

/// With a writer running, shard 0's primary pod is cut from every other member's pod (the
/// node agent's service proxy tears down their connections, bus and replication, and
/// refuses new ones); the operator and the test still reach it. Its pod stays Ready and its
/// server answers, so Kubernetes shows nothing gone and topology-controller forces nothing:
/// the cut-off primary turns `cluster_state:fail` on its own (it lost the majority), the
/// other members flag it `fail` (node-timeout) before its replica is primary (Valkey's own
/// election), and the cluster has no Failover Event. Healed, the old primary rejoins as a
/// replica of its successor; no acknowledged write is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_primary_cut_off_but_alive_is_failed_over_by_valkey_not_the_operator() {
    let env = Env::start().await;
    let ns = env.namespace.as_str();
    let name = "cut";
    let access = env.create_ready(valkey_cluster(name, 3, 1, true)).await;
    let writer = AckedWriter::start(&access).await.unwrap();
    writer.progressed(200, SETTLE).await.unwrap();

    let (old, successor) = env.primary_and_successor(name, &access, 0).await;
    let (old_primary, old_ip, old_id) = (old.name, old.ip, old.id);
    let (successor, successor_ip, successor_id) = (successor.name, successor.ip, successor.id);
    let events_before = env.apis.topology_events(name).await.unwrap().len();

    let control = ControlClient::new(env.cluster.control_addr.expect("the node agent runs"));
    let cut_pod = format!("{ns}/{}", statefulset_pod_name(&old_primary));
    let others: Vec<String> = access
        .members
        .iter()
        .filter(|m| m.ip != old_ip)
        .map(|m| format!("{ns}/{}", statefulset_pod_name(&m.name)))
        .collect();
    for other in &others {
        control.cut(&cut_pod, other).await.unwrap();
    }
    let cut = Instant::now();

    // The minority side stops serving on its own once it misses the majority.
    env.wait(
        &format!("{old_primary} (cut off) to report cluster_state:fail"),
        FAILOVER,
        || async {
            let info = access.cli(&old_ip, &["CLUSTER", "INFO"]);
            Ok(if info.contains("cluster_state:fail") {
                Ok(())
            } else {
                Err(info.lines().next().unwrap_or_default().to_string())
            })
        },
    )
    .await;
    eprintln!(
        "{name}: {old_primary} reports cluster_state:fail {:?} after the cut",
        cut.elapsed()
    );
    env.wait(
        &format!("{successor} to take over shard 0 in Valkey"),
        FAILOVER,
        || async {
            let view = access.nodes_seen_by(&successor_ip)?;
            Ok(match view.iter().find(|n| n.id == successor_id) {
                Some(n) if n.is_primary() && n.slot_count() > 0 => Ok(()),
                other => Err(format!("{successor} says {other:?}")),
            })
        },
    )
    .await;
    eprintln!(
        "{name}: {successor} primary {:?} after the cut",
        cut.elapsed()
    );
    // Valkey's election needs the majority's `fail` flag first; a forced failover does not.
    for viewer in access.members.iter().filter(|m| m.ip != old_ip) {
        let view = access.nodes_seen_by(&viewer.ip).unwrap();
        let old = view.iter().find(|n| n.id == old_id).unwrap();
        assert!(
            old.has_flag("fail"),
            "{} does not flag the cut-off {old_primary} failed, yet {successor} is primary: {old:?}",
            viewer.name
        );
    }
    // The operator still reaches the old primary and its pod is Ready: it forced nothing.
    let pod = env
        .apis
        .pods
        .get(&statefulset_pod_name(&old_primary))
        .await
        .unwrap();
    let pod_ready = pod
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    assert!(
        pod_ready,
        "{old_primary}'s pod should stay Ready while cut off"
    );
    let no_failover_events = || async {
        let events = env.apis.topology_events(name).await.unwrap();
        let failovers: Vec<_> = events
            .iter()
            .filter(|e| e.reason.as_deref() == Some("Failover"))
            .map(|e| e.note.clone())
            .collect();
        assert!(
            failovers.is_empty(),
            "topology-controller started a failover of a primary that is only cut off: {failovers:?}"
        );
        events.len()
    };
    no_failover_events().await;

    for other in &others {
        control.heal(&cut_pod, other).await.unwrap();
    }
    env.wait_rejoined(&access, &old_primary, &old_id, &successor, &successor_id)
        .await;
    env.ready(name, FORM).await;
    env.healthy(name, &access, 3, 1).await;
    env.rejoined_as_replica(&access, &old_primary, &old_id, &successor_id)
        .await;
    let events_after = no_failover_events().await;
    eprintln!(
        "{name}: {} Events during the cut and after the heal, none a Failover",
        events_after.saturating_sub(events_before)
    );

    writer.progressed(200, SETTLE).await.unwrap();
    env.nothing_lost(name, "through the partition", writer, &access)
        .await;
    env.finish().await;
}
