//! One pod's lifecycle: IP, volumes, init containers, supervised app
//! containers with probes and restarts, graceful deletion.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use nix::sys::signal::Signal;
use tokio::sync::watch;
use tokio::time::Instant;

use super::env::{self, ObjectCache, PodFacts};
use super::hooks::{self, PostStart};
use super::probes::{self, Kind, ProbeSet, Target};
use super::status::{CState, ContainerRt, PodRt};
use super::volumes::{self, Materialized, TokenCache, VolKind, VolumeCtx};
use super::{AgentCtx, PodEntry, Stop};
use crate::container_exec::{ContainerSpec, DEFAULT_PATH, ExecInSpec};
use crate::images;

/// Kubelet-style restart back-off for the n-th consecutive restart (n ≥ 1):
/// 10s doubling, capped at 60s to keep tests fast.
pub fn backoff_delay(n: u32) -> Duration {
    let secs = 10u64.saturating_mul(1u64 << n.saturating_sub(1).min(16));
    Duration::from_secs(secs.min(60))
}

/// A run this long resets the back-off (the kubelet uses 2× the cap).
const BACKOFF_RESET: Duration = Duration::from_secs(120);

#[derive(Debug, Clone, Copy, PartialEq)]
enum Interrupt {
    Deleting(Duration),
    Gone,
    Shutdown,
}

fn grace_of(pod: &Pod) -> Duration {
    let secs = pod
        .metadata
        .deletion_grace_period_seconds
        .or(pod
            .spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds))
        .unwrap_or(30)
        .max(0);
    Duration::from_secs(secs as u64)
}

fn check_interrupt(pod: &Pod, stop: Stop) -> Option<Interrupt> {
    match stop {
        Stop::Gone => Some(Interrupt::Gone),
        Stop::AgentShutdown => Some(Interrupt::Shutdown),
        Stop::Run if pod.metadata.deletion_timestamp.is_some() => {
            Some(Interrupt::Deleting(grace_of(pod)))
        }
        Stop::Run => None,
    }
}

struct Signals {
    pod_rx: watch::Receiver<Pod>,
    stop_rx: watch::Receiver<Stop>,
}

impl Signals {
    fn current(&self) -> Option<Interrupt> {
        check_interrupt(&self.pod_rx.borrow(), *self.stop_rx.borrow())
    }

    /// Sleeps for `d` unless the pod is deleted or the agent stops first.
    async fn sleep(&mut self, d: Duration) -> Option<Interrupt> {
        let deadline = Instant::now() + d;
        loop {
            if let Some(i) = self.current() {
                return Some(i);
            }
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => return None,
                r = self.pod_rx.changed() => if r.is_err() { return Some(Interrupt::Gone) },
                r = self.stop_rx.changed() => if r.is_err() { return Some(Interrupt::Shutdown) },
            }
        }
    }
}

pub async fn run_pod(
    ctx: Arc<AgentCtx>,
    pod_rx: watch::Receiver<Pod>,
    stop_rx: watch::Receiver<Stop>,
) {
    let pod = pod_rx.borrow().clone();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let spec = pod.spec.clone().unwrap_or_default();
    let node = spec.node_name.clone().unwrap_or_default();
    let dir = ctx.state_dir.join("pods").join(&uid);
    let status = pod.status.clone().unwrap_or_default();
    let already_done = matches!(status.phase.as_deref(), Some("Succeeded" | "Failed"));

    // Continue restart counts of a previous agent run.
    let base_count = |statuses: &Option<Vec<k8s_openapi::api::core::v1::ContainerStatus>>,
                      c: &Container| {
        statuses
            .iter()
            .flatten()
            .find(|s| s.name == c.name)
            .map(|s| s.restart_count + i32::from(s.container_id.is_some()))
            .unwrap_or(0)
    };
    let mk = |statuses: &Option<Vec<_>>, cs: &[Container]| -> Vec<ContainerRt> {
        cs.iter()
            .map(|c| {
                let mut rt = ContainerRt::new(&c.name, c.image.as_deref().unwrap_or_default());
                rt.restart_count = if already_done {
                    0
                } else {
                    base_count(statuses, c)
                };
                rt
            })
            .collect()
    };
    let init = mk(
        &status.init_container_statuses,
        spec.init_containers.as_deref().unwrap_or_default(),
    );
    let containers = mk(&status.container_statuses, &spec.containers);
    let start_time = status
        .start_time
        .map(|t| t.0)
        .unwrap_or_else(Timestamp::now);
    let entry = Arc::new(PodEntry {
        uid: uid.clone(),
        namespace: ns.clone(),
        name: name.clone(),
        node,
        dir: dir.clone(),
        start_time,
        rt: Mutex::new(PodRt::new(init, containers, &ctx.host_ip, start_time)),
        volumes: Mutex::new(HashMap::new()),
        changed: tokio::sync::Notify::new(),
    });
    ctx.registry
        .write()
        .unwrap()
        .insert(uid.clone(), entry.clone());
    tracing::info!(pod = %format!("{ns}/{name}"), %uid, "pod added");

    let mut sig = Signals { pod_rx, stop_rx };
    let writer = if already_done {
        None
    } else {
        Some(tokio::spawn(status_writer(
            ctx.clone(),
            entry.clone(),
            sig.pod_rx.clone(),
        )))
    };

    let interrupt = if already_done {
        // Completed pods are never re-run; just wait for their deletion.
        loop {
            if let Some(i) = sig.sleep(Duration::from_secs(3600)).await {
                break i;
            }
        }
    } else {
        lifecycle(&ctx, &entry, &mut sig).await
    };

    if let Some(w) = writer {
        w.abort();
    }
    // Only containers this agent stopped: a pod found terminating after an agent restart has
    // no runtime state worth writing over what the API holds.
    let stopped_here = entry
        .rt
        .lock()
        .unwrap()
        .containers
        .iter()
        .any(|c| matches!(c.state, CState::Terminated { .. }));
    if matches!(interrupt, Interrupt::Deleting(_))
        && stopped_here
        && let Some(value) = current_status(&entry, &sig.pod_rx)
    {
        // As the kubelet does: the containers' terminated states (exit codes) reach the API
        // before the pod goes, so a watcher sees how each one ended.
        let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
        if let Err(e) = patch_status(&api, &entry, &value).await {
            tracing::info!(pod = %format!("{ns}/{name}"), error = %e, "writing the final pod status");
        }
    }
    match interrupt {
        Interrupt::Shutdown => {}
        Interrupt::Deleting(_) | Interrupt::Gone => {
            remove_pod_dir(&dir);
            if let Err(e) = ctx.ipam.lock().unwrap().release(&uid) {
                tracing::warn!(error = %e, "releasing pod IP");
            }
            if matches!(interrupt, Interrupt::Deleting(_)) {
                let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
                let dp = DeleteParams {
                    grace_period_seconds: Some(0),
                    preconditions: Some(Preconditions {
                        uid: Some(uid.clone()),
                        resource_version: None,
                    }),
                    ..Default::default()
                };
                match api.delete(&name, &dp).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
                    Err(e) => {
                        tracing::warn!(pod = %format!("{ns}/{name}"), error = %e, "deleting pod")
                    }
                }
            }
            tracing::info!(pod = %format!("{ns}/{name}"), %uid, "pod removed");
        }
    }
    ctx.registry.write().unwrap().remove(&uid);
}

