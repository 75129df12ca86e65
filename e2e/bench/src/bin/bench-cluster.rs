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
//! `bench-cluster formation [ROUNDS]` runs only the formation pair, ROUNDS times (default
//! 3), each on a cleared cluster: the figure varies by a second or more from run to run.
//!
//! The operator's clusters require a password (the default user's, from the Secret their
//! members' `spec.auth` names; read through [`access`]). The hand-made floor nodes have no
//! `spec.auth`, so they serve without one, as before.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use crd_types::ValkeyNode;
use crd_types::node::{Mode, Role};
use crd_types::template::WorkloadType;
use e2e_kit::cluster_testing::{
    Access, AckedWriter, ClusterApis, ClusterNode, DataSet, MemberAddr, PORT, Progress, RollWatch,
    WriterReport, access, check_passed, describe_status, ready_status,
};
use e2e_kit::testing::{
    cluster_with_local_controllers, restart_controller, signal, stop_process, valkey_node,
    valkey_server_pid,
};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use local_cluster::images::VALKEY_VERSIONS;
use local_cluster::operator::RunningController;
use local_cluster::{LocalCluster, Options, run_script};
use serde_json::json;

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
/// How long `valkey-cli --cluster rebalance` may run before it is killed and the figure
/// reported as missing.
const CLI_LIMIT: Duration = Duration::from_secs(300);
/// Slots a primary of four holds once balanced.
const QUARTER: u32 = 4096;
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

    if let Some(rounds) = formation_only()? {
        formation_rounds(&apis, rounds).await?;
        drop(cluster);
        let _ = std::fs::remove_dir_all(&run);
        return Ok(());
    }

    eprintln!("bench-cluster: formation");
    let operator_ready = apply_cluster(&apis, "form", 3, 1).await?;
    let floor = floor_formation(&apis.nodes, "floor", 6, 1).await?;

    eprintln!("bench-cluster: migration by the operator");
    apply_cluster(&apis, "mig", 3, 0).await?;
    let mig = cluster_access(&apis, "mig").await?;
    let load = load_keys(&mig, "mig", keys).await?;
    let operator_migration = operator_scale_out(&apis, &mig, "mig").await?;

    eprintln!("bench-cluster: migration by valkey-cli");
    let flmig = floor_cluster(&apis.nodes, "flmig", 3, 0, None, &Cli::Host).await?;
    load_keys(&flmig, "flmig", keys).await?;
    let cli_migration = cli_scale_out(&apis.nodes, &flmig, "flmig", &run, None, &Cli::Host)
        .await
        .inspect_err(|e| eprintln!("bench-cluster: valkey-cli scale-out failed: {e:#}"));

    eprintln!("bench-cluster: failover");
    let form = cluster_access(&apis, "form").await?;
    let frozen = failover(&apis, &form, "form").await?;

    eprintln!("bench-cluster: a primary's pod deleted, a primary's server crash-looping");
    let deleted = departure(&apis, &form, "form", 1, Leaving::PodDeleted)
        .await
        .inspect_err(|e| explain_failure(&cluster, "form", e));
    let crashed = departure(&apis, &form, "form", 2, Leaving::CrashLoop)
        .await
        .inspect_err(|e| explain_failure(&cluster, "form", e));

    eprintln!("bench-cluster: the same faults, topology-controller as before ({BEFORE:?})");
    let mut as_before = topology.clone();
    for (name, value) in BEFORE {
        as_before.process.env.retain(|(n, _)| n != name);
        as_before.process.env.push((name.into(), value.into()));
    }
    restart_topology_controller(&mut cluster, &as_before).await?;
    wait_cluster_ready(&apis, "form").await?;
    let failover_before = failover(&apis, &form, "form").await;
    let killed_before = departure(&apis, &form, "form", 1, Leaving::PodKilled)
        .await
        .inspect_err(|e| explain_failure(&cluster, "form", e));
    let crashed_before = departure(&apis, &form, "form", 2, Leaving::CrashLoop)
        .await
        .inspect_err(|e| explain_failure(&cluster, "form", e));
    restart_topology_controller(&mut cluster, &topology).await?;

    for version in [V80, V81, V91] {
        if !VALKEY_VERSIONS.contains(&version) {
            bail!("the local registry has no valkey/valkey:{version} ({VALKEY_VERSIONS:?})");
        }
    }
    eprintln!("bench-cluster: removing the clusters measured above");
    clear(&apis, &["form", "mig"], &["floor", "flmig"]).await;

    eprintln!("bench-cluster: 3 -> 4 shards on {V91}, operator, atomic slot migration");
    let atomic = operator_scale_out_on(&apis, "atom", keys, &[])
        .await
        .inspect_err(|e| explain_failure(&cluster, "atom", e));
    if atomic.is_err() {
        eprintln!(
            "bench-cluster: atom status: {}",
            status_line(&apis, "atom").await
        );
    }
    clear(&apis, &["atom"], &[]).await;

    eprintln!("bench-cluster: 3 -> 4 shards on {V91}, operator, classic slot migration");
    let classic = operator_scale_out_on(&apis, "clas", keys, &[(SLOT_MIGRATION, "classic")])
        .await
        .inspect_err(|e| explain_failure(&cluster, "clas", e));
    if classic.is_err() {
        eprintln!(
            "bench-cluster: clas status: {}",
            status_line(&apis, "clas").await
        );
    }
    clear(&apis, &["clas"], &[]).await;

    eprintln!("bench-cluster: 3 -> 4 shards on {V91}, valkey-cli {V91}");
    let cli9 = cli_scale_out_on(&apis.nodes, "fl9", keys, &run)
        .await
        .inspect_err(|e| eprintln!("bench-cluster: valkey-cli {V91} scale-out failed: {e:#}"));
    clear(&apis, &[], &["fl9"]).await;

    eprintln!("bench-cluster: upgrade {V80} -> {V81} -> {V91} under a writer");
    let upgraded = upgrade(&apis, "up", keys)
        .await
        .inspect_err(|e| explain_failure(&cluster, "up", e));
    if upgraded.is_err() {
        eprintln!(
            "bench-cluster: up status: {}",
            status_line(&apis, "up").await
        );
    }

    let keep_run = atomic.is_err()
        || classic.is_err()
        || upgraded.is_err()
        || deleted.is_err()
        || crashed.is_err()
        || failover_before.is_err()
        || killed_before.is_err()
        || crashed_before.is_err();
    drop(cluster);
    if keep_run {
        eprintln!(
            "bench-cluster: a measurement of the operator failed: keeping {} (logs/topology-controller.log)",
            run.display()
        );
    } else {
        let _ = std::fs::remove_dir_all(&run);
    }

    println!("| measurement | operator | floor |");
    println!("|---|---|---|");
    println!(
        "| 3 x 1: apply to Ready | {:.1} s | {:.1} s (6 ValkeyNodes Ready {:.1} s + `valkey-cli --cluster create` to a consistent cluster {:.1} s) |",
        secs(operator_ready),
        secs(floor.nodes_ready + floor.formed),
        secs(floor.nodes_ready),
        secs(floor.formed)
    );
    println!(
        "| loading {keys} keys (fred, MSET per slot, 64 in flight) | {:.1} s | |",
        secs(load)
    );
    let (floor_total, floor_rate) = match &cli_migration {
        Ok(m) => (
            format!(
                "{:.1} s (`add-node` until every node knows the new one and it reports cluster_state:ok {:.1} s, then `rebalance` {:.1} s)",
                secs(m.migration.total),
                secs(m.joined),
                secs(m.rebalance)
            ),
            format!(
                "{} keys / {:.1} s = {:.0} keys/s",
                m.migration.moved_keys,
                secs(m.migration.moving),
                rate(m.migration.moved_keys, m.migration.moving)
            ),
        ),
        Err(e) => {
            let why = format!("not measured: {}", first_line(&format!("{e:#}")));
            (why.clone(), why)
        }
    };
    println!(
        "| 3 -> 4 shards: new primary Ready to 4096 slots, none open | {:.1} s | {floor_total} |",
        secs(operator_migration.total)
    );
    println!(
        "| 3 -> 4 shards: keys moved / time slots were moving | {} keys / {:.1} s = {:.0} keys/s | {floor_rate} |",
        operator_migration.moved_keys,
        secs(operator_migration.moving),
        rate(operator_migration.moved_keys, operator_migration.moving),
    );
    println!(
        "| failover: primary frozen to the first write accepted on its slots (cluster-node-timeout 15 s) | {:.1} s | |",
        secs(frozen.write_accepted)
    );
    print_departures(&[
        (
            "a primary's pod deleted (its preStop hook hands over)",
            &deleted,
        ),
        (
            "a primary's server killed at every start (crash loop; forced failover)",
            &crashed,
        ),
    ]);
    print_before_after(
        &Ok(frozen),
        &failover_before,
        &[
            ("a primary's pod deleted", &killed_before, &deleted),
            (
                "a primary's server killed at every start (crash loop)",
                &crashed_before,
                &crashed,
            ),
        ],
    );
    print_scale_out_on_9(keys, &atomic, &classic, &cli9);
    print_upgrade(keys, &upgraded);
    Ok(())
}

