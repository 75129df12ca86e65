//! Scenario 5: topology-controller killed mid slot migration finishes it on restart.

use std::time::{Duration, Instant};

use local_cluster::cluster_testing::{
    Access, DataSet, open_slots, slots_by_primary, valkey_cluster,
};
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
    let env = Env::start().await;
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
