//! `just bench-replication`: the ValkeyReplication figures of docs/benchmarks.md, each next
//! to its floor on the same machine and the same kind of pods:
//! - apply to Ready for 3 data nodes + 3 sentinels, next to six hand-made ValkeyNodes (three
//!   Standalone, three in Sentinel mode) wired by valkey-cli (`REPLICAOF`, `SENTINEL MONITOR`,
//!   `SENTINEL SET`) until Valkey and Sentinel say what the operator's Ready means: one
//!   primary, two replicas linked to it, every sentinel naming it and listing exactly the two
//!   replicas and the two other sentinels, all by Service IP;
//! - failover: the primary's process frozen (SIGSTOP) until a write is accepted through the
//!   read-write Service, next to raw Sentinel on the floor with the same
//!   down-after-milliseconds: until the replica Sentinel names primary accepts a write;
//! - switchover: `spec.switchover` to a named replica until a write through the read-write
//!   Service lands on it, and until status.switchover says Succeeded; next to the same by
//!   hand on the floor (`CONFIG SET replica-priority 1` on the target, `SENTINEL FAILOVER`
//!   once every sentinel has read it).
//!
//! `BENCH_DOWN_AFTER=<ms>` sets Sentinel's down-after-milliseconds on both groups.
//!
//! The operator's group requires passwords (read through [`access`]); the floor serves
//! without (no `spec.auth`), as bench-cluster's floor does. A hand-made sentinel needs
//! nothing topology-controller fills in (`spec.replication` only tells a restarting member
//! its role): mode Sentinel renders a sentinel that announces its Service IP and monitors
//! nothing until told. The floor's data nodes get the `min-replicas-to-write` and
//! `min-replicas-max-lag` the operator gives its own, so on both a new primary takes writes
//! only once a replica is attached.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use crd_types::ValkeyNode;
use crd_types::cluster::SwitchoverOutcome;
use crd_types::names::ports;
use crd_types::node::Mode;
use crd_types::replication::SentinelSpec;
use crd_types::template::WorkloadType;
use e2e_kit::replication_testing::{
    GroupAccess, MemberAddr, Progress, ReplicationApis, WriteProbes, access, poll_until,
    ready_status, valkey_replication,
};
use e2e_kit::testing::{cluster_with_local_controllers, signal, valkey_node, valkey_server_pid};
use kube::api::PostParams;
use local_cluster::{LocalCluster, Options};
use serde_json::json;

const NS: &str = "default";
/// The operator's group.
const GROUP: &str = "repl";
/// The hand-made floor, and the name its sentinels know its primary by.
const FLOOR: &str = "floor";
const POLL: Duration = Duration::from_millis(100);
const LIMIT: Duration = Duration::from_secs(600);
const PORT: u16 = ports::VALKEY as u16;
/// The switchover's id in `spec.switchover`.
const SWITCHOVER_ID: &str = "bench";

