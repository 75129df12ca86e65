//! What each member says of itself, for a report: INFO and CLUSTER NODES from a data node,
//! INFO and the SENTINEL views from a sentinel. Read the way the operator and the e2e tests
//! read members: a connection to the member's Service address (`status.endpoint`), logged in
//! as the `operator` user, over TLS with the topology's CA when it has `spec.tls`. The
//! machine running the plugin must reach the Services' ClusterIPs (in the cluster, or on a
//! network routed to it).

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use crd_types::ValkeyNode;
use crd_types::names::ports;
use crd_types::node::Mode;
use fred::prelude::{ClientLike, ConnectionConfig, PerformanceConfig, Server, ServerConfig};
use fred::types::{ClusterHash, CustomCommand, Value};
use kube::ResourceExt;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use crate::topology::Kind;

/// Bound on connecting and on each command.
const TIMEOUT: Duration = Duration::from_secs(5);

/// One file of a member's views: its name and the command that fills it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Query {
    pub file: &'static str,
    pub args: Vec<String>,
}

fn query(file: &'static str, args: &[&str]) -> Query {
    Query {
        file,
        args: args.iter().map(|a| a.to_string()).collect(),
    }
}

/// What to ask a member of mode `mode` of a topology of `kind` named `topology`.
pub fn queries(kind: Kind, mode: Mode, topology: &str) -> Vec<Query> {
    match (kind, mode) {
        (_, Mode::Sentinel) => vec![
            query("info.txt", &["INFO"]),
            query("sentinel-masters.txt", &["SENTINEL", "MASTERS"]),
            query("sentinel-replicas.txt", &["SENTINEL", "REPLICAS", topology]),
            query(
                "sentinel-sentinels.txt",
                &["SENTINEL", "SENTINELS", topology],
            ),
        ],
        (Kind::Cluster, _) => vec![
            query("info.txt", &["INFO", "everything"]),
            query("cluster-nodes.txt", &["CLUSTER", "NODES"]),
            query("cluster-info.txt", &["CLUSTER", "INFO"]),
        ],
        (Kind::Replication, _) => vec![query("info.txt", &["INFO", "everything"])],
    }
}

/// A reply as valkey-cli prints it: strings as they are, arrays one item per line, nested
/// arrays indented.
pub fn reply_text(value: &Value) -> String {
    fn walk(value: &Value, depth: usize, out: &mut String) {
        let indent = "  ".repeat(depth);
        match value {
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    if matches!(item, Value::Array(_)) {
                        out.push_str(&format!("{indent}{})\n", i + 1));
                        walk(item, depth + 1, out);
                    } else {
                        walk(item, depth, out);
                    }
                }
            }
            Value::Null => out.push_str(&format!("{indent}(nil)\n")),
            other => {
                let text = other.as_string().unwrap_or_else(|| format!("{other:?}"));
                if depth == 0 && text.contains('\n') {
                    out.push_str(&text);
                    if !text.ends_with('\n') {
                        out.push('\n');
                    }
                } else {
                    out.push_str(&format!("{indent}{text}\n"));
                }
            }
        }
    }
    let mut out = String::new();
    walk(value, 0, &mut out);
    out
}

/// How to reach the members.
#[derive(Clone)]
pub struct Reach {
    pub namespace: String,
    /// Passwords to try for the `operator` user, in order.
    pub operator_passwords: Vec<String>,
    /// With `spec.tls`: the CA bundle (PEM) the members' certificates chain to.
    pub ca_pem: Option<String>,
}

impl Reach {
    fn tls(&self) -> Result<Option<fred::types::config::TlsConfig>> {
        let Some(pem) = &self.ca_pem else {
            return Ok(None);
        };
        let mut roots = rustls::RootCertStore::empty();
        for ca in CertificateDer::pem_slice_iter(pem.as_bytes()) {
            roots.add(ca?)?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Some(fred::types::config::TlsConnector::from(config).into()))
    }

