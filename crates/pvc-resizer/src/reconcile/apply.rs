//! The apply stage: a growth is a server-side apply of the claim's size (and the
//! last-resize annotation) under pvc-resizer's field manager, with force, which takes the
//! field over from node-controller. A refusal by the API server (a ResourceQuota, a class
//! without expansion...) is an outcome to report, not an error to retry at once.

use crd_types::node::ResizeResult;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::jiff::Timestamp;
use operator_runtime::{ApiError, ApiResultExt, ObjectName, Op};
use pvc_resizer::claim;
use pvc_resizer::decide::Decision;
use pvc_resizer::report::Applied;

use super::Apis;

pub async fn apply(
    apis: &Apis,
    claim_name: &str,
    decision: &Decision,
    field_manager: &str,
    now: Timestamp,
) -> Result<Applied, ApiError> {
    let Decision::Grow {
        from,
        to,
        cause,
        capacity_before,
    } = decision
    else {
        return Ok(Applied::Nothing);
    };
    let grown = claim::grown(&apis.namespace, claim_name, *to, *capacity_before, now);
    match operator_runtime::apply(&apis.claims, claim_name, &grown, field_manager).await {
        Ok(_) => {
            tracing::info!(claim = %claim_name, namespace = %apis.namespace, from, to, "asked the claim to grow");
            Ok(Applied::Grown {
                from: *from,
                to: *to,
                cause: *cause,
            })
        }
        Err(kube::Error::Api(status)) if refused(status.code) => {
            let result = if status.code == 403 && status.message.contains("exceeded quota") {
                ResizeResult::QuotaExceeded
            } else {
                ResizeResult::Refused
            };
            tracing::warn!(claim = %claim_name, namespace = %apis.namespace, to, message = %status.message, "growth refused");
            Ok(Applied::Refused {
                to: *to,
                result,
                message: status.message.clone(),
            })
        }
        Err(error) => Err(error).on(
            Op::Apply,
            ObjectName::new::<PersistentVolumeClaim>(&apis.namespace, claim_name),
        ),
    }
}

/// A client error that asking again will not change (conflicts and throttling are retried).
fn refused(code: u16) -> bool {
    (400..500).contains(&code) && !matches!(code, 401 | 408 | 409 | 429)
}

/// The growth's result as the metric's label.
pub fn metric_result(applied: &Applied) -> Option<&'static str> {
    match applied {
        Applied::Nothing => None,
        Applied::Grown { .. } => Some("requested"),
        Applied::Refused {
            result: ResizeResult::QuotaExceeded,
            ..
        } => Some("quota_exceeded"),
        Applied::Refused { .. } => Some("refused"),
    }
}
