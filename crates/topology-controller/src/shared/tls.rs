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
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;
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

/// Why the Secret the user named cannot give members their TLS files.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error("TLS Secret {secret} does not exist")]
    Missing { secret: String },
    #[error("TLS Secret {secret} has no {key}")]
    NoKey { secret: String, key: &'static str },
}

/// Why members could not use the TLS files (`file` names the Secret's key at fault).
#[derive(Debug, thiserror::Error)]
pub enum FilesError {
    #[error("{file} is not PEM certificates: {source}")]
    NotPem {
        file: &'static str,
        source: rustls::pki_types::pem::Error,
    },
    #[error("{file} holds no certificate")]
    NoCertificate { file: &'static str },
    #[error("{TLS_CA_KEY} is not a usable CA certificate: {0}")]
    UnusableCa(#[source] rustls::Error),
    #[error("{TLS_CA_KEY}: {0}")]
    NoVerifier(#[source] rustls::client::VerifierBuilderError),
    #[error("{TLS_CERT_KEY} cannot be served: {0}")]
    CannotServe(Refusal),
    #[error(
        "{TLS_CERT_KEY} cannot be a client certificate, which members present to each other \
         (the cluster bus requires one): {0}"
    )]
    NotForClients(Refusal),
    #[error("{TLS_KEY_KEY} is not a PEM private key: {0}")]
    KeyNotPem(#[source] rustls::pki_types::pem::Error),
    /// The crypto provider offers no protocol version rustls accepts.
    #[error("{0}")]
    NoProtocolVersion(#[source] rustls::Error),
    #[error("{TLS_CERT_KEY} and {TLS_KEY_KEY} do not go together: {0}")]
    KeyMismatch(#[source] rustls::Error),
}

/// The files in the Secret named `name`, or why members cannot serve it.
pub fn files_in(secret: Option<&Secret>, name: &str) -> Result<TlsFiles, SecretError> {
    let Some(secret) = secret else {
        return Err(SecretError::Missing {
            secret: name.to_string(),
        });
    };
    let data = secret.data.as_ref();
    let key = |k: &'static str| match data.and_then(|d| d.get(k)) {
        Some(v) if !v.0.is_empty() => Ok(v.0.clone()),
        _ => Err(SecretError::NoKey {
            secret: name.to_string(),
            key: k,
        }),
    };
    Ok(TlsFiles {
        ca: key(TLS_CA_KEY)?,
        cert: key(TLS_CERT_KEY)?,
        key: key(TLS_KEY_KEY)?,
    })
}

/// The certificate a member serves when it has loaded `files` (the first of `tls.crt`).
pub fn leaf(files: &TlsFiles) -> Result<CertificateDer<'static>, FilesError> {
    certificates(&files.cert, TLS_CERT_KEY)?
        .into_iter()
        .next()
        .ok_or(FilesError::NoCertificate { file: TLS_CERT_KEY })
}

fn certificates(
    pem: &[u8],
    file: &'static str,
) -> Result<Vec<CertificateDer<'static>>, FilesError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| FilesError::NotPem { file, source })?;
    match certs.is_empty() {
        true => Err(FilesError::NoCertificate { file }),
        false => Ok(certs),
    }
}

/// Who served which certificate, by address, as the handshakes of one [`Client`] saw it:
/// the certificate, or why it was refused.
#[derive(Debug, Default)]
pub struct Served(Mutex<BTreeMap<String, Result<CertificateDer<'static>, Refusal>>>);

impl Served {
    /// The certificate `address` (an IP, as dialled) served at its last handshake.
    pub fn at(&self, address: &str) -> Option<CertificateDer<'static>> {
        self.last(address)?.ok()
    }

    /// Why the certificate `address` served at its last handshake was refused, if it was
    /// (one from another CA, say, after the Secret's CA changed).
    pub fn refusal(&self, address: &str) -> Option<Refusal> {
        self.last(address)?.err()
    }

    fn last(&self, address: &str) -> Option<Result<CertificateDer<'static>, Refusal>> {
        let served = self.0.lock().unwrap_or_else(|e| e.into_inner());
        served.get(address).cloned()
    }