/// Runs the pod until it must stop; returns why, with containers stopped.
async fn lifecycle(ctx: &Arc<AgentCtx>, entry: &Arc<PodEntry>, sig: &mut Signals) -> Interrupt {
    let label = format!("{}/{}", entry.namespace, entry.name);
    if let Some(i) = sig.current() {
        return i;
    }
    // 1. Pod IP.
    let ip = loop {
        let r = ctx.ipam.lock().unwrap().allocate(&entry.uid);
        match r {
            Ok(ip) => break ip,
            Err(e) => {
                entry.update(|rt| rt.message = Some(format!("no pod IP: {e:#}")));
                if let Some(i) = sig.sleep(Duration::from_secs(5)).await {
                    return i;
                }
            }
        }
    };
    entry.update(|rt| rt.pod_ip = Some(ip.to_string()));
    let facts = PodFacts {
        pod_ip: ip.to_string(),
        host_ip: ctx.host_ip.clone(),
        node_name: entry.node.clone(),
    };

    // 2. Volumes.
    let pod = sig.pod_rx.borrow().clone();
    let fs_group = pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| s.fs_group)
        .map(|g| g as u32);
    let mut tokens = TokenCache::default();
    loop {
        match prepare_volumes(ctx, entry, &pod, &facts, &mut tokens, fs_group).await {
            Ok(()) => break,
            Err(msg) => {
                tracing::debug!(pod = %label, %msg, "volumes not ready");
                entry.update(|rt| {
                    rt.message = Some(msg.clone());
                    for c in rt.init.iter_mut().chain(rt.containers.iter_mut()) {
                        c.state = CState::waiting("ContainerCreating", Some(msg.clone()));
                    }
                });
                if let Some(i) = sig.sleep(Duration::from_secs(3)).await {
                    return i;
                }
            }
        }
    }
    entry.update(|rt| {
        rt.message = None;
        rt.sandbox_ready = true;
        for c in rt.init.iter_mut().chain(rt.containers.iter_mut()) {
            c.state = CState::waiting("PodInitializing", None);
        }
    });

    let spec = pod.spec.clone().unwrap_or_default();
    let restart_policy = spec
        .restart_policy
        .clone()
        .unwrap_or_else(|| "Always".into());

    // 3. Init containers, in order.
    for (idx, c) in spec.init_containers.iter().flatten().enumerate() {
        if c.restart_policy.as_deref() == Some("Always") {
            tracing::warn!(pod = %label, container = %c.name, "sidecar init containers run like regular init containers");
        }
        let runner = Runner::new(ctx, entry, &pod, c.clone(), idx, true, ip, &restart_policy);
        let (stop_tx, stop_rx) = watch::channel(None);
        let mut task = tokio::spawn(runner.run(stop_rx));
        let finished = loop {
            tokio::select! {
                r = &mut task => break Some(r.unwrap_or(false)),
                i = sig.sleep(Duration::from_secs(10)) => {
                    if let Some(i) = i {
                        let _ = stop_tx.send(Some(grace_for(i, &pod)));
                        let _ = task.await;
                        return i;
                    }
                    refresh_volumes(ctx, entry, &pod, &facts, &mut tokens, fs_group).await;
                }
            }
        };
        if finished != Some(true) {
            // Init failed for good (restartPolicy Never): the pod is Failed.
            return idle(sig).await;
        }
    }

    // 4. App containers, supervised in parallel.
    let (stop_tx, stop_rx) = watch::channel(None);
    let mut set = tokio::task::JoinSet::new();
    for (idx, c) in spec.containers.iter().enumerate() {
        let runner = Runner::new(ctx, entry, &pod, c.clone(), idx, false, ip, &restart_policy);
        set.spawn(runner.run(stop_rx.clone()));
    }
    loop {
        tokio::select! {
            Some(_) = set.join_next() => {
                if set.is_empty() {
                    tracing::info!(pod = %label, "all containers finished");
                    return idle(sig).await;
                }
            }
            i = sig.sleep(Duration::from_secs(10)) => {
                if let Some(i) = i {
                    let _ = stop_tx.send(Some(grace_for(i, &pod)));
                    while set.join_next().await.is_some() {}
                    return i;
                }
                refresh_volumes(ctx, entry, &pod, &facts, &mut tokens, fs_group).await;
            }
        }
    }
}

