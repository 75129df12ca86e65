//! Why a reconcile failed; [`ErrorKind::kind`] labels
//! `valkey_operator_reconcile_failures_total`.

use std::borrow::Cow;

use node_controller::status::BlockedContainer;
use operator_runtime::{ApiError, ErrorKind};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API call failed (label `<op>_<kind>`, e.g. `apply_statefulset`).
    #[error(transparent)]
    Api(#[from] ApiError),

    /// The ValkeyNode lacks a field the API server always sets (namespace).
    #[error("ValkeyNode {node} has no {field}")]
    Invalid { node: String, field: &'static str },

    /// The node's valkey container cannot start until the user creates what it references
    /// (label `container_config`); retried with the runtime's growing delay.
    #[error(transparent)]
    ContainerBlocked(#[from] BlockedContainer),
}

impl ErrorKind for Error {
    fn kind(&self) -> Cow<'static, str> {
        match self {
            Error::Api(e) => e.kind(),
            Error::Invalid { .. } => "invalid_object".into(),
            Error::ContainerBlocked(_) => "container_config".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::StatefulSet;
    use k8s_openapi::api::core::v1::Pod;
    use operator_runtime::{ApiResultExt, ObjectName, Op};

    fn failed(op: Op, object: ObjectName) -> Error {
        Err::<(), _>(kube::Error::LinesCodecMaxLineLengthExceeded)
            .on(op, object)
            .unwrap_err()
            .into()
    }

    #[test]
    fn messages_name_the_object_and_kinds_the_call() {
        let e = failed(Op::Apply, ObjectName::new::<StatefulSet>("prod", "cache"));
        assert_eq!(e.to_string(), "cannot apply StatefulSet prod/cache");
        assert_eq!(e.kind(), "apply_statefulset");
        let e = failed(Op::List, ObjectName::new::<Pod>("prod", "cache"));
        assert_eq!(e.to_string(), "cannot list Pod prod/cache");
        assert_eq!(e.kind(), "list_pod");
        let e = Error::Invalid {
            node: "cache".into(),
            field: "metadata.namespace",
        };
        assert_eq!(e.kind(), "invalid_object");
        let e = Error::from(BlockedContainer {
            pod: "cache-0".into(),
            container: "valkey".into(),
            reason: "CreateContainerConfigError".into(),
            message: "secret \"cache-auth\" not found".into(),
        });
        assert_eq!(e.kind(), "container_config");
        assert!(
            e.to_string().contains("secret \"cache-auth\" not found"),
            "{e}"
        );
    }
}
