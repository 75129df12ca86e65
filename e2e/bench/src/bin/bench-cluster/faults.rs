//! Faults under a writer: a primary frozen, its pod deleted or killed, its server crash-looping.

use std::cell::RefCell;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use crd_types::ValkeyNode;
use e2e_kit::cluster_testing::{Access, AckedWriter, ClusterApis, ClusterNode, ready_status};
use e2e_kit::testing::{signal, valkey_server_pid};
use k8s_openapi::api::core::v1::Pod;
use kube::api::DeleteParams;

use crate::LIMIT;
use crate::clusters::{cluster_status, ready_condition_true, wait, wait_cluster_ready};

/// Freezes shard 0's primary with SIGSTOP and times until its replica accepts a write to a
/// slot of that shard, and until the cluster's Ready condition is not True; then lets the
/// old primary continue (it rejoins as a replica).
pub(crate) async fn failover(apis: &ClusterApis, access: &Access, cluster: &str) -> Result<Freeze> {
    let (nodes, pods) = (&apis.nodes, &apis.pods);
    let (primary, replica) = {
        let a = nodes.get_status(&format!("{cluster}-0-0")).await?;
        let b = nodes.get_status(&format!("{cluster}-0-1")).await?;
        let role = |n: &ValkeyNode| {
            n.status
                .as_ref()
                .and_then(|s| s.valkey.as_ref())
                .and_then(|v| v.role)
        };
        match role(&a) {
            Some(crd_types::node::Role::Primary) => (a, b),
            _ => (b, a),
        }
    };
    let ip = |n: &ValkeyNode| {
        n.status
            .as_ref()
            .and_then(|s| s.endpoint.as_ref())
            .and_then(|e| e.cluster_ip.clone())
            .context("no ClusterIP")
    };
    let replica_ip = ip(&replica)?;
    // A key of the shard: the primary's slots from its own view, KEYSLOT from the replica.
    let primary_ip = ip(&primary)?;
    let own = access
        .nodes_seen_by(&primary_ip)?
        .into_iter()
        .find(ClusterNode::is_myself)
        .context("the primary does not list itself")?;
    let key = (0..10_000)
        .map(|i| format!("failover-{i}"))
        .find(|k| {
            access
                .cli(&replica_ip, &["CLUSTER", "KEYSLOT", k])
                .parse::<u16>()
                .is_ok_and(|slot| own.owns(slot))
        })
        .context("no key for shard 0")?;
    let pod_name = primary
        .status
        .as_ref()
        .and_then(|s| s.workload.as_ref())
        .and_then(|w| w.pod_name.clone())
        .context("no pod")?;
    let pod_ip = pods
        .get(&pod_name)
        .await?
        .status
        .and_then(|s| s.pod_ip)
        .context("no pod IP")?;
    let pid = valkey_server_pid(&pod_ip)?;
    let started = Instant::now();
    signal(pid, "STOP")?;
    let ready_false = RefCell::new(None);
    let result = wait("the replica to accept writes", LIMIT, || async {
        let unseen = ready_false.borrow().is_none();
        if unseen && !ready_condition_true(apis, cluster).await? {
            *ready_false.borrow_mut() = Some(started.elapsed());
        }
        let reply = access.cli(&replica_ip, &["SET", &key, "v"]);
        Ok(if reply == "OK" { Ok(()) } else { Err(reply) })
    })
    .await;
    let write_accepted = started.elapsed();
    signal(pid, "CONT")?;
    result?;
    Ok(Freeze {
        write_accepted,
        ready_false: ready_false.into_inner(),
    })
}

/// A primary frozen in [`failover`]: until its replica accepted a write, and until the
/// cluster's Ready condition was first seen not True (`None`: not before that write).
#[derive(Clone)]
pub(crate) struct Freeze {
    pub(crate) write_accepted: Duration,
    pub(crate) ready_false: Option<Duration>,
}

/// What a writer saw while one primary left: the shard's longest refusal (no `SET`
/// accepted) and longest pause (no replica-acknowledged write), and acknowledged writes
/// that do not read back.
pub(crate) struct Departure {
    pub(crate) refusal: Duration,
    pub(crate) pause: Duration,
    pub(crate) lost: usize,
}

/// How a primary leaves in [`departure`].
#[derive(Clone, Copy)]
pub(crate) enum Leaving {
    /// Its pod is deleted: the preStop hook hands the slots over first.
    PodDeleted,
    /// Its pod is deleted with grace 0: no preStop hook runs, the server is killed.
    PodKilled,
    /// Its server is killed with SIGKILL at every start (a crash loop) until its shard has
    /// another primary: topology-controller fails the shard over by force.
    CrashLoop,
}

