//! Replacing the CA the operator keeps for a TLS group, under a writer: data nodes load
//! each step live, sentinels are restarted one at a time to load theirs, and replication
//! and Sentinel never lose trust in each other.

use std::time::{Duration, Instant};

use crd_types::names::statefulset_pod_name;
use e2e_kit::replication_testing::{GroupAccess, GroupWriter, Route, valkey_replication};
use e2e_kit::sampler::Sampler;
use e2e_kit::topology::ca_replacement::{self, TlsMember};
use e2e_kit::valkey_tls::{ClientTls, both_cas, client_of_secret, secret_text};

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
    group.spec.common.tls = Some(ca_replacement::operator_tls(3600));
    let access = env.create_ready(group).await;
    let public = format!("{name}-ca");
    let old_ca = secret_text(secrets, &public, "ca.crt").await.unwrap();
    let old_only = access.tls.clone().expect("the group has tls");
    let uids = pod_uids(&env, name).await;

    let asked = Instant::now();
    env.apis
        .patch(name, ca_replacement::ask("leaked-1"))
        .await
        .unwrap();
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
    let new_ca = ca_replacement::next_ca(&bundle, &old_ca);
    env.wait("the status to say members trust both CAs", SETTLE, || {
        ca_replacement::trusting_both(&env.apis, name)
    })
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
    env.apis
        .patch(name, ca_replacement::overlap(0))
        .await
        .unwrap();
    let switched = Instant::now();
    env.wait(
        "every member's Secret to trust the new CA alone",
        FORM * 2,
        || {
            let names = access.data.iter().chain(&access.sentinels);
            ca_replacement::trusting_alone(secrets, names.map(|m| m.name.as_str()), &new_ca)
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
    env.wait("the status to say no replacement", SETTLE, || {
        ca_replacement::none_under_way(&env.apis, name)
    })
    .await;
    for m in &access.data {
        let pod = statefulset_pod_name(&m.name);
        let now = pod_uids(&env, name).await;
        assert_eq!(now.get(&pod), uids.get(&pod), "{} kept its pod", m.name);
        ca_replacement::assert_old_ca_refused(&old_only, &m.ip, DATA_PORT).await;
    }
    ca_replacement::assert_steps_reported(&env.apis, name).await;
    env.finish().await;
}

/// Waits until every data node and sentinel holds `ca` in its Secret and serves its
/// Secret's certificate, as `tls` sees it (checking its IP).
async fn wait_serving_own(env: &Env, tls: &ClientTls, access: &GroupAccess, ca: &str, what: &str) {
    let members: Vec<TlsMember> = (access.data.iter().map(|m| (m, &[DATA_PORT])))
        .chain(access.sentinels.iter().map(|s| (s, &[SENTINEL_PORT])))
        .map(|(m, ports)| TlsMember {
            name: &m.name,
            ip: &m.ip,
            ports,
        })
        .collect();
    env.wait(what, FORM * 2, || {
        ca_replacement::serving_own(&env.apis.secrets, tls, &members, ca)
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
