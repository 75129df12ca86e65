//! Object builders (layer 3): the NetworkPolicy of a topology, `<name>-cluster` or
//! `<name>-replication`, over its member pods. Ingress only (a policy that names Ingress and
//! lists rules denies the rest):
//!
//! - Valkey's port (and the sentinels' for a ValkeyReplication): the spec's clients (by
//!   default every pod of the namespace), the members (replication, Sentinel, the preStop
//!   hand-over) and topology-controller's pods in the operator's namespace.
//! - The cluster bus: the cluster's members only (it has no authentication).
//! - The exporter's port, when there is one: the clients and the spec's `metrics` peers.
//!
//! `networkPolicy.enabled: false` renders none (and the stale one is deleted).

use std::collections::BTreeMap;

use crd_types::names::{labels, ports};
use crd_types::template::TopologyTls;
use crd_types::topology::TopologySpec;
use crd_types::{ValkeyCluster, ValkeyReplication};
use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec as PolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};

use crate::shared::owned;

/// Marks the policies this controller made, so a stale one is found by label.
const POLICY_LABEL: &str = "valkey.rs/network-policy";
/// The operator's controller that connects to members.
const TOPOLOGY_CONTROLLER: &str = "topology-controller";

/// The label selector listing the policies made for `parent` (`parent_label` is
/// `valkey.rs/cluster` or `valkey.rs/replication`).
pub fn policies_selector(parent_label: &str, parent: &str) -> String {
    format!("{parent_label}={parent},{POLICY_LABEL}")
}

/// A ValkeyCluster's policy (none when the spec turns it off); `operator_namespace` holds
/// topology-controller.
pub fn cluster_policy(cluster: &ValkeyCluster, operator_namespace: &str) -> Vec<NetworkPolicy> {
    let spec = &cluster.spec;
    let name = cluster.name_any();
    let members = BTreeMap::from([(labels::CLUSTER.to_string(), name.clone())]);
    let bus = NetworkPolicyIngressRule {
        ports: Some(vec![port(ports::CLUSTER_BUS)]),
        from: Some(vec![pods(&members)]),
    };
    let ports = client_ports(spec.common.tls.as_ref(), &[ports::VALKEY]);
    Parent {
        object: cluster,
        name: format!("{name}-cluster"),
        label: labels::CLUSTER,
        members,
        spec: &spec.common,
    }
    .policy(&ports, Some(bus), operator_namespace)
}

/// `ports`, and the data nodes' plain-text client port when TLS has one beside it.
fn client_ports(tls: Option<&TopologyTls>, ports: &[i32]) -> Vec<i32> {
    let mut list = ports.to_vec();
    if TopologyTls::serves_plain_text(tls) {
        list.push(ports::VALKEY_PLAIN);
    }
    list
}

/// A ValkeyReplication's policy over its data nodes and sentinels.
pub fn replication_policy(
    replication: &ValkeyReplication,
    operator_namespace: &str,
) -> Vec<NetworkPolicy> {
    let spec = &replication.spec;
    let members = BTreeMap::from([(labels::REPLICATION.to_string(), replication.name_any())]);
    let ports = client_ports(spec.common.tls.as_ref(), &[ports::VALKEY, ports::SENTINEL]);
    Parent {
        object: replication,
        name: format!("{}-replication", replication.name_any()),
        label: labels::REPLICATION,
        members,
        spec: &spec.common,
    }
    .policy(&ports, None, operator_namespace)
}

/// The topology a policy is for: the object, the policy's name, the label naming the
/// topology on its members (and their selector), and its spec.
struct Parent<'a, K> {
    object: &'a K,
    name: String,
    label: &'a str,
    members: BTreeMap<String, String>,
    spec: &'a TopologySpec,
}

