use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair,
};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;

/// A time at which no certificate of these tests is younger than the reload grace.
const NOW: i64 = i64::MAX / 2;

type Ca = CertifiedIssuer<'static, KeyPair>;

fn ca(name: &str) -> Ca {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}

/// A member certificate as cert-manager issues one for a Service's DNS names: no IP SAN.
fn member(ca: &Ca) -> TlsFiles {
    issued(ca, |_| {})
}

fn issued(ca: &Ca, change: impl FnOnce(&mut CertificateParams)) -> TlsFiles {
    let mut params = CertificateParams::new(vec!["cache.default.svc".to_string()]).unwrap();
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    change(&mut params);
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, ca).unwrap();
    TlsFiles {
        ca: ca.pem().into_bytes(),
        cert: cert.pem().into_bytes(),
        key: key.serialize_pem().into_bytes(),
    }
}

fn secret(files: &TlsFiles, drop: Option<&str>) -> Secret {
    let mut data = BTreeMap::new();
    data.insert("ca.crt".to_string(), ByteString(files.ca.clone()));
    data.insert("tls.crt".to_string(), ByteString(files.cert.clone()));
    data.insert("tls.key".to_string(), ByteString(files.key.clone()));
    if let Some(key) = drop {
        data.remove(key);
    }
    Secret {
        data: Some(data),
        ..Default::default()
    }
}

/// The client of a cluster's members, which present certificates on the bus.
fn client_of(files: &TlsFiles) -> Result<Client, FilesError> {
    client(files, true)
}

fn ip(address: &str) -> ServerName<'static> {
    ServerName::IpAddress(address.parse::<std::net::IpAddr>().unwrap().into())
}

/// A handshake with the member at `address` serving `files`, as `client`'s verifier sees it.
fn serve(client: &Client, files: &TlsFiles, address: &str) {
    let cert = leaf(files).unwrap();
    client
        .verifier
        .verify_server_cert(&cert, &[], &ip(address), &[], UnixTime::now())
        .unwrap();
}

#[test]
fn the_secret_must_hold_all_three_keys() {
    let files = member(&ca("test CA"));
    assert_eq!(
        files_in(Some(&secret(&files, None)), "c-tls"),
        Ok(files.clone())
    );
    let missing = files_in(None, "c-tls").unwrap_err();
    assert_eq!(missing.to_string(), "TLS Secret c-tls does not exist");
    for key in ["ca.crt", "tls.crt", "tls.key"] {
        let incomplete = files_in(Some(&secret(&files, Some(key))), "c-tls").unwrap_err();
        assert_eq!(
            incomplete,
            SecretError::NoKey {
                secret: "c-tls".into(),
                key
            }
        );
        assert_eq!(
            incomplete.to_string(),
            format!("TLS Secret c-tls has no {key}")
        );
    }
}

#[test]
fn a_member_is_trusted_by_its_chain_whatever_address_it_is_dialled_at() {
    let ca = ca("test CA");
    let files = member(&ca);
    let client = client_of(&files).unwrap();
    let verifier = client.verifier.clone();
    let now = UnixTime::now();
    let served = leaf(&files).unwrap();
    verifier
        .verify_server_cert(&served, &[], &ip("10.96.0.12"), &[], now)
        .expect("the certificate names no IP, and Valkey checks no names");
    assert_eq!(client.served.at("10.96.0.12"), Some(served.clone()));
    assert_eq!(client.served.at("10.96.0.13"), None);

    // A certificate from another CA is refused and not recorded as served.
    let stranger = leaf(&member(&self::ca("other CA"))).unwrap();
    let refused = verifier.verify_server_cert(&stranger, &[], &ip("10.96.0.13"), &[], now);
    assert!(refused.is_err());
    assert_eq!(client.served.at("10.96.0.13"), None);
    let why = client.served.refusal("10.96.0.13").unwrap();
    assert_eq!(why, Refusal::UnknownIssuer);
    assert_eq!(why.to_string(), "it is not issued by a CA in ca.crt");
    assert_eq!(client.served.refusal("10.96.0.12"), None);

    // A CA of the same name with another key: what a renewed CA looks like.
    let renewed = leaf(&member(&self::ca("test CA"))).unwrap();
    let refused = verifier.verify_server_cert(&renewed, &[], &ip("10.96.0.14"), &[], now);
    assert!(refused.is_err());
    let why = client.served.refusal("10.96.0.14").unwrap();
    assert_eq!(why, Refusal::SignedByAnotherKey);
    assert_eq!(
        why.to_string(),
        "it is not signed by a CA in ca.crt (one of the same name has another key, as after \
         a CA is renewed)"
    );
}

