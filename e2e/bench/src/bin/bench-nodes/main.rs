//! `just bench-nodes`: what a ValkeyNode costs in time, API requests, kubelet requests and
//! controller memory. Prints Markdown tables for docs/benchmarks.md.
//!
//! One local cluster with the operator (deploy/overlays/all, each controller a local process
//! with its own ServiceAccount token) and the API server's audit log on. Every node has a
//! small `local-sized` volume (a tmpfs, whose usage the node agent's `/stats/summary`
//! reports as a kubelet does) with `autoResize` on, far below its threshold, so pvc-resizer
//! reads the kubelets and nothing grows.
//!
//! 1. create-to-Ready of 10 nodes one at a time, then of 10 at once, split into the steps of
//!    our controllers and those of Kubernetes. Writes are timed by the audit log
//!    (microseconds, as the API server saw them); pod Ready and WorkloadReady by watches
//!    from here.
//! 2. 80 more nodes at once; once pvc-resizer has published every volume's usage, an idle
//!    window of one resync period in which the audit events of each controller's
//!    ServiceAccount are counted, with pvc-resizer's kubelet stats calls (its metrics) and
//!    the TokenReviews and SubjectAccessReviews the node agent's kubelet API makes for them;
//! 3. each controller's VmRSS with 1 node and with 100.
//!
//! `BENCH_IDLE_SECS` shortens the idle window for a trial run (the per-hour figures then
//! miss part of the resync cycle).

mod audit;
mod controllers;
mod idle;
mod latency;
mod report;

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use crd_types::ValkeyNode;
use crd_types::conditions::{self, types};
use crd_types::template::{AutoResize, WorkloadType};
use e2e_kit::testing::{pod_ready, valkey_node};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::PostParams;
use kube::runtime::wait::await_condition;
use kube::{Api, Client};
use local_cluster::{LocalCluster, Options, operator};

use audit::read_audit;
use controllers::{Controller, Counters, rss_of};

const NS: &str = "default";
/// node-controller's, service-controller's and pvc-resizer's resync period
/// (`operator_runtime::controller::RESYNC_INTERVAL`): a window this long sees every idle
/// node reconciled exactly once, so window counts x 3600 / window are per-hour rates.
const RESYNC: Duration = Duration::from_secs(300);
/// kube-runtime's watcher asks for `timeoutSeconds=290`, so each open watch is re-issued
/// that often.
const WATCH_TIMEOUT_SECS: f64 = 290.0;
const SEQUENTIAL: usize = 10;
const BATCH: usize = 10;
const TOTAL: usize = 100;
/// The longest a node may take to become Ready before the benchmark gives up.
const NODE_TIMEOUT: Duration = Duration::from_secs(180);
/// `agent_services::SIZED_STORAGE_CLASS` (agent-services is no dependency of this crate).
const SIZED: &str = "local-sized";
/// Small: a tmpfs takes memory only for what is written, and Valkey writes a few KiB.
const VOLUME: &str = "32Mi";
/// The controllers measured, by binary name.
const MEASURED: [&str; 3] = ["node-controller", "service-controller", "pvc-resizer"];
const STATS_CALLS: &str = "valkey_operator_kubelet_stats_calls_total";
const STATS_FAILURES: &str = "valkey_operator_kubelet_stats_failures_total";

#[tokio::main]
async fn main() -> Result<()> {
    let idle = match std::env::var("BENCH_IDLE_SECS") {
        Ok(secs) => Duration::from_secs(secs.parse().context("BENCH_IDLE_SECS")?),
        Err(_) => RESYNC,
    };
    let run = std::env::temp_dir().join(format!("bench-nodes-{}", std::process::id()));
    eprintln!("bench-nodes: run directory {}", run.display());
    let mut options = Options::new(&run);
    options.audit = true;
    let mut cluster = LocalCluster::start(options).await?;
    let controllers = operator::install(
        &mut cluster,
        &local_cluster::repo_root().join("deploy/overlays/all"),
    )
    .await?;
    let measured = MEASURED
        .iter()
        .map(|name| Controller::find(&controllers, &run, name))
        .collect::<Result<Vec<_>>>()?;
    let figures = measure(&cluster, &measured, idle).await?;

    let audit_log = cluster.audit_log.clone().context("the audit log is on")?;
    cluster.stop()?;
    let events = read_audit(&audit_log)?;
    let audit_bytes = std::fs::metadata(&audit_log)?.len();
    report::print(&figures, &measured, &events, audit_bytes)?;
    // Stopped first: the run directory holds the volumes' tmpfs mounts, which the stop
    // unmounts. Kept after a failure: the audit log and the components' logs say what went
    // wrong.
    cluster.stop()?;
    let _ = std::fs::remove_dir_all(&run);
    Ok(())
}