fn grace_for(i: Interrupt, pod: &Pod) -> Duration {
    match i {
        Interrupt::Deleting(g) => g,
        Interrupt::Gone | Interrupt::Shutdown => grace_of(pod).min(Duration::from_secs(30)),
    }
}

async fn idle(sig: &mut Signals) -> Interrupt {
    loop {
        if let Some(i) = sig.sleep(Duration::from_secs(3600)).await {
            return i;
        }
    }
}

async fn fetch_objects(client: &kube::Client, pod: &Pod) -> Result<ObjectCache, String> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let (cms, secrets) = env::referenced_objects(pod);
    let mut cache = ObjectCache::default();
    let cm_api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    for n in cms {
        let v = cm_api
            .get_opt(&n)
            .await
            .map_err(|e| format!("reading configmap {n}: {e}"))?;
        cache.config_maps.insert(n, v);
    }
    let s_api: Api<Secret> = Api::namespaced(client.clone(), &ns);
    for n in secrets {
        let v = s_api
            .get_opt(&n)
            .await
            .map_err(|e| format!("reading secret {n}: {e}"))?;
        cache.secrets.insert(n, v);
    }
    Ok(cache)
}

async fn prepare_volumes(
    ctx: &AgentCtx,
    entry: &PodEntry,
    pod: &Pod,
    facts: &PodFacts,
    tokens: &mut TokenCache,
    fs_group: Option<u32>,
) -> Result<(), String> {
    std::fs::create_dir_all(entry.dir.join("volumes")).map_err(|e| e.to_string())?;
    let objects = fetch_objects(&ctx.client, pod).await?;
    let mut vctx = VolumeCtx {
        client: &ctx.client,
        pod,
        facts,
        objects: &objects,
        pod_dir: &entry.dir,
        tokens,
    };
    let vols = volumes::materialize_all(&mut vctx, fs_group).await?;
    *entry.volumes.lock().unwrap() = vols;
    Ok(())
}

/// Re-renders configMap/secret/projected volumes so updates and token
/// refreshes reach running containers.
async fn refresh_volumes(
    ctx: &AgentCtx,
    entry: &PodEntry,
    pod: &Pod,
    facts: &PodFacts,
    tokens: &mut TokenCache,
    fs_group: Option<u32>,
) {
    if let Err(e) = prepare_volumes(ctx, entry, pod, facts, tokens, fs_group).await {
        tracing::debug!(pod = %entry.name, error = %e, "volume refresh failed");
    }
}

/// Sends a signal to a container's process group; errors (gone) are ignored.
pub fn signal_group(pid: u32, sig: Signal) {
    let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid as i32), sig);
}

/// Start time of a process in clock ticks since boot (field 22 of stat).
pub fn proc_start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(19)?.parse().ok()
}

/// Kills container processes a previous agent run left behind.
pub fn kill_leftovers(state_dir: &Path) {
    let Ok(pods) = std::fs::read_dir(state_dir.join("pods")) else {
        return;
    };
    for pod in pods.flatten() {
        let Ok(cs) = std::fs::read_dir(pod.path()) else {
            continue;
        };
        for c in cs.flatten() {
            let pidfile = c.path().join("pid");
            let Ok(text) = std::fs::read_to_string(&pidfile) else {
                continue;
            };
            let mut it = text.split_whitespace();
            let (Some(Ok(pid)), Some(Ok(start))) = (
                it.next().map(str::parse::<u32>),
                it.next().map(str::parse::<u64>),
            ) else {
                continue;
            };
            if proc_start_time(pid) == Some(start) {
                tracing::info!(pid, path = %pidfile.display(), "killing leftover container process");
                signal_group(pid, Signal::SIGKILL);
            }
            let _ = std::fs::remove_file(&pidfile);
        }
    }
}

