//! The Events pvc-resizer publishes on a ValkeyNode, each with the claim as related object.

operator_runtime::event_reasons! {
    /// Why pvc-resizer tells something about a ValkeyNode's volume.
    pub enum ResizerEventReason {
        /// The claim was asked to grow (by the spec or by usage).
        Resized: Normal,
        /// A growth finished: the claim's capacity is what it requests.
        ResizeCompleted: Normal,
        /// Usage is above the threshold and the claim is at autoResize.limit.
        LimitReached: Warning,
        /// The claim must grow and its StorageClass does not allow expansion.
        NotExpandable: Warning,
        /// A ResourceQuota refused the larger size.
        QuotaExceeded: Warning,
        /// The API server refused the larger size.
        ResizeRefused: Warning,
        /// The storage driver failed to grow the volume.
        ResizeFailed: Warning,
        /// The kubelet's volume stats of the pod's Node cannot be read.
        UsageUnknown: Warning,
    }
}

/// One Event about the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResizerEvent {
    pub reason: ResizerEventReason,
    pub note: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use operator_runtime::EventReason;

    #[test]
    fn progress_is_normal_problems_are_warnings() {
        let normal: Vec<&str> = ResizerEventReason::ALL
            .iter()
            .filter(|r| !r.is_warning())
            .map(|r| r.as_str())
            .collect();
        assert_eq!(normal, ["Resized", "ResizeCompleted"]);
    }
}
