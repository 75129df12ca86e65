//! Why the operator's CA, or a certificate Secret it writes, cannot be had: the words go to
//! Events and to the topology's status.

use crd_types::template::TLS_CA_KEY;
use topology_controller::shared::auth::UnusableSecret;
use topology_controller::shared::ca_replacement::{NEXT_CA_CERT_KEY, NEXT_CA_KEY_KEY};
use topology_controller::shared::issuer::{BadClusterIp, CaError, ForeignCertificate, IssueError};
use topology_controller::shared::tls::FilesError;

use super::CA_KEY_KEY;

/// Why the CA the operator keeps for a topology, or the certificate it presents from there,
/// cannot be used: the operator has no client for the members.
#[derive(Debug, thiserror::Error)]
pub enum CaUnusable {
    #[error(
        "CA Secret {secret} does not exist but the members already run; a new CA would not \
         be trusted by them, so restore it"
    )]
    GoneWhileMembersRun { secret: String },
    /// Created, or found created by another writer, and gone again at once.
    #[error("CA Secret {secret} does not exist")]
    Missing { secret: String },
    #[error(transparent)]
    NotOwned(#[from] NotOwned),
    /// The first CA could not be made.
    #[error(transparent)]
    NotGenerated(IssueError),
    #[error("CA Secret {secret}: {problem}")]
    Content {
        secret: String,
        problem: CaSecretProblem,
    },
    #[error("a next CA: {0}")]
    NextNotGenerated(#[source] IssueError),
    #[error("the operator's certificate in Secret {secret}: {source}")]
    OperatorCertificateUnusable { secret: String, source: FilesError },
}

/// What is wrong with what `<topology>-ca-key` holds.
#[derive(Debug, thiserror::Error)]
pub enum CaSecretProblem {
    #[error("it needs {TLS_CA_KEY} and {CA_KEY_KEY}")]
    Incomplete,
    #[error(transparent)]
    Current(CaError),
    #[error("it needs both {NEXT_CA_CERT_KEY} and {NEXT_CA_KEY_KEY}, or neither")]
    NextIncomplete,
    #[error("{NEXT_CA_CERT_KEY}/{NEXT_CA_KEY_KEY}: {0}")]
    Next(#[source] CaError),
    /// The operator's own certificate is another CA's.
    #[error(transparent)]
    OperatorCertificateForeign(ForeignCertificate),
    #[error(transparent)]
    OperatorCertificateNotIssued(IssueError),
}

/// Why a Secret of a name the operator gives a topology's CA is not the topology's to use.
#[derive(Debug, thiserror::Error)]
pub enum NotOwned {
    #[error(transparent)]
    Unusable(#[from] UnusableSecret),
    #[error(
        "Secret {secret} exists and is not this topology's (the operator keeps its CA there \
         when spec.tls names no Secret); rename or delete it"
    )]
    NotOwnedByTopology { secret: String },
}

/// Why a certificate Secret (a member's, or the public CA's) was not written: the member
/// waits, the others go on.
#[derive(Debug, thiserror::Error)]
pub enum SecretNotWritten {
    #[error("Secret {secret}: {source}")]
    Api { secret: String, source: kube::Error },
    #[error(transparent)]
    NotOwned(#[from] NotOwned),
    #[error(
        "Secret {secret} belongs to an earlier member of the same name; it is issued once \
         the garbage collector has deleted it"
    )]
    EarlierMembers { secret: String },
    #[error(
        "Secret {secret} exists and is not this member's certificate (the operator issues \
         one there when spec.tls names no Secret); rename or delete it"
    )]
    NotTheMembers { secret: String },
    #[error(transparent)]
    BadClusterIp(#[from] BadClusterIp),
    #[error(transparent)]
    ForeignCertificate(#[from] ForeignCertificate),
    #[error(transparent)]
    NotIssued(#[from] IssueError),
}
