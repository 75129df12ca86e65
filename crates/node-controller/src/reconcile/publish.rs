//! The publish stage: the report's Events, then its status.

use crd_types::ValkeyNode;
use kube::ResourceExt;
use node_controller::events::NodeEvent;
use node_controller::report::Report;
use operator_runtime::{ApiError, ApiResultExt, Context, ObjectName, Op};

use super::Apis;

/// Publishes `report` about `node`. The Events go first: a failed publish is then retried,
/// because the status does not record the change yet.
pub async fn publish(
    apis: &Apis,
    ctx: &Context,
    node: &ValkeyNode,
    report: Report,
) -> Result<(), ApiError> {
    let Report { status, events } = report;
    for NodeEvent {
        reason,
        note,
        related,
    } in events
    {
        ctx.events.publish(node, reason, note, related).await?;
    }
    if let Some(status) = status {
        operator_runtime::apply_status(&apis.nodes, &node.name_any(), &status, ctx.field_manager)
            .await
            .on(Op::ApplyStatus, ObjectName::of(node))?;
    }
    Ok(())
}
