//! Create to Ready, step by step, from the audit log and this process's watches.

use anyhow::{Context, Result};
use k8s_openapi::jiff::Timestamp;

use crate::Observed;
use crate::audit::AuditEvent;

/// The seconds each step of one node's start took.
pub(crate) struct Steps {
    /// ValkeyNode created -> service-controller created its Service.
    pub(crate) service: f64,
    /// Service created -> service-controller wrote status.endpoint.
    pub(crate) endpoint: f64,
    /// status.endpoint -> node-controller created the StatefulSet (ConfigMap, PVC first).
    pub(crate) statefulset: f64,
    /// StatefulSet -> its pod created (kube-controller-manager).
    pub(crate) pod_created: f64,
    /// Pod created -> pod Ready (scheduler, volume, node agent, valkey-server, probes).
    pub(crate) pod_start: f64,
    /// Pod Ready -> node-controller wrote WorkloadReady=True.
    pub(crate) node_ready: f64,
    pub(crate) total: f64,
}

impl Steps {
    fn controllers(&self) -> f64 {
        self.service + self.endpoint + self.statefulset + self.node_ready
    }
}

pub(crate) fn steps(
    events: &[AuditEvent],
    observed: &[Observed],
    users: (&str, &str),
) -> Result<Vec<Steps>> {
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

pub(crate) fn median_max(values: impl Iterator<Item = f64>) -> (f64, f64) {
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
pub(crate) type Row = (&'static str, &'static str, fn(&Steps) -> f64);

pub(crate) fn print_latency(title: &str, steps: &[Steps]) {
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
