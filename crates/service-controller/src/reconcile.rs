//! One reconcile of a ValkeyNode, in stages that each take the previous one's output:
//! [`fetch`] -> [`build`](crate::build::build) (pure) -> [`apply`] (server-side apply under
//! the controller's field manager) -> [`report`](crate::report::report) (pure: status and
//! Events) -> [`publish`].

use std::sync::Arc;

use crd_types::ValkeyNode;
use crd_types::names;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::{Api, Client, Resource, ResourceExt};
use operator_runtime::controller::{self, ReconcileContext};
use operator_runtime::{ApiError, ApiResultExt, Context, EventReason, ObjectName, Op};

use crate::build::{Build, Live, build};
use crate::error::Error;
use crate::events::ServiceEvent;
use crate::report::{Applied, Report, report};

pub async fn reconcile(
    cached: Arc<ValkeyNode>,
    ctx: Arc<ReconcileContext<()>>,
) -> Result<Action, Error> {
    let apis = Apis::for_node(&ctx.runtime.client, &cached)?;
    let Some(live) = fetch(&apis, &cached.name_any()).await? else {
        let events = &ctx.runtime.events;
        events.forget::<ValkeyNode>(&apis.namespace, &cached.name_any());
        return Ok(Action::await_change());
    };
    let build = build(&live)?;
    let applied = apply(&apis, build, ctx.runtime.field_manager).await?;
    let report = report(&live, &applied, Timestamp::now());
    publish(&apis, &ctx.runtime, &live.node, report).await?;
    Ok(controller::resync())
}

/// The APIs a reconcile of one node uses, in the node's namespace.
struct Apis {
    namespace: String,
    nodes: Api<ValkeyNode>,
    services: Api<Service>,
}

impl Apis {
    fn for_node(client: &Client, node: &ValkeyNode) -> Result<Self, Error> {
        let namespace = node.namespace().ok_or_else(|| Error::Invalid {
            node: node.name_any(),
            field: "metadata.namespace",
        })?;
        Ok(Self {
            nodes: Api::namespaced(client.clone(), &namespace),
            services: Api::namespaced(client.clone(), &namespace),
            namespace,
        })
    }
}

/// The node and the Service of its name; `None` when the node is gone or being deleted
/// (its Service goes with it through the owner reference: nothing to do).
async fn fetch(apis: &Apis, name: &str) -> Result<Option<Live>, ApiError> {
    let ns = apis.namespace.as_str();
    let Some(node) = apis
        .nodes
        .get_opt(name)
        .await
        .on(Op::Read, ObjectName::new::<ValkeyNode>(ns, name))?
    else {
        return Ok(None);
    };
    if node.meta().deletion_timestamp.is_some() {
        return Ok(None);
    }
    let service_name = names::service_name(name);
    let service = apis
        .services
        .get_opt(&service_name)
        .await
        .on(Op::Read, ObjectName::new::<Service>(ns, &service_name))?;
    Ok(Some(Live { node, service }))
}

/// Applies the node's Service when `build` says so; returns it as the API server holds it.
async fn apply(apis: &Apis, build: Build, field_manager: &str) -> Result<Applied, ApiError> {
    let created = matches!(build, Build::Create { .. });
    Ok(match build {
        Build::NotOwned { found } => Applied::NotOwned { found },
        Build::Current { live } => Applied::Service {
            service: live,
            created: false,
        },
        Build::Create { service } | Build::Update { service } => {
            let name = service.name_any();
            let stored = operator_runtime::apply(&apis.services, &name, &service, field_manager)
                .await
                .on(Op::Apply, ObjectName::of(&service))?;
            Applied::Service {
                service: stored,
                created,
            }
        }
    })
}

/// Publishes `report` about `node`: the Events first (a failed publish is then retried,
/// because the status does not record the change yet), then the status.
async fn publish(
    apis: &Apis,
    ctx: &Context,
    node: &ValkeyNode,
    report: Report,
) -> Result<(), ApiError> {
    let Report { status, events } = report;
    for ServiceEvent {
        reason,
        note,
        related,
    } in events
    {
        if reason.is_warning() {
            tracing::warn!(node = %node.name_any(), namespace = %apis.namespace, reason = reason.as_str(), %note);
        } else {
            tracing::info!(node = %node.name_any(), namespace = %apis.namespace, reason = reason.as_str(), %note);
        }
        ctx.events.publish(node, reason, note, related).await;
    }
    if let Some(status) = status {
        operator_runtime::apply_status(&apis.nodes, &node.name_any(), &status, ctx.field_manager)
            .await
            .on(Op::ApplyStatus, ObjectName::of(node))?;
    }
    Ok(())
}
