//! Certificates the operator issues (`spec.tls` without a Secret), as both kinds' tests
//! check them: the CA it publishes and keeps, and each member serving its own certificate
//! for the names it must answer to. Which names and ports a member has stays with each kind.

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use crd_types::template::{TlsAuthClients, TopologyTls};

use super::Progress;
use crate::valkey_tls::{ClientTls, secret_certificate, secret_text};

/// TLS with operator-issued certificates, clients authenticated as `auth_clients` says.
pub fn operator_issued(auth_clients: TlsAuthClients) -> TopologyTls {
    TopologyTls {
        secret_name: None,
        auth_clients,
        plain_text_clients: false,
        ca_overlap_seconds: None,
    }
}

/// The CA topology `name` publishes: `<name>-ca` holds its certificate alone, and
/// `<name>-ca-key` the same certificate with its key.
pub async fn assert_ca_published(secrets: &Api<Secret>, name: &str) -> String {
    let public = format!("{name}-ca");
    let ca = secret_text(secrets, &public, "ca.crt").await.unwrap();
    let held = secrets.get(&public).await.unwrap();
    let keys: Vec<String> = held.data.unwrap_or_default().into_keys().collect();
    assert_eq!(keys, ["ca.crt"], "{public} holds the certificate alone");
    let private = format!("{name}-ca-key");
    assert_eq!(secret_text(secrets, &private, "ca.crt").await.unwrap(), ca);
    let key = secret_text(secrets, &private, "ca.key").await.unwrap();
    assert!(!key.is_empty(), "{private} holds the CA's key");
    ca
}

/// Member `name` at `ip`: its Secret `<name>-tls` carries `ca`, and it serves that Secret's
/// certificate on `port` to a client checking each of `names`. Returns the certificate.
pub async fn assert_serves_own(
    secrets: &Api<Secret>,
    tls: &ClientTls,
    (name, ip): (&str, &str),
    ca: &str,
    port: u16,
    names: &[String],
) -> CertificateDer<'static> {
    let secret = format!("{name}-tls");
    let member_ca = secret_text(secrets, &secret, "ca.crt").await.unwrap();
    assert_eq!(member_ca, ca, "{secret} carries the topology's CA");
    let own = secret_certificate(secrets, &secret).await.unwrap();
    for checked in names {
        let served = tls.served_as(ip, port, checked).await;
        let served = served.unwrap_or_else(|e| panic!("{name}:{port} as {checked}: {e:#}"));
        assert_eq!(served, own, "{name}:{port} serves its Secret's");
    }
    own
}

/// A client checking `other` (a name the member at `ip` must not answer to) is refused.
pub async fn assert_not_named(tls: &ClientTls, ip: &str, port: u16, other: &str) {
    let refused = tls.served_as(ip, port, other).await;
    let refused = format!("{:#}", refused.expect_err("a name it was not issued for"));
    assert!(
        refused.contains("not valid for name"),
        "{ip}:{port} as {other}: {refused}"
    );
}

/// The certificate in Secret `secret` once it was issued again: the Secret exists and its
/// `tls.crt` is no longer `before`.
pub async fn reissued(
    secrets: &Api<Secret>,
    secret: &str,
    before: &str,
) -> anyhow::Result<Progress<CertificateDer<'static>>> {
    let Some(now) = secrets.get_opt(secret).await? else {
        return Ok(Err(format!("{secret} not issued again yet")));
    };
    let pem = now.data.unwrap_or_default();
    let pem = pem
        .get("tls.crt")
        .map(|v| String::from_utf8_lossy(&v.0).into_owned());
    Ok(match pem {
        Some(pem) if pem != before => {
            Ok(CertificateDer::from_pem_slice(pem.as_bytes())?.into_owned())
        }
        _ => Err(format!("{secret} still holds the old certificate")),
    })
}