#[tokio::main]
async fn main() -> Result<()> {
    let run = std::env::temp_dir().join(format!("bench-replication-{}", std::process::id()));
    let (cluster, _controllers) = cluster_with_local_controllers(Options::new(&run), &[]).await?;
    let client = cluster.client().await?;
    let apis = ReplicationApis::new(&client, NS);
    let mut group = valkey_replication(GROUP, 3, 3, false);
    if let Some(ms) = down_after()? {
        group.spec.sentinel.down_after_milliseconds = ms;
    }
    let sentinel = group.spec.sentinel.clone();
    let min_replicas = (
        group.spec.min_replicas_to_write(),
        group.spec.min_replicas_max_lag(),
    );

    eprintln!("bench-replication: formation");
    let operator_form = operator_formation(&cluster, &apis, group).await?;
    let (floor_form, floor) = floor_formation(&cluster, &apis, &sentinel, min_replicas).await?;

    eprintln!("bench-replication: failover");
    let operator_failover = operator_failover(&cluster, &apis)
        .await
        .inspect_err(|e| eprintln!("bench-replication: operator failover: {e:#}"));
    let floor_failover = floor_failover(&cluster, &apis, &floor)
        .await
        .inspect_err(|e| eprintln!("bench-replication: floor failover: {e:#}"));

    eprintln!("bench-replication: switchover");
    let operator_switchover = operator_switchover(&cluster, &apis)
        .await
        .inspect_err(|e| eprintln!("bench-replication: operator switchover: {e:#}"));
    let floor_switchover = floor_switchover(&cluster, &floor)
        .await
        .inspect_err(|e| eprintln!("bench-replication: floor switchover: {e:#}"));

    drop(cluster);
    let _ = std::fs::remove_dir_all(&run);

    println!("| 3 data nodes + 3 sentinels | operator | floor |");
    println!("|---|---|---|");
    println!(
        "| apply to Ready | {} (Valkey and Sentinel agree {}) | {} (6 ValkeyNodes Ready {} + wiring by valkey-cli {}) |",
        secs(operator_form.ready),
        secs(operator_form.agreed),
        secs(floor_form.nodes_ready + floor_form.wiring),
        secs(floor_form.nodes_ready),
        secs(floor_form.wiring)
    );
    println!();
    println!(
        "| failover: primary frozen (SIGSTOP), down-after-milliseconds {} | operator (writes through the read-write Service `{GROUP}`) | floor (raw Sentinel; writes to the replica it names) |",
        sentinel.down_after_milliseconds
    );
    println!("|---|---|---|");
    let failover_row = |what: &str, pick: &dyn Fn(&Failover) -> String| {
        println!(
            "| {what} | {} | {} |",
            figure(&operator_failover, pick),
            figure(&floor_failover, pick)
        );
    };
    failover_row("frozen to a sentinel naming another primary", &|f| {
        f.named.map_or("not seen".into(), secs)
    });
    failover_row("frozen to the first write accepted", &|f| secs(f.accepted));
    failover_row(
        "old primary thawed to Valkey and Sentinel agreeing again (it a replica)",
        &|f| secs(f.rejoined),
    );
    println!();
    println!(
        "| switchover to a named replica | operator (`spec.switchover`; writes through `{GROUP}`) | floor (`CONFIG SET replica-priority 1` on the target, `SENTINEL FAILOVER` once every sentinel has read it) |"
    );
    println!("|---|---|---|");
    println!(
        "| request to the first write accepted on the new primary | {} | {} |",
        figure(&operator_switchover, &|s| secs(s.accepted)),
        figure(&floor_switchover, &|s| format!(
            "{} (every sentinel reads the priority {}, then `SENTINEL FAILOVER` to the write {})",
            secs(s.accepted),
            secs(s.preferred),
            secs(s.accepted - s.preferred)
        ))
    );
    println!(
        "| request to status.switchover Succeeded | {} | |",
        figure(&operator_switchover, &|s| secs(s.succeeded))
    );
    Ok(())
}

/// `BENCH_DOWN_AFTER` (ms): Sentinel's down-after-milliseconds for the operator's group and
/// the floor alike; the CRD's default when unset.
fn down_after() -> Result<Option<i64>> {
    match std::env::var("BENCH_DOWN_AFTER") {
        Ok(v) => Ok(Some(
            v.parse().context("BENCH_DOWN_AFTER is a number of ms")?,
        )),
        Err(_) => Ok(None),
    }
}

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

/// The figure `pick` makes of a measurement, or why there is none.
fn figure<T>(measured: &Result<T>, pick: &dyn Fn(&T) -> String) -> String {
    match measured {
        Ok(m) => pick(m),
        Err(e) => {
            let text = format!("{e:#}");
            format!(
                "not measured: {}",
                text.lines().next().unwrap_or_default().replace('|', "/")
            )
        }
    }
}

/// Fails unless valkey-cli answered OK.
fn expect_ok(what: &str, reply: String) -> Result<()> {
    if reply != "OK" {
        bail!("{what}: {reply}");
    }
    Ok(())
}

/// The password to log in with on the group's data nodes (the floor has none).
fn password(access: &GroupAccess) -> Option<&str> {
    Some(access.password.as_str()).filter(|p| !p.is_empty())
}

struct OperatorFormation {
    /// Apply to status Ready (topology-controller's contract, see `not_ready`).
    ready: Duration,
    /// Apply to Valkey and Sentinel agreeing with it ([`GroupAccess::agree_on`]).
    agreed: Duration,
}

