//! TLS for tests of topologies with `spec.tls`: a CA and member certificates made with
//! rcgen, put in a Secret in cert-manager's layout, and the client side the tests use
//! (valkey-cli's flags, a fred config, the certificate a member serves).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use fred::types::config::TlsConfig;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
pub use rcgen::ExtendedKeyUsagePurpose;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// The one name every member certificate holds; clients check it (`tls_server_name`), as
/// they would check a Service's DNS name. Valkey itself checks no names.
pub const SERVER_NAME: &str = "members.valkey.test";

/// A CA that issues member certificates.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// One issued certificate, its key and the CA, as PEM.
#[derive(Clone)]
pub struct Issued {
    pub ca: String,
    pub cert: String,
    pub key: String,
}

impl TestCa {
    pub fn new() -> Result<Self> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "valkey-operator e2e CA");
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate()?)?;
        Ok(Self { issuer })
    }

    /// A member certificate for [`SERVER_NAME`] (no IP: members are dialled at addresses
    /// unknown when it is issued), for server and client authentication, each time with a
    /// new key.
    pub fn issue(&self) -> Result<Issued> {
        self.issue_for(vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ])
    }

    /// [`TestCa::issue`], with these extended key usages only.
    pub fn issue_for(&self, usages: Vec<ExtendedKeyUsagePurpose>) -> Result<Issued> {
        let mut params = CertificateParams::new(vec![SERVER_NAME.to_string()])?;
        params.extended_key_usages = usages;
        // As cert-manager (Go) writes them: OpenSSL tells CAs of the same name apart by it.
        params.use_authority_key_identifier_extension = true;
        // Valid from now, as an issuer dates a renewal (rcgen's default is 1975):
        // topology-controller counts a sentinel's reload grace from it.
        params.not_before = time::OffsetDateTime::now_utc();
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(Issued {
            ca: self.issuer.pem(),
            cert: cert.pem(),
            key: key.serialize_pem(),
        })
    }
}

impl Issued {
    /// The Secret members mount, in cert-manager's layout.
    pub fn secret(&self, name: &str) -> Secret {
        let data = [
            ("ca.crt", &self.ca),
            ("tls.crt", &self.cert),
            ("tls.key", &self.key),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
        .collect::<BTreeMap<_, _>>();
        Secret {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            type_: Some("kubernetes.io/tls".into()),
            data: Some(data),
            ..Default::default()
        }
    }

    /// The certificate, as DER: what a member serves once it loaded this one.
    pub fn der(&self) -> Result<CertificateDer<'static>> {
        CertificateDer::from_pem_slice(self.cert.as_bytes()).context("tls.crt")
    }
}

/// How a test client reaches TLS members: files for valkey-cli, a rustls config for fred
/// and for looking at served certificates.
#[derive(Clone)]
pub struct ClientTls {
    dir: PathBuf,
    config: Arc<rustls::ClientConfig>,
    /// The same without a client certificate.
    anonymous: Arc<rustls::ClientConfig>,
    /// The name clients check in the certificates served ([`SERVER_NAME`] unless set).
    server_name: String,
}

/// What a server did with a TLS connection within a few seconds of the handshake.
#[derive(Debug, PartialEq, Eq)]
pub enum Kept {
    /// It stayed open, silent (the cluster bus waits for the peer to speak first).
    Open,
    /// It was closed or refused, with what the client saw.
    Closed(String),
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ClientTls({})", self.dir.display())
    }
}

impl ClientTls {
    /// Writes `issued` under `dir` (created) and builds the client config: trusts the CA,
    /// presents the certificate, checks [`SERVER_NAME`].
    pub fn new(issued: &Issued, dir: PathBuf) -> Result<Self> {
        std::fs::create_dir_all(&dir)?;
        for (file, pem) in [
            ("ca.crt", &issued.ca),
            ("tls.crt", &issued.cert),
            ("tls.key", &issued.key),
        ] {
            std::fs::write(dir.join(file), pem)?;
        }
        let mut roots = rustls::RootCertStore::empty();
        // Every CA of `ca.crt`: while a CA changes it holds the old and the new one.
        for ca in CertificateDer::pem_slice_iter(issued.ca.as_bytes()) {
            roots.add(ca?)?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots);
        let anonymous = builder.clone().with_no_client_auth();
        let config = builder.with_client_auth_cert(
            vec![issued.der()?],
            PrivateKeyDer::from_pem_slice(issued.key.as_bytes())?,
        )?;
        Ok(Self {
            dir,
            config: Arc::new(config),
            anonymous: Arc::new(anonymous),
            server_name: SERVER_NAME.to_string(),
        })
    }

