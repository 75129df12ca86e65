//! The desired Service of a ValkeyNode: a pure function of the node, unit-tested.
//!
//! One ClusterIP Service per node, named after it, owned by it (so deleting the node deletes
//! the Service through the garbage collector) and selecting exactly that node's pod by the
//! `valkey.rs/node` label, which node-controller puts on the pod template.

use std::collections::BTreeMap;

use crd_types::ValkeyNode;
use crd_types::names::{self, components, labels, ports};
use crd_types::node::Mode;
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};

use crate::error::Error;

/// One port of the node's Service: its name (also the pod's containerPort name, the
/// Service's targetPort) and number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Port {
    pub name: &'static str,
    pub port: i32,
}

/// The ports the node's Service exposes, by mode, plus a TLS data node's plain-text client
/// port when it has one and the exporter's when there is one.
pub fn ports(node: &ValkeyNode) -> Vec<Port> {
    let mut list = match node.spec.mode {
        Mode::Standalone => vec![Port {
            name: ports::VALKEY_NAME,
            port: ports::VALKEY,
        }],
        Mode::Cluster => vec![
            Port {
                name: ports::VALKEY_NAME,
                port: ports::VALKEY,
            },
            Port {
                name: ports::CLUSTER_BUS_NAME,
                port: ports::CLUSTER_BUS,
            },
        ],
        Mode::Sentinel => vec![Port {
            name: ports::SENTINEL_NAME,
            port: ports::SENTINEL,
        }],
    };
    if node.spec.serves_plain_text_beside_tls() {
        list.insert(
            1,
            Port {
                name: ports::VALKEY_PLAIN_NAME,
                port: ports::VALKEY_PLAIN,
            },
        );
    }
    if let Some(exporter) = &node.spec.template.exporter {
        list.push(Port {
            name: ports::METRICS_NAME,
            port: exporter.port,
        });
    }
    list
}

/// The labels of the node's Service.
pub fn labels(node: &ValkeyNode) -> BTreeMap<String, String> {
    let name = node.name_any();
    BTreeMap::from([
        (labels::NAME.into(), labels::NAME_VALUE.into()),
        (labels::INSTANCE.into(), name.clone()),
        (
            labels::COMPONENT.into(),
            components::for_mode(node.spec.mode).into(),
        ),
        (labels::MANAGED_BY.into(), labels::MANAGED_BY_VALUE.into()),
        (labels::NODE.into(), name),
    ])
}

/// The selector: exactly the node's own pod. node-controller sets `valkey.rs/node: <node>`
/// on the pod template; nothing else carries that label with that value in the namespace.
pub fn selector(node: &ValkeyNode) -> BTreeMap<String, String> {
    BTreeMap::from([(labels::NODE.into(), node.name_any())])
}

/// The Service to apply for `node`.
///
/// `spec.clusterIP` is never set: the API server allocates it on creation and it is
/// immutable, so the applied object must not claim it (re-applying would try to change or
/// clear it).
pub fn desired(node: &ValkeyNode) -> Result<Service, Error> {
    let missing = |field| Error::Invalid {
        node: node.name_any(),
        field,
    };
    let namespace = node
        .namespace()
        .ok_or_else(|| missing("metadata.namespace"))?;
    // Needs the uid. kube sets controller: true but leaves blockOwnerDeletion unset.
    let mut owner = node
        .controller_owner_ref(&())
        .ok_or_else(|| missing("metadata.uid"))?;
    // Foreground deletion of the node waits for its Service to be gone.
    owner.block_owner_deletion = Some(true);
    let service_ports = ports(node)
        .into_iter()
        .map(|p| ServicePort {
            name: Some(p.name.into()),
            port: p.port,
            target_port: Some(IntOrString::String(p.name.into())),
            protocol: Some("TCP".into()),
            ..Default::default()
        })
        .collect();
    Ok(Service {
        metadata: ObjectMeta {
            name: Some(names::service_name(&node.name_any())),
            namespace: Some(namespace),
            labels: Some(labels(node)),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            selector: Some(selector(node)),
            ports: Some(service_ports),
            // Valkey must reach a node before it is Ready: cluster MEET and the cluster bus,
            // replicas syncing from a primary, sentinels discovering each other all happen
            // while the pod's readiness probe still fails, so the Service keeps not-ready
            // pods as endpoints.
            publish_not_ready_addresses: Some(true),
            ..Default::default()
        }),
        status: None,
    })
}