#[test]
fn unusable_files_say_which_key_is_wrong() {
    let files = member(&ca("test CA"));
    let other = member(&ca("test CA"));
    let mismatched = TlsFiles {
        key: other.key.clone(),
        ..files.clone()
    };
    let problem = |f: &TlsFiles| client_of(f).err().unwrap();
    let why = problem(&mismatched);
    assert!(matches!(why, FilesError::KeyMismatch(_)), "{why}");
    assert!(
        why.to_string()
            .starts_with("tls.crt and tls.key do not go together: ")
    );
    let garbled = TlsFiles {
        ca: b"not a certificate".to_vec(),
        ..files.clone()
    };
    let why = problem(&garbled);
    assert!(
        matches!(why, FilesError::NoCertificate { file: "ca.crt" }),
        "{why}"
    );
    assert_eq!(why.to_string(), "ca.crt holds no certificate");
    let no_key = TlsFiles {
        key: b"-----BEGIN NOTHING-----".to_vec(),
        ..files
    };
    let why = problem(&no_key);
    assert!(matches!(why, FilesError::KeyNotPem(_)), "{why}");
    assert!(
        why.to_string()
            .starts_with("tls.key is not a PEM private key: ")
    );
}

#[test]
fn a_certificate_members_could_not_use_is_refused_up_front() {
    let ca = ca("test CA");
    let problem = |f: TlsFiles| client_of(&f).err().unwrap();
    let server_only = issued(&ca, |p| {
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth]
    });
    let why = problem(server_only);
    assert!(
        matches!(why, FilesError::NotForClients(Refusal::WrongPurpose)),
        "{why}"
    );
    assert!(
        why.to_string()
            .starts_with("tls.crt cannot be a client certificate"),
        "{why}"
    );
    let client_only = issued(&ca, |p| {
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth]
    });
    let why = problem(client_only);
    assert!(
        matches!(why, FilesError::CannotServe(Refusal::WrongPurpose)),
        "{why}"
    );
    let expired = issued(&ca, |p| {
        p.not_before = rcgen::date_time_ymd(2020, 1, 1);
        p.not_after = rcgen::date_time_ymd(2021, 1, 1);
    });
    let why = problem(expired);
    assert!(
        matches!(why, FilesError::CannotServe(Refusal::Expired)),
        "{why}"
    );
    assert_eq!(why.to_string(), "tls.crt cannot be served: it has expired");
    let stranger = TlsFiles {
        ca: ca.pem().into_bytes(),
        ..member(&self::ca("other CA"))
    };
    let why = problem(stranger);
    assert!(matches!(why, FilesError::CannotServe(_)), "{why}");
    // No extended key usage at all allows both.
    assert!(client_of(&issued(&ca, |p| p.extended_key_usages.clear())).is_ok());
}

#[test]
fn members_serving_another_certificate_are_stale() {
    let ca = ca("test CA");
    let old = member(&ca);
    let renewed = member(&ca);
    let client = client_of(&renewed).unwrap();
    let served = |files: &TlsFiles, address: &str| serve(&client, files, address);
    served(&renewed, "10.0.0.1");
    served(&old, "10.0.0.2");
    let members = [
        ("c-0", "10.0.0.1"),
        ("c-1", "10.0.0.2"),
        ("c-2", "10.0.0.3"),
    ];
    assert_eq!(stale(&client, members), vec!["c-1"], "c-2 was not reached");
    served(&renewed, "10.0.0.2");
    assert!(stale(&client, members).is_empty());
}

