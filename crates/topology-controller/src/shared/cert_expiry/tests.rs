use rcgen::{CertificateParams, KeyPair};

use super::*;

/// 2026-12-01T00:00:00Z.
const T: i64 = 1_796_083_200;
const DAY: i64 = 24 * 3600;

/// A self-signed certificate, as PEM, valid until `not_after` (Unix seconds).
fn cert(not_after: i64) -> String {
    let mut params = CertificateParams::new(vec!["orders-0-0".to_string()]).unwrap();
    params.not_before = time::OffsetDateTime::from_unix_timestamp(T - 90 * DAY).unwrap();
    params.not_after = time::OffsetDateTime::from_unix_timestamp(not_after).unwrap();
    let key = KeyPair::generate().unwrap();
    params.self_signed(&key).unwrap().pem()
}

#[test]
fn a_certificates_not_after_is_read_from_its_pem() {
    assert_eq!(not_after(cert(T).as_bytes()), Some(T));
    let der = CertificateDer::from_pem_slice(cert(T + DAY).as_bytes()).unwrap();
    assert_eq!(der_not_after(&der), Some(T + DAY));
}

#[test]
fn a_chain_expires_with_its_first_link() {
    // Leaf first, then an intermediate that expires sooner.
    let chain = format!("{}{}", cert(T + 60 * DAY), cert(T + 10 * DAY));
    assert_eq!(not_after(chain.as_bytes()), Some(T + 10 * DAY));
}

#[test]
fn text_without_a_readable_certificate_has_no_not_after() {
    assert_eq!(not_after(b""), None);
    assert_eq!(not_after(b"not a certificate"), None);
    let garbage = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
    assert_eq!(not_after(garbage.as_bytes()), None);
    assert_eq!(der_not_after(b"\x30\x00"), None);
}

#[test]
fn the_earliest_member_certificate_wins() {
    let served = [T + 80 * DAY, T + 20 * DAY, T + 50 * DAY];
    let ca = Some(T + 3000 * DAY);
    assert_eq!(
        earliest(served, ca, true),
        Some(Expiry {
            not_after: T + 20 * DAY,
            managed: true
        })
    );
}

#[test]
fn a_ca_that_expires_first_wins() {
    assert_eq!(
        earliest([T + 80 * DAY], Some(T + DAY), true),
        Some(Expiry {
            not_after: T + DAY,
            managed: true
        })
    );
    // Before any member has its certificate: the CA alone.
    assert_eq!(earliest([], Some(T), true).map(|e| e.not_after), Some(T));
}

#[test]
fn a_users_secret_is_not_managed_and_nothing_known_is_no_expiry() {
    assert_eq!(
        earliest([T], None, false),
        Some(Expiry {
            not_after: T,
            managed: false
        })
    );
    assert_eq!(earliest([], None, false), None);
}

#[test]
fn the_book_keeps_the_last_read_per_topology_until_dropped() {
    let book = ExpiryBook::default();
    let managed = |not_after| {
        Some(Expiry {
            not_after,
            managed: true,
        })
    };
    book.record("shop", "ValkeyCluster", "orders", managed(T));
    book.record("shop", "ValkeyReplication", "orders", managed(T + DAY));
    book.record("shop", "ValkeyCluster", "orders", managed(T + 2 * DAY));
    let key = |kind| ("shop".to_string(), kind, "orders".to_string());
    assert_eq!(
        book.entries(),
        [
            (key("ValkeyCluster"), managed(T + 2 * DAY).unwrap()),
            (key("ValkeyReplication"), managed(T + DAY).unwrap()),
        ],
        "the latest read wins; kinds of one name are apart"
    );
    book.record("shop", "ValkeyCluster", "orders", None);
    book.forget("shop", "ValkeyReplication", "orders");
    assert_eq!(book.entries(), []);
}
