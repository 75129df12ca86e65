//! Issue 42's fault: every pod of a ValkeyReplication deleted at once under two writers
//! (`SET` then `WAIT 1 1000`; one Sentinel-aware, one through the read-write Service), and
//! every acknowledged write read back after. Shared by the e2e test and the
//! `full-restart-loop` measurement.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use crd_types::names::statefulset_pod_name;
use kube::ResourceExt;

use super::{GroupWriter, ReplicationApis, Route, access, poll_until, ready_status};
use crate::testing::{signal, valkey_server_pid};
use local_cluster::LocalCluster;

/// How the pods go.
#[derive(Clone, Copy, Debug)]
pub enum Fault {
    /// Every pod deleted at once.
    AllAtOnce,
    /// One replica's pod deleted first, the rest this much later (`kubectl delete` of pods
    /// one by one, a drain of several nodes).
    Skewed(Duration),
    /// One replica frozen (SIGSTOP) this much before every pod is deleted: it cannot come
    /// back within the old primary's 5 s hand-over wait.
    Frozen(Duration),
    /// A full outage with a replica behind: one replica frozen until the other has
    /// acknowledged writes it never got, then the other frozen too and every other pod
    /// deleted; once the old primary's server has stopped, both replicas' pods are deleted
    /// and their frozen servers killed. So both come back after the old primary stopped, as
    /// on nodes slower to restart than its hand-over wait (here a deleted pod is back in
    /// about a second and would sync from the stopping primary), with the same offset. The
    /// one behind must not be elected (issue 42's lost write).
    Behind,
}

/// What one full restart did.
#[derive(Debug)]
pub struct Restarted {
    pub acked: usize,
    /// Acknowledged writes that did not read back.
    pub lost: Vec<String>,
    pub primary_before: String,
    pub primary_after: String,
    /// The replica the fault singled out, if any.
    pub singled_out: Option<String>,
    /// From the deletes to Ready.
    pub ready_after: Duration,
}

const POLL: Duration = Duration::from_millis(200);
/// Writes each writer must have acknowledged before the fault, and again after it.
const WRITES: usize = 50;

/// One full restart of `group` under both writers; fails only when the group does not come
/// back within `limit` (lost writes are in the answer).
pub async fn full_restart(
    cluster: &LocalCluster,
    apis: &ReplicationApis,
    group: &str,
    tag: &str,
    fault: Fault,
    limit: Duration,
) -> Result<Restarted> {
    let writing = access(apis, group).await?;
    let status = apis.groups.get(group).await?.status.unwrap_or_default();
    let primary_before = status.current_primary.unwrap_or_default();
    let sentinel = writing
        .sentinel_service_ip
        .clone()
        .context("no Sentinel Service")?;
    let service = writing
        .service_ip
        .clone()
        .context("no read-write Service")?;
    let writers = [
        GroupWriter::start(&writing, Route::Sentinel(sentinel), &format!("s{tag}")),
        GroupWriter::start(&writing, Route::Service(service), &format!("v{tag}")),
    ];
    for writer in &writers {
        writer.progressed(WRITES, limit).await?;
    }
    let pods: Vec<String> = apis
        .members(group)
        .await?
        .iter()
        .map(|n| statefulset_pod_name(&n.name_any()))
        .collect();
    let replicas: Vec<String> = writing
        .data
        .iter()
        .filter(|m| !primary_before.is_empty() && m.name != primary_before)
        .map(|m| m.name.clone())
        .collect();
    let singled_out = match fault {
        Fault::AllAtOnce => None,
        _ => replicas.first().cloned(),
    };
    let first = singled_out.as_deref().map(statefulset_pod_name);
    let pid_of = |node: &str| {
        let pod = statefulset_pod_name(node);
        async move {
            let ip = apis.pods.get(&pod).await?.status.and_then(|s| s.pod_ip);
            valkey_server_pid(&ip.context("the pod has no IP")?)
        }
    };
    let deleted = Instant::now();
    let mut frozen = Vec::new();
    let mut primary_pid = None;
    match (fault, singled_out.as_deref()) {
        (Fault::Skewed(skew), Some(node)) => {
            apis.pods
                .delete(&statefulset_pod_name(node), &Default::default())
                .await?;
            tokio::time::sleep(skew).await;
        }
        (Fault::Frozen(ahead), Some(node)) => {
            signal(pid_of(node).await?, "STOP")?;
            tokio::time::sleep(ahead).await;
        }
        (Fault::Behind, Some(_)) => {
            primary_pid = Some(pid_of(&primary_before).await?);
            for (n, node) in replicas.iter().enumerate() {
                let pid = pid_of(node).await?;
                signal(pid, "STOP")?;
                frozen.push(pid);
                if n == 0 {
                    // Acknowledged by the other replica only.
                    for writer in &writers {
                        writer.progressed(WRITES, limit).await?;
                    }
                }
            }
        }
        _ => {}
    }
    let later: Vec<String> = match fault {
        Fault::Behind => replicas.iter().map(|n| statefulset_pod_name(n)).collect(),
        Fault::Skewed(_) => first.iter().cloned().collect(),
        _ => Vec::new(),
    };
    for pod in pods.iter().filter(|p| !later.contains(p)) {
        apis.pods.delete(pod, &Default::default()).await?;
    }
    if let Some(pid) = primary_pid {
        let proc = format!("/proc/{pid}");
        poll_until(cluster, "the old primary to stop", limit, POLL, || async {
            Ok(match std::path::Path::new(&proc).exists() {
                true => Err(format!("pid {pid} still runs")),
                false => Ok(()),
            })
        })
        .await?;
        for pod in &later {
            apis.pods.delete(pod, &Default::default()).await?;
        }
        for pid in frozen {
            // Killed before the node agent's SIGCONT lets them read what their sockets
            // kept while they were frozen.
            signal(pid, "KILL")?;
        }
    }
    poll_until(cluster, "every pod to be replaced", limit, POLL, || async {
        for pod in &pods {
            let p = apis.pods.get_opt(pod).await?;
            if p.is_none_or(|p| p.metadata.deletion_timestamp.is_some()) {
                return Ok(Err(format!("{pod} not replaced yet")));
            }
        }
        Ok(Ok(()))
    })
    .await?;
    let status = poll_until(cluster, "the group to be Ready", limit, POLL, || async {
        ready_status(apis, group).await
    })
    .await?;
    let ready_after = deleted.elapsed();
    for writer in &writers {
        writer.progressed(WRITES, limit).await?;
    }
    let after_restart = access(apis, group).await?;
    let (mut acked, mut lost) = (0, Vec::new());
    for writer in writers {
        let report = writer.stop().await?;
        acked += report.acked.len();
        lost.extend(report.lost(&after_restart).await?);
    }
    Ok(Restarted {
        acked,
        lost,
        primary_before,
        primary_after: status.current_primary.unwrap_or_default(),
        singled_out,
        ready_after,
    })
}
