//! `spec.tls`: a cluster whose members serve a Secret's certificate on the client port and
//! the cluster bus, TLS only, and load a renewed certificate without a restart; and one that
//! serves plain-text clients beside TLS while asked to.

use std::time::Instant;

use crd_types::template::{Exporter, TlsAuthClients, TopologyTls};
use e2e_kit::cluster_testing::{Access, MemberAddr, valkey_cluster};
use e2e_kit::platform::{enforce_restricted, runs_as_assigned, with_assigned_identity};
use e2e_kit::testing::{connection_refused, plain_text_cli, valkey_cli_as};
use e2e_kit::topology::issued;
use e2e_kit::valkey_tls::{
    ClientTls, ExtendedKeyUsagePurpose, Issued, Kept, TestCa, client_of_secret, create_secret,
    renew_secret, replace_secret, secret_text,
};
use local_cluster::images::exporter_image;

use rustls::pki_types::CertificateDer;

use crate::env::{Env, FORM, ROLL, SETTLE};

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
    cluster.spec.common.tls = Some(TopologyTls {
        secret_name: Some(secret_name.into()),
        auth_clients: TlsAuthClients::Never,
        plain_text_clients: false,
        ca_overlap_seconds: None,
    });
    cluster.spec.common.template.exporter = Some(Exporter {
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
/// which it serves with no pod restarted and every key still there. The pods run under a
/// platform-assigned UID and fsGroup in a namespace that enforces the restricted Pod
/// Security Standard (as on OpenShift): the private keys (mode 0440) are read through the
/// fsGroup.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_serves_certificates_the_operator_issues_per_member() {
    let env = Env::start().await;
    let ns = env.namespace.as_str();
    let name = "issued";
    let secrets = &env.apis.secrets;
    enforce_restricted(&env.client, ns).await.unwrap();
    let mut cluster = valkey_cluster(name, 3, 1, false);
    cluster.spec.common.tls = Some(issued::operator_issued(TlsAuthClients::Required));
    with_assigned_identity(&mut cluster.spec.common.template);
    let created = Instant::now();
    env.apis.create(&cluster).await.unwrap();
    env.ready(name, FORM).await;
    eprintln!("issued: Ready {:?} after creation", created.elapsed());
    let access = env.exact_access(name, 3, 1).await;
    env.healthy(name, &access, 3, 1).await;
    for m in &access.members {
        let info = access.cli(&m.ip, &["INFO", "server"]);
        runs_as_assigned(&info).unwrap_or_else(|e| panic!("{}: {e:#}", m.name));
    }
    let tls = access.tls.clone().expect("the cluster has tls");
    // Clients trust the CA of `<name>-ca`: every member's Secret carries the same one.
    let ca = issued::assert_ca_published(secrets, name).await;
    let mut seen = Vec::new();
    for m in &access.members {
        let node = env.apis.nodes.get(&m.name).await.unwrap();
        let endpoint = node.status.and_then(|s| s.endpoint).expect("an endpoint");
        let service = endpoint.service_name.expect("a Service");
        assert_eq!(endpoint.cluster_ip.as_deref(), Some(m.ip.as_str()));
        let names = [
            m.ip.clone(),
            service.clone(),
            format!("{service}.{ns}.svc"),
            format!("{service}.{ns}.svc.cluster.local"),
        ];
        let at = (m.name.as_str(), m.ip.as_str());
        let own = issued::assert_serves_own(secrets, &tls, at, &ca, CLIENT_PORT, &names).await;
        let on_bus = issued::assert_serves_own(secrets, &tls, at, &ca, BUS_PORT, &names).await;
        assert_eq!(on_bus, own, "{}: one certificate on both ports", m.name);
        // Another member's name is not in it.
        let other = access.members.iter().find(|o| o.name != m.name).unwrap();
        issued::assert_not_named(&tls, &m.ip, CLIENT_PORT, &other.ip).await;
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
    let before = secret_text(secrets, &secret, "tls.crt").await.unwrap();
    secrets.delete(&secret, &Default::default()).await.unwrap();
    let deleted = Instant::now();
    let wanted = env
        .wait("a new certificate for the member", SETTLE, || {
            issued::reissued(secrets, &secret, &before)
        })
        .await;
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
    /// The test Secret's one name ([`e2e_kit::valkey_tls::SERVER_NAME`]).
    ServerName,
    /// The member's own address (certificates the operator issues name it).
    Address,
}

/// Turns `tls.plainTextClients` of the cluster `name` on or off and waits until every member
/// answers on 6380, or refuses it: each does once the roll has replaced its pod.
async fn plain_text_clients(env: &Env, name: &str, access: &Access, on: bool) {
    env.apis
        .patch(
            name,
            serde_json::json!({"spec": {"tls": {"plainTextClients": on}}}),
        )
        .await
        .unwrap();
    let password = access.password.clone().unwrap_or_default();
    let what = match on {
        true => "every member to answer plain text on 6380",
        false => "every member to refuse 6380",
    };
    env.wait(what, ROLL, || async {
        let pending: Vec<String> = access
            .members
            .iter()
            .filter(|m| {
                let answer = plain_text_cli(&m.ip, &password, &["PING"]);
                match on {
                    true => answer != "PONG",
                    false => !connection_refused(&answer),
                }
            })
            .map(|m| m.name.clone())
            .collect();
        Ok(pending
            .is_empty()
            .then_some(())
            .ok_or(format!("not yet: {pending:?}")))
    })
    .await;
}

/// The (name, port) pairs of the Service `name`.
async fn service_ports(env: &Env, name: &str) -> Vec<(String, i32)> {
    let ns = env.namespace.as_str();
    let service: k8s_openapi::api::core::v1::Service =
        kube::Api::namespaced(env.client.clone(), ns)
            .get(name)
            .await
            .unwrap();
    service
        .spec
        .and_then(|s| s.ports)
        .unwrap_or_default()
        .into_iter()
        .map(|p| (p.name.unwrap_or_default(), p.port))
        .collect()
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

/// `tls.plainTextClients` turned on and off on a running TLS cluster: the members roll onto
/// a plain-text client port (6380, on their Services too) beside TLS on 6379; a plain-text
/// client is redirected to the plain-text ports and a TLS client to the TLS ones; the bus
/// and replication stay TLS. Turned off, the members roll back and 6380 is closed. Every
/// key written before, through either port, is still there.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn plain_text_clients_are_served_beside_tls_while_asked() {
    let env = Env::start().await;
    let name = "both";
    let mut cluster = valkey_cluster(name, 2, 1, false);
    cluster.spec.common.tls = Some(TopologyTls::default());
    env.apis.create(&cluster).await.unwrap();
    env.ready(name, FORM).await;
    let access = env.exact_access(name, 2, 1).await;
    env.healthy(name, &access, 2, 1).await;
    // Written over TLS with valkey-cli (the test's own cluster client speaks no TLS).
    for i in 0..100 {
        let key = format!("tls:{i}");
        assert_eq!(access.cli_cluster(&["SET", &key, &key]), "OK", "{key}");
    }
    let password = access.password.clone().unwrap();
    let plain = |ip: &str, args: &[&str]| plain_text_cli(ip, &password, args);
    let first = &access.members[0];
    let closed = plain(&first.ip, &["PING"]);
    assert!(connection_refused(&closed), "6380 before: {closed}");

    let members = env.apis.members(name).await.unwrap();
    let pods_before = env.pod_starts(&members).await;
    let turned = Instant::now();
    plain_text_clients(&env, name, &access, true).await;
    eprintln!(
        "both: plain text on every member {:?} after asking",
        turned.elapsed()
    );
    env.ready(name, ROLL).await;
    env.healthy(name, &access, 2, 1).await;
    // Each member took its new port in a new pod: the roll, one at a time.
    let pods_after = env.pod_starts(&members).await;
    for (member, (uid, _)) in &pods_before {
        assert_ne!(&pods_after[member].0, uid, "{member}'s pod was replaced");
    }

    // Each client is sent to the ports of its own kind.
    let slots_ports = |text: String| -> Vec<String> {
        text.lines()
            .filter(|l| *l == "6379" || *l == "6380")
            .map(str::to_string)
            .collect()
    };
    let over_plain = slots_ports(plain(&first.ip, &["CLUSTER", "SLOTS"]));
    assert!(
        !over_plain.is_empty() && over_plain.iter().all(|p| p == "6380"),
        "{over_plain:?}"
    );
    let over_tls = slots_ports(access.cli(&first.ip, &["CLUSTER", "SLOTS"]));
    assert!(
        !over_tls.is_empty() && over_tls.iter().all(|p| p == "6379"),
        "{over_tls:?}"
    );
    // Keys of both shards through one member's plain-text port, following redirections.
    for i in 0..50 {
        let key = format!("plain:{i}");
        assert_eq!(plain(&first.ip, &["-c", "SET", &key, &key]), "OK", "{key}");
        assert_eq!(
            access.cli_cluster(&["GET", &key]),
            key,
            "{key} read over TLS"
        );
    }
    for m in &access.members {
        assert_eq!(access.cli(&m.ip, &["PING"]), "PONG", "{} over TLS", m.name);
        // Replication and the bus stay TLS.
        let info = access.admin_cli(&m.ip, &["CONFIG", "GET", "tls-replication"]);
        assert_eq!(info, "tls-replication\nyes", "{}", m.name);
        let info = access.admin_cli(&m.ip, &["CONFIG", "GET", "tls-cluster"]);
        assert_eq!(info, "tls-cluster\nyes", "{}", m.name);
        let ports = service_ports(&env, &m.name).await;
        assert!(
            ports.contains(&("valkey-plain".to_string(), 6380)),
            "{}: {ports:?}",
            m.name
        );
    }

    plain_text_clients(&env, name, &access, false).await;
    env.ready(name, ROLL).await;
    env.healthy(name, &access, 2, 1).await;
    for m in &access.members {
        let names: Vec<String> = service_ports(&env, &m.name)
            .await
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        assert!(
            !names.contains(&"valkey-plain".to_string()),
            "{}: {names:?}",
            m.name
        );
    }
    for key in (0..100)
        .map(|i| format!("tls:{i}"))
        .chain((0..50).map(|i| format!("plain:{i}")))
    {
        assert_eq!(access.cli_cluster(&["GET", &key]), key, "{key}");
    }
    env.finish().await;
}
