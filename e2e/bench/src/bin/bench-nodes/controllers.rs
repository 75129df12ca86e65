//! The measured controllers: their processes, metrics and memory.

use std::path::Path;

use anyhow::{Context, Result, bail};
use local_cluster::operator::{self, RunningController};

use crate::{STATS_CALLS, STATS_FAILURES};

pub(crate) fn rss_of(controllers: &[Controller]) -> Result<Vec<u64>> {
    controllers.iter().map(Controller::rss_kib).collect()
}

/// Counters of one controller's /metrics.
pub(crate) struct Counters {
    pub(crate) reconciles: u64,
    pub(crate) stats_calls: u64,
    pub(crate) stats_failures: u64,
}

impl Counters {
    pub(crate) async fn read(controller: &Controller) -> Result<Self> {
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
pub(crate) fn sample(metrics: &str, series: &str) -> Result<u64> {
    let prefix = format!("{series} ");
    let value = metrics
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or("0");
    Ok(value.trim().parse()?)
}

/// A controller process of the run: its ServiceAccount user, PID and metrics address.
pub(crate) struct Controller {
    pub(crate) name: String,
    pub(crate) username: String,
    pub(crate) record: local_cluster::process::Recorded,
    pub(crate) http_addr: String,
}

impl Controller {
    pub(crate) fn find(controllers: &[RunningController], run: &Path, name: &str) -> Result<Self> {
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

    pub(crate) fn rss_kib(&self) -> Result<u64> {
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

    pub(crate) async fn metrics(&self) -> Result<String> {
        operator::http_get(&self.http_addr, "/metrics")
            .await
            .with_context(|| format!("{} /metrics", self.name))
    }
}

pub(crate) fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}