/// What [`measure`] saw from here; the audit log has the rest.
struct Figures {
    sequential: Vec<Observed>,
    batch: Vec<Observed>,
    /// From the first create of the scale-up to all [`TOTAL`] nodes WorkloadReady.
    scale_up: SignedDuration,
    /// The measured controllers' counters at the start and the end of the idle window.
    before: Vec<Counters>,
    after: Vec<Counters>,
    window_start: Timestamp,
    window_end: Timestamp,
    /// Nodes WorkloadReady after the window.
    ready_after: usize,
    /// The Kubernetes Nodes running a node's pod.
    kube_nodes: BTreeSet<String>,
    /// The measured controllers' VmRSS (KiB) with one node and with [`TOTAL`].
    rss_one: Option<Vec<u64>>,
    rss_hundred: Vec<u64>,
    pod_count: usize,
}

/// Steps 1 and 2 of the module docs, and the memory of step 3.
async fn measure(
    cluster: &LocalCluster,
    measured: &[Controller],
    idle: Duration,
) -> Result<Figures> {
    let client = cluster.client().await?;
    let nodes: Api<ValkeyNode> = Api::namespaced(client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);

    // 1. One at a time, then a batch. Memory with one node is read after the first.
    let mut sequential = Vec::new();
    let mut rss_one = None;
    for i in 0..SEQUENTIAL {
        sequential.extend(create_and_wait(&client, &[format!("seq-{i}")]).await?);
        if rss_one.is_none() {
            rss_one = Some(rss_of(measured)?);
        }
    }
    let names: Vec<String> = (0..BATCH).map(|i| format!("batch-{i}")).collect();
    let batch = create_and_wait(&client, &names).await?;

    // 2. Up to 100 nodes, then let everything settle before the idle window.
    let started = Timestamp::now();
    for i in 0..TOTAL - SEQUENTIAL - BATCH {
        nodes
            .create(&PostParams::default(), &auto_resized(&format!("scale-{i}")))
            .await?;
    }
    wait_all(cluster, &nodes, "WorkloadReady", workload_ready).await?;
    let scale_up = Timestamp::now().duration_since(started);
    // The first stats round after a node starts wakes it (its usage becomes known) and
    // writes status.storage; the window starts after all of that.
    wait_all(cluster, &nodes, "usage in status.storage", usage_known).await?;
    settle(measured).await?;
    let mut before = Vec::new();
    for c in measured {
        before.push(Counters::read(c).await?);
    }
    let window_start = Timestamp::now();
    tokio::time::sleep(idle).await;
    let window_end = Timestamp::now();
    let mut after = Vec::new();
    for c in measured {
        after.push(Counters::read(c).await?);
    }
    let listed = nodes.list(&Default::default()).await?.items;
    let ready_after = listed.iter().filter(|n| workload_ready(n)).count();
    // The Kubernetes Nodes pvc-resizer reads: those running a node's pod.
    let kube_nodes: BTreeSet<String> = listed
        .iter()
        .filter_map(|n| n.status.as_ref()?.workload.as_ref()?.node_name.clone())
        .collect();
    let rss_hundred = rss_of(measured)?;
    let pod_count = pods.list(&Default::default()).await?.items.len();
    Ok(Figures {
        sequential,
        batch,
        scale_up,
        before,
        after,
        window_start,
        window_end,
        ready_after,
        kube_nodes,
        rss_one,
        rss_hundred,
        pod_count,
    })
}

/// A node with a small `local-sized` volume and autoResize at its defaults (80 %).
fn auto_resized(name: &str) -> ValkeyNode {
    let mut node = valkey_node(name, WorkloadType::StatefulSet, true, Some(SIZED));
    let persistence = node
        .spec
        .template
        .persistence
        .as_mut()
        .expect("a persistent node");
    persistence.size = VOLUME.into();
    // Through serde, so the fields left out take the CRD's defaults.
    let auto_resize: AutoResize =
        serde_json::from_value(serde_json::json!({"limit": "128Mi"})).expect("valid");
    persistence.auto_resize = Some(auto_resize);
    node
}

