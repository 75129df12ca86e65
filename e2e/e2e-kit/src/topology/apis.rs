//! The APIs a topology's tests use, in one namespace.

use anyhow::{Context, Result};
use crd_types::ValkeyNode;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::api::events::v1::Event;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};

use super::{TOPOLOGY_CONTROLLER, Topology};
use crate::testing::regards;

/// The topologies of kind `T`, their members (ValkeyNodes) and the members' pods, the
/// Secrets and the Events of one namespace.
#[derive(Clone)]
pub struct TopologyApis<T: Topology> {
    pub topologies: Api<T>,
    pub nodes: Api<ValkeyNode>,
    pub pods: Api<Pod>,
    pub secrets: Api<Secret>,
    pub events: Api<Event>,
}

impl<T: Topology> TopologyApis<T> {
    pub fn new(client: &kube::Client, namespace: &str) -> Self {
        Self {
            topologies: Api::namespaced(client.clone(), namespace),
            nodes: Api::namespaced(client.clone(), namespace),
            pods: Api::namespaced(client.clone(), namespace),
            secrets: Api::namespaced(client.clone(), namespace),
            events: Api::namespaced(client.clone(), namespace),
        }
    }

    /// Creates the topology.
    pub async fn create(&self, topology: &T) -> Result<T> {
        self.topologies
            .create(&PostParams::default(), topology)
            .await
            .with_context(|| format!("creating {} {}", T::KIND, topology.name_any()))
    }

    /// A JSON merge patch of the topology (its spec, typically).
    pub async fn patch(&self, name: &str, patch: serde_json::Value) -> Result<T> {
        self.topologies
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .with_context(|| format!("patching {} {name} with {patch}", T::KIND))
    }

    /// Its status (empty while it has none).
    pub async fn status(&self, name: &str) -> Result<T::Status> {
        let topology = self.topologies.get(name).await?;
        Ok(topology.into_status().unwrap_or_default())
    }

    /// The topology's members, by their [`Topology::MEMBER_LABEL`], in name order.
    pub async fn members(&self, name: &str) -> Result<Vec<ValkeyNode>> {
        let selector = format!("{}={name}", T::MEMBER_LABEL);
        let mut nodes = self
            .nodes
            .list(&ListParams::default().labels(&selector))
            .await?
            .items;
        nodes.sort_by_key(|n| n.name_any());
        Ok(nodes)
    }

    /// Events about the topology reported by topology-controller, with `reason` when given.
    pub async fn events_about(&self, name: &str, reason: Option<&str>) -> Result<Vec<Event>> {
        Ok(self
            .events
            .list(&Default::default())
            .await?
            .items
            .into_iter()
            .filter(|e| {
                regards(e, T::KIND, name)
                    && e.reporting_controller.as_deref() == Some(TOPOLOGY_CONTROLLER)
                    && reason.is_none_or(|r| e.reason.as_deref() == Some(r))
            })
            .collect())
    }

    /// Deletes a pod with grace period 0: the process is killed, the object gone at once.
    pub async fn kill_pod(&self, pod: &str) -> Result<()> {
        self.pods
            .delete(
                pod,
                &DeleteParams {
                    grace_period_seconds: Some(0),
                    ..Default::default()
                },
            )
            .await
            .with_context(|| format!("killing pod {pod}"))?;
        Ok(())
    }
}
