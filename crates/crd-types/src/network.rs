//! `networkPolicy`: who may reach a topology's members, rendered by topology-controller as
//! one NetworkPolicy per topology.

use k8s_openapi::api::networking::v1::NetworkPolicyPeer;
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// A peer the API server would refuse in a NetworkPolicy (an ipBlock with selectors, or
/// nothing at all) is refused here, where the user sees it, not at the policy's apply.
const PEER_SHAPE: &str = "has(p.ipBlock) ? !has(p.podSelector) && !has(p.namespaceSelector) : has(p.podSelector) || has(p.namespaceSelector)";

/// Who may reach the members. The members reach each other (replication, the cluster bus,
/// Sentinel) and topology-controller reaches them whatever this says; the cluster bus is
/// open to members only.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new(format!("!has(self.clients) || self.clients.all(p, {PEER_SHAPE})")).message("networkPolicy.clients: each peer is an ipBlock alone, or a podSelector and/or a namespaceSelector"),
    validation = Rule::new(format!("!has(self.metrics) || self.metrics.all(p, {PEER_SHAPE})")).message("networkPolicy.metrics: each peer is an ipBlock alone, or a podSelector and/or a namespaceSelector")
)]
pub struct NetworkPolicySpec {
    /// Render the NetworkPolicy (default). Off: the members take connections from anywhere
    /// the cluster's network allows, and a policy rendered before is deleted.
    #[serde(default = "enabled")]
    pub enabled: bool,
    /// Who may connect as a client (Valkey's port, and the sentinels' for a
    /// ValkeyReplication), as NetworkPolicy peers. Absent: every pod of the topology's
    /// namespace. Empty: members and the operator only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    pub clients: Option<Vec<NetworkPolicyPeer>>,
    /// Who may scrape the exporter's port besides the clients (Prometheus in its own
    /// namespace, say).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub metrics: Vec<NetworkPolicyPeer>,
}

impl Default for NetworkPolicySpec {
    fn default() -> Self {
        Self {
            enabled: true,
            clients: None,
            metrics: Vec::new(),
        }
    }
}

fn enabled() -> bool {
    true
}
