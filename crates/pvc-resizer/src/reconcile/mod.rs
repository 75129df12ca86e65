//! One reconcile of a ValkeyNode's volume, in stages that each take the previous one's
//! output: [`fetch`] (the node, its claim, the usage from the stats [`Book`], the
//! StorageClass before a growth) -> [`decide`] (pure) -> [`apply`] (server-side apply of the
//! claim's size under pvc-resizer's field manager, with force) -> [`report`] (pure: status
//! and Events) -> [`publish`].

mod apply;
mod fetch;
mod publish;

use std::sync::Arc;
use std::time::Duration;

use crd_types::{ValkeyNode, names};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::{Api, Client, ResourceExt};
use operator_runtime::controller::{self, ReconcileContext};
use pvc_resizer::decide::{Decision, Usage, decide};
use pvc_resizer::policy::Policy;
use pvc_resizer::report::{Report, report};

use crate::error::Error;
use crate::metrics::{ClaimNumbers, ResizerMetrics};
use crate::usage::Book;
use apply::apply;
use fetch::fetch;
use publish::publish;

/// What every reconcile shares.
pub struct Data {
    pub book: Arc<Book>,
    pub metrics: ResizerMetrics,
}

pub async fn reconcile(
    cached: Arc<ValkeyNode>,
    ctx: Arc<ReconcileContext<Data>>,
) -> Result<Action, Error> {
    let apis = Apis::for_node(&ctx.runtime.client, &cached)?;
    let name = cached.name_any();
    let claim_name = names::pvc_name(&name);
    let now = Timestamp::now();
    let Some(live) = fetch(&apis, &ctx.data.book, &name, now).await? else {
        ctx.data.metrics.forget(&apis.namespace, &claim_name);
        ctx.runtime
            .events
            .forget::<ValkeyNode>(&apis.namespace, &name);
        return Ok(Action::await_change());
    };
    let Some(inputs) = live.inputs(now) else {
        // No persistence: nothing to grow, nothing to report.
        return Ok(Action::await_change());
    };
    let decision = decide(&inputs);
    let limit = inputs
        .auto_resize
        .and_then(|auto| Policy::parse(auto).ok())
        .map(|policy| policy.limit);
    let applied = apply(
        &apis,
        &claim_name,
        &decision,
        ctx.runtime.field_manager,
        now,
    )
    .await?;
    let Report { status, events } = report(&live, &decision, &applied, now);
    publish(&apis, &ctx.runtime, &live, events, status).await?;

    let metrics = &ctx.data.metrics;
    if let Some(result) = apply::metric_result(&applied) {
        metrics.resized(&apis.namespace, &claim_name, result);
    }
    let numbers = ClaimNumbers {
        capacity: live.claim.as_ref().and_then(|c| c.capacity),
        used: match &live.usage {
            Usage::Known(u) => Some(u.used_bytes),
            _ => None,
        },
        limit,
    };
    metrics.claim(&apis.namespace, &claim_name, numbers);
    Ok(next(&decision, now))
}

/// When to look again: when a hold ends by itself (a cooldown, a refusal's wait), else on
/// the next change (claim, node, usage) or the resync.
fn next(decision: &Decision, now: Timestamp) -> Action {
    let retry_at = match decision {
        Decision::Hold { retry_at, .. } => *retry_at,
        Decision::Grow { .. } => None,
    };
    match retry_at.and_then(|t| Duration::try_from(t.duration_since(now)).ok()) {
        // A second late, so the hold has surely ended.
        Some(wait) => {
            Action::requeue((wait + Duration::from_secs(1)).min(controller::RESYNC_INTERVAL))
        }
        None => controller::resync(),
    }
}

/// The APIs a reconcile of one node uses, in the node's namespace.
pub struct Apis {
    pub namespace: String,
    pub nodes: Api<ValkeyNode>,
    pub claims: Api<PersistentVolumeClaim>,
    pub storage_classes: Api<StorageClass>,
}

impl Apis {
    fn for_node(client: &Client, node: &ValkeyNode) -> Result<Self, Error> {
        let namespace = node.namespace().ok_or_else(|| Error::Invalid {
            node: node.name_any(),
            field: "metadata.namespace",
        })?;
        Ok(Self {
            nodes: Api::namespaced(client.clone(), &namespace),
            claims: Api::namespaced(client.clone(), &namespace),
            storage_classes: Api::all(client.clone()),
            namespace,
        })
    }
}