/// `shard`'s primary of the cluster `name` leaves as `how` under an [`AckedWriter`]; waits
/// until the cluster is Ready with every member back, then reads the acknowledged writes.
pub(crate) async fn departure(
    apis: &ClusterApis,
    access: &Access,
    name: &str,
    shard: u32,
    how: Leaving,
) -> Result<Departure> {
    wait_cluster_ready(apis, name).await?;
    let writer = AckedWriter::start(access).await?;
    writer.progressed(200, Duration::from_secs(60)).await?;
    let left = leave(apis, access, name, shard, how).await?;
    wait_back(apis, name, how, &left).await?;
    writer.progressed(200, Duration::from_secs(120)).await?;
    let report = writer.stop().await?;
    eprintln!("bench-cluster: {name}: writer\n{}", report.summary());
    let stream = report
        .streams
        .iter()
        .find(|s| s.shard == shard)
        .context("no writer stream for the shard")?;
    Ok(Departure {
        refusal: stream.longest_refusal,
        pause: stream.longest_pause,
        lost: report.lost(access).await?.len(),
    })
}

/// The pod of a primary that left, as it was before.
struct Left {
    pod_name: String,
    old_uid: Option<String>,
    old_restarts: i32,
}

/// The restarts of the pod's containers.
fn restarts(p: &Pod) -> i32 {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map_or(0, |cs| cs.iter().map(|c| c.restart_count).sum())
}

/// `shard`'s primary, per the status, leaves as `how`.
async fn leave(
    apis: &ClusterApis,
    access: &Access,
    name: &str,
    shard: u32,
    how: Leaving,
) -> Result<Left> {
    let status = cluster_status(apis, name).await?;
    let primary = status
        .shards
        .get(shard as usize)
        .and_then(|s| s.primary.clone())
        .context("no primary in status")?;
    let pod_name = crd_types::names::statefulset_pod_name(&primary);
    let pod = apis.pods.get(&pod_name).await?;
    let old_uid = pod.metadata.uid.clone();
    let old_restarts = restarts(&pod);
    match how {
        Leaving::PodDeleted => {
            apis.pods
                .delete(&pod_name, &DeleteParams::default())
                .await?;
        }
        Leaving::PodKilled => {
            let now = DeleteParams {
                grace_period_seconds: Some(0),
                ..DeleteParams::default()
            };
            apis.pods.delete(&pod_name, &now).await?;
        }
        Leaving::CrashLoop => {
            let pod_ip = pod.status.and_then(|s| s.pod_ip).context("no pod IP")?;
            let primary_ip = access.ip(&primary).context("no address")?.to_string();
            crash_until_replaced(access, shard, &pod_ip, &primary_ip).await?;
        }
    }
    Ok(Left {
        pod_name,
        old_uid,
        old_restarts,
    })
}

/// Kills the server on `pod_ip` at every start until another member of the shard serves
/// its slots.
async fn crash_until_replaced(
    access: &Access,
    shard: u32,
    pod_ip: &str,
    primary_ip: &str,
) -> Result<()> {
    wait("another primary for the shard", LIMIT, || async {
        if let Ok(pid) = valkey_server_pid(pod_ip) {
            let _ = signal(pid, "KILL");
        }
        let replaced = access
            .members
            .iter()
            .filter(|m| m.shard == shard && m.ip != primary_ip)
            .any(|m| {
                access.nodes_seen_by(&m.ip).is_ok_and(|view| {
                    view.iter()
                        .any(|n| n.is_myself() && n.is_primary() && n.slot_count() > 0)
                })
            });
        Ok(if replaced {
            Ok(())
        } else {
            Err("not yet".into())
        })
    })
    .await
}

/// Waits until the pod that `left` is back (a new pod, or a restarted server in it, ready)
/// and the cluster is Ready.
async fn wait_back(apis: &ClusterApis, name: &str, how: Leaving, left: &Left) -> Result<()> {
    wait(
        "the member's server back and the cluster Ready",
        LIMIT,
        || async {
            let pod = apis.pods.get_opt(&left.pod_name).await?;
            let back = pod.as_ref().is_some_and(|p| {
                let ready = p
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
                let new = match how {
                    Leaving::PodDeleted | Leaving::PodKilled => p.metadata.uid != left.old_uid,
                    Leaving::CrashLoop => restarts(p) > left.old_restarts,
                };
                ready && new
            });
            if !back {
                return Ok(Err("not back".into()));
            }
            Ok(ready_status(apis, name).await?.map(drop))
        },
    )
    .await
}
