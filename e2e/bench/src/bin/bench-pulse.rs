//! `just bench-pulse`: how soon a ValkeyCluster's Ready follows Valkey, and what watching
//! it costs while nothing happens, for one 3 x 1 cluster, in one run on the same cluster,
//! with topology-controller's settings two ways:
//! - `pulse`: the default (every member asked CLUSTER INFO and INFO replication each
//!   second, a look at an idle Ready cluster every 300 s);
//! - `30 s looks`: `PULSE_MILLIS=0 IDLE_LOOK_SECONDS=30`, the schedule before the pulse
//!   (the rules of Ready are today's either way).
//!
//! For each: over an idle window (`BENCH_IDLE_SECS`, default 300), per hour: the reconciles
//! and CPU time of topology-controller, its API requests (from the API server's audit log,
//! WATCH and Lease renewals apart), the commands the members served (from INFO
//! commandstats; the probes' and the replicas' apart, the benchmark's own INFO and AUTH
//! taken out) and their CPU time. Then the primary of shard 0 is frozen (SIGSTOP): the time to
//! Ready False, and to the first other member answering `cluster_state:fail`; it is thawed
//! and the cluster is Ready again before the next.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use crd_types::conditions::types;
use crd_types::names::statefulset_pod_name;
use e2e_kit::cluster_testing::{
    Access, ClusterApis, access, poll_until, valkey_cluster, wait_ready,
};
use e2e_kit::testing::{
    cluster_with_local_controllers, restart_controller, signal, stop_process, valkey_server_pid,
};
use k8s_openapi::jiff::Timestamp;
use local_cluster::LocalCluster;
use local_cluster::operator::{self, RunningController};

const NS: &str = "default";
const NAME: &str = "pulse";
const CONTROLLER: &str = "topology-controller";
const LIMIT: Duration = Duration::from_secs(300);
/// Before each idle window: the first reconciles after a (re)start, and the replicas'
/// catch-up after a thaw, are over.
const SETTLE: Duration = Duration::from_secs(20);
/// Commands the members serve that topology-controller does not send: the readiness
/// probes' PING and AUTH (the operator's own AUTHs number its connections, as CLIENT ID
/// does), and the replicas' REPLCONF ACK.
const NOT_THE_OPERATORS: [&str; 3] = ["ping", "auth", "replconf"];
/// Polling of Ready and of CLUSTER INFO after the freeze.
const POLL: Duration = Duration::from_millis(100);

