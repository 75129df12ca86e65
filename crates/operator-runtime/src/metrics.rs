//! Reconcile metrics in a private Prometheus registry, exposed on /metrics.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use prometheus::{
    HistogramOpts, HistogramTimer, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

/// A short, fixed label for an error, used as the `error` label of
/// `valkey_operator_reconcile_failures_total`.
///
/// Controller error enums implement it with one label per variant, or delegate to
/// [`ApiError::metric_label`](crate::error::ApiError::metric_label). A label from a fixed
/// set (never the message) keeps the series' cardinality bounded.
pub trait ErrorKind {
    fn kind(&self) -> Cow<'static, str>;
}

impl ErrorKind for crate::error::ApiError {
    fn kind(&self) -> Cow<'static, str> {
        self.metric_label().into()
    }
}

/// The reconcile metrics of one process.
///
/// Owns its registry instead of using the prometheus global one, so tests (and a binary
/// that might run two controllers) get independent counters.
#[derive(Debug, Clone)]
pub struct Metrics {
    registry: Registry,
    runs: IntCounterVec,
    failures: IntCounterVec,
    duration: HistogramVec,
    leader: IntGaugeVec,
    events: IntCounterVec,
    /// The reasons counted per (controller, namespace, kind, name), to drop their series.
    event_reasons: Arc<Mutex<HashMap<EventKey, BTreeSet<String>>>>,
}

type EventKey = (String, String, String, String);

fn event_key(controller: &str, object: &EventObject<'_>) -> EventKey {
    (
        controller.into(),
        object.namespace.into(),
        object.kind.into(),
        object.name.into(),
    )
}

/// Reconciles range from a few API calls to a Valkey failover, hence buckets up to a minute.
const DURATION_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

impl Metrics {
    /// Creates the metrics and registers them in a new registry.
    ///
    /// Only fails if a metric definition is invalid, which the unit tests rule out.
    pub fn new() -> Result<Self, prometheus::Error> {
        let registry = Registry::new();
        let runs = IntCounterVec::new(
            Opts::new(
                "valkey_operator_reconcile_runs_total",
                "Reconcile runs started, per controller.",
            ),
            &["controller"],
        )?;
        let failures = IntCounterVec::new(
            Opts::new(
                "valkey_operator_reconcile_failures_total",
                "Reconcile runs that returned an error, per controller and error kind.",
            ),
            &["controller", "error"],
        )?;
        let duration = HistogramVec::new(
            HistogramOpts::new(
                "valkey_operator_reconcile_duration_seconds",
                "Time spent in one reconcile run, per controller.",
            )
            .buckets(DURATION_BUCKETS.to_vec()),
            &["controller"],
        )?;
        let leader = IntGaugeVec::new(
            Opts::new(
                "valkey_operator_leader",
                "1 while this process holds its controller's Lease (or runs without leader \
                 election), 0 while it stands by.",
            ),
            &["controller"],
        )?;
        let events = IntCounterVec::new(
            Opts::new(
                "valkey_operator_events_total",
                "Events published, per controller, object and reason: a topology's steps \
                 (Failover, HandedOver, PrimaryChanged, SlotsMigrating, Rolling...) and \
                 refusals. Reasons are a fixed set per controller.",
            ),
            &["controller", "namespace", "kind", "name", "reason"],
        )?;
        registry.register(Box::new(runs.clone()))?;
        registry.register(Box::new(failures.clone()))?;
        registry.register(Box::new(duration.clone()))?;
        registry.register(Box::new(leader.clone()))?;
        registry.register(Box::new(events.clone()))?;
        Ok(Self {
            registry,
            runs,
            failures,
            duration,
            leader,
            events,
            event_reasons: Arc::default(),
        })
    }

    /// Counts a reconcile run and times it until the returned timer is dropped.
    ///
    /// Bind it to a named variable (`let _timer = ...`): `let _ = ...` drops it at once.
    pub fn reconcile_started(&self, controller: &str) -> ReconcileTimer {
        self.runs.with_label_values(&[controller]).inc();
        ReconcileTimer {
            _timer: self.duration.with_label_values(&[controller]).start_timer(),
        }
    }

    /// Counts a failed reconcile run, labelled with the error's [`ErrorKind`].
    ///
    /// Meant for the kube-runtime `error_policy` callback, which sees every reconcile error.
    pub fn reconcile_failed<E: ErrorKind + ?Sized>(&self, controller: &str, error: &E) {
        self.failures
            .with_label_values(&[controller, &error.kind()])
            .inc();
    }

    /// Whether this process leads `controller` now.
    pub fn set_leader(&self, controller: &str, leading: bool) {
        self.leader
            .with_label_values(&[controller])
            .set(i64::from(leading));
    }

    /// Counts an Event published about an object.
    pub fn event_published(&self, controller: &str, object: &EventObject<'_>, reason: &str) {
        self.events
            .with_label_values(&[
                controller,
                object.namespace,
                object.kind,
                object.name,
                reason,
            ])
            .inc();
        let key = event_key(controller, object);
        self.event_reasons
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(key)
            .or_default()
            .insert(reason.to_string());
    }