/// Removes a pod's state dir unless something is still mounted below it
/// (which would make recursive deletion reach into a volume).
pub fn remove_pod_dir(dir: &Path) {
    if std::env::var_os("E2E_KEEP_RUN_DIRS").is_some() {
        // A post-mortem wants the containers' logs of pods already gone.
        return;
    }
    let mounted = std::fs::read_to_string("/proc/self/mountinfo")
        .map(|m| {
            m.lines().any(|l| {
                l.split_whitespace()
                    .nth(4)
                    .is_some_and(|mp| Path::new(mp).starts_with(dir))
            })
        })
        .unwrap_or(true);
    if mounted {
        tracing::warn!(dir = %dir.display(), "not removing pod dir: something is mounted below it");
        return;
    }
    if let Err(e) = std::fs::remove_dir_all(dir)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(dir = %dir.display(), error = %e, "removing pod dir");
    }
}

/// Supervises one container: start, probes, restarts, stop.
struct Runner {
    ctx: Arc<AgentCtx>,
    entry: Arc<PodEntry>,
    pod: Pod,
    c: Container,
    idx: usize,
    is_init: bool,
    ip: Ipv4Addr,
    restart_policy: String,
    dir: PathBuf,
}

/// A started container process.
struct Launched {
    child: tokio::process::Child,
    pid: u32,
    exec: ExecInSpec,
}

enum RunEnd {
    Exited(ExitStatus, Option<String>),
    Stopped(ExitStatus),
}

impl Runner {
    #[allow(clippy::too_many_arguments)]
    fn new(
        ctx: &Arc<AgentCtx>,
        entry: &Arc<PodEntry>,
        pod: &Pod,
        c: Container,
        idx: usize,
        is_init: bool,
        ip: Ipv4Addr,
        restart_policy: &str,
    ) -> Self {
        let dir = entry.dir.join(&c.name);
        Self {
            ctx: ctx.clone(),
            entry: entry.clone(),
            pod: pod.clone(),
            c,
            idx,
            is_init,
            ip,
            restart_policy: restart_policy.to_string(),
            dir,
        }
    }

    fn update(&self, f: impl FnOnce(&mut ContainerRt)) {
        self.entry.update(|rt| {
            let c = if self.is_init {
                &mut rt.init[self.idx]
            } else {
                &mut rt.containers[self.idx]
            };
            f(c)
        })
    }

    fn restart_count(&self) -> i32 {
        let rt = self.entry.rt.lock().unwrap();
        if self.is_init {
            rt.init[self.idx].restart_count
        } else {
            rt.containers[self.idx].restart_count
        }
    }

    fn should_restart(&self, exit_code: i32) -> bool {
        match (self.is_init, self.restart_policy.as_str()) {
            (_, "Never") => false,
            (true, _) | (false, "OnFailure") => exit_code != 0,
            _ => true,
        }
    }

    /// Returns true when the container finished successfully for good.
    async fn run(self, mut stop: watch::Receiver<Option<Duration>>) -> bool {
        let label = format!(
            "{}/{}/{}",
            self.entry.namespace, self.entry.name, self.c.name
        );
        let mut consecutive = 0u32;
        let mut pull_failures = 0u32;
        loop {
            if stop.borrow().is_some() {
                return false;
            }
            let mut launched = match self.launch().await {
                Ok(l) => {
                    pull_failures = 0;
                    l
                }
                Err((reason, message)) => {
                    tracing::info!(container = %label, reason, %message, "container cannot start");
                    self.update(|c| c.state = CState::waiting(reason, Some(message.clone())));
                    let retry = if reason == "ErrImagePull" {
                        // Like a kubelet: ErrImagePull, then ImagePullBackOff until the next try.
                        pull_failures += 1;
                        if wait_stop(&mut stop, Duration::from_secs(2)).await {
                            return false;
                        }
                        let image = self.c.image.clone().unwrap_or_default();
                        self.update(|c| {
                            c.state = CState::waiting(
                                "ImagePullBackOff",
                                Some(format!("Back-off pulling image {image:?}: {message}")),
                            )
                        });
                        pull_backoff(pull_failures)
                    } else {
                        Duration::from_secs(5)
                    };
                    if wait_stop(&mut stop, retry).await {
                        return false;
                    }
                    continue;
                }
            };
            let started_at = Timestamp::now();
            let t0 = Instant::now();
            tracing::info!(container = %label, pid = launched.pid, "container started");
            // Probes and readiness wait for postStart, as with a kubelet.
            let end = match self.post_start(&mut launched, &mut stop).await {
                Some(end) => end,
                None => {
                    let mut probes = ProbeSet::new(&self.c, t0);
                    let initial_ready = probes.ready();
                    let initial_started = probes.started;
                    self.update(|c| {
                        c.state = CState::Running { started_at };
                        c.pid = Some(launched.pid);
                        c.started = initial_started;
                        c.ready = !self.is_init && initial_ready;
                    });
                    self.watch_running(launched, &mut probes, &mut stop).await
                }
            };
            let (status, probe_msg, stopped) = match end {
                RunEnd::Exited(s, m) => (s, m, false),
                RunEnd::Stopped(s) => (s, None, true),
            };
            // Empty when the container started (the file is opened before its setup).
            let start_error = std::fs::read_to_string(self.dir.join("exec-error"))
                .ok()
                .filter(|m| !m.trim().is_empty());
            let exit_code = status
                .code()
                .or_else(|| std::os::unix::process::ExitStatusExt::signal(&status).map(|s| 128 + s))
                .unwrap_or(-1);
            let signal = std::os::unix::process::ExitStatusExt::signal(&status);
            let (reason, message) = match (&start_error, exit_code) {
                (Some(msg), _) => ("StartError".to_string(), Some(msg.clone())),
                (None, 0) => ("Completed".to_string(), probe_msg),
                (None, _) => ("Error".to_string(), probe_msg),
            };
            tracing::info!(container = %label, exit_code, %reason, "container exited");
            let terminated = CState::Terminated {
                exit_code,
                signal,
                reason,
                message,
                started_at: Some(started_at),
                finished_at: Timestamp::now(),
            };
            let _ = std::fs::remove_file(self.dir.join("pid"));
            let restart = !stopped && self.should_restart(exit_code);
            self.update(|c| {
                c.state = terminated;
                // Init containers report ready once completed.
                c.ready = self.is_init && !restart && !stopped && exit_code == 0;
                c.started = false;
                c.done = !restart && !stopped;
            });
            if stopped {
                return false;
            }
            if !restart {
                return exit_code == 0;
            }
            if t0.elapsed() >= BACKOFF_RESET {
                consecutive = 0;
            }
            consecutive += 1;
            let delay = backoff_delay(consecutive);
            let msg = format!(
                "back-off {}s restarting failed container={} pod={}_{}({})",
                delay.as_secs(),
                self.c.name,
                self.entry.name,
                self.entry.namespace,
                self.entry.uid
            );
            self.update(|c| {
                c.last_state = Some(c.state.clone());
                c.state = CState::waiting("CrashLoopBackOff", Some(msg));
                c.restart_count += 1;
            });
            if wait_stop(&mut stop, delay).await {
                return false;
            }
        }
    }

