//! `just bench-cluster`: the ValkeyCluster figures of docs/benchmarks.md, each next to its
//! floor on the same machine and the same kind of pods:
//! - apply to Ready for 3 shards x 1 replica, next to six hand-made cluster-mode ValkeyNodes
//!   formed by `valkey-cli --cluster create`;
//! - slot migration for a 3 -> 4 scale-out with `BENCH_KEYS` keys (default 100000), next to
//!   `valkey-cli --cluster add-node` + `rebalance --cluster-use-empty-masters`;
//! - failover: a primary's process frozen (SIGSTOP) until writes to its slots are accepted by
//!   the replica that took over.
//!
//! The operator's clusters require a password (the default user's, from the Secret their
//! members' `spec.auth` names; read through [`access`]). The hand-made floor nodes have no
//! `spec.auth`, so they serve without one, as before.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use crd_types::ValkeyNode;
use crd_types::node::Mode;
use crd_types::template::WorkloadType;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use local_cluster::cluster_testing::{
    Access, ClusterApis, ClusterNode, DataSet, MemberAddr, PORT, Progress, access,
};
use local_cluster::testing::{cluster_with_operator, signal, valkey_node, valkey_server_pid};
use serde_json::json;

const NS: &str = "default";
const POLL: Duration = Duration::from_millis(100);
const LIMIT: Duration = Duration::from_secs(600);
/// How long `valkey-cli --cluster rebalance` may run before it is killed and the figure
/// reported as missing.
const CLI_LIMIT: Duration = Duration::from_secs(300);
/// Slots a primary of four holds once balanced.
const QUARTER: u32 = 4096;

