//! A paused cluster (`valkey.rs/paused`): topology-controller takes no step on it while
//! Valkey and Kubernetes keep serving, and picks up what the spec asks once resumed.

use crd_types::cluster::Phase;
use crd_types::conditions::{self, types};
use crd_types::names::{annotations, cluster_member_name};
use e2e_kit::cluster_testing::{DataSet, valkey_cluster};
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

    let pause = json!({"metadata": {"annotations": {(annotations::PAUSED): "true"}}});
    env.apis.patch(name, pause).await.unwrap();
    let asked = env
        .apis
        .patch(name, json!({"spec": {"replicasPerShard": 1}}))
        .await
        .unwrap();
    let generation = asked.metadata.generation;
    let status = env
        .wait("status to say Paused for the new spec", SETTLE, || async {
            let status = env.status(name).await?;
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
    for shard in 0..3 {
        let replica = cluster_member_name(name, shard, 1);
        assert!(
            env.apis.nodes.get_opt(&replica).await.unwrap().is_none(),
            "{replica} was created while paused"
        );
    }
    assert_eq!(access.cli_cluster(&["SET", "while-paused", "1"]), "OK");
    data.verify(&access).await.unwrap();

    let resume = json!({"metadata": {"annotations": {(annotations::PAUSED): null}}});
    env.apis.patch(name, resume).await.unwrap();
    env.ready(name, RESHAPE).await;
    let access = env.exact_access(name, 3, 1).await;
    data.verify(&access).await.unwrap();
    assert_eq!(access.cli_cluster(&["GET", "while-paused"]), "1");
    env.finish().await;
}
