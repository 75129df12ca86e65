//! The Kubernetes objects of a group besides its Secrets and members: the client Services,
//! applied when the live ones do not hold them, and the role label on the data pods.

use std::collections::BTreeMap;

use crd_types::ValkeyReplication;
use crd_types::names::labels;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use operator_runtime::{ApiResultExt, ObjectName, Op, apply};
use serde_json::json;
use topology_controller::replication::model::{DataNode, Members};
use topology_controller::replication::services::{client_services, pod_roles};

use crate::driver::shared::error::Error;

/// Applies the group's client Services where the live ones differ.
pub async fn apply_services(
    services: &Api<Service>,
    group: &ValkeyReplication,
    namespace: &str,
    field_manager: &str,
) -> Result<(), Error> {
    let selector = format!("{}={}", labels::REPLICATION, group.name_any());
    let live = services
        .list(&ListParams::default().labels(&selector))
        .await
        .on(
            Op::List,
            ObjectName::new::<Service>(namespace, &group.name_any()),
        )?
        .items;
    for desired in client_services(group) {
        let name = desired.name_any();
        if live
            .iter()
            .any(|l| l.name_any() == name && operator_runtime::is_applied(&desired, l))
        {
            continue;
        }
        apply::apply(services, &name, &desired, field_manager)
            .await
            .on(Op::Apply, ObjectName::new::<Service>(namespace, &name))?;
    }
    Ok(())
}

/// Puts the role label on every data pod whose label differs from what it should carry
/// (see `pod_roles`); `primary` is the member the sentinels name.
pub async fn label_pods(
    pods: &Api<Pod>,
    group: &ValkeyReplication,
    members: &Members,
    primary: Option<&DataNode>,
    namespace: &str,
    field_manager: &str,
) -> Result<(), Error> {
    let selector = format!("{}={}", labels::REPLICATION, group.name_any());
    let live: BTreeMap<String, Option<String>> = pods
        .list(&ListParams::default().labels(&selector))
        .await
        .on(
            Op::List,
            ObjectName::new::<Pod>(namespace, &group.name_any()),
        )?
        .items
        .into_iter()
        .map(|p| {
            let role = p.labels().get(labels::ROLE).cloned();
            (p.name_any(), role)
        })
        .collect();
    for (pod, role) in pod_roles(members, primary) {
        let Some(current) = live.get(pod) else {
            continue; // not created yet, or gone
        };
        if current.as_deref() == role {
            continue;
        }
        // Only the label this controller owns, under its field manager: applying a body
        // without it removes the label this manager set, and leaves the rest of the pod.
        let body = match role {
            Some(role) => json!({
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": pod, "labels": {labels::ROLE: role}},
            }),
            None => json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod}}),
        };
        apply::apply(pods, pod, &body, field_manager)
            .await
            .on(Op::Apply, ObjectName::new::<Pod>(namespace, pod))?;
    }
    Ok(())
}
