//! `cargo run -p local-cluster --bin full-restart-loop -- [ITERATIONS [SKEW_MS [freeze]]]`
//! (20, 0):
//! issue 42's measurement, not a test (it can fail today; docs/full-restart-loss.md).
//! A ValkeyReplication of 3 data nodes and 3 sentinels runs under two writers (`SET` then
//! `WAIT 1 1000`; one Sentinel-aware, one through the read-write Service). Each iteration
//! deletes every pod: with SKEW_MS, one replica's pod first and the rest SKEW_MS later (a
//! `kubectl delete` of pods one by one, a drain of several nodes), so the other replica
//! acknowledges writes the first one never gets. It waits until every pod is replaced and
//! the group is Ready, stops the writers and reads every acknowledged write back. With
//! `freeze`, that replica is frozen (SIGSTOP) instead of deleted first, and deleted with the
//! rest: it cannot come back within the old primary's 5 s hand-over wait, as a pod slow to
//! restart on a real node would not (here a deleted pod is back in about a second). One line
//! per iteration: acknowledged, lost, the primary before and after. Exits non-zero if any
//! write was lost.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use crd_types::names::statefulset_pod_name;
use kube::ResourceExt;
use local_cluster::cluster_testing::poll_until;
use local_cluster::replication_testing::{
    GroupWriter, ReplicationApis, Route, access, ready_status, valkey_replication,
};
use local_cluster::testing::{cluster_with_local_controllers, signal, valkey_server_pid};
use local_cluster::{LocalCluster, Options};

const NS: &str = "default";
const GROUP: &str = "restart";
const LIMIT: Duration = Duration::from_secs(300);
const POLL: Duration = Duration::from_millis(200);

#[tokio::main]
async fn main() -> Result<()> {
    let iterations: usize = match std::env::args().nth(1) {
        Some(n) => n.parse().context("ITERATIONS must be a number")?,
        None => 20,
    };
    let skew = Duration::from_millis(match std::env::args().nth(2) {
        Some(ms) => ms.parse().context("SKEW_MS must be a number")?,
        None => 0,
    });
    let freeze = std::env::args().nth(3).is_some_and(|a| a == "freeze");
    let run = std::env::temp_dir().join(format!("full-restart-loop-{}", std::process::id()));
    let (cluster, _controllers) = cluster_with_local_controllers(Options::new(&run), &[]).await?;
    let client = cluster.client().await?;
    let apis = ReplicationApis::new(&client, NS);
    apis.create(&valkey_replication(GROUP, 3, 3, false)).await?;
    let ready = || async { ready_status(&apis, GROUP).await };
    poll_until(&cluster, "the group to be Ready", LIMIT, POLL, ready).await?;

    let (mut acked, mut lost, mut losing) = (0, 0, 0);
    for i in 1..=iterations {
        let (a, l, before, after) = iteration(&cluster, &apis, i, (skew, freeze)).await?;
        println!("iteration {i}: {a} acknowledged, {l} lost, primary {before} -> {after}");
        acked += a;
        lost += l;
        losing += usize::from(l > 0);
    }
    println!(
        "full-restart-loop: {iterations} full restarts (skew {skew:?}, freeze {freeze}), {acked} \
         acknowledged writes, {lost} lost in {losing} restarts"
    );
    drop(cluster);
    if lost > 0 {
        bail!("{lost} acknowledged writes lost");
    }
    Ok(())
}

/// One full restart under both writers: (acknowledged, lost, primary before, after).
async fn iteration(
    cluster: &LocalCluster,
    apis: &ReplicationApis,
    i: usize,
    (skew, freeze): (Duration, bool),
) -> Result<(usize, usize, String, String)> {
    let writing = access(apis, GROUP).await?;
    let before = apis.groups.get(GROUP).await?.status.unwrap_or_default();
    let before = before.current_primary.unwrap_or_default();
    let sentinel = writing
        .sentinel_service_ip
        .clone()
        .context("no Sentinel Service")?;
    let service = writing
        .service_ip
        .clone()
        .context("no read-write Service")?;
    let writers = [
        GroupWriter::start(&writing, Route::Sentinel(sentinel), &format!("s{i}")),
        GroupWriter::start(&writing, Route::Service(service), &format!("v{i}")),
    ];
    for writer in &writers {
        writer.progressed(50, LIMIT).await?;
    }
    let pods: Vec<String> = apis
        .members(GROUP)
        .await?
        .iter()
        .map(|n| statefulset_pod_name(&n.name_any()))
        .collect();
    // The first replica's pod goes first when skewed.
    let first = writing
        .data
        .iter()
        .find(|m| !before.is_empty() && m.name != before)
        .map(|m| statefulset_pod_name(&m.name))
        .filter(|_| !skew.is_zero());
    let deleted = Instant::now();
    if let Some(pod) = &first {
        if freeze {
            let ip = apis.pods.get(pod).await?.status.and_then(|s| s.pod_ip);
            signal(
                valkey_server_pid(&ip.context("the pod has no IP")?)?,
                "STOP",
            )?;
        } else {
            apis.pods.delete(pod, &Default::default()).await?;
        }
        tokio::time::sleep(skew).await;
    }
    for pod in pods.iter().filter(|p| freeze || Some(*p) != first.as_ref()) {
        apis.pods.delete(pod, &Default::default()).await?;
    }
    poll_until(cluster, "every pod to be replaced", LIMIT, POLL, || async {
        for pod in &pods {
            let p = apis.pods.get_opt(pod).await?;
            if p.is_none_or(|p| p.metadata.deletion_timestamp.is_some()) {
                return Ok(Err(format!("{pod} not replaced yet")));
            }
        }
        Ok(Ok(()))
    })
    .await?;
    let status = poll_until(cluster, "the group to be Ready", LIMIT, POLL, || async {
        ready_status(apis, GROUP).await
    })
    .await?;
    for writer in &writers {
        writer.progressed(50, LIMIT).await?;
    }
    eprintln!(
        "iteration {i}: Ready {:?} after the delete",
        deleted.elapsed()
    );
    let after_restart = access(apis, GROUP).await?;
    let (mut acked, mut lost) = (0, 0);
    for writer in writers {
        let report = writer.stop().await?;
        acked += report.acked.len();
        let missing = report.lost(&after_restart).await?;
        if !missing.is_empty() {
            eprintln!("iteration {i}: {}: lost {missing:?}", report.summary());
        }
        lost += missing.len();
    }
    let after = status.current_primary.unwrap_or_default();
    Ok((acked, lost, before, after))
}