/// With certificates the operator issues, each member is judged against its own: one
/// serving another member's is stale, one with none issued yet is not judged.
#[test]
fn with_a_certificate_per_member_each_is_judged_against_its_own() {
    let ca = ca("test CA");
    let (a, b, b_renewed) = (member(&ca), member(&ca), member(&ca));
    let operator = member(&ca);
    let mut client = client_of(&operator).unwrap();
    client.wanted = Wanted::PerMember(BTreeMap::from([
        ("c-0".to_string(), leaf(&a).unwrap()),
        ("c-1".to_string(), leaf(&b_renewed).unwrap()),
    ]));
    serve(&client, &a, "10.0.0.1");
    serve(&client, &b, "10.0.0.2");
    serve(&client, &a, "10.0.0.3");
    let members = [
        ("c-0", "10.0.0.1"),
        ("c-1", "10.0.0.2"),
        ("c-2", "10.0.0.3"),
    ];
    assert_eq!(
        stale(&client, members),
        vec!["c-1"],
        "c-2 has none issued yet"
    );
    // A sentinel waits until every data node serves its own.
    let sentinel = [SentinelState {
        name: "s-0",
        address: Some("10.0.0.9"),
        monitoring: true,
        failing_over: false,
        reloads_itself: false,
    }];
    serve(&client, &b, "10.0.0.9");
    if let Wanted::PerMember(certs) = &mut client.wanted {
        certs.insert("s-0".into(), leaf(&operator).unwrap());
    }
    let data = [("c-0", "10.0.0.1"), ("c-1", "10.0.0.2")];
    assert_eq!(
        sentinel_to_restart(&client, &sentinel, &data, true, NOW),
        None
    );
    serve(&client, &b_renewed, "10.0.0.2");
    assert_eq!(
        sentinel_to_restart(&client, &sentinel, &data, true, NOW),
        Some("s-0")
    );
}

/// The client config against a real TLS server that requires a client certificate from the
/// same CA, as `tls-auth-clients yes` and the cluster bus do.
#[tokio::test]
async fn the_client_presents_its_certificate_to_a_server_that_requires_one() {
    let ca = ca("test CA");
    let files = member(&ca);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    roots.add(ca.der().clone()).unwrap();
    let clients = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()
    .unwrap();
    let server = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(clients)
        .with_single_cert(
            certificates(&files.cert, "tls.crt").unwrap(),
            PrivateKeyDer::from_pem_slice(&files.key).unwrap(),
        )
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
    let serve = tokio::spawn(async move {
        let (socket, _) = listener.accept().await.unwrap();
        let mut tls = acceptor.accept(socket).await.unwrap();
        let presented = tls.get_ref().1.peer_certificates().map(<[_]>::to_vec);
        tls.write_all(b"+PONG\r\n").await.unwrap();
        tls.shutdown().await.unwrap();
        presented
    });

    let client = client_of(&files).unwrap();
    let connector = tokio_rustls::TlsConnector::from(client.config.clone());
    let socket = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let mut tls = connector.connect(ip("127.0.0.1"), socket).await.unwrap();
    let mut answer = String::new();
    tls.read_to_string(&mut answer).await.unwrap();
    assert_eq!(answer, "+PONG\r\n");
    let presented = serve.await.unwrap().expect("a client certificate");
    assert_eq!(client.wanted.of("any"), Some(&presented[0]));
    assert_eq!(
        client.served.at("127.0.0.1").as_ref(),
        client.wanted.of("any")
    );
}