    fn record(&self, server: &ServerName<'_>, seen: Result<CertificateDer<'static>, Refusal>) {
        let address = match server {
            ServerName::IpAddress(ip) => std::net::IpAddr::from(*ip).to_string(),
            other => other.to_str().into_owned(),
        };
        let mut served = self.0.lock().unwrap_or_else(|e| e.into_inner());
        served.insert(address, seen);
    }
}

/// What the operator's connections to a TLS topology's members use.
#[derive(Clone)]
pub struct Client {
    pub config: Arc<ClientConfig>,
    /// What each member served, for telling a member that has not loaded a renewed Secret.
    pub served: Arc<Served>,
    /// The certificate each member serves once it has loaded its current Secret.
    pub wanted: Wanted,
    /// SHA-256 of the three files: long-lived connections made with another are redone.
    pub digest: String,
    /// The replacement of the operator's CA under way, if any: its next step is taken on
    /// what members served to this client.
    pub replacement: Option<crate::shared::ca_replacement::Replacement>,
    #[cfg(test)]
    verifier: Arc<ChainOnly>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("tls::Client")
    }
}

/// The client side of `files`: trusts `ca.crt`, presents `tls.crt` with `tls.key`, and
/// checks servers' chains but not their names. Refused when members could not use the
/// certificate: not issued by `ca.crt`, expired, not allowed for server authentication, or,
/// when members ask each other for client certificates (`client_auth`: the cluster bus
/// always does, data nodes and sentinels unless `authClients` is `Never`), not allowed
/// for client authentication.
pub fn client(files: &TlsFiles, client_auth: bool) -> Result<Client, FilesError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    for ca in certificates(&files.ca, TLS_CA_KEY)? {
        roots.add(ca).map_err(FilesError::UnusableCa)?;
    }
    let roots = Arc::new(roots);
    let chain = WebPkiServerVerifier::builder_with_provider(roots.clone(), provider.clone())
        .build()
        .map_err(FilesError::NoVerifier)?;
    let members = WebPkiClientVerifier::builder_with_provider(roots, provider.clone())
        .build()
        .map_err(FilesError::NoVerifier)?;
    usable(
        &certificates(&files.cert, TLS_CERT_KEY)?,
        &chain,
        client_auth.then_some(&members),
    )?;
    let served = Arc::new(Served::default());
    let verifier = Arc::new(ChainOnly {
        chain,
        served: served.clone(),
    });
    let key = PrivateKeyDer::from_pem_slice(&files.key).map_err(FilesError::KeyNotPem)?;
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(FilesError::NoProtocolVersion)?
        .dangerous()
        .with_custom_certificate_verifier(verifier.clone())
        .with_client_auth_cert(certificates(&files.cert, TLS_CERT_KEY)?, key)
        .map_err(FilesError::KeyMismatch)?;
    Ok(Client {
        config: Arc::new(config),
        served,
        wanted: Wanted::Shared(leaf(files)?),
        digest: crate::shared::acl::sha256_hex(
            [files.ca.as_slice(), &files.cert, &files.key].concat(),
        ),
        replacement: None,
        #[cfg(test)]
        verifier,
    })
}

