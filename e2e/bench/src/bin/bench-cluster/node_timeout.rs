//! `bench-cluster node-timeout [MS ...]`: what a `cluster-node-timeout` buys and what it
//! risks, for each value (default 15000 5000 4000 3000), on a 3 x 1 cluster set to it:
//! - a primary frozen (SIGSTOP) under a writer that records every write a replica
//!   acknowledged, [`ROUNDS`] times: the time to the first write its replica accepts, the
//!   writer's longest refusal on that shard, acknowledged writes lost;
//! - load that is no fault, at once: the writer, a 3 -> 4 scale-out moving a quarter of
//!   `BENCH_KEYS` keys, shard 0's primary stopped for 1 s of every 2 for a minute, and shard
//!   1's primary in a 30 s BGSAVE (its child slowed by `rdb-key-save-delay`). Counted:
//!   failover elections started (CLUSTER INFO's `failover_auth_request_sent` over every
//!   member) and the looks at which any member flagged another `fail?` or `fail`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use e2e_kit::cluster_testing::{Access, AckedWriter, ClusterApis};
use e2e_kit::testing::{signal, valkey_server_pid};

use crate::clusters::{
    apply_cluster_with, clear, cluster_access, cluster_status, load_keys, wait, wait_cluster_ready,
};
use crate::faults::failover;
use crate::migration::operator_scale_out;
use crate::report::secs;
use crate::{LIMIT, POLL};

/// Freezes per value.
const ROUNDS: usize = 3;
/// The slow-but-alive primary: stopped this long, then running this long, for [`STORM`].
const STOPPED: Duration = Duration::from_secs(1);
const STORM: Duration = Duration::from_secs(60);
/// How long the slowed BGSAVE should run.
const SAVE: Duration = Duration::from_secs(30);

/// The default values measured, in ms.
const DEFAULT_TIMEOUTS: [u64; 4] = [15_000, 5_000, 4_000, 3_000];

/// `node-timeout [MS ...]` from the arguments: the values to measure, `None` for another mode.
pub(crate) fn requested() -> Result<Option<Vec<u64>>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.split_first() {
        Some((mode, values)) if mode == "node-timeout" => {
            if values.is_empty() {
                return Ok(Some(DEFAULT_TIMEOUTS.to_vec()));
            }
            let values = values
                .iter()
                .map(|v| v.parse::<u64>().context("MS is a positive integer"))
                .collect::<Result<Vec<_>>>()?;
            Ok(Some(values))
        }
        _ => Ok(None),
    }
}

/// One value's figures.
struct Figures {
    timeout_ms: u64,
    /// Per freeze: to the first write the replica accepted, the writer's longest refusal on
    /// the shard, acknowledged writes lost.
    freezes: Vec<(Duration, Duration, usize)>,
    storm: Storm,
}

/// The load that is no fault.
struct Storm {
    elections: u64,
    flagged_looks: usize,
    looks: usize,
    save: Duration,
    migration: Duration,
    stops: usize,
    lost: usize,
    acked: usize,
}

/// Measures every value in `timeouts` and prints the table.
pub(crate) async fn run(apis: &ClusterApis, timeouts: &[u64], keys: usize) -> Result<()> {
    let mut all = Vec::new();
    for &ms in timeouts {
        let name = format!("nt{ms}");
        eprintln!("bench-cluster: cluster-node-timeout {ms}: {name}");
        let figures = one_value(apis, &name, ms, keys).await;
        clear(apis, &[&name], &[]).await;
        all.push(figures?);
    }
    print(&all, keys);
    Ok(())
}

async fn one_value(apis: &ClusterApis, name: &str, ms: u64, keys: usize) -> Result<Figures> {
    let timeout = ms.to_string();
    let config = [("cluster-node-timeout", timeout.as_str())];
    apply_cluster_with(apis, name, 3, 1, None, &[], &config).await?;
    let access = cluster_access(apis, name).await?;
    let mut freezes = Vec::new();
    for round in 1..=ROUNDS {
        wait_cluster_ready(apis, name).await?;
        let writer = AckedWriter::start(&access).await?;
        writer.progressed(100, LIMIT).await?;
        let frozen = failover(apis, &access, name).await?;
        wait_cluster_ready(apis, name).await?;
        writer.progressed(100, LIMIT).await?;
        let report = writer.stop().await?;
        let refusal = report
            .streams
            .iter()
            .map(|s| s.longest_refusal)
            .max()
            .unwrap_or_default();
        let lost = report.lost(&access).await?.len();
        eprintln!(
            "bench-cluster: {name} freeze {round}: first write after {:.1} s, writer refused {:.1} s, {lost} lost",
            secs(frozen.write_accepted),
            secs(refusal)
        );
        freezes.push((frozen.write_accepted, refusal, lost));
    }
    wait_cluster_ready(apis, name).await?;
    load_keys(&access, name, keys).await?;
    let storm = storm(apis, &access, name).await?;
    Ok(Figures {
        timeout_ms: ms,
        freezes,
        storm,
    })
}

