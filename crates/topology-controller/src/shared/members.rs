//! What every topology's member ValkeyNodes share: the address a member announces, its TLS,
//! the soft spread over hosts and zones, and whether a built member differs from the live one.

use std::collections::BTreeMap;

use crd_types::names::{self, ports};
use crd_types::node::{Mode, NodeCluster, NodeReplication, RolloutPolicy};
use crd_types::template::{Announce, Tls, TopologyTls};
use crd_types::template::{Auth, ValkeyNodeTemplate};
use crd_types::topology::TopologySpec;
use crd_types::{ValkeyNode, ValkeyNodeSpec};
use k8s_openapi::api::core::v1::TopologySpreadConstraint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::{Resource, ResourceExt};

use crate::shared::member_facts::{Address, Revisions};

/// Spread over Kubernetes nodes, and over zones when the nodes carry one.
pub const SPREAD_KEYS: [&str; 2] = ["kubernetes.io/hostname", "topology.kubernetes.io/zone"];

/// Where the member's Valkey is reached: the address it announces (its Service's ClusterIP,
/// or with `announce: PodIP` its pod's IP), once known.
pub fn announced_address(node: &ValkeyNode) -> Option<Address> {
    let status = node.status.as_ref()?;
    let ip = match node.spec.template.announce {
        Announce::Service => status.endpoint.as_ref()?.cluster_ip.clone(),
        Announce::PodIP => status.workload.as_ref()?.pod_ip.clone(),
    }?;
    if ip.is_empty() || ip == "None" {
        return None;
    }
    Some(Address {
        ip,
        port: ports::VALKEY as u16,
        bus_port: ports::CLUSTER_BUS as u16,
    })
}

/// The member's template revisions, from its ValkeyNode's spec and workload status.
pub fn revisions(node: &ValkeyNode) -> Revisions {
    let workload = node.status.as_ref().and_then(|s| s.workload.as_ref());
    Revisions {
        desired: workload.and_then(|w| w.desired_revision.clone()),
        running: workload.and_then(|w| w.revision.clone()),
        allowed: node.spec.allowed_revision.clone(),
        observed: workload.and_then(|w| w.observed_generation) == node.metadata.generation,
    }
}

/// Whether the live member differs from `built`: spec, our labels, owner. The spec is
/// compared exactly (not with `operator_runtime::is_applied`): a directive removed from the
/// template must reach the member, and a subset check would not see a map shrink.
pub fn needs_apply(built: &ValkeyNode, live: &ValkeyNode) -> bool {
    let spec = |n: &ValkeyNode| serde_json::to_value(&n.spec).ok();
    let labels_kept = built
        .labels()
        .iter()
        .all(|(k, v)| live.labels().get(k) == Some(v));
    spec(built) != spec(live) || !labels_kept || live.owner_references().is_empty()
}

/// The `spec.tls` member `member` of a topology with `spec` runs with: the user's Secret,
/// or the one the operator issues it; a plain-text client port too where the spec asks for
/// one and the member is a data node (`data`): sentinels serve TLS only.
pub fn member_tls(spec: &TopologyTls, member: &str, data: bool) -> Tls {
    Tls {
        secret_name: spec
            .secret_name
            .clone()
            .unwrap_or_else(|| names::member_tls_secret_name(member)),
        auth_clients: spec.auth_clients,
        plain_text_clients: data && spec.plain_text_clients,
    }
}

/// Adds, per spread key (host, zone) the user did not already constrain, a soft constraint
/// (ScheduleAnyway, max skew 1) over the pods `selector` matches.
pub fn spread_softly(
    constraints: &mut Vec<TopologySpreadConstraint>,
    selector: &BTreeMap<String, String>,
) {
    for key in SPREAD_KEYS {
        if constraints.iter().any(|c| c.topology_key == key) {
            continue;
        }
        constraints.push(TopologySpreadConstraint {
            topology_key: key.to_string(),
            max_skew: 1,
            when_unsatisfiable: "ScheduleAnyway".to_string(),
            label_selector: Some(LabelSelector {
                match_labels: Some(selector.clone()),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
}

/// A built member's spread constraints (tests of each kind's builder read them).
#[cfg(test)]
pub fn spread_of(node: &ValkeyNode) -> &[TopologySpreadConstraint] {
    let scheduling = node.spec.template.scheduling.as_ref();
    &scheduling
        .expect("members are spread")
        .topology_spread_constraints
}

/// One member's own part of its ValkeyNode; [`member_node`] adds what every member of a
/// topology gets.
pub struct MemberOf {
    pub name: String,
    pub mode: Mode,
    pub template: ValkeyNodeTemplate,
    pub auth: Auth,
    pub labels: BTreeMap<String, String>,
    /// A data node (not a sentinel): its certificate names the data ports, and it gets the
    /// spec's users.
    pub data: bool,
    /// What a ValkeyReplication's member is told of its group.
    pub replication: Option<NodeReplication>,
    /// What a memory-only ValkeyCluster's member is told of its shard.
    pub cluster: Option<NodeCluster>,
}

/// The member's ValkeyNode: owned by `topology`, gated (`allowed_revision` is its roll gate's
/// current value: it must be sent on every apply, or the field would be dropped), with the
/// topology's TLS and, on a data node, its users.
pub fn member_node<K: Resource<DynamicType = ()>>(
    topology: &K,
    spec: &TopologySpec,
    member: MemberOf,
    allowed_revision: Option<String>,
) -> ValkeyNode {
    let topology_name = topology.meta().name.clone().unwrap_or_default();
    ValkeyNode {
        metadata: ObjectMeta {
            name: Some(member.name.clone()),
            namespace: topology.meta().namespace.clone(),
            labels: Some(member.labels),
            owner_references: topology.controller_owner_ref(&()).map(|o| vec![o]),
            ..Default::default()
        },
        spec: ValkeyNodeSpec {
            mode: member.mode,
            template: member.template,
            auth: Some(member.auth),
            tls: spec
                .tls
                .as_ref()
                .map(|t| member_tls(t, &member.name, member.data)),
            rollout_policy: RolloutPolicy::Gated,
            allowed_revision,
            replication: member.replication,
            cluster: member.cluster,
            users_secret_name: spec
                .users
                .as_ref()
                .filter(|_| member.data)
                .map(|_| names::users_secret_name(&topology_name)),
        },
        status: None,
    }
}
