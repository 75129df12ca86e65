//! Why a reconcile failed; the `kind` labels `valkey_operator_reconcile_failures_total`.
//! Valkey errors are not here: they are reported in status and retried, not failures of the
//! reconcile.

use std::borrow::Cow;

use operator_runtime::{ApiError, ErrorKind};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API call failed.
    #[error(transparent)]
    Api(#[from] ApiError),

    /// The object lacks a field the API server always sets.
    #[error("{kind} {name} has no {field}")]
    Invalid {
        kind: &'static str,
        name: String,
        field: &'static str,
    },

    /// The system's random source failed (a generated password needs it).
    #[error("cannot read random bytes for a password")]
    Random(#[source] std::io::Error),
}

impl ErrorKind for Error {
    fn kind(&self) -> Cow<'static, str> {
        match self {
            Error::Api(e) => e.kind(),
            Error::Invalid { .. } => "invalid_object".into(),
            Error::Random(_) => "random".into(),
        }
    }
}
