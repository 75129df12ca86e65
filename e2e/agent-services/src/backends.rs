//! Pure endpoint selection: which pods back a Service port, mirroring the
//! endpoints/EndpointSlice controller closely enough for tests.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use k8s_openapi::api::core::v1::{Pod, Service, ServicePort};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// One eligible endpoint of a Service port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backend {
    pub pod: String,
    pub addr: SocketAddr,
}

/// The ClusterIP to listen on, or None for headless / ExternalName /
/// not-yet-allocated Services.
pub fn cluster_ip(svc: &Service) -> Option<IpAddr> {
    let spec = svc.spec.as_ref()?;
    if spec.type_.as_deref() == Some("ExternalName") {
        return None;
    }
    let ip = spec.cluster_ip.as_deref()?;
    if ip.is_empty() || ip.eq_ignore_ascii_case("None") {
        return None;
    }
    ip.parse().ok()
}

/// TCP ports of a Service (protocol unset means TCP).
pub fn tcp_ports(svc: &Service) -> Vec<&ServicePort> {
    svc.spec
        .iter()
        .flat_map(|s| s.ports.iter().flatten())
        .filter(|p| p.protocol.as_deref().unwrap_or("TCP") == "TCP")
        .filter(|p| (1..=65535).contains(&p.port))
        .collect()
}

/// The Service's selector, or None when it has none: such Services have
/// manually managed endpoints, which this proxy does not support.
pub fn selector(svc: &Service) -> Option<&BTreeMap<String, String>> {
    svc.spec
        .as_ref()?
        .selector
        .as_ref()
        .filter(|s| !s.is_empty())
}

pub fn labels_match(selector: &BTreeMap<String, String>, pod: &Pod) -> bool {
    let labels = pod.metadata.labels.as_ref();
    selector
        .iter()
        .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
}

pub fn pod_ip(pod: &Pod) -> Option<IpAddr> {
    pod.status.as_ref()?.pod_ip.as_deref()?.parse().ok()
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Whether a pod may serve traffic. Like the endpoints controller:
/// terminal pods (Succeeded/Failed) and pods without an IP never qualify;
/// normally the pod must be Ready and not terminating, but with
/// `publishNotReadyAddresses` any non-terminal pod with an IP qualifies,
/// including terminating ones (that is what peer discovery relies on).
pub fn pod_qualifies(pod: &Pod, publish_not_ready: bool) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) || pod_ip(pod).is_none() {
        return false;
    }
    if publish_not_ready {
        return true;
    }
    pod.metadata.deletion_timestamp.is_none() && is_ready(pod)
}

/// Resolve a Service port's targetPort on a given pod: an int, a named TCP
/// containerPort (pods lacking that name are skipped, as upstream), or by
/// default the Service port itself.
pub fn resolve_target_port(port: &ServicePort, pod: &Pod) -> Option<u16> {
    match &port.target_port {
        None => u16::try_from(port.port).ok(),
        Some(IntOrString::Int(0)) => u16::try_from(port.port).ok(),
        Some(IntOrString::Int(n)) => u16::try_from(*n).ok().filter(|n| *n != 0),
        Some(IntOrString::String(name)) => {
            if let Ok(n) = name.parse::<u16>() {
                return Some(n).filter(|n| *n != 0);
            }
            pod.spec
                .iter()
                .flat_map(|s| s.containers.iter())
                .flat_map(|c| c.ports.iter().flatten())
                .find(|p| {
                    p.name.as_deref() == Some(name.as_str())
                        && p.protocol.as_deref().unwrap_or("TCP") == "TCP"
                })
                .and_then(|p| u16::try_from(p.container_port).ok())
        }
    }
}

/// Eligible backends for Service port `port` (the Service's port number),
/// sorted by pod name so that selection is deterministic.
pub fn backends_for<'a>(
    svc: &Service,
    port: u16,
    pods: impl IntoIterator<Item = &'a Pod>,
) -> Vec<Backend> {
    let Some(sel) = selector(svc) else {
        return Vec::new();
    };
    let Some(sp) = tcp_ports(svc)
        .into_iter()
        .find(|p| p.port == i32::from(port))
    else {
        return Vec::new();
    };
    let ns = svc.metadata.namespace.as_deref();
    let publish_not_ready = svc
        .spec
        .as_ref()
        .and_then(|s| s.publish_not_ready_addresses)
        .unwrap_or(false);
    let mut out: Vec<Backend> = pods
        .into_iter()
        .filter(|p| p.metadata.namespace.as_deref() == ns)
        .filter(|p| labels_match(sel, p))
        .filter(|p| pod_qualifies(p, publish_not_ready))
        .filter_map(|p| {
            let ip = pod_ip(p)?;
            let target = resolve_target_port(sp, p)?;
            Some(Backend {
                pod: p.metadata.name.clone().unwrap_or_default(),
                addr: SocketAddr::new(ip, target),
            })
        })
        .collect();
    out.sort_by(|a, b| a.pod.cmp(&b.pod));
    out
}

