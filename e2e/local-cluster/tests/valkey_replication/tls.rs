//! `spec.tls`: a group whose data nodes and sentinels serve a Secret's certificate, on TLS
//! only, and load a renewed certificate without a restart.

use std::time::{Duration, Instant};

use crd_types::names::statefulset_pod_name;
use crd_types::template::{Exporter, TlsAuthClients, TopologyTls};
use e2e_kit::replication_testing::{GroupWriter, Route, valkey_replication};
use e2e_kit::testing::{connection_refused, plain_text_cli, valkey_cli_as};
use e2e_kit::topology::issued;
use e2e_kit::valkey_tls::{create_secret, renew_secret, secret_text};
use local_cluster::images::exporter_image;

use crate::env::{Env, FORM, SETTLE, nothing_lost};
use crate::restarts::pod_uids;

const EXPORTER_PORT: i32 = 9121;

/// The member's exporter scrapes it over TLS, presenting the node's certificate
/// (`authClients: Required`).
async fn scraped(env: &Env, member: &str, ip: &str) {
    let addr = format!("{ip}:{EXPORTER_PORT}");
    env.wait(
        &format!("{member}'s exporter to scrape it"),
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

/// What valkey-cli says when a TLS port closes its plain-text connection.
fn closed(answer: &str) -> bool {
    answer.contains("Server closed the connection") || answer.contains("Connection reset")
}

/// The group forms over TLS: replication (`master_link_status:up` on each replica), the
/// sentinels (which agree on the primary and list every member) and the operator all speak
/// TLS. Plain text and TLS without a client certificate (`authClients: Required`) are refused on
/// every member. A renewed certificate in the Secret is served by every data node with no
/// pod restarted and no acknowledged write lost. Sentinels read TLS files only at start
/// (they have no CONFIG SET; 8.x has no reload): each is evicted, one at a time, and serves
/// the renewed certificate once back; the group ends Ready with Valkey and Sentinel agreeing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_group_speaks_only_tls_and_loads_a_renewed_certificate_live() {
    let env = Env::start().await;
    let name = "tls";
    let secret_name = "tls-certificate";
    let secrets = &env.apis.secrets;
    let (ca, first) = create_secret(secrets, secret_name).await.unwrap();
    let mut group = valkey_replication(name, 2, 3, false);
    group.spec.common.tls = Some(TopologyTls {
        secret_name: Some(secret_name.into()),
        auth_clients: TlsAuthClients::Required,
        plain_text_clients: false,
        ca_overlap_seconds: None,
    });
    group.spec.common.template.exporter = Some(Exporter {
        image: exporter_image().unwrap(),
        port: EXPORTER_PORT,
        resources: None,
    });
    // Ready, and Valkey and Sentinel agree with status, asked over TLS.
    let access = env.create_ready(group).await;
    let tls = access.tls.clone().expect("the group has tls");

    let members: Vec<(&str, &str, u16)> = access
        .data
        .iter()
        .map(|m| (m.name.as_str(), m.ip.as_str(), 6379))
        .chain(
            access
                .sentinels
                .iter()
                .map(|m| (m.name.as_str(), m.ip.as_str(), 26379)),
        )
        .collect();
    for m in &access.data {
        assert_eq!(access.cli(&m.ip, &["PING"]), "PONG", "{} over TLS", m.name);
        let plain = valkey_cli_as(&m.ip, Some((None, &access.password)), &["PING"]);
        assert!(closed(&plain), "{} in plain text: {plain}", m.name);
        eprintln!("tls: {} in plain text: {plain:?}", m.name);
        let info = access.cli(&m.ip, &["INFO", "replication"]);
        if info.contains("role:slave") {
            assert!(info.contains("master_link_status:up"), "{info}");
        }
    }
    for s in &access.sentinels {
        assert_eq!(access.sentinel_cli(&s.ip, &["PING"]), "PONG");
        let plain = std::process::Command::new("timeout")
            .args(["10", "valkey-cli", "-h", &s.ip, "-p", "26379", "PING"])
            .output()
            .unwrap();
        let plain = String::from_utf8_lossy(&plain.stdout).to_string()
            + &String::from_utf8_lossy(&plain.stderr);
        assert!(closed(&plain), "{} in plain text: {plain}", s.name);
    }
    // A TLS client without a certificate is refused (authClients: Required).
    let ca_file = std::env::temp_dir().join(format!("valkey-e2e-ca-{}.crt", std::process::id()));
    std::fs::write(&ca_file, &first.ca).unwrap();
    let anonymous = std::process::Command::new("timeout")
        .args(["10", "valkey-cli", "--tls", "--cacert"])
        .arg(&ca_file)
        .args(["-h", &access.data[0].ip, "-p", "6379", "PING"])
        .env("REDISCLI_AUTH", &access.password)
        .output()
        .unwrap();
    let anonymous = String::from_utf8_lossy(&anonymous.stdout).to_string()
        + &String::from_utf8_lossy(&anonymous.stderr);
    assert!(!anonymous.contains("PONG"), "{anonymous}");
    eprintln!("tls: TLS without a certificate: {anonymous:?}");
    for (member, ip, port) in &members {
        let served = tls.served(ip, *port).await.unwrap();
        assert_eq!(served, first.der().unwrap(), "{member} serves the Secret's");
        scraped(&env, member, ip).await;
    }

    // Renewal under a writer.
    let service = access.service_ip.clone().unwrap();
    let writer = GroupWriter::start(&access, Route::Service(service), "tls");
    writer
        .progressed(50, Duration::from_secs(30))
        .await
        .unwrap();
    let uids = pod_uids(&env, name).await;
    let renewed = renew_secret(secrets, secret_name, &ca).await.unwrap();
    let changed = Instant::now();
    let wanted = renewed.der().unwrap();
    let stale = |members: Vec<(&'static str, String, String, u16)>| {
        let tls = tls.clone();
        let wanted = wanted.clone();
        async move {
            let mut stale = Vec::new();
            for (_, member, ip, port) in members {
                match tls.served(&ip, port).await {
                    Ok(served) if served == wanted => {}
                    Ok(_) => stale.push(format!("{member} serves the old one")),
                    Err(e) => stale.push(format!("{member}: {e:#}")),
                }
            }
            stale
        }
    };
    let owned: Vec<(&'static str, String, String, u16)> = members
        .iter()
        .map(|(m, ip, port)| {
            let kind = if *port == 6379 { "data" } else { "sentinel" };
            (kind, m.to_string(), ip.to_string(), *port)
        })
        .collect();
    let data_nodes: Vec<_> = owned.iter().filter(|m| m.0 == "data").cloned().collect();
    env.wait(
        "every data node to serve the renewed certificate",
        SETTLE * 2,
        || async {
            let stale = stale(data_nodes.clone()).await;
            Ok(stale.is_empty().then_some(()).ok_or(stale.join("; ")))
        },
    )
    .await;
    eprintln!(
        "tls: every data node serves the renewed certificate {:?} after the Secret changed",
        changed.elapsed()
    );
    env.wait(
        "every sentinel to serve the renewed certificate",
        FORM,
        || async {
            let stale = stale(owned.clone()).await;
            Ok(stale.is_empty().then_some(()).ok_or(stale.join("; ")))
        },
    )
    .await;
    eprintln!(
        "tls: every sentinel serves the renewed certificate {:?} after the Secret changed",
        changed.elapsed()
    );
    writer
        .progressed(50, Duration::from_secs(30))
        .await
        .unwrap();
    let status = env.ready_agreeing(name, None, SETTLE).await;
    nothing_lost(name, [writer], &access).await;
    eprintln!("tls: Ready with {:?} primary", status.current_primary);

    // Data nodes kept their pods and containers; each sentinel was evicted once.
    let now = pod_uids(&env, name).await;
    for m in &access.data {
        let pod = statefulset_pod_name(&m.name);
        assert_eq!(now.get(&pod), uids.get(&pod), "{} kept its pod", m.name);
        let statuses = env.apis.pods.get(&pod).await.unwrap().status.unwrap();
        let restarts: i32 = statuses
            .container_statuses
            .iter()
            .flatten()
            .filter(|c| c.name == "valkey")
            .map(|c| c.restart_count)
            .sum();
        assert_eq!(restarts, 0, "{}'s valkey container did not restart", m.name);
    }
    for s in &access.sentinels {
        let pod = statefulset_pod_name(&s.name);
        assert_ne!(now.get(&pod), uids.get(&pod), "{} was restarted", s.name);
    }
    let events = |reason: &'static str| {
        let apis = &env.apis;
        async move { apis.group_events(name, Some(reason)).await.unwrap() }
    };
    assert!(!events("CertificateReloaded").await.is_empty());
    assert!(events("CertificateRefused").await.is_empty());
    // One Event per sentinel, none repeated (a repeat would make it a series).
    let restarted = events("SentinelRestarted").await;
    for s in &access.sentinels {
        let about: Vec<_> = restarted
            .iter()
            .filter(|e| e.related.as_ref().and_then(|r| r.name.as_deref()) == Some(&s.name))
            .collect();
        assert_eq!(about.len(), 1, "{}: {restarted:?}", s.name);
        assert_eq!(about[0].series, None, "{} evicted once", s.name);
    }
    let _ = std::fs::remove_file(ca_file);
    env.finish().await;
}

/// `spec.tls` without a Secret: the operator keeps a CA (its certificate alone in
/// `<name>-ca`) and gives every data node and sentinel a certificate of its own, naming its Service and, for a data node, the
/// group's read-write and read-only Services (a writer checking the read-write Service's
/// name writes through it), for a sentinel the sentinel Service. A data node's and a
/// sentinel's Secrets deleted under the writer are issued again: the data node loads its
/// new certificate live, the sentinel is evicted and starts with it; nothing acknowledged
/// is lost and the group ends Ready with Valkey and Sentinel agreeing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_group_serves_certificates_the_operator_issues_per_member() {
    let env = Env::start().await;
    let ns = env.namespace.as_str();
    let name = "issued";
    let secrets = &env.apis.secrets;
    let mut group = valkey_replication(name, 2, 3, false);
    group.spec.common.tls = Some(issued::operator_issued(TlsAuthClients::Optional));
    let created = Instant::now();
    let access = env.create_ready(group).await;
    eprintln!("issued: Ready {:?} after creation", created.elapsed());
    let tls = access.tls.clone().expect("the group has tls");
    // Clients trust the CA of `<name>-ca`: every member's Secret carries the same one.
    let ca = issued::assert_ca_published(secrets, name).await;
    let shared = [
        format!("{name}.{ns}.svc"),
        format!("{name}-replicas.{ns}.svc"),
    ];
    for m in &access.data {
        let names = [m.ip.clone(), format!("{}.{ns}.svc", m.name)];
        let names: Vec<String> = names.into_iter().chain(shared.clone()).collect();
        let at = (m.name.as_str(), m.ip.as_str());
        issued::assert_serves_own(secrets, &tls, at, &ca, 6379, &names).await;
    }
    let sentinel_service = format!("{name}-sentinel.{ns}.svc");
    for s in &access.sentinels {
        let names = [s.ip.clone(), sentinel_service.clone()];
        let at = (s.name.as_str(), s.ip.as_str());
        issued::assert_serves_own(secrets, &tls, at, &ca, 26379, &names).await;
        // A sentinel's certificate does not name the data Services.
        issued::assert_not_named(&tls, &s.ip, 26379, &shared[0]).await;
    }

    // The writer checks the read-write Service's name on whichever node is primary.
    let service = access.service_ip.clone().unwrap();
    let writer = GroupWriter::start(&access, Route::Service(service), "issued");
    writer
        .progressed(50, Duration::from_secs(30))
        .await
        .unwrap();
    let uids = pod_uids(&env, name).await;
    let data_node = access.data[1].clone();
    let sentinel = access.sentinels[0].clone();
    let mut before = Vec::new();
    for m in [&data_node, &sentinel] {
        let secret = format!("{}-tls", m.name);
        before.push(secret_text(secrets, &secret, "tls.crt").await.unwrap());
        secrets.delete(&secret, &Default::default()).await.unwrap();
    }
    let deleted = Instant::now();
    let renewed = [(&data_node, 6379), (&sentinel, 26379)];
    env.wait(
        "the two members to serve new certificates",
        FORM,
        || async {
            let mut stale = Vec::new();
            for ((m, port), old) in renewed.iter().zip(&before) {
                let secret = format!("{}-tls", m.name);
                let wanted = match issued::reissued(secrets, &secret, old).await? {
                    Ok(wanted) => wanted,
                    Err(why) => {
                        stale.push(why);
                        continue;
                    }
                };
                match tls.served_as(&m.ip, *port, &m.ip).await {
                    Ok(served) if served == wanted => {}
                    Ok(_) => stale.push(format!("{} serves the old one", m.name)),
                    Err(e) => stale.push(format!("{}: {e:#}", m.name)),
                }
            }
            Ok(stale.is_empty().then_some(()).ok_or(stale.join("; ")))
        },
    )
    .await;
    eprintln!(
        "issued: {} and {} serve new certificates {:?} after their Secrets were deleted",
        data_node.name,
        sentinel.name,
        deleted.elapsed()
    );
    writer
        .progressed(50, Duration::from_secs(30))
        .await
        .unwrap();
    env.ready_agreeing(name, None, SETTLE).await;
    nothing_lost(name, [writer], &access).await;
    let now = pod_uids(&env, name).await;
    for m in &access.data {
        let pod = statefulset_pod_name(&m.name);
        assert_eq!(now.get(&pod), uids.get(&pod), "{} kept its pod", m.name);
    }
    let pod = statefulset_pod_name(&sentinel.name);
    assert_ne!(
        now.get(&pod),
        uids.get(&pod),
        "{} was restarted",
        sentinel.name
    );
    let events = |reason: &'static str| {
        let apis = &env.apis;
        async move { apis.group_events(name, Some(reason)).await.unwrap() }
    };
    assert!(!events("CertificateIssued").await.is_empty());
    assert!(!events("CertificateReloaded").await.is_empty());
    assert!(events("CertificateRefused").await.is_empty());

    // Plain-text clients beside TLS: the data nodes roll onto port 6380 and the group's
    // Services carry it; the sentinels stay as they are (TLS only).
    let uids = pod_uids(&env, name).await;
    env.apis
        .patch(
            name,
            serde_json::json!({"spec": {"tls": {"plainTextClients": true}}}),
        )
        .await
        .unwrap();
    let plain = |ip: &str, args: &[&str]| plain_text_cli(ip, &access.password, args);
    let read_write = access.service_ip.clone().unwrap();
    let read_only = access.replicas_service_ip.clone().unwrap();
    env.wait(
        "the data nodes and Services to serve 6380",
        FORM,
        || async {
            let mut closed: Vec<String> = access
                .data
                .iter()
                .filter(|m| plain(&m.ip, &["PING"]) != "PONG")
                .map(|m| m.name.clone())
                .collect();
            if plain(&read_write, &["SET", "plain", "text"]) != "OK" {
                closed.push("the read-write Service".into());
            }
            Ok(closed
                .is_empty()
                .then_some(())
                .ok_or(format!("not yet: {closed:?}")))
        },
    )
    .await;
    env.ready_agreeing(name, None, SETTLE).await;
    env.wait("the read-only Service to read it", SETTLE, || async {
        let got = plain(&read_only, &["GET", "plain"]);
        Ok((got == "text").then_some(()).ok_or(got))
    })
    .await;
    assert_eq!(
        access.cli(&read_write, &["GET", "plain"]),
        "text",
        "over TLS"
    );
    let now = pod_uids(&env, name).await;
    for s in &access.sentinels {
        let pod = statefulset_pod_name(&s.name);
        assert_eq!(now.get(&pod), uids.get(&pod), "{} kept its pod", s.name);
        let refused = plain(&s.ip, &["PING"]);
        assert!(connection_refused(&refused), "{}: {refused}", s.name);
    }
    env.finish().await;
}

