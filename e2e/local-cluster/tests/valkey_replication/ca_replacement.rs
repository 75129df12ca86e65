//! Replacing the CA the operator keeps for a TLS group, under a writer: data nodes load
//! each step live, sentinels are restarted one at a time to load theirs, and replication
//! and Sentinel never lose trust in each other.

use std::time::{Duration, Instant};

use crd_types::names::annotations::REPLACE_CA;
use crd_types::names::statefulset_pod_name;
use crd_types::rotation::CaReplacementPhase;
use crd_types::template::{TlsAuthClients, TopologyTls};
use e2e_kit::replication_testing::{GroupAccess, GroupWriter, Route, valkey_replication};
use e2e_kit::sampler::Sampler;
use e2e_kit::valkey_tls::{
    ClientTls, both_cas, client_of_secret, members_without_ca, not_serving_own, secret_text,
};

use crate::env::{Env, FORM, SETTLE, nothing_lost};
use crate::restarts::pod_uids;

const DATA_PORT: u16 = 6379;
const SENTINEL_PORT: u16 = 26379;

/// A group of 2 data nodes and 3 sentinels with operator-issued certificates is asked to
/// replace its CA. With an hour of overlap every member, sentinels too, comes to trust both
/// CAs while still serving the old one's certificates. With the overlap cut to 0, under a
/// writer through the read-write Service: every member ends serving a certificate of the
/// new CA and trusting it alone; the replica's link stays up all along; no data node
/// restarts; nothing acknowledged is lost; the group ends Ready with Valkey and Sentinel
/// agreeing, and a client trusting only the old CA is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_operators_ca_is_replaced_under_a_writer() {
    let env = Env::start().await;
    let name = "newca";
    let secrets = &env.apis.secrets;
    let mut group = valkey_replication(name, 2, 3, false);
    group.spec.common.tls = Some(TopologyTls {
        secret_name: None,
        auth_clients: TlsAuthClients::Never,
        plain_text_clients: false,
        ca_overlap_seconds: Some(3600),
    });
    let access = env.create_ready(group).await;
    let public = format!("{name}-ca");
    let old_ca = secret_text(secrets, &public, "ca.crt").await.unwrap();
    let old_only = access.tls.clone().expect("the group has tls");
    let uids = pod_uids(&env, name).await;

    let asked = Instant::now();
    let annotate = serde_json::json!({"metadata": {"annotations": {REPLACE_CA: "leaked-1"}}});
    env.apis.patch(name, annotate).await.unwrap();
    let bundle = env
        .wait(&format!("{public} to hold both CAs"), SETTLE, || {
            both_cas(secrets, &public)
        })
        .await;
    let what = "every member to trust both CAs (serving a fresh certificate of the old CA)";
    wait_serving_own(&env, &old_only, &access, &bundle, what).await;
    eprintln!(
        "newca: every member trusts both CAs {:?} after the ask",
        asked.elapsed()
    );
    let new_ca = bundle[old_ca.trim_end().len()..].trim_start().to_string();
    let status = || async {
        let group = env.apis.groups.get(name).await?;
        anyhow::Ok(group.status.unwrap_or_default().ca_replacement)
    };
    env.wait(
        "the status to say members trust both CAs",
        SETTLE,
        || async {
            Ok(status()
                .await?
                .filter(|r| r.phase == CaReplacementPhase::Trusting && r.clients_until.is_some())
                .map(drop)
                .ok_or("not yet".to_string()))
        },
    )
    .await;

    // Data node 0's Secret now holds both CAs: the writer's client trusts both.
    let access = e2e_kit::replication_testing::access(&env.apis, name)
        .await
        .unwrap();
    let service = access.service_ip.clone().unwrap();
    let writer = GroupWriter::start(&access, Route::Service(service), "newca");
    writer
        .progressed(50, Duration::from_secs(30))
        .await
        .unwrap();
    let sampled = access.clone();
    let links = Sampler::start(move || replica_links_down(&sampled));
    let overlap = serde_json::json!({"spec": {"tls": {"caOverlapSeconds": 0}}});
    env.apis.patch(name, overlap).await.unwrap();
    let switched = Instant::now();
    env.wait(
        "every member's Secret to trust the new CA alone",
        FORM * 2,
        || async {
            let names = access
                .data
                .iter()
                .chain(&access.sentinels)
                .map(|m| m.name.as_str());
            let behind = members_without_ca(secrets, names, &new_ca).await?;
            Ok(behind
                .is_empty()
                .then_some(())
                .ok_or(format!("not yet: {behind:?}")))
        },
    )
    .await;
    // Data node 0's Secret now: the new CA alone (in a directory of its own: the sampler
    // reads the files of `access` meanwhile).
    let own = format!("{}-tls", access.data[0].name);
    let new_only = client_of_secret(secrets, &own, "newca-after")
        .await
        .unwrap();
    let what = "every member to serve a certificate of the new CA, trusting it alone";
    wait_serving_own(&env, &new_only, &access, &new_ca, what).await;
    eprintln!(
        "newca: replaced {:?} after the overlap ended",
        switched.elapsed()
    );
    writer
        .progressed(50, Duration::from_secs(30))
        .await
        .unwrap();
    let samples = links.stop();
    eprintln!("newca: {} samples of the replica's link", samples.taken);
    assert!(samples.taken > 0);
    assert!(samples.failed.is_empty(), "{:?}", samples.failed);
    env.ready_agreeing(name, None, SETTLE).await;
    nothing_lost(name, [writer], &access).await;

    assert_eq!(
        secret_text(secrets, &public, "ca.crt").await.unwrap(),
        new_ca
    );
    env.wait("the status to say no replacement", SETTLE, || async {
        Ok(status().await?.map_or(Ok(()), |r| Err(format!("{r:?}"))))
    })
    .await;
    for m in &access.data {
        let pod = statefulset_pod_name(&m.name);
        let now = pod_uids(&env, name).await;
        assert_eq!(now.get(&pod), uids.get(&pod), "{} kept its pod", m.name);
        let refused = old_only.served_as(&m.ip, DATA_PORT, &m.ip).await;
        let refused = format!("{:#}", refused.expect_err("the old CA is trusted no more"));
        assert!(refused.contains("UnknownIssuer"), "{refused}");
    }
    let refused = env
        .apis
        .group_events(name, Some("CertificateRefused"))
        .await;
    assert!(refused.unwrap().is_empty());
    let steps: Vec<String> = env
        .apis
        .group_events(name, Some("CertificateIssued"))
        .await
        .unwrap()
        .into_iter()
        .filter_map(|e| e.note)
        .collect();
    for step in [
        "the topology asks for it",
        "every member trusts both CAs",
        "it is now the CA",
    ] {
        assert!(steps.iter().any(|s| s.contains(step)), "{step}: {steps:?}");
    }
    env.finish().await;
}