/// A departure's cell: the shard's longest refusal and pause, and what was lost.
fn departure_cell(measured: &Result<Departure>) -> String {
    match measured {
        Ok(d) => format!(
            "no write accepted for {:.1} s; none acknowledged by a replica for {:.1} s; {} acknowledged lost",
            secs(d.refusal),
            secs(d.pause),
            d.lost
        ),
        Err(e) => format!("not measured: {}", first_line(&format!("{e:#}"))),
    }
}

fn print_departures(rows: &[(&str, &Result<Departure>)]) {
    for (what, measured) in rows {
        println!(
            "| {what}, under a WAIT-acked writer | {} | |",
            departure_cell(measured)
        );
    }
}

/// The second table: each fault with topology-controller as before ([`BEFORE`]; the pod
/// deleted with grace 0, so no hook runs) and as it is.
fn print_before_after(
    frozen_after: &Result<Freeze>,
    frozen_before: &Result<Freeze>,
    departures: &[(&str, &Result<Departure>, &Result<Departure>)],
) {
    let frozen = |f: &Result<Freeze>| match f {
        Ok(f) => format!(
            "first write accepted after {:.1} s; Ready False after {}",
            secs(f.write_accepted),
            f.ready_false
                .map_or("(not before that write)".into(), |d| format!(
                    "{:.1} s",
                    secs(d)
                ))
        ),
        Err(e) => format!("not measured: {}", first_line(&format!("{e:#}"))),
    };
    println!();
    println!(
        "| fault, under a WAIT-acked writer | before: no hook (grace 0), no forced failover, no pulse, 30 s looks | after: as built |"
    );
    println!("|---|---|---|");
    println!(
        "| a primary frozen (SIGSTOP; Valkey's own failover either way) | {} | {} |",
        frozen(frozen_before),
        frozen(frozen_after)
    );
    for (what, before, after) in departures {
        println!(
            "| {what} | {} | {} |",
            departure_cell(before),
            departure_cell(after)
        );
    }
}

/// Rows of the 3 -> 4 scale-outs on Valkey 9.1: the operator atomic and classic, and
/// valkey-cli 9.1.
fn print_scale_out_on_9(
    keys: usize,
    atomic: &Result<Scaled>,
    classic: &Result<Scaled>,
    cli: &Result<Scaled>,
) {
    let all = [atomic, classic, cli];
    let cells = |f: &dyn Fn(&Scaled) -> String| -> String {
        all.iter()
            .map(|r| match r {
                Ok(s) => f(s),
                Err(e) => format!("not measured: {}", first_line(&format!("{e:#}"))),
            })
            .collect::<Vec<_>>()
            .join(" | ")
    };
    println!();
    println!(
        "| 3 x 0 -> 4 shards on {V91} with {keys} keys | operator, atomic slot migration (default) | operator, classic (`{SLOT_MIGRATION}: classic`) | valkey-cli {V91}: `add-node` + `rebalance --cluster-use-empty-masters` |"
    );
    println!("|---|---|---|---|");
    println!(
        "| new primary Ready to 4096 slots, none open | {} |",
        cells(&|s| match s.cli {
            None => format!("{:.1} s", secs(s.migration.total)),
            Some((joined, rebalance)) => format!(
                "{:.1} s (`add-node` until the new node can take slots {:.1} s, then `rebalance` {:.1} s)",
                secs(s.migration.total),
                secs(joined),
                secs(rebalance)
            ),
        })
    );
    println!(
        "| keys moved (DBSIZE of the new primary) / that total | {} |",
        cells(&|s| format!(
            "{} keys / {:.1} s = {:.0} keys/s",
            s.migration.moved_keys,
            secs(s.migration.total),
            rate(s.migration.moved_keys, s.migration.total)
        ))
    );
    println!(
        "| operator: patch of `spec.shards` to the new primary Ready (where the total starts) / slots it held at the first look after | {} |",
        cells(&|s| match &s.migration.operator {
            Some(o) => format!(
                "{:.1} s / {} slots",
                secs(o.ready_after_patch),
                o.held_at_start
            ),
            None => String::new(),
        })
    );
    println!(
        "| atomic slot migration jobs on the new primary (`CLUSTER GETSLOTMIGRATIONS`) | {} |",
        cells(&|s| s.jobs.clone())
    );
}

