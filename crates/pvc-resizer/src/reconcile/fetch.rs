//! The fetch stage: the node and its claim from the API server, the usage from the stats
//! book, and the StorageClass when the decision would grow the claim.

use crd_types::{ValkeyNode, names};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use operator_runtime::{ApiError, ApiResultExt, ObjectName, Op};
use pvc_resizer::claim::ClaimState;
use pvc_resizer::decide::{Usage, class_to_check};
use pvc_resizer::live::Live;

use super::Apis;
use crate::usage::Book;

/// What node `name`'s volume is now; `None` when the node is gone or being deleted.
pub async fn fetch(
    apis: &Apis,
    book: &Book,
    name: &str,
    now: Timestamp,
) -> Result<Option<Live>, ApiError> {
    let ns = apis.namespace.as_str();
    let Some(node) = apis
        .nodes
        .get_opt(name)
        .await
        .on(Op::Read, ObjectName::new::<ValkeyNode>(ns, name))?
    else {
        return Ok(None);
    };
    if node.meta().deletion_timestamp.is_some() {
        return Ok(None);
    }
    let claim_name = names::pvc_name(name);
    let persistence = node.spec.template.persistence.as_ref();
    let claim = match persistence {
        Some(_) => apis.claims.get_opt(&claim_name).await.on(
            Op::Read,
            ObjectName::new::<PersistentVolumeClaim>(ns, &claim_name),
        )?,
        None => None,
    };
    let usage = match persistence.and_then(|p| p.auto_resize.as_ref()) {
        Some(_) => {
            let on = node
                .status
                .as_ref()
                .and_then(|s| s.workload.as_ref())
                .and_then(|w| w.node_name.as_deref());
            book.usage(on, ns, &claim_name)
        }
        None => Usage::Unread,
    };
    let mut live = Live {
        claim: claim.as_ref().map(ClaimState::of),
        node,
        claim_name,
        usage,
        expandable: None,
    };
    let class = live
        .inputs(now)
        .and_then(|i| class_to_check(&i))
        .map(str::to_owned);
    if let Some(class) = class {
        live.expandable = apis
            .storage_classes
            .get_opt(&class)
            .await
            .on(Op::Read, ObjectName::cluster::<StorageClass>(&class))?
            .map(|c| c.allow_volume_expansion.unwrap_or(false));
    }
    Ok(Some(live))
}
