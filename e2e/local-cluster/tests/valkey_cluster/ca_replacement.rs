//! Replacing the CA the operator keeps for a TLS cluster, under a writer: members come to
//! trust both CAs, then serve the new one's certificates, then trust it alone, with no
//! moment in which the bus or replication breaks and no pod restarted.

use std::time::Instant;

use e2e_kit::cluster_testing::{Access, AckedWriter, MemberAddr, valkey_cluster};
use e2e_kit::sampler::Sampler;
use e2e_kit::topology::ca_replacement::{self, TlsMember};
use e2e_kit::valkey_tls::{ClientTls, both_cas, client_of_secret, secret_text};
use local_cluster::controller_pods::Outage;

use crate::env::{Env, FORM, SETTLE};

const CLIENT_PORT: u16 = 6379;
const BUS_PORT: u16 = 16379;

/// A 2x1 cluster with operator-issued certificates is asked to replace its CA
/// (`valkey.rs/replace-ca`). With an overlap of an hour, `<name>-ca` holds both CAs and
/// every member loads both with a fresh certificate of the old CA, which a client trusting
/// the old CA alone still accepts; nothing more happens, not even after topology-controller
/// is killed and comes back. With the overlap set to 0, under a
/// writer acknowledged by replicas: every member serves a certificate of the new CA, then
/// trusts it alone. All along every member says `cluster_state:ok` and every replica's link
/// is up; no pod restarts, no acknowledged write is lost, a client trusting only the old CA
/// is refused at the end, and the previous keys read back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_operators_ca_is_replaced_under_a_writer_with_no_restart() {
    let env = Env::start_own().await;
    let name = "newca";
    let secrets = &env.apis.secrets;
    let mut cluster = valkey_cluster(name, 2, 1, false);
    cluster.spec.common.tls = Some(ca_replacement::operator_tls(3600));
    env.apis.create(&cluster).await.unwrap();
    env.ready(name, FORM).await;
    let access = env.exact_access(name, 2, 1).await;
    env.healthy(name, &access, 2, 1).await;
    let public = format!("{name}-ca");
    let old_ca = secret_text(secrets, &public, "ca.crt").await.unwrap();
    // Member 0's Secret: the old CA alone. Its in-memory config stays so.
    let old_only = access.tls.clone().expect("the cluster has tls");
    for i in 0..100 {
        let key = format!("newca:{i}");
        assert_eq!(access.cli_cluster(&["SET", &key, &key]), "OK");
    }
    let members = env.apis.members(name).await.unwrap();
    let starts = env.pod_starts(&members).await;

    // Asked: both CAs are trusted; certificates stay the old CA's during the overlap.
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
    let new_ca = ca_replacement::next_ca(&bundle, &old_ca);
    let what = "every member to trust both CAs (serving a fresh certificate of the old CA)";
    wait_serving_own(&env, &old_only, &access.members, &bundle, what).await;
    eprintln!(
        "newca: every member trusts both CAs {:?} after the ask",
        asked.elapsed()
    );
    let key_secret = secrets.get(&format!("{name}-ca-key")).await.unwrap();
    let data = key_secret.data.clone().unwrap_or_default();
    assert!(data.contains_key("next-ca.crt") && data.contains_key("next-ca.key"));
    let phase = key_secret
        .metadata
        .annotations
        .unwrap_or_default()
        .remove("valkey.rs/ca-replacement");
    assert_eq!(phase, None, "no switch while clients have their overlap");
    let told = env
        .wait("the status to say members trust both CAs", SETTLE, || {
            ca_replacement::trusting_both(&env.apis, name)
        })
        .await;
    let until = told
        .clients_until
        .expect("when clients must trust the new CA")
        .0;
    assert_eq!(until.as_second() - told.started.0.as_second(), 3600);

    // topology-controller killed while both CAs are trusted: the one that comes back reads
    // where the replacement stands from the Secrets, makes no other next CA and issues no
    // certificate again.
    let issued = |m: &MemberAddr| {
        let secret = format!("{}-tls", m.name);
        async move { secret_text(secrets, &secret, "tls.crt").await }
    };
    let mut before = Vec::new();
    for m in &access.members {
        before.push(issued(m).await.unwrap());
    }
    env.stop_topology_controller(Outage::Crash).await;
    let led = env.restart_topology_controller().await;
    eprintln!("newca: the restarted topology-controller reconciled {led:?} after its start");
    let next = secret_text(secrets, &format!("{name}-ca-key"), "next-ca.crt").await;
    assert_eq!(next.unwrap(), new_ca, "the same next CA");
    for (m, before) in access.members.iter().zip(&before) {
        assert_eq!(
            &issued(m).await.unwrap(),
            before,
            "{}'s certificate",
            m.name
        );
    }

    // The overlap cut to 0, under a writer whose client trusts both.
    let access = env.exact_access(name, 2, 1).await;
    let writer = AckedWriter::start(&access).await.unwrap();
    writer.progressed(100, SETTLE).await.unwrap();
    let sampled = access.clone();
    let sampler = Sampler::start(move || every_member_serving(&sampled));
    env.apis
        .patch(name, ca_replacement::overlap(0))
        .await
        .unwrap();
    let switched = Instant::now();
    env.wait(
        "every member's Secret to trust the new CA alone",
        SETTLE * 3,
        || {
            let names = access.members.iter().map(|m| m.name.as_str());
            ca_replacement::trusting_alone(secrets, names, &new_ca)
        },
    )
    .await;
    // Member 0's Secret now: the new CA alone (in a directory of its own: the sampler
    // reads the files of `access` meanwhile).
    let own = format!("{}-tls", access.members[0].name);
    let new_only = client_of_secret(secrets, &own, "newca-after")
        .await
        .unwrap();
    let what = "every member to serve a certificate of the new CA, trusting it alone";
    wait_serving_own(&env, &new_only, &access.members, &new_ca, what).await;
    eprintln!(
        "newca: replaced {:?} after the overlap ended",
        switched.elapsed()
    );
    writer.progressed(100, SETTLE).await.unwrap();
    let samples = sampler.stop();
    eprintln!(
        "newca: {} samples of every member during the replacement",
        samples.taken
    );
    assert!(samples.taken > 0);
    assert!(samples.failed.is_empty(), "{:?}", samples.failed);
    env.nothing_lost(name, "through the CA replacement", writer, &access)
        .await;

    assert_eq!(
        secret_text(secrets, &public, "ca.crt").await.unwrap(),
        new_ca
    );
    env.wait("the status to say no replacement", SETTLE, || {
        ca_replacement::none_under_way(&env.apis, name)
    })
    .await;
    let data = secrets
        .get(&format!("{name}-ca-key"))
        .await
        .unwrap()
        .data
        .unwrap_or_default();
    assert!(!data.contains_key("next-ca.crt") && !data.contains_key("next-ca.key"));
    for m in &access.members {
        ca_replacement::assert_old_ca_refused(&old_only, &m.ip, CLIENT_PORT).await;
    }
    assert_eq!(env.pod_starts(&members).await, starts, "no pod restarted");
    env.healthy(name, &access, 2, 1).await;
    for i in 0..100 {
        let key = format!("newca:{i}");
        assert_eq!(access.cli_cluster(&["GET", &key]), key);
    }
    ca_replacement::assert_steps_reported(&env.apis, name).await;
    env.finish().await;
}

