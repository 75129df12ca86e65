//! `monitoring`: a prometheus-operator PodMonitor per topology, for a Prometheus that reads
//! monitors only in the namespaces it is given (the install-wide PodMonitor of
//! deploy/components/monitoring covers every namespace at once).

use std::collections::BTreeMap;

use kube::KubeSchema;
use kube::core::Rule;
use serde::{Deserialize, Serialize};

/// The prometheus-operator API the PodMonitor belongs to.
pub const POD_MONITOR_GROUP: &str = "monitoring.coreos.com";
pub const POD_MONITOR_VERSION: &str = "v1";
pub const POD_MONITOR_KIND: &str = "PodMonitor";
pub const POD_MONITOR_PLURAL: &str = "podmonitors";

/// A duration as prometheus-operator takes it (`30s`, `1m`, `1m30s`).
const DURATION: &str = "^([0-9]+(ms|s|m|h))+$";

/// What is monitored of the topology.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct MonitoringSpec {
    /// A PodMonitor `<topology>-exporters` in the topology's namespace, owned by it, for the
    /// exporter sidecars of every member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_monitor: Option<PodMonitorSpec>,
}

/// The topology's own PodMonitor. Its absence where the monitoring.coreos.com CRDs are not
/// installed is the `PodMonitorReady` condition (reason `CrdMissing`), never an error.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodMonitorSpec {
    /// Make the PodMonitor (default when `podMonitor` is set). Off: one made before is
    /// deleted.
    #[serde(default = "enabled")]
    pub enabled: bool,
    /// Labels on the PodMonitor, for the Prometheus's `podMonitorSelector` (with
    /// kube-prometheus-stack: `release: <its release>`). The operator's own labels win.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[x_kube(validation = Rule::new("self.size() <= 16").message("monitoring.podMonitor.labels holds at most 16 labels"))]
    pub labels: BTreeMap<String, String>,
    /// Scrape interval (`30s`, `1m`); absent: the Prometheus's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(format!("self.matches('{DURATION}')")).message("monitoring.podMonitor.interval is a duration such as 30s, 1m or 1m30s"))]
    pub interval: Option<String>,
}

impl Default for PodMonitorSpec {
    fn default() -> Self {
        Self {
            enabled: true,
            labels: BTreeMap::new(),
            interval: None,
        }
    }
}

fn enabled() -> bool {
    true
}

/// A PodMonitor scrapes the exporters: without `template.exporter` there is nothing to
/// scrape, so asking for one is refused (a spec rule of both topology kinds).
pub fn pod_monitor_needs_an_exporter() -> Rule {
    Rule::new(
        "!has(self.monitoring) || !has(self.monitoring.podMonitor) || (has(self.monitoring.podMonitor.enabled) && !self.monitoring.podMonitor.enabled) || (has(self.template) && has(self.template.exporter))",
    )
    .message("monitoring.podMonitor scrapes the exporter sidecars: set template.exporter (exporter: {} takes the default image), or turn the PodMonitor off")
}
