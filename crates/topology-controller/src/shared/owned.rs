//! Object builders (layer 3): the metadata of the objects a topology owns besides its
//! members (disruption budgets, its network policy): its namespace, the labels that list
//! them (`parent_label=<parent>` and the kind's `marker`), and the parent as controller, so
//! they go with it.

use std::collections::BTreeMap;

use crd_types::names::labels;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource, ResourceExt};

/// The metadata of `name`, owned by `parent` (`parent_label` is `valkey.rs/cluster` or
/// `valkey.rs/replication`) and marked with label `marker`.
pub fn metadata<K: Resource<DynamicType = ()>>(
    parent: &K,
    name: String,
    parent_label: &str,
    marker: &str,
) -> ObjectMeta {
    let parent_name = parent.meta().name.clone().unwrap_or_default();
    ObjectMeta {
        name: Some(name),
        namespace: parent.meta().namespace.clone(),
        labels: Some(BTreeMap::from([
            (parent_label.to_string(), parent_name.clone()),
            (marker.to_string(), "true".to_string()),
            (labels::PART_OF.to_string(), parent_name),
            (
                labels::MANAGED_BY.to_string(),
                labels::MANAGED_BY_VALUE.to_string(),
            ),
        ])),
        owner_references: parent.controller_owner_ref(&()).map(|o| vec![o]),
        ..Default::default()
    }
}

/// Whether `live`, an object of the same name as `wanted`, has `wanted`'s controller among
/// its owners: otherwise it is somebody else's (a user's own NetworkPolicy that happens to
/// carry our name, say), and applying over it would take it over.
pub fn same_owner<K: Resource>(live: &K, wanted: &K) -> bool {
    let Some(controller) = wanted
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true))
    else {
        return false;
    };
    live.owner_references()
        .iter()
        .any(|o| o.uid == controller.uid)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crd_types::{ValkeyCluster, ValkeyClusterSpec};
    use k8s_openapi::api::networking::v1::NetworkPolicy;

    #[test]
    fn only_an_object_of_the_same_parent_is_ours() {
        let mut cluster = ValkeyCluster::new("cache", ValkeyClusterSpec::default());
        cluster.metadata.namespace = Some("team-a".into());
        cluster.metadata.uid = Some("uid-1".into());
        let policy = |meta: ObjectMeta| NetworkPolicy {
            metadata: meta,
            ..Default::default()
        };
        let wanted = policy(metadata(&cluster, "cache-cluster".into(), "l", "m"));
        assert!(same_owner(&wanted.clone(), &wanted));
        // A user's own, or one of a deleted and recreated cluster of the same name.
        let users = policy(ObjectMeta {
            name: Some("cache-cluster".into()),
            ..Default::default()
        });
        assert!(!same_owner(&users, &wanted));
        cluster.metadata.uid = Some("uid-2".into());
        let older = policy(metadata(&cluster, "cache-cluster".into(), "l", "m"));
        assert!(!same_owner(&older, &wanted));
        // Nothing to compare with when the wanted object names no controller.
        assert!(!same_owner(&users, &users));
    }
}
