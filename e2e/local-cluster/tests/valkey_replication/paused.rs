//! A paused group (`valkey.rs/paused`): topology-controller takes no step on it while
//! Valkey, Sentinel and Kubernetes keep serving, and picks up what the spec asks once
//! resumed.

use crd_types::names::replication_member_name;
use e2e_kit::replication_testing::valkey_replication;
use e2e_kit::topology::paused;
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

    env.apis.patch(name, paused::pause()).await.unwrap();
    let asked = env
        .apis
        .patch(name, json!({"spec": {"replicas": 3}}))
        .await
        .unwrap();
    let generation = asked.metadata.generation;
    let status = env
        .wait("status to say Paused for the new spec", SETTLE, || {
            paused::paused_at(&env.apis, name, generation)
        })
        .await;
    paused::assert_paused(&status);
    let third = replication_member_name(name, 2);
    assert!(
        env.apis.nodes.get_opt(&third).await.unwrap().is_none(),
        "{third} was created while paused"
    );
    let during = access.load("during", 100).await.unwrap();
    access.verify(&keys).await.unwrap();

    env.apis.patch(name, paused::resume()).await.unwrap();
    let status = env.ready_agreeing(name, None, FORM).await;
    assert_eq!(status.members.len(), 3 + 3, "{:?}", status.members);
    access.verify(&keys).await.unwrap();
    access.verify(&during).await.unwrap();
    env.finish().await;
}
