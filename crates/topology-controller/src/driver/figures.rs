//! The topologies' figures on /metrics: read from the controllers' caches at each scrape
//! ([`topology_controller::shared::figures`] says what), so they cost nothing between
//! scrapes and a deleted topology's series go with it. The certificates' expiry comes from
//! the book the reconciles keep ([`ExpiryBook`]), shown only for topologies the caches hold
//! with that TLS.

use std::collections::BTreeMap;

use crd_types::{ValkeyCluster, ValkeyReplication};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::reflector::Store;
use operator_runtime::controller::Guarded;
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{GaugeVec, Opts};
use topology_controller::shared::cert_expiry::{ExpiryBook, TopologyKey};
use topology_controller::shared::figures::{
    Figure, SERIES, certificate_figure, cluster_figures, replication_figures,
};

use crate::driver::shared::topology::Topology;

/// Labels every series has, before its own.
const TOPOLOGY_LABELS: [&str; 3] = ["namespace", "kind", "name"];

/// A collector over both kinds' caches.
pub struct Figures {
    clusters: Store<Guarded<ValkeyCluster>>,
    groups: Store<Guarded<ValkeyReplication>>,
    certificates: ExpiryBook,
    /// Each metric's description, from an empty vector of it.
    descs: Vec<Desc>,
}

impl Figures {
    pub fn new(
        clusters: Store<Guarded<ValkeyCluster>>,
        groups: Store<Guarded<ValkeyReplication>>,
        certificates: ExpiryBook,
    ) -> Result<Self, prometheus::Error> {
        let descs = gauges()?
            .iter()
            .flat_map(|g| g.desc().into_iter().cloned())
            .collect();
        Ok(Self {
            clusters,
            groups,
            certificates,
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

/// A topology of kind `T` as the figures' labels name it.
fn key<T: Topology>(topology: &T) -> TopologyKey {
    let namespace = topology.namespace().unwrap_or_default();
    (namespace, T::KIND, topology.name_any())
}

/// Sets `figure` of the topology `(namespace, kind, name)` in its metric's vector.
fn set(gauges: &[GaugeVec], topology: &TopologyKey, figure: Figure) {
    let Some(index) = SERIES
        .iter()
        .position(|(name, _, _)| *name == figure.metric)
    else {
        return;
    };
    let (namespace, kind, name) = topology;
    let mut values: Vec<&str> = vec![namespace, kind, name];
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
        // The TLS topologies cached, and whether the operator issues their certificates.
        let mut tls = BTreeMap::new();
        for cached in self.clusters.state() {
            if let Ok(cluster) = &cached.0 {
                let at = key(cluster);
                for figure in cluster_figures(cluster, now) {
                    set(&gauges, &at, figure);
                }
                if let Some(spec) = cluster.tls() {
                    tls.insert(at, spec.secret_name.is_none());
                }
            }
        }
        for cached in self.groups.state() {
            if let Ok(group) = &cached.0 {
                let at = key(group);
                for figure in replication_figures(group, now) {
                    set(&gauges, &at, figure);
                }
                if let Some(spec) = group.tls() {
                    tls.insert(at, spec.secret_name.is_none());
                }
            }
        }
        // The book changes only when a reconcile reads the TLS: a topology paused, or
        // failing before that, keeps an older record the cache may contradict.
        for (at, expiry) in self.certificates.entries() {
            if tls.get(&at) == Some(&expiry.managed) {
                set(&gauges, &at, certificate_figure(&expiry));
            }
        }
        gauges.iter().flat_map(|g| g.collect()).collect()
    }
}

/// Registers the figures of both kinds' caches, and their certificates' expiry, on the
/// controller's /metrics.
pub fn register(
    metrics: &operator_runtime::Metrics,
    clusters: Store<Guarded<ValkeyCluster>>,
    groups: Store<Guarded<ValkeyReplication>>,
    certificates: ExpiryBook,
) -> Result<(), prometheus::Error> {
    metrics.register(Box::new(Figures::new(clusters, groups, certificates)?))
}

#[cfg(test)]
mod tests;
