//! Scenario 1: a group forms.

use crd_types::node::Role;
use local_cluster::replication_testing::valkey_replication;

use crate::env::Env;

/// 3 data nodes and 3 sentinels form: one primary, two linked replicas, every sentinel
/// knows exactly 2 replicas and 2 other sentinels, all by Service IP; status says so, each
/// data node's status.valkey agrees with Valkey, and the Events tell the steps.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_data_nodes_and_three_sentinels_form() {
    let env = Env::start().await;
    let name = "form";
    let access = env
        .create_ready(valkey_replication(name, 3, 3, false))
        .await;
    let status = env.ready(name, crate::env::SETTLE).await;
    let primary = status.current_primary.clone().unwrap();
    assert_eq!(primary, "form-0", "data node 0 is the first primary");
    assert_eq!((status.ready_replicas, status.ready_sentinels), (3, 3));

    // Each data node's status.valkey says what Valkey says.
    for m in &access.data {
        let valkey = env
            .apis
            .nodes
            .get_status(&m.name)
            .await
            .unwrap()
            .status
            .and_then(|s| s.valkey)
            .unwrap_or_default();
        let want = if m.name == primary {
            Role::Primary
        } else {
            Role::Replica
        };
        assert_eq!(valkey.role, Some(want), "{}: {valkey:?}", m.name);
        if want == Role::Replica {
            assert_eq!(valkey.link_up, Some(true), "{}: {valkey:?}", m.name);
        }
    }

    // Passwords: clients need the default password; sentinels their own; min-replicas on.
    let ip = access.ip(&primary).unwrap();
    let anonymous = local_cluster::testing::valkey_cli(ip, &["GET", "k"]);
    assert!(anonymous.starts_with("NOAUTH"), "{anonymous}");
    assert_eq!(access.cli(ip, &["SET", "k", "v"]), "OK");
    assert_eq!(
        access.cli(ip, &["CONFIG", "GET", "min-replicas-to-write"]),
        "min-replicas-to-write\n1"
    );
    assert_ne!(access.password, access.sentinel_password);
    let sentinel = &access.sentinels[0].ip;
    assert_eq!(access.sentinel_cli(sentinel, &["PING"]), "PONG");
    let wrong = local_cluster::testing::valkey_cli_as(sentinel, None, &["-p", "26379", "PING"]);
    assert!(!wrong.contains("PONG"), "{wrong}");

    for reason in ["ReplicaAttached", "SentinelMonitoring"] {
        let events = env.apis.group_events(name, Some(reason)).await.unwrap();
        assert!(!events.is_empty(), "no {reason} Event");
    }
    env.finish();
}