async fn operator_formation(
    cluster: &LocalCluster,
    apis: &ReplicationApis,
    group: crd_types::ValkeyReplication,
) -> Result<OperatorFormation> {
    let started = Instant::now();
    apis.create(&group).await?;
    let status = poll_until(cluster, "the group to be Ready", LIMIT, POLL, || {
        ready_status(apis, GROUP)
    })
    .await?;
    let ready = started.elapsed();
    let primary = status.current_primary.context("Ready with no primary")?;
    let access = access(apis, GROUP).await?;
    let ip = access.ip(&primary).context("no primary IP")?.to_string();
    poll_until(
        cluster,
        "Valkey and Sentinel to agree",
        LIMIT,
        POLL,
        || async { Ok(access.agree_on(&ip)) },
    )
    .await?;
    Ok(OperatorFormation {
        ready,
        agreed: started.elapsed(),
    })
}

struct FloorFormation {
    /// Creation of the six ValkeyNodes to all of them Ready with a ClusterIP.
    nodes_ready: Duration,
    /// First valkey-cli command to Valkey and Sentinel agreeing.
    wiring: Duration,
}

fn floor_data_name(i: usize) -> String {
    format!("{FLOOR}-{i}")
}

fn floor_sentinel_name(j: usize) -> String {
    format!("{FLOOR}-sentinel-{j}")
}

/// A hand-made data node: the operator's data node config (the fixture's `maxmemory`, and
/// the spec's `min-replicas-*`), no password.
fn floor_data_node(name: &str, (to_write, max_lag): (i32, i32)) -> ValkeyNode {
    let mut node = valkey_node(name, WorkloadType::StatefulSet, false, None);
    let config = &mut node.spec.template.config.0;
    config.insert("min-replicas-to-write".into(), to_write.to_string());
    config.insert("min-replicas-max-lag".into(), max_lag.to_string());
    node
}

/// A hand-made sentinel: mode Sentinel, no config, no volume, no password.
fn floor_sentinel(name: &str) -> ValkeyNode {
    let mut node = valkey_node(name, WorkloadType::StatefulSet, false, None);
    node.spec.mode = Mode::Sentinel;
    node.spec.template.config.0.clear();
    node
}

async fn floor_formation(
    cluster: &LocalCluster,
    apis: &ReplicationApis,
    sentinel: &SentinelSpec,
    min_replicas: (i32, i32),
) -> Result<(FloorFormation, GroupAccess)> {
    let started = Instant::now();
    let mut names = Vec::new();
    for i in 0..3 {
        let node = floor_data_node(&floor_data_name(i), min_replicas);
        apis.nodes.create(&PostParams::default(), &node).await?;
        names.push(floor_data_name(i));
    }
    for j in 0..3 {
        let node = floor_sentinel(&floor_sentinel_name(j));
        apis.nodes.create(&PostParams::default(), &node).await?;
        names.push(floor_sentinel_name(j));
    }
    let ips = poll_until(
        cluster,
        "6 floor ValkeyNodes Ready",
        LIMIT,
        POLL,
        || async {
            let mut ips = BTreeMap::new();
            for name in &names {
                let status = apis
                    .nodes
                    .get_status(name)
                    .await?
                    .status
                    .unwrap_or_default();
                let ready = status.workload.is_some_and(|w| w.ready);
                match status.endpoint.and_then(|e| e.cluster_ip) {
                    Some(ip) if ready => ips.insert(name.clone(), ip),
                    _ => return Ok(Err(format!("{name} is not Ready"))),
                };
            }
            Ok(Ok(ips))
        },
    )
    .await?;
    let nodes_ready = started.elapsed();
    let member = |name: String, index: usize| MemberAddr {
        ip: ips[&name].clone(),
        name,
        index: index as u32,
    };
    let floor = GroupAccess {
        name: FLOOR.to_string(),
        data: (0..3).map(|i| member(floor_data_name(i), i)).collect(),
        sentinels: (0..3).map(|j| member(floor_sentinel_name(j), j)).collect(),
        password: String::new(),
        sentinel_password: String::new(),
        operator_password: String::new(),
        service_ip: None,
        tls: None,
        replicas_service_ip: None,
        sentinel_service_ip: None,
    };

    let started = Instant::now();
    let primary = floor.data[0].ip.clone();
    for m in &floor.data[1..] {
        expect_ok(
            &format!("REPLICAOF on {}", m.name),
            floor.cli(&m.ip, &["REPLICAOF", &primary, &PORT.to_string()]),
        )?;
    }
    let quorum = sentinel.quorum.to_string();
    let down = sentinel.down_after_milliseconds.to_string();
    let failover = sentinel.failover_timeout.to_string();
    let syncs = sentinel.parallel_syncs.to_string();
    for s in &floor.sentinels {
        let monitor = ["SENTINEL", "MONITOR", FLOOR, &primary, "6379", &quorum];
        expect_ok(
            &format!("SENTINEL MONITOR on {}", s.name),
            floor.sentinel_cli(&s.ip, &monitor),
        )?;
        let set = [
            "SENTINEL",
            "SET",
            FLOOR,
            "down-after-milliseconds",
            &down,
            "failover-timeout",
            &failover,
            "parallel-syncs",
            &syncs,
        ];
        expect_ok(
            &format!("SENTINEL SET on {}", s.name),
            floor.sentinel_cli(&s.ip, &set),
        )?;
    }
    poll_until(cluster, "the floor to be wired", LIMIT, POLL, || async {
        Ok(floor.agree_on(&primary))
    })
    .await?;
    Ok((
        FloorFormation {
            nodes_ready,
            wiring: started.elapsed(),
        },
        floor,
    ))
}