#[tokio::main]
async fn main() -> Result<()> {
    let keys: usize = std::env::var("BENCH_KEYS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let run = std::env::temp_dir().join(format!("bench-cluster-{}", std::process::id()));
    let (cluster, _controllers) = cluster_with_operator(&run, true).await?;
    let client = cluster.client().await?;
    let apis = ClusterApis::new(&client, NS);

    eprintln!("bench-cluster: formation");
    let operator_ready = apply_cluster(&apis, "form", 3, 1).await?;
    let floor = floor_formation(&apis.nodes, "floor", 6, 1).await?;

    eprintln!("bench-cluster: migration by the operator");
    apply_cluster(&apis, "mig", 3, 0).await?;
    let mig = cluster_access(&apis, "mig").await?;
    let load = load_keys(&mig, "mig", keys).await?;
    let operator_migration = operator_scale_out(&apis, &mig, "mig").await?;

    eprintln!("bench-cluster: migration by valkey-cli");
    let flmig = floor_cluster(&apis.nodes, "flmig", 3, 0).await?;
    load_keys(&flmig, "flmig", keys).await?;
    let cli_migration = cli_scale_out(&apis.nodes, &flmig, "flmig", &run)
        .await
        .inspect_err(|e| eprintln!("bench-cluster: valkey-cli scale-out failed: {e:#}"));

    eprintln!("bench-cluster: failover");
    let form = cluster_access(&apis, "form").await?;
    let failover = failover(&apis.nodes, &apis.pods, &form, "form").await?;

    drop(cluster);
    let _ = std::fs::remove_dir_all(&run);

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
        secs(failover)
    );
    Ok(())
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

/// Applies a ValkeyCluster and returns the time to phase Ready.
async fn apply_cluster(
    apis: &ClusterApis,
    name: &str,
    shards: i32,
    replicas: i32,
) -> Result<Duration> {
    let object = serde_json::from_value(json!({
        "apiVersion": "valkey.rs/v1alpha1", "kind": "ValkeyCluster",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"shards": shards, "replicasPerShard": replicas,
                 "template": {"persistence": {"size": "1Gi", "reclaimPolicy": "Delete"}}}
    }))?;
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

/// A hand-made cluster-mode ValkeyNode (no `spec.auth`: it serves without a password).
fn hand_node(name: &str) -> ValkeyNode {
    let mut node = valkey_node(name, WorkloadType::StatefulSet, true, None);
    node.spec.mode = Mode::Cluster;
    node.spec.template.config.0.clear();
    node
}

/// Hand-made nodes `<prefix>-<i>`; returns their IPs once all are Ready.
async fn hand_nodes(nodes: &Api<ValkeyNode>, prefix: &str, count: usize) -> Result<Vec<String>> {
    for i in 0..count {
        let node = hand_node(&format!("{prefix}-{i}"));
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
async fn hand_node_ready(nodes: &Api<ValkeyNode>, name: &str) -> Result<String> {
    nodes
        .create(&PostParams::default(), &hand_node(name))
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
    let ips = hand_nodes(nodes, prefix, count).await?;
    let nodes_ready = started.elapsed();
    let started = Instant::now();
    cli_create(&floor_access(prefix, &ips), replicas).await?;
    Ok(Floor {
        nodes_ready,
        formed: started.elapsed(),
    })
}

/// Hand-made primaries formed into a cluster; its [`Access`].
async fn floor_cluster(
    nodes: &Api<ValkeyNode>,
    prefix: &str,
    count: usize,
    replicas: usize,
) -> Result<Access> {
    let ips = hand_nodes(nodes, prefix, count).await?;
    let access = floor_access(prefix, &ips);
    cli_create(&access, replicas).await?;
    Ok(access)
}

/// `valkey-cli --cluster <args>`, logged in with `access`'s password if it has one
/// (REDISCLI_AUTH, so it is not on the command line).
fn cluster_cli(access: &Access, args: &[&str]) -> Command {
    let mut command = Command::new("valkey-cli");
    if let Some(password) = &access.password {
        command.env("REDISCLI_AUTH", password);
    }
    command.arg("--cluster").args(args);
    command
}

/// Runs a `valkey-cli --cluster` command that must succeed (bounded by [`LIMIT`]).
fn cluster_cli_ok(access: &Access, args: &[&str]) -> Result<String> {
    let out = cluster_cli(access, args).output()?;
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
async fn cli_create(access: &Access, replicas: usize) -> Result<()> {
    let addrs: Vec<String> = access.members.iter().map(|m| addr(&m.ip)).collect();
    let mut args = vec!["create"];
    args.extend(addrs.iter().map(String::as_str));
    let replicas = replicas.to_string();
    args.extend(["--cluster-replicas", &replicas, "--cluster-yes"]);
    cluster_cli_ok(access, &args)?;
    wait("--cluster check to pass", LIMIT, || async {
        Ok(access.check().map(|_| ()))
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
    let new_id = access.node_id(&new_ip)?;
    let mut first_move: Option<Instant> = None;
    wait("the operator's migration", LIMIT, || {
        if first_move.is_none() && moving(access, &new_ip, &new_id).unwrap_or(false) {
            first_move = Some(Instant::now());
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
fn joined(access: &Access, new_ip: &str, new_id: &str) -> Result<Progress<()>> {
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
    Ok(access.check().map(|_| ()))
}

/// The floor: a fourth hand-made node, `valkey-cli --cluster add-node`, then (once it can
/// take slots, see [`joined`]) `valkey-cli --cluster rebalance --cluster-use-empty-masters`
/// with its defaults (`--cluster-pipeline 10`, `--cluster-timeout 60000`), its output in
/// `<run>/rebalance.out`.
async fn cli_scale_out(
    nodes: &Api<ValkeyNode>,
    access: &Access,
    prefix: &str,
    run: &Path,
) -> Result<CliMigration> {
    let new_ip = hand_node_ready(nodes, &format!("{prefix}-3")).await?;
    let new_id = access.node_id(&new_ip)?;
    let seed = addr(&access.members[0].ip);
    let started = Instant::now();
    cluster_cli_ok(access, &["add-node", &addr(&new_ip), &seed])?;
    wait("the new node to join", Duration::from_secs(60), || async {
        match joined(access, &new_ip, &new_id) {
            Err(e) => Ok(Err(format!("{e:#}"))),
            other => other,
        }
    })
    .await?;
    let joined = started.elapsed();

    let rebalance_started = Instant::now();
    let mut child = cluster_cli(access, &["rebalance", &seed, "--cluster-use-empty-masters"])
        .stdout(File::create(run.join("rebalance.out"))?)
        .stderr(Stdio::from(File::create(run.join("rebalance.err"))?))
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
            bail!("rebalance did not finish in {CLI_LIMIT:?}: {}", tail(run));
        }
        tokio::time::sleep(POLL).await;
    };
    let done = Instant::now();
    if !status.success() {
        bail!("rebalance exited with {status}: {}", tail(run));
    }
    // It exits 0 also when it moved nothing ("No rebalancing needed"): check the result.
    balanced(access, &access.members[0].ip, &new_ip, &new_id)?
        .map_err(|why| anyhow::anyhow!("rebalance exited 0 but {why}: {}", tail(run)))?;
    Ok(CliMigration {
        migration: Migration {
            total: done - started,
            moving: done - first_move.unwrap_or(done),
            moved_keys: access.cli(&new_ip, &["DBSIZE"]).parse()?,
        },
        joined,
        rebalance: done - rebalance_started,
    })
}

/// The last lines of `rebalance`'s output (stdout, then stderr) other than its progress
/// marks.
fn tail(run: &Path) -> String {
    let read = |name: &str| std::fs::read_to_string(run.join(name)).unwrap_or_default();
    let text = read("rebalance.out") + &read("rebalance.err");
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.chars().all(|c| c == '#'))
        .collect();
    lines[lines.len().saturating_sub(6)..].join(" / ")
}

/// Freezes shard 0's primary with SIGSTOP and times until its replica accepts a write to a
/// slot of that shard; then lets the old primary continue (it rejoins as a replica).
async fn failover(
    nodes: &Api<ValkeyNode>,
    pods: &Api<Pod>,
    access: &Access,
    cluster: &str,
) -> Result<Duration> {
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
    let result = wait("the replica to accept writes", LIMIT, || async {
        let reply = access.cli(&replica_ip, &["SET", &key, "v"]);
        Ok(if reply == "OK" { Ok(()) } else { Err(reply) })
    })
    .await;
    let took = started.elapsed();
    signal(pid, "CONT")?;
    result?;
    Ok(took)
}
