//! The Events node-controller publishes on a ValkeyNode: typed reasons, and each Event as a
//! value carrying its note and related object. [`crate::report`] decides them; the binary
//! publishes them in one place.

use k8s_openapi::api::core::v1::ObjectReference;

operator_runtime::event_reasons! {
    /// Why node-controller tells something about a ValkeyNode.
    pub enum NodeEventReason {
        /// The StatefulSet or Deployment was created.
        WorkloadCreated: Normal,
        /// A new template revision was applied; Kubernetes restarts the pod with it.
        Rolling: Normal,
        /// A new template revision waits for `spec.allowedRevision` (the roll gate).
        RollHeld: Normal,
        /// `spec.config` cannot be rendered; nothing is applied.
        ConfigInvalid: Warning,
        /// The claim's StorageClass does not exist, so the claim never binds.
        ClaimNotBound: Warning,
        /// The image lacks a program the operator's scripts run (docs/images.md).
        ImageIncomplete: Warning,
    }
}

/// One Event about the node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeEvent {
    pub reason: NodeEventReason,
    /// What happened, for a person.
    pub note: String,
    /// The object it happened to (the workload that rolled, the claim that does not bind).
    pub related: Option<ObjectReference>,
}

impl NodeEvent {
    pub fn new(
        reason: NodeEventReason,
        note: impl Into<String>,
        related: Option<ObjectReference>,
    ) -> Self {
        Self {
            reason,
            note: note.into(),
            related,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use operator_runtime::EventReason;

    #[test]
    fn problems_are_warnings_progress_is_normal() {
        let warnings: Vec<&str> = NodeEventReason::ALL
            .iter()
            .filter(|r| r.is_warning())
            .map(|r| r.as_str())
            .collect();
        assert_eq!(
            warnings,
            ["ConfigInvalid", "ClaimNotBound", "ImageIncomplete"]
        );
        assert_eq!(NodeEventReason::RollHeld.as_str(), "RollHeld");
    }
}