struct Failover {
    /// Frozen to a sentinel naming another primary.
    named: Option<Duration>,
    /// Frozen to the first write accepted (by a server other than the frozen one).
    accepted: Duration,
    /// Thawed to Valkey and Sentinel agreeing on the new primary, the old one a replica.
    rejoined: Duration,
}

/// Where write attempts go while the primary is frozen.
enum Writes<'a> {
    /// Always to this address (the read-write Service).
    To(&'a str),
    /// To the primary a sentinel names, once one names another than the frozen one.
    Named,
}

/// What a sentinel names primary, when it answers.
fn named_primary(access: &GroupAccess, sentinel: &str) -> Option<String> {
    let reply = access.sentinel_cli(
        sentinel,
        &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", &access.name],
    );
    let mut lines = reply.lines();
    let ip = lines.next()?.to_string();
    lines.next()?.parse::<u16>().ok()?;
    Some(ip)
}

/// The data node at `ip`'s process, frozen with SIGSTOP; its pid.
async fn freeze(apis: &ReplicationApis, access: &GroupAccess, ip: &str) -> Result<u32> {
    let name = &access.data_at(ip).context("no data node there")?.name;
    let pod_ip = apis
        .nodes
        .get_status(name)
        .await?
        .status
        .and_then(|s| s.workload)
        .and_then(|w| w.pod_ip)
        .with_context(|| format!("{name} has no pod IP"))?;
    let pid = valkey_server_pid(&pod_ip)?;
    signal(pid, "STOP")?;
    Ok(pid)
}

