//! The report stage of a reconcile: from what was live and what was applied to the status to
//! write and the Events to publish, with no I/O.

use crd_types::ValkeyNodeStatus;
use crd_types::names;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::jiff::Timestamp;
use kube::{Resource, ResourceExt};

use crate::build::Live;
use crate::events::{ServiceEvent, ServiceEventReason};
use crate::service;
use crate::status::{self, Observed};

/// What the apply stage did.
#[derive(Debug, Clone, PartialEq)]
pub enum Applied {
    /// Someone else's Service of the node's name, left alone.
    NotOwned { found: Service },
    /// The node's own Service as the API server holds it; `created` when this reconcile made
    /// it.
    Service { service: Service, created: bool },
}

/// What to write and to tell.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// The status to apply; `None` when the node's status already says it.
    pub status: Option<ValkeyNodeStatus>,
    /// Published before the status, so a failed publish is retried: the next reconcile still
    /// sees the old status (the old address, say).
    pub events: Vec<ServiceEvent>,
}

pub fn report(live: &Live, applied: &Applied, now: Timestamp) -> Report {
    let node = &live.node;
    let service_name = names::service_name(&node.name_any());
    let event = |reason, note, service: &Service| ServiceEvent {
        reason,
        note,
        related: Some(service.object_ref(&())),
    };
    let desired = match applied {
        Applied::NotOwned { .. } => status::desired(node, Observed::NotOwned, now),
        Applied::Service { service, .. } => status::desired(node, Observed::Service(service), now),
    };
    let needs_update = status::needs_update(node, &desired);
    let mut events = Vec::new();
    match applied {
        // Told once: when the status starts saying so.
        Applied::NotOwned { found } if needs_update => events.push(event(
            ServiceEventReason::ServiceNotOwned,
            format!(
                "Service {service_name} exists and is not controlled by this ValkeyNode; delete it so the node's own Service can be created"
            ),
            found,
        )),
        Applied::NotOwned { .. } => {}
        Applied::Service { service, created } => {
            let cluster_ip = service::cluster_ip(service);
            if *created {
                events.push(event(
                    ServiceEventReason::ServiceCreated,
                    format!(
                        "Service {service_name} created with ClusterIP {}",
                        cluster_ip.unwrap_or("<none yet>")
                    ),
                    service,
                ));
            }
            if let Some(change) = status::address_change(node, cluster_ip) {
                events.push(event(
                    ServiceEventReason::AnnounceAddressChanged,
                    format!(
                        "ClusterIP of Service {service_name} changed {} -> {}; peers must learn the new announce address and the pod restarts with it",
                        change.old, change.new
                    ),
                    service,
                ));
            }
        }
    }
    Report {
        status: needs_update.then_some(desired),
        events,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::tests::node;
    use crd_types::ValkeyNode;
    use crd_types::node::Mode;
    use operator_runtime::EventReason;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).unwrap()
    }

    fn stored(node: &ValkeyNode, ip: &str) -> Service {
        let mut svc = service::desired(node).unwrap();
        svc.spec.as_mut().unwrap().cluster_ip = Some(ip.into());
        svc
    }

    fn reasons(report: &Report) -> Vec<&'static str> {
        report.events.iter().map(|e| e.reason.as_str()).collect()
    }

    /// `live` after `report` was published.
    fn after(mut live: Live, report: &Report) -> Live {
        if let Some(status) = &report.status {
            live.node.status = Some(status.clone());
        }
        live
    }

    #[test]
    fn a_created_service_is_told_then_quiet() {
        let live = Live {
            node: node(Mode::Cluster),
            service: None,
        };
        let svc = stored(&live.node, "10.96.0.12");
        let first = report(
            &live,
            &Applied::Service {
                service: svc.clone(),
                created: true,
            },
            at(100),
        );
        assert_eq!(reasons(&first), ["ServiceCreated"]);
        assert_eq!(
            first.events[0].note,
            "Service cache-0-1 created with ClusterIP 10.96.0.12"
        );
        assert_eq!(
            first.events[0]
                .related
                .as_ref()
                .and_then(|r| r.kind.as_deref()),
            Some("Service")
        );
        assert!(first.status.is_some());

        let live = after(live, &first);
        let again = report(
            &live,
            &Applied::Service {
                service: svc,
                created: false,
            },
            at(200),
        );
        assert_eq!(
            again,
            Report {
                status: None,
                events: vec![]
            }
        );
    }

    #[test]
    fn a_new_cluster_ip_is_a_warning_and_recorded() {
        let live = Live {
            node: node(Mode::Cluster),
            service: None,
        };
        let first = report(
            &live,
            &Applied::Service {
                service: stored(&live.node, "10.96.0.12"),
                created: true,
            },
            at(100),
        );
        let live = after(live, &first);
        let moved = report(
            &live,
            &Applied::Service {
                service: stored(&live.node, "10.96.0.40"),
                created: true,
            },
            at(200),
        );
        assert_eq!(
            reasons(&moved),
            ["ServiceCreated", "AnnounceAddressChanged"]
        );
        assert!(
            moved.events[1].note.contains("10.96.0.12 -> 10.96.0.40"),
            "{}",
            moved.events[1].note
        );
        let endpoint = moved.status.unwrap().endpoint.unwrap();
        assert_eq!(endpoint.cluster_ip.as_deref(), Some("10.96.0.40"));
    }

    #[test]
    fn someone_elses_service_is_told_once() {
        let n = node(Mode::Standalone);
        let mut theirs = service::desired(&n).unwrap();
        theirs.metadata.owner_references = None;
        let live = Live {
            node: n,
            service: Some(theirs.clone()),
        };
        let applied = Applied::NotOwned { found: theirs };
        let first = report(&live, &applied, at(100));
        assert_eq!(reasons(&first), ["ServiceNotOwned"]);
        let condition = &first.status.as_ref().unwrap().conditions[0];
        assert_eq!(condition.reason, "ServiceNotOwned");
        let again = report(&after(live, &first), &applied, at(200));
        assert_eq!(
            again,
            Report {
                status: None,
                events: vec![]
            }
        );
    }
}
