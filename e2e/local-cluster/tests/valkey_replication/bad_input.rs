//! Scenario 6: bad input is refused at admission; what CEL cannot judge is reported.

use e2e_kit::replication_testing::valkey_replication;
use serde_json::json;

use crate::env::Env;

/// Quorum above the sentinels, a switchover to a data node that does not exist and
/// min-replicas-to-write with no replica to count are refused with a message saying what
/// to do; a switchover patch to a missing member is refused on update too.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_replication_input_is_refused() {
    let env = Env::start().await;
    let refused = |group: crd_types::ValkeyReplication, message: &'static str| {
        let apis = env.apis.clone();
        async move {
            let error = apis.create(&group).await.unwrap_err();
            let text = format!("{error:#}");
            assert!(text.contains(message), "{text}");
        }
    };
    let mut quorum = valkey_replication("quorum", 2, 3, false);
    quorum.spec.sentinel.quorum = 4;
    refused(quorum, "sentinel.quorum cannot exceed sentinel.replicas").await;
    let mut missing = valkey_replication("missing", 2, 3, false);
    missing.spec.switchover = Some(crd_types::replication::ReplicationSwitchover {
        id: "x".into(),
        member: 2,
    });
    refused(missing, "switchover.member must name an existing data node").await;
    let mut lonely = valkey_replication("lonely", 1, 1, false);
    lonely.spec.min_replicas_to_write = Some(1);
    refused(lonely, "minReplicasToWrite must be below replicas").await;

    env.apis
        .create(&valkey_replication("ok", 2, 1, false))
        .await
        .unwrap();
    let error = env
        .apis
        .patch(
            "ok",
            json!({"spec": {"switchover": {"id": "y", "member": 5}}}),
        )
        .await
        .unwrap_err();
    assert!(
        format!("{error:#}").contains("switchover.member must name an existing data node"),
        "{error:#}"
    );
    env.finish().await;
}
