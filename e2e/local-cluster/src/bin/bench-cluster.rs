//! `just bench-cluster`: the ValkeyCluster figures of docs/benchmarks.md, each next to its
//! floor on the same machine and the same kind of pods:
//! - apply to Ready for 3 shards x 1 replica, next to six hand-made cluster-mode ValkeyNodes
//!   formed by `valkey-cli --cluster create`;
//! - slot migration for a 3 -> 4 scale-out with `BENCH_KEYS` keys (default 100000), next to
//!   `valkey-cli --cluster add-node` + `rebalance --cluster-use-empty-masters`;
//! - failover: a primary's process frozen (SIGSTOP) until writes to its slots are accepted by
//!   the replica that took over.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use crd_types::node::Mode;
use crd_types::template::WorkloadType;
use crd_types::{ValkeyCluster, ValkeyNode};
use fred::prelude::*;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use local_cluster::testing::{cluster_with_operator, valkey_node};
use serde_json::json;

const NS: &str = "default";
const POLL: Duration = Duration::from_millis(100);
const LIMIT: Duration = Duration::from_secs(600);
const CLI_LIMIT: Duration = Duration::from_secs(180);

#[tokio::main]
async fn main() -> Result<()> {
    let keys: usize = std::env::var("BENCH_KEYS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let run = std::env::temp_dir().join(format!("bench-cluster-{}", std::process::id()));
    let (cluster, _controllers) = cluster_with_operator(&run, true).await?;
    let client = cluster.client().await?;
    let clusters: Api<ValkeyCluster> = Api::namespaced(client.clone(), NS);
    let nodes: Api<ValkeyNode> = Api::namespaced(client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);

    eprintln!("bench-cluster: formation");
    let operator_ready = apply_cluster(&clusters, "form", 3, 1).await?;
    let floor = floor_formation(&nodes, "floor", 6, 1).await?;

    eprintln!("bench-cluster: migration by the operator");
    apply_cluster(&clusters, "mig", 3, 0).await?;
    let seeds = member_ips(&nodes, "mig").await?;
    let load = load_keys(&seeds, "mig", keys).await?;
    let operator_migration = operator_scale_out(&clusters, &nodes, "mig").await?;

    eprintln!("bench-cluster: migration by valkey-cli");
    let floor_ips = floor_cluster(&nodes, "flmig", 3, 0).await?;
    load_keys(&floor_ips, "flmig", keys).await?;
    // valkey-cli 8.0.1's rebalance has been seen to stop with a slot left importing here; the
    // figure is then reported as missing rather than the run hanging.
    let cli_migration = match tokio::time::timeout(
        CLI_LIMIT,
        cli_scale_out(&nodes, "flmig", &floor_ips[0]),
    )
    .await
    {
        Ok(Ok(m)) => Some(m),
        Ok(Err(e)) => {
            eprintln!("bench-cluster: valkey-cli scale-out failed: {e:#}");
            None
        }
        Err(_) => {
            eprintln!("bench-cluster: valkey-cli scale-out did not finish in {CLI_LIMIT:?}");
            None
        }
    };

    eprintln!("bench-cluster: failover");
    let failover = failover(&nodes, &pods, "form").await?;

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
        "| loading {keys} keys (fred, 256 in flight) | {:.1} s | |",
        secs(load)
    );
    let floor_total = cli_migration
        .as_ref()
        .map_or("not measured".to_string(), |m| {
            format!("{:.1} s (`add-node` + `rebalance`)", secs(m.total))
        });
    let floor_rate = cli_migration
        .as_ref()
        .map_or("not measured".to_string(), |m| {
            format!(
                "{} keys / {:.1} s = {:.0} keys/s",
                m.moved_keys,
                secs(m.moving),
                rate(m.moved_keys, m.moving)
            )
        });
    println!(
        "| 3 -> 4 shards: new members Ready to 4096 slots each | {:.1} s | {floor_total} |",
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

async fn wait<T, F, Fut>(what: &str, mut probe: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>>>,
{
    let started = Instant::now();
    loop {
        if let Some(value) = probe().await? {
            return Ok(value);
        }
        if started.elapsed() > LIMIT {
            bail!("timed out waiting for {what}");
        }
        tokio::time::sleep(POLL).await;
    }
}

fn cli(ip: &str, args: &[&str]) -> Result<String> {
    let out = Command::new("valkey-cli")
        .args(["-h", ip, "-p", "6379"])
        .args(args)
        .output()
        .context("running valkey-cli")?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Applies a ValkeyCluster and returns the time to phase Ready.
async fn apply_cluster(
    clusters: &Api<ValkeyCluster>,
    name: &str,
    shards: i32,
    replicas: i32,
) -> Result<Duration> {
    let object: ValkeyCluster = serde_json::from_value(json!({
        "apiVersion": "valkey.rs/v1alpha1", "kind": "ValkeyCluster",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"shards": shards, "replicasPerShard": replicas,
                 "template": {"persistence": {"size": "1Gi", "reclaimPolicy": "Delete"}}}
    }))?;
    let started = Instant::now();
    clusters.create(&PostParams::default(), &object).await?;
    wait(&format!("{name} to be Ready"), || async {
        let c = clusters.get_status(name).await?;
        Ok(c.status
            .and_then(|s| s.phase)
            .filter(|p| *p == crd_types::cluster::Phase::Ready)
            .map(|_| ()))
    })
    .await?;
    Ok(started.elapsed())
}

/// ClusterIPs of a topology's members (or of hand-made nodes named `<prefix>-<i>`), in name
/// order.
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

/// Hand-made cluster-mode ValkeyNodes `<prefix>-<i>`; returns their IPs once all are Ready.
async fn hand_nodes(nodes: &Api<ValkeyNode>, prefix: &str, count: usize) -> Result<Vec<String>> {
    for i in 0..count {
        let mut node = valkey_node(
            &format!("{prefix}-{i}"),
            WorkloadType::StatefulSet,
            true,
            None,
        );
        node.spec.mode = Mode::Cluster;
        node.spec.template.config.0.clear();
        nodes.create(&PostParams::default(), &node).await?;
    }
    wait(&format!("{count} {prefix} nodes"), || async {
        let mut ready = 0;
        for i in 0..count {
            let n = nodes.get_status(&format!("{prefix}-{i}")).await?;
            if n.status.and_then(|s| s.workload).is_some_and(|w| w.ready) {
                ready += 1;
            }
        }
        Ok((ready == count).then_some(()))
    })
    .await?;
    member_ips(nodes, prefix).await
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
    cli_create(&ips, replicas)?;
    Ok(Floor {
        nodes_ready,
        formed: started.elapsed(),
    })
}

async fn floor_cluster(
    nodes: &Api<ValkeyNode>,
    prefix: &str,
    count: usize,
    replicas: usize,
) -> Result<Vec<String>> {
    let ips = hand_nodes(nodes, prefix, count).await?;
    cli_create(&ips, replicas)?;
    Ok(ips)
}

/// `valkey-cli --cluster create`, then wait for `--cluster check` to pass (every node agrees).
fn cli_create(ips: &[String], replicas: usize) -> Result<()> {
    let addrs: Vec<String> = ips.iter().map(|ip| format!("{ip}:6379")).collect();
    let out = Command::new("valkey-cli")
        .arg("--cluster")
        .arg("create")
        .args(&addrs)
        .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
        .output()?;
    if !out.status.success() {
        bail!("cluster create: {}", String::from_utf8_lossy(&out.stdout));
    }
    let started = Instant::now();
    loop {
        let check = Command::new("valkey-cli")
            .args(["--cluster", "check", &addrs[0]])
            .output()?;
        let text = String::from_utf8_lossy(&check.stdout);
        if check.status.success() && text.contains("All nodes agree") {
            return Ok(());
        }
        if started.elapsed() > LIMIT {
            bail!("cluster check never passed: {text}");
        }
        std::thread::sleep(POLL);
    }
}

/// Writes `count` keys through a cluster client seeded with `seeds`.
async fn load_keys(seeds: &[String], prefix: &str, count: usize) -> Result<Duration> {
    let config = Config {
        server: ServerConfig::new_clustered(seeds.iter().map(|ip| (ip.as_str(), 6379)).collect()),
        ..Default::default()
    };
    // A cluster just formed may not answer CLUSTER SLOTS consistently on every seed for a
    // moment (gossip); try again for a while.
    let client = wait("a cluster client to connect", || {
        let config = config.clone();
        async move {
            let client = Client::new(config, None, None, None);
            match client.init().await {
                Ok(_) => Ok(Some(client)),
                Err(e) => {
                    eprintln!("bench-cluster: cluster client: {e}; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    Ok(None)
                }
            }
        }
    })
    .await?;
    let started = Instant::now();
    let mut writes = futures::stream::iter(0..count)
        .map(|i| {
            let client = &client;
            async move {
                client
                    .set::<(), _, _>(
                        format!("{prefix}:{i}"),
                        format!("value-{i}"),
                        None,
                        None,
                        false,
                    )
                    .await
            }
        })
        .buffer_unordered(256);
    while let Some(result) = writes.next().await {
        result?;
    }
    let took = started.elapsed();
    client.quit().await?;
    Ok(took)
}

struct Migration {
    /// From the new primary answering until it holds its share and no slot is open.
    total: Duration,
    /// From the first slot seen moving to the last.
    moving: Duration,
    moved_keys: usize,
}

/// Slots owned per node id, and whether any slot is open, from one member's CLUSTER NODES.
fn slot_map(ip: &str) -> Result<(BTreeMap<String, usize>, bool)> {
    let text = cli(ip, &["CLUSTER", "NODES"])?;
    let mut owned = BTreeMap::new();
    let mut open = false;
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 8 {
            continue;
        }
        let mut slots = 0;
        for s in &fields[8..] {
            if s.starts_with('[') {
                open = true;
            } else if let Some((a, b)) = s.split_once('-') {
                slots += b.parse::<usize>()? - a.parse::<usize>()? + 1;
            } else {
                slots += 1;
            }
        }
        owned.insert(fields[0].to_string(), slots);
    }
    Ok((owned, open))
}

/// Waits until the node at `new_ip` holds 4096 slots with nothing open; times the moving.
async fn watch_migration(observer: &str, new_ip: &str, started: Instant) -> Result<Migration> {
    let new_id = cli(new_ip, &["CLUSTER", "MYID"])?;
    let mut first_move: Option<Instant> = None;
    loop {
        let (owned, open) = slot_map(observer)?;
        let mine = owned.get(&new_id).copied().unwrap_or(0);
        if first_move.is_none() && (mine > 0 || open) {
            first_move = Some(Instant::now());
        }
        if mine >= 4096 && !open {
            let done = Instant::now();
            let moved_keys: usize = cli(new_ip, &["DBSIZE"])?.parse()?;
            return Ok(Migration {
                total: done - started,
                moving: done - first_move.unwrap_or(done),
                moved_keys,
            });
        }
        if started.elapsed() > LIMIT {
            bail!("migration did not finish: {owned:?}");
        }
        tokio::time::sleep(POLL).await;
    }
}

async fn operator_scale_out(
    clusters: &Api<ValkeyCluster>,
    nodes: &Api<ValkeyNode>,
    name: &str,
) -> Result<Migration> {
    let observer = member_ips(nodes, name).await?[0].clone();
    clusters
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"shards": 4}})),
        )
        .await?;
    let new_member = format!("{name}-3-0");
    let new_ip = wait("the new primary to answer", || async {
        let Some(n) = nodes.get_opt(&new_member).await? else {
            return Ok(None);
        };
        let status = n.status.unwrap_or_default();
        let ready = status.workload.is_some_and(|w| w.ready);
        Ok(status.endpoint.and_then(|e| e.cluster_ip).filter(|_| ready))
    })
    .await?;
    watch_migration(&observer, &new_ip, Instant::now()).await
}

