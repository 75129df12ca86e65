//! Scenario 1: a group forms.

use crd_types::node::Role;
use crd_types::template::Exporter;
use e2e_kit::network_policy::{self, admits, applies_to, controller_pod, endpoint};
use e2e_kit::replication_testing::{GroupAccess, valkey_replication};
use e2e_kit::testing::events_about;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use local_cluster::images::exporter_image;
use serde_json::json;

use crate::env::{Env, SETTLE};

const EXPORTER_PORT: i32 = 9121;

/// 3 data nodes and 3 sentinels form: one primary, two linked replicas, every sentinel
/// knows exactly 2 replicas and 2 other sentinels, all by Service IP; status says so, each
/// data node's status.valkey agrees with Valkey, and the Events tell the steps.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_data_nodes_and_three_sentinels_form() {
    let env = Env::start().await;
    let name = "form";
    let mut group = valkey_replication(name, 3, 3, false);
    group.spec.common.template.exporter = Some(Exporter {
        image: exporter_image().unwrap(),
        port: EXPORTER_PORT,
        resources: None,
    });
    let image = group.spec.common.template.image.clone();
    group.spec.sentinel.pod = Some(
        serde_json::from_value(json!({
            "labels": {"team": "quorum"},
            "env": [{"name": "TZ", "value": "UTC"}],
            "sidecars": [{"name": "idle", "image": image, "command": ["sleep", "2"]}],
        }))
        .unwrap(),
    );
    let access = env.create_ready(group).await;
    sentinels_have_their_own_pod_template(&env, name).await;
    let status = env.ready(name, SETTLE).await;
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
    let anonymous = e2e_kit::testing::valkey_cli(ip, &["GET", "k"]);
    assert!(anonymous.starts_with("NOAUTH"), "{anonymous}");
    assert_eq!(access.cli(ip, &["SET", "k", "v"]), "OK");
    assert_eq!(
        access.operator_cli(ip, &["CONFIG", "GET", "min-replicas-to-write"]),
        "min-replicas-to-write\n1"
    );
    assert_ne!(access.password, access.sentinel_password);
    let sentinel = &access.sentinels[0].ip;
    assert_eq!(access.sentinel_cli(sentinel, &["PING"]), "PONG");
    let wrong = e2e_kit::testing::valkey_cli_as(sentinel, None, &["-p", "26379", "PING"]);
    assert!(!wrong.contains("PONG"), "{wrong}");

    replication_user(&env, name, &access, &primary).await;
    sentinels_are_scraped(&env, &access).await;

    replicas_were_attached_once(&env, name, &access, &primary).await;
    let monitoring = env.apis.group_events(name, Some("SentinelMonitoring"));
    assert!(
        !monitoring.await.unwrap().is_empty(),
        "no SentinelMonitoring Event"
    );
    network_policy_follows_the_spec(&env, name).await;
    env.finish().await;
}

/// `sentinel.pod` reaches the sentinels' pods alone: the label, the env of the sentinel's
/// container and the sidecar, running or done (the e2e node agent runs a sidecar to
/// completion).
async fn sentinels_have_their_own_pod_template(env: &Env, name: &str) {
    use crd_types::names::{replication_member_name, sentinel_member_name, statefulset_pod_name};
    let pod = |member: String| async move {
        env.apis
            .pods
            .get(&statefulset_pod_name(&member))
            .await
            .unwrap()
    };
    let sentinel = pod(sentinel_member_name(name, 0)).await;
    assert_eq!(sentinel.metadata.labels.as_ref().unwrap()["team"], "quorum");
    let spec = sentinel.spec.unwrap();
    let valkey = spec.containers.iter().find(|c| c.name == "valkey").unwrap();
    assert!(
        valkey.env.iter().flatten().any(|e| e.name == "TZ"),
        "{valkey:?}"
    );
    assert!(
        spec.init_containers
            .iter()
            .flatten()
            .any(|c| c.name == "idle")
    );
    let ran = sentinel
        .status
        .unwrap()
        .init_container_statuses
        .unwrap_or_default();
    let idle = ran.iter().find(|c| c.name == "idle").unwrap();
    let state = idle.state.clone().unwrap_or_default();
    assert!(
        state.running.is_some() || state.terminated.as_ref().is_some_and(|t| t.exit_code == 0),
        "{state:?}"
    );
    let data = pod(replication_member_name(name, 0)).await;
    assert!(!data.metadata.labels.unwrap().contains_key("team"));
}

