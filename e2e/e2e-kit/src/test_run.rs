//! One e2e test's local cluster with the operator, as the topology suites
//! (`tests/valkey_cluster`, `tests/valkey_replication`) start it: one test at a time in a
//! test binary, the run directory kept after a failure.

use local_cluster::LocalCluster;
use local_cluster::controller_pods::PodController;

use crate::testing::{cluster_with_operator, controller};

/// The tests of one binary run one at a time even without `--test-threads=1`: each starts a
/// whole local cluster, and two at once would starve the 2-core machine.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A local cluster with the operator ([`cluster_with_operator`]). Fields drop in order: the
/// processes stop before the run directory goes, and the next test starts only after both.
pub struct TestRun {
    pub cluster: LocalCluster,
    pub controllers: Vec<PodController>,
    /// An admin client.
    pub client: kube::Client,
    run: tempfile::TempDir,
    _serial: tokio::sync::MutexGuard<'static, ()>,
}

impl TestRun {
    /// Waits for the test before it in this binary to end, then starts the cluster in a
    /// fresh run directory (named on stderr when `E2E_KEEP_RUN_DIRS` is set). Panics when the
    /// cluster does not start.
    pub async fn start() -> Self {
        let serial = SERIAL.lock().await;
        let run = tempfile::tempdir().unwrap();
        if std::env::var_os("E2E_KEEP_RUN_DIRS").is_some() {
            // For a post-mortem of a failed test: the logs stay in the run dir.
            eprintln!("run dir {}", run.path().display());
        }
        let (cluster, controllers) = cluster_with_operator(run.path()).await.unwrap();
        let client = cluster.client().await.unwrap();
        Self {
            cluster,
            controllers,
            client,
            run,
            _serial: serial,
        }
    }

    /// The operator's topology-controller.
    pub fn topology_controller(&self) -> &PodController {
        controller(&self.controllers, "topology-controller")
    }

    /// Ends the test: no controller restarted on the way, then the cluster stops.
    pub async fn finish(mut self) {
        self.cluster
            .check_restarts("the end of the test")
            .await
            .unwrap();
        self.cluster.stop().unwrap();
    }
}

impl Drop for TestRun {
    /// Keeps the run dir when asked, and after a failure: its logs (the controllers', each
    /// container's) are the post-mortem.
    fn drop(&mut self) {
        let failed = std::thread::panicking();
        if failed || std::env::var_os("E2E_KEEP_RUN_DIRS").is_some() {
            let dir = std::mem::replace(&mut self.run, tempfile::tempdir().unwrap());
            let kept = dir.keep();
            if failed {
                eprintln!("run dir kept after the failure: {}", kept.display());
            }
        }
    }
}