/// Rows of the 8.0 -> 8.1 -> 9.1 upgrade under the writer.
fn print_upgrade(keys: usize, upgraded: &Result<Upgrade>) {
    println!();
    println!(
        "| upgrade of 3 x 1 with {keys} keys, a writer (per shard: SET + WAIT 1) running throughout | operator |"
    );
    println!("|---|---|");
    let u = match upgraded {
        Ok(u) => u,
        Err(e) => {
            println!(
                "| {V80} -> {V81} -> {V91} | not measured: {} |",
                first_line(&format!("{e:#}"))
            );
            return;
        }
    };
    for step in &u.steps {
        let gates = if step.gates_on_primaries.is_empty() {
            String::new()
        } else {
            format!("; gates opened on primaries: {:?}", step.gates_on_primaries)
        };
        println!(
            "| {} -> {}: patch to Ready with every member on {} ({} members, at most {} rolling at once{gates}) | {:.1} s = {:.1} s per member |",
            step.from,
            step.to,
            step.to,
            step.members,
            step.max_rolling,
            secs(step.took),
            secs(step.took) / step.members.max(1) as f64
        );
    }
    let report = &u.report;
    let unacknowledged: u64 = report.streams.iter().map(|s| s.unacknowledged).sum();
    let failed: u64 = report.streams.iter().map(|s| s.failed).sum();
    println!(
        "| writer: acknowledged writes (and writes not acknowledged in 1 s, failed) | {} ({unacknowledged}, {failed}) |",
        report.acked()
    );
    let lost = match &u.lost {
        Ok(lost) if lost.is_empty() => "0".to_string(),
        Ok(lost) => format!(
            "**{} of {} acknowledged writes LOST**, e.g. {:?}",
            lost.len(),
            report.acked(),
            &lost[..lost.len().min(5)]
        ),
        Err(e) => format!("**not checked**: {}", first_line(&format!("{e:#}"))),
    };
    println!("| writer: acknowledged writes lost (read back after both steps) | {lost} |");
    let missing = match &u.missing {
        Ok(missing) if missing.is_empty() => "0".to_string(),
        Ok(missing) => format!(
            "**{} of {keys} MISSING**, e.g. {:?}",
            missing.len(),
            &missing[..missing.len().min(5)]
        ),
        Err(e) => format!("**not checked**: {}", first_line(&format!("{e:#}"))),
    };
    println!("| keys loaded on {V80} that do not read back on {V91} | {missing} |");
    let mut streams: Vec<_> = report.streams.iter().collect();
    streams.sort_by_key(|s| s.shard);
    for stream in streams {
        println!(
            "| writer: longest time without an acknowledged write, shard {} (slot {}) | {:.1} s |",
            stream.shard,
            stream.slot,
            secs(stream.longest_pause)
        );
    }
    if let Err(e) = &u.progressed {
        println!(
            "| writer: after both steps | **did not progress**: {} |",
            first_line(&format!("{e:#}"))
        );
    }
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn rate(keys: usize, d: Duration) -> f64 {
    keys as f64 / d.as_secs_f64().max(0.001)
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}

/// Polls `probe` every [`POLL`] until it yields a value; an `Err` from it ends the wait, a
/// "not yet" (`Ok(Err(why))`) is kept to say why on timeout.
async fn wait<T, F, Fut>(what: &str, limit: Duration, mut probe: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Progress<T>>>,
{
    let started = Instant::now();
    loop {
        let why = match probe().await? {
            Ok(value) => return Ok(value),
            Err(why) => why,
        };
        if started.elapsed() > limit {
            bail!("timed out after {limit:?} waiting for {what}; last: {why}");
        }
        tokio::time::sleep(POLL).await;
    }
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
        _ => bail!("usage: bench-cluster [formation [ROUNDS]]"),
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

/// Applies a ValkeyCluster and returns the time to phase Ready.
async fn apply_cluster(
    apis: &ClusterApis,
    name: &str,
    shards: i32,
    replicas: i32,
) -> Result<Duration> {
    apply_cluster_with(apis, name, shards, replicas, None, &[]).await
}

/// [`apply_cluster`] on `image` (the default image if `None`) with `annotations`.
async fn apply_cluster_with(
    apis: &ClusterApis,
    name: &str,
    shards: i32,
    replicas: i32,
    image: Option<&str>,
    annotations: &[(&str, &str)],
) -> Result<Duration> {
    let mut object = json!({
        "apiVersion": "valkey.rs/v1alpha1", "kind": "ValkeyCluster",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"shards": shards, "replicasPerShard": replicas,
                 "template": {"persistence": {"size": "1Gi", "reclaimPolicy": "Delete"}}}
    });
    if let Some(image) = image {
        object["spec"]["template"]["image"] = json!(image);
    }
    if !annotations.is_empty() {
        let annotations: serde_json::Map<String, serde_json::Value> = annotations
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
        object["metadata"]["annotations"] = serde_json::Value::Object(annotations);
    }
    let object = serde_json::from_value(object)?;
    let started = Instant::now();
    apis.create(&object).await?;
    wait(&format!("{name} to be Ready"), LIMIT, || async {
        let c = apis.clusters.get_status(name).await?;
        let phase = c.status.and_then(|s| s.phase);
        Ok(match phase {
            Some(crd_types::cluster::Phase::Ready) => Ok(()),
            other => Err(format!("phase {other:?}")),
        })
    })
    .await?;
    Ok(started.elapsed())
}

/// How to reach an operator-made cluster: its members and the default user's password,
/// once the Secret holding it exists (its members' `spec.auth` names it).
async fn cluster_access(apis: &ClusterApis, name: &str) -> Result<Access> {
    wait(
        &format!("the members and password Secret of {name}"),
        LIMIT,
        || async { Ok(access(apis, name).await.map_err(|e| format!("{e:#}"))) },
    )
    .await
}

/// ClusterIPs of hand-made nodes named `<prefix>-<i>`, in name order.
async fn member_ips(nodes: &Api<ValkeyNode>, prefix: &str) -> Result<Vec<String>> {
    let mut ips: BTreeMap<String, String> = BTreeMap::new();
    for n in nodes.list(&Default::default()).await? {
        let name = n.metadata.name.clone().unwrap_or_default();
        if !name.starts_with(&format!("{prefix}-")) {
            continue;
        }
        if let Some(ip) = n.status.and_then(|s| s.endpoint).and_then(|e| e.cluster_ip) {
            ips.insert(name, ip);
        }
    }
    Ok(ips.into_values().collect())
}

/// A hand-made cluster-mode ValkeyNode (no `spec.auth`: it serves without a password), on
/// `image` if given, else the template's default image.
fn hand_node(name: &str, image: Option<&str>) -> ValkeyNode {
    let mut node = valkey_node(name, WorkloadType::StatefulSet, true, None);
    node.spec.mode = Mode::Cluster;
    node.spec.template.config.0.clear();
    if let Some(image) = image {
        node.spec.template.image = image.to_string();
    }
    node
}

/// Hand-made nodes `<prefix>-<i>`; returns their IPs once all are Ready.
async fn hand_nodes(
    nodes: &Api<ValkeyNode>,
    prefix: &str,
    count: usize,
    image: Option<&str>,
) -> Result<Vec<String>> {
    for i in 0..count {
        let node = hand_node(&format!("{prefix}-{i}"), image);
        nodes.create(&PostParams::default(), &node).await?;
    }
    wait(&format!("{count} {prefix} nodes"), LIMIT, || async {
        let mut ready = 0;
        for i in 0..count {
            let n = nodes.get_status(&format!("{prefix}-{i}")).await?;
            if n.status.and_then(|s| s.workload).is_some_and(|w| w.ready) {
                ready += 1;
            }
        }
        Ok(if ready == count {
            Ok(())
        } else {
            Err(format!("{ready} of {count} Ready"))
        })
    })
    .await?;
    member_ips(nodes, prefix).await
}

/// One more hand-made node named exactly `name`; its IP once Ready.
async fn hand_node_ready(
    nodes: &Api<ValkeyNode>,
    name: &str,
    image: Option<&str>,
) -> Result<String> {
    nodes
        .create(&PostParams::default(), &hand_node(name, image))
        .await?;
    wait(&format!("{name} to be Ready"), LIMIT, || async {
        let status = nodes.get_status(name).await?.status.unwrap_or_default();
        let ready = status.workload.is_some_and(|w| w.ready);
        let ip = status.endpoint.and_then(|e| e.cluster_ip);
        Ok(ip.filter(|_| ready).ok_or_else(|| "not Ready".to_string()))
    })
    .await
}

/// [`Access`] to hand-made primaries (no password).
fn floor_access(prefix: &str, ips: &[String]) -> Access {
    Access {
        members: ips
            .iter()
            .enumerate()
            .map(|(i, ip)| MemberAddr {
                name: format!("{prefix}-{i}"),
                shard: i as u32,
                member: 0,
                ip: ip.clone(),
            })
            .collect(),
        password: None,
        operator_password: None,
        tls: None,
    }
}

struct Floor {
    nodes_ready: Duration,
    formed: Duration,
}

async fn floor_formation(
    nodes: &Api<ValkeyNode>,
    prefix: &str,
    count: usize,
    replicas: usize,
) -> Result<Floor> {
    let started = Instant::now();
    let ips = hand_nodes(nodes, prefix, count, None).await?;
    let nodes_ready = started.elapsed();
    let started = Instant::now();
    cli_create(&Cli::Host, &floor_access(prefix, &ips), replicas).await?;
    Ok(Floor {
        nodes_ready,
        formed: started.elapsed(),
    })
}

/// Hand-made primaries on `image` (the default image if `None`) formed into a cluster by
/// `cli`; its [`Access`].
async fn floor_cluster(
    nodes: &Api<ValkeyNode>,
    prefix: &str,
    count: usize,
    replicas: usize,
    image: Option<&str>,
    cli: &Cli,
) -> Result<Access> {
    let ips = hand_nodes(nodes, prefix, count, image).await?;
    let access = floor_access(prefix, &ips);
    cli_create(cli, &access, replicas).await?;
    Ok(access)
}

/// Which valkey-cli runs the `--cluster` commands of a floor.
enum Cli {
    /// The host's (8.0.1, `e2e/setup-valkey.sh`); `--cluster check` through
    /// [`Access::check`].
    Host,
    /// `/usr/bin/valkey-cli` of an image's root filesystem, run with `chroot <root>` (it
    /// needs that root's libc). The chroot keeps the host's network, so it reaches the
    /// members' ClusterIPs as the host's does.
    Chroot(PathBuf),
}

impl Cli {
    /// The command line that starts this valkey-cli.
    fn argv(&self) -> Vec<OsString> {
        match self {
            Cli::Host => vec!["valkey-cli".into()],
            Cli::Chroot(root) => vec!["chroot".into(), root.into(), "/usr/bin/valkey-cli".into()],
        }
    }

    /// `valkey-cli --cluster check` from a live member, passed as [`Access::check`] says
    /// (exit 0, every slot covered, neither an error nor a warning), bounded by
    /// `timeout 30` as [`Access::check`].
    fn check(&self, access: &Access) -> Progress<String> {
        if let Cli::Host = self {
            return access.check();
        }
        let ip = access.live_ip().ok_or("no member answers PING")?;
        let mut command = Command::new("timeout");
        command.arg("30").args(self.argv());
        if let Some(password) = &access.password {
            command.env("REDISCLI_AUTH", password);
        }
        command.args(["--cluster", "check", &addr(ip)]);
        let out = command
            .output()
            .map_err(|e| format!("valkey-cli did not run: {e}"))?;
        let stdout = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let text = if stdout.is_empty() {
            String::from_utf8_lossy(&out.stderr).trim().to_string()
        } else {
            stdout
        };
        check_passed(&text, out.status.success()).map(|()| text)
    }
}

/// The root filesystem of the `valkey/valkey:<version>` image, as `e2e/images/build.sh`
/// builds it: `e2e/images/valkey-rootfs.sh` prints its directory (cached, and warm once the
/// local cluster has started: it built the images from the same roots).
fn valkey_root(version: &str) -> Result<PathBuf> {
    let out = run_script("e2e/images/valkey-rootfs.sh", &[version], &[])?;
    let root = PathBuf::from(out.trim());
    if !root.join("usr/bin/valkey-cli").is_file() {
        bail!("no usr/bin/valkey-cli in {}", root.display());
    }
    Ok(root)
}

/// `valkey-cli --cluster <args>`, logged in with `access`'s password if it has one
/// (REDISCLI_AUTH, so it is not on the command line).
fn cluster_cli(cli: &Cli, access: &Access, args: &[&str]) -> Command {
    let argv = cli.argv();
    let mut command = Command::new(&argv[0]);
    command.args(&argv[1..]);
    if let Some(password) = &access.password {
        command.env("REDISCLI_AUTH", password);
    }
    command.arg("--cluster").args(args);
    command
}

/// Runs a `valkey-cli --cluster` command that must succeed (bounded by [`LIMIT`]).
fn cluster_cli_ok(cli: &Cli, access: &Access, args: &[&str]) -> Result<String> {
    let out = cluster_cli(cli, access, args).output()?;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    if !out.status.success() {
        bail!(
            "valkey-cli --cluster {} exited with {}: {text}{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(text)
}

fn addr(ip: &str) -> String {
    format!("{ip}:{PORT}")
}

/// `valkey-cli --cluster create`, then wait for `--cluster check` to pass (every node agrees,
/// every slot covered, nothing open).
async fn cli_create(cli: &Cli, access: &Access, replicas: usize) -> Result<()> {
    let addrs: Vec<String> = access.members.iter().map(|m| addr(&m.ip)).collect();
    let mut args = vec!["create"];
    args.extend(addrs.iter().map(String::as_str));
    let replicas = replicas.to_string();
    args.extend(["--cluster-replicas", &replicas, "--cluster-yes"]);
    cluster_cli_ok(cli, access, &args)?;
    wait("--cluster check to pass", LIMIT, || async {
        Ok(cli.check(access).map(|_| ()))
    })
    .await
}

/// Writes `count` keys `<prefix>:<i>` through a cluster client; retried while a cluster
/// just formed does not yet answer CLUSTER SLOTS consistently (gossip).
async fn load_keys(access: &Access, prefix: &str, count: usize) -> Result<Duration> {
    let data = DataSet::new(prefix, count);
    wait(&format!("{count} keys to load"), LIMIT, || async {
        Ok(data.load(access).await.map_err(|e| {
            eprintln!("bench-cluster: loading keys: {e:#}; retrying");
            format!("{e:#}")
        }))
    })
    .await
}

struct Migration {
    /// From the new primary answering until it holds its share and no slot is open.
    total: Duration,
    /// From the first slot seen opening to the last closed.
    moving: Duration,
    moved_keys: usize,
    /// The new primary's ClusterIP.
    new_ip: String,
    /// The operator's scale-outs: how `total` began.
    operator: Option<OperatorStart>,
}

/// The start of an operator's scale-out.
struct OperatorStart {
    /// From the patch of `spec.shards` to the new primary seen Ready (where `total` starts).
    ready_after_patch: Duration,
    /// Slots the new primary held, by its own view, at the first look after that: the
    /// operator starts moving on the same readiness (watching it rather than polling), so
    /// a small move may be over before the bench's first look.
    held_at_start: u32,
}

/// Slots owned by `id` and the open slots, as the node at `ip` sees them.
fn slots_seen_by(access: &Access, ip: &str, id: &str) -> Result<(u32, usize)> {
    let view = access.nodes_seen_by(ip)?;
    let owned = view
        .iter()
        .find(|n| n.id == id)
        .map_or(0, ClusterNode::slot_count);
    let open = view.iter().map(|n| n.open_slots.len()).sum();
    Ok((owned, open))
}

/// Whether a move to `new_ip` has started: the new primary imports or owns a slot.
fn moving(access: &Access, new_ip: &str, new_id: &str) -> Result<bool> {
    let (owned, open) = slots_seen_by(access, new_ip, new_id)?;
    Ok(owned > 0 || open > 0)
}

/// Whether the new primary holds [`QUARTER`] slots with nothing open, as both it and
/// `observer` see it.
fn balanced(access: &Access, observer: &str, new_ip: &str, new_id: &str) -> Result<Progress<()>> {
    for ip in [observer, new_ip] {
        let (owned, open) = slots_seen_by(access, ip, new_id)?;
        if owned < QUARTER || open > 0 {
            return Ok(Err(format!(
                "{ip} sees {owned} slots on the new primary, {open} open"
            )));
        }
    }
    Ok(Ok(()))
}

async fn operator_scale_out(apis: &ClusterApis, access: &Access, name: &str) -> Result<Migration> {
    let observer = access.members[0].ip.clone();
    let patched = Instant::now();
    apis.patch(name, json!({"spec": {"shards": 4}})).await?;
    let new_member = format!("{name}-3-0");
    let new_ip = wait("the new primary to answer", LIMIT, || async {
        let Some(n) = apis.nodes.get_opt(&new_member).await? else {
            return Ok(Err("not created".into()));
        };
        let status = n.status.unwrap_or_default();
        let ready = status.workload.is_some_and(|w| w.ready);
        let ip = status.endpoint.and_then(|e| e.cluster_ip);
        Ok(ip.filter(|_| ready).ok_or_else(|| "not Ready".to_string()))
    })
    .await?;
    let started = Instant::now();
    let ready_after_patch = started - patched;
    let new_id = access.node_id(&new_ip)?;
    let mut first_move: Option<Instant> = None;
    let mut held_at_start: Option<u32> = None;
    wait("the operator's migration", LIMIT, || {
        // What `moving` looks at, the first look's slot count kept.
        if first_move.is_none()
            && let Ok((owned, open)) = slots_seen_by(access, &new_ip, &new_id)
        {
            held_at_start.get_or_insert(owned);
            if owned > 0 || open > 0 {
                first_move = Some(Instant::now());
            }
        }
        let done = balanced(access, &observer, &new_ip, &new_id);
        async move { done }
    })
    .await?;
    let done = Instant::now();
    Ok(Migration {
        total: done - started,
        moving: done - first_move.unwrap_or(done),
        moved_keys: access.cli(&new_ip, &["DBSIZE"]).parse()?,
        new_ip,
        operator: Some(OperatorStart {
            ready_after_patch,
            held_at_start: held_at_start.unwrap_or(0),
        }),
    })
}

struct CliMigration {
    /// `total` runs from the new node Ready (`add-node` starts) to `rebalance` done.
    migration: Migration,
    /// `add-node` until the new node can take slots (see [`joined`]).
    joined: Duration,
    /// The `rebalance` process's run.
    rebalance: Duration,
}

/// Whether a node just added is ready for `rebalance`:
/// - every other member lists it by its id (not in handshake), linked: otherwise `rebalance`
///   run from a member that does not list it yet says "No rebalancing needed", and a source
///   that does not know it refuses `CLUSTER SETSLOT <slot> MIGRATING <id>` ("I don't know
///   about node"), leaving the slot importing on the new node;
/// - the new node reports `cluster_state:ok`: a primary that was in a minority (a new node
///   with no slot map yet) waits out the rejoin delay (the node timeout, at most 5 s) before
///   it does, and until then it answers MIGRATE's RESTORE-ASKING with CLUSTERDOWN, which also
///   stops `rebalance` with its first slot open;
/// - `--cluster check` passes (every node agrees, every slot covered, nothing open).
fn joined(cli: &Cli, access: &Access, new_ip: &str, new_id: &str) -> Result<Progress<()>> {
    for m in &access.members {
        let view = access.nodes_seen_by(&m.ip)?;
        match view.iter().find(|n| n.id == new_id) {
            None => return Ok(Err(format!("{} does not know the new node", m.name))),
            Some(n) if n.has_flag("handshake") || !n.connected || n.failing() => {
                return Ok(Err(format!(
                    "{} sees the new node as {:?}",
                    m.name, n.flags
                )));
            }
            Some(_) => {}
        }
    }
    let info = access.cli(new_ip, &["CLUSTER", "INFO"]);
    if !info.lines().any(|l| l.trim() == "cluster_state:ok") {
        return Ok(Err(format!(
            "the new node is not cluster_state:ok: {}",
            first_line(&info)
        )));
    }
    Ok(cli.check(access).map(|_| ()))
}

/// The floor: a fourth hand-made node (on `image`, the default image if `None`),
/// `valkey-cli --cluster add-node`, then (once it can take slots, see [`joined`])
/// `valkey-cli --cluster rebalance --cluster-use-empty-masters` with its defaults
/// (`--cluster-pipeline 10`, `--cluster-timeout 60000`), all by `cli`, its output in
/// `<run>/<prefix>-rebalance.out`.
async fn cli_scale_out(
    nodes: &Api<ValkeyNode>,
    access: &Access,
    prefix: &str,
    run: &Path,
    image: Option<&str>,
    cli: &Cli,
) -> Result<CliMigration> {
    let new_ip = hand_node_ready(nodes, &format!("{prefix}-3"), image).await?;
    let new_id = access.node_id(&new_ip)?;
    let seed = addr(&access.members[0].ip);
    let started = Instant::now();
    cluster_cli_ok(cli, access, &["add-node", &addr(&new_ip), &seed])?;
    wait("the new node to join", Duration::from_secs(60), || async {
        match joined(cli, access, &new_ip, &new_id) {
            Err(e) => Ok(Err(format!("{e:#}"))),
            other => other,
        }
    })
    .await?;
    let joined = started.elapsed();

    let log = |ext: &str| run.join(format!("{prefix}-rebalance.{ext}"));
    let rebalance_started = Instant::now();
    let mut child = cluster_cli(
        cli,
        access,
        &["rebalance", &seed, "--cluster-use-empty-masters"],
    )
    .stdout(File::create(log("out"))?)
    .stderr(Stdio::from(File::create(log("err"))?))
    .spawn()
    .context("starting valkey-cli --cluster rebalance")?;
    let mut first_move: Option<Instant> = None;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if first_move.is_none() && moving(access, &new_ip, &new_id).unwrap_or(false) {
            first_move = Some(Instant::now());
        }
        if rebalance_started.elapsed() > CLI_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "rebalance did not finish in {CLI_LIMIT:?}: {}",
                tail(run, prefix)
            );
        }
        tokio::time::sleep(POLL).await;
    };
    let done = Instant::now();
    if !status.success() {
        bail!("rebalance exited with {status}: {}", tail(run, prefix));
    }
    // It exits 0 also when it moved nothing ("No rebalancing needed"): check the result.
    balanced(access, &access.members[0].ip, &new_ip, &new_id)?
        .map_err(|why| anyhow::anyhow!("rebalance exited 0 but {why}: {}", tail(run, prefix)))?;
    Ok(CliMigration {
        migration: Migration {
            total: done - started,
            moving: done - first_move.unwrap_or(done),
            moved_keys: access.cli(&new_ip, &["DBSIZE"]).parse()?,
            new_ip,
            operator: None,
        },
        joined,
        rebalance: done - rebalance_started,
    })
}

/// The last lines of `rebalance`'s output (stdout, then stderr) other than its progress
/// marks.
fn tail(run: &Path, prefix: &str) -> String {
    let read = |ext: &str| {
        std::fs::read_to_string(run.join(format!("{prefix}-rebalance.{ext}"))).unwrap_or_default()
    };
    let text = read("out") + &read("err");
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.chars().all(|c| c == '#'))
        .collect();
    lines[lines.len().saturating_sub(6)..].join(" / ")
}

