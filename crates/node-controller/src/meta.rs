//! Labels, annotations and owner references shared by every object of a node.

use std::collections::BTreeMap;

use crd_types::ValkeyNode;
use crd_types::names::{components, labels};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{Resource, ResourceExt};

/// Pod template annotation holding the template revision (see [`crate::revision`]).
pub const REVISION_ANNOTATION: &str = "valkey.rs/revision";

/// Topology labels copied from the ValkeyNode to its objects, so topology spread
/// constraints and `kubectl get -l` work on shards and members.
const PROPAGATED: &[&str] = &[
    labels::CLUSTER,
    labels::REPLICATION,
    labels::SHARD,
    labels::MEMBER,
];

/// Labels of the ConfigMap, PVC, workload and pod. `valkey.rs/node` is the contract with
/// service-controller: its Service selects the pod by it.
pub fn labels(node: &ValkeyNode) -> BTreeMap<String, String> {
    let name = node.name_any();
    let mut out = BTreeMap::from([
        (labels::NAME.to_string(), labels::NAME_VALUE.to_string()),
        (labels::INSTANCE.to_string(), name.clone()),
        (
            labels::COMPONENT.to_string(),
            components::for_mode(node.spec.mode).to_string(),
        ),
        (
            labels::MANAGED_BY.to_string(),
            labels::MANAGED_BY_VALUE.to_string(),
        ),
        (labels::NODE.to_string(), name),
    ]);
    for key in PROPAGATED {
        if let Some(v) = node.labels().get(*key) {
            out.insert(key.to_string(), v.clone());
        }
    }
    out
}

/// The workload's selector: only the node label, because a selector is immutable and
/// must never change when other labels do.
pub fn selector(node: &ValkeyNode) -> BTreeMap<String, String> {
    BTreeMap::from([(labels::NODE.to_string(), node.name_any())])
}

/// Controller owner reference to the node. `None` until the node has a uid (only in tests:
/// the API server always sets one).
pub fn owner_reference(node: &ValkeyNode) -> Option<OwnerReference> {
    node.controller_owner_ref(&())
}

#[cfg(test)]
pub(crate) mod fixtures {
    use crd_types::{ValkeyNode, ValkeyNodeSpec};

    /// A node as the API server returns it: named, namespaced, with uid and generation.
    pub fn node(name: &str, spec: ValkeyNodeSpec) -> ValkeyNode {
        let mut node = ValkeyNode::new(name, spec);
        node.metadata.namespace = Some("prod".into());
        node.metadata.uid = Some(format!("uid-{name}"));
        node.metadata.generation = Some(3);
        node
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crd_types::ValkeyNodeSpec;
    use crd_types::node::Mode;

    #[test]
    fn labels_carry_the_node_and_topology() {
        let mut n = fixtures::node(
            "orders-0-1",
            ValkeyNodeSpec {
                mode: Mode::Cluster,
                ..Default::default()
            },
        );
        n.metadata.labels = Some(BTreeMap::from([
            (labels::CLUSTER.into(), "orders".into()),
            (labels::SHARD.into(), "0".into()),
            ("team".into(), "payments".into()),
        ]));
        let l = labels(&n);
        assert_eq!(l[labels::NODE], "orders-0-1");
        assert_eq!(l[labels::COMPONENT], "server");
        assert_eq!(l[labels::CLUSTER], "orders");
        assert_eq!(l[labels::SHARD], "0");
        assert!(
            !l.contains_key("team"),
            "only known topology labels propagate"
        );
        assert_eq!(
            selector(&n),
            BTreeMap::from([(labels::NODE.into(), "orders-0-1".into())])
        );
    }

    #[test]
    fn owner_reference_is_a_controller_reference() {
        let n = fixtures::node("a", ValkeyNodeSpec::default());
        let o = owner_reference(&n).unwrap();
        assert_eq!(o.kind, "ValkeyNode");
        assert_eq!(o.uid, "uid-a");
        assert_eq!(o.controller, Some(true));
    }
}
