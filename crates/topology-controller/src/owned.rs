//! Object builders (layer 3): the metadata of the objects a topology owns besides its
//! members (disruption budgets, its network policy): its namespace, the labels that list
//! them (`parent_label=<parent>` and the kind's `marker`), and the parent as controller, so
//! they go with it.

use std::collections::BTreeMap;

use crd_types::names::labels;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;

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
