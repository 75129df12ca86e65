//! Pod management: one watcher per node feeds a manager that runs one worker
//! task per pod.

pub mod env;
pub mod hooks;
pub mod probes;
pub mod runtime;
pub mod status;
pub mod volumes;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::runtime::watcher;
use tokio::sync::{Notify, mpsc, watch};

use crate::ipam::Ipam;
use status::PodRt;
use volumes::Materialized;

/// Everything pod workers share.
pub struct AgentCtx {
    pub client: kube::Client,
    pub state_dir: PathBuf,
    /// Pulled images, unpacked once per digest and shared read-only by containers.
    pub images: oci_image::ImageStore,
    pub ipam: Mutex<Ipam>,
    pub registry: Registry,
    pub host_ip: String,
    /// Where in-pod clients reach the API server (KUBERNETES_SERVICE_*).
    pub api_host: String,
    pub api_port: u16,
}

/// Pods currently handled, by UID; read by the kubelet API and the freezer.
pub type Registry = Arc<RwLock<HashMap<String, Arc<PodEntry>>>>;

pub struct PodEntry {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub node: String,
    pub dir: PathBuf,
    pub start_time: Timestamp,
    pub rt: Mutex<PodRt>,
    pub volumes: Mutex<HashMap<String, Materialized>>,
    /// Wakes the status writer.
    pub changed: Notify,
}

impl PodEntry {
    /// Mutates the runtime state and schedules a status update.
    pub fn update<R>(&self, f: impl FnOnce(&mut PodRt) -> R) -> R {
        let r = {
            let mut rt = self.rt.lock().unwrap();
            let r = f(&mut rt);
            rt.refresh_conditions(Timestamp::now());
            r
        };
        self.changed.notify_one();
        r
    }

    /// Process IDs (= process group IDs) of running containers.
    pub fn pids(&self) -> Vec<u32> {
        let rt = self.rt.lock().unwrap();
        rt.init
            .iter()
            .chain(rt.containers.iter())
            .filter(|c| c.is_running())
            .filter_map(|c| c.pid)
            .collect()
    }
}

pub fn find_pod(registry: &Registry, namespace: &str, name: &str) -> Option<Arc<PodEntry>> {
    registry
        .read()
        .unwrap()
        .values()
        .find(|e| e.namespace == namespace && e.name == name)
        .cloned()
}

/// Why a worker must stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    Run,
    /// The Pod object is gone: kill containers and clean up.
    Gone,
    /// The agent is exiting: stop containers, keep API objects and state.
    AgentShutdown,
}

enum WatchEvent {
    Apply(Pod),
    Delete(Pod),
    Init(String),
    InitApply(Pod),
    InitDone(String),
}

struct Worker {
    pod_tx: watch::Sender<Pod>,
    stop_tx: watch::Sender<Stop>,
}

