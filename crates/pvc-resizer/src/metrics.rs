//! pvc-resizer's own metrics, next to the runtime's reconcile metrics on /metrics: per
//! claim its capacity, used bytes, growths and the last growth's result; per process the
//! kubelet stats calls and their failures.

use prometheus::{IntCounterVec, IntGaugeVec, Opts};

/// Label values of a growth's result.
pub const RESULTS: [&str; 3] = ["requested", "quota_exceeded", "refused"];

#[derive(Clone)]
pub struct ResizerMetrics {
    capacity: IntGaugeVec,
    used: IntGaugeVec,
    resizes: IntCounterVec,
    last_result: IntGaugeVec,
    pub stats_calls: prometheus::IntCounter,
    pub stats_failures: prometheus::IntCounter,
}

impl ResizerMetrics {
    pub fn register(metrics: &operator_runtime::Metrics) -> Result<Self, prometheus::Error> {
        let claim = ["namespace", "claim"];
        let capacity = IntGaugeVec::new(
            Opts::new(
                "valkey_operator_pvc_capacity_bytes",
                "Capacity of a ValkeyNode's claim, from its status.",
            ),
            &claim,
        )?;
        let used = IntGaugeVec::new(
            Opts::new(
                "valkey_operator_pvc_used_bytes",
                "Bytes used on a ValkeyNode's volume, from the kubelet's stats (autoResize only).",
            ),
            &claim,
        )?;
        let resizes = IntCounterVec::new(
            Opts::new(
                "valkey_operator_pvc_resizes_total",
                "Growths pvc-resizer asked for, per claim and result.",
            ),
            &["namespace", "claim", "result"],
        )?;
        let last_result = IntGaugeVec::new(
            Opts::new(
                "valkey_operator_pvc_last_resize_result",
                "1 for the result of the claim's last growth (requested, quota_exceeded, refused).",
            ),
            &["namespace", "claim", "result"],
        )?;
        let stats_calls = prometheus::IntCounter::new(
            "valkey_operator_kubelet_stats_calls_total",
            "GET /stats/summary calls to kubelets.",
        )?;
        let stats_failures = prometheus::IntCounter::new(
            "valkey_operator_kubelet_stats_failures_total",
            "GET /stats/summary calls that failed (unreachable, refused, unreadable).",
        )?;
        metrics.register(Box::new(capacity.clone()))?;
        metrics.register(Box::new(used.clone()))?;
        metrics.register(Box::new(resizes.clone()))?;
        metrics.register(Box::new(last_result.clone()))?;
        metrics.register(Box::new(stats_calls.clone()))?;
        metrics.register(Box::new(stats_failures.clone()))?;
        Ok(Self {
            capacity,
            used,
            resizes,
            last_result,
            stats_calls,
            stats_failures,
        })
    }

    /// The claim's numbers as the report has them.
    pub fn claim(&self, namespace: &str, claim: &str, capacity: Option<u128>, used: Option<u64>) {
        let labels = [namespace, claim];
        match capacity.and_then(|c| i64::try_from(c).ok()) {
            Some(c) => self.capacity.with_label_values(&labels).set(c),
            None => {
                let _ = self.capacity.remove_label_values(&labels);
            }
        }
        match used.and_then(|u| i64::try_from(u).ok()) {
            Some(u) => self.used.with_label_values(&labels).set(u),
            None => {
                let _ = self.used.remove_label_values(&labels);
            }
        }
    }

    /// A growth asked for, with its result (one of [`RESULTS`]).
    pub fn resized(&self, namespace: &str, claim: &str, result: &str) {
        self.resizes
            .with_label_values(&[namespace, claim, result])
            .inc();
        for r in RESULTS {
            self.last_result
                .with_label_values(&[namespace, claim, r])
                .set(i64::from(r == result));
        }
    }

    /// The claim's node is gone: drop its series.
    pub fn forget(&self, namespace: &str, claim: &str) {
        let _ = self.capacity.remove_label_values(&[namespace, claim]);
        let _ = self.used.remove_label_values(&[namespace, claim]);
        for r in RESULTS {
            let _ = self.resizes.remove_label_values(&[namespace, claim, r]);
            let _ = self.last_result.remove_label_values(&[namespace, claim, r]);
        }
    }
}
