//! Why a reconcile failed; the `kind` labels `valkey_operator_reconcile_failures_total`.

use operator_runtime::ErrorKind;

/// The API call that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    ReadNode,
    ReadConfigMap,
    ReadClaim,
    ReadWorkload,
    ListPods,
    ReadStorageClass,
    ApplyConfigMap,
    ApplyClaim,
    ApplyWorkload,
    ApplyStatus,
}

impl Op {
    /// The metrics label.
    pub fn kind(self) -> &'static str {
        match self {
            Op::ReadNode => "read_node",
            Op::ReadConfigMap => "read_configmap",
            Op::ReadClaim => "read_pvc",
            Op::ReadWorkload => "read_workload",
            Op::ListPods => "list_pods",
            Op::ReadStorageClass => "read_storageclass",
            Op::ApplyConfigMap => "apply_configmap",
            Op::ApplyClaim => "apply_pvc",
            Op::ApplyWorkload => "apply_workload",
            Op::ApplyStatus => "apply_status",
        }
    }

    fn verb(self) -> &'static str {
        match self {
            Op::ReadNode
            | Op::ReadConfigMap
            | Op::ReadClaim
            | Op::ReadWorkload
            | Op::ReadStorageClass => "read",
            Op::ListPods => "list the pods of",
            Op::ApplyConfigMap | Op::ApplyClaim | Op::ApplyWorkload => "apply",
            Op::ApplyStatus => "write status.workload of",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The ValkeyNode lacks a field the API server always sets (namespace).
    #[error("ValkeyNode {node} has no {field}")]
    MissingField { node: String, field: &'static str },

    /// An API call failed; `object` is `<Kind> <namespace>/<name>`.
    #[error("cannot {} {object}", .op.verb())]
    Api {
        op: Op,
        object: String,
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

impl Error {
    /// A failed API call on `<kind> <namespace>/<name>`.
    pub fn api(
        op: Op,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> impl FnOnce(kube::Error) -> Self {
        let object = format!("{kind} {namespace}/{name}");
        move |source| Error::Api {
            op,
            object,
            source: Box::new(source),
        }
    }
}

impl ErrorKind for Error {
    fn kind(&self) -> &'static str {
        match self {
            Error::MissingField { .. } => "invalid_object",
            Error::Api { op, .. } => op.kind(),
            Error::PublishEvent { .. } => "publish_event",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_object_and_kinds_the_call() {
        let e = Error::api(Op::ApplyWorkload, "StatefulSet", "prod", "cache")(
            kube::Error::LinesCodecMaxLineLengthExceeded,
        );
        assert_eq!(e.to_string(), "cannot apply StatefulSet prod/cache");
        assert_eq!(e.kind(), "apply_workload");
        let e = Error::api(Op::ListPods, "ValkeyNode", "prod", "cache")(
            kube::Error::LinesCodecMaxLineLengthExceeded,
        );
        assert_eq!(
            e.to_string(),
            "cannot list the pods of ValkeyNode prod/cache"
        );
    }
}