/// Deletes the ValkeyClusters `clusters` and the hand-made nodes `<prefix>-<i>` of
/// `hand_prefixes`, then waits until no ValkeyNode or pod of theirs is left, so the next
/// measurement does not share the machine with them. Past 3 minutes, or on an API error, it
/// warns and goes on.
async fn clear(apis: &ClusterApis, clusters: &[&str], hand_prefixes: &[&str]) {
    let prefixes: Vec<String> = clusters
        .iter()
        .chain(hand_prefixes)
        .map(|p| format!("{p}-"))
        .collect();
    let ours = |name: &str| prefixes.iter().any(|p| name.starts_with(p.as_str()));
    let result = async {
        for name in clusters {
            apis.clusters.delete(name, &DeleteParams::default()).await?;
        }
        for node in apis.nodes.list(&Default::default()).await? {
            let name = node.metadata.name.unwrap_or_default();
            if hand_prefixes
                .iter()
                .any(|p| name.starts_with(&format!("{p}-")))
            {
                apis.nodes.delete(&name, &DeleteParams::default()).await?;
            }
        }
        wait(
            "their ValkeyNodes and pods to go",
            Duration::from_secs(180),
            || async {
                let mut left: Vec<String> = Vec::new();
                for node in apis.nodes.list(&Default::default()).await? {
                    left.extend(node.metadata.name.filter(|n| ours(n)));
                }
                for pod in apis.pods.list(&Default::default()).await? {
                    left.extend(pod.metadata.name.filter(|n| ours(n)));
                }
                Ok(if left.is_empty() {
                    Ok(())
                } else {
                    Err(format!("left: {left:?}"))
                })
            },
        )
        .await
    }
    .await;
    if let Err(e) = result {
        eprintln!("bench-cluster: warning: clearing {prefixes:?}: {e:#}");
    }
}