    /// Checks `name` in the certificates served instead of [`SERVER_NAME`].
    pub fn with_server_name(self, name: &str) -> Self {
        Self {
            server_name: name.to_string(),
            ..self
        }
    }

    /// The name checked in the certificates served.
    pub fn server_name(&self) -> &str {
        &self.server_name
    }

    /// valkey-cli's flags.
    pub fn cli_args(&self) -> Vec<String> {
        let file = |f: &str| self.dir.join(f).display().to_string();
        vec![
            "--tls".into(),
            "--cacert".into(),
            file("ca.crt"),
            "--cert".into(),
            file("tls.crt"),
            "--key".into(),
            file("tls.key"),
        ]
    }

    /// fred's TLS config.
    pub fn fred(&self) -> TlsConfig {
        fred::types::config::TlsConnector::from(rustls::ClientConfig::clone(&self.config)).into()
    }

    /// Connects to `ip:port` with (`certificate`) or without a client certificate, then
    /// reads for 3 s: whether the server kept the connection. With TLS 1.3 a server refuses
    /// a missing client certificate after the client's handshake is done, so the refusal
    /// shows on that read.
    pub async fn kept(&self, ip: &str, port: u16, certificate: bool) -> Result<Kept> {
        use tokio::io::AsyncReadExt;
        let config = match certificate {
            true => self.config.clone(),
            false => self.anonymous.clone(),
        };
        let socket = tokio::net::TcpStream::connect((ip, port)).await?;
        let name = ServerName::try_from(self.server_name.clone())?;
        let mut tls = match tokio_rustls::TlsConnector::from(config)
            .connect(name, socket)
            .await
        {
            Ok(tls) => tls,
            Err(e) => return Ok(Kept::Closed(format!("handshake: {e}"))),
        };
        let mut buffer = [0u8; 64];
        let read =
            tokio::time::timeout(std::time::Duration::from_secs(3), tls.read(&mut buffer)).await;
        Ok(match read {
            Err(_) => Kept::Open,
            Ok(Ok(0)) => Kept::Closed("closed".into()),
            Ok(Ok(n)) => Kept::Closed(format!("{n} bytes unasked")),
            Ok(Err(e)) => Kept::Closed(e.to_string()),
        })
    }

    /// The certificate `ip:port` serves now (a fresh handshake), checked for the client's
    /// server name.
    pub async fn served(&self, ip: &str, port: u16) -> Result<CertificateDer<'static>> {
        self.served_as(ip, port, &self.server_name.clone()).await
    }

    /// [`ClientTls::served`], checked for `name` (a DNS name or an IP address).
    pub async fn served_as(
        &self,
        ip: &str,
        port: u16,
        name: &str,
    ) -> Result<CertificateDer<'static>> {
        let connector = tokio_rustls::TlsConnector::from(self.config.clone());
        let socket = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            tokio::net::TcpStream::connect((ip, port)),
        )
        .await
        .context("connecting timed out")??;
        let name = ServerName::try_from(name.to_string())?;
        let tls = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            connector.connect(name, socket),
        )
        .await
        .context("the handshake timed out")??;
        let served = tls
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|c| c.first())
            .context("no certificate served")?;
        Ok(served.clone().into_owned())
    }
}

/// A CA, and Secret `name` holding its first member certificate.
pub async fn create_secret(secrets: &Api<Secret>, name: &str) -> Result<(TestCa, Issued)> {
    let ca = TestCa::new()?;
    let first = ca.issue()?;
    secrets
        .create(&PostParams::default(), &first.secret(name))
        .await?;
    Ok((ca, first))
}

/// Replaces Secret `name`'s content with a new certificate from `ca` (a renewal).
pub async fn renew_secret(secrets: &Api<Secret>, name: &str, ca: &TestCa) -> Result<Issued> {
    replace_secret(secrets, name, ca.issue()?).await
}

