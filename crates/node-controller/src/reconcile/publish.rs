//! The publish stage: the report's Events, then its status.

use crd_types::{ValkeyNode, ValkeyNodeStatus};
use kube::ResourceExt;
use node_controller::events::NodeEvent;
use operator_runtime::{ApiError, ApiResultExt, Context, ObjectName, Op};

use super::Apis;

/// Publishes `events` about `node`, then applies `status` (if any). The Events go first: a
/// failed publish is then retried, because the status does not record the change yet.
pub async fn publish(
    apis: &Apis,
    ctx: &Context,
    node: &ValkeyNode,
    events: Vec<NodeEvent>,
    status: Option<ValkeyNodeStatus>,
) -> Result<(), ApiError> {
    for NodeEvent {
        reason,
        note,
        related,
    } in events
    {
        ctx.events.publish(node, reason, note, related).await;
    }
    if let Some(status) = status {
        operator_runtime::apply_status(&apis.nodes, &node.name_any(), &status, ctx.field_manager)
            .await
            .on(Op::ApplyStatus, ObjectName::of(node))?;
    }
    Ok(())
}
