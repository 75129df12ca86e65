//! Why a reconcile failed; [`ErrorKind::kind`] labels
//! `valkey_operator_reconcile_failures_total`.

use std::borrow::Cow;

use operator_runtime::{ApiError, ErrorKind};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API call failed (label `<op>_<kind>`, e.g. `apply_persistentvolumeclaim`).
    #[error(transparent)]
    Api(#[from] ApiError),

    /// The ValkeyNode lacks a field the API server always sets (namespace).
    #[error("ValkeyNode {node} has no {field}")]
    Invalid { node: String, field: &'static str },
}

impl ErrorKind for Error {
    fn kind(&self) -> Cow<'static, str> {
        match self {
            Error::Api(e) => e.kind(),
            Error::Invalid { .. } => "invalid_object".into(),
        }
    }
}
