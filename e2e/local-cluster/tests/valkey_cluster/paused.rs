//! A paused cluster (`valkey.rs/paused`): topology-controller takes no step on it while
//! Valkey and Kubernetes keep serving, and picks up what the spec asks once resumed.

use crd_types::names::cluster_member_name;
use e2e_kit::cluster_testing::{DataSet, valkey_cluster};
use e2e_kit::topology::paused;
use serde_json::json;

use crate::env::{Env, RESHAPE, SETTLE};

/// 3x0 Ready with keys; paused; the spec then asks for a replica per shard. Status says
/// Paused for that very generation (the controller saw it), no replica's ValkeyNode exists,
/// and the cluster still takes writes and serves every key. Resumed: the replicas join,
/// the cluster is Ready 3x1, and every key is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paused_cluster_takes_no_step_until_resumed() {
    let env = Env::start().await;
    let name = "paused";
    let access = env.create_ready(valkey_cluster(name, 3, 0, false)).await;
    let data = DataSet::new("key", 1_000);
    data.load(&access).await.unwrap();

    env.apis.patch(name, paused::pause()).await.unwrap();
    let asked = env
        .apis
        .patch(name, json!({"spec": {"replicasPerShard": 1}}))
        .await
        .unwrap();
    let generation = asked.metadata.generation;
    let status = env
        .wait("status to say Paused for the new spec", SETTLE, || {
            paused::paused_at(&env.apis, name, generation)
        })
        .await;
    paused::assert_paused(&status);
    for shard in 0..3 {
        let replica = cluster_member_name(name, shard, 1);
        assert!(
            env.apis.nodes.get_opt(&replica).await.unwrap().is_none(),
            "{replica} was created while paused"
        );
    }
    assert_eq!(access.cli_cluster(&["SET", "while-paused", "1"]), "OK");
    data.verify(&access).await.unwrap();

    env.apis.patch(name, paused::resume()).await.unwrap();
    env.ready(name, RESHAPE).await;
    let access = env.exact_access(name, 3, 1).await;
    data.verify(&access).await.unwrap();
    assert_eq!(access.cli_cluster(&["GET", "while-paused"]), "1");
    env.finish().await;
}
