//! Scenario 3: every pod deleted at once; the cluster reforms with its data.

use std::collections::BTreeMap;
use std::time::Instant;

use crd_types::names::statefulset_pod_name;
use kube::ResourceExt;
use kube::api::DeleteParams;
use local_cluster::cluster_testing::{DataSet, ready_status, valkey_cluster};
use local_cluster::testing::{ContainerExits, ready_node, why_node_not_ready};

use crate::env::{Env, FORM};

/// Scenario 3: every pod of a 3x1 cluster with persistence is deleted at once; the cluster
/// comes back Ready with the same node identities and every key, with no manual step.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_restart_reforms_with_data() {
    let env = Env::start().await;
    let name = "reboot";
    let access = env.create_ready(valkey_cluster(name, 3, 1, true)).await;
    let data = DataSet::new("key", 20_000);
    data.load(&access).await.unwrap();
    data.verify(&access).await.unwrap();
    let members: Vec<String> = access.members.iter().map(|m| m.name.clone()).collect();
    let ids = Env::ids(&access, &members);
    let mut old_uids = BTreeMap::new();
    for member in &members {
        let pod = env
            .apis
            .pods
            .get(&statefulset_pod_name(member))
            .await
            .unwrap();
        old_uids.insert(member.clone(), pod.uid().unwrap());
    }

    let exits = ContainerExits::watch(&env.apis.pods).await.unwrap();
    let deletions = members.iter().map(|m| {
        let pods = env.apis.pods.clone();
        let pod = statefulset_pod_name(m);
        async move { pods.delete(&pod, &DeleteParams::default()).await }
    });
    for deleted in futures::future::join_all(deletions).await {
        deleted.unwrap();
    }
    let restarted = Instant::now();
    env.wait(
        "every member's pod to be replaced and ready",
        FORM,
        || async {
            for member in &members {
                if ready_node(
                    &env.apis.nodes,
                    &env.apis.pods,
                    member,
                    Some(&old_uids[member]),
                )
                .await?
                .is_none()
                {
                    let why = why_node_not_ready(
                        &env.apis.nodes,
                        &env.apis.pods,
                        member,
                        Some(&old_uids[member]),
                    )
                    .await?;
                    let pod = statefulset_pod_name(member);
                    let agent = env.cluster.log_matching("node-agent", &pod, 12);
                    // A server that exits at start says why in its own log.
                    let uid = env.apis.pods.get_opt(&pod).await?.and_then(|p| p.uid());
                    let valkey = uid
                        .map(|uid| env.cluster.container_log_tail(&uid, "valkey", 60))
                        .unwrap_or_default();
                    return Ok(Err(format!(
                        "not back: {why}\nthe node agent on {pod}:\n{agent}\n\
                         its valkey container's log, {valkey}"
                    )));
                }
            }
            Ok(Ok(()))
        },
    )
    .await;
    // The status may still say Ready from before: Valkey's own check must pass as well.
    env.wait(
        "the cluster to be Ready as Valkey sees it",
        FORM,
        || async {
            if let Err(why) = ready_status(&env.apis, name).await? {
                return Ok(Err(why));
            }
            Ok(access.check().map(drop))
        },
    )
    .await;
    eprintln!(
        "{name}: Ready {:?} after deleting every pod",
        restarted.elapsed()
    );
    // Each server stopped on its SIGTERM, a primary after handing over in its preStop hook
    // (and so writing its first AOF as a replica): none ran on to the SIGKILL at the end of
    // the grace period (exit code 137), which also delays its replacement by that long.
    for member in &members {
        let ended = exits.of(&old_uids[member]);
        assert_eq!(
            ended.get("valkey"),
            Some(&0),
            "{member}'s deleted pod: how its containers ended: {ended:?}"
        );
    }
    drop(exits);
    env.healthy(name, &access, 3, 1).await;
    assert_eq!(
        Env::ids(&access, &members),
        ids,
        "every member kept its node id"
    );
    data.verify(&access).await.unwrap();
    env.finish().await;
}
