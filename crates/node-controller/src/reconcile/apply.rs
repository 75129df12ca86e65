//! The apply stage: each object of the plan, with server-side apply under the controller's
//! field manager, in the order a pod needs them (config, claim, workload).

use std::fmt::Debug;

use kube::{Api, Resource, ResourceExt};
use node_controller::plan::{NodePlan, PlannedWorkload, WorkloadChange};
use node_controller::report::{Applied, AppliedWorkload};
use node_controller::workload::Workload;
use operator_runtime::{ApiError, ApiResultExt, ObjectName, Op};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::Apis;

/// Applies what `plan` holds and returns it as the API server stored it.
pub async fn apply(apis: &Apis, plan: NodePlan, field_manager: &str) -> Result<Applied, ApiError> {
    // No `..`: a new kind of object in the plan does not compile until it is applied here.
    let NodePlan {
        decision,
        config_map,
        claim,
        workload,
    } = plan;
    if let Some(config_map) = config_map {
        write(&apis.config_maps, &config_map, field_manager).await?;
    }
    let claim = match claim {
        Some(claim) => Some(write(&apis.claims, &claim, field_manager).await?),
        None => None,
    };
    let workload = match workload {
        Some(planned) => Some(apply_workload(apis, planned, field_manager).await?),
        None => None,
    };
    Ok(Applied {
        decision,
        claim,
        workload,
    })
}

async fn apply_workload(
    apis: &Apis,
    planned: PlannedWorkload,
    field_manager: &str,
) -> Result<AppliedWorkload, ApiError> {
    let PlannedWorkload { workload, change } = planned;
    let workload = match &workload {
        Workload::StatefulSet(s) => {
            Workload::StatefulSet(write(&apis.statefulsets, s, field_manager).await?)
        }
        Workload::Deployment(d) => {
            Workload::Deployment(write(&apis.deployments, d, field_manager).await?)
        }
    };
    let (name, namespace, kind) = (workload.name(), &apis.namespace, workload.kind());
    let revision = workload.revision().unwrap_or("unknown");
    match &change {
        WorkloadChange::Create => {
            tracing::info!(workload = %name, %namespace, kind, revision, "created workload");
        }
        WorkloadChange::Roll { from } => {
            tracing::info!(workload = %name, %namespace, kind, from = from.as_deref().unwrap_or("unknown"), to = revision, "rolling");
        }
        // Same revision yet different: an edit by someone else, or a value the API server
        // rewrites, which would cost an apply on every look.
        WorkloadChange::Repair { field } => {
            tracing::info!(workload = %name, %namespace, kind, %field, "workload differed from its spec; applied");
        }
    }
    Ok(AppliedWorkload { workload, change })
}

/// Server-side applies `object` (which names itself and its namespace).
async fn write<K>(api: &Api<K>, object: &K, field_manager: &str) -> Result<K, ApiError>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + Debug,
{
    operator_runtime::apply(api, &object.name_any(), object, field_manager)
        .await
        .on(Op::Apply, ObjectName::of(object))
}
