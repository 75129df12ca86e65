//! Scenario: a memory-only group loses its primary's pod while its sentinels are frozen.

use std::time::Instant;

use agent_services::ControlClient;
use crd_types::names::{sentinel_member_name, statefulset_pod_name};
use crd_types::template::{MemoryOnly, ScratchVolume};
use e2e_kit::replication_testing::{GroupWriter, Route, valkey_replication};

use crate::env::{Env, FAILOVER, SETTLE};
use crate::failover::{failed_over, start_log};

/// With a writer through the read-write Service, the three sentinels are frozen (SIGSTOP)
/// and the primary's pod is deleted (grace 0). The new primary pod starts empty; no sentinel
/// answers for 15 s, and the last primary the operator saw is itself, so a group with a
/// dataset on disk would start it as primary. Memory-only, it would serve nothing, and its
/// replicas, still pointed at its address, would full-sync that nothing. It waits instead
/// while another data node holds keys; once the sentinels thaw they fail over to a replica,
/// and it follows. No acknowledged write is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_primary_back_empty_never_leads_the_replicas_holding_the_data() {
    let env = Env::start().await;
    let ns = env.namespace.as_str();
    let name = "memo";
    let mut group = valkey_replication(name, 3, 3, false);
    group.spec.common.template.memory_only = Some(MemoryOnly {
        volume: ScratchVolume::EmptyDir,
    });
    // Sentinel elects no replica whose link to the primary has been down for more than ten
    // times down-after-milliseconds before the primary's s_down. Here that gap is the pod's
    // 15 s wait for a sentinel answer, then the thawed sentinels' 30 s of tilt: about 50 s,
    // which is the default's limit exactly (seen: -failover-abort-no-good-slave, and no
    // failover ever after). 10 s leaves the gap half the limit.
    group.spec.sentinel.down_after_milliseconds = 10_000;
    let access = env.create_ready(group).await;
    for m in &access.data {
        let info = access.cli(&m.ip, &["INFO", "persistence"]);
        assert!(info.contains("aof_enabled:0"), "{}: {info}", m.name);
    }
    let old = env.ready(name, SETTLE).await.current_primary.unwrap();
    let service = access.service_ip.clone().unwrap();
    let writer = GroupWriter::start(&access, Route::Service(service), "svc");
    writer.progressed(200, SETTLE).await.unwrap();

    let control = ControlClient::new(env.cluster.control_addr.unwrap());
    let sentinels: Vec<String> = (0..3)
        .map(|j| {
            format!(
                "{ns}/{}",
                statefulset_pod_name(&sentinel_member_name(name, j))
            )
        })
        .collect();
    for pod in &sentinels {
        control.freeze(pod).await.unwrap();
    }
    env.apis
        .kill_pod(&statefulset_pod_name(&old))
        .await
        .unwrap();
    let killed = Instant::now();
    env.wait(
        &format!("{old}'s start script to refuse to lead"),
        FAILOVER,
        || async {
            // Until the StatefulSet recreates the pod, its log is an error: not yet.
            let log = start_log(&env, &old).await?;
            Ok(match log.contains("it never leads them") {
                true => Ok(()),
                false => Err(log.lines().last().unwrap_or_default().to_string()),
            })
        },
    )
    .await;
    eprintln!(
        "{name}: {old} refused to lead {:?} after the kill",
        killed.elapsed()
    );
    for pod in &sentinels {
        control.thaw(pod).await.unwrap();
    }
    let (_, access, said, log) = failed_over(&env, name, &old, "kill", killed).await;
    assert!(
        said.last()
            .is_some_and(|l| l.contains("starting as its replica")),
        "{log}"
    );
    assert!(!log.contains("starting as primary"), "{log}");
    writer.progressed(200, SETTLE).await.unwrap();
    crate::env::nothing_lost(name, [writer], &access).await;
    env.finish().await;
}