impl<K: Resource<DynamicType = ()>> Parent<'_, K> {
    /// Clients on `client_ports`, the members among themselves (and on `bus`), the operator,
    /// and the exporter's scrapers; none when the spec turns the policy off.
    fn policy(
        self,
        client_ports: &[i32],
        bus: Option<NetworkPolicyIngressRule>,
        operator_namespace: &str,
    ) -> Vec<NetworkPolicy> {
        let Parent {
            object: parent,
            name,
            label: parent_label,
            members,
            spec,
        } = self;
        let (wanted, template) = (&spec.network_policy, &spec.template);
        if !wanted.enabled {
            return Vec::new();
        }
        let clients = wanted
            .clients
            .clone()
            .unwrap_or_else(|| vec![pods(&BTreeMap::new())]);
        let mut from = clients.clone();
        from.push(pods(&members));
        from.push(operator(operator_namespace));
        let mut ingress = vec![NetworkPolicyIngressRule {
            ports: Some(client_ports.iter().copied().map(port).collect()),
            from: Some(from),
        }];
        ingress.extend(bus);
        let mut scrapers = clients;
        scrapers.extend(wanted.metrics.iter().cloned());
        // No scrapers, no rule: an empty `from` would admit everyone.
        if let Some(exporter) = template.exporter.as_ref().filter(|_| !scrapers.is_empty()) {
            ingress.push(NetworkPolicyIngressRule {
                ports: Some(vec![port(exporter.port)]),
                from: Some(scrapers),
            });
        }
        vec![NetworkPolicy {
            metadata: owned::metadata(parent, name, parent_label, POLICY_LABEL),
            spec: Some(PolicySpec {
                pod_selector: Some(LabelSelector {
                    match_labels: Some(members),
                    match_expressions: None,
                }),
                policy_types: Some(vec!["Ingress".into()]),
                ingress: Some(ingress),
                egress: None,
            }),
        }]
    }
}

fn port(number: i32) -> NetworkPolicyPort {
    NetworkPolicyPort {
        port: Some(IntOrString::Int(number)),
        protocol: Some("TCP".into()),
        end_port: None,
    }
}

/// Pods of the policy's own namespace with these labels (every pod when empty).
fn pods(match_labels: &BTreeMap<String, String>) -> NetworkPolicyPeer {
    NetworkPolicyPeer {
        pod_selector: Some(LabelSelector {
            match_labels: (!match_labels.is_empty()).then(|| match_labels.clone()),
            match_expressions: None,
        }),
        ..Default::default()
    }
}

/// topology-controller's pods: deploy/ labels them so, in the operator's namespace.
fn operator(namespace: &str) -> NetworkPolicyPeer {
    NetworkPolicyPeer {
        namespace_selector: Some(LabelSelector {
            match_labels: Some(BTreeMap::from([(
                "kubernetes.io/metadata.name".to_string(),
                namespace.to_string(),
            )])),
            match_expressions: None,
        }),
        pod_selector: Some(LabelSelector {
            match_labels: Some(BTreeMap::from([
                (
                    labels::NAME.to_string(),
                    labels::MANAGED_BY_VALUE.to_string(),
                ),
                (
                    labels::COMPONENT.to_string(),
                    TOPOLOGY_CONTROLLER.to_string(),
                ),
            ])),
            match_expressions: None,
        }),
        ip_block: None,
    }
}

/// How soon, at the latest, a topology whose NetworkPolicy was refused looks again: nothing
/// watches a user's policy that blocks ours, so its removal is noticed by looking.
pub const REFUSED_POLICY_LOOK: std::time::Duration = std::time::Duration::from_secs(30);