/// Replaces Secret `name`'s content with `renewed`.
pub async fn replace_secret(secrets: &Api<Secret>, name: &str, renewed: Issued) -> Result<Issued> {
    let mut secret = renewed.secret(name);
    secret.metadata.resource_version = secrets.get(name).await?.metadata.resource_version;
    secrets
        .replace(name, &PostParams::default(), &secret)
        .await?;
    Ok(renewed)
}

/// The client side of Secret `name` (a topology's own certificate), its files in a
/// directory of the temporary directory named after `owner`.
pub async fn client_of_secret(secrets: &Api<Secret>, name: &str, owner: &str) -> Result<ClientTls> {
    let data = secrets.get(name).await?.data.unwrap_or_default();
    let key = |k: &str| -> Result<String> {
        let value = data
            .get(k)
            .with_context(|| format!("Secret {name} has no {k}"))?;
        Ok(String::from_utf8(value.0.clone())?)
    };
    let issued = Issued {
        ca: key("ca.crt")?,
        cert: key("tls.crt")?,
        key: key("tls.key")?,
    };
    let dir = std::env::temp_dir().join(format!("valkey-e2e-tls-{}-{owner}", std::process::id()));
    ClientTls::new(&issued, dir)
}

/// Key `key` of Secret `name`, as text.
pub async fn secret_text(secrets: &Api<Secret>, name: &str, key: &str) -> Result<String> {
    let data = secrets.get(name).await?.data.unwrap_or_default();
    let value = data
        .get(key)
        .with_context(|| format!("Secret {name} has no {key}"))?;
    Ok(String::from_utf8(value.0.clone())?)
}

/// The certificate (`tls.crt`) of Secret `name`, as DER: what a member mounting it serves
/// once it has loaded it.
pub async fn secret_certificate(
    secrets: &Api<Secret>,
    name: &str,
) -> Result<CertificateDer<'static>> {
    let pem = secret_text(secrets, name, "tls.crt").await?;
    Ok(CertificateDer::from_pem_slice(pem.as_bytes())
        .context("tls.crt")?
        .into_owned())
}

/// How many certificates `pem` holds (a bundle of CAs holds several).
pub fn certificate_count(pem: &str) -> usize {
    CertificateDer::pem_slice_iter(pem.as_bytes()).count()
}

/// `ca.crt` of Secret `name` once it holds two CAs (the previous and the next, while the
/// operator replaces a topology's CA), or what it holds yet.
pub async fn both_cas(secrets: &Api<Secret>, name: &str) -> Result<Result<String, String>> {
    let ca = secret_text(secrets, name, "ca.crt").await?;
    Ok(match certificate_count(&ca) {
        2 => Ok(ca),
        n => Err(format!("{name} holds {n} CA(s)")),
    })
}

/// The members (by name) whose Secret `<member>-tls` holds another `ca.crt` than `ca`.
pub async fn members_without_ca<'a>(
    secrets: &Api<Secret>,
    members: impl IntoIterator<Item = &'a str>,
    ca: &str,
) -> Result<Vec<String>> {
    let mut behind = Vec::new();
    for member in members {
        if secret_text(secrets, &format!("{member}-tls"), "ca.crt").await? != ca {
            behind.push(member.to_string());
        }
    }
    Ok(behind)
}

/// Why `member`, at `ip`, does not serve its own Secret's (`<member>-tls`) certificate on
/// each of `ports` with `ca` as that Secret's `ca.crt`, as `tls` sees it (checking `ip`):
/// nothing when it does.
pub async fn not_serving_own(
    secrets: &Api<Secret>,
    tls: &ClientTls,
    (member, ip): (&str, &str),
    ports: &[u16],
    ca: &str,
) -> Result<Vec<String>> {
    let secret = format!("{member}-tls");
    if secret_text(secrets, &secret, "ca.crt").await? != ca {
        return Ok(vec![format!("{secret} holds another ca.crt")]);
    }
    let own = secret_certificate(secrets, &secret).await?;
    let mut wrong = Vec::new();
    for &port in ports {
        match tls.served_as(ip, port, ip).await {
            Ok(served) if served == own => {}
            Ok(_) => wrong.push(format!("{member}:{port} serves another")),
            Err(e) => wrong.push(format!("{member}:{port}: {e:#}")),
        }
    }
    Ok(wrong)
}
