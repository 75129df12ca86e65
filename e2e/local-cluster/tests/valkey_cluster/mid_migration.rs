//! Scenario 5: topology-controller killed mid slot migration finishes it on restart: at a
//! moment seen from outside (a scale-out), and at the one command boundary issue 41 asks
//! for (a scale-in with replicas: after the target's `SETSLOT IMPORTING`, before the
//! source's `MIGRATING`).

use std::time::{Duration, Instant};

use e2e_kit::cluster_testing::ClusterNode;

use e2e_kit::cluster_testing::{Access, DataSet, open_slots, slots_by_primary, valkey_cluster};
use local_cluster::controller_pods::Outage;
use serde_json::json;

use crate::env::{Env, RESHAPE};

/// The value on the metric line `<series> <value>`.
fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// Whether the scale-out to 4 shards is unfinished, as the first three members see it: an
/// open slot, or not yet 4 primaries with 4096 slots each. Describes what it saw.
fn scale_out_state(access: &Access) -> anyhow::Result<(bool, String)> {
    let views = access.views()?;
    let open = open_slots(&views);
    let counts: Vec<u32> = views
        .values()
        .next()
        .map(|v| slots_by_primary(v).into_values().collect())
        .unwrap_or_default();
    let done = open.is_empty() && counts == [4096; 4];
    Ok((
        !done,
        format!("slots per primary {counts:?}, open slots {open:?}"),
    ))
}