/// Whether members can serve `certs` (leaf first) and present it to each other, now.
fn usable(
    certs: &[CertificateDer<'static>],
    servers: &WebPkiServerVerifier,
    clients: Option<&Arc<dyn ClientCertVerifier>>,
) -> Result<(), FilesError> {
    let Some((leaf, intermediates)) = certs.split_first() else {
        return Err(FilesError::NoCertificate { file: TLS_CERT_KEY });
    };
    let now = UnixTime::now();
    // Any name: names are not checked (see ChainOnly).
    let name = ServerName::try_from("member.invalid").expect("a DNS name");
    match servers.verify_server_cert(leaf, intermediates, &name, &[], now) {
        Ok(_)
        | Err(rustls::Error::InvalidCertificate(CertificateError::NotValidForName))
        | Err(rustls::Error::InvalidCertificate(CertificateError::NotValidForNameContext {
            ..
        })) => {}
        Err(e) => return Err(FilesError::CannotServe(Refusal::of(e))),
    }
    let Some(clients) = clients else {
        return Ok(());
    };
    clients
        .verify_client_cert(leaf, intermediates, now)
        .map(drop)
        .map_err(|e| FilesError::NotForClients(Refusal::of(e)))
}

/// Why a certificate was refused, in words that stay the same from one look to the next
/// (rustls' own text for an expired certificate carries the current time, and would make
/// every Event and status message new).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Refusal {
    #[error("it has expired")]
    Expired,
    #[error("it is not valid yet")]
    NotValidYet,
    #[error("it is not issued by a CA in ca.crt")]
    UnknownIssuer,
    #[error("its extended key usage does not allow this use")]
    WrongPurpose,
    /// webpki picks the CA by name: a CA of the same name with another key (as when a CA
    /// is renewed) is this, not an unknown issuer.
    #[error(
        "it is not signed by a CA in ca.crt (one of the same name has another key, as \
         after a CA is renewed)"
    )]
    SignedByAnotherKey,
    /// Another certificate problem, by rustls' name for it (its text may carry the time).
    #[error("{0:?}")]
    Certificate(CertificateError),
    /// Not a problem of the certificate itself, in rustls' words.
    #[error("{0}")]
    Rustls(rustls::Error),
}

impl Refusal {
    fn of(e: rustls::Error) -> Self {
        use CertificateError::*;
        let rustls::Error::InvalidCertificate(e) = e else {
            return Self::Rustls(e);
        };
        match e {
            Expired | ExpiredContext { .. } => Self::Expired,
            NotValidYet | NotValidYetContext { .. } => Self::NotValidYet,
            UnknownIssuer => Self::UnknownIssuer,
            InvalidPurpose | InvalidPurposeContext { .. } => Self::WrongPurpose,
            BadSignature => Self::SignedByAnotherKey,
            other => Self::Certificate(other),
        }
    }
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
        let seen = match &verified {
            Ok(_) => Ok(end_entity.clone().into_owned()),
            Err(e) => Err(Refusal::of(e.clone())),
        };
        self.served.record(server_name, seen);
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

/// The certificate a member serves once it has loaded its current Secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wanted {
    /// Every member serves the one Secret the user named.
    Shared(CertificateDer<'static>),
    /// Each member (by name) serves its own, issued by the operator; a member without one
    /// yet is not judged.
    PerMember(BTreeMap<String, CertificateDer<'static>>),
}

impl Wanted {
    /// What `member` should serve, if known.
    pub fn of(&self, member: &str) -> Option<&CertificateDer<'static>> {
        match self {
            Self::Shared(cert) => Some(cert),
            Self::PerMember(certs) => certs.get(member),
        }
    }
}

/// Whether `member`, dialled at `address`, served the certificate it should at its last
/// handshake (`None`: not reached, or nothing known to want).
pub fn serves_wanted(client: &Client, member: &str, address: &str) -> Option<bool> {
    let served = client.served.at(address)?;
    Some(&served == client.wanted.of(member)?)
}

/// The members (by name) whose last handshake served something other than the wanted
/// certificate: they have not loaded the current Secret. Members not reached are left out.
pub fn stale<'a>(
    client: &Client,
    members: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Vec<&'a str> {
    members
        .into_iter()
        .filter(|(name, address)| serves_wanted(client, name, address) == Some(false))
        .map(|(name, _)| name)
        .collect()
}

/// A sentinel as [`sentinel_to_restart`] sees it.
#[derive(Clone, Copy, Debug)]
pub struct SentinelState<'a> {
    pub name: &'a str,
    pub address: Option<&'a str>,
    /// Its pod is ready, it answered the operator at this reconcile and monitors the group.
    pub monitoring: bool,
    /// It reports a failover under way.
    pub failing_over: bool,
    /// It reloads changed certificate files by itself (Valkey 9.1 or later, started with
    /// `tls-auto-reload-interval`: see [`reloads_itself`]), so it is restarted for them only
    /// once [`SELF_RELOAD_GRACE`] has run.
    pub reloads_itself: bool,
}

