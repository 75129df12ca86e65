//! One controller of the operator installed as pods ([`crate::operator_pods`]): its
//! Deployment, scaled down and up for an outage as a person would do it, and its Lease,
//! whose holder is the pod that reconciles and serves the metrics that count that work.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, LogParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::LocalCluster;
use crate::operator::{command_binary, http_get};

/// How a controller goes down in [`PodController::stop`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outage {
    /// Scaled to zero: every pod gets SIGTERM, finishes its reconciles and hands the Lease
    /// back.
    ScaledDown,
    /// The leader's process is killed at once (an OOM kill or a panic, as Kubernetes sees
    /// it), in the middle of whatever it does, and the Deployment is scaled to zero before
    /// the container's restart back-off ends. Its Lease is left to expire.
    Crash,
}

/// A controller running as the pods of its Deployment.
#[derive(Debug, Clone)]
pub struct PodController {
    /// The binary, which also names its Lease.
    pub binary: String,
    pub namespace: String,
    pub deployment: String,
    /// The replicas its Deployment asks for; [`PodController::start`] scales back to them.
    pub replicas: i32,
    /// The container's `http` port: /healthz, /readyz and /metrics on the pod's address.
    pub http_port: u16,
    /// A kubeconfig with a token of its ServiceAccount: to ask what the controller may do.
    pub kubeconfig: PathBuf,
    /// Its Deployment's label selector, `k=v,...`.
    selector: String,
}

