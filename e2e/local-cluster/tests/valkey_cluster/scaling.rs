//! Scenario 1: a cluster forms, scales out and in, and keeps every key.

use crd_types::names::{cluster_member_name, generated_user_secret_name};
use crd_types::users::User;
use e2e_kit::cluster_testing::Access;
use e2e_kit::cluster_testing::{DataSet, SLOTS, slots_by_primary, valkey_cluster};
use e2e_kit::network_policy::{self, admits, applies_to, controller_pod, endpoint};
use e2e_kit::testing::valkey_cli_as;
use serde_json::json;

use crate::env::{Env, SETTLE};

/// Keys of scenario 1 (loading them takes a few seconds here).
const KEYS: usize = 100_000;

/// Scenario 1: 3x1 forms; 100k keys; shards 3 -> 4, replicas 1 -> 2 -> 1, shards 4 -> 3,
/// each step Ready and checked, every key read back, removed members deleted and forgotten;
/// a `spec.users` user works as its rules say on every member, the added ones included.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_forms_scales_and_keeps_every_key() {
    let env = Env::start().await;
    let name = "grow";
    let mut cluster = valkey_cluster(name, 3, 1, false);
    cluster.spec.common.users = Some(vec![User {
        name: "app".into(),
        rules: ["~app:*", "+@read", "+@write", "+ping"]
            .map(String::from)
            .to_vec(),
        password_secret_ref: None,
        password_overlap_seconds: 300,
    }]);
    let access = env.create_ready(cluster).await;
    app_user_on_every_member(&env, name, &access).await;
    env.passwords_guard(name, &access).await;
    network_policy_keeps_the_bus_to_members(&env, name).await;
    // The planner places replicas; Valkey's own replica migration is off.
    for m in &access.members {
        assert_eq!(
            access.admin_cli(&m.ip, &["CONFIG", "GET", "cluster-allow-replica-migration"]),
            "cluster-allow-replica-migration\nno"
        );
    }
    env.wait(
        "topology-controller Events about the cluster",
        SETTLE,
        || async {
            let events = env.apis.topology_events(name).await?;
            Ok(if events.is_empty() {
                Err("none yet".to_string())
            } else {
                Ok(())
            })
        },
    )
    .await;

    // A client that follows redirections reads what it wrote, on every shard.
    let pairs = [
        ("alpha", "1"),
        ("beta", "2"),
        ("gamma", "3"),
        ("delta", "4"),
    ];
    for (key, value) in pairs {
        assert_eq!(access.cli_cluster(&["SET", key, value]), "OK");
    }
    for (key, value) in pairs {
        assert_eq!(access.cli_cluster(&["GET", key]), value);
    }

    let data = DataSet::new("key", KEYS);
    let took = data.load(&access).await.unwrap();
    eprintln!("{name}: loaded {KEYS} keys in {took:?}");
    data.verify(&access).await.unwrap();

    // 3 -> 4 shards: a quarter of the slots move, 4096 each.
    let access = env.reshape(name, json!({"shards": 4}), 4, 1, &data).await;
    let view = access.nodes_seen_by(&access.members[0].ip).unwrap();
    let counts = slots_by_primary(&view);
    assert_eq!(
        counts.values().copied().collect::<Vec<_>>(),
        vec![4096; 4],
        "{counts:?}"
    );
    for (key, value) in pairs {
        assert_eq!(access.cli_cluster(&["GET", key]), value);
    }

    // Replicas 1 -> 2 -> 1.
    let access = env
        .reshape(name, json!({"replicasPerShard": 2}), 4, 2, &data)
        .await;
    app_user_on_every_member(&env, name, &access).await;
    let third: Vec<String> = (0..4).map(|s| cluster_member_name(name, s, 2)).collect();
    let removed = Env::ids(&access, &third);
    env.reshape(name, json!({"replicasPerShard": 1}), 4, 1, &data)
        .await;
    env.gone(name, &removed).await;

    // 4 -> 3 shards: shard 3's slots move back, its members go.
    let last: Vec<String> = (0..2).map(|m| cluster_member_name(name, 3, m)).collect();
    let access = env.access(name).await;
    let removed = Env::ids(&access, &last);
    let access = env.reshape(name, json!({"shards": 3}), 3, 1, &data).await;
    env.gone(name, &removed).await;
    let view = access.nodes_seen_by(&access.members[0].ip).unwrap();
    let counts = slots_by_primary(&view);
    assert_eq!(counts.values().sum::<u32>(), SLOTS, "{counts:?}");
    assert!(
        counts.values().all(|c| (5461..=5462).contains(c)),
        "{counts:?}"
    );
    for (key, value) in pairs {
        assert_eq!(access.cli_cluster(&["GET", key]), value);
    }
    env.finish().await;
}

/// The cluster's NetworkPolicy judged against the live pods (the local cluster enforces
/// none): clients from the namespace and topology-controller's pods on 6379, the bus
/// between members only.
async fn network_policy_keeps_the_bus_to_members(env: &Env, name: &str) {
    let ns = env.namespace.as_str();
    let client = env.cluster.client().await.unwrap();
    let live = network_policy::live(
        &client,
        ns,
        &format!("{name}-cluster"),
        &format!("valkey.rs/cluster={name}"),
    )
    .await
    .unwrap()
    .expect("the cluster's NetworkPolicy");
    assert_eq!(live.members.len(), 6);
    for (pod, member) in &live.members {
        assert!(applies_to(&live.policy, member), "{pod} is not covered");
        for port in [6379, 16379] {
            assert!(admits(&live.policy, member, port), "{pod} -> {port}");
        }
    }
    let neighbour = endpoint(&client, ns, &[("app", "web")]).await.unwrap();
    let stranger = endpoint(&client, "kube-system", &[]).await.unwrap();
    let operator = controller_pod(&client, "topology-controller")
        .await
        .unwrap();
    assert!(admits(&live.policy, &neighbour, 6379));
    assert!(admits(&live.policy, &operator, 6379));
    for outsider in [&neighbour, &stranger, &operator] {
        assert!(
            !admits(&live.policy, outsider, 16379),
            "{outsider:?} on the bus"
        );
    }
    assert!(!admits(&live.policy, &stranger, 6379));
}

/// The `app` user of `spec.users` on every member: its key pattern and commands allowed,
/// others refused (the ACL check comes before any redirection).
async fn app_user_on_every_member(env: &Env, name: &str, access: &Access) {
    let secret_name = generated_user_secret_name(name, "app");
    let secret = env.apis.secrets.get(&secret_name).await.unwrap();
    let password = String::from_utf8(secret.data.unwrap()["password"].0.clone()).unwrap();
    let as_app = |ip: &str, args: &[&str]| valkey_cli_as(ip, Some((Some("app"), &password)), args);
    env.wait("app on every member", SETTLE, || async {
        Ok(access.members.iter().try_for_each(|m| {
            let pong = as_app(&m.ip, &["PING"]);
            (pong == "PONG")
                .then_some(())
                .ok_or(format!("{}: {pong}", m.name))
        }))
    })
    .await;
    for m in &access.members {
        for refused in [
            &["GET", "other"][..],
            &["CONFIG", "GET", "maxmemory"],
            &["CLUSTER", "NODES"],
        ] {
            let got = as_app(&m.ip, refused);
            assert!(got.starts_with("NOPERM"), "{}: {refused:?}: {got}", m.name);
        }
        let got = as_app(&m.ip, &["GET", "app:1"]);
        assert!(!got.starts_with("NOPERM"), "{}: {got}", m.name);
    }
}
