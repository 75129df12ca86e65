//! `spec.tls`: a cluster whose members serve a Secret's certificate on the client port and
//! the cluster bus, TLS only, and load a renewed certificate without a restart.

use std::time::Instant;

use crd_types::template::{Exporter, TlsAuthClients, TopologyTls};
use local_cluster::cluster_testing::{MemberAddr, valkey_cluster};
use local_cluster::images::exporter_image;
use local_cluster::testing::valkey_cli_as;
use local_cluster::valkey_tls::{
    ClientTls, ExtendedKeyUsagePurpose, Issued, Kept, TestCa, client_of_secret, create_secret,
    renew_secret, replace_secret, secret_certificate, secret_text,
};

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use crate::env::{Env, FORM, NS, SETTLE};

const CLIENT_PORT: u16 = 6379;
const BUS_PORT: u16 = 16379;
const EXPORTER_PORT: i32 = 9121;

/// A certificate members could not use (for servers only) is refused with a reason and an
/// Event; once replaced, the cluster forms over TLS (the operator's MEET, slot assignment and replication, the bus
/// between members: `--cluster check` passes, asked over TLS); plain text is refused on the
/// client port; the bus hands out the Secret's certificate; a key written through one member
/// is read back following redirections. A renewed certificate is then served on both ports
/// of every member with no pod restarted and every key still there. A new CA without a
/// bundle is refused and named in an Event, the members keep serving; with both CAs in
/// `ca.crt` they load the new CA's certificate and the cluster is whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_speaks_only_tls_and_loads_a_renewed_certificate_live() {
    let env = Env::start().await;
    let name = "tls";
    let secret_name = "tls-certificate";
    let secrets = &env.apis.secrets;
    // First a certificate for servers only: the bus requires client certificates, so the
    // operator refuses it, says why, and asks nothing of the members.
    let (ca, _) = create_secret(secrets, secret_name).await.unwrap();
    let server_only = ca
        .issue_for(vec![ExtendedKeyUsagePurpose::ServerAuth])
        .unwrap();
    replace_secret(secrets, secret_name, server_only)
        .await
        .unwrap();
    let mut cluster = valkey_cluster(name, 3, 1, false);
    cluster.spec.tls = Some(TopologyTls {
        secret_name: Some(secret_name.into()),
        auth_clients: TlsAuthClients::Never,
    });
    cluster.spec.template.exporter = Some(Exporter {
        image: exporter_image().unwrap(),
        port: EXPORTER_PORT,
        resources: None,
    });
    env.apis.create(&cluster).await.unwrap();
    let waiting = env
        .wait("the cluster to refuse the certificate", SETTLE, || async {
            let status = env
                .apis
                .clusters
                .get(name)
                .await?
                .status
                .unwrap_or_default();
            let progressing = status.conditions.iter().find(|c| c.type_ == "Progressing");
            Ok(match progressing {
                Some(c) if c.reason == "TlsSecretUnusable" => Ok(c.message.clone()),
                other => Err(format!("Progressing is {other:?}")),
            })
        })
        .await;
    assert!(
        waiting.contains("cannot be a client certificate"),
        "{waiting}"
    );
    let events = env.apis.topology_events(name).await.unwrap();
    assert!(
        events
            .iter()
            .any(|e| e.reason.as_deref() == Some("CertificateRefused")),
        "{events:?}"
    );
    // A usable certificate: the members, serving the refused one, load it, and it forms.
    let first = renew_secret(secrets, secret_name, &ca).await.unwrap();
    env.ready(name, FORM).await;
    let access = env.exact_access(name, 3, 1).await;
    env.healthy(name, &access, 3, 1).await;
    let tls = access.tls.clone().expect("the cluster has tls");

    for m in &access.members {
        assert_eq!(access.cli(&m.ip, &["PING"]), "PONG", "{} over TLS", m.name);
        let plain = valkey_cli_as(
            &m.ip,
            access.password.as_deref().map(|p| (None, p)),
            &["PING"],
        );
        assert!(
            plain.contains("Server closed the connection") || plain.contains("Connection reset"),
            "{} in plain text: {plain}",
            m.name
        );
        for port in [CLIENT_PORT, BUS_PORT] {
            let served = tls.served(&m.ip, port).await.unwrap();
            assert_eq!(served, first.der().unwrap(), "{}:{port}", m.name);
        }
        // The bus asks for a client certificate whatever authClients says: a peer with one
        // is kept, one without is refused.
        assert_eq!(tls.kept(&m.ip, BUS_PORT, true).await.unwrap(), Kept::Open);
        let anonymous = tls.kept(&m.ip, BUS_PORT, false).await.unwrap();
        assert!(
            matches!(anonymous, Kept::Closed(_)),
            "{}: {anonymous:?}",
            m.name
        );
        eprintln!(
            "tls: {}'s bus without a client certificate: {anonymous:?}",
            m.name
        );
        // Its exporter scrapes it over TLS with no certificate (authClients: Never).
        let addr = format!("{}:{EXPORTER_PORT}", m.ip);
        env.wait(
            &format!("{}'s exporter to scrape it", m.name),
            SETTLE,
            || async {
                let body = local_cluster::operator::http_get(&addr, "/metrics").await;
                Ok(body
                    .filter(|b| b.lines().any(|l| l == "redis_up 1"))
                    .map(drop)
                    .ok_or_else(|| "no successful scrape yet".to_string()))
            },
        )
        .await;
    }
    for i in 0..100 {
        let key = format!("tls:{i}");
        assert_eq!(access.cli_cluster(&["SET", &key, &key]), "OK");
    }

    let members = env.apis.members(name).await.unwrap();
    let starts = env.pod_starts(&members).await;
    let renewed = renew_secret(secrets, secret_name, &ca).await.unwrap();
    let changed = Instant::now();
    let wanted = renewed.der().unwrap();
    let what = "every member to serve the renewed certificate on both ports";
    wait_served(
        &env,
        &tls,
        &access.members,
        &wanted,
        Checked::ServerName,
        what,
    )
    .await;
    eprintln!(
        "tls: every member serves the renewed certificate {:?} after the Secret changed",
        changed.elapsed()
    );
    assert_eq!(env.pod_starts(&members).await, starts, "no pod restarted");
    env.healthy(name, &access, 3, 1).await;
    for i in 0..100 {
        let key = format!("tls:{i}");
        assert_eq!(access.cli_cluster(&["GET", &key]), key);
    }
    let events = env.apis.topology_events(name).await.unwrap();
    let reasons: Vec<&str> = events.iter().filter_map(|e| e.reason.as_deref()).collect();
    assert!(reasons.contains(&"CertificateReloaded"), "{reasons:?}");
    // The only refusal is the first certificate's.
    for e in &events {
        if e.reason.as_deref() == Some("CertificateRefused") {
            let note = e.note.as_deref().unwrap_or_default();
            assert!(note.contains("cannot be a client certificate"), "{note}");
        }
    }

    // A new CA without a bundle of both: the members keep the certificate they serve, which
    // the operator now refuses, and it says so; nothing is reloaded.
    let new_ca = TestCa::new().unwrap();
    let moved = new_ca.issue().unwrap();
    replace_secret(secrets, secret_name, moved.clone())
        .await
        .unwrap();
    let refusal = env
        .wait(
            "the operator to name the members it refuses",
            SETTLE * 2,
            || async {
                let events = env.apis.topology_events(name).await?;
                let note = events
                    .iter()
                    .filter(|e| e.reason.as_deref() == Some("CertificateRefused"))
                    .filter_map(|e| e.note.clone())
                    // The test CAs share a name: a renewed CA's case.
                    .find(|n| n.contains("not signed by a CA in ca.crt"));
                Ok(note.ok_or_else(|| "no such CertificateRefused yet".to_string()))
            },
        )
        .await;
    eprintln!("tls: after a CA change without a bundle: {refusal}");
    for m in &access.members {
        let served = tls.served(&m.ip, CLIENT_PORT).await.unwrap();
        assert_eq!(served, wanted, "{} kept its certificate", m.name);
    }
    // Both CAs in ca.crt: the members load the new CA's certificate and the cluster is whole.
    let bundled = Issued {
        ca: format!("{}{}", renewed.ca, moved.ca),
        ..moved.clone()
    };
    replace_secret(secrets, secret_name, bundled).await.unwrap();
    let bundled_at = Instant::now();
    let tls = client_of_secret(secrets, secret_name, "tls-bundle")
        .await
        .unwrap();
    let wanted = moved.der().unwrap();
    let what = "every member to serve the new CA's certificate on both ports";
    wait_served(
        &env,
        &tls,
        &access.members,
        &wanted,
        Checked::ServerName,
        what,
    )
    .await;
    eprintln!(
        "tls: every member serves the new CA's certificate {:?} after the bundle",
        bundled_at.elapsed()
    );
    let access = env.exact_access(name, 3, 1).await;
    env.healthy(name, &access, 3, 1).await;
    for i in 0..100 {
        let key = format!("tls:{i}");
        assert_eq!(access.cli_cluster(&["GET", &key]), key);
    }
    assert_eq!(env.pod_starts(&members).await, starts, "no pod restarted");
    env.finish().await;
}

