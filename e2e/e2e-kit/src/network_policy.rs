//! Evaluates NetworkPolicies as an enforcing network plugin would, for tests on a local
//! cluster that enforces none: whether a policy lets a pod (by its labels and its
//! namespace's labels) reach another pod on a port.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicyPeer};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};

/// A pod as a policy sees it: its namespace's name and labels, and its own labels.
#[derive(Clone, Debug)]
pub struct Endpoint {
    pub namespace: String,
    pub namespace_labels: BTreeMap<String, String>,
    pub labels: BTreeMap<String, String>,
}

/// Whether `selector` selects `labels` (an empty one selects everything).
pub fn selects(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let by_labels = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let by_expressions = selector.match_expressions.iter().flatten().all(|e| {
        let value = labels.get(&e.key);
        let values = e.values.clone().unwrap_or_default();
        match e.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            other => panic!("unknown selector operator {other}"),
        }
    });
    by_labels && by_expressions
}

/// Whether `policy` restricts ingress to `pod`: same namespace, selected by its
/// podSelector, and Ingress among its policyTypes (absent ones mean Ingress).
pub fn applies_to(policy: &NetworkPolicy, pod: &Endpoint) -> bool {
    let Some(spec) = &policy.spec else {
        return false;
    };
    let ingress = spec
        .policy_types
        .as_ref()
        .is_none_or(|t| t.iter().any(|t| t == "Ingress"));
    ingress
        && policy.metadata.namespace.as_deref() == Some(pod.namespace.as_str())
        && spec
            .pod_selector
            .as_ref()
            .is_some_and(|s| selects(s, &pod.labels))
}

/// Whether `policy`, which applies to `to`, admits `from` on TCP `port`.
pub fn admits(policy: &NetworkPolicy, from: &Endpoint, port: i32) -> bool {
    let Some(spec) = &policy.spec else {
        return false;
    };
    let home = policy.metadata.namespace.as_deref().unwrap_or_default();
    spec.ingress.iter().flatten().any(|rule| {
        // An absent or empty list of ports (or of peers) admits all of them.
        let port_ok = rule.ports.as_ref().is_none_or(|ports| {
            ports.is_empty()
                || ports.iter().any(|p| {
                    p.protocol.as_deref().unwrap_or("TCP") == "TCP"
                        && match (&p.port, p.end_port) {
                            (None, _) => true,
                            (Some(IntOrString::Int(n)), None) => *n == port,
                            (Some(IntOrString::Int(n)), Some(end)) => (*n..=end).contains(&port),
                            (Some(IntOrString::String(_)), _) => {
                                panic!("named ports are not rendered")
                            }
                        }
                })
        });
        let peer_ok = rule.from.as_ref().is_none_or(|peers| {
            peers.is_empty() || peers.iter().any(|peer| peer_admits(peer, home, from))
        });
        port_ok && peer_ok
    })
}

fn peer_admits(peer: &NetworkPolicyPeer, home: &str, from: &Endpoint) -> bool {
    if peer.ip_block.is_some() {
        return false; // pods are judged by labels here, not by address
    }
    let namespace_ok = match &peer.namespace_selector {
        None => from.namespace == home,
        Some(s) => selects(s, &from.namespace_labels),
    };
    let pod_ok = peer
        .pod_selector
        .as_ref()
        .is_none_or(|s| selects(s, &from.labels));
    namespace_ok && pod_ok
}

/// A policy as the API server holds it, and the pods it is over, each with its name.
pub struct Live {
    pub policy: NetworkPolicy,
    pub members: Vec<(String, Endpoint)>,
}

