//! The Events service-controller publishes on a ValkeyNode: typed reasons, and each Event as
//! a value carrying its note and related object (the Service).

use k8s_openapi::api::core::v1::ObjectReference;

operator_runtime::event_reasons! {
    /// Why service-controller tells something about a ValkeyNode.
    pub enum ServiceEventReason {
        /// The node's Service was created.
        ServiceCreated: Normal,
        /// The Service's ClusterIP, the node's announce address, changed (it was recreated).
        AnnounceAddressChanged: Warning,
        /// A Service of the node's name exists that the node does not control.
        ServiceNotOwned: Warning,
    }
}

/// One Event about the node.
#[derive(Debug, Clone, PartialEq)]
pub struct ServiceEvent {
    pub reason: ServiceEventReason,
    /// What happened, for a person.
    pub note: String,
    /// The Service it is about.
    pub related: Option<ObjectReference>,
}