/// The cluster's status in one line, for a failed measurement.
async fn status_line(apis: &ClusterApis, name: &str) -> String {
    match apis.clusters.get_opt(name).await {
        Ok(Some(c)) => c
            .status
            .as_ref()
            .map_or_else(|| "no status".to_string(), describe_status),
        Ok(None) => "no such ValkeyCluster".to_string(),
        Err(e) => format!("cannot read it: {e}"),
    }
}

/// Says loudly that a measurement of the operator failed, with topology-controller's last
/// log lines.
fn explain_failure(cluster: &LocalCluster, name: &str, error: &anyhow::Error) {
    eprintln!(
        "bench-cluster: MEASUREMENT ON {name} FAILED: {error:#}\nbench-cluster: topology-controller's log ends:\n{}",
        cluster.log_tail("topology-controller", 40)
    );
}

/// A 3 -> 4 scale-out on Valkey 9.1.
struct Scaled {
    /// `moving` is not reported: the atomic path never shows a slot importing.
    migration: Migration,
    /// valkey-cli's: `add-node` until the new node can take slots, then `rebalance`.
    cli: Option<(Duration, Duration)>,
    /// What `CLUSTER GETSLOTMIGRATIONS` lists on the new primary, see [`migration_jobs`].
    jobs: String,
}

