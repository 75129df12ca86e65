//! The Kubernetes half of a topology: fetching it with its member ValkeyNodes, a step's
//! changes to them (deleting a member's ValkeyNode, opening its roll gate), and its
//! PodDisruptionBudgets.

use std::fmt::Debug;

use crd_types::{ValkeyCluster, ValkeyNode};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::serde::de::DeserializeOwned;
use kube::api::{DeleteParams, ListParams};
use kube::{Api, Resource, ResourceExt};
use operator_runtime::{ApiError, ApiResultExt, ObjectName, Op, apply};
use topology_controller::commands::StepError;
use topology_controller::disruption;
use topology_controller::execute::MemberObjects;
use topology_controller::members;
use topology_controller::model::Member;

/// A topology as it is now (the cache may lag behind the status written a moment ago) and
/// the ValkeyNodes labelled `<label>=<name>`, split into those it owns and the others;
/// `None` when it is gone or going.
pub async fn fetch_with_members<K>(
    parents: &Api<K>,
    nodes: &Api<ValkeyNode>,
    namespace: &str,
    name: &str,
    label: &str,
) -> Result<Option<(K, Vec<ValkeyNode>, Vec<ValkeyNode>)>, ApiError>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    let Some(parent) = parents
        .get_opt(name)
        .await
        .on(Op::Read, ObjectName::new::<K>(namespace, name))?
    else {
        return Ok(None);
    };
    if parent.meta().deletion_timestamp.is_some() {
        return Ok(None);
    }
    let uid = parent.uid().unwrap_or_default();
    let (owned, foreign) = nodes
        .list(&ListParams::default().labels(&format!("{label}={name}")))
        .await
        .on(Op::List, ObjectName::new::<ValkeyNode>(namespace, name))?
        .items
        .into_iter()
        .partition(|n| n.owner_references().iter().any(|o| o.uid == uid));
    Ok(Some((parent, owned, foreign)))
}

/// A cluster's member ValkeyNodes, changed through the API server under the controller's
/// field manager.
pub struct ClusterMembers<'a> {
    pub cluster: &'a ValkeyCluster,
    pub members: &'a [Member],
    pub api: &'a Api<ValkeyNode>,
    pub namespace: &'a str,
    pub field_manager: &'a str,
}

impl MemberObjects for ClusterMembers<'_> {
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
        let at = self
            .members
            .iter()
            .find(|m| m.name == member)
            .ok_or_else(|| StepError::NotAnswering(member.to_string()))?
            .at;
        let built = members::member(self.cluster, at, Some(revision.to_string()));
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

/// Applies the budgets where the live ones (those listed by `selector`, see
/// [`disruption::budgets_selector`]) do not hold them, and deletes the listed ones no longer
/// wanted. One list per look when nothing changed.
pub async fn apply_budgets(
    api: &Api<PodDisruptionBudget>,
    namespace: &str,
    selector: &str,
    wanted: &[PodDisruptionBudget],
    field_manager: &str,
) -> Result<(), ApiError> {
    let live = api
        .list(&ListParams::default().labels(selector))
        .await
        .on(
            Op::List,
            ObjectName::new::<PodDisruptionBudget>(namespace, selector),
        )?
        .items;
    for budget in wanted {
        let name = budget.name_any();
        if live
            .iter()
            .any(|l| l.name_any() == name && apply::is_applied(budget, l))
        {
            continue;
        }
        apply::apply(api, &name, budget, field_manager).await.on(
            Op::Apply,
            ObjectName::new::<PodDisruptionBudget>(namespace, &name),
        )?;
    }
    for name in disruption::stale(&live, wanted) {
        api.delete(&name, &DeleteParams::default())
            .await
            .map(drop)
            .or_else(|e| match e {
                kube::Error::Api(s) if s.code == 404 => Ok(()),
                e => Err(e),
            })
            .on(
                Op::Delete,
                ObjectName::new::<PodDisruptionBudget>(namespace, &name),
            )?;
    }
    Ok(())
}