/// On Valkey 9.1 a sentinel reloads a renewed certificate by itself (its start gave it
/// `tls-auto-reload-interval`, which its pod's annotation tells topology-controller): it
/// serves the renewed certificate with no eviction and no restart, as the data node does.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_9_1_sentinel_reloads_a_renewed_certificate_itself() {
    let env = Env::start().await;
    let name = "reload";
    let secret_name = "reload-certificate";
    let secrets = &env.apis.secrets;
    let (ca, _) = create_secret(secrets, secret_name).await.unwrap();
    let mut group = valkey_replication(name, 2, 1, false);
    group.spec.common.template.image = "valkey/valkey:9.1".into();
    group.spec.common.tls = Some(TopologyTls {
        secret_name: Some(secret_name.into()),
        auth_clients: TlsAuthClients::Required,
        plain_text_clients: false,
        ca_overlap_seconds: None,
    });
    let access = env.create_ready(group).await;
    let tls = access.tls.clone().expect("the group has tls");
    let members: Vec<(String, String, u16)> = access
        .data
        .iter()
        .map(|m| (m.name.clone(), m.ip.clone(), 6379))
        .chain(
            access
                .sentinels
                .iter()
                .map(|m| (m.name.clone(), m.ip.clone(), 26379)),
        )
        .collect();
    for s in &access.sentinels {
        let info = access.sentinel_cli(&s.ip, &["INFO", "server"]);
        assert!(info.contains("valkey_version:9.1."), "{}: {info}", s.name);
    }

    let uids = pod_uids(&env, name).await;
    let renewed = renew_secret(secrets, secret_name, &ca).await.unwrap();
    let changed = Instant::now();
    let wanted = renewed.der().unwrap();
    env.wait(
        "every member to serve the renewed certificate",
        FORM,
        || async {
            let mut stale = Vec::new();
            for (member, ip, port) in &members {
                match tls.served(ip, *port).await {
                    Ok(served) if served == wanted => {}
                    Ok(_) => stale.push(format!("{member} serves the old one")),
                    Err(e) => stale.push(format!("{member}: {e:#}")),
                }
            }
            Ok(stale.is_empty().then_some(()).ok_or(stale.join("; ")))
        },
    )
    .await;
    eprintln!(
        "tls: every member (9.1) serves the renewed certificate {:?} after the Secret changed",
        changed.elapsed()
    );
    assert_eq!(pod_uids(&env, name).await, uids, "no pod was replaced");
    for (member, _, _) in &members {
        let pod = env.apis.pods.get(&statefulset_pod_name(member)).await;
        let restarts: i32 = pod
            .unwrap()
            .status
            .and_then(|s| s.container_statuses)
            .unwrap_or_default()
            .iter()
            .map(|c| c.restart_count)
            .sum();
        assert_eq!(restarts, 0, "{member}: no container restarted");
    }
    let restarted = env.apis.group_events(name, Some("SentinelRestarted"));
    assert_eq!(restarted.await.unwrap(), [], "no sentinel was evicted");
    env.ready_agreeing(name, None, SETTLE).await;
    env.finish().await;
}
