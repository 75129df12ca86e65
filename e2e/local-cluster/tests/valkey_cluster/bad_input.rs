//! Scenario 6: bad input refused at admission, a halted roll, a missing password Secret.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crd_types::ValkeyCluster;
use crd_types::cluster::Phase;
use crd_types::conditions::{self, types};
use crd_types::names::statefulset_pod_name;
use crd_types::node::Role;
use crd_types::template::{Auth, SecretKeyRef};
use e2e_kit::cluster_testing::{DataSet, RollWatch, valkey_cluster};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ApiResource, DynamicObject, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::env::{Env, FORM, ROLL, SETTLE};

/// Creates `spec` as a ValkeyCluster, untyped, so values the Rust types would refuse still
/// reach the API server; the rejection message on failure.
async fn create_untyped(
    client: &kube::Client,
    ns: &str,
    name: &str,
    spec: serde_json::Value,
) -> Result<(), String> {
    let api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource::erase::<ValkeyCluster>(&()),
    );
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "valkey.rs/v1alpha1",
        "kind": "ValkeyCluster",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }))
    .unwrap();
    api.create(&PostParams::default(), &object)
        .await
        .map(drop)
        .map_err(|e| match e {
            kube::Error::Api(status) => status.message,
            other => other.to_string(),
        })
}

#[track_caller]
fn assert_rejected(result: Result<(), String>, message_part: &str) {
    match result {
        Ok(()) => panic!("expected a rejection containing {message_part:?}, it was accepted"),
        Err(message) => assert!(
            message.contains(message_part),
            "expected {message_part:?} in: {message}"
        ),
    }
}

