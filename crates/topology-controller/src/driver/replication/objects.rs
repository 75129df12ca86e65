//! The Kubernetes objects of a group besides its Secrets: the members a step changes
//! (opening a roll gate, deleting a leaving member), the client Services, applied when the
//! live ones do not hold them, and the role label on the data pods.

use std::collections::BTreeMap;

use crd_types::names::labels;
use crd_types::node::NodeReplication;
use crd_types::{ValkeyNode, ValkeyReplication};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{DeleteParams, ListParams};
use kube::{Api, ResourceExt};
use operator_runtime::{ApiResultExt, ObjectName, Op, apply};
use serde_json::json;
use topology_controller::replication::members;
use topology_controller::replication::model::{DataNode, Group, Members};
use topology_controller::replication::services::{client_services, pod_roles};
use topology_controller::shared::commands::StepError;
use topology_controller::shared::execute::MemberObjects;

use crate::driver::shared::error::Error;

/// A group's member ValkeyNodes, changed through the API server under the controller's
/// field manager.
pub struct GroupMembers<'a> {
    pub group: &'a ValkeyReplication,
    /// What members are told of the group (see `members::context`).
    pub context: &'a NodeReplication,
    pub api: &'a Api<ValkeyNode>,
    pub namespace: &'a str,
    pub field_manager: &'a str,
}

impl MemberObjects for GroupMembers<'_> {
    async fn delete(&self, member: &str) -> Result<(), StepError> {
        self.api
            .delete(member, &DeleteParams::default())
            .await
            .map(drop)
            .on(
                Op::Delete,
                ObjectName::new::<ValkeyNode>(self.namespace, member),
            )
            .map_err(StepError::from)
    }

    async fn allow_roll(&self, member: &str, revision: &str) -> Result<(), StepError> {
        let group = Group::of(self.group);
        let at = group
            .positions()
            .into_iter()
            .find(|at| group.member_name(*at) == member)
            .ok_or_else(|| StepError::NotAnswering(member.to_string()))?;
        let built = members::member(self.group, at, Some(revision.to_string()), self.context);
        apply::apply(self.api, member, &built, self.field_manager)
            .await
            .map(drop)
            .on(
                Op::Apply,
                ObjectName::new::<ValkeyNode>(self.namespace, member),
            )
            .map_err(StepError::from)
    }
}

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