/// Each replica was made one exactly once, by one of the two ways a new group attaches
/// them. Its start script starts it as a replica when the primary is known before its pod
/// starts (the context names data node 0 once its Service has an address, and the
/// sentinels name it once they monitor); otherwise it starts as an empty primary and the
/// operator sends `REPLICAOF`, with a ReplicaAttached Event naming it. Which one happens
/// depends on how fast its pod starts.
async fn replicas_were_attached_once(env: &Env, name: &str, access: &GroupAccess, primary: &str) {
    let primary_ip = access.ip(primary).unwrap();
    let by_script = [
        format!("starting as a replica of {primary_ip}, the last seen"),
        format!("the sentinels name {primary_ip} primary: starting as its replica"),
    ];
    let attached = env.apis.group_events(name, Some("ReplicaAttached"));
    let attached = attached.await.unwrap();
    let params = kube::api::LogParams {
        container: Some(crd_types::names::VALKEY_CONTAINER.to_string()),
        ..Default::default()
    };
    for m in access.data.iter().filter(|m| m.name != primary) {
        let pod = crd_types::names::statefulset_pod_name(&m.name);
        let log = env.apis.pods.logs(&pod, &params).await.unwrap();
        let started_as_replica = log.lines().any(|l| by_script.iter().any(|b| l.contains(b)));
        let events: Vec<_> = attached
            .iter()
            .filter(|e| e.related.as_ref().and_then(|r| r.name.as_deref()) == Some(&m.name))
            .collect();
        let how = match (started_as_replica, events.len()) {
            (true, 0) => "by its start script",
            (false, 1) => "by the operator",
            _ => panic!(
                "{} should be attached once: started as replica {started_as_replica}, {} ReplicaAttached Events {events:?}; its log:\n{log}",
                m.name,
                events.len()
            ),
        };
        println!("form: {} was attached {how}", m.name);
    }
}