    /// Waits for exit, running probes; kills on liveness/startup failure or stop.
    async fn watch_running(
        &self,
        mut l: Launched,
        probes: &mut ProbeSet,
        stop: &mut watch::Receiver<Option<Duration>>,
    ) -> RunEnd {
        let target = self.target(&l);
        loop {
            let due = if self.is_init {
                None
            } else {
                probes.next_due()
            };
            let far = Instant::now() + Duration::from_secs(3600);
            tokio::select! {
                s = l.child.wait() => {
                    let s = s.unwrap_or_else(|_| std::os::unix::process::ExitStatusExt::from_raw(1 << 8));
                    // Background children of the container die with it.
                    signal_group(l.pid, Signal::SIGKILL);
                    return RunEnd::Exited(s, None);
                }
                _ = stop.changed() => {
                    let grace = stop.borrow().unwrap_or_default();
                    return RunEnd::Stopped(self.kill(&mut l, grace).await);
                }
                _ = tokio::time::sleep_until(due.unwrap_or(far)) => {
                    let now = Instant::now();
                    let mut kill_msg = None;
                    for t in probes.active() {
                        if t.next_at() > now {
                            continue;
                        }
                        let result = probes::check(&t.probe, &target, t.timing.timeout).await;
                        let ok = result.is_ok();
                        if let Err(m) = &result {
                            tracing::debug!(container = %self.c.name, kind = ?t.kind, msg = %m, "probe failed");
                        }
                        t.last_message = result.err();
                        match (t.kind, t.record(ok, Instant::now())) {
                            (Kind::Liveness, Some(false)) | (Kind::Startup, Some(false)) => {
                                let what = if t.kind == Kind::Liveness { "Liveness" } else { "Startup" };
                                kill_msg = Some(format!(
                                    "{what} probe failed: {}",
                                    t.last_message.clone().unwrap_or_default()
                                ));
                            }
                            _ => {}
                        }
                    }
                    if let Some(st) = &probes.startup
                        && st.result
                        && !probes.started
                    {
                        probes.started = true;
                    }
                    let (started, ready) = (probes.started, probes.ready());
                    self.update(|c| {
                        c.started = started;
                        c.ready = ready;
                    });
                    if let Some(msg) = kill_msg {
                        tracing::info!(container = %self.c.name, %msg, "killing container");
                        let grace = self
                            .c
                            .liveness_probe
                            .as_ref()
                            .and_then(|p| p.termination_grace_period_seconds)
                            .map(|s| Duration::from_secs(s.max(1) as u64))
                            .unwrap_or_else(|| grace_of(&self.pod));
                        let s = self.kill(&mut l, grace).await;
                        return RunEnd::Exited(s, Some(msg));
                    }
                }
            }
        }
    }

    /// Where probes and hooks reach this run of the container.
    fn target(&self, l: &Launched) -> Target {
        Target {
            pod_ip: self.ip,
            container: self.c.clone(),
            exec: Some(l.exec.clone()),
        }
    }

