//! This controller's part of a ValkeyNode's status: `status.endpoint` and the
//! `EndpointReady` condition. Pure functions of the node and its Service, unit-tested.
//!
//! Only these two are ever applied (field manager `valkey-operator/service`): conditions are
//! a list-map keyed by type, so the other controllers' conditions are left alone.

use crd_types::conditions::reasons::EndpointReady;
use crd_types::conditions::{self, ConditionSpec, types};
use crd_types::names;
use crd_types::node::{EndpointPort, EndpointStatus};
use crd_types::{ValkeyNode, ValkeyNodeStatus};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::service;

/// What the controller found after applying (or refusing to apply) the Service.
#[derive(Debug, Clone, Copy)]
pub enum Observed<'a> {
    /// The node's own Service as the API server returned it.
    Service(&'a Service),
    /// A Service of that name exists and is not controlled by this node; left alone.
    NotOwned,
}

/// The status to apply: `endpoint` and the one `EndpointReady` condition, nothing else.
pub fn desired(node: &ValkeyNode, observed: Observed<'_>, now: Timestamp) -> ValkeyNodeStatus {
    let node_name = node.name_any();
    let namespace = node.namespace().unwrap_or_default();
    let service_name = names::service_name(&node_name);
    let (cluster_ip, ports, condition) = match observed {
        Observed::Service(svc) => {
            let ports = svc
                .spec
                .iter()
                .flat_map(|s| s.ports.iter().flatten())
                .map(|p| EndpointPort {
                    name: p.name.clone().unwrap_or_default(),
                    port: p.port,
                })
                .collect();
            let cluster_ip = service::cluster_ip(svc).map(str::to_owned);
            let condition = match &cluster_ip {
                Some(ip) => ConditionSpec::new(
                    EndpointReady::ServiceReady,
                    true,
                    format!("Service {service_name} has ClusterIP {ip}"),
                ),
                None => ConditionSpec::new(
                    EndpointReady::ServicePending,
                    false,
                    format!("Service {service_name} has no ClusterIP yet"),
                ),
            };
            (cluster_ip, ports, condition)
        }
        Observed::NotOwned => (
            None,
            Vec::new(),
            ConditionSpec::new(
                EndpointReady::ServiceNotOwned,
                false,
                format!(
                    "Service {namespace}/{service_name} exists but is not controlled by this ValkeyNode; delete that Service so service-controller can create the node's own"
                ),
            ),
        ),
    };
    let generation = node.metadata.generation;
    let current = node
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    ValkeyNodeStatus {
        endpoint: Some(EndpointStatus {
            service_name: Some(service_name),
            cluster_ip,
            dns_name: Some(names::service_dns_name(&node_name, &namespace)),
            ports,
            observed_generation: generation,
        }),
        conditions: vec![conditions::transition(current, condition, generation, now)],
        ..Default::default()
    }
}

/// Whether `desired` differs from what the node's status already says, so an unchanged
/// status is not re-applied on every reconcile.
pub fn needs_update(node: &ValkeyNode, desired: &ValkeyNodeStatus) -> bool {
    let current = node.status.as_ref();
    let endpoint = current.and_then(|s| s.endpoint.as_ref());
    let condition = current.and_then(|s| conditions::find(&s.conditions, types::ENDPOINT_READY));
    endpoint != desired.endpoint.as_ref()
        || condition != conditions::find(&desired.conditions, types::ENDPOINT_READY)
}

/// The node's announce address moved from `old` to `new`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddressChange {
    pub old: String,
    pub new: String,
}

