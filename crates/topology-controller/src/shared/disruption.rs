//! Object builders (layer 3): the PodDisruptionBudgets that keep a voluntary disruption (a
//! drain, an eviction) from taking two pods of a group at once.
//!
//! - ValkeyCluster: one per shard, `<cluster>-shard-<n>`, over the shard's pods. A drain
//!   evicts a shard's primary (which hands over first, see node-controller's preStop hook)
//!   and its replica one after the other, each only once the other is back and Ready, so a
//!   shard never loses its primary and its last replica together.
//! - ValkeyReplication: `<name>-data` over the data nodes and `<name>-sentinels` over the
//!   sentinels, so a drain never takes the primary with the last replica, nor two sentinels
//!   (a quorum of 2 out of 3 must stay).
//!
//! `maxUnavailable: 1`, and `unhealthyPodEvictionPolicy: AlwaysAllow`: a pod that is not
//! Ready serves nothing, so evicting it costs nothing, and a crash-looping pod must never
//! wedge a Node's maintenance.

use std::collections::{BTreeMap, BTreeSet};

use crd_types::names::{components, labels};
use crd_types::{ValkeyCluster, ValkeyReplication};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};

use crate::shared::owned;

/// Marks the budgets this controller made, so stale ones are found by label.
const BUDGET_LABEL: &str = "valkey.rs/disruption-budget";

/// The name of a ValkeyCluster shard's budget.
pub fn shard_budget_name(cluster: &str, shard: u32) -> String {
    format!("{cluster}-shard-{shard}")
}

/// The budgets of a cluster: one per shard in `shards` (the spec's shards and those that
/// still have members while they leave).
pub fn cluster_budgets(
    cluster: &ValkeyCluster,
    shards: &BTreeSet<u32>,
) -> Vec<PodDisruptionBudget> {
    let name = cluster.name_any();
    shards
        .iter()
        .map(|shard| {
            let selector = BTreeMap::from([
                (labels::CLUSTER.to_string(), name.clone()),
                (labels::SHARD.to_string(), shard.to_string()),
            ]);
            budget(
                cluster,
                shard_budget_name(&name, *shard),
                labels::CLUSTER,
                selector,
            )
        })
        .collect()
}

/// The budgets of a replication group: its data nodes, and its sentinels.
pub fn replication_budgets(replication: &ValkeyReplication) -> Vec<PodDisruptionBudget> {
    let name = replication.name_any();
    [
        ("data", components::SERVER),
        ("sentinels", components::SENTINEL),
    ]
    .into_iter()
    .map(|(suffix, component)| {
        let selector = BTreeMap::from([
            (labels::REPLICATION.to_string(), name.clone()),
            (labels::COMPONENT.to_string(), component.to_string()),
        ]);
        budget(
            replication,
            format!("{name}-{suffix}"),
            labels::REPLICATION,
            selector,
        )
    })
    .collect()
}

/// The label selector listing the budgets made for `parent` (`parent_label` is
/// `valkey.rs/cluster` or `valkey.rs/replication`).
pub fn budgets_selector(parent_label: &str, parent: &str) -> String {
    format!("{parent_label}={parent},{BUDGET_LABEL}")
}

/// Objects listed by [`budgets_selector`] (or a network policy's selector) that are no
/// longer wanted: a removed shard's budget, a policy turned off.
pub fn stale<K: Resource>(live: &[K], wanted: &[K]) -> Vec<String> {
    let wanted: BTreeSet<String> = wanted.iter().map(ResourceExt::name_any).collect();
    live.iter()
        .map(ResourceExt::name_any)
        .filter(|n| !wanted.contains(n))
        .collect()
}

fn budget<K: Resource<DynamicType = ()>>(
    parent: &K,
    name: String,
    parent_label: &str,
    selector: BTreeMap<String, String>,
) -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata: owned::metadata(parent, name, parent_label, BUDGET_LABEL),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(LabelSelector {
                match_labels: Some(selector),
                match_expressions: None,
            }),
            unhealthy_pod_eviction_policy: Some("AlwaysAllow".into()),
            min_available: None,
        }),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crd_types::{ValkeyClusterSpec, ValkeyReplicationSpec};

    fn cluster() -> ValkeyCluster {
        let mut c = ValkeyCluster::new("cache", ValkeyClusterSpec::default());
        c.metadata.namespace = Some("team-a".into());
        c.metadata.uid = Some("uid-1".into());
        c
    }

    fn match_labels(b: &PodDisruptionBudget) -> BTreeMap<String, String> {
        let spec = b.spec.as_ref().unwrap();
        spec.selector
            .as_ref()
            .unwrap()
            .match_labels
            .clone()
            .unwrap()
    }

    #[test]
    fn one_budget_per_shard_over_its_pods() {
        let budgets = cluster_budgets(&cluster(), &BTreeSet::from([0, 1, 2]));
        let names: Vec<String> = budgets.iter().map(ResourceExt::name_any).collect();
        assert_eq!(names, ["cache-shard-0", "cache-shard-1", "cache-shard-2"]);
        let b = &budgets[1];
        assert_eq!(
            match_labels(b),
            BTreeMap::from([
                ("valkey.rs/cluster".to_string(), "cache".to_string()),
                ("valkey.rs/shard".to_string(), "1".to_string()),
            ])
        );
        let spec = b.spec.as_ref().unwrap();
        assert_eq!(spec.max_unavailable, Some(IntOrString::Int(1)));
        assert_eq!(spec.min_available, None);
        assert_eq!(
            spec.unhealthy_pod_eviction_policy.as_deref(),
            Some("AlwaysAllow")
        );
        assert_eq!(b.namespace().as_deref(), Some("team-a"));
        let owner = &b.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("ValkeyCluster", "uid-1")
        );
        assert_eq!(owner.controller, Some(true));
    }

    #[test]
    fn a_replication_group_has_a_data_and_a_sentinel_budget() {
        let mut r = ValkeyReplication::new("sessions", ValkeyReplicationSpec::default());
        r.metadata.uid = Some("uid-2".into());
        let budgets = replication_budgets(&r);
        let names: Vec<String> = budgets.iter().map(ResourceExt::name_any).collect();
        assert_eq!(names, ["sessions-data", "sessions-sentinels"]);
        assert_eq!(
            match_labels(&budgets[0])["app.kubernetes.io/component"],
            "server"
        );
        assert_eq!(
            match_labels(&budgets[1])["app.kubernetes.io/component"],
            "sentinel"
        );
        assert_eq!(
            match_labels(&budgets[1])["valkey.rs/replication"],
            "sessions"
        );
    }

    #[test]
    fn a_removed_shards_budget_is_stale_and_found_by_label() {
        let c = cluster();
        let live = cluster_budgets(&c, &BTreeSet::from([0, 1, 2, 3]));
        let wanted = cluster_budgets(&c, &BTreeSet::from([0, 1, 2]));
        assert_eq!(stale(&live, &wanted), ["cache-shard-3"]);
        assert!(stale(&wanted, &wanted).is_empty());
        let selector = budgets_selector(labels::CLUSTER, "cache");
        assert_eq!(
            selector,
            "valkey.rs/cluster=cache,valkey.rs/disruption-budget"
        );
        for key in ["valkey.rs/cluster", "valkey.rs/disruption-budget"] {
            assert!(live[3].labels().contains_key(key), "{key}");
        }
    }
}
