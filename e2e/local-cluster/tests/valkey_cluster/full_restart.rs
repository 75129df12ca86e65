//! Scenario 3: every pod deleted at once; the cluster reforms with its data. And a member
//! whose saved cluster state puts a replica in another shard than its primary (which Valkey
//! 8.0 and 8.1 refuse at every start) comes back.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crd_types::names::statefulset_pod_name;
use e2e_kit::cluster_testing::{Access, AckedWriter, DataSet, ready_status, valkey_cluster};
use e2e_kit::testing::{
    ContainerExits, pod_ready, ready_node, signal, valkey_server_pid, why_node_not_ready,
};
use kube::ResourceExt;
use kube::api::DeleteParams;

use crate::env::{Env, FORM, SETTLE};

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
    let old_uids = pod_uids(&env, &members).await;
    let exits = ContainerExits::watch(&env.apis.pods).await.unwrap();
    let took = restart_every_pod(&env, &access, name, &members, &old_uids).await;
    eprintln!("{name}: Ready {took:?} after deleting every pod");
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

/// Deletes every member's pod at once and waits until each is replaced and ready and the
/// cluster is Ready as status and Valkey see it: how long that took.
async fn restart_every_pod(
    env: &Env,
    access: &Access,
    name: &str,
    members: &[String],
    old_uids: &BTreeMap<String, String>,
) -> Duration {
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
            for member in members {
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
    // The status may still say Ready from before: Valkey's own check must pass as well,
    // and every member must serve (a primary that just started says cluster_state:fail
    // for 2 s, and the client that reads the writes back refuses to connect until then).
    env.wait(
        "the cluster to be Ready as Valkey sees it",
        FORM,
        || async {
            if let Err(why) = ready_status(&env.apis, name).await? {
                return Ok(Err(why));
            }
            Ok(access.check().and_then(|_| access.serving()))
        },
    )
    .await;
    restarted.elapsed()
}

/// The pod uid of each member.
async fn pod_uids(env: &Env, members: &[String]) -> BTreeMap<String, String> {
    let mut uids = BTreeMap::new();
    for member in members {
        let pod = env
            .apis
            .pods
            .get(&statefulset_pod_name(member))
            .await
            .unwrap();
        uids.insert(member.clone(), pod.uid().unwrap());
    }
    uids
}

/// Issue 42's loop for a cluster: 20 full restarts of a 3x1 cluster in a row under a writer
/// per shard (`SET` then `WAIT 1`); every acknowledged write reads back after each. With one
/// replica per shard, `WAIT 1` puts each acknowledged write on both members of its shard,
/// and a graceful stop keeps it on both, so whichever comes back primary has it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn full_restarts_under_writers_lose_no_acknowledged_write() {
    let env = Env::start().await;
    let name = "outage";
    let access = env.create_ready(valkey_cluster(name, 3, 1, true)).await;
    let members: Vec<String> = access.members.iter().map(|m| m.name.clone()).collect();
    let restarts = 20;
    let mut acked = 0;
    for i in 1..=restarts {
        let old_uids = pod_uids(&env, &members).await;
        let writer = AckedWriter::start(&access).await.unwrap();
        writer.progressed(100, SETTLE).await.unwrap();
        let took = restart_every_pod(&env, &access, name, &members, &old_uids).await;
        writer.progressed(100, SETTLE).await.unwrap();
        let report = writer.stop().await.unwrap();
        let lost = report.lost(&access).await.unwrap();
        eprintln!(
            "{name}: restart {i}: Ready {took:?} after the deletes; {}, {} lost",
            report.summary(),
            lost.len()
        );
        assert!(lost.is_empty(), "restart {i} lost {lost:?}");
        acked += report.acked();
    }
    eprintln!("{name}: {restarts} full restarts, {acked} acknowledged writes, none lost");
    env.finish().await;
}