/// Waits until every data node and sentinel holds `ca` in its Secret and serves its
/// Secret's certificate, as `tls` sees it (checking its IP).
async fn wait_serving_own(env: &Env, tls: &ClientTls, access: &GroupAccess, ca: &str, what: &str) {
    let secrets = &env.apis.secrets;
    let members: Vec<(&str, &str, u16)> = (access
        .data
        .iter()
        .map(|m| (m.name.as_str(), m.ip.as_str(), DATA_PORT)))
    .chain(
        access
            .sentinels
            .iter()
            .map(|s| (s.name.as_str(), s.ip.as_str(), SENTINEL_PORT)),
    )
    .collect();
    env.wait(what, FORM * 2, || async {
        let mut behind = Vec::new();
        for (name, ip, port) in &members {
            let wrong = not_serving_own(secrets, tls, (name, ip), &[*port], ca).await?;
            behind.extend(wrong);
        }
        Ok(behind.is_empty().then_some(()).ok_or(behind.join("; ")))
    })
    .await;
}

/// The data nodes that are neither a primary nor a replica with its link up.
fn replica_links_down(access: &GroupAccess) -> Vec<String> {
    let mut down = Vec::new();
    for m in &access.data {
        let info = access.cli(&m.ip, &["INFO", "replication"]);
        let primary = info.lines().any(|l| l.trim() == "role:master");
        let up = info.lines().any(|l| l.trim() == "master_link_status:up");
        if !primary && !up {
            down.push(format!("{}: {info}", m.name));
        }
    }
    down
}