impl PodController {
    /// The controller `deployment` runs; `kubeconfig` holds its ServiceAccount's token.
    pub fn from_deployment(deployment: &Deployment, kubeconfig: PathBuf) -> Result<Self> {
        let name = deployment.name_any();
        let spec = deployment
            .spec
            .as_ref()
            .with_context(|| format!("Deployment {name} has no spec"))?;
        let container = spec
            .template
            .spec
            .as_ref()
            .and_then(|p| p.containers.first())
            .with_context(|| format!("Deployment {name} has no container"))?;
        let binary = container
            .command
            .as_ref()
            .and_then(|c| c.first())
            .map(|c| command_binary(c))
            .with_context(|| format!("Deployment {name}'s container has no command"))?;
        let http_port = container
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some("http"))
            .with_context(|| format!("Deployment {name}'s container has no `http` port"))?
            .container_port;
        let selector = spec
            .selector
            .match_labels
            .iter()
            .flatten()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",");
        if selector.is_empty() {
            bail!("Deployment {name} selects no labels");
        }
        Ok(Self {
            binary: binary.to_string(),
            namespace: deployment.namespace().unwrap_or_default(),
            deployment: name,
            replicas: spec.replicas.unwrap_or(1),
            http_port: u16::try_from(http_port)?,
            kubeconfig,
            selector,
        })
    }

    /// Its Deployment's pods, terminating ones included.
    pub async fn pods(&self, client: &kube::Client) -> Result<Vec<Pod>> {
        let pods: Api<Pod> = Api::namespaced(client.clone(), &self.namespace);
        Ok(pods
            .list(&ListParams::default().labels(&self.selector))
            .await?
            .items)
    }

    /// The holder of its Lease, whatever it is.
    pub async fn lease_holder(&self, client: &kube::Client) -> Result<Option<String>> {
        let leases: Api<Lease> = Api::namespaced(client.clone(), &self.namespace);
        Ok(leases
            .get_opt(&self.binary)
            .await?
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity))
    }

    /// The pod of its own that holds its Lease and is not terminating.
    pub async fn leader(&self, client: &kube::Client) -> Result<Option<Pod>> {
        let Some(holder) = self.lease_holder(client).await? else {
            return Ok(None);
        };
        Ok(self
            .pods(client)
            .await?
            .into_iter()
            .find(|p| p.name_any() == holder && p.metadata.deletion_timestamp.is_none()))
    }

    /// The leading pod and its HTTP address, to read its metrics over a window without
    /// mixing two pods' counters.
    pub async fn leader_endpoint(&self, client: &kube::Client) -> Result<LeaderEndpoint> {
        let leader = self
            .leader(client)
            .await?
            .with_context(|| format!("no pod of {} holds its Lease", self.deployment))?;
        let ip = leader
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.clone())
            .with_context(|| format!("{} has no IP", leader.name_any()))?;
        Ok(LeaderEndpoint {
            pod: leader.name_any(),
            addr: std::net::SocketAddr::new(ip.parse()?, self.http_port).to_string(),
        })
    }

    /// The leader's /metrics.
    pub async fn metrics(&self, client: &kube::Client) -> Result<String> {
        self.leader_endpoint(client).await?.metrics().await
    }

    /// The last `lines` of the leader's log, or why there is none: for a failure message.
    pub async fn leader_log(&self, client: &kube::Client, lines: i64) -> String {
        leader_log(client, &self.namespace, &self.binary, lines).await
    }

    /// Takes the controller down (see [`Outage`]) and waits until none of its pods is left.
    /// A scaled-down controller hands its Lease back; a crashed one leaves it as it was.
    pub async fn stop(&self, cluster: &LocalCluster, outage: Outage) -> Result<()> {
        // A restart before the outage is the test's failure, not the outage's.
        cluster
            .check_restarts(&format!("the outage of {}", self.deployment))
            .await?;
        let client = cluster.client().await?;
        let crashed = match outage {
            Outage::ScaledDown => None,
            Outage::Crash => Some(self.crash_leader(cluster, &client).await?),
        };
        self.scale(&client, 0).await?;
        cluster
            .wait_for(&format!("{} to have no pods", self.deployment), || {
                let client = client.clone();
                async move { Ok(self.pods(&client).await?.is_empty()) }
            })
            .await?;
        let leases: Api<Lease> = Api::namespaced(client.clone(), &self.namespace);
        let lease = leases.get(&self.binary).await?.spec.unwrap_or_default();
        let holder = lease.holder_identity.clone();
        match crashed {
            // Released on SIGTERM, as a standby then takes over at once.
            None if holder.is_some() => {
                bail!(
                    "{} scaled down, but its Lease is still held by {holder:?}",
                    self.deployment
                )
            }
            None => {}
            // Nobody renewed it after the kill: the crashed container did not come back
            // before the scale-down, and no other pod took over.
            Some((pod, killed_at)) => {
                let renewed = lease.renew_time.map(|t| t.0);
                if holder.as_deref() != Some(pod.as_str()) || renewed.is_none_or(|t| t > killed_at)
                {
                    bail!(
                        "{}'s Lease moved on after {pod} crashed: held by {holder:?}, renewed {renewed:?}, killed at {killed_at:?}",
                        self.binary
                    );
                }
            }
        }
        Ok(())
    }

    /// Kills the leader's controller process; returns the leader's name and when.
    async fn crash_leader(
        &self,
        cluster: &LocalCluster,
        client: &kube::Client,
    ) -> Result<(String, Timestamp)> {
        let leader = self
            .leader(client)
            .await?
            .with_context(|| format!("no pod of {} leads", self.deployment))?;
        let uid = leader.uid().context("a pod without uid")?;
        cluster.spare_restarts_of(&uid);
        let pid = container_pid(cluster, &self.binary, &uid)?;
        // SAFETY: kill(2) with a PID found in /proc just now; no memory is involved.
        if unsafe { libc::kill(pid, libc::SIGKILL) } != 0 {
            bail!("kill {pid}: {}", std::io::Error::last_os_error());
        }
        Ok((leader.name_any(), Timestamp::now()))
    }

    /// Scales its Deployment back up and waits until one of its pods holds the Lease (after
    /// a crash, once the crashed pod's Lease has expired) and it has rolled out.
    pub async fn start(&self, cluster: &LocalCluster) -> Result<()> {
        let client = cluster.client().await?;
        self.scale(&client, self.replicas).await?;
        self.wait_led(cluster).await?;
        crate::operator_pods::wait_rolled_out(cluster, &self.namespace, &self.deployment).await
    }

    /// Waits until a live pod of its own holds the Lease.
    pub async fn wait_led(&self, cluster: &LocalCluster) -> Result<()> {
        let client = cluster.client().await?;
        cluster
            .wait_for(&format!("a pod of {} to lead", self.deployment), || {
                let client = client.clone();
                async move { Ok(self.leader(&client).await?.is_some()) }
            })
            .await
    }

    /// `kubectl scale --replicas=<replicas>`: through the scale subresource.
    async fn scale(&self, client: &kube::Client, replicas: i32) -> Result<()> {
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), &self.namespace);
        deployments
            .patch_scale(
                &self.deployment,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": replicas}})),
            )
            .await
            .with_context(|| format!("scaling {} to {replicas}", self.deployment))?;
        Ok(())
    }
}

/// A leading pod's HTTP server.
#[derive(Debug, Clone)]
pub struct LeaderEndpoint {
    pub pod: String,
    /// `ip:port` of its /healthz, /readyz and /metrics.
    pub addr: String,
}

