//! The thin layer over the API server: the client from a kubeconfig as kubectl finds it, and
//! the reads and patches the commands make.

use anyhow::{Context, Result};
use crd_types::{ValkeyCluster, ValkeyNode, ValkeyReplication};
use k8s_openapi::api::core::v1::{Event, Pod, Secret};
use kube::api::{ListParams, LogParams, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use serde_json::Value;

use crate::cli::Global;
use crate::topology::{Kind, Topology, choose_kind};

/// A client and the namespace to work in.
pub struct Session {
    pub client: Client,
    pub namespace: String,
    pub global: Global,
}

impl Session {
    /// From `--kubeconfig`, `--context` and `-n` (else $KUBECONFIG or ~/.kube/config, its
    /// current context, that context's namespace; in a pod, its ServiceAccount).
    pub async fn connect(global: &Global) -> Result<Session> {
        let options = KubeConfigOptions {
            context: global.context.clone(),
            ..Default::default()
        };
        let config = match &global.kubeconfig {
            Some(path) => {
                let file = Kubeconfig::read_from(path)
                    .with_context(|| format!("reading kubeconfig {}", path.display()))?;
                Config::from_custom_kubeconfig(file, &options).await?
            }
            None if global.context.is_some() => Config::from_kubeconfig(&options).await?,
            None => Config::infer()
                .await
                .context("no kubeconfig found (set --kubeconfig or KUBECONFIG)")?,
        };
        let namespace = global
            .namespace
            .clone()
            .unwrap_or_else(|| config.default_namespace.clone());
        Ok(Session {
            client: Client::try_from(config)?,
            namespace,
            global: global.clone(),
        })
    }

    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// The topology named `name`, of the kind `--kind` says or the only one that has it.
    pub async fn topology(&self, name: &str) -> Result<Topology> {
        let clusters: Api<ValkeyCluster> = self.api();
        let replications: Api<ValkeyReplication> = self.api();
        let cluster = clusters
            .get_opt(name)
            .await
            .context("reading valkeyclusters (are the CRDs installed?)")?;
        let replication = replications
            .get_opt(name)
            .await
            .context("reading valkeyreplications (are the CRDs installed?)")?;
        let kind = choose_kind(
            name,
            self.global.kind,
            cluster.is_some(),
            replication.is_some(),
        )
        .with_context(|| format!("in namespace {}", self.namespace))?;
        Ok(match kind {
            Kind::Cluster => Topology::Cluster(Box::new(cluster.expect("chosen"))),
            Kind::Replication => Topology::Replication(Box::new(replication.expect("chosen"))),
        })
    }

    /// A merge patch on the topology.
    pub async fn patch_topology(&self, topology: &Topology, patch: &Value) -> Result<()> {
        let name = topology.name();
        let params = PatchParams::default();
        match topology.kind() {
            Kind::Cluster => {
                self.api::<ValkeyCluster>()
                    .patch(&name, &params, &Patch::Merge(patch))
                    .await?;
            }
            Kind::Replication => {
                self.api::<ValkeyReplication>()
                    .patch(&name, &params, &Patch::Merge(patch))
                    .await?;
            }
        }
        Ok(())
    }

    /// The topology's ValkeyNodes, by their member label, in name order.
    pub async fn members(&self, topology: &Topology) -> Result<Vec<ValkeyNode>> {
        let selector = format!("{}={}", topology.kind().member_label(), topology.name());
        let mut nodes = self
            .api::<ValkeyNode>()
            .list(&ListParams::default().labels(&selector))
            .await?
            .items;
        nodes.sort_by_key(|n| n.metadata.name.clone());
        Ok(nodes)
    }

    /// The Events about the topology and its members.
    pub async fn events(&self, topology: &Topology, nodes: &[ValkeyNode]) -> Result<Vec<Event>> {
        let mut wanted: Vec<(&str, String)> = vec![(topology.kind().as_str(), topology.name())];
        for n in nodes {
            wanted.push(("ValkeyNode", n.metadata.name.clone().unwrap_or_default()));
        }
        let events = self
            .api::<Event>()
            .list(&ListParams::default())
            .await?
            .items;
        Ok(events
            .into_iter()
            .filter(|e| {
                let o = &e.involved_object;
                wanted.iter().any(|(kind, name)| {
                    o.kind.as_deref() == Some(*kind) && o.name.as_deref() == Some(name.as_str())
                })
            })
            .collect())
    }

    /// A Secret, if it exists.
    pub async fn secret(&self, name: &str) -> Result<Option<Secret>> {
        Ok(self.api::<Secret>().get_opt(name).await?)
    }

    /// A merge patch on a Secret.
    pub async fn patch_secret(&self, name: &str, patch: &Value) -> Result<()> {
        self.api::<Secret>()
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
        Ok(())
    }

    /// Each pod of `namespace` and the last `lines` of each of its containers' logs (an
    /// error reading one is its text).
    pub async fn logs(&self, namespace: &str, lines: i64) -> Result<Vec<(String, String)>> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let mut out = Vec::new();
        for pod in pods.list(&ListParams::default()).await?.items {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let containers = pod.spec.map(|s| s.containers).unwrap_or_default();
            for container in containers {
                let params = LogParams {
                    container: Some(container.name.clone()),
                    tail_lines: Some(lines),
                    timestamps: true,
                    ..Default::default()
                };
                let text = pods
                    .logs(&name, &params)
                    .await
                    .unwrap_or_else(|e| format!("error: reading the log: {e}\n"));
                out.push((format!("{name}/{}", container.name), text));
            }
        }
        Ok(out)
    }
}