    /// Runs the postStart hook, if any; Some when the run ended meanwhile.
    async fn post_start(
        &self,
        l: &mut Launched,
        stop: &mut watch::Receiver<Option<Duration>>,
    ) -> Option<RunEnd> {
        let h = self.c.lifecycle.as_ref()?.post_start.as_ref()?;
        match hooks::post_start(h, &self.target(l), &mut l.child, stop).await {
            PostStart::Done => None,
            PostStart::Exited(s) => {
                signal_group(l.pid, Signal::SIGKILL);
                Some(RunEnd::Exited(s, None))
            }
            PostStart::Failed(msg) => {
                tracing::info!(container = %self.c.name, %msg, "postStart hook failed, killing container");
                // Kubelet semantics: killed like any container (preStop included).
                let s = self.kill(l, grace_of(&self.pod)).await;
                Some(RunEnd::Exited(
                    s,
                    Some(format!("PostStartHookError: {msg}")),
                ))
            }
            PostStart::Stop(grace) => Some(RunEnd::Stopped(self.kill(l, grace).await)),
        }
    }

    /// Stops a running container: preStop within `grace`, then SIGTERM with
    /// what is left of it. The kubelet skips preStop for a zero grace period.
    async fn kill(&self, l: &mut Launched, grace: Duration) -> ExitStatus {
        let mut grace = grace;
        if let Some(h) = self
            .c
            .lifecycle
            .as_ref()
            .and_then(|lc| lc.pre_stop.as_ref())
            && !grace.is_zero()
        {
            let who = format!(
                "{}/{}/{}",
                self.entry.namespace, self.entry.name, self.c.name
            );
            match hooks::pre_stop(h, &who, &self.target(l), &mut l.child, grace).await {
                Ok(rest) => grace = rest,
                Err(s) => {
                    // Exited during the hook: only background children are left.
                    signal_group(l.pid, Signal::SIGKILL);
                    return s;
                }
            }
        }
        terminate(&mut l.child, l.pid, grace).await
    }