/// The next look, at most [`REFUSED_POLICY_LOOK`] away while the policy is refused.
pub fn idle_look(look: std::time::Duration, policy_refused: bool) -> std::time::Duration {
    if policy_refused {
        look.min(REFUSED_POLICY_LOOK)
    } else {
        look
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crd_types::template::Exporter;
    use crd_types::{ValkeyClusterSpec, ValkeyReplicationSpec};
    use serde_json::json;

    fn spec_json(p: &NetworkPolicy) -> serde_json::Value {
        serde_json::to_value(p.spec.as_ref().unwrap()).unwrap()
    }

    fn operator_peer() -> serde_json::Value {
        json!({
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "valkey-operator-system"}},
            "podSelector": {"matchLabels": {
                "app.kubernetes.io/name": "valkey-operator",
                "app.kubernetes.io/component": "topology-controller",
            }},
        })
    }

    #[test]
    fn a_refused_policy_brings_the_next_look_closer() {
        use std::time::Duration;
        let idle = Duration::from_secs(300);
        assert_eq!(idle_look(idle, false), idle);
        assert_eq!(idle_look(idle, true), REFUSED_POLICY_LOOK);
        let busy = Duration::from_millis(500);
        assert_eq!(idle_look(busy, true), busy, "never later than planned");
    }

    #[test]
    fn a_cluster_takes_clients_from_its_namespace_and_the_bus_from_members_only() {
        let mut c = ValkeyCluster::new("cache", ValkeyClusterSpec::default());
        c.metadata.namespace = Some("team-a".into());
        c.metadata.uid = Some("uid-1".into());
        let policies = cluster_policy(&c, "valkey-operator-system");
        let [p] = policies.as_slice() else {
            panic!("{policies:?}")
        };
        assert_eq!(p.name_any(), "cache-cluster");
        assert_eq!(p.namespace().as_deref(), Some("team-a"));
        assert_eq!(p.owner_references()[0].uid, "uid-1");
        assert_eq!(p.labels()["valkey.rs/network-policy"], "true");
        let members = json!({"podSelector": {"matchLabels": {"valkey.rs/cluster": "cache"}}});
        assert_eq!(
            spec_json(p),
            json!({
                "podSelector": {"matchLabels": {"valkey.rs/cluster": "cache"}},
                "policyTypes": ["Ingress"],
                "ingress": [
                    {
                        "ports": [{"port": 6379, "protocol": "TCP"}],
                        "from": [{"podSelector": {}}, members, operator_peer()],
                    },
                    {
                        "ports": [{"port": 16379, "protocol": "TCP"}],
                        "from": [members],
                    },
                ],
            })
        );
    }

    #[test]
    fn a_group_takes_the_named_clients_and_scrapers_on_its_three_ports() {
        let mut r = ValkeyReplication::new("sessions", ValkeyReplicationSpec::default());
        r.spec.common.template.exporter = Some(Exporter {
            image: "e".into(),
            port: 9121,
            resources: None,
        });
        let app: NetworkPolicyPeer =
            serde_json::from_value(json!({"podSelector": {"matchLabels": {"app": "web"}}}))
                .unwrap();
        let prometheus: NetworkPolicyPeer = serde_json::from_value(
            json!({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}),
        )
        .unwrap();
        r.spec.common.network_policy.clients = Some(vec![app]);
        r.spec.common.network_policy.metrics = vec![prometheus];
        let policies = replication_policy(&r, "valkey-operator-system");
        assert_eq!(policies[0].name_any(), "sessions-replication");
        let app = json!({"podSelector": {"matchLabels": {"app": "web"}}});
        let members =
            json!({"podSelector": {"matchLabels": {"valkey.rs/replication": "sessions"}}});
        assert_eq!(
            spec_json(&policies[0])["ingress"],
            json!([
                {
                    "ports": [{"port": 6379, "protocol": "TCP"}, {"port": 26379, "protocol": "TCP"}],
                    "from": [app, members, operator_peer()],
                },
                {
                    "ports": [{"port": 9121, "protocol": "TCP"}],
                    "from": [app, {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}],
                },
            ])
        );
        // No clients at all: members and the operator only.
        r.spec.common.network_policy.clients = Some(Vec::new());
        let policies = replication_policy(&r, "valkey-operator-system");
        assert_eq!(
            spec_json(&policies[0])["ingress"][0]["from"],
            json!([members, operator_peer()])
        );
        // Nor scrapers: the exporter's port gets no rule (an empty `from` admits everyone).
        r.spec.common.network_policy.metrics.clear();
        let policies = replication_policy(&r, "valkey-operator-system");
        let ingress = spec_json(&policies[0])["ingress"].clone();
        assert_eq!(ingress.as_array().unwrap().len(), 1, "{ingress}");
        // TLS with plain-text clients: their port is a client port too.
        r.spec.common.tls = Some(TopologyTls {
            plain_text_clients: true,
            ca_overlap_seconds: None,
            ..Default::default()
        });
        let policies = replication_policy(&r, "valkey-operator-system");
        assert_eq!(
            spec_json(&policies[0])["ingress"][0]["ports"],
            json!([
                {"port": 6379, "protocol": "TCP"},
                {"port": 26379, "protocol": "TCP"},
                {"port": 6380, "protocol": "TCP"},
            ])
        );
    }

    #[test]
    fn turned_off_renders_none() {
        let mut c = ValkeyCluster::new("cache", ValkeyClusterSpec::default());
        c.spec.common.network_policy.enabled = false;
        assert!(cluster_policy(&c, "valkey-operator-system").is_empty());
    }
}
