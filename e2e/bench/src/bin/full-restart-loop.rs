//! `cargo run -p local-cluster --bin full-restart-loop -- [ITERATIONS [FAULT]]` (20, all):
//! issue 42's measurement. A ValkeyReplication of 3 data nodes and 3 sentinels, run by
//! controllers on this machine, goes through ITERATIONS full restarts under two writers
//! (see [`e2e_kit::replication_testing::full_restart`]). FAULT: `all` (every pod
//! deleted at once), `skew:MS` (one replica's pod MS before the rest), `freeze:MS` (one
//! replica frozen MS before every pod is deleted) or `behind` (one replica frozen until the
//! other acknowledged writes it lacks, then every pod deleted). One line per iteration;
//! exits non-zero if any acknowledged write was lost.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use e2e_kit::replication_testing::full_restart::{Fault, full_restart};
use e2e_kit::replication_testing::{ReplicationApis, poll_until, ready_status, valkey_replication};
use e2e_kit::testing::cluster_with_local_controllers;
use local_cluster::{LocalCluster, Options};

const NS: &str = "default";
const GROUP: &str = "restart";
const LIMIT: Duration = Duration::from_secs(300);
const POLL: Duration = Duration::from_millis(200);

fn fault(arg: Option<String>) -> Result<Fault> {
    let ms = |v: &str| -> Result<Duration> {
        Ok(Duration::from_millis(
            v.parse().context("MS must be a number")?,
        ))
    };
    Ok(match arg.as_deref() {
        None | Some("all") => Fault::AllAtOnce,
        Some("behind") => Fault::Behind,
        Some(a) => match a.split_once(':') {
            Some(("skew", v)) => Fault::Skewed(ms(v)?),
            Some(("freeze", v)) => Fault::Frozen(ms(v)?),
            _ => bail!("FAULT is all, skew:MS, freeze:MS or behind, not {a}"),
        },
    })
}

#[tokio::main]
async fn main() -> Result<()> {
    let iterations: usize = match std::env::args().nth(1) {
        Some(n) => n.parse().context("ITERATIONS must be a number")?,
        None => 20,
    };
    let fault = fault(std::env::args().nth(2))?;
    let run = std::env::temp_dir().join(format!("full-restart-loop-{}", std::process::id()));
    let (cluster, _controllers) = cluster_with_local_controllers(Options::new(&run), &[]).await?;
    let (acked, lost, losing) = restarts(&cluster, iterations, fault).await?;
    println!(
        "full-restart-loop: {iterations} full restarts ({fault:?}), {acked} acknowledged \
         writes, {lost} lost in {losing} restarts"
    );
    drop(cluster);
    if lost > 0 {
        bail!("{lost} acknowledged writes lost");
    }
    Ok(())
}

async fn restarts(
    cluster: &LocalCluster,
    iterations: usize,
    fault: Fault,
) -> Result<(usize, usize, usize)> {
    let client = cluster.client().await?;
    let apis = ReplicationApis::new(&client, NS);
    apis.create(&valkey_replication(GROUP, 3, 3, true)).await?;
    let ready = || async { ready_status(&apis, GROUP).await };
    poll_until(cluster, "the group to be Ready", LIMIT, POLL, ready).await?;
    let (mut acked, mut lost, mut losing) = (0, 0, 0);
    for i in 1..=iterations {
        let r = full_restart(cluster, &apis, GROUP, &i.to_string(), fault, LIMIT).await?;
        println!(
            "iteration {i}: {} acknowledged, {} lost, primary {} -> {} (singled out {:?}), \
             Ready {:?} after the deletes",
            r.acked,
            r.lost.len(),
            r.primary_before,
            r.primary_after,
            r.singled_out,
            r.ready_after
        );
        if !r.lost.is_empty() {
            eprintln!("iteration {i}: lost {:?}", r.lost);
        }
        acked += r.acked;
        lost += r.lost.len();
        losing += usize::from(!r.lost.is_empty());
    }
    Ok((acked, lost, losing))
}
