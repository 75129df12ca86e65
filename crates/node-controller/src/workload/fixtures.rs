//! Nodes and accessors the workload builders' tests share.

use crd_types::node::{EndpointStatus, Mode, ValkeyNodeStatus};
use crd_types::template::SecretKeyRef;
use crd_types::{ValkeyNode, ValkeyNodeSpec};
use k8s_openapi::api::core::v1::{Container, PodSpec};

use super::{DesiredWorkload, desired};
use crate::config::{self, Rendered, RenderedConfig, render};
use crate::meta;

pub fn node(mode: Mode, f: impl FnOnce(&mut ValkeyNodeSpec)) -> ValkeyNode {
    let mut spec = ValkeyNodeSpec {
        mode,
        ..Default::default()
    };
    f(&mut spec);
    let mut n = meta::fixtures::node("cache", spec);
    n.status = Some(ValkeyNodeStatus {
        endpoint: Some(EndpointStatus {
            cluster_ip: Some("10.96.0.5".into()),
            ..Default::default()
        }),
        ..Default::default()
    });
    n
}

pub fn rendered(n: &ValkeyNode) -> RenderedConfig {
    match render(&n.spec, config::cluster_ip(n)).unwrap() {
        Rendered::Config(c) => c,
        Rendered::WaitingForEndpoint => panic!("waiting"),
    }
}

pub fn build(n: &ValkeyNode) -> DesiredWorkload {
    desired(n, &rendered(n))
}

pub fn pod(d: &DesiredWorkload) -> &PodSpec {
    d.workload.template().unwrap().spec.as_ref().unwrap()
}

/// The pod template's annotations (empty when it has none).
pub fn template_annotations(d: &DesiredWorkload) -> std::collections::BTreeMap<String, String> {
    let template = d.workload.template().unwrap();
    let metadata = template.metadata.clone().unwrap_or_default();
    metadata.annotations.unwrap_or_default()
}

pub fn container<'a>(d: &'a DesiredWorkload, name: &str) -> &'a Container {
    pod(d).containers.iter().find(|c| c.name == name).unwrap()
}

pub fn port_names(c: &Container) -> Vec<(String, i32)> {
    c.ports
        .iter()
        .flatten()
        .map(|p| (p.name.clone().unwrap(), p.container_port))
        .collect()
}

/// `(name, secret name)` of every env var read from a Secret.
pub fn secret_env_of(c: &Container) -> Vec<(String, String)> {
    c.env
        .iter()
        .flatten()
        .filter_map(|v| {
            let r = v.value_from.as_ref()?.secret_key_ref.as_ref()?;
            Some((v.name.clone(), format!("{}/{}", r.name, r.key)))
        })
        .collect()
}

pub fn secret(name: &str) -> SecretKeyRef {
    SecretKeyRef {
        name: name.into(),
        key: "password".into(),
    }
}
