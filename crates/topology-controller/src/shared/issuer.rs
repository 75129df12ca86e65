//! The CA topology-controller keeps for a topology whose `spec.tls` names no Secret, and
//! the certificates it issues from it: one per member, naming the member's Service (its
//! DNS names and ClusterIP, which is what Valkey announces and clients dial), for server
//! and client use (members present it to each other); and one the operator presents.
//!
//! Pure: what to issue, and whether a certificate a Secret holds must be issued again, is
//! read from the certificate itself, so a restarted controller decides the same. The
//! binary's `member_certs` reads and writes the Secrets.

use std::net::IpAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use x509_parser::extensions::GeneralName;

/// How long the CA is valid. It is replaced (see [`crate::shared::ca_replacement`]) once a third of
/// that is left, or when the topology asks.
pub const CA_LIFETIME: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
/// How long a member's (and the operator's) certificate is valid.
pub const LEAF_LIFETIME: Duration = Duration::from_secs(90 * 24 * 3600);
/// Issued again once less than this is left: a third of its life, as cert-manager does.
pub const RENEW_BEFORE: Duration = Duration::from_secs(30 * 24 * 3600);
/// Valid from a little before issuance, for clocks slightly behind ours.
pub const BACKDATE: Duration = Duration::from_secs(5 * 60);

/// A topology's CA: its certificate (what clients and members trust) and its key.
pub struct Authority {
    pub cert_pem: String,
    pub key_pem: String,
    issuer: Issuer<'static, KeyPair>,
    /// When the CA became valid (seconds since the epoch).
    not_before: i64,
    /// When the CA expires (seconds since the epoch): no certificate outlives it.
    not_after: i64,
}

impl std::fmt::Debug for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Authority(<redacted>)")
    }
}

/// A certificate and its key, as PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct Leaf {
    pub cert_pem: String,
    pub key_pem: String,
}

impl std::fmt::Debug for Leaf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Leaf(<redacted>)")
    }
}

/// A Service's ClusterIP that is not an IP address.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("ClusterIP {address:?}: {source}")]
pub struct BadClusterIp {
    pub address: String,
    pub source: std::net::AddrParseError,
}

