use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};

use super::*;
use crate::shared::tls::{self, TlsFiles};

const DAY: Duration = Duration::from_secs(24 * 3600);

fn now() -> SystemTime {
    // 2026-12-01T00:00:00Z: fixed, so expiry arithmetic is the same on every run.
    UNIX_EPOCH + Duration::from_secs(1_796_083_200)
}

fn authority() -> Authority {
    Authority::generate("shop", "orders", now()).unwrap()
}

fn member() -> Request {
    Request::member("orders-0-0", "shop", "10.96.0.17", &[]).unwrap()
}

/// What a member's Secret holds after `leaf` was written to it.
fn held<'a>(ca: &'a Authority, leaf: &'a Leaf) -> Held<'a> {
    Held {
        cert: Some(&leaf.cert_pem),
        key: Some(&leaf.key_pem),
        ca: Some(&ca.cert_pem),
    }
}

fn issue(why: &str) -> Verdict {
    Verdict::Issue(why.to_string())
}

fn files(ca: &Authority, leaf: &Leaf) -> TlsFiles {
    TlsFiles {
        ca: ca.cert_pem.clone().into_bytes(),
        cert: leaf.cert_pem.clone().into_bytes(),
        key: leaf.key_pem.clone().into_bytes(),
    }
}

/// A client that checks names, as applications (and fred, and redis_exporter) do.
fn verify(ca: &Authority, leaf: &Leaf, name: &str, at: SystemTime) -> Result<(), rustls::Error> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca.cert_pem.as_bytes()).unwrap())
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .unwrap();
    let cert = CertificateDer::from_pem_slice(leaf.cert_pem.as_bytes()).unwrap();
    let name = ServerName::try_from(name.to_string()).unwrap();
    let at = UnixTime::since_unix_epoch(at.duration_since(UNIX_EPOCH).unwrap());
    verifier
        .verify_server_cert(&cert, &[], &name, &[], at)
        .map(drop)
}

