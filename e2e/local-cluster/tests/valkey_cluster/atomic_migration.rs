//! Scenario 11: on Valkey 9.1 slots move with atomic slot migration: 3 -> 4 -> 3 shards with
//! 100k keys, topology-controller killed (SIGKILL) while a job runs, no slot ever half open.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use e2e_kit::cluster_testing::{Access, DataSet, open_slots, valkey_cluster};
use local_cluster::controller_pods::Outage;
use serde_json::json;

use crate::env::{Env, RESHAPE};

/// The `name`, `operation` and `state` of each job `CLUSTER GETSLOTMIGRATIONS` lists on `ip`.
fn jobs(access: &Access, ip: &str) -> Vec<(String, String, String)> {
    let text = access.admin_cli(ip, &["CLUSTER", "GETSLOTMIGRATIONS"]);
    // valkey-cli prints each job's fields and values one per line.
    let mut out = Vec::new();
    let mut fields: Vec<&str> = Vec::new();
    for line in text.lines() {
        fields.push(line.trim());
        if fields.len() >= 2 && fields[fields.len() - 2] == "remaining_repl_size" {
            let get = |k: &str| {
                fields
                    .iter()
                    .position(|f| *f == k)
                    .and_then(|i| fields.get(i + 1))
                    .map(|v| v.to_string())
                    .unwrap_or_default()
            };
            out.push((get("name"), get("operation"), get("state")));
            fields.clear();
        }
    }
    out
}

/// Whether a job is still running.
fn in_flight(state: &str) -> bool {
    !matches!(state, "success" | "failed" | "cancelled")
}

/// Every member's view has no slot in an importing or migrating state.
fn no_open_slot(access: &Access, seen: &RefCell<BTreeSet<String>>) {
    if let Ok(views) = access.views() {
        seen.borrow_mut().extend(open_slots(&views));
    }
}

/// Scenario 11: a 3x1 cluster on valkey/valkey:9.1 with 100k keys scales to 4 shards; as soon
/// as a job is seen in flight, topology-controller is killed: the job finishes without it
/// (Valkey runs it), and the restarted controller completes the scale-out. Then back to 3
/// shards. Throughout, no member ever shows a slot importing or migrating (the classic
/// path's markers, behind ASK redirects); every job ends in `success`; every key reads back
/// and `--cluster check` passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn atomic_slot_migration_survives_a_killed_controller() {
    let env = Env::start_own().await;
    let name = "atomic";
    let mut cluster = valkey_cluster(name, 3, 1, false);
    cluster.spec.common.template.image = "valkey/valkey:9.1".into();
    let access = env.create_ready(cluster).await;
    let data = DataSet::new("key", 100_000);
    let took = data.load(&access).await.unwrap();
    eprintln!("{name}: loaded {} keys in {took:?}", data.count);
    let originals = access.clone();
    let markers = RefCell::new(BTreeSet::new());
    // Slow each job's snapshot (200 us a key, Valkey's own test knob) so one is surely seen
    // in flight when the controller is killed.
    for m in &originals.members {
        assert_eq!(
            originals.admin_cli(&m.ip, &["CONFIG", "SET", "rdb-key-save-delay", "200"]),
            "OK"
        );
    }

    let started = Instant::now();
    env.apis
        .patch(name, json!({"spec": {"shards": 4}}))
        .await
        .unwrap();
    let deadline = Instant::now() + RESHAPE;
    let seen = loop {
        assert!(
            Instant::now() < deadline,
            "no job seen in flight within {RESHAPE:?}"
        );
        no_open_slot(&originals, &markers);
        let running: Vec<String> = originals
            .members
            .iter()
            .flat_map(|m| {
                jobs(&originals, &m.ip)
                    .into_iter()
                    .map(move |j| (m.name.clone(), j))
            })
            .filter(|(_, (_, _, state))| in_flight(state))
            .map(|(member, (_, op, state))| format!("{member} {op} {state}"))
            .collect();
        if !running.is_empty() {
            break running;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    env.stop_topology_controller(Outage::Crash).await;
    eprintln!("{name}: killed topology-controller on seeing {seen:?}");

    // Valkey finishes the jobs on its own.
    let deadline = Instant::now() + RESHAPE;
    loop {
        no_open_slot(&originals, &markers);
        let running = originals
            .members
            .iter()
            .flat_map(|m| jobs(&originals, &m.ip))
            .any(|(_, _, state)| in_flight(&state));
        if !running {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "jobs still running after {RESHAPE:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let all_jobs: Vec<(String, String, String)> = originals
        .members
        .iter()
        .flat_map(|m| jobs(&originals, &m.ip))
        .collect();
    eprintln!("{name}: jobs after the kill: {all_jobs:?}");
    assert!(!all_jobs.is_empty());
    for (job, _, state) in &all_jobs {
        assert_eq!(state, "success", "job {job}");
    }

    for m in &originals.members {
        assert_eq!(
            originals.admin_cli(&m.ip, &["CONFIG", "SET", "rdb-key-save-delay", "0"]),
            "OK"
        );
    }
    env.restart_topology_controller().await;
    env.ready(name, RESHAPE).await;
    eprintln!(
        "{name}: 3 -> 4 shards Ready {:?} after the patch",
        started.elapsed()
    );
    let access = env.exact_access(name, 4, 1).await;
    no_open_slot(&access, &markers);
    env.healthy(name, &access, 4, 1).await;
    data.verify(&access).await.unwrap();

    let started = Instant::now();
    env.apis
        .patch(name, json!({"spec": {"shards": 3}}))
        .await
        .unwrap();
    env.wait("the scale-in to finish", RESHAPE, || async {
        no_open_slot(&access, &markers);
        Ok(e2e_kit::cluster_testing::ready_status(&env.apis, name)
            .await?
            .map(drop))
    })
    .await;
    eprintln!("{name}: 4 -> 3 shards Ready after {:?}", started.elapsed());
    let access = env.exact_access(name, 3, 1).await;
    env.healthy(name, &access, 3, 1).await;
    data.verify(&access).await.unwrap();
    let exports: usize = access
        .members
        .iter()
        .flat_map(|m| jobs(&access, &m.ip))
        .filter(|(_, op, state)| op == "EXPORT" && state == "success")
        .count();
    assert!(exports > 0, "no atomic job on the members left");
    assert!(
        markers.borrow().is_empty(),
        "slots seen importing or migrating: {:?}",
        markers.borrow()
    );
    env.finish().await;
}
