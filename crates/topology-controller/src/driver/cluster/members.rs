//! A step's changes to a cluster's member ValkeyNodes: deleting one, opening its roll gate.

use crd_types::{ValkeyCluster, ValkeyNode};
use kube::Api;
use kube::api::DeleteParams;
use operator_runtime::{ApiResultExt, ObjectName, Op, apply};
use topology_controller::cluster::members;
use topology_controller::cluster::model::Member;
use topology_controller::shared::commands::StepError;
use topology_controller::shared::execute::MemberObjects;

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
