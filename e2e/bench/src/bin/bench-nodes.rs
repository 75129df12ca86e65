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

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::BufRead;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use crd_types::ValkeyNode;
use crd_types::conditions::{self, types};
use crd_types::template::{AutoResize, WorkloadType};
use e2e_kit::testing::{pod_ready, valkey_node};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use kube::runtime::wait::await_condition;
use kube::{Api, Client};
use local_cluster::operator::{self, RunningController};
use local_cluster::{LocalCluster, Options};
use serde::Deserialize;

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
    let client = cluster.client().await?;
    let nodes: Api<ValkeyNode> = Api::namespaced(client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);

    // 1. One at a time, then a batch. Memory with one node is read after the first.
    let mut sequential = Vec::new();
    let mut rss_one = None;
    for i in 0..SEQUENTIAL {
        sequential.extend(create_and_wait(&client, &[format!("seq-{i}")]).await?);
        if rss_one.is_none() {
            rss_one = Some(rss_of(&measured)?);
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
    wait_all(&cluster, &nodes, "WorkloadReady", workload_ready).await?;
    let scale_up = Timestamp::now().duration_since(started);
    // The first stats round after a node starts wakes it (its usage becomes known) and
    // writes status.storage; the window starts after all of that.
    wait_all(&cluster, &nodes, "usage in status.storage", usage_known).await?;
    settle(&measured).await?;
    let mut before = Vec::new();
    for c in &measured {
        before.push(Counters::read(c).await?);
    }
    let window_start = Timestamp::now();
    tokio::time::sleep(idle).await;
    let window_end = Timestamp::now();
    let mut after = Vec::new();
    for c in &measured {
        after.push(Counters::read(c).await?);
    }
    let listed = nodes.list(&Default::default()).await?.items;
    let ready_after = listed.iter().filter(|n| workload_ready(n)).count();
    // The Kubernetes Nodes pvc-resizer reads: those running a node's pod.
    let kube_nodes: BTreeSet<String> = listed
        .iter()
        .filter_map(|n| n.status.as_ref()?.workload.as_ref()?.node_name.clone())
        .collect();
    let rss_hundred = rss_of(&measured)?;
    let pod_count = pods.list(&Default::default()).await?.items.len();

    let audit_log = cluster.audit_log.clone().context("the audit log is on")?;
    cluster.stop()?;
    let events = read_audit(&audit_log)?;
    let audit_bytes = std::fs::metadata(&audit_log)?.len();

    // --- Report.
    let users = (measured[0].username.as_str(), measured[1].username.as_str());
    println!("## Create to Ready\n");
    print_latency(
        &format!("{SEQUENTIAL} nodes one at a time"),
        &steps(&events, &sequential, users)?,
    );
    print_latency(
        &format!("{BATCH} nodes at once"),
        &steps(&events, &batch, users)?,
    );
    println!(
        "{} more nodes at once: all {TOTAL} WorkloadReady {:.1} s after the first create\n",
        TOTAL - SEQUENTIAL - BATCH,
        scale_up.as_secs_f64()
    );

    println!("## Idle API requests\n");
    let window = window_end.duration_since(window_start).as_secs_f64();
    let reconciles: Vec<String> = measured
        .iter()
        .zip(before.iter().zip(&after))
        .map(|(c, (b, a))| format!("{} {}", c.name, a.reconciles - b.reconciles))
        .collect();
    println!(
        "Window {window:.0} s with {ready_after} of {TOTAL} nodes WorkloadReady ({pod_count} pods, \
         {VOLUME} `{SIZED}` volume each, autoResize on); reconciles in the window: {}; \
         audit log {} MiB\n",
        reconciles.join(", "),
        audit_bytes / (1 << 20)
    );
    let costs: Vec<IdleCost> = measured
        .iter()
        .map(|c| idle_cost(c, &events, window_start, window_end))
        .collect();
    println!(
        "Per hour: WATCH = open streams x 3600 / {WATCH_TIMEOUT_SECS:.0} s; the rest = window \
         count x 3600 / {window:.0} s (per node: divided by {TOTAL})\n"
    );
    println!(
        "| controller | WATCH requests (any node count) | Lease requests (any node count) | other requests, {TOTAL} nodes | per idle node |"
    );
    println!("|---|---|---|---|---|");
    for (controller, cost) in measured.iter().zip(&costs) {
        println!(
            "| {} | {:.0} ({} streams) | {:.0} | {:.0} | {:.1} |",
            controller.name,
            cost.watches,
            cost.watches_open,
            cost.leases,
            cost.others,
            cost.per_node
        );
    }
    println!();

    println!("## Kubelet requests (pvc-resizer)\n");
    let (b, a) = (&before[2], &after[2]);
    let calls = a.stats_calls - b.stats_calls;
    let failures = a.stats_failures - b.stats_failures;
    let per_hour = |count: u64| count as f64 * 3600.0 / window;
    println!(
        "GET /stats/summary in the window: {calls} ({failures} failed) to the {} Nodes running \
         the {TOTAL} nodes' pods ({}); per hour {:.0}, per Node-hour {:.1}, per node-hour {:.2}\n",
        kube_nodes.len(),
        kube_nodes.iter().cloned().collect::<Vec<_>>().join(", "),
        per_hour(calls),
        per_hour(calls) / kube_nodes.len().max(1) as f64,
        per_hour(calls) / TOTAL as f64
    );
    let reviews = reviews(&events, window_start, window_end);
    println!(
        "| review (by the kubelet API) | in the window | per hour | per stats call | at (s into the window) |"
    );
    println!("|---|---|---|---|---|");
    for (resource, (users, at)) in &reviews {
        let by: Vec<&str> = users.iter().map(String::as_str).collect();
        println!(
            "| {resource} by {} | {} | {:.0} | {:.2} | {} |",
            if by.is_empty() {
                "-".into()
            } else {
                by.join(", ")
            },
            at.len(),
            per_hour(at.len() as u64),
            at.len() as f64 / calls.max(1) as f64,
            at.iter()
                .map(|t| format!("{t:.1}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    println!();

    println!("## Memory (VmRSS)\n");
    let one = rss_one.context("no first node")?;
    println!("| controller | 1 node | {TOTAL} nodes |");
    println!("|---|---|---|");
    for (i, controller) in measured.iter().enumerate() {
        println!(
            "| {} | {:.1} MiB | {:.1} MiB |",
            controller.name,
            mib(one[i]),
            mib(rss_hundred[i])
        );
    }
    // Stopped first: the run directory holds the volumes' tmpfs mounts, which the stop
    // unmounts. Kept after a failure: the audit log and the components' logs say what went
    // wrong.
    cluster.stop()?;
    let _ = std::fs::remove_dir_all(&run);
    Ok(())
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

fn rss_of(controllers: &[Controller]) -> Result<Vec<u64>> {
    controllers.iter().map(Controller::rss_kib).collect()
}

/// Counters of one controller's /metrics.
struct Counters {
    reconciles: u64,
    stats_calls: u64,
    stats_failures: u64,
}

impl Counters {
    async fn read(controller: &Controller) -> Result<Self> {
        let metrics = controller.metrics().await?;
        let reconcile_runs = format!(
            "valkey_operator_reconcile_runs_total{{controller=\"{}\"}}",
            controller.name
        );
        Ok(Self {
            reconciles: sample(&metrics, &reconcile_runs)?,
            stats_calls: sample(&metrics, STATS_CALLS)?,
            stats_failures: sample(&metrics, STATS_FAILURES)?,
        })
    }
}

/// The value of the series named exactly `series`, 0 when absent.
fn sample(metrics: &str, series: &str) -> Result<u64> {
    let prefix = format!("{series} ");
    let value = metrics
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or("0");
    Ok(value.trim().parse()?)
}

/// A controller process of the run: its ServiceAccount user, PID and metrics address.
struct Controller {
    name: String,
    username: String,
    record: local_cluster::process::Recorded,
    http_addr: String,
}

impl Controller {
    fn find(controllers: &[RunningController], run: &Path, name: &str) -> Result<Self> {
        let running = controllers
            .iter()
            .find(|c| c.process.binary == name)
            .with_context(|| format!("{name} not installed"))?;
        let record = local_cluster::process::recorded(run)?
            .into_iter()
            .find(|r| r.name == name)
            .with_context(|| format!("{name} not recorded"))?;
        Ok(Self {
            name: name.into(),
            username: format!(
                "system:serviceaccount:{}:{}",
                running.process.namespace, running.process.service_account
            ),
            record,
            http_addr: running.http_addr.clone(),
        })
    }

    fn rss_kib(&self) -> Result<u64> {
        if !self.record.is_alive() {
            bail!("{} is not running", self.name);
        }
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.record.pid))?;
        let rss = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .context("no VmRSS")?;
        Ok(rss.trim().trim_end_matches("kB").trim().parse()?)
    }

    async fn metrics(&self) -> Result<String> {
        operator::http_get(&self.http_addr, "/metrics")
            .await
            .with_context(|| format!("{} /metrics", self.name))
    }
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
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

// --- The audit log.

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawEvent {
    stage: String,
    verb: String,
    #[serde(rename = "requestURI")]
    request_uri: String,
    user: RawUser,
    #[serde(default)]
    object_ref: Option<RawObjectRef>,
    #[serde(default)]
    response_status: Option<RawStatus>,
    request_received_timestamp: String,
    stage_timestamp: String,
}

#[derive(Deserialize)]
struct RawUser {
    username: String,
}

#[derive(Deserialize, Default)]
struct RawObjectRef {
    resource: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
}

#[derive(Deserialize)]
struct RawStatus {
    code: Option<u16>,
}

/// One audit event, as much of it as the benchmark uses.
struct AuditEvent {
    stage: String,
    verb: String,
    uri: String,
    user: String,
    resource: String,
    name: Option<String>,
    subresource: Option<String>,
    code: u16,
    received: Timestamp,
    at: Timestamp,
}

impl AuditEvent {
    fn completed(&self) -> bool {
        self.stage == "ResponseComplete" && self.code < 300
    }

    /// `resource` or `resource/subresource`.
    fn what(&self) -> String {
        match &self.subresource {
            Some(sub) => format!("{}/{sub}", self.resource),
            None => self.resource.clone(),
        }
    }

    /// The ValkeyNode the request is about: by object name (`<node>`, `<node>-config`,
    /// `<node>-data`, pod `<node>-0`) or by a `valkey.rs/node=<node>` label selector.
    fn node(&self) -> Option<String> {
        if let Some(name) = &self.name {
            let suffix = match self.resource.as_str() {
                "configmaps" => "-config",
                "persistentvolumeclaims" => "-data",
                "pods" => "-0",
                _ => "",
            };
            return Some(name.strip_suffix(suffix).unwrap_or(name).to_string());
        }
        let selector = self.uri.split_once("labelSelector=")?.1;
        let selector = selector.split('&').next()?.replace("%2F", "/");
        let value = selector.strip_prefix("valkey.rs/node%3D")?;
        Some(value.to_string())
    }
}

fn read_audit(path: &Path) -> Result<Vec<AuditEvent>> {
    let file = std::fs::File::open(path)?;
    let mut events = Vec::new();
    for line in std::io::BufReader::new(file).lines() {
        let line = line?;
        // The last line may be cut short by the API server's shutdown.
        let Ok(raw) = serde_json::from_str::<RawEvent>(&line) else {
            continue;
        };
        let object = raw.object_ref.unwrap_or_default();
        events.push(AuditEvent {
            stage: raw.stage,
            verb: raw.verb,
            uri: raw.request_uri,
            user: raw.user.username,
            resource: object.resource.unwrap_or_default(),
            name: object.name,
            subresource: object.subresource,
            code: raw.response_status.and_then(|s| s.code).unwrap_or(0),
            received: raw.request_received_timestamp.parse()?,
            at: raw.stage_timestamp.parse()?,
        });
    }
    Ok(events)
}

// --- Create to Ready.

/// The seconds each step of one node's start took.
struct Steps {
    /// ValkeyNode created -> service-controller created its Service.
    service: f64,
    /// Service created -> service-controller wrote status.endpoint.
    endpoint: f64,
    /// status.endpoint -> node-controller created the StatefulSet (ConfigMap, PVC first).
    statefulset: f64,
    /// StatefulSet -> its pod created (kube-controller-manager).
    pod_created: f64,
    /// Pod created -> pod Ready (scheduler, volume, node agent, valkey-server, probes).
    pod_start: f64,
    /// Pod Ready -> node-controller wrote WorkloadReady=True.
    node_ready: f64,
    total: f64,
}

impl Steps {
    fn controllers(&self) -> f64 {
        self.service + self.endpoint + self.statefulset + self.node_ready
    }
}

fn steps(events: &[AuditEvent], observed: &[Observed], users: (&str, &str)) -> Result<Vec<Steps>> {
    let (node_user, service_user) = users;
    let first = |name: &str, step: &str, test: &dyn Fn(&AuditEvent) -> bool| {
        events
            .iter()
            .filter(|e| e.completed() && e.node().as_deref() == Some(name) && test(e))
            .map(|e| e.at)
            .min()
            .with_context(|| format!("no audit event for {step} of {name}"))
    };
    let secs = |from: Timestamp, to: Timestamp| to.duration_since(from).as_secs_f64();
    let mut all = Vec::new();
    for o in observed {
        let name = o.name.as_str();
        let created = first(name, "its creation", &|e| {
            e.verb == "create" && e.what() == "valkeynodes"
        })?;
        let service = first(name, "the Service", &|e| {
            e.user == service_user && e.verb == "patch" && e.what() == "services"
        })?;
        let endpoint = first(name, "status.endpoint", &|e| {
            e.user == service_user && e.verb == "patch" && e.what() == "valkeynodes/status"
        })?;
        let statefulset = first(name, "the StatefulSet", &|e| {
            e.user == node_user && e.verb == "patch" && e.what() == "statefulsets"
        })?;
        let pod = first(name, "the pod", &|e| {
            e.verb == "create" && e.what() == "pods"
        })?;
        all.push(Steps {
            service: secs(created, service),
            endpoint: secs(service, endpoint),
            statefulset: secs(endpoint, statefulset),
            pod_created: secs(statefulset, pod),
            pod_start: secs(pod, o.pod_ready),
            node_ready: secs(o.pod_ready, o.node_ready),
            total: secs(created, o.node_ready),
        });
    }
    Ok(all)
}

fn median_max(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let mut sorted: Vec<f64> = values.collect();
    sorted.sort_by(f64::total_cmp);
    let median = match sorted.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    };
    (median, sorted.last().copied().unwrap_or(f64::NAN))
}

/// A table row: the step, who does it, and its value for one node.
type Row = (&'static str, &'static str, fn(&Steps) -> f64);

fn print_latency(title: &str, steps: &[Steps]) {
    println!("{title}: median / max in seconds\n");
    println!("| step | who | median | max |");
    println!("|---|---|---|---|");
    let rows: [Row; 8] = [
        (
            "ValkeyNode created -> Service created",
            "service-controller",
            |s| s.service,
        ),
        (
            "Service created -> status.endpoint written",
            "service-controller",
            |s| s.endpoint,
        ),
        (
            "status.endpoint -> StatefulSet created (ConfigMap, PVC before it)",
            "node-controller",
            |s| s.statefulset,
        ),
        (
            "StatefulSet created -> pod created",
            "kube-controller-manager",
            |s| s.pod_created,
        ),
        (
            "pod created -> pod Ready",
            "scheduler, PVC binding, node agent, valkey, probes",
            |s| s.pod_start,
        ),
        ("pod Ready -> WorkloadReady=True", "node-controller", |s| {
            s.node_ready
        }),
        (
            "**in our controllers** (rows 1, 2, 3, 6)",
            "",
            Steps::controllers,
        ),
        ("**ValkeyNode created -> WorkloadReady=True**", "", |s| {
            s.total
        }),
    ];
    for (step, who, value) in rows {
        let (median, max) = median_max(steps.iter().map(value));
        println!("| {step} | {who} | {median:.3} | {max:.3} |");
    }
    let share: f64 = steps.iter().map(Steps::controllers).sum::<f64>()
        / steps.iter().map(|s| s.total).sum::<f64>();
    println!(
        "\nshare of the total spent in our controllers: {:.1} %\n",
        share * 100.0
    );
}

// --- Idle requests.

/// One controller's idle cost, per hour.
struct IdleCost {
    watches_open: usize,
    watches: f64,
    leases: f64,
    /// Every request but WATCH and Lease.
    others: f64,
    /// Those about a node, divided by the node count.
    per_node: f64,
}

/// What `controller` asked the API server in [start, end): WATCH requests apart (the
/// streams it keeps open, how many it opened in the window, how long those that ended
/// lasted), Lease renewals apart, and every other request by verb and resource and per
/// node. Prints the detail and returns the per-hour figures.
fn idle_cost(
    controller: &Controller,
    events: &[AuditEvent],
    start: Timestamp,
    end: Timestamp,
) -> IdleCost {
    let window = end.duration_since(start).as_secs_f64();
    let per_hour = |count: usize| count as f64 * 3600.0 / window;
    let all: Vec<&AuditEvent> = events
        .iter()
        .filter(|e| e.user == controller.username)
        .collect();
    // Every resource it ever watched: one stream each, re-issued when the server ends it.
    let mut watched: Vec<String> = all
        .iter()
        .filter(|e| e.verb == "watch")
        .map(|e| e.what())
        .collect();
    watched.sort();
    watched.dedup();
    let ours: Vec<&AuditEvent> = all
        .into_iter()
        .filter(|e| e.at >= start && e.at < end)
        .collect();
    let opened = ours
        .iter()
        .filter(|e| e.verb == "watch" && e.stage == "ResponseStarted")
        .count();
    let lengths: Vec<f64> = ours
        .iter()
        .filter(|e| e.verb == "watch" && e.stage == "ResponseComplete")
        .map(|e| e.at.duration_since(e.received).as_secs_f64())
        .collect();
    let requests: Vec<&AuditEvent> = ours
        .into_iter()
        .filter(|e| e.verb != "watch" && e.stage == "ResponseComplete")
        .collect();
    let (leases, others): (Vec<&AuditEvent>, Vec<&AuditEvent>) =
        requests.into_iter().partition(|e| e.resource == "leases");

    let mut lease_verbs: BTreeMap<&str, usize> = BTreeMap::new();
    for e in &leases {
        *lease_verbs.entry(e.verb.as_str()).or_default() += 1;
    }
    let mut by_kind: BTreeMap<String, usize> = BTreeMap::new();
    let mut per_node: HashMap<String, usize> = HashMap::new();
    let mut unattributed = 0;
    for e in &others {
        *by_kind
            .entry(format!("{} {} ({})", e.verb, e.what(), e.code))
            .or_default() += 1;
        match e.node() {
            Some(node) => *per_node.entry(node).or_default() += 1,
            None => unattributed += 1,
        }
    }
    let about_nodes: usize = per_node.values().sum();

    println!("### {}\n", controller.name);
    let lasted = match lengths.len() {
        0 => "none ended in the window".to_string(),
        n => format!(
            "the {n} that ended lasted {:.1} s on average",
            lengths.iter().sum::<f64>() / n as f64
        ),
    };
    println!(
        "- WATCH: {} streams ({}); {opened} opened in the window, {lasted}",
        watched.len(),
        watched.join(", "),
    );
    println!("- Lease: {} requests {lease_verbs:?}", leases.len());
    println!(
        "- everything else: {} requests ({about_nodes} about a node, {unattributed} about \
         none); {} nodes had requests, at most {} each",
        others.len(),
        per_node.len(),
        per_node.values().max().copied().unwrap_or(0)
    );
    for (kind, count) in &by_kind {
        println!("  - {kind}: {count}");
    }
    println!();
    IdleCost {
        watches_open: watched.len(),
        watches: watched.len() as f64 * 3600.0 / WATCH_TIMEOUT_SECS,
        leases: per_hour(leases.len()),
        others: per_hour(others.len()),
        per_node: per_hour(about_nodes) / TOTAL as f64,
    }
}

/// Per review resource (`tokenreviews`, `subjectaccessreviews`), who created them in
/// [start, end) and when (seconds into the window). Only the node agent's kubelet API
/// makes reviews here (the API server's node proxy presents a certificate), and in the
/// idle window only pvc-resizer calls it, so these are the price of its stats calls.
fn reviews(
    events: &[AuditEvent],
    start: Timestamp,
    end: Timestamp,
) -> BTreeMap<&'static str, (BTreeSet<String>, Vec<f64>)> {
    let mut found = BTreeMap::new();
    for resource in ["tokenreviews", "subjectaccessreviews"] {
        let mut users = BTreeSet::new();
        let mut at = Vec::new();
        for e in events
            .iter()
            .filter(|e| e.resource == resource && e.completed() && e.at >= start && e.at < end)
        {
            users.insert(e.user.clone());
            at.push(e.at.duration_since(start).as_secs_f64());
        }
        found.insert(resource, (users, at));
    }
    found
}
