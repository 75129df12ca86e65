//! Scenario 3: pods restart without the operator, and all at once; members come back in
//! their roles by themselves, Sentinel's lists keep one entry per member.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crd_types::names::statefulset_pod_name;
use e2e_kit::replication_testing::{self, GroupAccess, GroupWriter, Route, valkey_replication};
use futures::future::try_join_all;
use kube::ResourceExt;
use local_cluster::controller_pods::Outage;

use crate::env::{Env, FAILOVER, FORM, SETTLE};

/// The pod's uid, by pod name, of every member.
pub(crate) async fn pod_uids(env: &Env, name: &str) -> BTreeMap<String, String> {
    let mut uids = BTreeMap::new();
    for node in env.apis.members(name).await.unwrap() {
        let pod = statefulset_pod_name(&node.name_any());
        if let Some(p) = env.apis.pods.get_opt(&pod).await.unwrap() {
            uids.insert(pod, p.uid().unwrap_or_default());
        }
    }
    uids
}

/// Each member's running template revision.
async fn revisions(env: &Env, name: &str) -> BTreeMap<String, Option<String>> {
    env.apis
        .members(name)
        .await
        .unwrap()
        .into_iter()
        .map(|n| {
            let name = n.name_any();
            let running = n.status.and_then(|s| s.workload).and_then(|w| w.revision);
            (name, running)
        })
        .collect()
}

/// Whether the data node on `ip` replicates `primary`'s address with its link up.
fn replicates(access: &GroupAccess, ip: &str, primary: &str) -> Result<(), String> {
    let (role, follows) = access.role(ip).map_err(|e| format!("{e:#}"))?;
    let up = access
        .cli(ip, &["INFO", "replication"])
        .contains("master_link_status:up");
    if role == "slave" && follows.as_deref() == Some(primary) && up {
        Ok(())
    } else {
        Err(format!("{ip}: {role} of {follows:?}, link up: {up}"))
    }
}

/// The address a majority of the sentinels name, asked directly.
fn sentinels_name(access: &GroupAccess) -> Result<String, String> {
    let mut votes: BTreeMap<String, usize> = BTreeMap::new();
    for s in &access.sentinels {
        if let Ok(view) = access.sentinel_view(&s.ip)
            && let Some((ip, _)) = view.primary
        {
            *votes.entry(ip).or_default() += 1;
        }
    }
    votes
        .into_iter()
        .find(|(_, n)| n * 2 > access.sentinels.len())
        .map(|(ip, _)| ip)
        .ok_or_else(|| "no majority of sentinels names a primary".to_string())
}

/// With every controller stopped: the primary's pod is killed (Sentinel fails over, and the
/// old primary comes back as a replica by itself), then a replica's and a sentinel's pods
/// are killed (they come back in their roles, the sentinel with no state of its own).
/// A Sentinel-aware writer loses nothing. Once the controllers are back, status catches
/// up and no member rolls.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_controllers_members_restart_in_their_roles_and_nothing_rolls_after() {
    let env = Env::start_own().await;
    let name = "alone";
    let access = env.create_ready(valkey_replication(name, 3, 3, true)).await;
    let old = env.ready(name, SETTLE).await.current_primary.unwrap();
    env.contexts_monitored(name).await;
    let writer = GroupWriter::start(
        &access,
        Route::Sentinel(access.sentinel_service_ip.clone().unwrap()),
        "alone",
    );
    writer.progressed(200, SETTLE).await.unwrap();
    let before = revisions(&env, name).await;

    try_join_all(
        env.controllers
            .iter()
            .map(|c| c.stop(&env.cluster, Outage::ScaledDown)),
    )
    .await
    .unwrap();
    env.apis
        .kill_pod(&statefulset_pod_name(&old))
        .await
        .unwrap();
    let killed = Instant::now();
    let old_ip = access.ip(&old).unwrap().to_string();
    let new_ip = env
        .wait(
            "Sentinel to fail over, with no controller running",
            FAILOVER,
            || async {
                Ok(sentinels_name(&access).and_then(|ip| {
                    if ip == old_ip {
                        Err(format!("the sentinels still name {old}"))
                    } else {
                        Ok(ip)
                    }
                }))
            },
        )
        .await;
    let new = access.data_at(&new_ip).unwrap().name.clone();
    eprintln!(
        "{name}: the sentinels name {new} {:?} after the kill",
        killed.elapsed()
    );
    env.wait(
        &format!("{old} to come back as a replica of {new}"),
        FAILOVER,
        || async { Ok(replicates(&access, &old_ip, &new_ip)) },
    )
    .await;
    writer.progressed(200, SETTLE).await.unwrap();

    // A replica and a sentinel restart too, the sentinel without its state.
    let replica = access
        .data
        .iter()
        .find(|m| m.name != old && m.name != new)
        .unwrap()
        .clone();
    let sentinel = access.sentinels[1].name.clone();
    env.apis
        .kill_pod(&statefulset_pod_name(&replica.name))
        .await
        .unwrap();
    env.apis
        .kill_pod(&statefulset_pod_name(&sentinel))
        .await
        .unwrap();
    env.wait(
        &format!("{} to come back as a replica", replica.name),
        FAILOVER,
        || async { Ok(replicates(&access, &replica.ip, &new_ip)) },
    )
    .await;
    env.wait(
        "every sentinel to know exactly the group again",
        FAILOVER,
        || async { Ok(access.sentinels_agree_on(&new_ip)) },
    )
    .await;
    writer.progressed(200, SETTLE).await.unwrap();
    let uids = pod_uids(&env, name).await;

    try_join_all(env.controllers.iter().map(|c| c.start(&env.cluster)))
        .await
        .unwrap();
    let back = Instant::now();
    env.ready_agreeing(name, Some(&new), FORM).await;
    eprintln!(
        "{name}: Ready with {new} primary {:?} after the controllers came back",
        back.elapsed()
    );
    let moved = env
        .apis
        .group_events(name, Some("PrimaryChanged"))
        .await
        .unwrap();
    assert!(
        !moved.is_empty(),
        "no PrimaryChanged Event once the controllers were back"
    );
    // Nothing rolled: the same pods, at the same revisions.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        pod_uids(&env, name).await,
        uids,
        "a pod was replaced after the controllers came back"
    );
    assert_eq!(revisions(&env, name).await, before, "a member rolled");

    let report = writer.stop().await.unwrap();
    eprintln!("{name}: {}", report.summary());
    let lost = report.lost(&access).await.unwrap();
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged writes lost",
        lost.len(),
        report.acked.len()
    );
    env.finish().await;
}

