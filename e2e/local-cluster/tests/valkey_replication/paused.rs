//! A paused group (`valkey.rs/paused`): topology-controller takes no step on it while
//! Valkey, Sentinel and Kubernetes keep serving, and picks up what the spec asks once
//! resumed.

use crd_types::cluster::Phase;
use crd_types::conditions::{self, types};
use crd_types::names::{annotations, replication_member_name};
use e2e_kit::replication_testing::valkey_replication;
use serde_json::json;

use crate::env::{Env, FORM, SETTLE};

/// Two data nodes and three sentinels Ready with keys; paused; the spec then asks for a
/// third data node. Status says Paused for that very generation (the controller saw it),
/// the third data node's ValkeyNode does not exist, and the primary still takes writes and
/// serves every key. Resumed: the third data node joins, the group is Ready with Valkey and
/// Sentinel agreeing, and every key is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paused_group_takes_no_step_until_resumed() {
    let env = Env::start().await;
    let name = "paused";
    let access = env
        .create_ready(valkey_replication(name, 2, 3, false))
        .await;
    let keys = access.load("before", 1_000).await.unwrap();

    let pause = json!({"metadata": {"annotations": {(annotations::PAUSED): "true"}}});
    env.apis.patch(name, pause).await.unwrap();
    let asked = env
        .apis
        .patch(name, json!({"spec": {"replicas": 3}}))
        .await
        .unwrap();
    let generation = asked.metadata.generation;
    let status = env
        .wait("status to say Paused for the new spec", SETTLE, || async {
            let status = env.apis.groups.get(name).await?.status.unwrap_or_default();
            let seen = status.observed_generation == generation;
            Ok(match (status.phase, seen) {
                (Some(Phase::Paused), true) => Ok(status),
                _ => Err(format!(
                    "phase {:?} at generation {:?}",
                    status.phase, status.observed_generation
                )),
            })
        })
        .await;
    let progressing = conditions::find(&status.conditions, types::PROGRESSING).unwrap();
    assert_eq!(
        (progressing.status.as_str(), progressing.reason.as_str()),
        (conditions::FALSE, "Paused")
    );
    let ready = conditions::find(&status.conditions, types::READY).unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        (conditions::TRUE, "Paused"),
        "the last Ready seen is kept"
    );
    let third = replication_member_name(name, 2);
    assert!(
        env.apis.nodes.get_opt(&third).await.unwrap().is_none(),
        "{third} was created while paused"
    );
    let during = access.load("during", 100).await.unwrap();
    access.verify(&keys).await.unwrap();

    let resume = json!({"metadata": {"annotations": {(annotations::PAUSED): null}}});
    env.apis.patch(name, resume).await.unwrap();
    let status = env.ready_agreeing(name, None, FORM).await;
    assert_eq!(status.members.len(), 3 + 3, "{:?}", status.members);
    access.verify(&keys).await.unwrap();
    access.verify(&during).await.unwrap();
    env.finish().await;
}
