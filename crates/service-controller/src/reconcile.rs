//! One reconcile of a ValkeyNode: fetch the Service, build the desired one, apply it,
//! publish Events, apply this controller's part of the status.

use std::sync::Arc;

use crd_types::ValkeyNode;
use crd_types::names;
use k8s_openapi::api::core::v1::{ObjectReference, Service};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Api, Resource, ResourceExt};
use operator_runtime::controller::{self, ReconcileContext};

use crate::error::Error;
use crate::service;
use crate::status::{self, Observed};

/// Event reasons.
pub const SERVICE_CREATED: &str = "ServiceCreated";
pub const ANNOUNCE_ADDRESS_CHANGED: &str = "AnnounceAddressChanged";
pub const SERVICE_NOT_OWNED: &str = status::REASON_NOT_OWNED;

/// What every reconcile shares.
pub struct State {
    /// Publishes Events (events.k8s.io/v1) on ValkeyNodes as `service-controller`.
    pub recorder: Recorder,
}

pub async fn reconcile(
    cached: Arc<ValkeyNode>,
    ctx: Arc<ReconcileContext<State>>,
) -> Result<Action, Error> {
    let name = cached.name_any();
    let namespace = cached.namespace().ok_or_else(|| Error::MissingField {
        node: name.clone(),
        field: "metadata.namespace",
    })?;
    let client = ctx.runtime.client.clone();
    let services: Api<Service> = Api::namespaced(client.clone(), &namespace);
    let nodes: Api<ValkeyNode> = Api::namespaced(client, &namespace);
    let field_manager = ctx.runtime.field_manager;
    let service_name = names::service_name(&name);

    // Fetch. The node itself is read again: the cache may not show the status this
    // controller applied a moment ago, and the recorded ClusterIP is what a new one is
    // compared with.
    let Some(node) = nodes
        .get_opt(&name)
        .await
        .map_err(|source| Error::ReadNode {
            namespace: namespace.clone(),
            name: name.clone(),
            source: Box::new(source),
        })?
    else {
        return Ok(Action::await_change());
    };
    // Deleting the node deletes its Service through the owner reference; nothing to do.
    if node.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let recorder = &ctx.data.recorder;
    let publish = |type_, reason, note, service: &Service| {
        publish(
            recorder,
            &node,
            type_,
            reason,
            note,
            service.object_ref(&()),
        )
    };

    let existing = services
        .get_opt(&service_name)
        .await
        .map_err(|source| Error::ReadService {
            namespace: namespace.clone(),
            name: service_name.clone(),
            source: Box::new(source),
        })?;

    let now = Timestamp::now();
    let desired_status = match &existing {
        Some(found) if !service::controlled_by(found, &node) => {
            let desired = status::desired(&node, Observed::NotOwned, now);
            if status::needs_update(&node, &desired) {
                tracing::warn!(node = %name, %namespace, service = %service_name, "a Service of the node's name exists and is not controlled by it; leaving it alone");
                publish(
                    EventType::Warning,
                    SERVICE_NOT_OWNED,
                    format!(
                        "Service {service_name} exists and is not controlled by this ValkeyNode; delete it so the node's own Service can be created"
                    ),
                    found,
                )
                .await?;
            }
            desired
        }
        _ => {
            // Build and apply.
            let desired = service::desired(&node)?;
            // Skipped when the live Service already says it all: an idle resync costs a read.
            let applied = match existing
                .as_ref()
                .filter(|live| operator_runtime::is_applied(&desired, live))
            {
                Some(live) => live.clone(),
                None => operator_runtime::apply(&services, &service_name, &desired, field_manager)
                    .await
                    .map_err(|source| Error::ApplyService {
                        namespace: namespace.clone(),
                        name: service_name.clone(),
                        source: Box::new(source),
                    })?,
            };
            let cluster_ip = service::cluster_ip(&applied);
            if existing.is_none() {
                tracing::info!(node = %name, %namespace, service = %service_name, cluster_ip, "created Service");
                publish(
                    EventType::Normal,
                    SERVICE_CREATED,
                    format!(
                        "Service {service_name} created with ClusterIP {}",
                        cluster_ip.unwrap_or("<none yet>")
                    ),
                    &applied,
                )
                .await?;
            }
            // Published before the status records the new address, so a failed publish is
            // retried: the next reconcile still sees the old address in the status.
            if let Some(change) = status::address_change(&node, cluster_ip) {
                tracing::warn!(node = %name, %namespace, old = %change.old, new = %change.new, "announce address changed");
                publish(
                    EventType::Warning,
                    ANNOUNCE_ADDRESS_CHANGED,
                    format!(
                        "ClusterIP of Service {service_name} changed {} -> {}; peers must learn the new announce address and the pod restarts with it",
                        change.old, change.new
                    ),
                    &applied,
                )
                .await?;
            }
            status::desired(&node, Observed::Service(&applied), now)
        }
    };

    // Status.
    if status::needs_update(&node, &desired_status) {
        operator_runtime::apply_status(&nodes, &name, &desired_status, field_manager)
            .await
            .map_err(|source| Error::ApplyStatus {
                namespace: namespace.clone(),
                name: name.clone(),
                source: Box::new(source),
            })?;
    }
    Ok(controller::resync())
}

/// Publishes an Event about `node`, with its Service as the related object.
async fn publish(
    recorder: &Recorder,
    node: &ValkeyNode,
    type_: EventType,
    reason: &'static str,
    note: String,
    service: ObjectReference,
) -> Result<(), Error> {
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: "ApplyService".into(),
        secondary: Some(service),
    };
    recorder
        .publish(&event, &node.object_ref(&()))
        .await
        .map_err(|source| Error::PublishEvent {
            namespace: node.namespace().unwrap_or_default(),
            name: node.name_any(),
            reason,
            source: Box::new(source),
        })
}
