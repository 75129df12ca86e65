//! The pod's layout that the pod builder and the container builders share: its volume
//! names, the operator password's Secret and the main port.

use crd_types::ValkeyNode;
use crd_types::names::ports;
use crd_types::node::Mode;
use crd_types::template::SecretKeyRef;

pub const DATA_VOLUME: &str = "data";
pub const TMP_VOLUME: &str = "tmp";
/// The exporter's password file, in memory (see [`crate::config::EXPORTER_AUTH_DIR`]).
pub const EXPORTER_AUTH_VOLUME: &str = "exporter-auth";
/// A data node's users Secret (see [`crate::config::USERS_DIR`]).
pub const USERS_VOLUME: &str = "users";
/// The TLS Secret `spec.tls` names, at [`crd_types::template::TLS_DIR`].
pub const TLS_VOLUME: &str = "tls";
/// The operator password Secret (see [`crate::config::OPERATOR_PASSWORD_DIR`]).
pub const OPERATOR_PASSWORD_VOLUME: &str = "operator-password";

/// `auth.operatorSecretRef`: with it, the valkey container gets the password both in its env
/// and as a file (see [`crate::config::OPERATOR_PASSWORD_DIR`]).
pub(super) fn operator_secret(node: &ValkeyNode) -> Option<&SecretKeyRef> {
    node.spec.auth.as_ref()?.operator_secret_ref.as_ref()
}

/// The main port's number and name for `mode`.
pub(super) fn main_port(mode: Mode) -> (i32, &'static str) {
    match mode {
        Mode::Sentinel => (ports::SENTINEL, ports::SENTINEL_NAME),
        Mode::Standalone | Mode::Cluster => (ports::VALKEY, ports::VALKEY_NAME),
    }
}