/// A replica's server is frozen, its nodes.conf gets another shard id on its own line (what a
/// server that logged "Shard id ... diverges from existing primary shard id" saved in CI), and
/// the server is killed, so it cannot save over the file. Valkey 8.0 and 8.1 refuse such a
/// file at every start (valkey-io/valkey#2171); the start shell gives the replica its
/// primary's shard id first, so the container restarts once, and the member is back in its
/// shard with its data.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_saved_in_another_shard_than_its_primary_starts_again() {
    let env = Env::start().await;
    let name = "astray";
    let access = env.create_ready(valkey_cluster(name, 1, 1, true)).await;
    let data = DataSet::new("key", 1_000);
    data.load(&access).await.unwrap();
    let (primary, replica) = env.primary_and_successor(name, &access, 0).await;
    let shard_of = |ip: &str| {
        access
            .admin_cli(ip, &["CLUSTER", "MYSHARDID"])
            .trim()
            .to_string()
    };
    let shard = shard_of(&primary.ip);
    assert_eq!(shard_of(&replica.ip), shard);
    let pod_name = statefulset_pod_name(&replica.name);
    let pod = env.apis.pods.get(&pod_name).await.unwrap();
    let uid = pod.uid().unwrap();
    let restarts = |pod: &k8s_openapi::api::core::v1::Pod| {
        pod.status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|c| c.iter().find(|c| c.name == "valkey"))
            .map_or(0, |c| c.restart_count)
    };
    let before = restarts(&pod);
    let pod_ip = pod.status.as_ref().and_then(|s| s.pod_ip.clone()).unwrap();

    let pid = valkey_server_pid(&pod_ip).unwrap();
    signal(pid, "STOP").unwrap();
    // The server's working directory is its data directory, where nodes.conf is.
    let conf = format!("/proc/{pid}/cwd/nodes.conf");
    let text = std::fs::read_to_string(&conf).unwrap();
    let stray = "0123456789abcdef0123456789abcdef01234567";
    let own = format!("{} ", replica.id);
    let astray: String = text
        .lines()
        .map(|line| match line.starts_with(&own) {
            true => line.replace(&format!("shard-id={shard}"), &format!("shard-id={stray}")),
            false => line.to_string(),
        })
        .map(|line| line + "\n")
        .collect();
    assert_eq!(
        astray.matches(stray).count(),
        1,
        "the replica's own line carries its shard id:\n{text}"
    );
    // Written in place, keeping the file's owner.
    std::fs::write(&conf, &astray).unwrap();
    signal(pid, "KILL").unwrap();

    env.wait(
        "the replica's server to start again and be ready",
        FORM,
        || async {
            let pod = env.apis.pods.get(&pod_name).await?;
            let log = env.cluster.container_log_tail(&uid, "valkey", 40);
            Ok(match restarts(&pod) > before && pod_ready(&pod) {
                true => Ok(()),
                false => Err(format!(
                    "{} restarts (from {before}), ready {}; its log, {log}",
                    restarts(&pod),
                    pod_ready(&pod)
                )),
            })
        },
    )
    .await;
    let pod = env.apis.pods.get(&pod_name).await.unwrap();
    assert_eq!(pod.uid().as_deref(), Some(&*uid), "the same pod");
    assert_eq!(restarts(&pod), before + 1, "one restart, no crash loop");
    let log = env.cluster.container_log_tail(&uid, "valkey", 400);
    assert!(
        log.contains(&format!(
            "replica {} had shard id {stray}, its primary {} has {shard}: the replica takes it",
            replica.id, primary.id
        )),
        "the start shell repaired the file: {log}"
    );
    env.wait(
        "the replica to be back in its primary's shard",
        SETTLE,
        || async {
            let now = shard_of(&replica.ip);
            Ok(if now == shard {
                Ok(())
            } else {
                Err(format!("shard id {now}"))
            })
        },
    )
    .await;
    env.healthy(name, &access, 1, 1).await;
    assert_eq!(
        access.node_id(&replica.ip).unwrap(),
        replica.id,
        "same node id"
    );
    data.verify(&access).await.unwrap();
    env.finish().await;
}