    async fn connect(&self, node: &ValkeyNode) -> Result<fred::clients::Client> {
        let endpoint = node
            .status
            .as_ref()
            .and_then(|s| s.endpoint.as_ref())
            .context("no status.endpoint yet")?;
        let ip = endpoint
            .cluster_ip
            .clone()
            .context("no ClusterIP in status.endpoint yet")?;
        let port = match node.spec.mode {
            Mode::Sentinel => ports::SENTINEL,
            _ => ports::VALKEY,
        } as u16;
        let tls = self.tls()?;
        let dns = endpoint
            .dns_name
            .clone()
            .unwrap_or_else(|| format!("{}.{}.svc", node.name_any(), self.namespace));
        let mut last = None;
        for password in &self.operator_passwords {
            let mut server = Server::new(ip.clone(), port);
            if tls.is_some() {
                server.tls_server_name = Some(dns.clone().into());
            }
            let config = fred::types::config::Config {
                fail_fast: true,
                username: Some("operator".into()),
                password: Some(password.clone()),
                server: ServerConfig::Centralized { server },
                tls: tls.clone(),
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
            let client =
                fred::clients::Client::new(config, Some(performance), Some(connection), None);
            match tokio::time::timeout(TIMEOUT, client.init()).await {
                Ok(Ok(_)) => return Ok(client),
                Ok(Err(e)) => last = Some(anyhow::anyhow!("{ip}:{port}: {e}")),
                Err(_) => last = Some(anyhow::anyhow!("{ip}:{port}: timed out")),
            }
        }
        match last {
            Some(e) => Err(e),
            None => bail!("no operator password to log in with"),
        }
    }

    /// Each of the member's views as (file, text); one that fails holds its error.
    pub async fn read(
        &self,
        kind: Kind,
        node: &ValkeyNode,
        topology: &str,
    ) -> Vec<(String, String)> {
        let queries = queries(kind, node.spec.mode, topology);
        let client = match self.connect(node).await {
            Ok(client) => client,
            Err(e) => return vec![("error.txt".into(), format!("error: connecting: {e:#}\n"))],
        };
        let mut out = Vec::new();
        for q in queries {
            let mut args = q.args.clone();
            let command = args.remove(0);
            let reply: Result<Value, _> = client
                .custom(
                    CustomCommand::new(command, ClusterHash::Random, false),
                    args,
                )
                .await;
            let text = match reply {
                Ok(value) => reply_text(&value),
                Err(e) => format!("error: {}: {e}\n", q.args.join(" ")),
            };
            out.push((q.file.to_string(), text));
        }
        let _ = client.quit().await;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_nodes_and_sentinels_are_asked_their_own_views() {
        let files =
            |kind, mode| -> Vec<&str> { queries(kind, mode, "g").iter().map(|q| q.file).collect() };
        assert_eq!(
            files(Kind::Cluster, Mode::Cluster),
            ["info.txt", "cluster-nodes.txt", "cluster-info.txt"]
        );
        assert_eq!(files(Kind::Replication, Mode::Standalone), ["info.txt"]);
        assert_eq!(
            files(Kind::Replication, Mode::Sentinel),
            [
                "info.txt",
                "sentinel-masters.txt",
                "sentinel-replicas.txt",
                "sentinel-sentinels.txt"
            ]
        );
        let replicas = &queries(Kind::Replication, Mode::Sentinel, "sessions")[2];
        assert_eq!(replicas.args, ["SENTINEL", "REPLICAS", "sessions"]);
    }

    #[test]
    fn replies_print_like_valkey_cli() {
        let info = Value::from("# Server\r\nvalkey_version:8.1.1\r\n");
        assert_eq!(reply_text(&info), "# Server\r\nvalkey_version:8.1.1\r\n");
        let masters = Value::Array(vec![Value::Array(vec![
            Value::from("name"),
            Value::from("sessions"),
            Value::from("num-slaves"),
            Value::Integer(2),
        ])]);
        assert_eq!(
            reply_text(&masters),
            "1)\n  name\n  sessions\n  num-slaves\n  2\n"
        );
        assert_eq!(reply_text(&Value::Array(vec![])), "");
        assert_eq!(reply_text(&Value::Null), "(nil)\n");
    }
}
