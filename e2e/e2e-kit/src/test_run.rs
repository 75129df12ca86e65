//! One e2e test's local cluster with the operator and its namespace, as the topology suites
//! (`tests/valkey_cluster`, `tests/valkey_replication`) start them: one test at a time in a
//! test binary, each in a namespace of its own.
//!
//! Starting a local cluster and installing the operator takes about 25 s on the 2-core
//! machine, more than many tests take themselves. So the tests of a binary share one
//! cluster ([`TestRun::start`]): a test hands it on at [`TestRun::finish`] with its
//! namespace deleted and that namespace's pods gone. A test that stops or restarts the
//! operator's controllers, or cordons or drains a Node, changes what every namespace sees,
//! and starts a cluster of its own ([`TestRun::start_own`]). A test that fails takes the
//! shared cluster down with it (its run directory kept for the post-mortem); the next test
//! starts a fresh one.

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use local_cluster::LocalCluster;
use local_cluster::controller_pods::PodController;

use crate::testing::{cluster_with_operator, controller};

/// The tests of one binary run one at a time even without `--test-threads=1`: two at once
/// would starve the 2-core machine, and the shared cluster serves one test at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The cluster the binary's tests share, between two tests. A static is never dropped, so
/// [`stop_shared_at_exit`] stops its processes when the binary exits.
static SHARED: std::sync::Mutex<Option<Running>> = std::sync::Mutex::new(None);

/// Numbers the test namespaces of this binary.
static NAMESPACES: AtomicUsize = AtomicUsize::new(0);

/// A local cluster with the operator ([`cluster_with_operator`]). Fields drop in order: the
/// processes stop before the run directory goes.
pub struct Running {
    pub cluster: LocalCluster,
    pub controllers: Vec<PodController>,
    run: tempfile::TempDir,
    /// The namespace of the test before, whose deletion may still be under way (every
    /// earlier one is gone: each test waits for the one before it).
    previous_namespace: Option<String>,
    /// How many tests it has served.
    served: usize,
}

/// A test's cluster with the operator (shared or its own, see the module) and the
/// namespace the test works in. It shows [`Running`]'s fields (`cluster`, `controllers`).
pub struct TestRun {
    /// An admin client.
    pub client: kube::Client,
    /// The test's own namespace, created empty.
    pub namespace: String,
    running: Option<Running>,
    shared: bool,
    /// When the test got its cluster and namespace.
    started: Instant,
    _serial: tokio::sync::MutexGuard<'static, ()>,
}

impl std::ops::Deref for TestRun {
    type Target = Running;

    fn deref(&self) -> &Running {
        self.running.as_ref().expect("the test's cluster")
    }
}

impl TestRun {
    /// Waits for the test before it in this binary to end, then takes the binary's shared
    /// cluster (starting it when there is none) and creates the test's namespace. Panics
    /// when the cluster does not start.
    pub async fn start() -> Self {
        Self::begin(true).await
    }

    /// [`TestRun::start`] on a cluster of the test's own, for a test that stops the
    /// operator's controllers or changes the Nodes.
    pub async fn start_own() -> Self {
        Self::begin(false).await
    }

    async fn begin(shared: bool) -> Self {
        let serial = SERIAL.lock().await;
        let started = Instant::now();
        let reused = match shared {
            true => SHARED.lock().unwrap().take(),
            false => None,
        };
        let running = match reused {
            Some(running) => running,
            None => Running::start().await,
        };
        let client = running.cluster.client().await.unwrap();
        let namespace = test_namespace();
        create_namespace(&client, &namespace).await.unwrap();
        timing(&format!(
            "{namespace}: {} cluster ready in {:.1}s (test {} on it)",
            if shared { "shared" } else { "own" },
            started.elapsed().as_secs_f64(),
            running.served + 1
        ));
        if shared {
            register_exit_hook();
        }
        Self {
            client,
            namespace,
            running: Some(running),
            shared,
            started: Instant::now(),
            _serial: serial,
        }
    }

    /// The operator's topology-controller.
    pub fn topology_controller(&self) -> &PodController {
        controller(&self.controllers, "topology-controller")
    }

    /// Ends the test: no controller restarted on the way. A cluster of its own stops; the
    /// shared one is handed on once the test's namespace is being deleted and its pods
    /// are gone, and the namespaces of earlier tests are gone entirely.
    pub async fn finish(mut self) {
        let test_took = self.started.elapsed();
        self.cluster
            .check_restarts("the end of the test")
            .await
            .unwrap();
        let ending = Instant::now();
        if !self.shared {
            let running = self.running.take().expect("the test's cluster");
            running.stop(keep_run_dirs());
            timing(&format!(
                "{}: test took {:.1}s, own cluster stopped in {:.1}s",
                self.namespace,
                test_took.as_secs_f64(),
                ending.elapsed().as_secs_f64()
            ));
            return;
        }
        let running = self.running.as_ref().expect("the test's cluster");
        let cleared = async {
            running.previous_namespace_gone(&self.client).await?;
            clear_namespace(&running.cluster, &self.client, &self.namespace).await
        }
        .await;
        if let Err(error) = cleared {
            // A namespace that does not go is a failure: the cluster stops, its logs kept.
            panic!("ending {}: {error:#}", self.namespace);
        }
        let mut running = self.running.take().expect("the test's cluster");
        running.previous_namespace = Some(self.namespace.clone());
        running.served += 1;
        // Clients hold connections of this test's runtime, which ends with the test.
        running.cluster.forget_clients();
        timing(&format!(
            "{}: test took {:.1}s, namespace cleared in {:.1}s",
            self.namespace,
            test_took.as_secs_f64(),
            ending.elapsed().as_secs_f64()
        ));
        *SHARED.lock().unwrap() = Some(running);
    }
}

