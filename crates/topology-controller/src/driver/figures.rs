//! The topologies' figures on /metrics: read from the controllers' caches at each scrape
//! ([`topology_controller::shared::figures`] says what), so they cost nothing between
//! scrapes and a deleted topology's series go with it.

use crd_types::{ValkeyCluster, ValkeyReplication};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::reflector::Store;
use operator_runtime::controller::Guarded;
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{GaugeVec, Opts};
use topology_controller::shared::figures::{Figure, SERIES, cluster_figures, replication_figures};

/// Labels every series has, before its own.
const TOPOLOGY_LABELS: [&str; 3] = ["namespace", "kind", "name"];

/// A collector over both kinds' caches.
pub struct Figures {
    clusters: Store<Guarded<ValkeyCluster>>,
    groups: Store<Guarded<ValkeyReplication>>,
    /// Each metric's description, from an empty vector of it.
    descs: Vec<Desc>,
}

impl Figures {
    pub fn new(
        clusters: Store<Guarded<ValkeyCluster>>,
        groups: Store<Guarded<ValkeyReplication>>,
    ) -> Result<Self, prometheus::Error> {
        let descs = gauges()?
            .iter()
            .flat_map(|g| g.desc().into_iter().cloned())
            .collect();
        Ok(Self {
            clusters,
            groups,
            descs,
        })
    }
}

/// An empty gauge vector per metric of [`SERIES`], in its order.
fn gauges() -> Result<Vec<GaugeVec>, prometheus::Error> {
    SERIES
        .iter()
        .map(|(name, help, own)| {
            let labels: Vec<&str> = TOPOLOGY_LABELS.iter().chain(own.iter()).copied().collect();
            GaugeVec::new(Opts::new(*name, *help), &labels)
        })
        .collect()
}

/// Sets `figure` of the topology `kind/namespace/name` in its metric's vector.
fn set(gauges: &[GaugeVec], kind: &str, topology: &impl ResourceExt, figure: Figure) {
    let Some(index) = SERIES
        .iter()
        .position(|(name, _, _)| *name == figure.metric)
    else {
        return;
    };
    let namespace = topology.namespace().unwrap_or_default();
    let name = topology.name_any();
    let mut values: Vec<&str> = vec![&namespace, kind, &name];
    values.extend(figure.labels.iter().map(String::as_str));
    if let Ok(gauge) = gauges[index].get_metric_with_label_values(&values) {
        gauge.set(figure.value);
    }
}

impl Collector for Figures {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let Ok(gauges) = gauges() else {
            return Vec::new();
        };
        let now = Timestamp::now();
        for cached in self.clusters.state() {
            if let Ok(cluster) = &cached.0 {
                for figure in cluster_figures(cluster, now) {
                    set(&gauges, "ValkeyCluster", cluster, figure);
                }
            }
        }
        for cached in self.groups.state() {
            if let Ok(group) = &cached.0 {
                for figure in replication_figures(group, now) {
                    set(&gauges, "ValkeyReplication", group, figure);
                }
            }
        }
        gauges.iter().flat_map(|g| g.collect()).collect()
    }
}

/// Registers the figures of both kinds' caches on the controller's /metrics.
pub fn register(
    metrics: &operator_runtime::Metrics,
    clusters: Store<Guarded<ValkeyCluster>>,
    groups: Store<Guarded<ValkeyReplication>>,
) -> Result<(), prometheus::Error> {
    metrics.register(Box::new(Figures::new(clusters, groups)?))
}