/// Whether a sentinel reloads its certificate by itself: it runs Valkey 9.1 or later
/// (`version`, as it answered) and its pod says its start gave it the reload interval
/// (`pod_annotation`: [`crd_types::names::annotations::TLS_AUTO_RELOAD_SECONDS`]). Either
/// alone is not enough: 8.x has no reload, and a 9.1 pod from an older template was not
/// given it.
pub fn reloads_itself(version: Option<&str>, pod_annotation: Option<&str>) -> bool {
    can_reload(version) && pod_annotation.is_some_and(|s| s.parse::<u32>().is_ok_and(|s| s > 0))
}

/// Whether a server of `version` can reload its certificate by itself (9.1 and later; 9.0
/// was not measured).
pub fn can_reload(version: Option<&str>) -> bool {
    use crd_types::versions::Version;
    version
        .and_then(Version::parse)
        .is_some_and(|v| v >= Version::new(9, 1))
}

/// How long a sentinel that reloads by itself is given to serve a renewed certificate,
/// counted from the certificate's notBefore: the kubelet's update of the files (about a
/// minute) and the reload interval (10 s), with room to spare, after the backdating of
/// issuers (the operator's own: 5 minutes). Past it, the sentinel is restarted like one
/// that cannot reload: its start may not have given it the interval after all, or it
/// refused the files. A certificate backdated further (ACME issuers: up to an hour) is
/// restarted for at once, as on 8.x.
pub const SELF_RELOAD_GRACE: std::time::Duration = std::time::Duration::from_secs(8 * 60);

/// When `cert` became valid (Unix seconds), if it parses.
fn not_before(cert: &CertificateDer<'_>) -> Option<i64> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert).ok()?;
    Some(parsed.validity().not_before.timestamp())
}

/// Whether sentinel `s` is left to load its wanted certificate by itself at `now` (Unix
/// seconds): it reloads by itself and that certificate is younger than the grace.
fn left_to_reload(client: &Client, s: &SentinelState<'_>, now: i64) -> bool {
    let grace = i64::try_from(SELF_RELOAD_GRACE.as_secs()).unwrap_or(i64::MAX);
    s.reloads_itself
        && client
            .wanted
            .of(s.name)
            .and_then(not_before)
            .is_some_and(|since| now < since.saturating_add(grace))
}

/// The sentinel to restart so that it loads the Secret's certificate, if one may go now.
/// Sentinels read their TLS files only at start (no `CONFIG SET`; see docs/tls-design.md),
/// so one still serving another certificate is restarted, one at a time, and only when
/// nothing else is going on: the group is Ready and idle at this reconcile (`at_rest`: no
/// step, no member unwell, rolling or leaving, every sentinel's view exact), every sentinel
/// monitors it and none fails over, and every data node (`data`: name, address) already
/// serves the Secret's certificate (so a sentinel restarted with a new CA is not refused
/// by data nodes that still trust only the old one). A sentinel that reloads by itself
/// ([`SentinelState::reloads_itself`]) is left to do so until [`SELF_RELOAD_GRACE`] after
/// the wanted certificate's notBefore (`now`: Unix seconds): it serves the new certificate
/// within its interval of the kubelet updating the files.
pub fn sentinel_to_restart<'a>(
    client: &Client,
    sentinels: &[SentinelState<'a>],
    data: &[(&str, &str)],
    at_rest: bool,
    now: i64,
) -> Option<&'a str> {
    if !at_rest || sentinels.iter().any(|s| !s.monitoring || s.failing_over) {
        return None;
    }
    let data_serve_it = data
        .iter()
        .all(|(name, address)| serves_wanted(client, name, address) == Some(true));
    if !data_serve_it {
        return None;
    }
    let reached = sentinels
        .iter()
        .filter(|s| !left_to_reload(client, s, now))
        .filter_map(|s| Some((s.name, s.address?)));
    stale(client, reached).into_iter().min()
}

#[cfg(test)]
mod tests;
