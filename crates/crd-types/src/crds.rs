//! The CustomResourceDefinitions, as written to deploy/crds by `crdgen`.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use crate::{ValkeyCluster, ValkeyNode, ValkeyReplication};

/// Every CRD with the file name it is committed under in deploy/crds.
pub fn all() -> Vec<(&'static str, CustomResourceDefinition)> {
    vec![
        ("valkeynodes.yaml", ValkeyNode::crd()),
        ("valkeyclusters.yaml", ValkeyCluster::crd()),
        ("valkeyreplications.yaml", ValkeyReplication::crd()),
    ]
}