/// `spec.tls` without a Secret: the operator keeps a CA (`<name>-ca-key`; its certificate
/// alone in `<name>-ca`) and issues each member a certificate of its own, for its Service's
/// DNS names and ClusterIP, which a client checking names accepts on both ports; the cluster forms over TLS with client
/// certificates required. A member whose Secret is deleted is issued a new certificate,
/// which it serves with no pod restarted and every key still there.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_serves_certificates_the_operator_issues_per_member() {
    let env = Env::start().await;
    let name = "issued";
    let secrets = &env.apis.secrets;
    let mut cluster = valkey_cluster(name, 3, 1, false);
    cluster.spec.tls = Some(TopologyTls {
        secret_name: None,
        auth_clients: TlsAuthClients::Required,
    });
    let created = Instant::now();
    env.apis.create(&cluster).await.unwrap();
    env.ready(name, FORM).await;
    eprintln!("issued: Ready {:?} after creation", created.elapsed());
    let access = env.exact_access(name, 3, 1).await;
    env.healthy(name, &access, 3, 1).await;
    let tls = access.tls.clone().expect("the cluster has tls");
    // Clients trust the CA of `<name>-ca`: every member's Secret carries the same one.
    let text = |secret: String, key: &'static str| async move {
        secret_text(secrets, &secret, key).await.unwrap()
    };
    let ca = text(format!("{name}-ca"), "ca.crt").await;
    // `<name>-ca` holds the CA's certificate alone; its key is in `<name>-ca-key`.
    let public = secrets.get(&format!("{name}-ca")).await.unwrap();
    let keys: Vec<String> = public.data.unwrap_or_default().into_keys().collect();
    assert_eq!(keys, ["ca.crt"]);
    assert_eq!(text(format!("{name}-ca-key"), "ca.crt").await, ca);
    assert!(!text(format!("{name}-ca-key"), "ca.key").await.is_empty());
    let mut seen = Vec::new();
    for m in &access.members {
        let secret = format!("{}-tls", m.name);
        assert_eq!(text(secret.clone(), "ca.crt").await, ca, "{secret}");
        let own = secret_certificate(secrets, &secret).await.unwrap();
        let node = env.apis.nodes.get(&m.name).await.unwrap();
        let endpoint = node.status.and_then(|s| s.endpoint).expect("an endpoint");
        let service = endpoint.service_name.expect("a Service");
        assert_eq!(endpoint.cluster_ip.as_deref(), Some(m.ip.as_str()));
        let names = [
            m.ip.clone(),
            service.clone(),
            format!("{service}.{NS}.svc"),
            format!("{service}.{NS}.svc.cluster.local"),
        ];
        for port in [CLIENT_PORT, BUS_PORT] {
            for checked in &names {
                let served = tls.served_as(&m.ip, port, checked).await;
                let served =
                    served.unwrap_or_else(|e| panic!("{}:{port} as {checked}: {e:#}", m.name));
                assert_eq!(served, own, "{}:{port} serves its Secret's", m.name);
            }
        }
        // Another member's name is not in it.
        let other = access.members.iter().find(|o| o.name != m.name).unwrap();
        let refused = tls.served_as(&m.ip, CLIENT_PORT, &other.ip).await;
        let refused = format!("{:#}", refused.unwrap_err());
        assert!(refused.contains("not valid for name"), "{refused}");
        // authClients Required: a client that checks this member's name and shows a
        // certificate is kept, one without a certificate is refused after the handshake.
        let named = tls.clone().with_server_name(&m.ip);
        if m.name == access.members[0].name {
            let kept = named.kept(&m.ip, CLIENT_PORT, true).await.unwrap();
            assert_eq!(kept, Kept::Open, "{}", m.name);
        }
        let anonymous = named.kept(&m.ip, CLIENT_PORT, false).await.unwrap();
        assert!(
            matches!(&anonymous, Kept::Closed(why) if !why.starts_with("handshake")),
            "{}: {anonymous:?}",
            m.name
        );
        assert!(!seen.contains(&own), "{} shares a certificate", m.name);
        seen.push(own);
    }
    for i in 0..100 {
        let key = format!("issued:{i}");
        assert_eq!(access.cli_cluster(&["SET", &key, &key]), "OK");
    }
    let events = env.apis.topology_events(name).await.unwrap();
    let issued = events
        .iter()
        .filter(|e| e.reason.as_deref() == Some("CertificateIssued"))
        .filter_map(|e| e.note.clone())
        .collect::<Vec<_>>();
    assert!(!issued.is_empty(), "no CertificateIssued Event: {events:?}");

    // A deleted member Secret: a new certificate, loaded live.
    let members = env.apis.members(name).await.unwrap();
    let starts = env.pod_starts(&members).await;
    let m = &access.members[0];
    let secret = format!("{}-tls", m.name);
    let before = text(secret.clone(), "tls.crt").await;
    secrets.delete(&secret, &Default::default()).await.unwrap();
    let deleted = Instant::now();
    let renewed = env
        .wait("a new certificate for the member", SETTLE, || async {
            let now = secrets.get_opt(&secret).await?;
            let cert = now
                .and_then(|s| s.data)
                .and_then(|d| d.get("tls.crt").cloned())
                .map(|v| String::from_utf8(v.0).unwrap());
            Ok(cert
                .filter(|c| *c != before)
                .ok_or_else(|| "not issued again yet".to_string()))
        })
        .await;
    let wanted = CertificateDer::from_pem_slice(renewed.as_bytes())
        .unwrap()
        .into_owned();
    let what = "the member to serve its new certificate on both ports";
    let only = std::slice::from_ref(m);
    wait_served(&env, &tls, only, &wanted, Checked::Address, what).await;
    eprintln!(
        "issued: {} serves its new certificate {:?} after its Secret was deleted",
        m.name,
        deleted.elapsed()
    );
    assert_eq!(env.pod_starts(&members).await, starts, "no pod restarted");
    env.healthy(name, &access, 3, 1).await;
    for i in 0..100 {
        let key = format!("issued:{i}");
        assert_eq!(access.cli_cluster(&["GET", &key]), key);
    }
    let events = env.apis.topology_events(name).await.unwrap();
    let reasons: Vec<&str> = events.iter().filter_map(|e| e.reason.as_deref()).collect();
    assert!(reasons.contains(&"CertificateReloaded"), "{reasons:?}");
    assert!(!reasons.contains(&"CertificateRefused"), "{reasons:?}");
    env.finish().await;
}

/// The name a client checks in the certificates members serve.
#[derive(Clone, Copy)]
enum Checked {
    /// The test Secret's one name ([`local_cluster::valkey_tls::SERVER_NAME`]).
    ServerName,
    /// The member's own address (certificates the operator issues name it).
    Address,
}

/// Waits until each of `members` serves `wanted` on the client port and the bus.
async fn wait_served(
    env: &Env,
    tls: &ClientTls,
    members: &[MemberAddr],
    wanted: &CertificateDer<'static>,
    checked: Checked,
    what: &str,
) {
    env.wait(what, SETTLE * 2, || async {
        let mut stale = Vec::new();
        for m in members {
            for port in [CLIENT_PORT, BUS_PORT] {
                let served = match checked {
                    Checked::ServerName => tls.served(&m.ip, port).await,
                    Checked::Address => tls.served_as(&m.ip, port, &m.ip).await,
                };
                match served {
                    Ok(served) if served == *wanted => {}
                    Ok(_) => stale.push(format!("{}:{port} serves another", m.name)),
                    Err(e) => stale.push(format!("{}:{port}: {e:#}", m.name)),
                }
            }
        }
        Ok(stale.is_empty().then_some(()).ok_or(stale.join("; ")))
    })
    .await;
}