/// Compares the ClusterIP the node's status last recorded with the Service's current one.
/// A Service deleted and recreated gets a new ClusterIP: peers must learn the new address.
pub fn address_change(node: &ValkeyNode, cluster_ip: Option<&str>) -> Option<AddressChange> {
    let old = node
        .status
        .as_ref()?
        .endpoint
        .as_ref()?
        .cluster_ip
        .as_deref()?;
    let new = cluster_ip?;
    (old != new).then(|| AddressChange {
        old: old.to_owned(),
        new: new.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::tests::node;
    use crd_types::node::Mode;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).unwrap()
    }

    fn allocated(node: &ValkeyNode, ip: &str) -> Service {
        let mut svc = service::desired(node).unwrap();
        svc.spec.as_mut().unwrap().cluster_ip = Some(ip.into());
        svc
    }

    /// `node` after `status` was applied, as the next reconcile sees it.
    fn with_status(mut node: ValkeyNode, status: ValkeyNodeStatus) -> ValkeyNode {
        node.status = Some(status);
        node
    }

    #[test]
    fn a_service_with_a_cluster_ip_is_a_ready_endpoint() {
        let n = node(Mode::Cluster);
        let svc = allocated(&n, "10.96.0.12");
        let status = desired(&n, Observed::Service(&svc), at(100));
        assert_eq!(
            status.endpoint.unwrap(),
            EndpointStatus {
                service_name: Some("cache-0-1".into()),
                cluster_ip: Some("10.96.0.12".into()),
                dns_name: Some("cache-0-1.prod.svc".into()),
                ports: vec![
                    EndpointPort {
                        name: "valkey".into(),
                        port: 6379
                    },
                    EndpointPort {
                        name: "cluster-bus".into(),
                        port: 16379
                    },
                ],
                observed_generation: Some(4),
            }
        );
        assert_eq!(status.conditions.len(), 1);
        let c = &status.conditions[0];
        assert_eq!(
            (c.type_.as_str(), c.status.as_str(), c.reason.as_str()),
            ("EndpointReady", "True", "ServiceReady")
        );
        assert_eq!(c.observed_generation, Some(4));
        assert_eq!(c.last_transition_time, Time(at(100)));
    }

    #[test]
    fn only_this_controllers_fields_are_applied() {
        let mut n = node(Mode::Standalone);
        n.status = Some(ValkeyNodeStatus {
            conditions: vec![Condition {
                type_: "WorkloadReady".into(),
                status: "True".into(),
                reason: "PodReady".into(),
                message: String::new(),
                observed_generation: None,
                last_transition_time: Time(at(1)),
            }],
            ..Default::default()
        });
        let svc = allocated(&n, "10.96.0.12");
        let json = serde_json::to_value(desired(&n, Observed::Service(&svc), at(100))).unwrap();
        let keys: Vec<&String> = json.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["conditions", "endpoint"]);
        let types: Vec<&str> = json["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["EndpointReady"]);
    }

    #[test]
    fn without_a_cluster_ip_the_endpoint_is_pending() {
        let n = node(Mode::Sentinel);
        let svc = service::desired(&n).unwrap();
        let status = desired(&n, Observed::Service(&svc), at(100));
        assert_eq!(status.endpoint.as_ref().unwrap().cluster_ip, None);
        let c = &status.conditions[0];
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "ServicePending")
        );
    }

    #[test]
    fn someone_elses_service_is_reported_not_taken_over() {
        let n = node(Mode::Standalone);
        let status = desired(&n, Observed::NotOwned, at(100));
        let endpoint = status.endpoint.unwrap();
        assert_eq!(endpoint.cluster_ip, None);
        assert!(endpoint.ports.is_empty());
        let c = &status.conditions[0];
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "ServiceNotOwned")
        );
        assert!(c.message.contains("prod/cache-0-1"), "{}", c.message);
    }

    #[test]
    fn an_unchanged_endpoint_keeps_its_transition_time_and_is_not_reapplied() {
        let n = node(Mode::Cluster);
        let svc = allocated(&n, "10.96.0.12");
        let first = desired(&n, Observed::Service(&svc), at(100));
        assert!(needs_update(&n, &first));
        let n = with_status(n, first.clone());
        let again = desired(&n, Observed::Service(&svc), at(900));
        assert_eq!(again.conditions[0].last_transition_time, Time(at(100)));
        assert_eq!(again, first);
        assert!(!needs_update(&n, &again));
    }

    #[test]
    fn a_new_cluster_ip_is_an_update_but_not_a_transition() {
        let n = node(Mode::Cluster);
        let first = desired(&n, Observed::Service(&allocated(&n, "10.96.0.12")), at(100));
        let n = with_status(n, first);
        let moved = desired(&n, Observed::Service(&allocated(&n, "10.96.0.40")), at(900));
        assert!(needs_update(&n, &moved));
        // Still True: the clock of the condition does not restart.
        assert_eq!(moved.conditions[0].last_transition_time, Time(at(100)));
        assert_eq!(
            moved.endpoint.unwrap().cluster_ip.as_deref(),
            Some("10.96.0.40")
        );
    }

    #[test]
    fn losing_the_service_moves_the_transition_time() {
        let n = node(Mode::Cluster);
        let ready = desired(&n, Observed::Service(&allocated(&n, "10.96.0.12")), at(100));
        let n = with_status(n, ready);
        let lost = desired(&n, Observed::NotOwned, at(900));
        assert_eq!(lost.conditions[0].status, "False");
        assert_eq!(lost.conditions[0].last_transition_time, Time(at(900)));
    }

    #[test]
    fn a_new_generation_is_an_update() {
        let n = node(Mode::Cluster);
        let svc = allocated(&n, "10.96.0.12");
        let mut n = with_status(n.clone(), desired(&n, Observed::Service(&svc), at(100)));
        n.metadata.generation = Some(5);
        assert!(needs_update(
            &n,
            &desired(&n, Observed::Service(&svc), at(200))
        ));
    }

    #[test]
    fn address_change_compares_with_the_recorded_cluster_ip() {
        let fresh = node(Mode::Cluster);
        // Nothing recorded yet: the first address is no change.
        assert_eq!(address_change(&fresh, Some("10.96.0.12")), None);
        let recorded = desired(
            &fresh,
            Observed::Service(&allocated(&fresh, "10.96.0.12")),
            at(100),
        );
        let n = with_status(fresh, recorded);
        assert_eq!(address_change(&n, Some("10.96.0.12")), None);
        assert_eq!(address_change(&n, None), None);
        assert_eq!(
            address_change(&n, Some("10.96.0.40")),
            Some(AddressChange {
                old: "10.96.0.12".into(),
                new: "10.96.0.40".into()
            })
        );
    }
}