impl Drop for TestRun {
    /// A cluster not handed on (the test failed, or it was its own) stops with its run
    /// directory kept after a failure or when asked: its logs (the controllers', each
    /// container's) are the post-mortem.
    fn drop(&mut self) {
        let Some(running) = self.running.take() else {
            return;
        };
        let failed = std::thread::panicking();
        let keep = failed || keep_run_dirs();
        let dir = running.stop(keep);
        if failed && let Some(dir) = dir {
            eprintln!("run dir kept after the failure: {}", dir.display());
        }
    }
}

impl Running {
    /// A fresh cluster in a fresh run directory (named on stderr when `E2E_KEEP_RUN_DIRS`
    /// is set).
    async fn start() -> Self {
        let started = Instant::now();
        let run = tempfile::tempdir().unwrap();
        if keep_run_dirs() {
            eprintln!("run dir {}", run.path().display());
        }
        let (cluster, controllers) = cluster_with_operator(run.path()).await.unwrap();
        timing(&format!(
            "local cluster with the operator started in {:.1}s",
            started.elapsed().as_secs_f64()
        ));
        Self {
            cluster,
            controllers,
            run,
            previous_namespace: None,
            served: 0,
        }
    }

    /// Stops the processes; the run directory goes unless `keep` (then its path).
    fn stop(mut self, keep: bool) -> Option<std::path::PathBuf> {
        if let Err(error) = self.cluster.stop() {
            eprintln!("local-cluster: teardown: {error:#}");
        }
        keep.then(|| self.run.keep())
    }

    /// Waits until the test before's namespace is gone: its deletion had the whole test
    /// to finish.
    async fn previous_namespace_gone(&self, client: &kube::Client) -> Result<()> {
        let Some(name) = &self.previous_namespace else {
            return Ok(());
        };
        let namespaces: Api<Namespace> = Api::all(client.clone());
        self.cluster
            .wait_for(&format!("namespace {name} to be gone"), || async {
                Ok(namespaces.get_opt(name).await?.is_none())
            })
            .await
    }
}

/// The test's namespace: its module's name (libtest names the thread after the test's
/// path) and a number, as a DNS label.
fn test_namespace() -> String {
    let thread = std::thread::current();
    let module = thread
        .name()
        .and_then(|n| n.split("::").next())
        .filter(|m| !m.is_empty() && *m != "main")
        .unwrap_or("test");
    let mut base: String = module
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' => c,
            _ => '-',
        })
        .take(40)
        .collect();
    base = base.trim_matches('-').to_string();
    let n = NAMESPACES.fetch_add(1, Ordering::Relaxed);
    format!("{base}-{n}")
}

async fn create_namespace(client: &kube::Client, name: &str) -> Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace: Namespace = serde_json::from_value(serde_json::json!({
        "metadata": { "name": name, "labels": { "e2e.valkey.rs/test-run": "true" } }
    }))?;
    namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .with_context(|| format!("creating namespace {name}"))?;
    Ok(())
}

/// Deletes the namespace, then its pods at once (grace 0: the test is over, and a member's
/// preStop hand-over would only take the next test's CPU), and waits until none is left.
/// The namespace's deletion keeps new pods out; the rest of it goes in the background.
async fn clear_namespace(cluster: &LocalCluster, client: &kube::Client, name: &str) -> Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .delete(name, &DeleteParams::default())
        .await
        .with_context(|| format!("deleting namespace {name}"))?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), name);
    pods.delete_collection(
        &DeleteParams::default().grace_period(0),
        &ListParams::default(),
    )
    .await
    .with_context(|| format!("deleting the pods of namespace {name}"))?;
    cluster
        .wait_for(
            &format!("the pods of namespace {name} to be gone"),
            || async { Ok(pods.list(&ListParams::default()).await?.items.is_empty()) },
        )
        .await
}

/// `E2E_KEEP_RUN_DIRS` asks to keep every run directory, not only a failed test's.
fn keep_run_dirs() -> bool {
    std::env::var_os("E2E_KEEP_RUN_DIRS").is_some()
}

/// One line of where e2e time goes (`hack/e2e-times.py` tabulates them). Written to the
/// process's stderr itself, past libtest's capture, so CI logs show it for passing tests.
fn timing(line: &str) {
    let _ = writeln!(std::io::stderr(), "test-run: {line}");
}

/// Registers [`stop_shared_at_exit`] once.
fn register_exit_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers a plain `extern "C" fn()` that unwinds nowhere.
        unsafe { libc::atexit(stop_shared_at_exit) };
    });
}

/// Stops the shared cluster when the test binary exits.
extern "C" fn stop_shared_at_exit() {
    let running = match SHARED.lock() {
        Ok(mut shared) => shared.take(),
        Err(poisoned) => poisoned.into_inner().take(),
    };
    if let Some(running) = running {
        let started = Instant::now();
        let served = running.served;
        let keep = keep_run_dirs();
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| running.stop(keep)));
        timing(&format!(
            "shared cluster stopped after {served} tests in {:.1}s",
            started.elapsed().as_secs_f64()
        ));
    }
}