impl LeaderEndpoint {
    pub async fn metrics(&self) -> Result<String> {
        http_get(&self.addr, "/metrics")
            .await
            .with_context(|| format!("{}'s /metrics did not answer 200", self.pod))
    }
}

/// The last `lines` of the log (as `kubectl logs`) of the pod holding Lease `lease` in
/// `namespace`, or why there is none.
pub async fn leader_log(client: &kube::Client, namespace: &str, lease: &str, lines: i64) -> String {
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let holder = match leases.get_opt(lease).await {
        Ok(lease) => lease.and_then(|l| l.spec).and_then(|s| s.holder_identity),
        Err(e) => return format!("(no Lease {namespace}/{lease}: {e})"),
    };
    let Some(holder) = holder else {
        return format!("(nobody holds Lease {namespace}/{lease})");
    };
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let params = LogParams {
        tail_lines: Some(lines),
        ..Default::default()
    };
    match pods.logs(&holder, &params).await {
        Ok(log) => format!("{holder}'s log ends:\n{log}"),
        Err(e) => format!("(no log of {holder}: {e})"),
    }
}

/// The PID of the process running `binary` in the pod with `pod_uid`: its argv[0] ends in
/// the binary and its root is in that pod's container root, below the run directory.
pub fn container_pid(cluster: &LocalCluster, binary: &str, pod_uid: &str) -> Result<i32> {
    let run_dir = cluster.layout.run_dir.display().to_string();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc")?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let argv0 = cmdline.split(|b| *b == 0).next().unwrap_or_default();
        let root = std::fs::read_link(entry.path().join("root"))
            .unwrap_or_default()
            .display()
            .to_string();
        if argv0.ends_with(format!("/{binary}").as_bytes())
            && root.starts_with(&run_dir)
            && root.contains(pod_uid)
        {
            found.push(pid);
        }
    }
    match found[..] {
        [pid] => Ok(pid),
        _ => bail!("{binary} processes of pod {pod_uid}: {found:?}, want one"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::{documents, kustomize_build};

    #[test]
    fn the_real_overlay_deployments_describe_their_controllers() {
        let overlay = crate::repo_root().join("deploy/overlays/all");
        let Ok(yaml) = kustomize_build(&overlay) else {
            panic!("kustomize is needed for this test (hack/install-tools.sh installs it)");
        };
        let mut found: Vec<PodController> = documents(&yaml)
            .unwrap()
            .into_iter()
            .filter(|o| o.types.as_ref().is_some_and(|t| t.kind == "Deployment"))
            .map(|o| PodController::from_deployment(&o.try_parse().unwrap(), "k".into()).unwrap())
            .collect();
        found.sort_by(|a, b| a.binary.cmp(&b.binary));
        let binaries: Vec<&str> = found.iter().map(|c| c.binary.as_str()).collect();
        assert_eq!(binaries, crate::operator::CONTROLLER_BINARIES);
        for c in &found {
            assert_eq!(c.namespace, "valkey-operator-system");
            assert_eq!(c.deployment, format!("valkey-operator-{}", c.binary));
            assert_eq!(c.replicas, 2, "{}", c.binary);
            assert_eq!(c.http_port, 8080, "{}", c.binary);
            assert_eq!(
                c.selector,
                format!(
                    "app.kubernetes.io/component={},app.kubernetes.io/name=valkey-operator",
                    c.binary
                )
            );
        }
    }

    #[test]
    fn a_deployment_without_an_http_port_or_selector_is_refused() {
        let deployment = |ports: &str, labels: &str| -> Deployment {
            serde_yaml::from_str(&format!(
                "metadata: {{name: d, namespace: n}}\n\
                 spec:\n  selector: {{matchLabels: {{{labels}}}}}\n  template:\n    spec:\n      \
                 containers: [{{name: c, command: [/bin/x], ports: [{ports}]}}]\n"
            ))
            .unwrap()
        };
        let ok = PodController::from_deployment(
            &deployment("{name: http, containerPort: 9090}", "a: b"),
            "k".into(),
        )
        .unwrap();
        assert_eq!(
            (ok.binary.as_str(), ok.http_port, ok.replicas),
            ("x", 9090, 1)
        );
        assert!(
            PodController::from_deployment(
                &deployment("{name: metrics, containerPort: 9090}", "a: b"),
                "k".into()
            )
            .is_err()
        );
        assert!(
            PodController::from_deployment(
                &deployment("{name: http, containerPort: 9090}", ""),
                "k".into()
            )
            .is_err()
        );
    }
}