/// Policy `name` of `namespace` (`None` when there is none), and the pods `members` (a
/// label selector) selects there.
pub async fn live(
    client: &Client,
    namespace: &str,
    name: &str,
    members: &str,
) -> Result<Option<Live>> {
    let policies: Api<NetworkPolicy> = Api::namespaced(client.clone(), namespace);
    let Some(policy) = policies.get_opt(name).await? else {
        return Ok(None);
    };
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let namespace_labels = namespace_labels(client, namespace).await?;
    let members = pods
        .list(&ListParams::default().labels(members))
        .await?
        .into_iter()
        .map(|pod| {
            let endpoint = Endpoint {
                namespace: namespace.to_string(),
                namespace_labels: namespace_labels.clone(),
                labels: pod.labels().clone(),
            };
            (pod.name_any(), endpoint)
        })
        .collect();
    Ok(Some(Live { policy, members }))
}

/// A pod with `labels` in `namespace` (which must exist: its live labels are read).
pub async fn endpoint(
    client: &Client,
    namespace: &str,
    labels: &[(&str, &str)],
) -> Result<Endpoint> {
    Ok(Endpoint {
        namespace: namespace.to_string(),
        namespace_labels: namespace_labels(client, namespace).await?,
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    })
}

/// A pod of `controller`'s Deployment in deploy/, in the operator's namespace.
pub async fn controller_pod(client: &Client, controller: &str) -> Result<Endpoint> {
    let path = local_cluster::repo_root()
        .join("deploy/components")
        .join(controller)
        .join("deployment.yaml");
    let yaml = std::fs::read_to_string(&path).with_context(|| format!("{}", path.display()))?;
    let deployment = local_cluster::operator::documents(&yaml)?
        .into_iter()
        .find(|o| o.types.as_ref().is_some_and(|t| t.kind == "Deployment"))
        .context("no Deployment")?;
    let namespace = deployment
        .metadata
        .namespace
        .clone()
        .context("no namespace")?;
    let labels: BTreeMap<String, String> =
        serde_json::from_value(deployment.data["spec"]["template"]["metadata"]["labels"].clone())?;
    Ok(Endpoint {
        namespace_labels: namespace_labels(client, &namespace).await?,
        namespace,
        labels,
    })
}

async fn namespace_labels(client: &Client, namespace: &str) -> Result<BTreeMap<String, String>> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    Ok(namespaces.get(namespace).await?.labels().clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn endpoint(namespace: &str, labels: &[(&str, &str)]) -> Endpoint {
        Endpoint {
            namespace: namespace.into(),
            namespace_labels: BTreeMap::from([(
                "kubernetes.io/metadata.name".to_string(),
                namespace.to_string(),
            )]),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn peers_ports_and_expressions_judge_as_a_plugin_would() {
        let policy: NetworkPolicy = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "a"},
            "spec": {
                "podSelector": {"matchLabels": {"db": "x"}},
                "ingress": [
                    {"ports": [{"port": 6379}], "from": [{"podSelector": {}}]},
                    {"ports": [{"port": 9000, "endPort": 9002}],
                     "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "b"}},
                               "podSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]}}]},
                ],
            },
        }))
        .unwrap();
        assert!(applies_to(&policy, &endpoint("a", &[("db", "x")])));
        assert!(!applies_to(&policy, &endpoint("b", &[("db", "x")])));
        assert!(!applies_to(&policy, &endpoint("a", &[("db", "y")])));
        let neighbour = endpoint("a", &[]);
        assert!(admits(&policy, &neighbour, 6379));
        assert!(!admits(&policy, &neighbour, 9001));
        assert!(!admits(&policy, &endpoint("b", &[]), 6379));
        assert!(admits(&policy, &endpoint("b", &[("app", "web")]), 9002));
        assert!(!admits(&policy, &endpoint("b", &[("app", "api")]), 9001));
        assert!(!admits(&policy, &endpoint("c", &[("app", "web")]), 9001));

        // Empty lists admit everything; an Egress-only policy leaves ingress alone.
        let open: NetworkPolicy = serde_json::from_value(json!({
            "metadata": {"name": "open", "namespace": "a"},
            "spec": {"podSelector": {}, "policyTypes": ["Egress"],
                     "ingress": [{"ports": [], "from": []}]},
        }))
        .unwrap();
        assert!(admits(&open, &endpoint("c", &[]), 1));
        assert!(!applies_to(&open, &endpoint("a", &[])));
    }
}
