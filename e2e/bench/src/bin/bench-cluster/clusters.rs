//! The operator's clusters: applied, reached, loaded with keys, waited for and cleared away,
//! and topology-controller restarted with another environment.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use crd_types::ValkeyClusterStatus;
use e2e_kit::cluster_testing::{
    Access, ClusterApis, DataSet, Progress, access, describe_status, ready_status,
};
use e2e_kit::testing::{restart_controller, stop_process};
use kube::api::DeleteParams;
use local_cluster::LocalCluster;
use local_cluster::operator::RunningController;
use serde_json::json;

use crate::{LIMIT, NS, POLL, TOPOLOGY_CONTROLLER};

/// Polls `probe` every [`POLL`] until it yields a value; an `Err` from it ends the wait, a
/// "not yet" (`Ok(Err(why))`) is kept to say why on timeout.
pub(crate) async fn wait<T, F, Fut>(what: &str, limit: Duration, mut probe: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Progress<T>>>,
{
    let started = Instant::now();
    loop {
        let why = match probe().await? {
            Ok(value) => return Ok(value),
            Err(why) => why,
        };
        if started.elapsed() > limit {
            bail!("timed out after {limit:?} waiting for {what}; last: {why}");
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Applies a ValkeyCluster and returns the time to phase Ready.
pub(crate) async fn apply_cluster(
    apis: &ClusterApis,
    name: &str,
    shards: i32,
    replicas: i32,
) -> Result<Duration> {
    apply_cluster_with(apis, name, shards, replicas, None, &[], &[]).await
}

/// [`apply_cluster`] on `image` (the default image if `None`) with `annotations` and the
/// template's `config`.
pub(crate) async fn apply_cluster_with(
    apis: &ClusterApis,
    name: &str,
    shards: i32,
    replicas: i32,
    image: Option<&str>,
    annotations: &[(&str, &str)],
    config: &[(&str, &str)],
) -> Result<Duration> {
    let mut object = json!({
        "apiVersion": "valkey.rs/v1alpha1", "kind": "ValkeyCluster",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"shards": shards, "replicasPerShard": replicas,
                 "template": {"persistence": {"size": "1Gi", "reclaimPolicy": "Delete"}}}
    });
    if let Some(image) = image {
        object["spec"]["template"]["image"] = json!(image);
    }
    if !config.is_empty() {
        let config: serde_json::Map<String, serde_json::Value> = config
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
        object["spec"]["template"]["config"] = serde_json::Value::Object(config);
    }
    if !annotations.is_empty() {
        let annotations: serde_json::Map<String, serde_json::Value> = annotations
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
        object["metadata"]["annotations"] = serde_json::Value::Object(annotations);
    }
    let object = serde_json::from_value(object)?;
    let started = Instant::now();
    apis.create(&object).await?;
    wait(&format!("{name} to be Ready"), LIMIT, || async {
        let c = apis.clusters.get_status(name).await?;
        let phase = c.status.and_then(|s| s.phase);
        Ok(match phase {
            Some(crd_types::cluster::Phase::Ready) => Ok(()),
            other => Err(format!("phase {other:?}")),
        })
    })
    .await?;
    Ok(started.elapsed())
}

/// How to reach an operator-made cluster: its members and the default user's password,
/// once the Secret holding it exists (its members' `spec.auth` names it).
pub(crate) async fn cluster_access(apis: &ClusterApis, name: &str) -> Result<Access> {
    wait(
        &format!("the members and password Secret of {name}"),
        LIMIT,
        || async { Ok(access(apis, name).await.map_err(|e| format!("{e:#}"))) },
    )
    .await
}

/// Writes `count` keys `<prefix>:<i>` through a cluster client; retried while a cluster
/// just formed does not yet answer CLUSTER SLOTS consistently (gossip).
pub(crate) async fn load_keys(access: &Access, prefix: &str, count: usize) -> Result<Duration> {
    let data = DataSet::new(prefix, count);
    wait(&format!("{count} keys to load"), LIMIT, || async {
        Ok(data.load(access).await.map_err(|e| {
            eprintln!("bench-cluster: loading keys: {e:#}; retrying");
            format!("{e:#}")
        }))
    })
    .await
}

/// Waits for phase Ready.
pub(crate) async fn wait_cluster_ready(apis: &ClusterApis, name: &str) -> Result<()> {
    wait(&format!("{name} to be Ready"), LIMIT, || async {
        Ok(ready_status(apis, name).await?.map(drop))
    })
    .await
}

/// The cluster's status as the API server has it now (empty before the first).
pub(crate) async fn cluster_status(apis: &ClusterApis, name: &str) -> Result<ValkeyClusterStatus> {
    Ok(apis
        .clusters
        .get_status(name)
        .await?
        .status
        .unwrap_or_default())
}

/// Whether the cluster's Ready condition is True.
pub(crate) async fn ready_condition_true(apis: &ClusterApis, name: &str) -> Result<bool> {
    let status = cluster_status(apis, name).await?;
    Ok(status
        .conditions
        .iter()
        .any(|c| c.type_ == crd_types::conditions::types::READY && c.status == "True"))
}

/// The cluster's status in one line, for a failed measurement.
pub(crate) async fn status_line(apis: &ClusterApis, name: &str) -> String {
    match apis.clusters.get_opt(name).await {
        Ok(Some(c)) => c
            .status
            .as_ref()
            .map_or_else(|| "no status".to_string(), describe_status),
        Ok(None) => "no such ValkeyCluster".to_string(),
        Err(e) => format!("cannot read it: {e}"),
    }
}

/// Says loudly that a measurement of the operator failed, with topology-controller's last
/// log lines.
pub(crate) fn explain_failure(cluster: &LocalCluster, name: &str, error: &anyhow::Error) {
    eprintln!(
        "bench-cluster: MEASUREMENT ON {name} FAILED: {error:#}\nbench-cluster: topology-controller's log ends:\n{}",
        cluster.log_tail("topology-controller", 40)
    );
}

/// Deletes the ValkeyClusters `clusters` and the hand-made nodes `<prefix>-<i>` of
/// `hand_prefixes`, then waits until no ValkeyNode or pod of theirs is left, so the next
/// measurement does not share the machine with them. Past 3 minutes, or on an API error, it
/// warns and goes on.
pub(crate) async fn clear(apis: &ClusterApis, clusters: &[&str], hand_prefixes: &[&str]) {
    let prefixes: Vec<String> = clusters
        .iter()
        .chain(hand_prefixes)
        .map(|p| format!("{p}-"))
        .collect();
    let ours = |name: &str| prefixes.iter().any(|p| name.starts_with(p.as_str()));
    let result = async {
        for name in clusters {
            apis.clusters.delete(name, &DeleteParams::default()).await?;
        }
        for node in apis.nodes.list(&Default::default()).await? {
            let name = node.metadata.name.unwrap_or_default();
            if hand_prefixes
                .iter()
                .any(|p| name.starts_with(&format!("{p}-")))
            {
                apis.nodes.delete(&name, &DeleteParams::default()).await?;
            }
        }
        wait(
            "their ValkeyNodes and pods to go",
            Duration::from_secs(180),
            || async {
                let mut left: Vec<String> = Vec::new();
                for node in apis.nodes.list(&Default::default()).await? {
                    left.extend(node.metadata.name.filter(|n| ours(n)));
                }
                for pod in apis.pods.list(&Default::default()).await? {
                    left.extend(pod.metadata.name.filter(|n| ours(n)));
                }
                Ok(if left.is_empty() {
                    Ok(())
                } else {
                    Err(format!("left: {left:?}"))
                })
            },
        )
        .await
    }
    .await;
    if let Err(e) = result {
        eprintln!("bench-cluster: warning: clearing {prefixes:?}: {e:#}");
    }
}

/// Stops topology-controller and starts `controller` (its binary with its environment)
/// in its place.
pub(crate) async fn restart_topology_controller(
    cluster: &mut LocalCluster,
    controller: &RunningController,
) -> Result<()> {
    stop_process(cluster, TOPOLOGY_CONTROLLER, Duration::from_secs(10))?;
    restart_controller(cluster, controller).await?;
    Ok(())
}