#[test]
fn one_stale_sentinel_restarts_at_a_time_and_only_when_all_is_quiet() {
    let ca = ca("test CA");
    let old = member(&ca);
    let renewed = member(&ca);
    let client = client_of(&renewed).unwrap();
    let now = UnixTime::now();
    let serve = |files: &TlsFiles, address: &str| {
        let cert = leaf(files).unwrap();
        client
            .verifier
            .verify_server_cert(&cert, &[], &ip(address), &[], now)
            .unwrap();
    };
    serve(&old, "10.0.1.1");
    serve(&renewed, "10.0.1.2");
    serve(&old, "10.0.1.3");
    serve(&renewed, "10.0.2.1");
    let data = [("g-0", "10.0.2.1")];
    let state = |name, address, monitoring, failing_over| SentinelState {
        name,
        address: Some(address),
        monitoring,
        failing_over,
        reloads_itself: false,
    };
    let all = [
        state("g-s-0", "10.0.1.1", true, false),
        state("g-s-1", "10.0.1.2", true, false),
        state("g-s-2", "10.0.1.3", true, false),
    ];
    assert_eq!(
        sentinel_to_restart(&client, &all, &data, true, NOW),
        Some("g-s-0")
    );
    assert_eq!(
        sentinel_to_restart(&client, &all, &data, false, NOW),
        None,
        "not at rest"
    );
    let mut one_back_unmonitoring = all;
    one_back_unmonitoring[0].monitoring = false;
    assert_eq!(
        sentinel_to_restart(&client, &one_back_unmonitoring, &data, true, NOW),
        None
    );
    let mut failing_over = all;
    failing_over[1].failing_over = true;
    assert_eq!(
        sentinel_to_restart(&client, &failing_over, &data, true, NOW),
        None
    );
    // A data node not serving the renewed certificate yet holds the sentinels back.
    serve(&old, "10.0.2.2");
    let both = [("g-0", "10.0.2.1"), ("g-1", "10.0.2.2")];
    assert_eq!(sentinel_to_restart(&client, &all, &both, true, NOW), None);
    serve(&renewed, "10.0.2.2");
    assert_eq!(
        sentinel_to_restart(&client, &all, &both, true, NOW),
        Some("g-s-0")
    );
    // One that reloads by itself is left to it for the grace after the certificate's
    // notBefore; the next stale one goes instead. Past the grace it goes too.
    let issued = not_before(&leaf(&renewed).unwrap()).unwrap();
    let grace = i64::try_from(SELF_RELOAD_GRACE.as_secs()).unwrap();
    let mut reloading = all;
    reloading[0].reloads_itself = true;
    assert_eq!(
        sentinel_to_restart(&client, &reloading, &both, true, issued + grace - 1),
        Some("g-s-2")
    );
    reloading[2].reloads_itself = true;
    assert_eq!(
        sentinel_to_restart(&client, &reloading, &both, true, issued + grace - 1),
        None
    );
    assert_eq!(
        sentinel_to_restart(&client, &reloading, &both, true, issued + grace),
        Some("g-s-0"),
        "the grace has run"
    );
    serve(&renewed, "10.0.1.1");
    assert_eq!(
        sentinel_to_restart(&client, &all, &both, true, NOW),
        Some("g-s-2")
    );
    serve(&renewed, "10.0.1.3");
    assert_eq!(
        sentinel_to_restart(&client, &all, &both, true, NOW),
        None,
        "all renewed"
    );
}

#[test]
fn only_a_9_1_sentinel_started_with_the_interval_reloads_itself() {
    assert!(reloads_itself(Some("9.1.2"), Some("10")));
    assert!(reloads_itself(Some("10.0.0"), Some("10")));
    assert!(!reloads_itself(Some("9.1.2"), None), "an older template");
    assert!(!reloads_itself(Some("9.1.2"), Some("0")));
    assert!(!reloads_itself(Some("9.1.2"), Some("soon")));
    assert!(!reloads_itself(Some("8.1.1"), Some("10")), "8.x cannot");
    assert!(!reloads_itself(Some("9.0.0"), Some("10")), "not measured");
    assert!(!reloads_itself(None, Some("10")));
}
