//! The slots and keys each ValkeyCluster's steps moved, as counters on /metrics. Counted by
//! the leader as its steps finish, so they start from zero with each leader, as counters do.

use prometheus::{IntCounterVec, Opts};
use topology_controller::cluster::migrate::Moved;

/// `valkey_operator_slots_moved_total` and `valkey_operator_keys_moved_total`, by namespace
/// and cluster name.
#[derive(Clone)]
pub struct MovedCounters {
    slots: IntCounterVec,
    keys: IntCounterVec,
}

const LABELS: &[&str] = &["namespace", "name"];

impl MovedCounters {
    pub fn new() -> Self {
        // Constant names and labels, valid as the tests show: `new` cannot fail.
        let counter = |name: &str, help: &str| {
            IntCounterVec::new(Opts::new(name, help), LABELS).expect("a valid counter")
        };
        Self {
            slots: counter(
                "valkey_operator_slots_moved_total",
                "Slots a ValkeyCluster's steps moved to another shard",
            ),
            keys: counter(
                "valkey_operator_keys_moved_total",
                "Keys MIGRATE moved with those slots (Valkey before 9.0; atomic slot migration reports no count)",
            ),
        }
    }

    /// Adds both to the controller's /metrics.
    pub fn register(&self, metrics: &operator_runtime::Metrics) -> Result<(), prometheus::Error> {
        metrics.register(Box::new(self.slots.clone()))?;
        metrics.register(Box::new(self.keys.clone()))
    }

    /// What one step moved.
    pub fn record(&self, namespace: &str, name: &str, moved: &Moved) {
        let labels = [namespace, name];
        self.slots
            .with_label_values(&labels)
            .inc_by(moved.slots as u64);
        if let Some(keys) = moved.keys {
            self.keys.with_label_values(&labels).inc_by(keys);
        }
    }

    /// A cluster that is gone: its series go too.
    pub fn forget(&self, namespace: &str, name: &str) {
        let labels = [namespace, name];
        let _ = self.slots.remove_label_values(&labels);
        let _ = self.keys.remove_label_values(&labels);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::Registry;

    fn values(registry: &Registry) -> Vec<(String, String, f64)> {
        registry
            .gather()
            .iter()
            .flat_map(|family| {
                family.get_metric().iter().map(|m| {
                    let name = m.get_label().iter().find(|l| l.name() == "name").unwrap();
                    let value = m.get_counter().get_value();
                    (family.name().to_string(), name.value().to_string(), value)
                })
            })
            .collect()
    }

    #[test]
    fn steps_add_up_per_cluster_and_a_gone_cluster_leaves_no_series() {
        let counters = MovedCounters::new();
        let registry = Registry::new();
        registry.register(Box::new(counters.slots.clone())).unwrap();
        registry.register(Box::new(counters.keys.clone())).unwrap();
        let step = |slots, keys| Moved {
            slots,
            keys,
            stopped: None,
        };
        counters.record("shop", "orders", &step(100, Some(2_000)));
        counters.record("shop", "orders", &step(50, Some(10)));
        counters.record("shop", "carts", &step(16, None));
        let mut seen = values(&registry);
        seen.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        let keys = "valkey_operator_keys_moved_total".to_string();
        let slots = "valkey_operator_slots_moved_total".to_string();
        assert_eq!(
            seen,
            [
                (keys.clone(), "orders".into(), 2_010.0),
                (slots.clone(), "carts".into(), 16.0),
                (slots.clone(), "orders".into(), 150.0),
            ],
            "an atomic step adds slots and no keys"
        );
        counters.forget("shop", "orders");
        assert_eq!(values(&registry), [(slots, "carts".into(), 16.0)]);
    }
}