/// The load that is no fault (see the module's header).
async fn storm(apis: &ClusterApis, access: &Access, name: &str) -> Result<Storm> {
    let status = cluster_status(apis, name).await?;
    let primary_ip = |shard: usize| -> Result<String> {
        let member = status
            .shards
            .get(shard)
            .and_then(|s| s.primary.clone())
            .context("no primary in status")?;
        Ok(access.ip(&member).context("no address")?.to_string())
    };
    let (stopped_ip, saving_ip) = (primary_ip(0)?, primary_ip(1)?);
    let pid = valkey_server_pid(&pod_ip(apis, &stopped_ip, access).await?)?;
    let elections_before = access.elections_started();

    let writer = AckedWriter::start(access).await?;
    writer.progressed(100, LIMIT).await?;
    let done = Arc::new(AtomicBool::new(false));
    let flagged = Arc::new(AtomicUsize::new(0));
    let looks = Arc::new(AtomicUsize::new(0));
    let watcher = {
        let (access, done, flagged, looks) =
            (access.clone(), done.clone(), flagged.clone(), looks.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                let seen = access.members.iter().any(|m| {
                    access.nodes_seen_by(&m.ip).is_ok_and(|view| {
                        view.iter()
                            .any(|n| n.has_flag("fail?") || n.has_flag("fail"))
                    })
                });
                looks.fetch_add(1, Ordering::Relaxed);
                if seen {
                    flagged.fetch_add(1, Ordering::Relaxed);
                }
                std::thread::sleep(POLL);
            }
        })
    };
    let stopper = std::thread::spawn(move || -> Result<usize> {
        let started = Instant::now();
        let mut stops = 0;
        while started.elapsed() < STORM {
            signal(pid, "STOP")?;
            std::thread::sleep(STOPPED);
            signal(pid, "CONT")?;
            stops += 1;
            std::thread::sleep(STOPPED);
        }
        Ok(stops)
    });
    let save = slow_save(access, &saving_ip);
    let migration = operator_scale_out(apis, access, name);
    let (save, migration) = tokio::join!(save, migration);
    let stops = tokio::task::spawn_blocking(move || stopper.join())
        .await?
        .map_err(|_| anyhow::anyhow!("the stopper panicked"))??;
    // The primary runs again: Valkey may still act on what it saw.
    tokio::time::sleep(Duration::from_secs(5)).await;
    done.store(true, Ordering::Relaxed);
    tokio::task::spawn_blocking(move || watcher.join())
        .await?
        .map_err(|_| anyhow::anyhow!("the watcher panicked"))?;
    wait_cluster_ready(apis, name).await?;
    writer.progressed(100, LIMIT).await?;
    let report = writer.stop().await?;
    Ok(Storm {
        elections: access.elections_started().saturating_sub(elections_before),
        flagged_looks: flagged.load(Ordering::Relaxed),
        looks: looks.load(Ordering::Relaxed),
        save: save?,
        migration: migration?.total,
        stops,
        lost: report.lost(access).await?.len(),
        acked: report.acked(),
    })
}

/// The pod IP of the member announcing `ip`.
async fn pod_ip(apis: &ClusterApis, ip: &str, access: &Access) -> Result<String> {
    let member = access.member_at(ip).context("no member at the address")?;
    let pod = apis
        .pods
        .get(&crd_types::names::statefulset_pod_name(&member.name))
        .await?;
    pod.status.and_then(|s| s.pod_ip).context("no pod IP")
}

/// A BGSAVE on `ip` slowed to last about [`SAVE`]; its duration.
async fn slow_save(access: &Access, ip: &str) -> Result<Duration> {
    let started = Instant::now();
    access.start_slow_save(ip, SAVE)?;
    wait("the slowed BGSAVE", LIMIT, || async {
        let busy = access.saving(ip);
        Ok(if busy || started.elapsed() < Duration::from_secs(1) {
            Err("saving".to_string())
        } else {
            Ok(())
        })
    })
    .await?;
    let took = started.elapsed();
    access.end_slow_save(ip)?;
    Ok(took)
}

fn print(all: &[Figures], keys: usize) {
    println!(
        "\n| cluster-node-timeout | primary frozen: first write its replica accepted ({ROUNDS} freezes) | writer's longest refusal | acknowledged lost |"
    );
    println!("|---|---|---|---|");
    for f in all {
        let list = |pick: &dyn Fn(&(Duration, Duration, usize)) -> Duration| {
            f.freezes
                .iter()
                .map(|x| format!("{:.1}", secs(pick(x))))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let lost: usize = f.freezes.iter().map(|x| x.2).sum();
        println!(
            "| {} ms | {} s | {} s | {lost} |",
            f.timeout_ms,
            list(&|x| x.0),
            list(&|x| x.1)
        );
    }
    println!(
        "\n| cluster-node-timeout | load, no fault ({keys} keys; 3 -> 4 shards, shard 0's primary stopped 1 s of every 2 for {} s, a {} s BGSAVE on shard 1's) | elections started | looks with a member flagged fail? or fail | acknowledged writes, lost |",
        STORM.as_secs(),
        SAVE.as_secs()
    );
    println!("|---|---|---|---|---|");
    for f in all {
        let s = &f.storm;
        println!(
            "| {} ms | scale-out {:.1} s, BGSAVE {:.1} s, {} stops | {} | {} of {} | {}, {} |",
            f.timeout_ms,
            secs(s.migration),
            secs(s.save),
            s.stops,
            s.elections,
            s.flagged_looks,
            s.looks,
            s.acked,
            s.lost
        );
    }
}
