//! What one reconcile read about a ValkeyNode's volume: the input of the decision and the
//! report. The binary's fetch stage fills it; nothing here reads the API.

use crd_types::ValkeyNode;

use crate::claim::ClaimState;
use crate::decide::{Inputs, Usage};

/// The node, its claim and the volume's usage, as just read.
#[derive(Debug, Clone)]
pub struct Live {
    /// Read again, not from the watch cache (it may lag the status written a moment ago).
    pub node: ValkeyNode,
    /// `<node>-data`.
    pub claim_name: String,
    pub claim: Option<ClaimState>,
    pub usage: Usage,
    /// The claim's StorageClass allows expansion; read only before a growth.
    pub expandable: Option<bool>,
}

impl Live {
    /// The decision's inputs; `None` for a node without persistence.
    pub fn inputs(&self, now: k8s_openapi::jiff::Timestamp) -> Option<Inputs<'_>> {
        let persistence = self.node.spec.template.persistence.as_ref()?;
        Some(Inputs {
            spec_size: &persistence.size,
            auto_resize: persistence.auto_resize.as_ref(),
            claim: self.claim.as_ref(),
            usage: &self.usage,
            expandable: self.expandable,
            last_resize: self
                .node
                .status
                .as_ref()
                .and_then(|s| s.storage.as_ref())
                .and_then(|s| s.last_resize.as_ref()),
            now,
        })
    }
}