/// Why a CA or a certificate could not be made (rcgen's or the time crate's words).
#[derive(Debug, thiserror::Error)]
pub enum IssueError {
    #[error(transparent)]
    Rcgen(#[from] rcgen::Error),
    /// A validity bound past what a certificate can say.
    #[error(transparent)]
    OutOfRange(#[from] time::error::ComponentRange),
    #[error(transparent)]
    TimeFormat(#[from] time::error::Format),
}

/// Why a CA a Secret holds cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    #[error("ca.key: {0}")]
    KeyUnreadable(#[source] rcgen::Error),
    #[error("ca.crt holds no certificate")]
    NoCertificate,
    #[error("ca.crt: {0}")]
    CertificateUnreadable(#[source] x509_parser::nom::Err<x509_parser::error::X509Error>),
    #[error("ca.key is not the key of ca.crt")]
    KeyNotTheCertificates,
    /// rcgen cannot issue from the certificate.
    #[error("ca.crt: {0}")]
    NotAnIssuer(#[source] rcgen::Error),
}

/// The names a certificate is issued for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub common_name: String,
    pub dns: Vec<String>,
    pub ips: Vec<IpAddr>,
}

impl Request {
    /// A member behind Service `service` in `namespace` at `cluster_ip`: every name a
    /// client in the cluster may use for it, and those of the topology's client Services
    /// that may lead to it (`shared`: a group's read-write and read-only Services, say).
    pub fn member(
        service: &str,
        namespace: &str,
        cluster_ip: &str,
        shared: &[String],
    ) -> Result<Self, BadClusterIp> {
        let ip = cluster_ip.parse().map_err(|source| BadClusterIp {
            address: cluster_ip.to_string(),
            source,
        })?;
        let dns = std::iter::once(service)
            .chain(shared.iter().map(String::as_str))
            .flat_map(|s| {
                [
                    s.to_string(),
                    format!("{s}.{namespace}"),
                    format!("{s}.{namespace}.svc"),
                    format!("{s}.{namespace}.svc.cluster.local"),
                ]
            })
            .collect();
        Ok(Self {
            common_name: service.to_string(),
            dns,
            ips: vec![ip],
        })
    }

    /// The certificate the operator presents to `topology`'s members (client use only
    /// matters; server use too, so one check of the Secret fits every certificate).
    pub fn operator(topology: &str) -> Self {
        Self {
            common_name: format!("valkey-operator for {topology}"),
            dns: vec![format!("{topology}-operator.invalid")],
            ips: Vec::new(),
        }
    }
}

impl Authority {
    /// A new CA for `topology` in `namespace`, valid from `now` for [`CA_LIFETIME`]. Its
    /// name carries `now`: while one CA replaces another, members trust both, and
    /// verifiers (OpenSSL's, webpki's) pick a leaf's CA by name.
    pub fn generate(namespace: &str, topology: &str, now: SystemTime) -> Result<Self, IssueError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let made = at(now)?.format(&time::format_description::well_known::Rfc3339)?;
        params.distinguished_name.push(
            DnType::CommonName,
            format!("valkey-operator CA {namespace}/{topology} {made}"),
        );
        params.not_before = at(now.checked_sub(BACKDATE).unwrap_or(now))?;
        params.not_after = at(now + CA_LIFETIME)?;
        let key = KeyPair::generate()?;
        let cert = params.self_signed(&key)?;
        let key_pem = key.serialize_pem();
        Ok(Self {
            cert_pem: cert.pem(),
            key_pem,
            not_before: params.not_before.unix_timestamp(),
            not_after: params.not_after.unix_timestamp(),
            issuer: Issuer::new(params, key),
        })
    }

    /// The CA a Secret holds; refused when the key is not the certificate's.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Self, CaError> {
        let key = KeyPair::from_pem(key_pem).map_err(CaError::KeyUnreadable)?;
        let der = der(cert_pem).ok_or(CaError::NoCertificate)?;
        let (_, cert) =
            x509_parser::parse_x509_certificate(&der).map_err(CaError::CertificateUnreadable)?;
        if cert.public_key().subject_public_key.data.as_ref() != key.public_key_raw() {
            return Err(CaError::KeyNotTheCertificates);
        }
        let not_before = cert.validity().not_before.timestamp();
        let not_after = cert.validity().not_after.timestamp();
        let issuer = Issuer::from_ca_cert_pem(cert_pem, key).map_err(CaError::NotAnIssuer)?;
        Ok(Self {
            cert_pem: cert_pem.to_string(),
            key_pem: key_pem.to_string(),
            issuer,
            not_before,
            not_after,
        })
    }

    /// When the CA became valid (seconds since the epoch).
    pub fn not_before(&self) -> i64 {
        self.not_before
    }

    /// When the CA expires (seconds since the epoch).
    pub fn not_after(&self) -> i64 {
        self.not_after
    }

    /// A certificate for `request`, with a new key, valid from `now` for
    /// [`LEAF_LIFETIME`] (or until the CA expires, if sooner), for server and client
    /// authentication.
    pub fn issue(&self, request: &Request, now: SystemTime) -> Result<Leaf, IssueError> {
        let mut params = CertificateParams::new(request.dns.clone())?;
        params
            .subject_alt_names
            .extend(request.ips.iter().copied().map(SanType::IpAddress));
        params
            .distinguished_name
            .push(DnType::CommonName, request.common_name.clone());
        params.is_ca = IsCa::ExplicitNoCa;
        // ECDSA keys sign; they encipher nothing.
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params.not_before = at(now.checked_sub(BACKDATE).unwrap_or(now))?;
        let until = (now + LEAF_LIFETIME)
            .min(UNIX_EPOCH + Duration::from_secs(self.not_after.max(0) as u64));
        params.not_after = at(until)?;
        params.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// What to do with the certificate a Secret holds for `request` at `now`: keep it,
    /// issue another (why), or refuse it (why): one of another CA means the CA was replaced
    /// under running members, which trust only the one they started with.
    pub fn judge(&self, held: &Held<'_>, request: &Request, now: SystemTime) -> Verdict {
        self.judge_among(held, request, now, &self.cert_pem, None)
    }

    /// [`Self::judge`] while this CA issues and `trusted` (the `ca.crt` a Secret should
    /// hold) may name another: a certificate from `other` (a CA, and why its certificates
    /// are issued again) is issued again rather than refused.
    pub fn judge_among(
        &self,
        held: &Held<'_>,
        request: &Request,
        now: SystemTime,
        trusted: &str,
        other: Option<(&Authority, &str)>,
    ) -> Verdict {
        let Some(cert_pem) = held.cert else {
            return Verdict::Issue("it has none".into());
        };
        let Some(leaf) = der(cert_pem) else {
            return Verdict::Issue("it holds no readable certificate".into());
        };
        let Ok((_, leaf)) = x509_parser::parse_x509_certificate(&leaf) else {
            return Verdict::Issue("its certificate cannot be parsed".into());
        };
        if !self.signed(&leaf) {
            if let Some((other, why)) = other
                && other.signed(&leaf)
            {
                return Verdict::Issue(why.to_string());
            }
            return Verdict::Refuse(ForeignCertificate);
        }
        let key_fits = held
            .key
            .and_then(|k| KeyPair::from_pem(k).ok())
            .is_some_and(|k| {
                k.public_key_raw() == leaf.public_key().subject_public_key.data.as_ref()
            });
        if !key_fits {
            return Verdict::Issue("its key is missing or not its certificate's".into());
        }
        if held.ca != Some(trusted) {
            return Verdict::Issue("its ca.crt is not the CA the topology trusts".into());
        }
        if names(&leaf) != (sorted(&request.dns), sorted(&request.ips)) {
            return Verdict::Issue("its certificate names another address".into());
        }
        let not_after = leaf.validity().not_after.timestamp();
        let left = not_after - unix(now);
        if left < RENEW_BEFORE.as_secs() as i64 && not_after < self.not_after {
            return Verdict::Issue(format!("its certificate expires in {}", days(left)));
        }
        Verdict::Keep
    }

    /// Whether `leaf` was signed by this CA (whose certificate was parsed when it was made
    /// or read).
    fn signed(&self, leaf: &x509_parser::certificate::X509Certificate<'_>) -> bool {
        let Some(ca) = der(&self.cert_pem) else {
            return false;
        };
        x509_parser::parse_x509_certificate(&ca)
            .is_ok_and(|(_, ca)| leaf.verify_signature(Some(ca.public_key())).is_ok())
    }
}

/// What a Secret holds: its certificate, key and CA, as PEM.
#[derive(Clone, Copy, Debug, Default)]
pub struct Held<'a> {
    pub cert: Option<&'a str>,
    pub key: Option<&'a str>,
    pub ca: Option<&'a str>,
}

/// What [`Authority::judge`] decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Keep,
    Issue(String),
    Refuse(ForeignCertificate),
}

/// Why [`Authority::judge`] refuses a certificate: another CA's, which means the CA was
/// replaced under running members.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "its certificate is not from the topology's CA: the CA was replaced, which running \
     members cannot follow (they trust only the CA they started with); put the previous CA \
     back"
)]
pub struct ForeignCertificate;

