//! A real Kubernetes on one machine: upstream etcd, kube-apiserver, kube-controller-manager
//! and kube-scheduler (built from the Go module proxy by `e2e/k8s/build.sh`) plus our node
//! agent, which runs pods as local processes on loopback addresses. Used by `just up`, by
//! the e2e tests (through the kit in `e2e/e2e-kit`) and by the benchmarks (`e2e/bench`).
//!
//! Every process is recorded under the run directory and stopped by PID: by
//! [`LocalCluster::stop`] (also on drop, so a panicking test tears down) or by
//! `local-cluster down` for a detached run.

pub mod control_plane;
pub mod controller_pods;
pub mod images;
pub mod kubeconfig;
pub mod netns;
pub mod operator;
pub mod operator_pods;
pub mod pki;
pub mod process;
pub mod prometheus;
pub mod ranges;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::{Node, Pod, ServiceAccount};
use kube::Api;
use kube::api::{ListParams, LogParams};

use control_plane::Layout;
use kubeconfig::Credentials;
use process::Recorded;

/// What to start. Address ranges are claimed per run (see [`ranges`]).
#[derive(Debug, Clone)]
pub struct Options {
    pub run_dir: PathBuf,
    /// Kubernetes Nodes the agent registers (spread across zone-0..2).
    pub nodes: u32,
    /// Start the node agent (off for control-plane-only runs).
    pub agent: bool,
    /// Have the API server write an audit log (see [`control_plane::AUDIT_POLICY`]); off by
    /// default, it is for benchmarks.
    pub audit: bool,
}

impl Options {
    pub fn new(run_dir: impl Into<PathBuf>) -> Self {
        Self {
            run_dir: run_dir.into(),
            nodes: 3,
            agent: true,
            audit: false,
        }
    }
}

/// A running local cluster.
pub struct LocalCluster {
    pub layout: Layout,
    /// Pod and Service address ranges of this run.
    pub ranges: ranges::Ranges,
    pub admin_kubeconfig: PathBuf,
    /// The node agent's test API (partitions, freeze), when the agent runs.
    pub control_addr: Option<SocketAddr>,
    /// The network namespace of the kubelet API, when the agent runs.
    pub kubelet_network: Option<netns::KubeletNetwork>,
    /// The API server's audit log (JSON lines), when [`Options::audit`] asked for one.
    pub audit_log: Option<PathBuf>,
    /// The image registry the node agent pulls from (see [`images`]), when the agent runs.
    pub registry_url: Option<String>,
    children: Vec<(Recorded, Child)>,
    detached: bool,
    /// Keeps other runs off this run's slot until its processes are recorded.
    _claim: ranges::Claim,
    /// The port the last controller started as a local process listens on.
    last_controller_port: Option<u16>,
    /// Pods whose containers must not restart (see [`LocalCluster::fail_on_restarts`]).
    watched_pods: Vec<(String, String)>,
    restart_check: std::sync::Mutex<RestartCheck>,
}

/// When the watched pods were last looked at, and the pods a test crashed on purpose.
#[derive(Debug, Default)]
struct RestartCheck {
    last: Option<Instant>,
    spared: std::collections::BTreeSet<String>,
}

/// How often a wait looks for restarted containers of the watched pods.
const RESTART_CHECK_EVERY: Duration = Duration::from_secs(2);

/// How long a component may take to come up before the start fails.
const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// Grace between SIGTERM and SIGKILL at teardown.
const STOP_GRACE: Duration = Duration::from_secs(10);

