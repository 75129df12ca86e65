//! Waiting with the reason why not yet.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use local_cluster::LocalCluster;

/// The reporting controller of the topology-controller's Events.
pub const TOPOLOGY_CONTROLLER: &str = "topology-controller";

/// "Not yet, because ..." (`Err`) or the awaited value (`Ok`).
pub type Progress<T> = std::result::Result<T, String>;

/// Polls `check` every 250 ms until it yields a value. Fails after `timeout` with the last
/// "not yet" reason (or error), or as soon as a process of the run died.
pub async fn wait_until<T, F, Fut>(
    cluster: &LocalCluster,
    what: &str,
    timeout: Duration,
    check: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Progress<T>>>,
{
    poll_until(cluster, what, timeout, Duration::from_millis(250), check).await
}

/// [`wait_until`], polling every `every` (benchmarks time with it).
pub async fn poll_until<T, F, Fut>(
    cluster: &LocalCluster,
    what: &str,
    timeout: Duration,
    every: Duration,
    mut check: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Progress<T>>>,
{
    let started = Instant::now();
    let mut last;
    loop {
        cluster.check_running(what).await?;
        match check().await {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(why)) => last = why,
            Err(error) => last = format!("error: {error:#}"),
        }
        if started.elapsed() > timeout {
            // The controller that acts on topologies is what a timeout here usually waits on.
            bail!(
                "timed out after {timeout:?} waiting for {what}; last: {last}\n{}",
                cluster.controller_log(TOPOLOGY_CONTROLLER, 20).await
            );
        }
        tokio::time::sleep(every).await;
    }
}