#[tokio::main]
async fn main() -> Result<()> {
    let idle = Duration::from_secs(
        std::env::var("BENCH_IDLE_SECS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(300),
    );
    let run = std::env::temp_dir().join(format!("bench-pulse-{}", std::process::id()));
    let mut options = local_cluster::Options::new(&run);
    options.audit = true;
    let (mut cluster, controllers) = cluster_with_local_controllers(options, &[]).await?;
    let client = cluster.client().await?;
    let apis = ClusterApis::new(&client, NS);
    let mut controller = controllers
        .into_iter()
        .find(|c| c.process.binary == CONTROLLER)
        .context("the overlay runs topology-controller")?;

    apis.create(&valkey_cluster(NAME, 3, 1, true)).await?;
    wait_ready(&cluster, &apis, NAME, LIMIT).await?;
    let members = access(&apis, NAME).await?;

    let mut rows = Vec::new();
    for (label, env) in [
        ("pulse (default)", None),
        (
            "30 s looks, no pulse",
            Some([("PULSE_MILLIS", "0"), ("IDLE_LOOK_SECONDS", "30")]),
        ),
    ] {
        if let Some(env) = env {
            stop_process(&mut cluster, CONTROLLER, Duration::from_secs(10))?;
            for (name, value) in env {
                controller.process.env.retain(|(n, _)| n != name);
                controller.process.env.push((name.into(), value.into()));
            }
            controller = restart_controller(&mut cluster, &controller).await?;
        }
        eprintln!("bench-pulse: {label}: idle window of {idle:?}");
        wait_ready(&cluster, &apis, NAME, LIMIT).await?;
        tokio::time::sleep(SETTLE).await;
        let cost = idle_cost(&cluster, &controller, &members, idle).await?;
        eprintln!("bench-pulse: {label}: a primary frozen");
        let lag = freeze_lag(&cluster, &apis, &members).await?;
        wait_ready(&cluster, &apis, NAME, LIMIT).await?;
        rows.push((label, cost, lag));
    }
    cluster.stop()?;

    println!("Idle window {idle:?} per setting; per hour:\n");
    println!(
        "| topology-controller | reconciles | its CPU s | its API requests (not WATCH, not Lease) | Valkey commands (not {}) | Valkey CPU s (all members) |",
        NOT_THE_OPERATORS.join(", ")
    );
    println!("|---|---|---|---|---|---|");
    for (label, c, _) in &rows {
        println!(
            "| {label} | {:.0} | {:.2} | {:.0} | {:.0} | {:.1} |",
            c.reconciles, c.cpu, c.requests, c.commands, c.valkey_cpu
        );
    }
    for (label, c, _) in &rows {
        println!(
            "\n{label}: API requests per hour by verb and resource: {:?}",
            c.by_kind
        );
        println!(
            "{label}: Valkey commands per hour by name: {:?}",
            c.by_command
        );
    }
    println!(
        "\n| primary frozen (SIGSTOP) | Ready False after | first other member answers cluster_state:fail after |"
    );
    println!("|---|---|---|");
    for (label, _, lag) in &rows {
        println!(
            "| {label} | {} | {} |",
            secs(lag.ready_false),
            secs(lag.state_fail)
        );
    }
    Ok(())
}

fn secs(d: Option<Duration>) -> String {
    d.map_or("not seen".into(), |d| format!("{:.1} s", d.as_secs_f64()))
}

/// Idle cost per hour.
struct IdleCost {
    reconciles: f64,
    /// topology-controller's user + system CPU seconds.
    cpu: f64,
    requests: f64,
    by_kind: BTreeMap<String, f64>,
    /// Every member's commands but [`NOT_THE_OPERATORS`], the benchmark's own taken out.
    commands: f64,
    by_command: BTreeMap<String, f64>,
    valkey_cpu: f64,
}

/// What one look at the counters shows.
struct Counters {
    reconciles: f64,
    cpu_ticks: u64,
    commands: BTreeMap<String, f64>,
    valkey_cpu: f64,
}

async fn counters(controller: &RunningController, pid: i32, members: &Access) -> Result<Counters> {
    let metrics = operator::http_get(&controller.http_addr, "/metrics")
        .await
        .context("topology-controller /metrics")?;
    let runs = r#"valkey_operator_reconcile_runs_total{controller="topology-controller"}"#;
    let reconciles = metrics
        .lines()
        .find_map(|l| l.strip_prefix(runs))
        .map_or(Ok(0.0), |v| v.trim().parse())?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields 14 and 15 (utime, stime) follow the command in parentheses.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .context("/proc stat")?
        .1
        .split_whitespace()
        .collect();
    let cpu_ticks = fields[11].parse::<u64>()? + fields[12].parse::<u64>()?;
    let mut commands = BTreeMap::new();
    let mut valkey_cpu = 0.0;
    for m in &members.members {
        let info = members.cli(&m.ip, &["INFO", "everything"]);
        for line in info.lines() {
            if let Some((name, rest)) = line
                .strip_prefix("cmdstat_")
                .and_then(|l| l.split_once(":calls="))
            {
                let calls: f64 = rest.split(',').next().unwrap_or("0").parse()?;
                *commands.entry(name.to_string()).or_default() += calls;
            }
            for field in ["used_cpu_sys:", "used_cpu_user:"] {
                if let Some(v) = line.strip_prefix(field) {
                    valkey_cpu += v.trim().parse::<f64>()?;
                }
            }
        }
    }
    Ok(Counters {
        reconciles,
        cpu_ticks,
        commands,
        valkey_cpu,
    })
}

async fn idle_cost(
    cluster: &LocalCluster,
    controller: &RunningController,
    members: &Access,
    idle: Duration,
) -> Result<IdleCost> {
    let pid = cluster
        .pid_of(CONTROLLER)
        .context("topology-controller runs")?;
    let before = counters(controller, pid, members).await?;
    let start = Timestamp::now();
    tokio::time::sleep(idle).await;
    let end = Timestamp::now();
    let after = counters(controller, pid, members).await?;
    let per_hour = 3600.0 / idle.as_secs_f64();
    let ticks = 100.0; // USER_HZ
    let mut by_command = BTreeMap::new();
    for (name, calls) in &after.commands {
        let mut delta = calls - before.commands.get(name).copied().unwrap_or(0.0);
        // The first look's INFO and the second look's AUTH, on every member.
        if name == "info" || name == "auth" {
            delta -= members.members.len() as f64;
        }
        if delta > 0.0 {
            by_command.insert(name.clone(), delta * per_hour);
        }
    }
    let commands = by_command
        .iter()
        .filter(|(name, _)| !NOT_THE_OPERATORS.contains(&name.as_str()))
        .map(|(_, n)| n)
        .sum();
    let (requests, by_kind) = audit_requests(cluster, controller, start, end, per_hour)?;
    Ok(IdleCost {
        reconciles: (after.reconciles - before.reconciles) * per_hour,
        cpu: (after.cpu_ticks - before.cpu_ticks) as f64 / ticks * per_hour,
        requests,
        by_kind,
        commands,
        by_command,
        valkey_cpu: (after.valkey_cpu - before.valkey_cpu) * per_hour,
    })
}

/// topology-controller's completed requests in [start, end) from the audit log, but WATCH
/// and Lease ones: the total per hour, and per hour by `verb resource[/subresource]`.
fn audit_requests(
    cluster: &LocalCluster,
    controller: &RunningController,
    start: Timestamp,
    end: Timestamp,
    per_hour: f64,
) -> Result<(f64, BTreeMap<String, f64>)> {
    let user = format!(
        "system:serviceaccount:{}:{}",
        controller.process.namespace, controller.process.service_account
    );
    let log = cluster.audit_log.as_ref().context("the audit log is on")?;
    let mut by_kind: BTreeMap<String, f64> = BTreeMap::new();
    for line in std::fs::read_to_string(log)?.lines() {
        let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else {
            continue; // a line cut short while the API server writes it
        };
        let text = |pointer: &str| event.pointer(pointer).and_then(|v| v.as_str());
        let verb = text("/verb").unwrap_or_default();
        let resource = text("/objectRef/resource").unwrap_or_default();
        if text("/user/username") != Some(user.as_str())
            || text("/stage") != Some("ResponseComplete")
            || verb == "watch"
            || resource == "leases"
        {
            continue;
        }
        let at: Timestamp = text("/stageTimestamp").unwrap_or_default().parse()?;
        if at < start || at >= end {
            continue;
        }
        let what = match text("/objectRef/subresource") {
            Some(sub) => format!("{verb} {resource}/{sub}"),
            None => format!("{verb} {resource}"),
        };
        *by_kind.entry(what).or_default() += per_hour;
    }
    Ok((by_kind.values().sum(), by_kind))
}

/// After shard 0's primary is frozen.
struct Lag {
    ready_false: Option<Duration>,
    state_fail: Option<Duration>,
}

/// Freezes shard 0's primary's server (SIGSTOP), polls the cluster's Ready and another member's CLUSTER INFO
/// until both changed (or Valkey failed the primary over and Ready came back), then thaws it.
async fn freeze_lag(cluster: &LocalCluster, apis: &ClusterApis, members: &Access) -> Result<Lag> {
    let status = wait_ready(cluster, apis, NAME, LIMIT).await?;
    let primary = status.shards[0]
        .primary
        .clone()
        .context("shard 0 primary")?;
    let witness = members
        .members
        .iter()
        .find(|m| m.shard != 0)
        .context("a member of another shard")?
        .ip
        .clone();
    let pod_ip = apis
        .pods
        .get(&statefulset_pod_name(&primary))
        .await?
        .status
        .and_then(|s| s.pod_ip)
        .context("no pod IP")?;
    let pid = valkey_server_pid(&pod_ip)?;
    signal(pid, "STOP")?;
    let frozen = Instant::now();
    let ready_false = Cell::new(None);
    let state_fail = Cell::new(None);
    let result = poll_until(
        cluster,
        "Ready False and cluster_state:fail",
        LIMIT,
        POLL,
        || {
            let (ready_false, state_fail, witness) = (&ready_false, &state_fail, &witness);
            async move {
                let status = apis
                    .clusters
                    .get_status(NAME)
                    .await?
                    .status
                    .unwrap_or_default();
                let ready = status
                    .conditions
                    .iter()
                    .any(|c| c.type_ == types::READY && c.status == "True");
                if !ready && ready_false.get().is_none() {
                    ready_false.set(Some(frozen.elapsed()));
                }
                let info = members.cli(witness, &["CLUSTER", "INFO"]);
                if info.contains("cluster_state:fail") && state_fail.get().is_none() {
                    state_fail.set(Some(frozen.elapsed()));
                }
                Ok(match (ready_false.get(), state_fail.get()) {
                    (Some(_), Some(_)) => Ok(()),
                    _ if frozen.elapsed() > Duration::from_secs(90) => Ok(()),
                    _ => Err(format!("Ready {ready}, {witness}: {}", first_line(&info))),
                })
            }
        },
    )
    .await;
    signal(pid, "CONT")?;
    result?;
    if ready_false.get().is_none() {
        bail!("Ready stayed True for 90 s after {primary} froze");
    }
    Ok(Lag {
        ready_false: ready_false.get(),
        state_fail: state_fail.get(),
    })
}

fn first_line(text: &str) -> &str {
    text.lines()
        .find(|l| l.starts_with("cluster_state"))
        .unwrap_or(text)
}