    /// Pulls the image, resolves env and mounts, and starts the process.
    async fn launch(&self) -> Result<Launched, (&'static str, String)> {
        let cfg_err = |m: String| ("CreateContainerConfigError", m);
        let pod = &self.pod;
        let spec = pod.spec.clone().unwrap_or_default();
        let image_name = self.c.image.clone().unwrap_or_default();
        let policy = images::pull_policy(self.c.image_pull_policy.as_deref(), &image_name);
        let image = self
            .ctx
            .images
            .ensure(&image_name, policy)
            .await
            .map_err(|e| (images::pull_failure_reason(&e), e.to_string()))?;
        let image_id = format!("{}@{}", image.reference.repository, image.manifest);
        self.update(|c| c.image_id = Some(image_id));
        let facts = PodFacts {
            pod_ip: self.ip.to_string(),
            host_ip: self.ctx.host_ip.clone(),
            node_name: self.entry.node.clone(),
        };
        let objects = fetch_objects(&self.ctx.client, pod)
            .await
            .map_err(cfg_err)?;
        let mut envs =
            env::resolve_env(pod, &self.c, &facts, &objects).map_err(|e| cfg_err(e.0))?;
        let hostname = spec
            .hostname
            .clone()
            .unwrap_or_else(|| self.entry.name.clone());

        let psc = spec.security_context.clone().unwrap_or_default();
        let csc = self.c.security_context.clone().unwrap_or_default();
        let (image_uid, image_gid) =
            images::image_user(image.config.user.as_deref(), &image.rootfs)
                .map_err(|m| ("CreateContainerError", m))?;
        let pod_uid = csc.run_as_user.or(psc.run_as_user).map(|u| u as u32);
        let uid = pod_uid.or(image_uid);
        let gid = csc
            .run_as_group
            .or(psc.run_as_group)
            .map(|g| g as u32)
            .or(if pod_uid.is_none() { image_gid } else { None });
        let non_root = csc.run_as_non_root.or(psc.run_as_non_root) == Some(true);
        if non_root && uid.unwrap_or(0) == 0 {
            return Err(cfg_err(
                "container has runAsNonRoot and image will run as root".into(),
            ));
        }
        let fs_group = psc.fs_group.map(|g| g as u32);
        let mut groups: Vec<u32> = psc
            .supplemental_groups
            .iter()
            .flatten()
            .map(|g| *g as u32)
            .collect();
        groups.extend(fs_group);

        envs = images::merge_env(&image.config.env, envs);
        let defaults = [
            ("PATH", DEFAULT_PATH.to_string()),
            ("HOSTNAME", hostname.clone()),
            (
                "HOME",
                if uid.unwrap_or(0) == 0 { "/root" } else { "/" }.to_string(),
            ),
            ("KUBERNETES_SERVICE_HOST", self.ctx.api_host.clone()),
            ("KUBERNETES_SERVICE_PORT", self.ctx.api_port.to_string()),
            (
                "KUBERNETES_SERVICE_PORT_HTTPS",
                self.ctx.api_port.to_string(),
            ),
        ];
        for (k, v) in defaults.into_iter().rev() {
            if !envs.iter().any(|(n, _)| n == k) {
                envs.insert(0, (k.to_string(), v));
            }
        }

        let command = env::expand_all(self.c.command.as_deref().unwrap_or_default(), &envs);
        let args = env::expand_all(self.c.args.as_deref().unwrap_or_default(), &envs);
        let argv = images::container_argv(&image.config, &command, &args, self.ip)
            .map_err(|m| ("CreateContainerError", m))?;
        images::pin_exporter_listen_address(&argv.argv, &mut envs, self.ip);

        let vols: HashMap<String, Materialized> = self.entry.volumes.lock().unwrap().clone();
        let mounts = volumes::plan_mounts(&self.c, &vols, &envs).map_err(cfg_err)?;
        // Missing subPaths are created as directories, like the kubelet does.
        for m in &mounts {
            if !m.source.exists() {
                std::fs::create_dir_all(&m.source).map_err(|e| {
                    cfg_err(format!("creating subPath {}: {e}", m.source.display()))
                })?;
            }
        }
        if uid.is_some() || fs_group.is_some() {
            for vm in self.c.volume_mounts.iter().flatten() {
                if let Some(v) = vols.get(&vm.name)
                    && matches!(v.kind, VolKind::EmptyDir | VolKind::Pvc { .. })
                    && !v.read_only
                    && let Err(e) = volumes::apply_ownership(&v.path, uid, fs_group)
                {
                    tracing::warn!(volume = %vm.name, error = %e, "setting volume ownership");
                }
            }
        }

        let io_err = |what: &str, e: std::io::Error| ("StartError", format!("{what}: {e}"));
        std::fs::create_dir_all(self.dir.join("etc")).map_err(|e| io_err("state dir", e))?;
        let etc = self
            .write_etc_files(&hostname)
            .map_err(|e| io_err("etc files", e))?;
        let restart = self.restart_count();
        let log_path = self.dir.join(format!("{restart}.log"));
        let log = std::fs::File::create(&log_path).map_err(|e| io_err("log file", e))?;
        let log2 = log.try_clone().map_err(|e| io_err("log file", e))?;
        let error_file = self.dir.join("exec-error");
        let _ = std::fs::remove_file(&error_file);
        let root = self.dir.join("root");
        let workdir = self
            .c
            .working_dir
            .clone()
            .or(image.config.working_dir.clone())
            .filter(|d| !d.is_empty())
            .unwrap_or_else(|| "/".into());
        // Each start gets a fresh writable layer, as a new container would.
        let layer = self.dir.join("layer");
        let _ = std::fs::remove_dir_all(&layer);
        let cspec = ContainerSpec {
            root: root.clone(),
            image_root: image.rootfs.clone(),
            layer,
            read_only_root: csc.read_only_root_filesystem == Some(true),
            scratch: self.dir.join("scratch"),
            etc_files: etc,
            mounts,
            hostname,
            workdir: workdir.clone(),
            argv: argv.argv.clone(),
            env: envs.clone(),
            uid,
            gid,
            groups: groups.clone(),
            error_file,
        };
        let spec_path = self.dir.join("spec.json");
        std::fs::write(
            &spec_path,
            serde_json::to_vec_pretty(&cspec).map_err(|e| ("StartError", e.to_string()))?,
        )
        .map_err(|e| io_err("spec file", e))?;
        let child = tokio::process::Command::new("/proc/self/exe")
            .arg("run-container")
            .arg("--spec")
            .arg(&spec_path)
            .stdin(std::process::Stdio::null())
            .stdout(log)
            .stderr(log2)
            .process_group(0)
            .spawn()
            .map_err(|e| io_err("spawning container", e))?;
        let pid = child.id().unwrap_or_default();
        if let Some(start) = proc_start_time(pid) {
            let _ = std::fs::write(self.dir.join("pid"), format!("{pid} {start}\n"));
        }
        Ok(Launched {
            child,
            pid,
            exec: ExecInSpec {
                pid,
                root,
                workdir,
                argv: vec![],
                env: envs,
                uid,
                gid,
                groups,
            },
        })
    }

    /// /etc/hosts, /etc/resolv.conf and /etc/hostname for the container.
    fn write_etc_files(&self, hostname: &str) -> std::io::Result<Vec<(PathBuf, String)>> {
        let spec = self.pod.spec.clone().unwrap_or_default();
        let ns = &self.entry.namespace;
        let mut hosts = String::from(
            "# Kubernetes-managed hosts file (node-agent).\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
        );
        match &spec.subdomain {
            Some(sub) if !sub.is_empty() => hosts.push_str(&format!(
                "{}\t{hostname}.{sub}.{ns}.svc.cluster.local\t{hostname}\n",
                self.ip
            )),
            _ => hosts.push_str(&format!("{}\t{hostname}\n", self.ip)),
        }
        for ha in spec.host_aliases.iter().flatten() {
            hosts.push_str(&format!(
                "{}\t{}\n",
                ha.ip,
                ha.hostnames.clone().unwrap_or_default().join("\t")
            ));
        }
        let host_resolv = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
        let resolv = format!(
            "search {ns}.svc.cluster.local svc.cluster.local cluster.local\n{}",
            host_resolv
                .lines()
                .filter(|l| !l.starts_with("search"))
                .map(|l| format!("{l}\n"))
                .collect::<String>()
        );
        let etc = self.dir.join("etc");
        let mut out = Vec::new();
        for (name, content) in [
            ("hosts", hosts),
            ("resolv.conf", resolv),
            ("hostname", format!("{hostname}\n")),
        ] {
            let p = etc.join(name);
            std::fs::write(&p, content)?;
            out.push((p, format!("/etc/{name}")));
        }
        Ok(out)
    }
}