async fn cli_scale_out(nodes: &Api<ValkeyNode>, prefix: &str, existing: &str) -> Result<Migration> {
    let new_ip = hand_nodes_one(nodes, &format!("{prefix}-3")).await?;
    let started = Instant::now();
    let add = Command::new("valkey-cli")
        .args([
            "--cluster",
            "add-node",
            &format!("{new_ip}:6379"),
            &format!("{existing}:6379"),
        ])
        .output()?;
    if !add.status.success() {
        bail!("add-node: {}", String::from_utf8_lossy(&add.stdout));
    }
    let new_id = cli(&new_ip, &["CLUSTER", "MYID"])?;
    // rebalance right after add-node sees three primaries (the new one is still being
    // gossiped) and exits 0 having moved nothing: wait until every node knows it.
    wait("every node to know the new one", || async {
        let out = Command::new("valkey-cli")
            .args(["--cluster", "check", &format!("{existing}:6379")])
            .output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        Ok((text.contains(&new_ip) && text.contains("All nodes agree")).then_some(()))
    })
    .await?;
    let first_move = async {
        loop {
            let (owned, open) = slot_map(existing)?;
            if open || owned.get(&new_id).copied().unwrap_or(0) > 0 {
                return Ok::<_, anyhow::Error>(Instant::now());
            }
            tokio::time::sleep(POLL).await;
        }
    };
    let rebalance = async {
        let out = Command::new("valkey-cli")
            .args([
                "--cluster",
                "rebalance",
                &format!("{existing}:6379"),
                "--cluster-use-empty-masters",
            ])
            .output()?;
        if !out.status.success() {
            bail!("rebalance: {}", String::from_utf8_lossy(&out.stdout));
        }
        Ok::<_, anyhow::Error>(Instant::now())
    };
    let (first, done) = tokio::join!(first_move, rebalance);
    let (first, done) = (first?, done?);
    Ok(Migration {
        total: done - started,
        moving: done.saturating_duration_since(first),
        moved_keys: cli(&new_ip, &["DBSIZE"])?.parse()?,
    })
}

