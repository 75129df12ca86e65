//! One reconcile of a ValkeyNode, in stages that each take the previous one's output:
//! [`fetch`] (read the node and what it owns) -> [`plan`](node_controller::plan::plan) (pure)
//! -> [`apply`] (server-side apply under the controller's field manager) ->
//! [`report`](node_controller::report::report) (pure: status and Events) -> [`publish`].
//! A valkey container blocked by its configuration then fails the reconcile
//! ([`Error::ContainerBlocked`]), after the status says so.

mod apply;
mod fetch;
mod publish;

use std::sync::Arc;

use crd_types::ValkeyNode;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::{Api, Client, ResourceExt};
use node_controller::plan::plan;
use node_controller::report::{Report, report};
use operator_runtime::controller::{self, ReconcileContext};

use crate::error::Error;
use apply::apply;
use fetch::fetch;
use publish::publish;

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
    let plan = plan(&live);
    let applied = apply(&apis, plan, ctx.runtime.field_manager).await?;
    let Report {
        status,
        events,
        blocked,
    } = report(&live, &applied, Timestamp::now());
    publish(&apis, &ctx.runtime, &live.node, events, status).await?;
    match blocked {
        // Written and reported; only the user can end the wait. Failing makes the runtime
        // publish the cause as a Warning and look again after a growing delay, instead of
        // every resync; the pod starting (a watched change) still wakes it at once.
        Some(blocked) => Err(blocked.into()),
        None => Ok(controller::resync()),
    }
}

/// The APIs a reconcile of one node uses, in the node's namespace.
pub struct Apis {
    pub namespace: String,
    pub nodes: Api<ValkeyNode>,
    pub config_maps: Api<ConfigMap>,
    pub claims: Api<PersistentVolumeClaim>,
    pub statefulsets: Api<StatefulSet>,
    pub deployments: Api<Deployment>,
    pub pods: Api<Pod>,
    pub storage_classes: Api<StorageClass>,
}

impl Apis {
    fn for_node(client: &Client, node: &ValkeyNode) -> Result<Self, Error> {
        let namespace = node.namespace().ok_or_else(|| Error::Invalid {
            node: node.name_any(),
            field: "metadata.namespace",
        })?;
        let ns = namespace.as_str();
        Ok(Self {
            nodes: Api::namespaced(client.clone(), ns),
            config_maps: Api::namespaced(client.clone(), ns),
            claims: Api::namespaced(client.clone(), ns),
            statefulsets: Api::namespaced(client.clone(), ns),
            deployments: Api::namespaced(client.clone(), ns),
            pods: Api::namespaced(client.clone(), ns),
            storage_classes: Api::all(client.clone()),
            namespace,
        })
    }
}
