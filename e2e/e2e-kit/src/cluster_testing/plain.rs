//! Plain (non-cluster) fred connections to the members, routing and following MOVED and ASK
//! here: used to read keys of open slots and by the [`AckedWriter`](super::AckedWriter).

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use fred::prelude::{ClientLike, Server};

use super::{Access, PORT, ValkeyClient, parse_cluster_nodes};
use crate::topology::{connect_one, raw};

/// Plain connections to the members, one per IP, made on demand; routing by `CLUSTER NODES`
/// and redirections followed here, so `ASKING` immediately precedes its command on the one
/// connection that carries both (callers use a `Nodes` from one task, one command at a time).
pub(super) struct Nodes {
    seeds: Vec<String>,
    password: Option<String>,
    /// With `spec.tls`: the test's client side (names checked are the members' IPs).
    tls: Option<fred::types::config::TlsConfig>,
    connections: HashMap<String, ValkeyClient>,
}

/// The IP of a MOVED / ASK error's `<slot> <ip>:<port>`.
pub(super) fn redirect_ip(details: &str) -> Option<String> {
    let address = details.split_whitespace().nth(2)?;
    Some(address.rsplit_once(':')?.0.to_string())
}

impl Nodes {
    pub(super) fn new(access: &Access) -> Self {
        Self {
            seeds: access.members.iter().map(|m| m.ip.clone()).collect(),
            password: access.password.clone(),
            tls: access.tls.as_ref().map(|t| t.fred()),
            connections: HashMap::new(),
        }
    }

    pub(super) async fn close(mut self) {
        for (_, client) in self.connections.drain() {
            let _ = tokio::time::timeout(Duration::from_secs(1), client.quit()).await;
        }
    }

    pub(super) async fn connection(&mut self, ip: &str) -> Result<ValkeyClient> {
        if let Some(client) = self.connections.get(ip) {
            if client.is_connected() {
                return Ok(client.clone());
            }
            self.drop_connection(ip).await;
        }
        let server = Server::new(ip, PORT);
        let client = connect_one(server, self.password.as_deref(), self.tls.clone(), ip).await?;
        self.connections.insert(ip.to_string(), client.clone());
        Ok(client)
    }

    pub(super) async fn drop_connection(&mut self, ip: &str) {
        if let Some(client) = self.connections.remove(ip) {
            let _ = tokio::time::timeout(Duration::from_secs(1), client.quit()).await;
        }
    }

    /// The primary owning `slot`, as the first member that answers sees it.
    pub(super) async fn owner(&mut self, slot: u16) -> Result<String> {
        let mut errors = Vec::new();
        for seed in self.seeds.clone() {
            let text: std::result::Result<String, String> = match self.connection(&seed).await {
                Ok(client) => raw(&client, "CLUSTER", vec!["NODES".into()])
                    .await
                    .map_err(|e| e.to_string()),
                Err(error) => Err(format!("{error:#}")),
            };
            match text {
                Ok(text) => {
                    if let Some(owner) = parse_cluster_nodes(&text)
                        .into_iter()
                        .find(|n| n.is_primary() && !n.failing() && n.owns(slot))
                    {
                        return Ok(owner.ip);
                    }
                    errors.push(format!("{seed}: no live primary owns slot {slot}"));
                }
                Err(error) => {
                    self.drop_connection(&seed).await;
                    errors.push(format!("{seed}: {error}"));
                }
            }
        }
        bail!("{}", errors.join("; "))
    }

    /// `GET key`, following MOVED and ASK.
    pub(super) async fn get(&mut self, key: &str) -> Result<Option<String>> {
        let slot = fred::util::redis_keyslot(key.as_bytes());
        let mut ip = self.owner(slot).await?;
        let mut asking = false;
        for _ in 0..5 {
            let client = self.connection(&ip).await?;
            if asking {
                raw::<fred::types::Value>(&client, "ASKING", vec![])
                    .await
                    .with_context(|| format!("ASKING on {ip}"))?;
            }
            match raw::<Option<String>>(&client, "GET", vec![key.into()]).await {
                Ok(value) => return Ok(value),
                Err(error) => {
                    let details = error.details().to_string();
                    match redirect_ip(&details) {
                        Some(target) if details.starts_with("MOVED") => {
                            (ip, asking) = (target, false)
                        }
                        Some(target) if details.starts_with("ASK") => (ip, asking) = (target, true),
                        _ => {
                            self.drop_connection(&ip).await;
                            bail!("GET {key} on {ip}: {error}");
                        }
                    }
                }
            }
        }
        bail!("GET {key}: more than 5 redirections")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirections_name_their_target() {
        assert_eq!(
            redirect_ip("MOVED 3999 127.100.0.3:6379").as_deref(),
            Some("127.100.0.3")
        );
        assert_eq!(
            redirect_ip("ASK 3999 127.100.0.4:6379").as_deref(),
            Some("127.100.0.4")
        );
        assert_eq!(redirect_ip("CLUSTERDOWN The cluster is down"), None);
    }
}