/// Scenario 6: bad input. Admission refuses a switchover naming a member that does not
/// exist (on create and on a live cluster), zero shards and negative replicas. An image that
/// cannot start halts the roll at its first member (a replica): one member down, the status
/// says why, the cluster keeps serving; putting the image back heals it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_input() {
    let env = Env::start().await;
    assert_rejected(
        create_untyped(&env.client, &env.namespace, "zero", json!({"shards": 0})).await,
        "shards must be at least 1",
    );
    assert_rejected(
        create_untyped(
            &env.client,
            &env.namespace,
            "negative",
            json!({"shards": 3, "replicasPerShard": -1}),
        )
        .await,
        "replicasPerShard cannot be negative",
    );
    assert_rejected(
        create_untyped(
            &env.client,
            &env.namespace,
            "nobody",
            json!({"shards": 3, "replicasPerShard": 1,
                   "switchover": {"id": "s1", "shard": 0, "member": 2}}),
        )
        .await,
        "switchover.member must name an existing member",
    );

    let name = "stuck";
    let access = env.create_ready(valkey_cluster(name, 3, 1, false)).await;
    let generation = env
        .apis
        .clusters
        .get(name)
        .await
        .unwrap()
        .metadata
        .generation;
    let refused = env
        .apis
        .patch(
            name,
            json!({"spec": {"switchover": {"id": "s1", "shard": 1, "member": 2}}}),
        )
        .await
        .unwrap_err();
    assert!(
        format!("{refused:#}").contains("switchover.member must name an existing member"),
        "{refused:#}"
    );
    assert_eq!(
        env.apis
            .clusters
            .get(name)
            .await
            .unwrap()
            .metadata
            .generation,
        generation
    );
    let pairs = [
        ("alpha", "1"),
        ("beta", "2"),
        ("gamma", "3"),
        ("delta", "4"),
    ];
    for (key, value) in pairs {
        assert_eq!(access.cli_cluster(&["SET", key, value]), "OK");
    }
    let data = DataSet::new("key", 2_000);
    data.load(&access).await.unwrap();

    // The registry has no such image: the first member's pod waits in ErrImagePull or
    // ImagePullBackOff, as on any cluster.
    let members = env.apis.members(name).await.unwrap();
    let watch = RefCell::new(RollWatch::new(&members));
    env.apis
        .patch(
            name,
            json!({"spec": {"template": {"image": "no-such/valkey:1.0"}}}),
        )
        .await
        .unwrap();
    let stuck = env
        .wait("the roll to stop at its first member", ROLL, || async {
            let members = env.apis.members(name).await?;
            watch.borrow_mut().sample(&members);
            let Some((first, _)) = watch.borrow().gate_order.first().cloned() else {
                return Ok(Err("no gate open yet".to_string()));
            };
            let pod = env.apis.pods.get_opt(&statefulset_pod_name(&first)).await?;
            let waiting = pod
                .and_then(|p| p.status)
                .and_then(|s| s.container_statuses)
                .and_then(|c| c.into_iter().next())
                .and_then(|c| c.state)
                .and_then(|s| s.waiting)
                .and_then(|w| w.reason);
            if !matches!(
                waiting.as_deref(),
                Some("ErrImagePull" | "ImagePullBackOff")
            ) {
                return Ok(Err(format!(
                    "{first}'s container is waiting for {waiting:?}"
                )));
            }
            Ok(Ok(first))
        })
        .await;

    // Held there: sample a while longer.
    let cluster_state = || async {
        let vc = env.apis.clusters.get(name).await?;
        let status = vc.status.unwrap_or_default();
        let flagged: Vec<String> = [types::DEGRADED, types::PROGRESSING]
            .into_iter()
            .filter_map(|t| conditions::find(&status.conditions, t))
            .filter(|c| c.status == conditions::TRUE && !c.message.is_empty())
            .map(|c| format!("{}: {}", c.type_, c.message))
            .collect();
        anyhow::Ok((status, flagged))
    };
    env.wait("the cluster to report the halted roll", SETTLE, || async {
        let (status, flagged) = cluster_state().await?;
        Ok(
            if flagged.is_empty() || conditions::is_true(&status.conditions, types::READY) {
                Err(format!("conditions {:?}", status.conditions))
            } else {
                Ok(())
            },
        )
    })
    .await;
    let hold = Instant::now();
    while hold.elapsed() < Duration::from_secs(20) {
        let members = env.apis.members(name).await.unwrap();
        watch.borrow_mut().sample(&members);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let members = env.apis.members(name).await.unwrap();
    let watch = watch.into_inner();
    assert_eq!(
        watch.gate_order.len(),
        1,
        "the roll went on past {stuck}: {:?}",
        watch.gate_order
    );
    assert_eq!(
        watch.gate_order[0].1,
        Some(Role::Replica),
        "the first member to roll was not a replica: {:?}",
        watch.gate_order
    );
    assert_eq!(watch.max_rolling, 1, "{:?}", watch.worst);
    assert_eq!(watch.max_not_ready, 1);
    assert_eq!(RollWatch::not_ready(&members), vec![stuck.clone()]);
    let at_new_revision: Vec<String> = members
        .iter()
        .filter(|n| {
            n.status
                .as_ref()
                .and_then(|s| s.workload.as_ref())
                .is_some_and(|w| w.revision.is_some() && w.revision == w.desired_revision)
        })
        .map(|n| n.name_any())
        .collect();
    assert_eq!(at_new_revision, vec![stuck.clone()]);
    let (status, flagged) = cluster_state().await.unwrap();
    eprintln!(
        "{name}: halted at {stuck}: phase {:?}, {flagged:?}",
        status.phase
    );
    assert_ne!(status.phase, Some(Phase::Ready));
    assert!(!flagged.is_empty(), "{:?}", status.conditions);

    // The rest keeps serving.
    for (key, value) in pairs {
        assert_eq!(access.cli_cluster(&["GET", key]), value);
    }
    data.verify(&access).await.unwrap();

    // Putting the image back heals it: only the stuck member rolls (back).
    env.apis
        .patch(
            name,
            json!({"spec": {"template": {"image": crd_types::template::DEFAULT_IMAGE}}}),
        )
        .await
        .unwrap();
    env.ready(name, ROLL).await;
    env.healthy(name, &access, 3, 1).await;
    data.verify(&access).await.unwrap();

    // A password Secret that does not exist: members cannot start, and the status says
    // which Secret is missing; creating it lets the cluster form with that password.
    let name = "locked";
    let mut locked = valkey_cluster(name, 1, 0, false);
    locked.spec.common.auth = Some(Auth {
        password_secret_ref: Some(SecretKeyRef {
            name: "locked-pass".into(),
            key: "pw".into(),
        }),
        operator_secret_ref: None,
        ..Default::default()
    });
    env.apis.create(&locked).await.unwrap();
    env.wait("the status to name the missing Secret", FORM, || async {
        let status = env.status(name).await?;
        let ready = conditions::find(&status.conditions, types::READY);
        Ok(match ready {
            Some(c) if c.message.contains("Secret locked-pass does not exist") => Ok(()),
            other => Err(format!("Ready: {other:?}")),
        })
    })
    .await;
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some("locked-pass".into()),
            ..Default::default()
        },
        string_data: Some(BTreeMap::from([("pw".into(), "chosen by a person".into())])),
        ..Default::default()
    };
    env.apis
        .secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    env.ready(name, FORM).await;
    let access = env.access(name).await;
    assert_eq!(access.password.as_deref(), Some("chosen by a person"));
    assert_eq!(access.cli_cluster(&["SET", "k", "v"]), "OK");
    env.finish().await;
}
