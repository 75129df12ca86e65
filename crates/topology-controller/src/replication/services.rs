//! Object builders: a group's client Services and the role label on its data pods.
//!
//! - `<name>` (read-write) selects the data pod labelled `valkey.rs/role=primary`;
//! - `<name>-replicas` (read-only) the data pods labelled `valkey.rs/role=replica`;
//! - `<name>-sentinel` the sentinels, for Sentinel-aware clients.
//!
//! The controller keeps the role label on the pods ([`pod_roles`]): the primary the
//! sentinels name, while it serves as one, gets `primary`; a data node that says it is a
//! replica gets `replica`; any other loses the label, so neither Service sends clients to a
//! node that would refuse them or serve stale data as primary.

use std::collections::BTreeMap;

use crd_types::ValkeyReplication;
use crd_types::names::{self, components, labels, ports};
use crd_types::template::TopologyTls;
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};

use crate::replication::model::{DataNode, Members};

/// The three client Services of the group.
pub fn client_services(replication: &ValkeyReplication) -> Vec<Service> {
    let name = replication.name_any();
    let data = |role: &str| {
        BTreeMap::from([
            (labels::REPLICATION.to_string(), name.clone()),
            (
                labels::COMPONENT.to_string(),
                components::SERVER.to_string(),
            ),
            (labels::ROLE.to_string(), role.to_string()),
        ])
    };
    let sentinels = BTreeMap::from([
        (labels::REPLICATION.to_string(), name.clone()),
        (
            labels::COMPONENT.to_string(),
            components::SENTINEL.to_string(),
        ),
    ]);
    let mut valkey = vec![(ports::VALKEY_NAME, ports::VALKEY)];
    if TopologyTls::serves_plain_text(replication.spec.common.tls.as_ref()) {
        valkey.push((ports::VALKEY_PLAIN_NAME, ports::VALKEY_PLAIN));
    }
    let sentinel = vec![(ports::SENTINEL_NAME, ports::SENTINEL)];
    vec![
        service(
            replication,
            names::primary_service_name(&name),
            data(labels::ROLE_PRIMARY),
            &valkey,
        ),
        service(
            replication,
            names::replicas_service_name(&name),
            data(labels::ROLE_REPLICA),
            &valkey,
        ),
        service(
            replication,
            names::sentinel_service_name(&name),
            sentinels,
            &sentinel,
        ),
    ]
}

/// A ClusterIP Service owned by the group, selecting `selector`, serving `ports` (each its
/// name and number, the pods' named port as target; a TLS group's data nodes' plain-text
/// port too when it has one). Only ready pods: a client must not land on a node that cannot
/// serve.
fn service(
    replication: &ValkeyReplication,
    name: String,
    selector: BTreeMap<String, String>,
    ports: &[(&str, i32)],
) -> Service {
    let group = replication.name_any();
    Service {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: replication.namespace(),
            labels: Some(BTreeMap::from([
                (labels::NAME.to_string(), labels::NAME_VALUE.to_string()),
                (labels::INSTANCE.to_string(), group.clone()),
                (labels::REPLICATION.to_string(), group.clone()),
                (labels::PART_OF.to_string(), group),
                (
                    labels::MANAGED_BY.to_string(),
                    labels::MANAGED_BY_VALUE.to_string(),
                ),
            ])),
            owner_references: replication.controller_owner_ref(&()).map(|o| vec![o]),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            selector: Some(selector),
            ports: Some(
                ports
                    .iter()
                    .map(|&(port_name, port)| ServicePort {
                        name: Some(port_name.into()),
                        port,
                        target_port: Some(IntOrString::String(port_name.into())),
                        protocol: Some("TCP".into()),
                        ..Default::default()
                    })
                    .collect(),
            ),
            publish_not_ready_addresses: Some(false),
            ..Default::default()
        }),
        status: None,
    }
}

/// The role label each data pod should carry: `(pod, Some(role))`, or `None` to remove it.
/// `primary` is the member the sentinels name. Demotions come first, so no moment has two
/// pods labelled primary.
pub fn pod_roles<'a>(
    members: &'a Members,
    primary: Option<&DataNode>,
) -> Vec<(&'a str, Option<&'static str>)> {
    let mut roles: Vec<(&str, Option<&'static str>)> = members
        .data
        .iter()
        .filter_map(|d| {
            let pod = d.facts.pod.as_deref()?;
            let role = if primary.is_some_and(|p| p.name() == d.name()) && d.is_primary() {
                Some(labels::ROLE_PRIMARY)
            } else if d.role() == Some(crd_types::node::Role::Replica) {
                Some(labels::ROLE_REPLICA)
            } else {
                None
            };
            Some((pod, role))
        })
        .collect();
    roles.sort_by_key(|(_, role)| *role == Some(labels::ROLE_PRIMARY));
    roles
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication::sim::*;
    use crd_types::ValkeyReplicationSpec;

    #[test]
    fn three_services_select_by_role_and_component() {
        let mut r = ValkeyReplication::new("sessions", ValkeyReplicationSpec::default());
        r.metadata.namespace = Some("prod".into());
        r.metadata.uid = Some("u".into());
        let services = client_services(&r);
        let names: Vec<String> = services.iter().map(|s| s.name_any()).collect();
        assert_eq!(
            names,
            ["sessions", "sessions-replicas", "sessions-sentinel"]
        );
        let spec = |i: usize| services[i].spec.clone().unwrap();
        assert_eq!(spec(0).selector.unwrap()[labels::ROLE], "primary");
        assert_eq!(spec(1).selector.unwrap()[labels::ROLE], "replica");
        assert_eq!(spec(2).selector.unwrap()[labels::COMPONENT], "sentinel");
        assert_eq!(spec(2).ports.unwrap()[0].port, 26379);
        assert_eq!(spec(0).publish_not_ready_addresses, Some(false));
        assert_eq!(
            services[0].metadata.owner_references.as_ref().unwrap()[0].kind,
            "ValkeyReplication"
        );
        assert_eq!(spec(0).ports.unwrap().len(), 1);

        // TLS with plain-text clients: both data Services add the port, not the sentinels'.
        r.spec.common.tls = Some(crd_types::template::TopologyTls {
            plain_text_clients: true,
            ca_overlap_seconds: None,
            ..Default::default()
        });
        let services = client_services(&r);
        let ports = |i: usize| -> Vec<(String, i32)> {
            let spec = services[i].spec.clone().unwrap();
            spec.ports
                .unwrap()
                .into_iter()
                .map(|p| (p.name.unwrap(), p.port))
                .collect()
        };
        let data = [
            ("valkey".to_string(), 6379),
            ("valkey-plain".to_string(), 6380),
        ];
        assert_eq!(ports(0), data);
        assert_eq!(ports(1), data);
        assert_eq!(ports(2), [("sentinel".to_string(), 26379)]);
    }

    #[test]
    fn the_named_primary_is_labelled_last_and_strays_lose_their_label() {
        let mut m = formed(3, 3);
        promote(&mut m, 2);
        m.data[0] = data_primary(0, 0); // came back serving as primary on its own
        let p = m.data[2].clone();
        assert_eq!(
            pod_roles(&m, Some(&p)),
            [
                ("g-0-0", None),
                ("g-1-0", Some("replica")),
                ("g-2-0", Some("primary")),
            ]
        );
        m.data[1].answer = None;
        assert_eq!(pod_roles(&m, Some(&p))[1], ("g-1-0", None));
        assert!(
            pod_roles(&m, None)
                .iter()
                .all(|(_, r)| *r != Some("primary"))
        );
    }
}