fn workload_ready(node: &ValkeyNode) -> bool {
    node.status
        .as_ref()
        .is_some_and(|s| conditions::is_true(&s.conditions, types::WORKLOAD_READY))
}

fn usage_known(node: &ValkeyNode) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.storage.as_ref())
        .is_some_and(|s| s.used_bytes.is_some())
}

/// When this process saw each node's pod Ready and the node WorkloadReady.
struct Observed {
    name: String,
    pod_ready: Timestamp,
    node_ready: Timestamp,
}

/// Creates `names` (all at once) and waits until each node's pod is Ready and the node
/// says WorkloadReady, timing both by a watch started before the create.
async fn create_and_wait(client: &Client, names: &[String]) -> Result<Vec<Observed>> {
    let nodes: Api<ValkeyNode> = Api::namespaced(client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let mut waits = Vec::new();
    for name in names {
        let pod = tokio::spawn(seen(
            pods.clone(),
            format!("{name}-0"),
            |p: Option<&Pod>| p.is_some_and(pod_ready),
        ));
        let node = tokio::spawn(seen(
            nodes.clone(),
            name.clone(),
            |n: Option<&ValkeyNode>| {
                n.and_then(|n| n.status.as_ref())
                    .is_some_and(|s| conditions::is_true(&s.conditions, types::WORKLOAD_READY))
            },
        ));
        waits.push((name.clone(), pod, node));
    }
    // The watches list before they watch; give them that moment so none starts late.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for name in names {
        nodes
            .create(&PostParams::default(), &auto_resized(name))
            .await?;
    }
    let mut observed = Vec::new();
    for (name, pod, node) in waits {
        observed.push(Observed {
            pod_ready: pod.await??,
            node_ready: node.await??,
            name,
        });
    }
    Ok(observed)
}

/// The time a watch on `name` first sees `condition` hold.
async fn seen<K>(
    api: Api<K>,
    name: String,
    condition: impl Fn(Option<&K>) -> bool + Send + 'static,
) -> Result<Timestamp>
where
    K: kube::Resource + Clone + std::fmt::Debug + Send + serde::de::DeserializeOwned + 'static,
{
    tokio::time::timeout(NODE_TIMEOUT, await_condition(api, &name, condition))
        .await
        .with_context(|| format!("{name} not ready within {NODE_TIMEOUT:?}"))??;
    Ok(Timestamp::now())
}

/// How many nodes satisfy `test`.
async fn count(nodes: &Api<ValkeyNode>, test: fn(&ValkeyNode) -> bool) -> Result<usize> {
    Ok(nodes
        .list(&Default::default())
        .await?
        .items
        .iter()
        .filter(|n| test(n))
        .count())
}

/// Waits until all [`TOTAL`] nodes satisfy `test`, at most [`NODE_TIMEOUT`].
async fn wait_all(
    cluster: &LocalCluster,
    nodes: &Api<ValkeyNode>,
    what: &str,
    test: fn(&ValkeyNode) -> bool,
) -> Result<()> {
    let deadline = tokio::time::Instant::now() + NODE_TIMEOUT;
    loop {
        // Through wait_for_value, which fails at once when a component of the run died.
        let done = cluster
            .wait_for_value("a node count", || async {
                Ok(Some(count(nodes, test).await?))
            })
            .await?;
        if done == TOTAL {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            bail!("only {done} of {TOTAL} nodes with {what} after {NODE_TIMEOUT:?}");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Waits until no controller has reconciled for 15 s (pods and StatefulSets settle a
/// little after Ready), at most two minutes.
async fn settle(controllers: &[Controller]) -> Result<()> {
    let quiet = Duration::from_secs(15);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let runs = || async {
        let mut runs = Vec::new();
        for c in controllers {
            runs.push(Counters::read(c).await?.reconciles);
        }
        anyhow::Ok(runs)
    };
    let mut last = runs().await?;
    let mut since = tokio::time::Instant::now();
    while since.elapsed() < quiet && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = runs().await?;
        if now != last {
            last = now;
            since = tokio::time::Instant::now();
        }
    }
    Ok(())
}
