//! `just bench-cluster`: the ValkeyCluster figures of docs/benchmarks.md, each next to its
//! floor on the same machine and the same kind of pods:
//! - apply to Ready for 3 shards x 1 replica, next to six hand-made cluster-mode ValkeyNodes
//!   formed by `valkey-cli --cluster create`;
//! - slot migration for a 3 -> 4 scale-out with `BENCH_KEYS` keys (default 100000), next to
//!   `valkey-cli --cluster add-node` + `rebalance --cluster-use-empty-masters`;
//! - failover: a primary's process frozen (SIGSTOP) until writes to its slots are accepted by
//!   the replica that took over;
//! - a primary leaving under a writer that records every write a replica acknowledged: its
//!   pod deleted (the preStop hook hands over), and its server killed at every start (a
//!   crash loop, failed over by force): the shard's longest time accepting no write and
//!   without a replica-acknowledged one;
//! - the same faults (frozen, pod gone, crash loop) once more with topology-controller set
//!   up as before the hand-overs ([`BEFORE`]: no forced failover, no pulse, a look every
//!   30 s) and the pod deleted with grace 0 (no preStop hook runs): before and after in one
//!   run, with the time from the freeze to Ready False;
//! - the same 3 -> 4 scale-out on valkey/valkey:9.1 three ways: the operator with atomic slot
//!   migration (its default there), the operator with the classic path (annotation
//!   `valkey.rs/slot-migration: classic`), and valkey-cli 9.1 on hand-made 9.1 nodes; each
//!   as keys moved over the whole time from the new primary Ready to balanced (the atomic
//!   path shows no importing slot to time from);
//! - an upgrade 8.0 -> 8.1 -> 9.1 of a 3 x 1 cluster by its image, with a writer that
//!   records every write a replica acknowledged: each step's time per member, the writer's
//!   longest pause per shard, and that no acknowledged write is lost.
//!
//! `bench-cluster node-timeout [MS ...]` measures cluster-node-timeout values instead
//! ([`node_timeout`]).
//!
//! `bench-cluster formation [ROUNDS]` runs only the formation pair, ROUNDS times (default
//! 3), each on a cleared cluster: the figure varies by a second or more from run to run.
//!
//! The operator's clusters require a password (the default user's, from the Secret their
//! members' `spec.auth` names; read through
//! [`access`](e2e_kit::cluster_testing::access)). The hand-made floor nodes have no
//! `spec.auth`, so they serve without one, as before.

mod clusters;
mod faults;
mod floor;
mod migration;
mod node_timeout;
mod report;
mod upgrade;

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use e2e_kit::cluster_testing::{Access, ClusterApis};
use e2e_kit::testing::cluster_with_local_controllers;
use local_cluster::images::VALKEY_VERSIONS;
use local_cluster::operator::RunningController;
use local_cluster::{LocalCluster, Options};

use clusters::{
    apply_cluster, clear, cluster_access, explain_failure, load_keys, restart_topology_controller,
    status_line, wait_cluster_ready,
};
use faults::{Departure, Freeze, Leaving, departure, failover};
use floor::{Cli, Floor, floor_cluster, floor_formation};
use migration::{
    CliMigration, Migration, Scaled, cli_scale_out, cli_scale_out_on, operator_scale_out,
    operator_scale_out_on,
};
use report::secs;
use upgrade::{Upgrade, upgrade};

const NS: &str = "default";
const TOPOLOGY_CONTROLLER: &str = "topology-controller";
/// topology-controller's environment for the "before" rows: no forced failover when
/// Kubernetes shows a primary's server gone, no pulse, an idle look every 30 s.
const BEFORE: [(&str, &str); 3] = [
    ("FORCED_FAILOVER", "false"),
    ("PULSE_MILLIS", "0"),
    ("IDLE_LOOK_SECONDS", "30"),
];
const POLL: Duration = Duration::from_millis(100);
const LIMIT: Duration = Duration::from_secs(600);
/// The Valkey versions of the upgrade and of the 9.1 scale-outs (`valkey/valkey:<version>`
/// in the local registry, [`VALKEY_VERSIONS`]).
const V80: &str = "8.0";
const V81: &str = "8.1";
const V91: &str = "9.1";
/// The ValkeyCluster annotation choosing how topology-controller moves slots
/// (`topology_controller::model::SLOT_MIGRATION_ANNOTATION`; this crate does not depend on
/// topology-controller).
const SLOT_MIGRATION: &str = "valkey.rs/slot-migration";

/// The local registry's image of a Valkey version.
fn image(version: &str) -> String {
    format!("valkey/valkey:{version}")
}