/// Waits until each of `members` holds `ca` in its Secret and serves its Secret's
/// certificate on the client port and the bus, as `tls` sees it (checking its IP).
async fn wait_serving_own(
    env: &Env,
    tls: &ClientTls,
    members: &[MemberAddr],
    ca: &str,
    what: &str,
) {
    let members: Vec<TlsMember> = members
        .iter()
        .map(|m| TlsMember {
            name: &m.name,
            ip: &m.ip,
            ports: &[CLIENT_PORT, BUS_PORT],
        })
        .collect();
    env.wait(what, SETTLE * 3, || {
        ca_replacement::serving_own(&env.apis.secrets, tls, &members, ca)
    })
    .await;
}

/// What is wrong now: a member not at `cluster_state:ok`, a replica whose link to its
/// primary is down (asked over TLS, as `access` says).
fn every_member_serving(access: &Access) -> Vec<String> {
    let mut wrong: Vec<String> = access.serving().err().into_iter().collect();
    for m in &access.members {
        let info = access.cli(&m.ip, &["INFO", "replication"]);
        let replica = info.lines().any(|l| l.trim() == "role:slave");
        let up = info.lines().any(|l| l.trim() == "master_link_status:up");
        if replica && !up {
            wrong.push(format!("{}: {info}", m.name));
        }
    }
    wrong
}
