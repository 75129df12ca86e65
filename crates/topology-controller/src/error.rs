//! Why a reconcile failed; the `kind` labels `valkey_operator_reconcile_failures_total`.
//! Valkey errors are not here: they are reported in status and retried, not failures of the
//! reconcile.

use operator_runtime::ErrorKind;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The object lacks a field the API server always sets.
    #[error("{kind} {name} has no {field}")]
    MissingField {
        kind: &'static str,
        name: String,
        field: &'static str,
    },

    /// The system's random source failed (a generated password needs it).
    #[error("cannot read random bytes for a password: {0}")]
    Random(String),

    #[error("cannot {op} {kind} {namespace}/{name}")]
    Api {
        op: Op,
        kind: &'static str,
        namespace: String,
        name: String,
        #[source]
        source: Box<kube::Error>,
    },
}

/// What the controller was doing with the API server.
#[derive(Debug, Clone, Copy)]
pub enum Op {
    ReadCluster,
    ListMembers,
    ApplyMember,
    ApplyMemberStatus,
    ApplyClusterStatus,
    PublishEvent,
    ReadSecret,
    CreateSecret,
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Op::ReadCluster => "read",
            Op::ListMembers => "list the members of",
            Op::ApplyMember => "apply",
            Op::ApplyMemberStatus => "write status.valkey of",
            Op::ApplyClusterStatus => "write the status of",
            Op::PublishEvent => "publish an Event about",
            Op::ReadSecret => "read",
            Op::CreateSecret => "create",
        })
    }
}

impl Error {
    /// A `map_err` adapter for API calls.
    pub fn api(
        op: Op,
        kind: &'static str,
        namespace: &str,
        name: &str,
    ) -> impl FnOnce(kube::Error) -> Error {
        let (namespace, name) = (namespace.to_string(), name.to_string());
        move |source| Error::Api {
            op,
            kind,
            namespace,
            name,
            source: Box::new(source),
        }
    }
}

impl ErrorKind for Error {
    fn kind(&self) -> &'static str {
        match self {
            Error::MissingField { .. } => "invalid_object",
            Error::Random(_) => "random",
            Error::Api { op, .. } => match op {
                Op::ReadCluster => "read_cluster",
                Op::ListMembers => "list_members",
                Op::ApplyMember => "apply_member",
                Op::ApplyMemberStatus => "apply_member_status",
                Op::ApplyClusterStatus => "apply_cluster_status",
                Op::PublishEvent => "publish_event",
                Op::ReadSecret => "read_secret",
                Op::CreateSecret => "create_secret",
            },
        }
    }
}