#[tokio::main]
async fn main() -> Result<()> {
    let keys: usize = std::env::var("BENCH_KEYS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let run = std::env::temp_dir().join(format!("bench-cluster-{}", std::process::id()));
    let (mut cluster, controllers) =
        cluster_with_local_controllers(Options::new(&run), &[]).await?;
    let topology = controllers
        .into_iter()
        .find(|c| c.process.binary == TOPOLOGY_CONTROLLER)
        .context("the overlay runs topology-controller")?;
    let client = cluster.client().await?;
    let apis = ClusterApis::new(&client, NS);

    if let Some(timeouts) = node_timeout::requested()? {
        let measured = node_timeout::run(&apis, &timeouts, keys).await;
        drop(cluster);
        measured?;
        let _ = std::fs::remove_dir_all(&run);
        return Ok(());
    }
    if let Some(rounds) = formation_only()? {
        formation_rounds(&apis, rounds).await?;
        drop(cluster);
        let _ = std::fs::remove_dir_all(&run);
        return Ok(());
    }

    let first = first_figures(&apis, keys, &run).await?;
    let faults = faults(&mut cluster, &apis, &topology).await?;
    let on_91 = figures_on_91(&cluster, &apis, keys, &run).await?;

    let keep_run = on_91.operator_failed() || faults.operator_failed();
    drop(cluster);
    if keep_run {
        eprintln!(
            "bench-cluster: a measurement of the operator failed: keeping {} (logs/topology-controller.log)",
            run.display()
        );
    } else {
        let _ = std::fs::remove_dir_all(&run);
    }

    report::print(keys, &first, &faults, &on_91);
    Ok(())
}

/// Formation and the 3 -> 4 migration on the default image, each next to its floor.
struct FirstFigures {
    operator_ready: Duration,
    floor: Floor,
    load: Duration,
    operator_migration: Migration,
    cli_migration: Result<CliMigration>,
}

/// The faults, with topology-controller as built and as before ([`BEFORE`]).
struct Faults {
    frozen: Freeze,
    deleted: Result<Departure>,
    crashed: Result<Departure>,
    failover_before: Result<Freeze>,
    killed_before: Result<Departure>,
    crashed_before: Result<Departure>,
}

impl Faults {
    fn operator_failed(&self) -> bool {
        self.deleted.is_err()
            || self.crashed.is_err()
            || self.failover_before.is_err()
            || self.killed_before.is_err()
            || self.crashed_before.is_err()
    }
}

/// The scale-outs and the upgrade on Valkey 9.1.
struct On91 {
    atomic: Result<Scaled>,
    classic: Result<Scaled>,
    cli: Result<Scaled>,
    upgraded: Result<Upgrade>,
}

impl On91 {
    fn operator_failed(&self) -> bool {
        self.atomic.is_err() || self.classic.is_err() || self.upgraded.is_err()
    }
}

/// Formation ("form" and "floor") and migration ("mig" and "flmig"); "form" stays for the
/// faults.
async fn first_figures(apis: &ClusterApis, keys: usize, run: &Path) -> Result<FirstFigures> {
    eprintln!("bench-cluster: formation");
    let operator_ready = apply_cluster(apis, "form", 3, 1).await?;
    let floor = floor_formation(&apis.nodes, "floor", 6, 1).await?;

    eprintln!("bench-cluster: migration by the operator");
    apply_cluster(apis, "mig", 3, 0).await?;
    let mig = cluster_access(apis, "mig").await?;
    let load = load_keys(&mig, "mig", keys).await?;
    let operator_migration = operator_scale_out(apis, &mig, "mig").await?;

    eprintln!("bench-cluster: migration by valkey-cli");
    let flmig = floor_cluster(&apis.nodes, "flmig", 3, 0, None, &Cli::Host).await?;
    load_keys(&flmig, "flmig", keys).await?;
    let cli_migration = cli_scale_out(&apis.nodes, &flmig, "flmig", run, None, &Cli::Host)
        .await
        .inspect_err(|e| eprintln!("bench-cluster: valkey-cli scale-out failed: {e:#}"));
    Ok(FirstFigures {
        operator_ready,
        floor,
        load,
        operator_migration,
        cli_migration,
    })
}

/// The faults on "form": with topology-controller as built, then once more as before
/// ([`BEFORE`]), after which it runs as built again.
async fn faults(
    cluster: &mut LocalCluster,
    apis: &ClusterApis,
    topology: &RunningController,
) -> Result<Faults> {
    eprintln!("bench-cluster: failover");
    let form = cluster_access(apis, "form").await?;
    let frozen = failover(apis, &form, "form").await?;

    eprintln!("bench-cluster: a primary's pod deleted, a primary's server crash-looping");
    let deleted = form_departure(cluster, apis, &form, 1, Leaving::PodDeleted).await;
    let crashed = form_departure(cluster, apis, &form, 2, Leaving::CrashLoop).await;

    eprintln!("bench-cluster: the same faults, topology-controller as before ({BEFORE:?})");
    let mut as_before = topology.clone();
    for (name, value) in BEFORE {
        as_before.process.env.retain(|(n, _)| n != name);
        as_before.process.env.push((name.into(), value.into()));
    }
    restart_topology_controller(cluster, &as_before).await?;
    wait_cluster_ready(apis, "form").await?;
    let failover_before = failover(apis, &form, "form").await;
    let killed_before = form_departure(cluster, apis, &form, 1, Leaving::PodKilled).await;
    let crashed_before = form_departure(cluster, apis, &form, 2, Leaving::CrashLoop).await;
    restart_topology_controller(cluster, topology).await?;
    Ok(Faults {
        frozen,
        deleted,
        crashed,
        failover_before,
        killed_before,
        crashed_before,
    })
}

/// [`departure`] on "form", a failure explained with topology-controller's log.
async fn form_departure(
    cluster: &LocalCluster,
    apis: &ClusterApis,
    form: &Access,
    shard: u32,
    how: Leaving,
) -> Result<Departure> {
    departure(apis, form, "form", shard, how)
        .await
        .inspect_err(|e| explain_failure(cluster, "form", e))
}

/// On a cleared cluster: the 3 -> 4 scale-outs on [`V91`] (the operator atomic and
/// classic, valkey-cli), then the upgrade [`V80`] -> [`V81`] -> [`V91`].
async fn figures_on_91(
    cluster: &LocalCluster,
    apis: &ClusterApis,
    keys: usize,
    run: &Path,
) -> Result<On91> {
    for version in [V80, V81, V91] {
        if !VALKEY_VERSIONS.contains(&version) {
            bail!("the local registry has no valkey/valkey:{version} ({VALKEY_VERSIONS:?})");
        }
    }
    eprintln!("bench-cluster: removing the clusters measured above");
    clear(apis, &["form", "mig"], &["floor", "flmig"]).await;

    eprintln!("bench-cluster: 3 -> 4 shards on {V91}, operator, atomic slot migration");
    let atomic = operator_scale_out_measured(cluster, apis, "atom", keys, &[]).await;

    eprintln!("bench-cluster: 3 -> 4 shards on {V91}, operator, classic slot migration");
    let classic =
        operator_scale_out_measured(cluster, apis, "clas", keys, &[(SLOT_MIGRATION, "classic")])
            .await;

    eprintln!("bench-cluster: 3 -> 4 shards on {V91}, valkey-cli {V91}");
    let cli = cli_scale_out_on(&apis.nodes, "fl9", keys, run)
        .await
        .inspect_err(|e| eprintln!("bench-cluster: valkey-cli {V91} scale-out failed: {e:#}"));
    clear(apis, &[], &["fl9"]).await;

    eprintln!("bench-cluster: upgrade {V80} -> {V81} -> {V91} under a writer");
    let upgraded = upgrade(apis, "up", keys)
        .await
        .inspect_err(|e| explain_failure(cluster, "up", e));
    if upgraded.is_err() {
        eprintln!(
            "bench-cluster: up status: {}",
            status_line(apis, "up").await
        );
    }
    Ok(On91 {
        atomic,
        classic,
        cli,
        upgraded,
    })
}

/// [`operator_scale_out_on`] of the cluster `name`, which is cleared after; a failure is
/// explained with the cluster's status.
async fn operator_scale_out_measured(
    cluster: &LocalCluster,
    apis: &ClusterApis,
    name: &str,
    keys: usize,
    annotations: &[(&str, &str)],
) -> Result<Scaled> {
    let scaled = operator_scale_out_on(apis, name, keys, annotations)
        .await
        .inspect_err(|e| explain_failure(cluster, name, e));
    if scaled.is_err() {
        eprintln!(
            "bench-cluster: {name} status: {}",
            status_line(apis, name).await
        );
    }
    clear(apis, &[name], &[]).await;
    scaled
}

/// `bench-cluster formation [ROUNDS]`: only the formation row, `ROUNDS` times (default 3),
/// each pair on a cleared cluster. `None` for the whole benchmark (no argument).
fn formation_only() -> Result<Option<usize>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [] => Ok(None),
        [mode] if mode == "formation" => Ok(Some(3)),
        [mode, rounds] if mode == "formation" => Ok(Some(
            rounds.parse().context("ROUNDS is a positive integer")?,
        )),
        _ => bail!("usage: bench-cluster [formation [ROUNDS] | node-timeout [MS ...]]"),
    }
}

/// The formation row `rounds` times: the operator's 3 x 1 apply to Ready, then the floor.
async fn formation_rounds(apis: &ClusterApis, rounds: usize) -> Result<()> {
    println!("| round | operator: 3 x 1 apply to Ready | floor: 6 nodes Ready + create | ratio |");
    println!("|---|---|---|---|");
    for round in 1..=rounds {
        let operator_ready = apply_cluster(apis, "form", 3, 1).await?;
        clear(apis, &["form"], &[]).await;
        let floor = floor_formation(&apis.nodes, "floor", 6, 1).await?;
        clear(apis, &[], &["floor"]).await;
        let floor_total = floor.nodes_ready + floor.formed;
        println!(
            "| {round} | {:.1} s | {:.1} s ({:.1} s + {:.1} s) | {:.2} |",
            secs(operator_ready),
            secs(floor_total),
            secs(floor.nodes_ready),
            secs(floor.formed),
            secs(operator_ready) / secs(floor_total)
        );
    }
    Ok(())
}
