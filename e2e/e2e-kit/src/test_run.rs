//! One e2e test's local cluster with the operator and its namespace, as the topology suites
//! (`tests/valkey_cluster`, `tests/valkey_replication`) start them: each test in a namespace
//! of its own.
//!
//! Starting a local cluster and installing the operator takes about 25 s on the 2-core
//! machine, more than many tests take themselves. So the tests of a binary share one
//! cluster ([`TestRun::start`]), up to [`SHARED_TESTS_VAR`] of them at once (most of a
//! test's time is spent waiting on Valkey and the controllers): a test leaves it at
//! [`TestRun::finish`] with its namespace deleted and that namespace's pods gone. A test
//! that stops or restarts the operator's controllers, or cordons or drains a Node, changes
//! what every namespace sees, and starts a cluster of its own ([`TestRun::start_own`]) with
//! no other test of the binary running. A test that fails takes the shared cluster out of
//! service: it stops (its run directory kept for the post-mortem) once a test still on it
//! has ended, and the next test starts a fresh one.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use local_cluster::LocalCluster;
use local_cluster::controller_pods::PodController;
use tokio::sync::{Semaphore, SemaphorePermit};

use crate::testing::{cluster_with_operator, controller};

/// How many tests of a binary may run at once on its shared cluster (default 1). Give
/// libtest as many threads (`--test-threads`): `hack/e2e-lanes.sh` sets both.
pub const SHARED_TESTS_VAR: &str = "E2E_SHARED_TESTS";

/// Test slots: a test on the shared cluster takes one, a test on a cluster of its own takes
/// them all (it would starve the 2-core machine's other tests, and they its faults).
static SLOTS: OnceLock<(Semaphore, u32)> = OnceLock::new();

/// The cluster the binary's tests share. A static is never dropped, so
/// [`stop_shared_at_exit`] stops its processes when the binary exits.
static SHARED: std::sync::Mutex<Option<Arc<Running>>> = std::sync::Mutex::new(None);

/// Held while the shared cluster starts, so two tests do not start one each.
static STARTING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Numbers the test namespaces of this binary.
static NAMESPACES: AtomicUsize = AtomicUsize::new(0);

/// A local cluster with the operator ([`cluster_with_operator`]). Its processes stop when
/// the last test on it lets go. Fields drop in order: the processes stop before the run
/// directory goes.
pub struct Running {
    pub cluster: LocalCluster,
    pub controllers: Vec<PodController>,
    run: tempfile::TempDir,
    /// A test on it failed: it takes no more tests, and its run directory stays.
    failed: AtomicBool,
    /// Namespaces of ended tests whose deletion may still be under way.
    deleting: std::sync::Mutex<Vec<String>>,
    /// How many tests it has taken.
    taken: AtomicUsize,
}

/// A test's cluster with the operator (shared or its own, see the module) and the
/// namespace the test works in. It shows [`Running`]'s fields (`cluster`, `controllers`).
pub struct TestRun {
    /// An admin client.
    pub client: kube::Client,
    /// The test's own namespace, created empty.
    pub namespace: String,
    running: Option<Arc<Running>>,
    shared: bool,
    /// When the test got its cluster and namespace.
    started: Instant,
    _slots: SemaphorePermit<'static>,
}

impl std::ops::Deref for TestRun {
    type Target = Running;

    fn deref(&self) -> &Running {
        self.running.as_ref().expect("the test's cluster")
    }
}

impl TestRun {
    /// Waits for a test slot, then takes the binary's shared cluster (starting it when
    /// there is none) and creates the test's namespace. Panics when the cluster does not
    /// start.
    pub async fn start() -> Self {
        Self::begin(true).await
    }

    /// [`TestRun::start`] on a cluster of the test's own, for a test that stops the
    /// operator's controllers or changes the Nodes: it runs alone.
    pub async fn start_own() -> Self {
        Self::begin(false).await
    }

    async fn begin(shared: bool) -> Self {
        let (slots, all) = SLOTS.get_or_init(|| {
            let n = shared_tests();
            (Semaphore::new(n as usize), n)
        });
        let permit = slots
            .acquire_many(if shared { 1 } else { *all })
            .await
            .expect("the test slots are never closed");
        let started = Instant::now();
        let running = match shared {
            true => shared_cluster().await,
            false => Arc::new(Running::start().await),
        };
        let taken = running.taken.fetch_add(1, Ordering::Relaxed) + 1;
        let client = running.cluster.client().await.unwrap();
        let namespace = test_namespace();
        create_namespace(&client, &namespace).await.unwrap();
        timing(&format!(
            "{namespace}: {} cluster ready in {:.1}s (test {taken} on it)",
            if shared { "shared" } else { "own" },
            started.elapsed().as_secs_f64(),
        ));
        Self {
            client,
            namespace,
            running: Some(running),
            shared,
            started: Instant::now(),
            _slots: permit,
        }
    }

