//! The operator's side of `spec.tls`: how it connects to members that serve the Secret the
//! user named, and how it tells whether a member still serves an older certificate.
//!
//! Members present the Secret's certificate to each other and to the operator; the operator
//! presents it too (a member may require client certificates, and the cluster bus always
//! does). The server's certificate is checked like Valkey checks its peers: its chain must
//! lead to `ca.crt`, its names are not looked at. The operator dials ClusterIPs and pod IPs
//! that a certificate issued before the Service existed cannot name.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crd_types::template::{TLS_CA_KEY, TLS_CERT_KEY, TLS_KEY_KEY};
use k8s_openapi::api::core::v1::Secret;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};

/// The Secret's three keys, as PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub ca: Vec<u8>,
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
}

impl std::fmt::Debug for TlsFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsFiles(<redacted>)")
    }
}

/// The files in the Secret named `name`, or why members cannot serve it.
pub fn files_in(secret: Option<&Secret>, name: &str) -> Result<TlsFiles, String> {
    let Some(secret) = secret else {
        return Err(format!("TLS Secret {name} does not exist"));
    };
    let data = secret.data.as_ref();
    let key = |k: &str| -> Result<Vec<u8>, String> {
        match data.and_then(|d| d.get(k)) {
            Some(v) if !v.0.is_empty() => Ok(v.0.clone()),
            _ => Err(format!("TLS Secret {name} has no {k}")),
        }
    };
    Ok(TlsFiles {
        ca: key(TLS_CA_KEY)?,
        cert: key(TLS_CERT_KEY)?,
        key: key(TLS_KEY_KEY)?,
    })
}

/// The certificate a member serves when it has loaded `files` (the first of `tls.crt`).
pub fn leaf(files: &TlsFiles) -> Result<CertificateDer<'static>, String> {
    certificates(&files.cert, TLS_CERT_KEY)?
        .into_iter()
        .next()
        .ok_or_else(|| format!("{TLS_CERT_KEY} holds no certificate"))
}

fn certificates(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{what} is not PEM certificates: {e}"))?;
    match certs.is_empty() {
        true => Err(format!("{what} holds no certificate")),
        false => Ok(certs),
    }
}

/// Who served which certificate, by address, as the handshakes of one [`Client`] saw it.
#[derive(Debug, Default)]
pub struct Served(Mutex<BTreeMap<String, CertificateDer<'static>>>);

impl Served {
    /// The certificate `address` (an IP, as dialled) served at its last handshake.
    pub fn at(&self, address: &str) -> Option<CertificateDer<'static>> {
        let served = self.0.lock().unwrap_or_else(|e| e.into_inner());
        served.get(address).cloned()
    }

    fn record(&self, server: &ServerName<'_>, cert: &CertificateDer<'_>) {
        let address = match server {
            ServerName::IpAddress(ip) => std::net::IpAddr::from(*ip).to_string(),
            other => other.to_str().into_owned(),
        };
        let mut served = self.0.lock().unwrap_or_else(|e| e.into_inner());
        served.insert(address, cert.clone().into_owned());
    }
}

/// What the operator's connections to a TLS topology's members use.
#[derive(Clone)]
pub struct Client {
    pub config: Arc<ClientConfig>,
    /// What each member served, for telling a member that has not loaded a renewed Secret.
    pub served: Arc<Served>,
    /// The certificate members serve once they have loaded the current Secret.
    pub wanted: CertificateDer<'static>,
    #[cfg(test)]
    verifier: Arc<ChainOnly>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("tls::Client")
    }
}

/// The client side of `files`: trusts `ca.crt`, presents `tls.crt` with `tls.key`, and
/// checks servers' chains but not their names.
pub fn client(files: &TlsFiles) -> Result<Client, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    for ca in certificates(&files.ca, TLS_CA_KEY)? {
        roots
            .add(ca)
            .map_err(|e| format!("{TLS_CA_KEY} is not a usable CA certificate: {e}"))?;
    }
    let chain = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| format!("{TLS_CA_KEY}: {e}"))?;
    let served = Arc::new(Served::default());
    let verifier = Arc::new(ChainOnly {
        chain,
        served: served.clone(),
    });
    let key = PrivateKeyDer::from_pem_slice(&files.key)
        .map_err(|e| format!("{TLS_KEY_KEY} is not a PEM private key: {e}"))?;
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(verifier.clone())
        .with_client_auth_cert(certificates(&files.cert, TLS_CERT_KEY)?, key)
        .map_err(|e| format!("{TLS_CERT_KEY} and {TLS_KEY_KEY} do not go together: {e}"))?;
    Ok(Client {
        config: Arc::new(config),
        served,
        wanted: leaf(files)?,
        #[cfg(test)]
        verifier,
    })
}

/// Valkey's own check: the chain must lead to the CA; a name that does not match is fine.
#[derive(Debug)]
struct ChainOnly {
    chain: Arc<WebPkiServerVerifier>,
    served: Arc<Served>,
}

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let verified = self.chain.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        );
        // webpki checks the name last, after the chain, its validity and its usage.
        let verified = match verified {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        };
        if verified.is_ok() {
            self.served.record(server_name, end_entity);
        }
        verified
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.chain.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.chain.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.chain.supported_verify_schemes()
    }
}

/// The members (by name) whose last handshake served something other than the wanted
/// certificate: they have not loaded the current Secret. Members not reached are left out.
pub fn stale<'a>(
    client: &Client,
    members: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Vec<&'a str> {
    members
        .into_iter()
        .filter(|(_, address)| {
            client
                .served
                .at(address)
                .is_some_and(|served| served != client.wanted)
        })
        .map(|(name, _)| name)
        .collect()
}

#[cfg(test)]
mod tests;