/// Scenario 5: 3 shards, 50k keys, scale to 4; as soon as slots are seen moving,
/// the leading topology-controller's process is killed (SIGKILL) and its Deployment scaled
/// to zero: the cluster keeps serving every key meanwhile, and once scaled back up (its
/// new leader waits out the dead one's Lease) the controller finishes the move.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn operator_restart_mid_migration_completes() {
    let env = Env::start_own().await;
    let name = "move";
    let access = env.create_ready(valkey_cluster(name, 3, 0, false)).await;
    let data = DataSet::new("key", 50_000);
    data.load(&access).await.unwrap();
    let originals = access.clone();

    env.apis
        .patch(name, json!({"spec": {"shards": 4}}))
        .await
        .unwrap();
    let deadline = Instant::now() + RESHAPE;
    let seen = loop {
        assert!(
            Instant::now() < deadline,
            "no slot migration seen within {RESHAPE:?}"
        );
        let views = originals.views().unwrap_or_default();
        let open = open_slots(&views);
        let counts = views
            .values()
            .next()
            .map(|v| slots_by_primary(v))
            .unwrap_or_default();
        let moved = counts.len() == 4 && counts.values().any(|c| *c != 4096);
        if !open.is_empty() || moved {
            break format!("slots per primary {counts:?}, open slots {open:?}");
        }
        assert!(
            counts.len() < 4 || !open.is_empty(),
            "the scale-out finished before a migration was seen ({counts:?}); load more keys"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    env.stop_topology_controller(Outage::Crash).await;
    eprintln!("{name}: killed topology-controller on seeing {seen}");

    // Nothing moves without the controller, and every key is still served (following ASK
    // for a slot left half moved).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let access = env.access(name).await;
    let (unfinished, state) = scale_out_state(&access).unwrap();
    eprintln!("{name}: left behind: {state}");
    assert!(
        unfinished,
        "the scale-out was complete when the controller died: {state}"
    );
    data.verify(&access).await.unwrap();

    let led = env.restart_topology_controller().await;
    eprintln!(
        "{name}: the restarted topology-controller led (first reconcile) {led:?} after it was started"
    );
    let started = Instant::now();
    env.ready(name, RESHAPE).await;
    eprintln!("{name}: Ready {:?} after the restart", started.elapsed());
    let access = env.exact_access(name, 4, 0).await;
    env.healthy(name, &access, 4, 0).await;
    let (unfinished, state) = scale_out_state(&access).unwrap();
    assert!(!unfinished, "{state}");
    data.verify(&access).await.unwrap();

    let series =
        r#"valkey_operator_reconcile_duration_seconds_count{controller="topology-controller"}"#;
    let text = env
        .topology_controller()
        .metrics(&env.client)
        .await
        .unwrap();
    assert!(
        metric(&text, series).unwrap_or(0.0) >= 1.0,
        "the restarted controller finished no reconcile: {text}"
    );
    env.finish().await;
}

/// The members' own lines whose open slots name `source_id` as where they import from.
fn importing_from(access: &Access, source_id: &str) -> anyhow::Result<Vec<(String, ClusterNode)>> {
    let marker = format!("-<-{source_id}]");
    Ok(access
        .views()?
        .into_iter()
        .filter_map(|(member, view)| {
            let me = view.into_iter().find(ClusterNode::is_myself)?;
            me.open_slots
                .iter()
                .any(|s| s.ends_with(&marker))
                .then_some((member, me))
        })
        .collect())
}

/// Issue 41's crash point, on real pods: a 3x1 cluster with 20k keys scales in to 2 shards.
/// The leaving shard's primary (the source) pauses writes (`CLIENT PAUSE WRITE`), which holds
/// `SETSLOT MIGRATING` too: the controller opens slots on a target (`IMPORTING`, copied to
/// its replica) and then waits on the source. Its leader is killed there; the source is
/// unpaused (the dead connection's MIGRATING never runs). The restarted controller finishes
/// the scale-in: Ready, `--cluster check` clean, no slot open anywhere, every key read back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn operator_killed_between_importing_and_migrating_in_a_scale_in_converges() {
    let env = Env::start_own().await;
    let name = "shrink";
    let access = env.create_ready(valkey_cluster(name, 3, 1, false)).await;
    let data = DataSet::new("key", 20_000);
    data.load(&access).await.unwrap();
    let status = env.ready(name, RESHAPE).await;
    let source = status.shards[2].primary.clone().unwrap();
    let source_ip = access.ip(&source).unwrap().to_string();
    let source_id = access.node_id(&source_ip).unwrap();

    let paused = access.admin_cli(&source_ip, &["CLIENT", "PAUSE", "120000", "WRITE"]);
    assert_eq!(paused, "OK", "CLIENT PAUSE WRITE on {source}");
    env.apis
        .patch(name, json!({"spec": {"shards": 2}}))
        .await
        .unwrap();
    // A target primary and its replica import from the source, which migrates nothing.
    let opened = env
        .wait(
            &format!("a target and its replica to import from {source}"),
            RESHAPE,
            || async {
                let importing = importing_from(&access, &source_id)?;
                let primaries = importing.iter().filter(|(_, n)| n.is_primary()).count();
                let replicas = importing.iter().filter(|(_, n)| n.is_replica()).count();
                Ok(if primaries >= 1 && replicas >= 1 {
                    Ok(importing)
                } else {
                    Err(format!("importing: {importing:?}"))
                })
            },
        )
        .await;
    let source_line = access
        .nodes_seen_by(&source_ip)
        .unwrap()
        .into_iter()
        .find(ClusterNode::is_myself)
        .unwrap();
    assert!(
        source_line.open_slots.is_empty(),
        "{source} migrates although paused: {source_line:?}"
    );
    env.stop_topology_controller(Outage::Crash).await;
    let unpaused = access.admin_cli(&source_ip, &["CLIENT", "UNPAUSE"]);
    assert_eq!(unpaused, "OK", "CLIENT UNPAUSE on {source}");
    let shown: Vec<String> = opened
        .iter()
        .map(|(m, n)| format!("{m} imports {} slots", n.open_slots.len()))
        .collect();
    eprintln!("{name}: killed topology-controller; {shown:?}; nothing open on {source}");
    data.verify(&access).await.unwrap();

    env.restart_topology_controller().await;
    let started = Instant::now();
    env.ready(name, RESHAPE).await;
    eprintln!("{name}: Ready {:?} after the restart", started.elapsed());
    let access = env.exact_access(name, 2, 1).await;
    env.healthy(name, &access, 2, 1).await;
    let views = access.views().unwrap();
    assert!(open_slots(&views).is_empty(), "{:?}", open_slots(&views));
    data.verify(&access).await.unwrap();
    env.finish().await;
}