/// One more hand-made cluster-mode node named exactly `name`; its IP once Ready.
async fn hand_nodes_one(nodes: &Api<ValkeyNode>, name: &str) -> Result<String> {
    let mut node = valkey_node(name, WorkloadType::StatefulSet, true, None);
    node.spec.mode = Mode::Cluster;
    node.spec.template.config.0.clear();
    nodes.create(&PostParams::default(), &node).await?;
    wait(&format!("{name} to be Ready"), || async {
        let status = nodes.get_status(name).await?.status.unwrap_or_default();
        let ready = status.workload.is_some_and(|w| w.ready);
        Ok(status.endpoint.and_then(|e| e.cluster_ip).filter(|_| ready))
    })
    .await
}

/// Freezes shard 0's primary with SIGSTOP and times until its replica accepts a write to a
/// slot of that shard; then lets the old primary continue (it rejoins as a replica).
async fn failover(nodes: &Api<ValkeyNode>, pods: &Api<Pod>, cluster: &str) -> Result<Duration> {
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
    // A key of the shard: the replica serves it read-only, so KEYSLOT plus the slot map pick it.
    let key = (0..)
        .map(|i| format!("failover-{i}"))
        .find(|k| {
            let slot: u16 = cli(&replica_ip, &["CLUSTER", "KEYSLOT", k])
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(u16::MAX);
            slot <= 5460
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
    let pid = valkey_pid(&pod_ip)?;
    let started = Instant::now();
    signal(pid, "STOP")?;
    let result = wait("the replica to accept writes", || async {
        Ok((cli(&replica_ip, &["SET", &key, "v"])? == "OK").then_some(()))
    })
    .await;
    let took = started.elapsed();
    signal(pid, "CONT")?;
    result?;
    Ok(took)
}

/// The valkey-server listening on `pod_ip` (its process title names the address).
fn valkey_pid(pod_ip: &str) -> Result<u32> {
    for entry in std::fs::read_dir("/proc")? {
        let entry = entry?;
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let text = String::from_utf8_lossy(&cmdline);
        if text.starts_with(&format!("valkey-server {pod_ip}:6379")) {
            return Ok(pid);
        }
    }
    bail!("no valkey-server on {pod_ip}")
}

fn signal(pid: u32, name: &str) -> Result<()> {
    let status = Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()?;
    if !status.success() {
        bail!("kill -{name} {pid} failed");
    }
    Ok(())
}
