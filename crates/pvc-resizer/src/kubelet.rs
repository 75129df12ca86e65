//! Talking to kubelets directly, as metrics-server does: HTTPS to each Node's address and
//! kubelet port from its status, with the controller's own credentials (in a pod: the
//! projected ServiceAccount token, re-read as it rotates; locally: the kubeconfig's token).
//! A kubelet with webhook authorization (fine-grained or not) maps `GET /stats/summary` to
//! `nodes/stats`, so no `nodes/proxy` (which allows exec into any pod) is needed.
//!
//! TLS: the kubelet's serving certificate is verified against `--kubelet-ca-file`, by default
//! the API server's CA, which signs kubelet certificates when `serverTLSBootstrap` is on.
//! Kubelets with self-signed certificates need `--kubelet-insecure-skip-tls-verify`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;

/// How to reach kubelets.
#[derive(Debug, Clone)]
pub struct Settings {
    pub ca_file: Option<PathBuf>,
    pub insecure_skip_tls_verify: bool,
}

/// One client per kubelet address, made from the controller's own configuration.
pub struct Kubelets {
    base: kube::Config,
    clients: Mutex<HashMap<String, kube::Client>>,
}

/// A request to a kubelet takes at most this long.
const TIMEOUT: Duration = Duration::from_secs(10);

impl Kubelets {
    pub async fn new(settings: Settings) -> Result<Self, String> {
        let mut base = kube::Config::infer()
            .await
            .map_err(|e| format!("client configuration: {e}"))?;
        if let Some(ca) = settings.ca_file {
            base.root_cert_file = Some(ca);
            base.root_cert = None;
        }
        base.accept_invalid_certs = settings.insecure_skip_tls_verify;
        // Names the API server's certificate carries, not a kubelet's.
        base.tls_server_name = None;
        base.proxy_url = None;
        base.headers.clear();
        base.connect_timeout = Some(TIMEOUT);
        base.read_timeout = Some(TIMEOUT);
        base.default_retry = false;
        Ok(Self {
            base,
            clients: Mutex::default(),
        })
    }

    /// `GET /stats/summary` of `node`.
    pub async fn summary(&self, node: &Node) -> Result<String, String> {
        let url = endpoint(node)?;
        let client = self.client(&url)?;
        let request = http::Request::get("/stats/summary")
            .body(Vec::new())
            .map_err(|e| e.to_string())?;
        tokio::time::timeout(TIMEOUT, client.request_text(request))
            .await
            .map_err(|_| format!("{url}/stats/summary did not answer in {TIMEOUT:?}"))?
            .map_err(|e| format!("{url}/stats/summary: {}", operator_runtime::error_chain(&e)))
    }

    fn client(&self, url: &str) -> Result<kube::Client, String> {
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(client) = clients.get(url) {
            return Ok(client.clone());
        }
        let mut config = self.base.clone();
        config.cluster_url = url.parse().map_err(|e| format!("{url}: {e}"))?;
        let client = kube::Client::try_from(config).map_err(|e| format!("{url}: {e}"))?;
        clients.insert(url.to_string(), client.clone());
        Ok(client)
    }
}

/// `https://<address>:<port>` of a Node's kubelet: its InternalIP (else its Hostname) and
/// `status.daemonEndpoints.kubeletEndpoint.Port`.
pub fn endpoint(node: &Node) -> Result<String, String> {
    let name = node.metadata.name.as_deref().unwrap_or_default();
    let status = node
        .status
        .as_ref()
        .ok_or_else(|| format!("Node {name} has no status"))?;
    let addresses = status.addresses.as_deref().unwrap_or_default();
    let address = ["InternalIP", "Hostname"]
        .iter()
        .find_map(|t| addresses.iter().find(|a| a.type_ == *t))
        .map(|a| a.address.as_str())
        .ok_or_else(|| format!("Node {name} has no InternalIP or Hostname address"))?;
    let port = status
        .daemon_endpoints
        .as_ref()
        .and_then(|d| d.kubelet_endpoint.as_ref())
        .map(|e| e.port)
        .filter(|p| *p > 0)
        .ok_or_else(|| format!("Node {name} has no kubelet port"))?;
    let host = match address.parse::<std::net::Ipv6Addr>() {
        Ok(_) => format!("[{address}]"),
        Err(_) => address.to_string(),
    };
    Ok(format!("https://{host}:{port}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(addresses: serde_json::Value, port: i32) -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1"},
            "status": {
                "addresses": addresses,
                "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
            }
        }))
        .unwrap()
    }

    #[test]
    fn the_internal_ip_and_the_kubelet_port() {
        let n = node(
            serde_json::json!([
                {"type": "Hostname", "address": "n1"},
                {"type": "InternalIP", "address": "10.0.0.7"},
            ]),
            10250,
        );
        assert_eq!(endpoint(&n).unwrap(), "https://10.0.0.7:10250");
        let v6 = node(
            serde_json::json!([{"type": "InternalIP", "address": "fd00::7"}]),
            10250,
        );
        assert_eq!(endpoint(&v6).unwrap(), "https://[fd00::7]:10250");
        let by_name = node(
            serde_json::json!([{"type": "Hostname", "address": "n1"}]),
            11000,
        );
        assert_eq!(endpoint(&by_name).unwrap(), "https://n1:11000");
        assert!(endpoint(&node(serde_json::json!([]), 10250)).is_err());
        assert!(
            endpoint(&node(
                serde_json::json!([{"type": "InternalIP", "address": "1.2.3.4"}]),
                0
            ))
            .is_err()
        );
        assert!(endpoint(&Node::default()).is_err());
    }
}
