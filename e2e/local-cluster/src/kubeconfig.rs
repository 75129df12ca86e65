//! kubeconfig files for the cluster's users: client certificates for the control plane and
//! the admin, bearer tokens for the operator's ServiceAccounts.

use std::path::Path;

use serde_json::json;

/// How a kubeconfig user authenticates.
pub enum Credentials<'a> {
    Certificate { cert: &'a Path, key: &'a Path },
    Token(&'a str),
}

/// A single-context kubeconfig for `server`, trusting `ca`.
pub fn render(server: &str, ca: &Path, user: &str, credentials: Credentials<'_>) -> String {
    let user_entry = match credentials {
        Credentials::Certificate { cert, key } => json!({
            "client-certificate": cert,
            "client-key": key,
        }),
        Credentials::Token(token) => json!({ "token": token }),
    };
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": {"server": server, "certificate-authority": ca}}],
        "users": [{"name": user, "user": user_entry}],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": user}}],
        "current-context": "local",
    });
    serde_yaml::to_string(&config).expect("a JSON value serializes to YAML")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn certificate_kubeconfig_loads_with_kube() {
        let yaml = render(
            "https://127.0.0.1:6443",
            Path::new("/pki/ca.crt"),
            "admin",
            Credentials::Certificate {
                cert: Path::new("/pki/admin.crt"),
                key: Path::new("/pki/admin.key"),
            },
        );
        let parsed = kube::config::Kubeconfig::from_yaml(&yaml).unwrap();
        assert_eq!(parsed.current_context.as_deref(), Some("local"));
        let cluster = parsed.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://127.0.0.1:6443"));
        let auth = parsed.auth_infos[0].auth_info.as_ref().unwrap();
        assert_eq!(auth.client_key.as_deref(), Some("/pki/admin.key"));
    }

    #[test]
    fn token_kubeconfig_carries_the_token() {
        let yaml = render(
            "https://127.0.0.1:6443",
            Path::new("/ca.crt"),
            "node-controller",
            Credentials::Token("abc.def"),
        );
        let parsed = kube::config::Kubeconfig::from_yaml(&yaml).unwrap();
        let auth = parsed.auth_infos[0].auth_info.as_ref().unwrap();
        assert!(auth.token.is_some());
        assert_eq!(parsed.auth_infos[0].name, "node-controller");
    }
}
