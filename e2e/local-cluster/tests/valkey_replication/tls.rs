//! `spec.tls`: a group whose data nodes and sentinels serve a Secret's certificate, on TLS
//! only, and load a renewed certificate without a restart.

use std::time::{Duration, Instant};

use crd_types::names::statefulset_pod_name;
use crd_types::template::{Tls, TlsAuthClients};
use kube::api::PostParams;
use local_cluster::replication_testing::{GroupWriter, Route, valkey_replication};
use local_cluster::testing::valkey_cli_as;
use local_cluster::valkey_tls::TestCa;

use crate::env::{Env, FORM, SETTLE, nothing_lost};
use crate::restarts::pod_uids;

/// The group forms over TLS: replication (`master_link_status:up` on each replica), the
/// sentinels (which agree on the primary and list every member) and the operator all speak
/// TLS. Plain text and TLS without a client certificate (`authClients: Yes`) are refused on
/// every member. A renewed certificate in the Secret is served by every data node with no
/// pod restarted and no acknowledged write lost. Sentinels read TLS files only at start
/// (they have no CONFIG SET; 8.x has no reload): they serve the previous certificate until
/// restarted, and a restarted one serves the renewed one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_group_speaks_only_tls_and_loads_a_renewed_certificate_live() {
    let env = Env::start().await;
    let name = "tls";
    let secret_name = "tls-certificate";
    let ca = TestCa::new().unwrap();
    let first = ca.issue().unwrap();
    let secrets = &env.apis.secrets;
    secrets
        .create(&PostParams::default(), &first.secret(secret_name))
        .await
        .unwrap();
    let mut group = valkey_replication(name, 2, 3, false);
    group.spec.tls = Some(Tls {
        secret_name: secret_name.into(),
        auth_clients: TlsAuthClients::Yes,
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
        assert_ne!(plain, "PONG", "{} answers plain text", m.name);
        eprintln!("tls: {} in plain text: {plain:?}", m.name);
        let info = access.cli(&m.ip, &["INFO", "replication"]);
        if info.contains("role:slave") {
            assert!(info.contains("master_link_status:up"), "{info}");
        }
    }
    for s in &access.sentinels {
        assert_eq!(access.sentinel_cli(&s.ip, &["PING"]), "PONG");
    }
    // A TLS client without a certificate is refused (authClients: Yes).
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
    for (member, ip, port) in &members {
        let served = tls.served(ip, *port).await.unwrap();
        assert_eq!(served, first.der().unwrap(), "{member} serves the Secret's");
    }

    // Renewal under a writer.
    let service = access.service_ip.clone().unwrap();
    let writer = GroupWriter::start(&access, Route::Service(service), "tls");
    writer
        .progressed(50, Duration::from_secs(30))
        .await
        .unwrap();
    let uids = pod_uids(&env, name).await;
    let renewed = ca.issue().unwrap();
    secrets
        .replace(secret_name, &PostParams::default(), &{
            let mut s = renewed.secret(secret_name);
            s.metadata.resource_version = secrets
                .get(secret_name)
                .await
                .unwrap()
                .metadata
                .resource_version;
            s
        })
        .await
        .unwrap();
    let changed = Instant::now();
    let wanted = renewed.der().unwrap();
    let data_nodes = &members[..access.data.len()];
    env.wait(
        "every data node to serve the renewed certificate",
        SETTLE * 2,
        || async {
            let mut stale = Vec::new();
            for (member, ip, port) in data_nodes {
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
        "tls: every data node serves the renewed certificate {:?} after the Secret changed",
        changed.elapsed()
    );
    writer
        .progressed(50, Duration::from_secs(30))
        .await
        .unwrap();
    nothing_lost(name, [writer], &access).await;
    assert_eq!(pod_uids(&env, name).await, uids, "no pod restarted");
    let reloaded = env
        .apis
        .group_events(name, Some("CertificateReloaded"))
        .await
        .unwrap();
    assert!(!reloaded.is_empty(), "a CertificateReloaded Event");
    let refused = env
        .apis
        .group_events(name, Some("CertificateRefused"))
        .await
        .unwrap();
    assert!(refused.is_empty(), "{refused:?}");

    // Sentinels: the previous certificate until they restart.
    for s in &access.sentinels {
        let served = tls.served(&s.ip, 26379).await.unwrap();
        assert_eq!(served, first.der().unwrap(), "{} cannot reload", s.name);
    }
    let sentinel = &access.sentinels[0];
    env.apis
        .kill_pod(&statefulset_pod_name(&sentinel.name))
        .await
        .unwrap();
    env.wait(
        "the restarted sentinel to serve the renewed certificate",
        FORM,
        || async {
            Ok(match tls.served(&sentinel.ip, 26379).await {
                Ok(served) if served == wanted => Ok(()),
                Ok(_) => Err("the old one".to_string()),
                Err(e) => Err(format!("{e:#}")),
            })
        },
    )
    .await;
    env.ready(name, SETTLE).await;
    let _ = std::fs::remove_file(ca_file);
    env.finish().await;
}