/// Waits `d`; true when a stop was requested meanwhile.
/// A kubelet's image pull back-off: 10 s doubling to 5 min.
fn pull_backoff(failures: u32) -> Duration {
    Duration::from_secs(
        10u64
            .saturating_mul(1 << failures.saturating_sub(1).min(5))
            .min(300),
    )
}

async fn wait_stop(stop: &mut watch::Receiver<Option<Duration>>, d: Duration) -> bool {
    if stop.borrow().is_some() {
        return true;
    }
    tokio::select! {
        _ = tokio::time::sleep(d) => false,
        _ = stop.changed() => true,
    }
}

/// SIGTERM the container's process group, SIGKILL after `grace`.
async fn terminate(child: &mut tokio::process::Child, pid: u32, grace: Duration) -> ExitStatus {
    signal_group(pid, Signal::SIGTERM);
    // A frozen (SIGSTOPped) container must run to handle SIGTERM.
    signal_group(pid, Signal::SIGCONT);
    let status = match tokio::time::timeout(grace, child.wait()).await {
        Ok(Ok(s)) => s,
        _ => {
            tracing::info!(
                pid,
                ?grace,
                "no exit within the grace period after SIGTERM: SIGKILL"
            );
            signal_group(pid, Signal::SIGKILL);
            child
                .wait()
                .await
                .unwrap_or_else(|_| std::os::unix::process::ExitStatusExt::from_raw(9))
        }
    };
    signal_group(pid, Signal::SIGKILL);
    status
}

/// The pod status as the runtime sees it now.
fn current_status(entry: &PodEntry, pod_rx: &watch::Receiver<Pod>) -> Option<serde_json::Value> {
    let scheduled = pod_rx
        .borrow()
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "PodScheduled"));
    let status = {
        let mut rt = entry.rt.lock().unwrap();
        rt.refresh_conditions(Timestamp::now());
        rt.to_status(scheduled)
    };
    serde_json::to_value(&status).ok()
}

/// Patches the pod's status; the UID guards against patching a recreated pod of the same name.
async fn patch_status(
    api: &Api<Pod>,
    entry: &PodEntry,
    value: &serde_json::Value,
) -> kube::Result<Pod> {
    let patch = serde_json::json!({"metadata": {"uid": entry.uid}, "status": value});
    api.patch_status(
        &entry.name,
        &PatchParams::default(),
        &Patch::Strategic(patch),
    )
    .await
}

/// Pushes the pod status whenever the runtime state changes.
async fn status_writer(ctx: Arc<AgentCtx>, entry: Arc<PodEntry>, pod_rx: watch::Receiver<Pod>) {
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &entry.namespace);
    let mut last: Option<serde_json::Value> = None;
    entry.changed.notify_one();
    loop {
        entry.changed.notified().await;
        // Coalesce bursts of changes into one patch.
        tokio::time::sleep(Duration::from_millis(150)).await;
        let Some(value) = current_status(&entry, &pod_rx) else {
            continue;
        };
        if last.as_ref() == Some(&value) {
            continue;
        }
        match patch_status(&api, &entry, &value).await {
            Ok(_) => last = Some(value),
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {
                tracing::debug!(pod = %entry.name, "pod gone, status writer stops");
                return;
            }
            Err(e) => {
                tracing::warn!(pod = %entry.name, error = %e, "patching pod status");
                tokio::time::sleep(Duration::from_secs(1)).await;
                entry.changed.notify_one();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_sequence() {
        let secs: Vec<u64> = (1..=6).map(|n| backoff_delay(n).as_secs()).collect();
        assert_eq!(secs, vec![10, 20, 40, 60, 60, 60]);
        assert_eq!(backoff_delay(1000).as_secs(), 60);
    }

    #[test]
    fn interrupts() {
        let mut pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"}, "spec": {"containers": [], "terminationGracePeriodSeconds": 7}
        }))
        .unwrap();
        assert_eq!(check_interrupt(&pod, Stop::Run), None);
        assert_eq!(
            check_interrupt(&pod, Stop::AgentShutdown),
            Some(Interrupt::Shutdown)
        );
        pod.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::now()),
        );
        assert_eq!(
            check_interrupt(&pod, Stop::Run),
            Some(Interrupt::Deleting(Duration::from_secs(7)))
        );
        pod.metadata.deletion_grace_period_seconds = Some(2);
        assert_eq!(
            check_interrupt(&pod, Stop::Run),
            Some(Interrupt::Deleting(Duration::from_secs(2)))
        );
        assert_eq!(check_interrupt(&pod, Stop::Gone), Some(Interrupt::Gone));
    }

    #[test]
    fn start_time_of_self() {
        assert!(proc_start_time(std::process::id()).is_some());
        assert_eq!(proc_start_time(u32::MAX), None);
    }
}