impl LocalCluster {
    /// Builds what is missing, then starts etcd, the API server, the controller-manager,
    /// the scheduler and (optionally) the node agent, waiting for each to be usable.
    pub async fn start(options: Options) -> Result<Self> {
        let run_dir = &options.run_dir;
        std::fs::create_dir_all(run_dir)?;
        if !process::recorded(run_dir)?.is_empty() {
            bail!(
                "{} already has running processes; stop them first (local-cluster down --run-dir {})",
                run_dir.display(),
                run_dir.display()
            );
        }
        let claim = ranges::claim(run_dir)?;
        let ranges = claim.ranges.clone();
        let bin_dir = kubernetes_binaries()?;
        let layout = Layout {
            bin_dir,
            run_dir: run_dir.clone(),
            etcd_client_port: ranges.port(ranges::port::ETCD_CLIENT),
            etcd_peer_port: ranges.port(ranges::port::ETCD_PEER),
            api_port: ranges.port(ranges::port::API_SERVER),
            service_cidr: ranges.service_cidr.clone(),
        };
        let service_ip = control_plane::first_service_ip(&ranges.service_cidr)?;
        let clients = [
            pki::ADMIN,
            pki::CONTROLLER_MANAGER,
            pki::SCHEDULER,
            pki::KUBELET_CLIENT,
        ];
        let kubelet_ip = netns::KubeletNetwork::for_slot(ranges.slot).kubelet_ip;
        let pki = pki::write(
            &run_dir.join("pki"),
            service_ip.into(),
            kubelet_ip.into(),
            &clients,
        )?;
        let kubeconfig_for = |id: pki::Identity| -> Result<PathBuf> {
            let path = run_dir.join(format!("{}.kubeconfig", id.file));
            let (cert, key) = (pki.client_cert(id), pki.client_key(id));
            let yaml = kubeconfig::render(
                &layout.api_server_url(),
                &pki.ca_cert(),
                id.user,
                Credentials::Certificate {
                    cert: &cert,
                    key: &key,
                },
            );
            std::fs::write(&path, yaml)?;
            Ok(path)
        };
        let admin_kubeconfig = kubeconfig_for(pki::ADMIN)?;
        let cm_kubeconfig = kubeconfig_for(pki::CONTROLLER_MANAGER)?;
        let scheduler_kubeconfig = kubeconfig_for(pki::SCHEDULER)?;

        let mut api_server = layout.api_server(&pki);
        let audit_log = match options.audit {
            true => Some(layout.enable_audit(&mut api_server)?),
            false => None,
        };
        let mut cluster = LocalCluster {
            layout: layout.clone(),
            ranges,
            admin_kubeconfig,
            control_addr: None,
            kubelet_network: None,
            audit_log,
            registry_url: None,
            children: Vec::new(),
            detached: false,
            _claim: claim,
            last_controller_port: None,
            watched_pods: Vec::new(),
            restart_check: Default::default(),
        };
        cluster.spawn("etcd", &mut layout.etcd())?;
        wait_for_tcp(layout.etcd_client_port, "etcd", &cluster).await?;
        cluster.spawn("kube-apiserver", &mut api_server)?;
        let client = cluster.client().await?;
        cluster.wait_api_ready(&client).await?;
        grant_kubelet_api_admin(&client).await?;
        cluster.spawn(
            "kube-controller-manager",
            &mut layout.controller_manager(&pki, &cm_kubeconfig),
        )?;
        cluster.spawn(
            "kube-scheduler",
            &mut layout.scheduler(&scheduler_kubeconfig),
        )?;
        // Pods cannot be created in a namespace before its default ServiceAccount exists.
        cluster
            .wait_for("the default ServiceAccount", || async {
                let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
                Ok(accounts.get_opt("default").await?.is_some())
            })
            .await?;
        if options.agent {
            cluster.start_agent(&options, &client).await?;
        }
        Ok(cluster)
    }

    /// A loopback port for a controller run as a local process (see
    /// [`ranges::Ranges::controller_port`]).
    pub fn controller_port(&mut self) -> Result<u16> {
        let port = self.ranges.controller_port(self.last_controller_port)?;
        self.last_controller_port = Some(port);
        Ok(port)
    }

    /// Starts a process that belongs to this run (stopped with it).
    pub fn spawn_recorded(&mut self, name: &str, command: &mut Command) -> Result<()> {
        self.spawn(name, command)
    }

    /// Stops the recorded process `name` of the run by PID (SIGTERM, then SIGKILL after
    /// `grace`) and forgets it, so [`LocalCluster::wait_for`] does not take its exit for a
    /// crash.
    pub fn stop_recorded(&mut self, name: &str, grace: Duration) -> Result<()> {
        let index = self
            .children
            .iter()
            .position(|(record, _)| record.name == name)
            .with_context(|| format!("no running process named {name}"))?;
        let (record, mut child) = self.children.remove(index);
        record.stop(grace)?;
        child.wait()?;
        Ok(())
    }

    fn spawn(&mut self, name: &str, command: &mut Command) -> Result<()> {
        let child = process::spawn(&self.layout.run_dir, name, command)?;
        self.children.push(child);
        Ok(())
    }

