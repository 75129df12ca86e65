//! When the certificates a topology's members serve expire, for
//! `valkey_operator_certificate_not_after_timestamp_seconds` (see [`crate::shared::figures`]).
//! Read where each reconcile reads the TLS Secrets, kept per topology in an [`ExpiryBook`]
//! until the next read, and put on /metrics at scrape time: the Secrets are not watched, so
//! the scrape cannot read them itself.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

/// When a topology's first certificate expires, and whether the operator renews it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expiry {
    /// notAfter, in Unix seconds.
    pub not_after: i64,
    /// Issued from the operator's own CA, which renews it
    /// ([`crate::shared::issuer::RENEW_BEFORE`]); false: a Secret the user supplies.
    pub managed: bool,
}

/// The earliest notAfter (Unix seconds) of the certificates in `pem`: a served chain stops
/// verifying when any of its links expires. `None` when no certificate is readable.
pub fn not_after(pem: &[u8]) -> Option<i64> {
    CertificateDer::pem_slice_iter(pem)
        .filter_map(Result::ok)
        .filter_map(|der| der_not_after(&der))
        .min()
}

/// The notAfter (Unix seconds) of one DER certificate, if it parses.
pub fn der_not_after(der: &[u8]) -> Option<i64> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    Some(cert.validity().not_after.timestamp())
}

/// The earliest of the members' certificates (`served`) and the CA the operator keeps
/// (`ca`), with `managed`; `None` when nothing is known.
pub fn earliest(
    served: impl IntoIterator<Item = i64>,
    ca: Option<i64>,
    managed: bool,
) -> Option<Expiry> {
    let not_after = served.into_iter().chain(ca).min()?;
    Some(Expiry { not_after, managed })
}

/// A topology: its namespace, kind and name.
pub type TopologyKey = (String, &'static str, String);

/// Each TLS topology's [`Expiry`] as its last TLS read found it; shared by both kinds'
/// reconciles (which write it) and /metrics (which reads it).
#[derive(Clone, Debug, Default)]
pub struct ExpiryBook(Arc<Mutex<BTreeMap<TopologyKey, Expiry>>>);

impl ExpiryBook {
    /// Keeps `expiry` for the topology; `None` (no TLS, or TLS that cannot be used) drops
    /// what was kept.
    pub fn record(&self, namespace: &str, kind: &'static str, name: &str, expiry: Option<Expiry>) {
        let key = (namespace.to_string(), kind, name.to_string());
        let mut book = self.lock();
        match expiry {
            Some(expiry) => book.insert(key, expiry),
            None => book.remove(&key),
        };
    }

    /// A topology that is gone.
    pub fn forget(&self, namespace: &str, kind: &'static str, name: &str) {
        self.record(namespace, kind, name, None);
    }

    /// Every topology's, in order.
    pub fn entries(&self) -> Vec<(TopologyKey, Expiry)> {
        self.lock().iter().map(|(k, v)| (k.clone(), *v)).collect()
    }

    // A panic elsewhere while holding it leaves a whole map: still good to read and write.
    fn lock(&self) -> MutexGuard<'_, BTreeMap<TopologyKey, Expiry>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests;