/// Every pod of the group is deleted at once: the group comes back with its data and one
/// primary, and Sentinel's lists hold every member once. Then, three times, every sentinel
/// and every replica restarts on a new pod IP at once: each time the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_pod_deleted_at_once_comes_back_with_its_data_and_one_primary() {
    let env = Env::start().await;
    let name = "again";
    let access = env.create_ready(valkey_replication(name, 3, 3, true)).await;
    env.contexts_monitored(name).await;
    let keys = access.load("again", 2000).await.unwrap();

    let pods: Vec<String> = env
        .apis
        .members(name)
        .await
        .unwrap()
        .iter()
        .map(|n| statefulset_pod_name(&n.name_any()))
        .collect();
    for pod in &pods {
        env.apis
            .pods
            .delete(pod, &Default::default())
            .await
            .unwrap();
    }
    let deleted = Instant::now();
    env.wait("every pod to be replaced", FORM, || async {
        for pod in &pods {
            let p = env.apis.pods.get_opt(pod).await?;
            if p.is_none_or(|p| p.metadata.deletion_timestamp.is_some()) {
                return Ok(Err(format!("{pod} not replaced yet")));
            }
        }
        Ok(Ok(()))
    })
    .await;
    let status = env.ready_agreeing(name, None, FORM).await;
    eprintln!(
        "{name}: Ready with {:?} primary {:?} after every pod was deleted",
        status.current_primary,
        deleted.elapsed()
    );
    let access = replication_testing::access(&env.apis, name).await.unwrap();
    access.verify(&keys).await.unwrap();

    for round in 1..=3 {
        let primary = env.ready(name, SETTLE).await.current_primary.unwrap();
        let restarted: Vec<String> = access
            .data
            .iter()
            .chain(&access.sentinels)
            .filter(|m| m.name != primary)
            .map(|m| statefulset_pod_name(&m.name))
            .collect();
        for pod in &restarted {
            env.apis.kill_pod(pod).await.unwrap();
        }
        let started = Instant::now();
        env.wait("the restarted pods to be replaced", FORM, || async {
            for pod in &restarted {
                let p = env.apis.pods.get_opt(pod).await?;
                if p.is_none_or(|p| p.metadata.deletion_timestamp.is_some()) {
                    return Ok(Err(format!("{pod} not replaced yet")));
                }
            }
            Ok(Ok(()))
        })
        .await;
        env.ready_agreeing(name, Some(&primary), FORM).await;
        eprintln!(
            "{name}: round {round}: every replica and sentinel restarted, Ready {:?} later",
            started.elapsed()
        );
    }
    access.verify(&keys).await.unwrap();
    env.finish().await;
}