    async fn start_agent(&mut self, options: &Options, client: &kube::Client) -> Result<()> {
        let agent = workspace_binary("node-agent")?;
        let registry = self.start_registry().await?;
        self.registry_url = Some(registry.clone());
        let pki = pki::PkiPaths {
            dir: self.layout.run_dir.join("pki"),
        };
        let control_port = self.ranges.port(ranges::port::AGENT_CONTROL);
        let network = netns::KubeletNetwork::create(self.ranges.slot, &self.layout.run_dir)?;
        self.kubelet_network = Some(network.clone());
        // The namespace is the run's own, so any port there is free.
        let kubelet_base = 10250;
        let mut command = Command::new(agent);
        command
            .arg(format!("--kubeconfig={}", self.admin_kubeconfig.display()))
            .arg(format!(
                "--state-dir={}",
                self.layout.run_dir.join("agent").display()
            ))
            .arg(format!("--nodes={}", options.nodes))
            .arg(format!("--pod-cidr={}", self.ranges.pod_cidr))
            .arg(format!("--kubelet-port-base={kubelet_base}"))
            .arg(format!("--kubelet-address={}", network.kubelet_ip))
            .arg(format!("--kubelet-netns={}", network.path().display()))
            .arg(format!("--control-addr=127.0.0.1:{control_port}"))
            .arg(format!("--registry-mirror={registry}"))
            .arg(format!(
                "--image-dir={}",
                images::image_store_dir().display()
            ))
            .arg(format!(
                "--tls-cert-file={}",
                pki.kubelet_serving_cert().display()
            ))
            .arg(format!(
                "--tls-private-key-file={}",
                pki.kubelet_serving_key().display()
            ))
            .arg(format!("--client-ca-file={}", pki.ca_cert().display()))
            .env(
                "RUST_LOG",
                std::env::var("AGENT_LOG").unwrap_or_else(|_| "info".into()),
            );
        self.spawn("node-agent", &mut command)?;
        self.control_addr = Some(SocketAddr::from(([127, 0, 0, 1], control_port)));
        let expected = options.nodes as usize;
        self.wait_for("every Node Ready", || async {
            let nodes: Api<Node> = Api::all(client.clone());
            let list = nodes.list(&Default::default()).await?;
            Ok(list.items.iter().filter(|n| node_ready(n)).count() >= expected)
        })
        .await
    }

    /// A client with the admin credentials.
    pub async fn client(&self) -> Result<kube::Client> {
        kube_client(&self.admin_kubeconfig).await
    }

    /// An admin client that returns 429 Too Many Requests instead of retrying it, as
    /// `kubectl drain` sees an eviction a disruption budget refuses (kube's default client
    /// retries the 429 until the budget allows it, so the refusal would never show).
    pub async fn client_without_retry(&self) -> Result<kube::Client> {
        let kubeconfig = kube::config::Kubeconfig::read_from(&self.admin_kubeconfig)?;
        let mut config = kube::Config::from_custom_kubeconfig(
            kubeconfig,
            &kube::config::KubeConfigOptions::default(),
        )
        .await?;
        config.default_retry = false;
        Ok(kube::Client::try_from(config)?)
    }

    async fn wait_api_ready(&self, client: &kube::Client) -> Result<()> {
        self.wait_for("the API server's /readyz", || async {
            let request = http::Request::get("/readyz").body(Vec::new())?;
            Ok(client
                .request_text(request)
                .await
                .is_ok_and(|body| body.trim() == "ok"))
        })
        .await
    }

    /// Polls `check` until it is true, failing with the component logs' tail on timeout
    /// or when a component died meanwhile.
    pub async fn wait_for<F, Fut>(&self, what: &str, mut check: F) -> Result<()>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<bool>>,
    {
        self.wait_for_value(what, || {
            let checked = check();
            async move { Ok(checked.await?.then_some(())) }
        })
        .await
    }

