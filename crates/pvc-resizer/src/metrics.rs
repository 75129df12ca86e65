//! pvc-resizer's own metrics, next to the runtime's reconcile metrics on /metrics: per
//! claim its capacity, used bytes, growths and the last growth's result; per process the
//! kubelet stats calls and their failures.

use prometheus::{IntCounterVec, IntGaugeVec, Opts};

/// Label values of a growth's result.
pub const RESULTS: [&str; 3] = ["requested", "quota_exceeded", "refused"];

/// A claim's sizes in bytes, each absent when unknown (or without autoResize, `used` and
/// `limit`).
#[derive(Debug, Clone, Copy, Default)]
pub struct ClaimNumbers {
    pub capacity: Option<u128>,
    pub used: Option<u64>,
    pub limit: Option<u128>,
}

#[derive(Clone)]
pub struct ResizerMetrics {
    capacity: IntGaugeVec,
    used: IntGaugeVec,
    limit: IntGaugeVec,
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
        let limit = IntGaugeVec::new(
            Opts::new(
                "valkey_operator_pvc_limit_bytes",
                "autoResize.limit of a ValkeyNode's claim: the size it never grows past.",
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
        metrics.register(Box::new(limit.clone()))?;
        metrics.register(Box::new(resizes.clone()))?;
        metrics.register(Box::new(last_result.clone()))?;
        metrics.register(Box::new(stats_calls.clone()))?;
        metrics.register(Box::new(stats_failures.clone()))?;
        Ok(Self {
            capacity,
            used,
            limit,
            resizes,
            last_result,
            stats_calls,
            stats_failures,
        })
    }

    /// The claim's numbers as the report has them; `limit` is autoResize's.
    pub fn claim(&self, namespace: &str, claim: &str, numbers: ClaimNumbers) {
        let labels = [namespace, claim];
        for (gauge, value) in [
            (&self.capacity, numbers.capacity),
            (&self.used, numbers.used.map(u128::from)),
            (&self.limit, numbers.limit),
        ] {
            match value.and_then(|v| i64::try_from(v).ok()) {
                Some(v) => gauge.with_label_values(&labels).set(v),
                None => {
                    let _ = gauge.remove_label_values(&labels);
                }
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
        let _ = self.limit.remove_label_values(&[namespace, claim]);
        for r in RESULTS {
            let _ = self.resizes.remove_label_values(&[namespace, claim, r]);
            let _ = self.last_result.remove_label_values(&[namespace, claim, r]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numbers(limit: Option<u128>) -> ClaimNumbers {
        ClaimNumbers {
            capacity: Some(1 << 30),
            used: Some(1 << 29),
            limit,
        }
    }

    #[test]
    fn a_claims_limit_is_a_series_only_while_it_has_one() {
        let runtime = operator_runtime::Metrics::new().unwrap();
        let metrics = ResizerMetrics::register(&runtime).unwrap();
        metrics.claim("apps", "data-cache", numbers(Some(4 << 30)));
        let text = runtime.encode().unwrap();
        for line in [
            r#"valkey_operator_pvc_capacity_bytes{claim="data-cache",namespace="apps"} 1073741824"#,
            r#"valkey_operator_pvc_used_bytes{claim="data-cache",namespace="apps"} 536870912"#,
            r#"valkey_operator_pvc_limit_bytes{claim="data-cache",namespace="apps"} 4294967296"#,
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
        }
        // autoResize removed: no limit any more, the claim's other numbers stay.
        metrics.claim("apps", "data-cache", numbers(None));
        let text = runtime.encode().unwrap();
        assert!(!text.contains("valkey_operator_pvc_limit_bytes{"), "{text}");
        assert!(
            text.contains("valkey_operator_pvc_capacity_bytes{"),
            "{text}"
        );
        metrics.forget("apps", "data-cache");
        assert!(!runtime.encode().unwrap().contains("data-cache"));
    }
}
