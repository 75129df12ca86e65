//! The publish stage: the report's Events (the claim as related object), then its status.

use crd_types::ValkeyNodeStatus;
use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolumeClaim};
use kube::Resource;
use kube::ResourceExt;
use operator_runtime::{ApiError, ApiResultExt, Context, ObjectName, Op};
use pvc_resizer::events::ResizerEvent;
use pvc_resizer::live::Live;

use super::Apis;

pub async fn publish(
    apis: &Apis,
    ctx: &Context,
    live: &Live,
    events: Vec<ResizerEvent>,
    status: Option<ValkeyNodeStatus>,
) -> Result<(), ApiError> {
    let claim = ObjectReference {
        api_version: Some(PersistentVolumeClaim::api_version(&()).into()),
        kind: Some(PersistentVolumeClaim::kind(&()).into()),
        namespace: Some(apis.namespace.clone()),
        name: Some(live.claim_name.clone()),
        ..Default::default()
    };
    for ResizerEvent { reason, note } in events {
        ctx.events
            .publish(&live.node, reason, note, Some(claim.clone()))
            .await;
    }
    if let Some(status) = status {
        operator_runtime::apply_status(
            &apis.nodes,
            &live.node.name_any(),
            &status,
            ctx.field_manager,
        )
        .await
        .on(Op::ApplyStatus, ObjectName::of(&live.node))?;
    }
    Ok(())
}