/// Whose a Secret of a member's certificate name is, by its owner references.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SecretOwner {
    /// The member's (owned by its ValkeyNode's uid): the operator may write it.
    Member,
    /// An earlier ValkeyNode of the same name's, awaiting the garbage collector.
    EarlierMember,
    /// Someone else's: never written over.
    Other,
}

/// Whose a Secret with `owners` is, for member `name` whose ValkeyNode has `uid`.
pub fn member_secret_owner(owners: &[OwnerReference], name: &str, uid: &str) -> SecretOwner {
    if owners.iter().any(|o| o.uid == uid) {
        SecretOwner::Member
    } else if owners
        .iter()
        .any(|o| o.kind == "ValkeyNode" && o.name == name)
    {
        SecretOwner::EarlierMember
    } else {
        SecretOwner::Other
    }
}

/// The DNS names and IPs of `cert`'s subjectAltName, sorted.
fn names(cert: &x509_parser::certificate::X509Certificate<'_>) -> (Vec<String>, Vec<IpAddr>) {
    let mut dns = Vec::new();
    let mut ips = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                GeneralName::DNSName(d) => dns.push(d.to_string()),
                GeneralName::IPAddress(b) => match b.len() {
                    4 => ips.push(IpAddr::from(<[u8; 4]>::try_from(*b).expect("4 bytes"))),
                    16 => ips.push(IpAddr::from(<[u8; 16]>::try_from(*b).expect("16 bytes"))),
                    _ => {}
                },
                _ => {}
            }
        }
    }
    (sorted(&dns), sorted(&ips))
}

fn sorted<T: Clone + Ord>(items: &[T]) -> Vec<T> {
    let mut items = items.to_vec();
    items.sort();
    items
}

/// The first certificate of `pem`, as DER.
fn der(pem: &str) -> Option<Vec<u8>> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .next()?
        .ok()
        .map(|c| c.to_vec())
}

fn at(t: SystemTime) -> Result<time::OffsetDateTime, time::error::ComponentRange> {
    time::OffsetDateTime::from_unix_timestamp(unix(t))
}

pub(crate) fn unix(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

fn days(seconds: i64) -> String {
    match seconds {
        s if s <= 0 => "no time: it has expired".into(),
        s if s < 24 * 3600 => "less than a day".into(),
        s => format!("{} days", s / (24 * 3600)),
    }
}

#[cfg(test)]
mod tests;