/// Runs until `shutdown` fires, then stops all containers and returns.
pub async fn run_manager(
    ctx: Arc<AgentCtx>,
    nodes: Vec<String>,
    mut shutdown: watch::Receiver<bool>,
) {
    let (ev_tx, mut ev_rx) = mpsc::channel::<WatchEvent>(256);
    let mut watch_tasks = Vec::new();
    for node in &nodes {
        let api: Api<Pod> = Api::all(ctx.client.clone());
        let cfg = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
        let tx = ev_tx.clone();
        let node = node.clone();
        watch_tasks.push(tokio::spawn(async move {
            let mut stream = watcher(api, cfg).boxed();
            while let Some(ev) = stream.next().await {
                let msg = match ev {
                    Ok(watcher::Event::Apply(p)) => WatchEvent::Apply(p),
                    Ok(watcher::Event::Delete(p)) => WatchEvent::Delete(p),
                    Ok(watcher::Event::Init) => WatchEvent::Init(node.clone()),
                    Ok(watcher::Event::InitApply(p)) => WatchEvent::InitApply(p),
                    Ok(watcher::Event::InitDone) => WatchEvent::InitDone(node.clone()),
                    Err(e) => {
                        tracing::warn!(%node, error = %e, "pod watch failed, retrying");
                        tokio::time::sleep(Duration::from_secs(2)).await;
                        continue;
                    }
                };
                if tx.send(msg).await.is_err() {
                    break;
                }
            }
        }));
    }
    drop(ev_tx);

    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<String>();
    let mut workers: HashMap<String, Worker> = HashMap::new();
    let mut joins = tokio::task::JoinSet::new();
    // Relist bookkeeping: pods missing from a full list are gone.
    let mut listing: HashMap<String, HashSet<String>> = HashMap::new();
    let mut pod_nodes: HashMap<String, String> = HashMap::new();
    let mut synced: HashSet<String> = HashSet::new();
    let mut cleaned = false;

    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            Some(uid) = done_rx.recv() => {
                workers.remove(&uid);
                pod_nodes.remove(&uid);
            }
            ev = ev_rx.recv() => {
                let Some(ev) = ev else { break };
                match ev {
                    WatchEvent::Apply(pod) | WatchEvent::InitApply(pod) => {
                        let Some(uid) = pod.metadata.uid.clone() else { continue };
                        if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
                            listing.entry(node.clone()).or_default().insert(uid.clone());
                            pod_nodes.insert(uid.clone(), node);
                        }
                        if let Some(w) = workers.get(&uid) {
                            let _ = w.pod_tx.send(pod);
                        } else {
                            let (pod_tx, pod_rx) = watch::channel(pod);
                            let (stop_tx, stop_rx) = watch::channel(Stop::Run);
                            workers.insert(uid.clone(), Worker { pod_tx, stop_tx });
                            let ctx = ctx.clone();
                            let done = done_tx.clone();
                            joins.spawn(async move {
                                runtime::run_pod(ctx, pod_rx, stop_rx).await;
                                let _ = done.send(uid);
                            });
                        }
                    }
                    WatchEvent::Delete(pod) => {
                        if let Some(w) = pod.metadata.uid.as_ref().and_then(|u| workers.get(u)) {
                            let _ = w.stop_tx.send(Stop::Gone);
                        }
                    }
                    WatchEvent::Init(node) => {
                        listing.insert(node, HashSet::new());
                    }
                    WatchEvent::InitDone(node) => {
                        let seen = listing.get(&node).cloned().unwrap_or_default();
                        for (uid, w) in &workers {
                            if pod_nodes.get(uid) == Some(&node) && !seen.contains(uid) {
                                let _ = w.stop_tx.send(Stop::Gone);
                            }
                        }
                        synced.insert(node);
                        if !cleaned && nodes.iter().all(|n| synced.contains(n)) {
                            cleaned = true;
                            let live: HashSet<String> = workers.keys().cloned().collect();
                            cleanup_stale(&ctx, &live);
                        }
                    }
                }
            }
        }
    }

    tracing::info!(pods = workers.len(), "stopping all pods");
    for w in workers.values() {
        let _ = w.stop_tx.send(Stop::AgentShutdown);
    }
    for t in watch_tasks {
        t.abort();
    }
    // Workers honour each pod's grace period; don't hang forever.
    let _ = tokio::time::timeout(Duration::from_secs(45), async {
        while joins.join_next().await.is_some() {}
    })
    .await;
}

/// After the first full listing: forget IPs and state of pods that no longer exist.
fn cleanup_stale(ctx: &AgentCtx, live: &HashSet<String>) {
    if let Err(e) = ctx.ipam.lock().unwrap().retain(&|u| live.contains(u)) {
        tracing::warn!(error = %e, "pruning IP allocations");
    }
    let Ok(entries) = std::fs::read_dir(ctx.state_dir.join("pods")) else {
        return;
    };
    for e in entries.flatten() {
        let uid = e.file_name().to_string_lossy().into_owned();
        if !live.contains(&uid) {
            runtime::remove_pod_dir(&e.path());
        }
    }
}

/// SIGSTOP/SIGCONT for every process group of a pod's containers.
pub struct ProcessFreezer {
    pub registry: Registry,
}

impl ProcessFreezer {
    fn signal(
        &self,
        namespace: &str,
        pod: &str,
        sig: nix::sys::signal::Signal,
    ) -> Result<(), String> {
        let entry = find_pod(&self.registry, namespace, pod)
            .ok_or_else(|| format!("pod {namespace}/{pod} is not running on this agent"))?;
        let pids = entry.pids();
        if pids.is_empty() {
            return Err(format!("pod {namespace}/{pod} has no running containers"));
        }
        for pid in pids {
            runtime::signal_group(pid, sig);
        }
        Ok(())
    }

    pub fn freeze(&self, namespace: &str, pod: &str) -> Result<(), String> {
        self.signal(namespace, pod, nix::sys::signal::Signal::SIGSTOP)
    }

    pub fn thaw(&self, namespace: &str, pod: &str) -> Result<(), String> {
        self.signal(namespace, pod, nix::sys::signal::Signal::SIGCONT)
    }
}
