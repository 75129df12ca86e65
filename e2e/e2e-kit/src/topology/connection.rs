//! Plain (non-cluster) fred connections to one server that fail fast and never reconnect by
//! themselves: a writer that waits for replicas (`WAIT`) must know which connection carried
//! its write.

use std::time::Duration;

use anyhow::{Context, Result};
use fred::prelude::{ClientLike, ConnectionConfig, PerformanceConfig, Server, ServerConfig};
use fred::types::config::TlsConfig;
use fred::types::{ClusterHash, CustomCommand, Value};

/// A fred client (the name `Client` is kube's in this crate's tests).
pub type ValkeyClient = fred::clients::Client;

/// Bound on connecting and on each command.
const TIMEOUT: Duration = Duration::from_secs(3);

/// A plain connection to `server`, logged in with `password` when given, over TLS with
/// `tls`; `address` names the server in errors.
pub async fn connect_one(
    server: Server,
    password: Option<&str>,
    tls: Option<TlsConfig>,
    address: &str,
) -> Result<ValkeyClient> {
    let config = fred::types::config::Config {
        fail_fast: true,
        password: password.map(str::to_string),
        server: ServerConfig::Centralized { server },
        tls,
        ..Default::default()
    };
    let connection = ConnectionConfig {
        connection_timeout: TIMEOUT,
        internal_command_timeout: TIMEOUT,
        max_command_attempts: 1,
        ..Default::default()
    };
    let performance = PerformanceConfig {
        default_command_timeout: TIMEOUT,
        ..Default::default()
    };
    let client = ValkeyClient::new(config, Some(performance), Some(connection), None);
    tokio::time::timeout(TIMEOUT, client.init())
        .await
        .with_context(|| format!("connecting to {address}: timed out"))?
        .with_context(|| format!("connecting to {address}"))?;
    Ok(client)
}

/// `command` with `args`, as it is, on `client`.
pub async fn raw<R: fred::types::FromValue>(
    client: &ValkeyClient,
    command: &'static str,
    args: Vec<Value>,
) -> std::result::Result<R, fred::error::Error> {
    client
        .custom(
            CustomCommand::new_static(command, ClusterHash::Random, false),
            args,
        )
        .await
}
