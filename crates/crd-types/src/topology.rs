//! What every topology kind's spec has (ValkeyCluster, ValkeyReplication), written once and
//! flattened into each: the members' pod, authentication, users, NetworkPolicy, TLS and monitors.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use crate::monitoring::MonitoringSpec;
use crate::network::NetworkPolicySpec;
use crate::template::{Auth, TopologyTls, ValkeyNodeTemplate};

/// The spec fields every topology shares, flattened into its spec: the API shows them as
/// fields of the spec itself.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct TopologySpec {
    /// The pod every member runs; changes roll one member at a time, replicas first. On a
    /// ValkeyReplication it is the data nodes' pod, and its image, workload type, announce,
    /// placement and exporter apply to the sentinels too.
    #[serde(default)]
    pub template: ValkeyNodeTemplate,

    /// Client authentication; a password Secret is generated when none is named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<Auth>,

    /// ACL users for applications, on every data node (see [`crate::users`]). A user
    /// removed from the list is deleted; users made by hand are left alone (they do not
    /// survive a restart). Adding or removing the whole field rolls the data nodes once:
    /// their pods gain or lose the users Secret, and without it they start with no users.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    #[x_kube(validation = kube::core::Rule::new(crate::users::UNIQUE_NAMES).message(crate::users::UNIQUE_NAMES_MESSAGE))]
    pub users: Option<Vec<crate::users::User>>,

    /// Who may reach the members: a NetworkPolicy topology-controller renders and owns.
    #[serde(default)]
    pub network_policy: NetworkPolicySpec,

    /// TLS for clients and replication, and on a ValkeyCluster for the cluster bus.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TopologyTls>,

    /// Prometheus monitors topology-controller makes for the topology.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub monitoring: Option<MonitoringSpec>,
}
