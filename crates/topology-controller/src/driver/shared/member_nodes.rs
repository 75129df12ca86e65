//! A step's changes to a topology's member ValkeyNodes (deleting one, opening its roll gate),
//! through the API server under the controller's field manager, for every kind.

use crd_types::ValkeyNode;
use kube::Api;
use kube::api::DeleteParams;
use operator_runtime::{ApiResultExt, ObjectName, Op, apply};
use topology_controller::shared::commands::StepError;
use topology_controller::shared::execute::MemberObjects;

use crate::driver::shared::stages::Apis;

/// The member ValkeyNodes of one topology. `build` makes a member's ValkeyNode with its roll
/// gate open for a revision; `None` when the topology has no member of that name.
pub struct MemberNodes<'a, B> {
    api: &'a Api<ValkeyNode>,
    namespace: &'a str,
    field_manager: &'a str,
    build: B,
}

impl<'a, B> MemberNodes<'a, B>
where
    B: Fn(&str, String) -> Option<ValkeyNode> + Sync,
{
    pub fn new<T>(apis: &'a Apis<T>, build: B) -> Self {
        Self {
            api: &apis.nodes,
            namespace: &apis.namespace,
            field_manager: apis.field_manager,
            build,
        }
    }
}

impl<B> MemberObjects for MemberNodes<'_, B>
where
    B: Fn(&str, String) -> Option<ValkeyNode> + Sync,
{
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
        let built = (self.build)(member, revision.to_string())
            .ok_or_else(|| StepError::NotAnswering(member.to_string()))?;
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