#[cfg(test)]
pub(crate) mod fixtures {
    use super::*;
    use k8s_openapi::api::core::v1::{
        Container, ContainerPort, PodCondition, PodSpec, PodStatus, ServiceSpec,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    pub fn labels(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    pub fn pod(ns: &str, name: &str, ip: Option<&str>, ready: bool, lbl: &[(&str, &str)]) -> Pod {
        Pod {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                labels: Some(labels(lbl)),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "valkey".into(),
                    ports: Some(vec![ContainerPort {
                        name: Some("client".into()),
                        container_port: 6379,
                        ..Default::default()
                    }]),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                pod_ip: ip.map(Into::into),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        }
    }

    pub fn terminating(mut p: Pod) -> Pod {
        p.metadata.deletion_timestamp = Some(Time(Default::default()));
        p
    }

    pub fn service(
        ns: &str,
        name: &str,
        ip: &str,
        sel: Option<&[(&str, &str)]>,
        ports: Vec<ServicePort>,
    ) -> Service {
        Service {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                cluster_ip: Some(ip.into()),
                selector: sel.map(labels),
                ports: Some(ports),
                ..Default::default()
            }),
            status: None,
        }
    }

    pub fn port(port: i32, target: Option<IntOrString>) -> ServicePort {
        ServicePort {
            port,
            target_port: target,
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::*;

    fn addrs(b: &[Backend]) -> Vec<String> {
        b.iter().map(|b| format!("{}={}", b.pod, b.addr)).collect()
    }

    #[test]
    fn selects_ready_matching_pods_in_namespace_sorted() {
        let app = [("app", "v")];
        let svc = service("ns", "s", "127.100.0.5", Some(&app), vec![port(6379, None)]);
        let pods = vec![
            pod(
                "ns",
                "v-1",
                Some("127.64.0.2"),
                true,
                &[("app", "v"), ("x", "y")],
            ),
            pod("ns", "v-0", Some("127.64.0.1"), true, &app),
            pod("ns", "v-2", Some("127.64.0.3"), false, &app), // not ready
            pod("ns", "v-3", None, true, &app),                // no IP
            terminating(pod("ns", "v-4", Some("127.64.0.4"), true, &app)),
            pod("other", "v-5", Some("127.64.0.5"), true, &app),
            pod("ns", "w-0", Some("127.64.0.6"), true, &[("app", "w")]),
        ];
        let b = backends_for(&svc, 6379, &pods);
        assert_eq!(addrs(&b), ["v-0=127.64.0.1:6379", "v-1=127.64.0.2:6379"]);
        // Unknown service port → nothing.
        assert!(backends_for(&svc, 1, &pods).is_empty());
    }

    #[test]
    fn publish_not_ready_includes_unready_and_terminating() {
        let app = [("app", "v")];
        let mut svc = service("ns", "s", "None", Some(&app), vec![port(6379, None)]);
        svc.spec.as_mut().unwrap().publish_not_ready_addresses = Some(true);
        let mut failed = pod("ns", "v-3", Some("127.64.0.4"), false, &app);
        failed.status.as_mut().unwrap().phase = Some("Failed".into());
        let pods = vec![
            pod("ns", "v-0", Some("127.64.0.1"), false, &app),
            terminating(pod("ns", "v-1", Some("127.64.0.2"), false, &app)),
            pod("ns", "v-2", None, false, &app),
            failed,
        ];
        let b = backends_for(&svc, 6379, &pods);
        assert_eq!(addrs(&b), ["v-0=127.64.0.1:6379", "v-1=127.64.0.2:6379"]);
    }

    #[test]
    fn no_selector_means_no_backends() {
        let svc = service("ns", "s", "127.100.0.5", None, vec![port(6379, None)]);
        let pods = vec![pod("ns", "v-0", Some("127.64.0.1"), true, &[])];
        assert!(backends_for(&svc, 6379, &pods).is_empty());
        let svc = service("ns", "s", "127.100.0.5", Some(&[]), vec![port(6379, None)]);
        assert!(backends_for(&svc, 6379, &pods).is_empty());
    }

    #[test]
    fn target_port_resolution() {
        let p = pod("ns", "v-0", Some("127.64.0.1"), true, &[]);
        assert_eq!(resolve_target_port(&port(80, None), &p), Some(80));
        assert_eq!(
            resolve_target_port(&port(80, Some(IntOrString::Int(8080))), &p),
            Some(8080)
        );
        assert_eq!(
            resolve_target_port(&port(80, Some(IntOrString::String("client".into()))), &p),
            Some(6379)
        );
        assert_eq!(
            resolve_target_port(&port(80, Some(IntOrString::String("nope".into()))), &p),
            None
        );
        // A named port missing on the pod excludes that pod.
        let app = [("app", "v")];
        let svc = service(
            "ns",
            "s",
            "127.100.0.5",
            Some(&app),
            vec![port(80, Some(IntOrString::String("client".into())))],
        );
        let mut without = pod("ns", "v-1", Some("127.64.0.2"), true, &app);
        without.spec.as_mut().unwrap().containers[0].ports = None;
        let pods = vec![pod("ns", "v-0", Some("127.64.0.1"), true, &app), without];
        assert_eq!(
            addrs(&backends_for(&svc, 80, &pods)),
            ["v-0=127.64.0.1:6379"]
        );
    }

    #[test]
    fn cluster_ip_and_ports() {
        let mut svc = service("ns", "s", "127.100.0.5", None, vec![port(1, None)]);
        assert_eq!(cluster_ip(&svc), Some("127.100.0.5".parse().unwrap()));
        let mut udp = port(53, None);
        udp.protocol = Some("UDP".into());
        svc.spec.as_mut().unwrap().ports = Some(vec![port(1, None), udp]);
        assert_eq!(tcp_ports(&svc).len(), 1);
        svc.spec.as_mut().unwrap().cluster_ip = Some("None".into());
        assert_eq!(cluster_ip(&svc), None);
        svc.spec.as_mut().unwrap().cluster_ip = None;
        assert_eq!(cluster_ip(&svc), None);
    }
}
