//! Node registration and heartbeats (Lease renewals and Ready status).

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Node, NodeStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::sync::watch;

pub const KUBELET_VERSION: &str = "v1.36.3";
const LEASE_NS: &str = "kube-node-lease";
const LEASE_SECONDS: i32 = 40;
const LEASE_RENEW: Duration = Duration::from_secs(10);
const STATUS_REFRESH: Duration = Duration::from_secs(40);

#[derive(Debug, Clone)]
pub struct NodeConfig {
    pub name: String,
    pub index: usize,
    /// InternalIP: where the API server reaches the kubelet API.
    pub address: std::net::IpAddr,
    pub kubelet_port: u16,
}

pub fn labels(cfg: &NodeConfig) -> BTreeMap<String, String> {
    [
        ("kubernetes.io/hostname", cfg.name.clone()),
        ("kubernetes.io/os", "linux".into()),
        ("kubernetes.io/arch", "amd64".into()),
        ("beta.kubernetes.io/os", "linux".into()),
        ("beta.kubernetes.io/arch", "amd64".into()),
        (
            "topology.kubernetes.io/zone",
            format!("zone-{}", cfg.index % 3),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// The Node status the agent reports; conditions carry `now` as heartbeat.
pub fn node_status(cfg: &NodeConfig, now: Timestamp, ready_since: Timestamp) -> serde_json::Value {
    let cond = |ty: &str, status: &str, reason: &str, message: &str| {
        json!({
            "type": ty, "status": status, "reason": reason, "message": message,
            "lastHeartbeatTime": now.to_string(),
            "lastTransitionTime": ready_since.to_string(),
        })
    };
    let resources = json!({
        "cpu": "2", "memory": "24Gi", "pods": "110", "ephemeral-storage": "100Gi",
    });
    json!({
        "conditions": [
            cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            cond("Ready", "True", "KubeletReady", "node-agent is posting ready status"),
        ],
        "addresses": [
            {"type": "InternalIP", "address": cfg.address.to_string()},
            {"type": "Hostname", "address": cfg.name},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": cfg.kubelet_port}},
        "capacity": resources,
        "allocatable": resources,
        "nodeInfo": {
            "machineID": format!("node-agent-{}", cfg.name),
            "systemUUID": format!("node-agent-{}", cfg.name),
            "bootID": format!("node-agent-{}", cfg.index),
            "kernelVersion": std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim(),
            "osImage": "node-agent (local processes)",
            "containerRuntimeVersion": "node-agent://0.1",
            "kubeletVersion": KUBELET_VERSION,
            "kubeProxyVersion": KUBELET_VERSION,
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
    })
}

/// Creates or updates the Node object and its status.
pub async fn register(client: &kube::Client, cfg: &NodeConfig) -> Result<Node> {
    let api: Api<Node> = Api::all(client.clone());
    let node = Node {
        metadata: ObjectMeta {
            name: Some(cfg.name.clone()),
            labels: Some(labels(cfg)),
            ..Default::default()
        },
        ..Default::default()
    };
    let created = match api.create(&PostParams::default(), &node).await {
        Ok(n) => n,
        Err(kube::Error::Api(s)) if s.code == 409 => api
            .patch(
                &cfg.name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": labels(cfg)}})),
            )
            .await
            .with_context(|| format!("updating node {}", cfg.name))?,
        Err(e) => return Err(e).with_context(|| format!("creating node {}", cfg.name)),
    };
    let now = Timestamp::now();
    patch_status(&api, cfg, now, now).await?;
    tracing::info!(node = %cfg.name, port = cfg.kubelet_port, "node registered");
    Ok(created)
}

async fn patch_status(
    api: &Api<Node>,
    cfg: &NodeConfig,
    now: Timestamp,
    since: Timestamp,
) -> Result<()> {
    let status = node_status(cfg, now, since);
    // Typed round trip keeps the patch honest against the schema.
    let _: NodeStatus = serde_json::from_value(status.clone()).context("node status shape")?;
    api.patch_status(
        &cfg.name,
        &PatchParams::default(),
        &Patch::Strategic(json!({"status": status})),
    )
    .await
    .with_context(|| format!("patching node {} status", cfg.name))?;
    Ok(())
}

/// Renews the node Lease every 10s and refreshes Ready every 40s.
pub async fn heartbeat(client: kube::Client, cfg: NodeConfig, mut shutdown: watch::Receiver<bool>) {
    let nodes: Api<Node> = Api::all(client.clone());
    let leases: Api<Lease> = Api::namespaced(client.clone(), LEASE_NS);
    let since = Timestamp::now();
    let mut last_status = tokio::time::Instant::now();
    loop {
        if let Err(e) = renew_lease(&nodes, &leases, &cfg).await {
            tracing::warn!(node = %cfg.name, error = %format!("{e:#}"), "renewing lease");
        }
        if last_status.elapsed() >= STATUS_REFRESH {
            match patch_status(&nodes, &cfg, Timestamp::now(), since).await {
                Ok(()) => last_status = tokio::time::Instant::now(),
                Err(e) => {
                    tracing::warn!(node = %cfg.name, error = %format!("{e:#}"), "node status")
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(LEASE_RENEW) => {}
            _ = shutdown.changed() => return,
        }
    }
}

async fn renew_lease(nodes: &Api<Node>, leases: &Api<Lease>, cfg: &NodeConfig) -> Result<()> {
    let now = MicroTime(Timestamp::now());
    match leases.get_opt(&cfg.name).await? {
        Some(mut lease) => {
            let spec = lease.spec.get_or_insert_with(Default::default);
            spec.renew_time = Some(now);
            spec.holder_identity = Some(cfg.name.clone());
            spec.lease_duration_seconds = Some(LEASE_SECONDS);
            // Replace (with resourceVersion) so concurrent writers conflict.
            leases
                .replace(&cfg.name, &PostParams::default(), &lease)
                .await?;
        }
        None => {
            // Owned by the Node so it is garbage-collected with it.
            let node = nodes.get(&cfg.name).await?;
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(cfg.name.clone()),
                    namespace: Some(LEASE_NS.into()),
                    owner_references: Some(vec![OwnerReference {
                        api_version: "v1".into(),
                        kind: "Node".into(),
                        name: cfg.name.clone(),
                        uid: node.metadata.uid.unwrap_or_default(),
                        ..Default::default()
                    }]),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(cfg.name.clone()),
                    lease_duration_seconds: Some(LEASE_SECONDS),
                    renew_time: Some(now),
                    ..Default::default()
                }),
            };
            leases.create(&PostParams::default(), &lease).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_shape() {
        let cfg = NodeConfig {
            name: "local-node-4".into(),
            index: 4,
            address: std::net::IpAddr::from([127, 0, 0, 1]),
            kubelet_port: 10254,
        };
        let now = Timestamp::now();
        let v = node_status(&cfg, now, now);
        let s: NodeStatus = serde_json::from_value(v).unwrap();
        assert_eq!(
            s.daemon_endpoints.unwrap().kubelet_endpoint.unwrap().port,
            10254
        );
        let ready = s
            .conditions
            .unwrap()
            .into_iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(ready.status, "True");
        assert_eq!(s.node_info.unwrap().kubelet_version, "v1.36.3");
        assert_eq!(s.capacity.unwrap()["memory"].0, "24Gi");
        assert_eq!(labels(&cfg)["topology.kubernetes.io/zone"], "zone-1");
    }
}