#[test]
fn a_member_certificate_names_its_service_and_address() {
    let ca = authority();
    let leaf = ca.issue(&member(), now()).unwrap();
    for name in [
        "orders-0-0",
        "orders-0-0.shop",
        "orders-0-0.shop.svc",
        "orders-0-0.shop.svc.cluster.local",
        "10.96.0.17",
    ] {
        verify(&ca, &leaf, name, now()).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    for other in ["orders-0-1.shop.svc", "10.96.0.18"] {
        assert!(
            verify(&ca, &leaf, other, now()).is_err(),
            "{other} accepted"
        );
    }
}

#[test]
fn a_member_certificate_serves_and_presents() {
    // The operator's own check of a Secret (server use, and client use on the bus), which
    // judges validity at the real time: issued now.
    let now = SystemTime::now();
    let ca = Authority::generate("shop", "orders", now).unwrap();
    let leaf = ca.issue(&member(), now).unwrap();
    tls::client(&files(&ca, &leaf), true).unwrap();
    let operator = ca.issue(&Request::operator("orders"), now).unwrap();
    tls::client(&files(&ca, &operator), true).unwrap();
}

#[test]
fn a_certificate_lives_ninety_days_and_is_renewed_in_its_last_thirty() {
    let ca = authority();
    let leaf = ca.issue(&member(), now()).unwrap();
    verify(&ca, &leaf, "10.96.0.17", now() + LEAF_LIFETIME - DAY).unwrap();
    assert!(verify(&ca, &leaf, "10.96.0.17", now() + LEAF_LIFETIME + DAY).is_err());
    let (req, held) = (member(), held(&ca, &leaf));
    assert_eq!(ca.judge(&held, &req, now()), Verdict::Keep);
    assert_eq!(ca.judge(&held, &req, now() + 59 * DAY), Verdict::Keep);
    assert_eq!(
        ca.judge(&held, &req, now() + 61 * DAY),
        issue("its certificate expires in 29 days")
    );
    assert_eq!(
        ca.judge(&held, &req, now() + 91 * DAY),
        issue("its certificate expires in no time: it has expired")
    );
}

#[test]
fn another_address_or_a_damaged_secret_is_issued_again() {
    let ca = authority();
    let leaf = ca.issue(&member(), now()).unwrap();
    let moved = Request::member("orders-0-0", "shop", "10.96.0.99", &[]).unwrap();
    assert_eq!(
        ca.judge(&held(&ca, &leaf), &moved, now()),
        issue("its certificate names another address")
    );
    let damaged = |change: fn(&mut Held<'_>)| {
        let mut h = held(&ca, &leaf);
        change(&mut h);
        ca.judge(&h, &member(), now())
    };
    assert_eq!(damaged(|h| h.cert = None), issue("it has none"));
    assert_eq!(
        damaged(|h| h.cert = Some("not a certificate")),
        issue("it holds no readable certificate")
    );
    let missing_key = issue("its key is missing or not its certificate's");
    assert_eq!(damaged(|h| h.key = None), missing_key);
    assert_eq!(
        damaged(|h| h.ca = None),
        issue("its ca.crt is not the CA the topology trusts")
    );
    let other = ca.issue(&member(), now()).unwrap();
    let mut wrong_key = held(&ca, &leaf);
    wrong_key.key = Some(&other.key_pem);
    assert_eq!(ca.judge(&wrong_key, &member(), now()), missing_key);
}

#[test]
fn a_certificate_of_another_ca_is_refused_not_replaced() {
    // Members trust only the CA they started with: a new CA in the Secret must not make
    // the operator reissue every member's certificate from it.
    let ca = authority();
    let leaf = ca.issue(&member(), now()).unwrap();
    let other = Authority::generate("shop", "orders", now()).unwrap();
    let verdict = other.judge(&held(&ca, &leaf), &member(), now());
    assert!(
        matches!(&verdict, Verdict::Refuse(why) if why.to_string().contains("the CA was replaced")),
        "{verdict:?}"
    );
}

#[test]
fn a_ca_read_back_from_its_secret_issues_for_the_same_chain() {
    let ca = authority();
    let read = Authority::from_pem(&ca.cert_pem, &ca.key_pem).unwrap();
    let leaf = read.issue(&member(), now()).unwrap();
    verify(&ca, &leaf, "orders-0-0.shop.svc", now()).unwrap();
    assert_eq!(ca.judge(&held(&ca, &leaf), &member(), now()), Verdict::Keep);
    assert!(Authority::from_pem(&ca.cert_pem, "junk").is_err());
    let other = authority();
    let why = Authority::from_pem(&ca.cert_pem, &other.key_pem).unwrap_err();
    assert!(matches!(why, CaError::KeyNotTheCertificates), "{why}");
    assert_eq!(why.to_string(), "ca.key is not the key of ca.crt");
    // Ten years, then it is gone: renewing a CA is not built (docs/security.md). A
    // certificate issued near the end ends with the CA, and is not issued again and again.
    let at = now() + CA_LIFETIME - 10 * DAY;
    let late = read.issue(&member(), at).unwrap();
    assert!(verify(&ca, &late, "10.96.0.17", at).is_ok());
    assert!(verify(&ca, &late, "10.96.0.17", now() + CA_LIFETIME + DAY).is_err());
    assert_eq!(
        read.judge(&held(&read, &late), &member(), at),
        Verdict::Keep
    );
}

#[test]
fn a_group_member_also_answers_to_the_client_services() {
    let shared = ["cache".to_string(), "cache-replicas".to_string()];
    let data = Request::member("cache-0", "shop", "10.96.0.20", &shared).unwrap();
    let ca = authority();
    let leaf = ca.issue(&data, now()).unwrap();
    for name in [
        "cache-0.shop.svc",
        "cache.shop.svc",
        "cache-replicas.shop.svc.cluster.local",
    ] {
        verify(&ca, &leaf, name, now()).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    assert!(verify(&ca, &leaf, "cache-sentinel.shop.svc", now()).is_err());
    // A Service added to the names later means a new certificate.
    let fewer = Request::member("cache-0", "shop", "10.96.0.20", &shared[..1]).unwrap();
    assert_eq!(
        ca.judge(&held(&ca, &leaf), &fewer, now()),
        issue("its certificate names another address")
    );
}

#[test]
fn a_bad_cluster_ip_is_refused() {
    assert!(Request::member("m", "ns", "none", &[]).is_err());
    let v6 = Request::member("m", "ns", "fd00::17", &[]).unwrap();
    let ca = authority();
    let leaf = ca.issue(&v6, now()).unwrap();
    verify(&ca, &leaf, "fd00::17", now()).unwrap();
    assert_eq!(ca.judge(&held(&ca, &leaf), &v6, now()), Verdict::Keep);
}

#[test]
fn a_member_secret_is_written_only_when_the_member_owns_it() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    let owner = |kind: &str, name: &str, uid: &str| OwnerReference {
        kind: kind.into(),
        name: name.into(),
        uid: uid.into(),
        ..Default::default()
    };
    let node = |uid: &str| owner("ValkeyNode", "orders-0-0", uid);
    assert_eq!(
        member_secret_owner(&[node("u2")], "orders-0-0", "u2"),
        SecretOwner::Member
    );
    // Scaled in and out again: the old member's Secret waits for the garbage collector.
    assert_eq!(
        member_secret_owner(&[node("u1")], "orders-0-0", "u2"),
        SecretOwner::EarlierMember
    );
    // Made by hand, or someone else's of that name: never taken over.
    assert_eq!(
        member_secret_owner(&[], "orders-0-0", "u2"),
        SecretOwner::Other
    );
    let other = owner("Certificate", "orders-0-0", "u3");
    assert_eq!(
        member_secret_owner(&[other], "orders-0-0", "u2"),
        SecretOwner::Other
    );
}