/// 3 x 0 on [`V91`] with `keys` keys (and `annotations`), scaled to 4 shards by the operator.
async fn operator_scale_out_on(
    apis: &ClusterApis,
    name: &str,
    keys: usize,
    annotations: &[(&str, &str)],
) -> Result<Scaled> {
    let image = image(V91);
    apply_cluster_with(apis, name, 3, 0, Some(&image), annotations).await?;
    let access = cluster_access(apis, name).await?;
    load_keys(&access, name, keys).await?;
    let migration = operator_scale_out(apis, &access, name).await?;
    let jobs = migration_jobs(&access, &migration.new_ip);
    Ok(Scaled {
        migration,
        cli: None,
        jobs,
    })
}

/// 3 hand-made primaries on [`V91`] with `keys` keys, a fourth added and the slots
/// rebalanced by [`V91`]'s own valkey-cli (from the image's root filesystem).
async fn cli_scale_out_on(
    nodes: &Api<ValkeyNode>,
    prefix: &str,
    keys: usize,
    run: &Path,
) -> Result<Scaled> {
    let cli = Cli::Chroot(valkey_root(V91)?);
    let image = image(V91);
    let access = floor_cluster(nodes, prefix, 3, 0, Some(&image), &cli).await?;
    load_keys(&access, prefix, keys).await?;
    let m = cli_scale_out(nodes, &access, prefix, run, Some(&image), &cli).await?;
    let jobs = migration_jobs(&access, &m.migration.new_ip);
    Ok(Scaled {
        migration: m.migration,
        cli: Some((m.joined, m.rebalance)),
        jobs,
    })
}