    /// Polls `check` until it yields a value; fails like [`LocalCluster::wait_for`].
    pub async fn wait_for_value<T, F, Fut>(&self, what: &str, mut check: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Option<T>>>,
    {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            self.check_running(what).await?;
            if let Ok(Some(value)) = check().await {
                return Ok(value);
            }
            if Instant::now() > deadline {
                bail!("timed out after {READY_TIMEOUT:?} waiting for {what}");
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// From now on every wait fails when a container of the pods `selector` selects in
    /// `namespace` has restarted, with that container's previous log: the operator's
    /// controllers run as pods, and one that crashes must fail the test as a crashed
    /// local process does, not be restarted unseen.
    pub fn fail_on_restarts(&mut self, namespace: &str, selector: &str) {
        self.watched_pods.push((namespace.into(), selector.into()));
    }

    /// The pod with `uid` was crashed on purpose: its restart is no failure.
    pub fn spare_restarts_of(&self, uid: &str) {
        let mut check = self.restart_check.lock().unwrap();
        check.spared.insert(uid.into());
    }

    /// Fails when a process of the run exited, or (every [`RESTART_CHECK_EVERY`] at most) a
    /// container of a watched pod restarted. Waits call it on every poll.
    pub async fn check_running(&self, what: &str) -> Result<()> {
        if let Some(dead) = self.children.iter().find(|(r, _)| !r.is_alive()) {
            bail!(
                "{} exited while waiting for {what}; its log ends:\n{}",
                dead.0.name,
                self.log_tail(&dead.0.name, 30)
            );
        }
        if self.watched_pods.is_empty() {
            return Ok(());
        }
        {
            let mut check = self.restart_check.lock().unwrap();
            if check
                .last
                .is_some_and(|t| t.elapsed() < RESTART_CHECK_EVERY)
            {
                return Ok(());
            }
            check.last = Some(Instant::now());
        }
        // Best effort between polls: an API error is the wait's own check's to report.
        match self.restart_report(what).await {
            Ok(Some(report)) => bail!("{report}"),
            _ => Ok(()),
        }
    }

    /// Fails when a container of a pod [`LocalCluster::fail_on_restarts`] watches has
    /// restarted, with its previous log, or when that cannot be told; `what` says what the
    /// test was doing.
    pub async fn check_restarts(&self, what: &str) -> Result<()> {
        match self.restart_report(what).await? {
            Some(report) => bail!("{report}"),
            None => Ok(()),
        }
    }

    /// The admin client of [`LocalCluster::check_restarts`] and the controller logs, new on
    /// each call (at most every [`RESTART_CHECK_EVERY`] per wait): a client's connections
    /// belong to the async runtime that made them, and the tests sharing a cluster each
    /// run in a runtime of their own, at the same time.
    async fn watch_client(&self) -> Result<kube::Client> {
        self.client().await
    }

    /// What [`LocalCluster::check_restarts`] fails with, if anything.
    async fn restart_report(&self, what: &str) -> Result<Option<String>> {
        let spared = self.restart_check.lock().unwrap().spared.clone();
        let client = self.watch_client().await?;
        for (namespace, selector) in &self.watched_pods {
            let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
            let list = pods.list(&ListParams::default().labels(selector)).await?;
            for pod in &list.items {
                if pod
                    .metadata
                    .uid
                    .as_ref()
                    .is_some_and(|u| spared.contains(u))
                {
                    continue;
                }
                let Some((container, why)) = restarted(pod) else {
                    continue;
                };
                let name = pod.metadata.name.clone().unwrap_or_default();
                let params = LogParams {
                    container: Some(container.clone()),
                    previous: true,
                    tail_lines: Some(30),
                    ..Default::default()
                };
                let log = pods
                    .logs(&name, &params)
                    .await
                    .unwrap_or_else(|e| format!("(no log: {e})"));
                return Ok(Some(format!(
                    "container {container} of pod {namespace}/{name} restarted ({why}) while waiting for {what}; its previous log ends:\n{log}"
                )));
            }
        }
        Ok(None)
    }

    /// The last `lines` of the log of the controller `binary`: of its leading pod when the
    /// operator runs as pods, else of its local process.
    pub async fn controller_log(&self, binary: &str, lines: usize) -> String {
        if self.watched_pods.is_empty() {
            return format!("{binary}'s log ends:\n{}", self.log_tail(binary, lines));
        }
        let client = match self.watch_client().await {
            Ok(client) => client,
            Err(e) => return format!("(no client for {binary}'s log: {e:#})"),
        };
        let mut out = Vec::new();
        for (namespace, _) in &self.watched_pods {
            out.push(controller_pods::leader_log(&client, namespace, binary, lines as i64).await);
        }
        out.join("\n")
    }

    /// The PID of the running process `name` this run started.
    pub fn pid_of(&self, name: &str) -> Option<i32> {
        self.children
            .iter()
            .find(|(record, _)| record.name == name)
            .map(|(record, _)| record.pid)
    }

    /// The last `lines` lines of a component's log.
    pub fn log_tail(&self, name: &str, lines: usize) -> String {
        let text = self.log_text(name);
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// The last `lines` lines of a component's log that contain `needle` (a pod's name, say).
    pub fn log_matching(&self, name: &str, needle: &str, lines: usize) -> String {
        let text = self.log_text(name);
        let all: Vec<&str> = text.lines().filter(|l| l.contains(needle)).collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// The last `lines` lines of the latest log of `container` in the pod with `uid` on the
    /// node agent (`agent/pods/<uid>/<container>/<restart>.log`): for a failure message
    /// about a container that exits, whose own words (a crash report) are there.
    pub fn container_log_tail(&self, uid: &str, container: &str, lines: usize) -> String {
        let dir = self
            .layout
            .run_dir
            .join("agent/pods")
            .join(uid)
            .join(container);
        let latest = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let restart: u32 = name.strip_suffix(".log")?.parse().ok()?;
                Some((restart, e.path()))
            })
            .max_by_key(|(restart, _)| *restart);
        let Some((restart, path)) = latest else {
            return format!("(no log in {})", dir.display());
        };
        let text = String::from_utf8_lossy(&std::fs::read(path).unwrap_or_default()).into_owned();
        let all: Vec<&str> = text.lines().collect();
        format!(
            "{restart}.log:\n{}",
            all[all.len().saturating_sub(lines)..].join("\n")
        )
    }

    /// A component's whole log (empty when it has none yet).
    fn log_text(&self, name: &str) -> String {
        let path = self.layout.run_dir.join("logs").join(format!("{name}.log"));
        String::from_utf8_lossy(&std::fs::read(path).unwrap_or_default()).into_owned()
    }

    /// Leaves the processes running after this value is dropped (`local-cluster up`).
    pub fn detach(mut self) {
        self.detached = true;
    }

    /// Stops every process of the run by PID, newest first.
    pub fn stop(&mut self) -> Result<()> {
        let mut failures = Vec::new();
        while let Some((record, mut child)) = self.children.pop() {
            if let Err(error) = record.stop(STOP_GRACE) {
                failures.push(error.to_string());
            }
            let _ = child.wait();
        }
        // Anything else recorded in the run dir (the operator's controllers, say).
        if let Err(error) = process::stop_all(&self.layout.run_dir, STOP_GRACE) {
            failures.push(error.to_string());
        }
        let left = process::kill_container_leftovers(&self.layout.run_dir.join("agent"));
        if left > 0 {
            eprintln!(
                "local-cluster: killed {left} container processes the node agent left running"
            );
        }
        if let Some(network) = self.kubelet_network.take() {
            network.delete();
        }
        unmount_under(&self.layout.run_dir);
        if failures.is_empty() {
            Ok(())
        } else {
            bail!("{}", failures.join("; "))
        }
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        if !self.detached
            && let Err(error) = self.stop()
        {
            eprintln!("local-cluster: teardown: {error:#}");
        }
    }
}

/// Unmounts every mount below `dir` (the `local-sized` volumes' tmpfs), deepest first.
pub fn unmount_under(dir: &Path) {
    let Ok(dir) = std::path::absolute(dir) else {
        return;
    };
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut points: Vec<PathBuf> = mounts
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(PathBuf::from)
        .filter(|p| p.starts_with(&dir) && *p != dir)
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for point in points {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(&point)
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// The first container of `pod` that has restarted, and how its last run ended.
fn restarted(pod: &Pod) -> Option<(String, String)> {
    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
    let status = statuses.iter().find(|s| s.restart_count > 0)?;
    let ended = status
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .map(|t| {
            format!(
                "exit code {}{}",
                t.exit_code,
                t.reason
                    .as_deref()
                    .map(|r| format!(", {r}"))
                    .unwrap_or_default()
            )
        })
        .unwrap_or_else(|| "no exit recorded".into());
    Some((
        status.name.clone(),
        format!("restart count {}, last {ended}", status.restart_count),
    ))
}

/// A kube client from a kubeconfig file.
pub async fn kube_client(kubeconfig: &Path) -> Result<kube::Client> {
    let config = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let config =
        kube::Config::from_custom_kubeconfig(config, &kube::config::KubeConfigOptions::default())
            .await?;
    Ok(kube::Client::try_from(config)?)
}

/// Binds `system:kubelet-api-admin` (every kubelet API subresource) to the API server's
/// kubelet client, as kubeadm does: the node agent authorizes the node proxy's requests
/// (`kubectl logs`) with SubjectAccessReviews like a real kubelet.
async fn grant_kubelet_api_admin(client: &kube::Client) -> Result<()> {
    use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
    let binding: ClusterRoleBinding = serde_json::from_value(serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "kube-apiserver-kubelet-api-admin"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "system:kubelet-api-admin",
        },
        "subjects": [{
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "User",
            "name": pki::KUBELET_CLIENT.user,
        }],
    }))?;
    Api::<ClusterRoleBinding>::all(client.clone())
        .patch(
            "kube-apiserver-kubelet-api-admin",
            &kube::api::PatchParams::apply("local-cluster").force(),
            &kube::api::Patch::Apply(&binding),
        )
        .await
        .context("binding system:kubelet-api-admin to the API server's kubelet client")?;
    Ok(())
}

fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

async fn wait_for_tcp(port: u16, what: &str, cluster: &LocalCluster) -> Result<()> {
    cluster
        .wait_for(what, || async move {
            Ok(tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok())
        })
        .await
}

/// The repository root (this crate is e2e/local-cluster). Cargo's CARGO_MANIFEST_DIR at
/// run time first: the one compiled in stays that of the checkout that built the crate, and
/// cargo does not rebuild a crate whose checkout moved (a shared target directory then runs
/// the other checkout's scripts).
pub fn repo_root() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
        .join("../..")
}

/// Runs the repository script `path` with bash, `args` and `env`, its progress on our stderr;
/// returns what it printed on stdout (the scripts print their result there).
pub fn run_script(path: &str, args: &[&str], env: &[(&str, &Path)]) -> Result<String> {
    let script = repo_root().join(path);
    let output = Command::new("bash")
        .arg(&script)
        .args(args)
        .envs(env.iter().copied())
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    if !output.status.success() {
        bail!("{} failed ({})", script.display(), output.status);
    }
    Ok(String::from_utf8(output.stdout)?)
}

/// The directory with etcd and the Kubernetes binaries: `e2e/k8s/build.sh` builds what is
/// missing (or points at KUBEBUILDER_ASSETS) and prints it.
pub fn kubernetes_binaries() -> Result<PathBuf> {
    Ok(PathBuf::from(
        run_script("e2e/k8s/build.sh", &[], &[])?.trim(),
    ))
}

/// A workspace binary (node-agent, the controllers) by name: in $VALKEY_OPERATOR_BIN_DIR
/// if set, else next to the running executable (cargo puts test binaries in
/// target/<profile>/deps and the others in target/<profile>).
pub fn workspace_binary(name: &str) -> Result<PathBuf> {
    if let Ok(dir) = std::env::var("VALKEY_OPERATOR_BIN_DIR") {
        return Ok(PathBuf::from(dir).join(name));
    }
    let exe = std::env::current_exe()?;
    let mut dir = exe.parent();
    while let Some(d) = dir {
        let candidate = d.join(name);
        if candidate.is_file() {
            return Ok(candidate);
        }
        if d.file_name().is_some_and(|n| n == "target") {
            break;
        }
        dir = d.parent();
    }
    bail!(
        "cannot find the {name} binary near {}: run `cargo build --workspace --bins` or set VALKEY_OPERATOR_BIN_DIR",
        exe.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restarted_container_is_named_with_how_it_ended() {
        let pod = |statuses: serde_json::Value| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "p"},
                "status": {"containerStatuses": statuses}
            }))
            .unwrap()
        };
        let status = |name: &str, restarts: i32, last: serde_json::Value| {
            serde_json::json!({
                "name": name, "restartCount": restarts, "ready": true, "image": "i",
                "imageID": "", "lastState": last
            })
        };
        assert_eq!(
            restarted(&pod(serde_json::json!([status(
                "a",
                0,
                serde_json::json!({})
            )]))),
            None
        );
        let crashed = pod(serde_json::json!([
            status("a", 0, serde_json::json!({})),
            status(
                "b",
                2,
                serde_json::json!({"terminated": {"exitCode": 101, "reason": "Error"}})
            ),
        ]));
        assert_eq!(
            restarted(&crashed),
            Some((
                "b".into(),
                "restart count 2, last exit code 101, Error".into()
            ))
        );
        let unknown = pod(serde_json::json!([status("c", 1, serde_json::json!({}))]));
        assert_eq!(
            restarted(&unknown),
            Some(("c".into(), "restart count 1, last no exit recorded".into()))
        );
    }
}