/// From the freeze of the primary at `old_ip` (at `started`): when a sentinel first names
/// another, and when a write sent as `writes` says is first accepted by another server.
async fn first_write(
    access: &GroupAccess,
    old_ip: &str,
    old_run_id: &str,
    writes: Writes<'_>,
    started: Instant,
) -> Result<(Option<Duration>, Duration, String)> {
    let mut probes = WriteProbes::default();
    let mut named: Option<(Duration, String)> = None;
    loop {
        if named.is_none() {
            named = access
                .sentinels
                .iter()
                .filter_map(|s| named_primary(access, &s.ip))
                .find(|ip| ip != old_ip)
                .map(|ip| (started.elapsed(), ip));
        }
        let to = match &writes {
            Writes::To(ip) => Some(*ip),
            Writes::Named => named.as_ref().map(|(_, ip)| ip.as_str()),
        };
        if let Some(ip) = to {
            probes.send(ip, PORT, password(access), "failover")?;
        }
        if probes.accepted()?.iter().any(|id| id != old_run_id) {
            let accepted = started.elapsed();
            let new_ip = match named {
                Some((_, ref ip)) => ip.clone(),
                None => wait_named(access, old_ip).await?,
            };
            return Ok((named.map(|(d, _)| d), accepted, new_ip));
        }
        if started.elapsed() > LIMIT {
            bail!(
                "no write accepted in {LIMIT:?} ({} attempts); a sentinel named {:?}",
                probes.sent(),
                named.map(|(_, ip)| ip)
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The primary the sentinels name once one names another than `old_ip`.
async fn wait_named(access: &GroupAccess, old_ip: &str) -> Result<String> {
    let started = Instant::now();
    loop {
        if let Some(ip) = access
            .sentinels
            .iter()
            .filter_map(|s| named_primary(access, &s.ip))
            .find(|ip| ip != old_ip)
        {
            return Ok(ip);
        }
        if started.elapsed() > LIMIT {
            bail!("no sentinel names a primary other than {old_ip}");
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The group's status once Ready and Valkey and Sentinel agree with it.
async fn ready_agreeing(
    cluster: &LocalCluster,
    apis: &ReplicationApis,
    not: Option<&str>,
) -> Result<(String, GroupAccess)> {
    poll_until(
        cluster,
        "the group to be Ready and agreed on",
        LIMIT,
        POLL,
        || async {
            let status = match ready_status(apis, GROUP).await? {
                Ok(status) => status,
                Err(why) => return Ok(Err(why)),
            };
            let primary = status.current_primary.unwrap_or_default();
            if not == Some(primary.as_str()) {
                return Ok(Err(format!("{primary} is still named primary")));
            }
            let access = access(apis, GROUP).await?;
            let ip = access.ip(&primary).context("no primary IP")?.to_string();
            Ok(access.agree_on(&ip).map(|()| (primary, access)))
        },
    )
    .await
}

/// Freezes the operator's primary and times the first write through the read-write
/// Service; then thaws it and waits until the group is Ready with the old primary a replica.
async fn operator_failover(cluster: &LocalCluster, apis: &ReplicationApis) -> Result<Failover> {
    let (old, access) = ready_agreeing(cluster, apis, None).await?;
    let service = access.service_ip.clone().context("no read-write Service")?;
    let old_ip = access.ip(&old).context("no primary IP")?.to_string();
    let old_run_id = access.run_id(&old_ip).context("no run id")?;
    poll_until(
        cluster,
        "the Service to take writes",
        LIMIT,
        POLL,
        || async {
            let reply = access.cli(&service, &["SET", "before", "v"]);
            Ok(if reply == "OK" { Ok(()) } else { Err(reply) })
        },
    )
    .await?;
    let started = Instant::now();
    let pid = freeze(apis, &access, &old_ip).await?;
    let measured = first_write(&access, &old_ip, &old_run_id, Writes::To(&service), started).await;
    signal(pid, "CONT")?;
    let thawed = Instant::now();
    let (named, accepted, _) = measured?;
    let (new, _) = ready_agreeing(cluster, apis, Some(&old)).await?;
    eprintln!("bench-replication: the operator's primary moved from {old} to {new}");
    Ok(Failover {
        named,
        accepted,
        rejoined: thawed.elapsed(),
    })
}

/// Freezes the floor's primary and times the first write accepted by the replica a sentinel
/// names; then thaws it and waits until Valkey and Sentinel agree again.
async fn floor_failover(
    cluster: &LocalCluster,
    apis: &ReplicationApis,
    floor: &GroupAccess,
) -> Result<Failover> {
    let old_ip = floor.data[0].ip.clone();
    let old_run_id = floor.run_id(&old_ip).context("no run id")?;
    let started = Instant::now();
    let pid = freeze(apis, floor, &old_ip).await?;
    let measured = first_write(floor, &old_ip, &old_run_id, Writes::Named, started).await;
    signal(pid, "CONT")?;
    let thawed = Instant::now();
    let (named, accepted, new_ip) = measured?;
    poll_until(cluster, "the floor to agree again", LIMIT, POLL, || async {
        Ok(floor.agree_on(&new_ip))
    })
    .await?;
    Ok(Failover {
        named,
        accepted,
        rejoined: thawed.elapsed(),
    })
}

struct Switchover {
    /// Request to the first write accepted on the target.
    accepted: Duration,
    /// Request to status.switchover Succeeded.
    succeeded: Duration,
}

/// `spec.switchover` to a replica; times the first write through the read-write Service the
/// target accepts, and status.switchover Succeeded.
async fn operator_switchover(cluster: &LocalCluster, apis: &ReplicationApis) -> Result<Switchover> {
    let (primary, access) = ready_agreeing(cluster, apis, None).await?;
    let service = access.service_ip.clone().context("no read-write Service")?;
    let target = access
        .data
        .iter()
        .find(|m| m.name != primary)
        .context("no replica")?
        .clone();
    let target_run_id = access.run_id(&target.ip).context("no run id")?;
    eprintln!(
        "bench-replication: switchover from {primary} to {}",
        target.name
    );
    let started = Instant::now();
    apis.patch(
        GROUP,
        json!({"spec": {"switchover": {"id": SWITCHOVER_ID, "member": target.index}}}),
    )
    .await?;
    let mut probes = WriteProbes::default();
    let (mut accepted, mut succeeded) = (None, None);
    loop {
        if succeeded.is_none() {
            let status = apis.groups.get_status(GROUP).await?.status;
            match status.and_then(|s| s.switchover) {
                Some(s) if s.id == SWITCHOVER_ID && s.outcome == SwitchoverOutcome::Succeeded => {
                    succeeded = Some(started.elapsed());
                }
                Some(s) if s.id == SWITCHOVER_ID && s.outcome == SwitchoverOutcome::Failed => {
                    bail!("switchover failed: {}", s.message);
                }
                _ => {}
            }
        }
        if accepted.is_none() {
            probes.send(&service, PORT, password(&access), "switchover")?;
            if probes.accepted()?.contains(&target_run_id) {
                accepted = Some(started.elapsed());
            }
        }
        if let (Some(accepted), Some(succeeded)) = (accepted, succeeded) {
            return Ok(Switchover {
                accepted,
                succeeded,
            });
        }
        if started.elapsed() > LIMIT {
            bail!(
                "after {LIMIT:?}: first write on {} {accepted:?}, Succeeded {succeeded:?}",
                target.name
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

struct FloorSwitchover {
    /// `CONFIG SET replica-priority 1` to every sentinel listing the target with it.
    preferred: Duration,
    /// `CONFIG SET` to the first write the target accepts.
    accepted: Duration,
}

/// The floor's switchover by hand: the target's replica-priority lowered, `SENTINEL FAILOVER`
/// once every sentinel has read it, then writes to the target until it accepts one.
async fn floor_switchover(cluster: &LocalCluster, floor: &GroupAccess) -> Result<FloorSwitchover> {
    let primary = wait_named(floor, "").await?;
    poll_until(cluster, "the floor to agree", LIMIT, POLL, || async {
        Ok(floor.agree_on(&primary))
    })
    .await?;
    let target = floor
        .data
        .iter()
        .find(|m| m.ip != primary)
        .context("no replica")?
        .clone();
    let started = Instant::now();
    expect_ok(
        "CONFIG SET replica-priority",
        floor.cli(&target.ip, &["CONFIG", "SET", "replica-priority", "1"]),
    )?;
    poll_until(
        cluster,
        "every sentinel to read the priority",
        LIMIT,
        POLL,
        || async {
            for s in &floor.sentinels {
                let priorities = floor.replica_priorities(&s.ip)?;
                if !priorities.contains(&(target.ip.clone(), 1)) {
                    return Ok(Progress::Err(format!("{} lists {priorities:?}", s.name)));
                }
            }
            Ok(Ok(()))
        },
    )
    .await?;
    let preferred = started.elapsed();
    expect_ok(
        "SENTINEL FAILOVER",
        floor.sentinel_cli(&floor.sentinels[0].ip, &["SENTINEL", "FAILOVER", FLOOR]),
    )?;
    let mut probes = WriteProbes::default();
    loop {
        probes.send(&target.ip, PORT, None, "switchover")?;
        if !probes.accepted()?.is_empty() {
            return Ok(FloorSwitchover {
                preferred,
                accepted: started.elapsed(),
            });
        }
        if started.elapsed() > LIMIT {
            bail!("{} accepted no write in {LIMIT:?}", target.name);
        }
        tokio::time::sleep(POLL).await;
    }
}
