//! The fetch stage: the node and everything it owns, read from the API server.

use std::fmt::Debug;

use crd_types::names::{self, labels};
use crd_types::template::WorkloadType;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::ListParams;
use kube::{Api, Resource};
use node_controller::live::Live;
use node_controller::pvc;
use node_controller::workload::Workload;
use operator_runtime::{ApiError, ApiResultExt, ObjectName, Op};
use serde::de::DeserializeOwned;

use super::Apis;

/// What node `name` is and owns now; `None` when it is gone or being deleted (deleting the
/// node deletes what it owns through owner references: nothing to do).
pub async fn fetch(apis: &Apis, name: &str) -> Result<Option<Live>, ApiError> {
    let ns = apis.namespace.as_str();
    // Read again, not taken from the watch cache: see `Live::node`.
    let Some(node) = get(&apis.nodes, ns, name).await? else {
        return Ok(None);
    };
    if node.meta().deletion_timestamp.is_some() {
        return Ok(None);
    }
    let config_map = get(&apis.config_maps, ns, &names::config_map_name(name)).await?;
    let claim = match node.spec.template.persistence {
        Some(_) => get(&apis.claims, ns, &names::pvc_name(name)).await?,
        None => None,
    };
    let workload_name = names::workload_name(name);
    let workload = match node.spec.template.workload_type {
        WorkloadType::StatefulSet => get(&apis.statefulsets, ns, &workload_name)
            .await?
            .map(Workload::StatefulSet),
        WorkloadType::Deployment => get(&apis.deployments, ns, &workload_name)
            .await?
            .map(Workload::Deployment),
    };
    let pods = apis
        .pods
        .list(&ListParams::default().labels(&format!("{}={name}", labels::NODE)))
        .await
        .on(Op::List, ObjectName::new::<Pod>(ns, name))?
        .items;
    let storage_class_missing = match pvc::class_to_check(&node, claim.as_ref()) {
        Some(class) => apis
            .storage_classes
            .get_opt(class)
            .await
            .on(Op::Read, ObjectName::cluster::<StorageClass>(class))?
            .is_none(),
        None => false,
    };
    Ok(Some(Live {
        node,
        config_map,
        claim,
        workload,
        pods,
        storage_class_missing,
    }))
}

/// `name` in `ns`, if it exists.
async fn get<K>(api: &Api<K>, ns: &str, name: &str) -> Result<Option<K>, ApiError>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    api.get_opt(name)
        .await
        .on(Op::Read, ObjectName::new::<K>(ns, name))
}