    /// The operator's topology-controller.
    pub fn topology_controller(&self) -> &PodController {
        controller(&self.controllers, "topology-controller")
    }

    /// Ends the test: no controller restarted on the way. A cluster of its own stops; on
    /// the shared one, the test's namespace is deleted and its pods are gone, and the
    /// namespaces of the tests that ended before it are gone entirely.
    pub async fn finish(mut self) {
        let test_took = self.started.elapsed();
        self.cluster
            .check_restarts("the end of the test")
            .await
            .unwrap();
        let ending = Instant::now();
        let running = self.running.as_ref().expect("the test's cluster");
        // A cluster of its own loses its pods first too: its stop would otherwise wait out
        // each member's own stop (about 6 s more).
        let cleared = async {
            if self.shared {
                running.earlier_namespaces_gone(&self.client).await?;
            }
            clear_namespace(&running.cluster, &self.client, &self.namespace).await
        }
        .await;
        if let Err(error) = cleared {
            // A namespace that does not go is a failure: the cluster stops, its logs kept.
            panic!("ending {}: {error:#}", self.namespace);
        }
        if self.shared {
            running
                .deleting
                .lock()
                .unwrap()
                .push(self.namespace.clone());
        }
        // The last test to let go of a cluster stops it: a cluster of its own stops here.
        drop(self.running.take());
        timing(&format!(
            "{}: test took {:.1}s, {} in {:.1}s",
            self.namespace,
            test_took.as_secs_f64(),
            if self.shared {
                "namespace cleared"
            } else {
                "own cluster stopped"
            },
            ending.elapsed().as_secs_f64()
        ));
    }
}

impl Drop for TestRun {
    /// A test that fails takes its cluster out of service with its run directory kept: its
    /// logs (the controllers', each container's) are the post-mortem. A cluster stops when
    /// its last test lets go of it.
    fn drop(&mut self) {
        let Some(running) = self.running.take() else {
            return;
        };
        if std::thread::panicking() {
            running.failed.store(true, Ordering::Relaxed);
            let mut shared = SHARED.lock().unwrap_or_else(|p| p.into_inner());
            if shared.as_ref().is_some_and(|s| Arc::ptr_eq(s, &running)) {
                *shared = None;
            }
        }
    }
}

impl Drop for Running {
    /// Stops the processes; the run directory stays after a failure or when asked.
    fn drop(&mut self) {
        let started = Instant::now();
        if let Err(error) = self.cluster.stop() {
            eprintln!("local-cluster: teardown: {error:#}");
        }
        let failed = self.failed.load(Ordering::Relaxed);
        self.run.disable_cleanup(failed || keep_run_dirs());
        if failed {
            eprintln!(
                "run dir kept after a failure: {}",
                self.run.path().display()
            );
        }
        timing(&format!(
            "cluster stopped after {} tests in {:.1}s",
            self.taken.load(Ordering::Relaxed),
            started.elapsed().as_secs_f64()
        ));
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
            failed: AtomicBool::new(false),
            deleting: Default::default(),
            taken: AtomicUsize::new(0),
        }
    }

    /// Waits until the namespaces of the tests that ended before are gone: each one's
    /// deletion had at least the rest of this test to finish.
    async fn earlier_namespaces_gone(&self, client: &kube::Client) -> Result<()> {
        let earlier = self.deleting.lock().unwrap().clone();
        let namespaces: Api<Namespace> = Api::all(client.clone());
        for name in &earlier {
            self.cluster
                .wait_for(&format!("namespace {name} to be gone"), || async {
                    Ok(namespaces.get_opt(name).await?.is_none())
                })
                .await?;
        }
        self.deleting
            .lock()
            .unwrap()
            .retain(|name| !earlier.contains(name));
        Ok(())
    }
}

/// The binary's shared cluster, started when there is none (or the last one failed).
async fn shared_cluster() -> Arc<Running> {
    let _starting = STARTING.lock().await;
    if let Some(running) = SHARED.lock().unwrap().clone() {
        return running;
    }
    let running = Arc::new(Running::start().await);
    *SHARED.lock().unwrap() = Some(running.clone());
    register_exit_hook();
    running
}

/// [`SHARED_TESTS_VAR`], at least 1.
fn shared_tests() -> u32 {
    std::env::var(SHARED_TESTS_VAR)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
        .max(1)
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

/// Stops the shared cluster when the test binary exits (every test has let go of it).
extern "C" fn stop_shared_at_exit() {
    let running = match SHARED.lock() {
        Ok(mut shared) => shared.take(),
        Err(poisoned) => poisoned.into_inner().take(),
    };
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(running)));
}
