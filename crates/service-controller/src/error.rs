//! Why a reconcile failed; the `kind` labels `valkey_operator_reconcile_failures_total`.

use operator_runtime::ErrorKind;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The ValkeyNode lacks a field the API server always sets (namespace, uid).
    #[error("ValkeyNode {node} has no {field}")]
    MissingField { node: String, field: &'static str },

    #[error("cannot read ValkeyNode {namespace}/{name}")]
    ReadNode {
        namespace: String,
        name: String,
        #[source]
        source: Box<kube::Error>,
    },

    #[error("cannot read Service {namespace}/{name}")]
    ReadService {
        namespace: String,
        name: String,
        #[source]
        source: Box<kube::Error>,
    },

    #[error("cannot apply Service {namespace}/{name}")]
    ApplyService {
        namespace: String,
        name: String,
        #[source]
        source: Box<kube::Error>,
    },

    #[error("cannot write status.endpoint of ValkeyNode {namespace}/{name}")]
    ApplyStatus {
        namespace: String,
        name: String,
        #[source]
        source: Box<kube::Error>,
    },

    #[error("cannot publish Event {reason} for ValkeyNode {namespace}/{name}")]
    PublishEvent {
        namespace: String,
        name: String,
        reason: &'static str,
        #[source]
        source: Box<kube::Error>,
    },
}

impl ErrorKind for Error {
    fn kind(&self) -> &'static str {
        match self {
            Error::MissingField { .. } => "invalid_object",
            Error::ReadNode { .. } => "read_node",
            Error::ReadService { .. } => "read_service",
            Error::ApplyService { .. } => "apply_service",
            Error::ApplyStatus { .. } => "apply_status",
            Error::PublishEvent { .. } => "publish_event",
        }
    }
}