    /// Drops the Event counts of an object that is gone, so deleted objects leave no series.
    pub fn forget_events_of(&self, controller: &str, object: &EventObject<'_>) {
        let key = event_key(controller, object);
        let reasons = self
            .event_reasons
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&key)
            .unwrap_or_default();
        for reason in reasons {
            let _ = self.events.remove_label_values(&[
                controller,
                object.namespace,
                object.kind,
                object.name,
                &reason,
            ]);
        }
    }

    /// Adds a controller's own metrics to the registry served on /metrics.
    pub fn register(
        &self,
        collector: Box<dyn prometheus::core::Collector>,
    ) -> Result<(), prometheus::Error> {
        self.registry.register(collector)
    }

    /// The Prometheus text exposition of all metrics, as served on /metrics.
    pub fn encode(&self) -> Result<String, prometheus::Error> {
        TextEncoder::new().encode_to_string(&self.registry.gather())
    }
}

/// The object an Event is about, as its labels name it.
#[derive(Debug, Clone, Copy)]
pub struct EventObject<'a> {
    pub namespace: &'a str,
    pub kind: &'a str,
    pub name: &'a str,
}

/// Content-Type of [`Metrics::encode`]'s output.
pub(crate) const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Observes the duration of one reconcile run when dropped.
#[must_use = "the run is timed until this is dropped; bind it with `let _timer = ...`"]
#[derive(Debug)]
pub struct ReconcileTimer {
    _timer: HistogramTimer,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    enum TestError {
        Kube,
        Valkey,
    }

    impl ErrorKind for TestError {
        fn kind(&self) -> Cow<'static, str> {
            match self {
                TestError::Kube => "kube".into(),
                TestError::Valkey => "valkey".into(),
            }
        }
    }

    fn line_value(exposition: &str, prefix: &str) -> Option<f64> {
        exposition
            .lines()
            .find(|line| line.starts_with(prefix))
            .and_then(|line| line.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    }

    #[test]
    fn exposition_is_empty_until_something_is_recorded() {
        let metrics = Metrics::new().unwrap();
        // Labelled vectors have no series before the first observation.
        assert!(
            !metrics
                .encode()
                .unwrap()
                .contains("valkey_operator_reconcile")
        );
    }

    #[test]
    fn records_runs_durations_and_failures() {
        let metrics = Metrics::new().unwrap();
        {
            let _timer = metrics.reconcile_started("node-controller");
        }
        let _running = metrics.reconcile_started("node-controller");
        metrics.reconcile_failed("node-controller", &TestError::Valkey);

        let text = metrics.encode().unwrap();
        assert_eq!(
            line_value(
                &text,
                r#"valkey_operator_reconcile_runs_total{controller="node-controller"}"#
            ),
            Some(2.0),
            "{text}"
        );
        // Only the finished run has been observed so far.
        assert_eq!(
            line_value(
                &text,
                r#"valkey_operator_reconcile_duration_seconds_count{controller="node-controller"}"#
            ),
            Some(1.0),
            "{text}"
        );
        assert_eq!(
            line_value(
                &text,
                r#"valkey_operator_reconcile_failures_total{controller="node-controller",error="valkey"}"#
            ),
            Some(1.0),
            "{text}"
        );
        assert!(text.contains("# TYPE valkey_operator_reconcile_duration_seconds histogram"));
        assert!(
            text.contains(r#"le="60""#),
            "custom buckets are used: {text}"
        );
    }

    #[test]
    fn failures_are_labelled_by_error_kind() {
        let metrics = Metrics::new().unwrap();
        metrics.reconcile_failed("topology-controller", &TestError::Kube);
        metrics.reconcile_failed("topology-controller", &TestError::Kube);
        let as_dyn: &dyn ErrorKind = &TestError::Valkey;
        metrics.reconcile_failed("topology-controller", as_dyn);

        let text = metrics.encode().unwrap();
        let failures = |kind: &str| {
            line_value(
                &text,
                &format!(
                    r#"valkey_operator_reconcile_failures_total{{controller="topology-controller",error="{kind}"}}"#
                ),
            )
        };
        assert_eq!(failures("kube"), Some(2.0), "{text}");
        assert_eq!(failures("valkey"), Some(1.0), "{text}");
    }

    #[test]
    fn leadership_and_events_are_series() {
        let metrics = Metrics::new().unwrap();
        metrics.set_leader("topology-controller", false);
        let leading = |m: &Metrics| {
            line_value(
                &m.encode().unwrap(),
                r#"valkey_operator_leader{controller="topology-controller"}"#,
            )
        };
        assert_eq!(leading(&metrics), Some(0.0));
        metrics.set_leader("topology-controller", true);
        assert_eq!(leading(&metrics), Some(1.0));

        let cache = EventObject {
            namespace: "apps",
            kind: "ValkeyCluster",
            name: "cache",
        };
        metrics.event_published("topology-controller", &cache, "Failover");
        metrics.event_published("topology-controller", &cache, "Failover");
        let text = metrics.encode().unwrap();
        assert_eq!(
            line_value(
                &text,
                r#"valkey_operator_events_total{controller="topology-controller",kind="ValkeyCluster",name="cache",namespace="apps",reason="Failover"}"#
            ),
            Some(2.0),
            "{text}"
        );
        metrics.forget_events_of("topology-controller", &cache);
        assert!(
            !metrics
                .encode()
                .unwrap()
                .contains("valkey_operator_events_total{")
        );
    }

    #[test]
    fn registries_are_independent() {
        let a = Metrics::new().unwrap();
        let b = Metrics::new().unwrap();
        a.reconcile_failed("pvc-resizer", &TestError::Kube);
        assert!(a.encode().unwrap().contains("pvc-resizer"));
        assert!(!b.encode().unwrap().contains("pvc-resizer"));
    }
}