/// The template's exporter runs next to each sentinel too (as its read-only monitoring
/// user), and reports the group it monitors.
async fn sentinels_are_scraped(env: &Env, access: &GroupAccess) {
    for sentinel in &access.sentinels {
        let addr = format!("{}:{EXPORTER_PORT}", sentinel.ip);
        let metrics = env
            .wait(
                &format!("{}'s exporter to scrape it", sentinel.name),
                SETTLE,
                || async {
                    let body = local_cluster::operator::http_get(&addr, "/metrics").await;
                    Ok(body
                        .filter(|b| b.lines().any(|l| l == "redis_up 1"))
                        .ok_or_else(|| "no successful scrape yet".to_string()))
                },
            )
            .await;
        assert!(
            metrics.lines().any(|l| l == "redis_sentinel_masters 1"),
            "{}: {}",
            sentinel.name,
            metrics
                .lines()
                .filter(|l| l.starts_with("redis_sentinel"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

/// Replicas log in as `replication`, which may do nothing but replicate, and the default
/// user may not read its `masterauth` (nor run any admin command). A primary that loses the user (as one whose
/// config predates it would lack it) gets it back live, and its replicas' links come back.
async fn replication_user(env: &Env, name: &str, access: &GroupAccess, primary: &str) {
    let ip = access.ip(primary).unwrap();
    for m in &access.data {
        assert_eq!(
            access.operator_cli(&m.ip, &["CONFIG", "GET", "masteruser"]),
            "masteruser\nreplication"
        );
    }
    // The clients' user runs no admin command: the masterauth below is the operator's to read.
    e2e_kit::testing::assert_default_user_is_a_clients(|args| access.cli(ip, args), false);
    // Nor on a sentinel: the group stays the operator's to change.
    let sentinel = &access.sentinels[0].ip;
    e2e_kit::testing::assert_sentinel_default_user_is_a_clients(
        |args| access.sentinel_cli(sentinel, args),
        &access.name,
    );
    let masterauth = access.operator_cli(ip, &["CONFIG", "GET", "masterauth"]);
    let masterauth = masterauth.strip_prefix("masterauth\n").unwrap();
    assert_ne!(masterauth, access.operator_password);
    assert_ne!(masterauth, access.password);
    let as_replication = |args: &[&str]| {
        e2e_kit::testing::valkey_cli_as(ip, Some((Some("replication"), masterauth)), args)
    };
    assert_eq!(as_replication(&["PING"]), "PONG");
    for refused in [
        &["GET", "k"][..],
        &["SET", "k", "v"],
        &["CONFIG", "GET", "masterauth"],
    ] {
        let answer = as_replication(refused);
        assert!(answer.starts_with("NOPERM"), "{refused:?}: {answer}");
    }

    let deleted = access.operator_cli(ip, &["ACL", "DELUSER", "replication"]);
    assert_eq!(deleted, "1");
    env.wait(
        "the replication user to be created again",
        SETTLE,
        || async {
            let events = env
                .apis
                .group_events(name, Some("ReplicationUserCreated"))
                .await?;
            Ok(match events.is_empty() {
                true => Err("no ReplicationUserCreated Event yet".to_string()),
                false => Ok(()),
            })
        },
    )
    .await;
    env.healthy(access, primary).await;
    assert_eq!(as_replication(&["PING"]), "PONG");
}

/// The group's NetworkPolicy judged against the live pods (the local cluster enforces
/// none): the members reach each other, a pod of the namespace and topology-controller's
/// pods reach them, nothing else does; the spec narrows the clients, then turns it off.
async fn network_policy_follows_the_spec(env: &Env, name: &str) {
    let ns = env.namespace.as_str();
    let client = env.cluster.client().await.unwrap();
    let policy_name = format!("{name}-replication");
    let members = format!("valkey.rs/replication={name}");
    let live = network_policy::live(&client, ns, &policy_name, &members)
        .await
        .unwrap()
        .expect("the group's NetworkPolicy");
    assert_eq!(live.members.len(), 6, "3 data nodes and 3 sentinels");
    for (pod, member) in &live.members {
        assert!(applies_to(&live.policy, member), "{pod} is not covered");
        for port in [6379, 26379] {
            assert!(admits(&live.policy, member, port), "{pod} -> {port}");
        }
    }
    let neighbour = endpoint(&client, ns, &[("app", "web")]).await.unwrap();
    let stranger = endpoint(&client, "kube-system", &[("app", "web")])
        .await
        .unwrap();
    let operator = controller_pod(&client, "topology-controller")
        .await
        .unwrap();
    let other_controller = controller_pod(&client, "node-controller").await.unwrap();
    assert!(admits(&live.policy, &neighbour, 6379));
    assert!(admits(&live.policy, &neighbour, EXPORTER_PORT));
    assert!(admits(&live.policy, &operator, 26379));
    assert!(!admits(&live.policy, &stranger, 6379));
    assert!(!admits(&live.policy, &other_controller, 6379));

    let patch = |body: serde_json::Value| {
        let groups = env.apis.groups.clone();
        async move {
            groups
                .patch(name, &PatchParams::default(), &Patch::Merge(&body))
                .await
                .unwrap();
        }
    };
    patch(json!({"spec": {"networkPolicy": {"clients": []}}})).await;
    env.wait(
        "the policy to drop the namespace's pods",
        SETTLE,
        || async {
            let live = network_policy::live(&client, ns, &policy_name, &members).await?;
            Ok(match live {
                Some(l) if !admits(&l.policy, &neighbour, 6379) => {
                    let (pod, member) = &l.members[0];
                    assert!(admits(&l.policy, member, 6379), "{pod}");
                    assert!(admits(&l.policy, &operator, 6379));
                    Ok(())
                }
                _ => Err("the neighbour is still admitted".to_string()),
            })
        },
    )
    .await;
    patch(json!({"spec": {"networkPolicy": {"enabled": false}}})).await;
    env.wait("the policy to go", SETTLE, || async {
        let live = network_policy::live(&client, ns, &policy_name, &members).await?;
        Ok(live.map_or(Ok(()), |_| Err("still there".to_string())))
    })
    .await;

    // A policy of the user's own under the group's name is not taken over: it stays as it
    // is, and a Warning Event says why there is no policy of the group's.
    let policies: Api<NetworkPolicy> = Api::namespaced(client.clone(), ns);
    let users: NetworkPolicy = serde_json::from_value(json!({
        "metadata": {"name": policy_name},
        "spec": {"podSelector": {"matchLabels": {"app": "mine"}}, "policyTypes": ["Ingress"]},
    }))
    .unwrap();
    policies
        .create(&PostParams::default(), &users)
        .await
        .unwrap();
    patch(json!({"spec": {"networkPolicy": {"enabled": true}}})).await;
    let refused = env
        .wait("the group to refuse the user's policy", SETTLE, || async {
            let events = events_about(
                &env.apis.events,
                "ValkeyReplication",
                name,
                "NetworkPolicyRefused",
            )
            .await?;
            Ok(events
                .into_iter()
                .find_map(|e| e.note.filter(|n| n.contains("is not")))
                .ok_or_else(|| "no Event yet".to_string()))
        })
        .await;
    assert!(refused.contains(&policy_name), "{refused}");
    let kept = policies.get(&policy_name).await.unwrap();
    assert_eq!(kept.metadata.owner_references, None, "{kept:?}");
    assert_eq!(kept.spec, users.spec, "the user's rules are untouched");
    // Once it is gone, the group's own takes its place.
    policies
        .delete(&policy_name, &Default::default())
        .await
        .unwrap();
    env.wait("the group's policy to return", SETTLE, || async {
        let live = network_policy::live(&client, ns, &policy_name, &members).await?;
        Ok(live
            .filter(|l| l.policy.metadata.owner_references.is_some())
            .map(drop)
            .ok_or_else(|| "not yet".to_string()))
    })
    .await;
}