/// Whether `service` is controlled by `node` (a controller owner reference with its uid).
/// A Service of that name made by someone else, or left from an earlier ValkeyNode of the
/// same name, is not taken over.
pub fn controlled_by(service: &Service, node: &ValkeyNode) -> bool {
    let Some(uid) = node.meta().uid.as_deref() else {
        return false;
    };
    service
        .owner_references()
        .iter()
        .any(|r| r.controller == Some(true) && r.uid == uid)
}

/// The Service's ClusterIP, once allocated (never "None": that is a headless Service).
pub fn cluster_ip(service: &Service) -> Option<&str> {
    service
        .spec
        .as_ref()
        .and_then(|s| s.cluster_ip.as_deref())
        .filter(|ip| !ip.is_empty() && *ip != "None")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crd_types::ValkeyNodeSpec;
    use crd_types::template::Exporter;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    pub(crate) fn node(mode: Mode) -> ValkeyNode {
        let mut node = ValkeyNode::new(
            "cache-0-1",
            ValkeyNodeSpec {
                mode,
                ..Default::default()
            },
        );
        node.metadata.namespace = Some("prod".into());
        node.metadata.uid = Some("uid-1".into());
        node.metadata.generation = Some(4);
        node
    }

    fn port_list(service: &Service) -> Vec<(String, i32, IntOrString)> {
        service
            .spec
            .as_ref()
            .unwrap()
            .ports
            .iter()
            .flatten()
            .map(|p| {
                (
                    p.name.clone().unwrap(),
                    p.port,
                    p.target_port.clone().unwrap(),
                )
            })
            .collect()
    }

    fn named(name: &str, port: i32) -> (String, i32, IntOrString) {
        (name.into(), port, IntOrString::String(name.into()))
    }

    #[test]
    fn ports_follow_the_mode() {
        let standalone = desired(&node(Mode::Standalone)).unwrap();
        assert_eq!(port_list(&standalone), [named("valkey", 6379)]);
        let cluster = desired(&node(Mode::Cluster)).unwrap();
        assert_eq!(
            port_list(&cluster),
            [named("valkey", 6379), named("cluster-bus", 16379)]
        );
        let sentinel = desired(&node(Mode::Sentinel)).unwrap();
        assert_eq!(port_list(&sentinel), [named("sentinel", 26379)]);
    }

    #[test]
    fn the_exporter_adds_a_metrics_port() {
        let mut with_exporter = node(Mode::Cluster);
        with_exporter.spec.template.exporter = Some(Exporter {
            image: "oliver006/redis_exporter".into(),
            port: 9200,
            resources: None,
        });
        assert_eq!(
            port_list(&desired(&with_exporter).unwrap()),
            [
                named("valkey", 6379),
                named("cluster-bus", 16379),
                named("metrics", 9200)
            ]
        );
    }

    #[test]
    fn a_tls_data_node_with_plain_text_clients_adds_their_port() {
        let plain_beside = |mode| {
            let mut n = node(mode);
            n.spec.tls = Some(crd_types::template::Tls {
                secret_name: "t".into(),
                auth_clients: Default::default(),
                plain_text_clients: true,
            });
            port_list(&desired(&n).unwrap())
        };
        assert_eq!(
            plain_beside(Mode::Cluster),
            [
                named("valkey", 6379),
                named("valkey-plain", 6380),
                named("cluster-bus", 16379)
            ]
        );
        assert_eq!(
            plain_beside(Mode::Standalone),
            [named("valkey", 6379), named("valkey-plain", 6380)]
        );
        assert_eq!(plain_beside(Mode::Sentinel), [named("sentinel", 26379)]);
    }

    #[test]
    fn owned_by_the_node_as_its_controller() {
        let service = desired(&node(Mode::Standalone)).unwrap();
        assert_eq!(service.metadata.name.as_deref(), Some("cache-0-1"));
        assert_eq!(service.metadata.namespace.as_deref(), Some("prod"));
        assert_eq!(
            service.metadata.owner_references.as_deref().unwrap(),
            [OwnerReference {
                api_version: "valkey.rs/v1alpha1".into(),
                kind: "ValkeyNode".into(),
                name: "cache-0-1".into(),
                uid: "uid-1".into(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]
        );
        assert!(controlled_by(&service, &node(Mode::Standalone)));
    }

    #[test]
    fn labels_and_selector_pick_exactly_the_nodes_pod() {
        let service = desired(&node(Mode::Sentinel)).unwrap();
        let labels = service.metadata.labels.unwrap();
        let expected = [
            ("app.kubernetes.io/component", "sentinel"),
            ("app.kubernetes.io/instance", "cache-0-1"),
            ("app.kubernetes.io/managed-by", "valkey-operator"),
            ("app.kubernetes.io/name", "valkey"),
            ("valkey.rs/node", "cache-0-1"),
        ];
        let got: Vec<(&str, &str)> = labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(got, expected);
        let spec = service.spec.unwrap();
        assert_eq!(
            spec.selector.unwrap(),
            BTreeMap::from([("valkey.rs/node".to_string(), "cache-0-1".to_string())])
        );
        assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
        assert_eq!(spec.publish_not_ready_addresses, Some(true));
    }

    #[test]
    fn the_applied_object_never_claims_a_cluster_ip() {
        let service = desired(&node(Mode::Cluster)).unwrap();
        let json = serde_json::to_value(&service).unwrap();
        assert_eq!(json["apiVersion"], "v1");
        assert_eq!(json["kind"], "Service");
        let spec = json["spec"].as_object().unwrap();
        assert!(!spec.contains_key("clusterIP"), "{spec:?}");
        assert!(!spec.contains_key("clusterIPs"), "{spec:?}");
        assert!(json.get("status").is_none());
    }

    #[test]
    fn a_node_without_uid_or_namespace_is_refused() {
        let mut no_uid = node(Mode::Standalone);
        no_uid.metadata.uid = None;
        assert!(matches!(
            desired(&no_uid),
            Err(Error::Invalid {
                field: "metadata.uid",
                ..
            })
        ));
        let mut no_namespace = node(Mode::Standalone);
        no_namespace.metadata.namespace = None;
        assert!(desired(&no_namespace).is_err());
    }

    #[test]
    fn someone_elses_service_is_not_ours() {
        let ours = node(Mode::Standalone);
        let mut theirs = desired(&ours).unwrap();
        theirs.metadata.owner_references = None;
        assert!(!controlled_by(&theirs, &ours));
        // Left from an earlier ValkeyNode of the same name.
        let mut earlier = node(Mode::Standalone);
        earlier.metadata.uid = Some("uid-0".into());
        assert!(!controlled_by(&desired(&earlier).unwrap(), &ours));
    }

    #[test]
    fn cluster_ip_ignores_headless_and_unallocated() {
        let mut service = desired(&node(Mode::Standalone)).unwrap();
        assert_eq!(cluster_ip(&service), None);
        service.spec.as_mut().unwrap().cluster_ip = Some("None".into());
        assert_eq!(cluster_ip(&service), None);
        service.spec.as_mut().unwrap().cluster_ip = Some("10.0.0.7".into());
        assert_eq!(cluster_ip(&service), Some("10.0.0.7"));
    }
}