/// The atomic slot migration jobs `CLUSTER GETSLOTMIGRATIONS` lists on `ip`, counted by
/// operation and state ("none": the slots it holds came the classic way). valkey-cli prints
/// each job's fields and values one per line.
fn migration_jobs(access: &Access, ip: &str) -> String {
    let text = access.admin_cli(ip, &["CLUSTER", "GETSLOTMIGRATIONS"]);
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let after = |field: &str| -> Vec<&str> {
        lines
            .windows(2)
            .filter(|w| w[0] == field)
            .map(|w| w[1])
            .collect()
    };
    let (operations, states) = (after("operation"), after("state"));
    if operations.is_empty() {
        return if text.is_empty() {
            "none".to_string()
        } else {
            format!("none ({})", first_line(&text))
        };
    }
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for (i, operation) in operations.iter().enumerate() {
        let state = states.get(i).copied().unwrap_or("?");
        *counts.entry(format!("{operation} {state}")).or_default() += 1;
    }
    counts
        .iter()
        .map(|(what, n)| format!("{n} {what}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One step of [`upgrade`].
struct UpgradeStep {
    from: &'static str,
    to: &'static str,
    /// From the patch of `spec.template.image` to Ready with every member on `to`.
    took: Duration,
    members: usize,
    /// The most members seen rolling at once ([`RollWatch`]).
    max_rolling: usize,
    /// Members whose roll gate opened while they were primary (a primary hands over
    /// first, so none is expected).
    gates_on_primaries: Vec<String>,
}

struct Upgrade {
    steps: Vec<UpgradeStep>,
    /// The writer, stopped after both steps.
    report: WriterReport,
    /// Acknowledged writes that do not read back.
    lost: Result<Vec<String>>,
    /// Keys loaded before the first step that do not read back after the last.
    missing: Result<Vec<String>>,
    /// Whether the writer acknowledged 200 more writes after the last step.
    progressed: Result<()>,
}

/// A 3 x 1 cluster on [`V80`] with `keys` keys, upgraded to [`V81`] and then [`V91`] by
/// patching `spec.template.image`, an [`AckedWriter`] running throughout. Each step ends when
/// every member rolled ([`RollWatch`]), the cluster is Ready and `status.versions` lists only
/// the new version.
async fn upgrade(apis: &ClusterApis, name: &str, keys: usize) -> Result<Upgrade> {
    apply_cluster_with(apis, name, 3, 1, Some(&image(V80)), &[]).await?;
    let access = cluster_access(apis, name).await?;
    load_keys(&access, name, keys).await?;
    let writer = AckedWriter::start(&access).await?;
    writer.progressed(200, Duration::from_secs(60)).await?;
    let mut steps = Vec::new();
    for (from, to) in [(V80, V81), (V81, V91)] {
        let members = apis.members(name).await?;
        let watch = RefCell::new(RollWatch::new(&members));
        let started = Instant::now();
        apis.patch(name, json!({"spec": {"template": {"image": image(to)}}}))
            .await?;
        wait(
            &format!("every member of {name} to run {to} and {name} to be Ready"),
            LIMIT,
            || async {
                let members = apis.members(name).await?;
                if let Err(why) = watch.borrow_mut().sample_until_rolled(&members) {
                    return Ok(Err(why));
                }
                let status = match ready_status(apis, name).await? {
                    Ok(status) => status,
                    Err(why) => return Ok(Err(why)),
                };
                Ok(
                    if status.versions.len() == 1 && status.versions[0].starts_with(to) {
                        Ok(())
                    } else {
                        Err(format!("status.versions {:?}", status.versions))
                    },
                )
            },
        )
        .await?;
        let took = started.elapsed();
        let watch = watch.into_inner();
        eprintln!(
            "bench-cluster: {name}: {from} -> {to} in {took:?}, gate order {:?}",
            watch.gate_order
        );
        steps.push(UpgradeStep {
            from,
            to,
            took,
            members: members.len(),
            max_rolling: watch.max_rolling,
            gates_on_primaries: watch
                .gate_order
                .iter()
                .filter(|(_, role)| *role != Some(Role::Replica))
                .map(|(n, role)| format!("{n} ({role:?})"))
                .collect(),
        });
    }
    let progressed = writer.progressed(200, Duration::from_secs(60)).await;
    let report = writer.stop().await?;
    eprintln!(
        "bench-cluster: {name}: writer during both steps\n{}",
        report.summary()
    );
    let lost = report.lost(&access).await;
    if let Ok(lost) = &lost
        && !lost.is_empty()
    {
        eprintln!(
            "bench-cluster: !!! {name}: {} OF {} ACKNOWLEDGED WRITES LOST, e.g. {:?}",
            lost.len(),
            report.acked(),
            &lost[..lost.len().min(10)]
        );
    }
    let missing = DataSet::new(name, keys).missing(&access).await;
    Ok(Upgrade {
        steps,
        report,
        lost,
        missing,
        progressed,
    })
}

/// Freezes shard 0's primary with SIGSTOP and times until its replica accepts a write to a
/// slot of that shard, and until the cluster's Ready condition is not True; then lets the
/// old primary continue (it rejoins as a replica).
async fn failover(apis: &ClusterApis, access: &Access, cluster: &str) -> Result<Freeze> {
    let (nodes, pods) = (&apis.nodes, &apis.pods);
    let (primary, replica) = {
        let a = nodes.get_status(&format!("{cluster}-0-0")).await?;
        let b = nodes.get_status(&format!("{cluster}-0-1")).await?;
        let role = |n: &ValkeyNode| {
            n.status
                .as_ref()
                .and_then(|s| s.valkey.as_ref())
                .and_then(|v| v.role)
        };
        match role(&a) {
            Some(crd_types::node::Role::Primary) => (a, b),
            _ => (b, a),
        }
    };
    let ip = |n: &ValkeyNode| {
        n.status
            .as_ref()
            .and_then(|s| s.endpoint.as_ref())
            .and_then(|e| e.cluster_ip.clone())
            .context("no ClusterIP")
    };
    let replica_ip = ip(&replica)?;
    // A key of the shard: the primary's slots from its own view, KEYSLOT from the replica.
    let primary_ip = ip(&primary)?;
    let own = access
        .nodes_seen_by(&primary_ip)?
        .into_iter()
        .find(ClusterNode::is_myself)
        .context("the primary does not list itself")?;
    let key = (0..10_000)
        .map(|i| format!("failover-{i}"))
        .find(|k| {
            access
                .cli(&replica_ip, &["CLUSTER", "KEYSLOT", k])
                .parse::<u16>()
                .is_ok_and(|slot| own.owns(slot))
        })
        .context("no key for shard 0")?;
    let pod_name = primary
        .status
        .as_ref()
        .and_then(|s| s.workload.as_ref())
        .and_then(|w| w.pod_name.clone())
        .context("no pod")?;
    let pod_ip = pods
        .get(&pod_name)
        .await?
        .status
        .and_then(|s| s.pod_ip)
        .context("no pod IP")?;
    let pid = valkey_server_pid(&pod_ip)?;
    let started = Instant::now();
    signal(pid, "STOP")?;
    let ready_false = RefCell::new(None);
    let result = wait("the replica to accept writes", LIMIT, || async {
        let unseen = ready_false.borrow().is_none();
        if unseen && !ready_condition_true(apis, cluster).await? {
            *ready_false.borrow_mut() = Some(started.elapsed());
        }
        let reply = access.cli(&replica_ip, &["SET", &key, "v"]);
        Ok(if reply == "OK" { Ok(()) } else { Err(reply) })
    })
    .await;
    let write_accepted = started.elapsed();
    signal(pid, "CONT")?;
    result?;
    Ok(Freeze {
        write_accepted,
        ready_false: ready_false.into_inner(),
    })
}

/// A primary frozen in [`failover`]: until its replica accepted a write, and until the
/// cluster's Ready condition was first seen not True (`None`: not before that write).
struct Freeze {
    write_accepted: Duration,
    ready_false: Option<Duration>,
}

/// Whether the cluster's Ready condition is True.
async fn ready_condition_true(apis: &ClusterApis, name: &str) -> Result<bool> {
    let status = apis
        .clusters
        .get_status(name)
        .await?
        .status
        .unwrap_or_default();
    Ok(status
        .conditions
        .iter()
        .any(|c| c.type_ == crd_types::conditions::types::READY && c.status == "True"))
}

/// Stops topology-controller and starts `controller` (its binary with its environment)
/// in its place.
async fn restart_topology_controller(
    cluster: &mut LocalCluster,
    controller: &RunningController,
) -> Result<()> {
    stop_process(cluster, TOPOLOGY_CONTROLLER, Duration::from_secs(10))?;
    restart_controller(cluster, controller).await?;
    Ok(())
}

/// What a writer saw while one primary left: the shard's longest refusal (no `SET`
/// accepted) and longest pause (no replica-acknowledged write), and acknowledged writes
/// that do not read back.
struct Departure {
    refusal: Duration,
    pause: Duration,
    lost: usize,
}

/// How a primary leaves in [`departure`].
#[derive(Clone, Copy)]
enum Leaving {
    /// Its pod is deleted: the preStop hook hands the slots over first.
    PodDeleted,
    /// Its pod is deleted with grace 0: no preStop hook runs, the server is killed.
    PodKilled,
    /// Its server is killed with SIGKILL at every start (a crash loop) until its shard has
    /// another primary: topology-controller fails the shard over by force.
    CrashLoop,
}

/// `shard`'s primary of the cluster `name` leaves as `how` under an [`AckedWriter`]; waits
/// until the cluster is Ready with every member back, then reads the acknowledged writes.
async fn departure(
    apis: &ClusterApis,
    access: &Access,
    name: &str,
    shard: u32,
    how: Leaving,
) -> Result<Departure> {
    wait_cluster_ready(apis, name).await?;
    let writer = AckedWriter::start(access).await?;
    writer.progressed(200, Duration::from_secs(60)).await?;
    let status = apis
        .clusters
        .get_status(name)
        .await?
        .status
        .unwrap_or_default();
    let primary = status
        .shards
        .get(shard as usize)
        .and_then(|s| s.primary.clone())
        .context("no primary in status")?;
    let pod_name = crd_types::names::statefulset_pod_name(&primary);
    let pod = apis.pods.get(&pod_name).await?;
    let old_uid = pod.metadata.uid.clone();
    let restarts = |p: &Pod| -> i32 {
        p.status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .map_or(0, |cs| cs.iter().map(|c| c.restart_count).sum())
    };
    let old_restarts = restarts(&pod);
    match how {
        Leaving::PodDeleted => {
            apis.pods
                .delete(&pod_name, &DeleteParams::default())
                .await?;
        }
        Leaving::PodKilled => {
            let now = DeleteParams {
                grace_period_seconds: Some(0),
                ..DeleteParams::default()
            };
            apis.pods.delete(&pod_name, &now).await?;
        }
        Leaving::CrashLoop => {
            let pod_ip = pod.status.and_then(|s| s.pod_ip).context("no pod IP")?;
            let primary_ip = access.ip(&primary).context("no address")?.to_string();
            // Kill at every start until another member of the shard serves its slots.
            wait("another primary for the shard", LIMIT, || async {
                if let Ok(pid) = valkey_server_pid(&pod_ip) {
                    let _ = signal(pid, "KILL");
                }
                let replaced = access
                    .members
                    .iter()
                    .filter(|m| m.shard == shard && m.ip != primary_ip)
                    .any(|m| {
                        access.nodes_seen_by(&m.ip).is_ok_and(|view| {
                            view.iter()
                                .any(|n| n.is_myself() && n.is_primary() && n.slot_count() > 0)
                        })
                    });
                Ok(if replaced {
                    Ok(())
                } else {
                    Err("not yet".into())
                })
            })
            .await?;
        }
    }
    wait(
        "the member's server back and the cluster Ready",
        LIMIT,
        || async {
            let pod = apis.pods.get_opt(&pod_name).await?;
            let back = pod.as_ref().is_some_and(|p| {
                let ready = p
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
                let new = match how {
                    Leaving::PodDeleted | Leaving::PodKilled => p.metadata.uid != old_uid,
                    Leaving::CrashLoop => restarts(p) > old_restarts,
                };
                ready && new
            });
            if !back {
                return Ok(Err("not back".into()));
            }
            Ok(ready_status(apis, name).await?.map(drop))
        },
    )
    .await?;
    writer.progressed(200, Duration::from_secs(120)).await?;
    let report = writer.stop().await?;
    eprintln!("bench-cluster: {name}: writer\n{}", report.summary());
    let stream = report
        .streams
        .iter()
        .find(|s| s.shard == shard)
        .context("no writer stream for the shard")?;
    Ok(Departure {
        refusal: stream.longest_refusal,
        pause: stream.longest_pause,
        lost: report.lost(access).await?.len(),
    })
}

/// Waits for phase Ready.
async fn wait_cluster_ready(apis: &ClusterApis, name: &str) -> Result<()> {
    wait(&format!("{name} to be Ready"), LIMIT, || async {
        Ok(ready_status(apis, name).await?.map(drop))
    })
    .await
}
