//! Helpers the e2e tests share: a cluster with the operator installed, valkey-cli, Events,
//! stopping and restarting a controller.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use crd_types::conditions::{self, types};
use crd_types::node::WorkloadStatus;
use crd_types::template::WorkloadType;
use crd_types::{ValkeyNode, ValkeyNodeSpec};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::{Api, ResourceExt};

use local_cluster::controller_pods::PodController;
use local_cluster::operator::{self, RunningController};
use local_cluster::{LocalCluster, Options, operator_pods};

use crate::topology::fixture_template;

/// A local cluster with the node agent and the operator installed from
/// deploy/overlays/all as a user installs it: every controller a pod of its Deployment,
/// running the operator image (see [`operator_pods::install_controllers`]).
pub async fn cluster_with_operator(run_dir: &Path) -> Result<(LocalCluster, Vec<PodController>)> {
    cluster_with_operator_using(Options::new(run_dir), &[]).await
}

/// [`cluster_with_operator`] from `options`, with `(binary, name, value)` environment
/// entries for the controllers' containers (a test's shorter intervals, say).
pub async fn cluster_with_operator_using(
    options: Options,
    extra_env: &[(&str, &str, &str)],
) -> Result<(LocalCluster, Vec<PodController>)> {
    let mut cluster = LocalCluster::start(options).await?;
    let controllers =
        operator_pods::install_controllers(&mut cluster, &all_overlay(), extra_env).await?;
    Ok((cluster, controllers))
}

/// deploy/overlays/all: every controller, cluster-wide.
fn all_overlay() -> std::path::PathBuf {
    local_cluster::repo_root().join("deploy/overlays/all")
}

/// The controller running `binary` among `controllers`.
pub fn controller<'a>(controllers: &'a [PodController], binary: &str) -> &'a PodController {
    controllers
        .iter()
        .find(|c| c.binary == binary)
        .unwrap_or_else(|| panic!("the overlay runs no {binary}"))
}

/// A control plane without the node agent (nothing runs pods), with the operator from
/// deploy/overlays/all: its controllers as local processes, each with a token of its own
/// ServiceAccount, so RBAC is exercised exactly as deployed.
pub async fn api_server_with_operator(
    run_dir: &Path,
) -> Result<(LocalCluster, Vec<RunningController>)> {
    let mut options = Options::new(run_dir);
    options.agent = false;
    let mut cluster = LocalCluster::start(options).await?;
    let controllers = operator::install(&mut cluster, &all_overlay()).await?;
    Ok((cluster, controllers))
}

/// A local cluster from `options` with the controllers as local processes (see
/// [`operator::install_with_env`]): for the benchmarks, which sample a controller's CPU
/// and memory by PID and compare figures taken that way. Tests use
/// [`cluster_with_operator`].
pub async fn cluster_with_local_controllers(
    options: Options,
    extra_env: &[(&str, &str, &str)],
) -> Result<(LocalCluster, Vec<RunningController>)> {
    let mut cluster = LocalCluster::start(options).await?;
    let controllers = operator::install_with_env(&mut cluster, &all_overlay(), extra_env).await?;
    Ok((cluster, controllers))
}

/// `valkey-cli -h <host> -p 6379 <args>`: its trimmed output, or its error text when it
/// printed nothing (so a failed assertion shows why).
pub fn valkey_cli(host: &str, args: &[&str]) -> String {
    valkey_cli_as(host, None, args)
}

/// `SET <key> <value>` with `value` on valkey-cli's stdin (`-x`), for values too large for
/// its command line; its answer, or its error text.
pub fn set_from_stdin(host: &str, key: &str, value: &[u8]) -> String {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = Command::new("valkey-cli")
        .args(["-h", host, "-p", "6379", "-x", "SET", key])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("valkey-cli runs");
    child.stdin.take().unwrap().write_all(value).unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if text.is_empty() {
        return String::from_utf8_lossy(&out.stderr).trim().to_string();
    }
    text
}

/// [`valkey_cli`] logged in as `(user, password)`; `None` as the user means the default
/// user. The password goes through REDISCLI_AUTH, as in the pods.
pub fn valkey_cli_as(host: &str, login: Option<(Option<&str>, &str)>, args: &[&str]) -> String {
    let mut command = Command::new("valkey-cli");
    command.args(["-h", host, "-p", "6379"]);
    if let Some((user, password)) = login {
        command.env("REDISCLI_AUTH", password);
        if let Some(user) = user {
            command.args(["--user", user]);
        }
    }
    let output = command.args(args).output().expect("valkey-cli runs");
    let stdout = String::from_utf8_lossy(&output.stdout).trim().to_string();
    if stdout.is_empty() {
        return String::from_utf8_lossy(&output.stderr).trim().to_string();
    }
    stdout
}

/// `valkey-cli` to the plain-text client port (6380) a TLS data node opens with
/// `tls.plainTextClients`, at `host` (a member's or a group's Service), as the default user.
pub fn plain_text_cli(host: &str, password: &str, args: &[&str]) -> String {
    let port = crd_types::names::ports::VALKEY_PLAIN.to_string();
    let mut all = vec!["-p", &port];
    all.extend(args);
    valkey_cli_as(host, Some((None, password)), &all)
}

/// Whether a `valkey-cli` answer says that nothing listens there.
pub fn connection_refused(answer: &str) -> bool {
    answer.contains("Connection refused")
}

/// Asserts what a topology member's default user may do, through `cli` (valkey-cli logged
/// in as it on one member): every admin command below is refused (`NOPERM`), the read-only
/// ones clients use are not (docs/security.md, "Valkey users"). `cluster` adds the cluster
/// layout's commands. A command let through would harm the member (that is the point), and
/// the assertion then fails.
pub fn assert_default_user_is_a_clients(cli: impl Fn(&[&str]) -> String, cluster: bool) {
    let mut refused: Vec<&[&str]> = vec![
        &["CONFIG", "GET", "masterauth"],
        &["CONFIG", "SET", "maxmemory-policy", "noeviction"],
        &["ACL", "SETUSER", "operator", ">taken-over"],
        &["ACL", "GETUSER", "operator"],
        &["ACL", "LIST"],
        &["CLIENT", "KILL", "TYPE", "replica"],
        &["CLIENT", "PAUSE", "1"],
        &["REPLICAOF", "127.0.0.1", "1"],
        &["FAILOVER"],
        &["BGSAVE"],
        &["SHUTDOWN", "NOSAVE"],
    ];
    if cluster {
        refused.extend([
            &["CLUSTER", "SETSLOT", "0", "STABLE"][..],
            &[
                "CLUSTER",
                "FORGET",
                "0000000000000000000000000000000000000000",
            ],
            &["CLUSTER", "RESET"],
        ]);
    }
    for args in refused {
        let got = cli(args);
        assert!(got.starts_with("NOPERM"), "default user {args:?}: {got}");
    }
    assert_eq!(cli(&["ACL", "WHOAMI"]), "default");
    let role = cli(&["ROLE"]);
    assert!(
        role.starts_with("master") || role.starts_with("slave"),
        "default user ROLE: {role}"
    );
    for (args, shows) in [
        (&["CLIENT", "LIST"][..], "id="),
        (&["SLOWLOG", "LEN"], ""),
        (&["INFO", "server"], "valkey_version"),
    ] {
        let got = cli(args);
        assert!(
            !got.starts_with("NOPERM") && got.contains(shows),
            "default user {args:?}: {got}"
        );
    }
}

/// Asserts what a ValkeyReplication sentinel's default user may do, through `cli`
/// (valkey-cli logged in as it on one sentinel of `group`): nothing that changes the group
/// or the sentinel (every such command below is `NOPERM`, `PUBLISH` too, which could feed it
/// a forged hello), and what a Sentinel-aware client asks still answers.
pub fn assert_sentinel_default_user_is_a_clients(cli: impl Fn(&[&str]) -> String, group: &str) {
    let refused: [&[&str]; 16] = [
        &["SENTINEL", "SET", group, "quorum", "1"],
        &["SENTINEL", "REMOVE", group],
        &["SENTINEL", "MONITOR", "hijack", "127.0.0.1", "1", "1"],
        &["SENTINEL", "FAILOVER", group],
        &["SENTINEL", "RESET", group],
        &["SENTINEL", "CONFIG", "GET", "*"],
        &[
            "SENTINEL",
            "IS-MASTER-DOWN-BY-ADDR",
            "127.0.0.1",
            "1",
            "0",
            "*",
        ],
        &["SENTINEL", "FLUSHCONFIG"],
        &["SENTINEL", "DEBUG"],
        &["SENTINEL", "SIMULATE-FAILURE", "crash-after-election"],
        &["PUBLISH", "__sentinel__:hello", "forged"],
        &["ACL", "LIST"],
        &["ACL", "SETUSER", "operator", ">taken-over"],
        &["CLIENT", "KILL", "TYPE", "normal"],
        &["CLIENT", "PAUSE", "1"],
        &["SHUTDOWN", "NOSAVE"],
    ];
    for args in refused {
        let got = cli(args);
        assert!(
            got.starts_with("NOPERM"),
            "sentinel default user {args:?}: {got}"
        );
    }
    assert_eq!(cli(&["ACL", "WHOAMI"]), "default");
    for (args, shows) in [
        (&["ROLE"][..], "sentinel"),
        (&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", group], "6379"),
        (&["SENTINEL", "MASTERS"], group),
        (&["SENTINEL", "REPLICAS", group], "name"),
        (&["SENTINEL", "SENTINELS", group], "name"),
        (&["SENTINEL", "CKQUORUM", group], "OK"),
        (&["CLIENT", "LIST"], "id="),
        (&["INFO", "sentinel"], group),
    ] {
        let got = cli(args);
        assert!(
            !got.starts_with("NOPERM") && got.contains(shows),
            "sentinel default user {args:?}: {got}"
        );
    }
}

/// Events with `reason` about the object of `kind` named `name`.
pub async fn events_about(
    events: &Api<Event>,
    kind: &str,
    name: &str,
    reason: &str,
) -> Result<Vec<Event>> {
    Ok(events
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason) && regards(e, kind, name))
        .collect())
}

/// Whether `event` is about the object of `kind` named `name`.
pub fn regards(event: &Event, kind: &str, name: &str) -> bool {
    let regarding = event.regarding.as_ref();
    regarding.and_then(|r| r.name.as_deref()) == Some(name)
        && regarding.and_then(|r| r.kind.as_deref()) == Some(kind)
}

/// Stops the recorded process `name` of the run by PID (SIGTERM, then SIGKILL after
/// `grace`) and forgets it, so [`LocalCluster::wait_for`] does not take its exit for a
/// crash. For an outage of a controller started by [`cluster_with_local_controllers`].
pub fn stop_process(cluster: &mut LocalCluster, name: &str, grace: Duration) -> Result<()> {
    cluster.stop_recorded(name, grace)
}

/// Starts a controller stopped by [`stop_process`] again, as [`operator::install`] started
/// it: the same binary, environment and ServiceAccount kubeconfig (its token lasts a day),
/// on a new HTTP port. Waits for its /readyz.
pub async fn restart_controller(
    cluster: &mut LocalCluster,
    controller: &RunningController,
) -> Result<RunningController> {
    let process = &controller.process;
    let binary = local_cluster::workspace_binary(&process.binary)?;
    let http_port = cluster.controller_port()?;
    let http_addr = format!("127.0.0.1:{http_port}");
    let mut command = Command::new(binary);
    command
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default());
    for (name, value) in &process.env {
        command.env(name, value);
    }
    command
        .env("KUBECONFIG", &controller.kubeconfig)
        .env("LOG_FORMAT", "text")
        .env("HTTP_ADDR", &http_addr)
        .env("POD_NAMESPACE", &process.namespace)
        .env("POD_NAME", format!("{}-local", process.binary));
    cluster.spawn_recorded(&process.binary, &mut command)?;
    cluster
        .wait_for(
            &format!("{} /readyz after a restart", process.binary),
            || {
                let http_addr = http_addr.clone();
                async move { Ok(operator::http_get(&http_addr, "/readyz").await.is_some()) }
            },
        )
        .await?;
    Ok(RunningController {
        process: process.clone(),
        http_addr,
        kubeconfig: controller.kubeconfig.clone(),
    })
}

/// A ValkeyNode fixture: `maxmemory 100mb`, and a 1Gi volume (reclaimPolicy Delete, in
/// `storage_class` or the default class) when `persistent`.
pub fn valkey_node(
    name: &str,
    workload_type: WorkloadType,
    persistent: bool,
    storage_class: Option<&str>,
) -> ValkeyNode {
    let mut template = fixture_template(persistent);
    template.workload_type = workload_type;
    if let Some(persistence) = &mut template.persistence {
        persistence.storage_class_name = storage_class.map(str::to_string);
    }
    ValkeyNode::new(
        name,
        ValkeyNodeSpec {
            template,
            ..Default::default()
        },
    )
}

/// The node's status.workload and ClusterIP once WorkloadReady is True, the workload says
/// ready with the pod IP of the live pod it names, and that pod is not `not_uid` (a
/// deleted one).
pub async fn ready_node(
    nodes: &Api<ValkeyNode>,
    pods: &Api<Pod>,
    name: &str,
    not_uid: Option<&str>,
) -> Result<Option<(WorkloadStatus, String)>> {
    let status = nodes.get_status(name).await?.status.unwrap_or_default();
    let Some(workload) = status.workload.clone() else {
        return Ok(None);
    };
    let Some(cluster_ip) = status.endpoint.and_then(|e| e.cluster_ip) else {
        return Ok(None);
    };
    if !conditions::is_true(&status.conditions, types::WORKLOAD_READY)
        || !workload.ready
        || workload.pod_ip.is_none()
    {
        return Ok(None);
    }
    let Some(pod) = pods
        .get_opt(workload.pod_name.as_deref().unwrap_or(""))
        .await?
    else {
        return Ok(None);
    };
    let same_ip = pod.status.as_ref().and_then(|s| s.pod_ip.as_ref()) == workload.pod_ip.as_ref();
    let fresh = not_uid.is_none_or(|old| pod.uid().as_deref() != Some(old));
    Ok((same_ip && fresh).then_some((workload, cluster_ip)))
}

/// Why [`ready_node`] does not yet return `name`: its status and its pod as they are now,
/// so a wait that times out says which part never came.
pub async fn why_node_not_ready(
    nodes: &Api<ValkeyNode>,
    pods: &Api<Pod>,
    name: &str,
    not_uid: Option<&str>,
) -> Result<String> {
    let status = nodes.get_status(name).await?.status.unwrap_or_default();
    let condition = status
        .conditions
        .iter()
        .find(|c| c.type_ == types::WORKLOAD_READY)
        .map(|c| format!("{} ({}: {})", c.status, c.reason, c.message))
        .unwrap_or_else(|| "absent".into());
    let workload = status.workload.as_ref();
    let pod_name = workload.and_then(|w| w.pod_name.clone());
    let mut why = format!(
        "{name}: WorkloadReady {condition}; workload ready {:?}, pod {pod_name:?}, pod IP {:?}; ClusterIP {:?}",
        workload.map(|w| w.ready),
        workload.and_then(|w| w.pod_ip.clone()),
        status.endpoint.as_ref().and_then(|e| e.cluster_ip.clone()),
    );
    let Some(pod_name) = pod_name else {
        return Ok(why);
    };
    let Some(pod) = pods.get_opt(&pod_name).await? else {
        why.push_str("; that pod does not exist");
        return Ok(why);
    };
    let pod_status = pod.status.clone().unwrap_or_default();
    let containers: Vec<String> = pod_status
        .container_statuses
        .iter()
        .flatten()
        .map(|c| {
            let state = c.state.as_ref();
            let waiting = state
                .and_then(|s| s.waiting.as_ref())
                .map(|w| format!("waiting {:?} {:?}", w.reason, w.message));
            let terminated = state
                .and_then(|s| s.terminated.as_ref())
                .map(|t| format!("terminated {} {:?}", t.exit_code, t.reason));
            let running = state
                .and_then(|s| s.running.as_ref())
                .map(|_| "running".to_string());
            format!(
                "{} {} ready {} restarts {}",
                c.name,
                waiting.or(terminated).or(running).unwrap_or_default(),
                c.ready,
                c.restart_count
            )
        })
        .collect();
    why.push_str(&format!(
        "; pod {} (old: {}), phase {:?}, Ready {}, pod IP {:?}, deleting {}, containers [{}]",
        pod.uid().unwrap_or_default(),
        not_uid.is_some_and(|old| pod.uid().as_deref() == Some(old)),
        pod_status.phase,
        pod_ready(&pod),
        pod_status.pod_ip,
        pod.metadata.deletion_timestamp.is_some(),
        containers.join(", ")
    ));
    Ok(why)
}

/// How the containers of a namespace's pods ended, watched from the API server: the node
/// agent, like the kubelet, writes their terminated states before a deleted pod goes.
pub struct ContainerExits {
    seen: Arc<Mutex<BTreeMap<String, BTreeMap<String, i32>>>>,
    task: tokio::task::JoinHandle<()>,
}

impl ContainerExits {
    /// Starts watching; returns once the watch has listed the pods, so nothing after the
    /// call is missed.
    pub async fn watch(pods: &Api<Pod>) -> Result<Self> {
        use futures::StreamExt;
        use kube::runtime::WatchStreamExt;
        use kube::runtime::watcher::{self, Event};
        let seen: Arc<Mutex<BTreeMap<String, BTreeMap<String, i32>>>> = Arc::default();
        let (listed, is_listed) = tokio::sync::oneshot::channel();
        let record = seen.clone();
        // The backoff also makes the task yield on errors (the API server stopped at the end
        // of a test), so aborting it is not starved by a loop of ready errors.
        let mut stream = watcher::watcher(pods.clone(), watcher::Config::default())
            .default_backoff()
            .boxed();
        let task = tokio::spawn(async move {
            let mut listed = Some(listed);
            while let Some(event) = stream.next().await {
                let pod = match event {
                    Ok(Event::Apply(pod) | Event::InitApply(pod) | Event::Delete(pod)) => pod,
                    Ok(Event::InitDone) => {
                        if let Some(listed) = listed.take() {
                            let _ = listed.send(());
                        }
                        continue;
                    }
                    _ => continue,
                };
                let statuses = pod.status.and_then(|s| s.container_statuses);
                for status in statuses.into_iter().flatten() {
                    let code = status.state.and_then(|s| s.terminated).map(|t| t.exit_code);
                    if let (Some(code), Some(uid)) = (code, pod.metadata.uid.clone()) {
                        record
                            .lock()
                            .unwrap()
                            .entry(uid)
                            .or_default()
                            .insert(status.name, code);
                    }
                }
            }
        });
        // A list the API server keeps refusing is retried for ever by the backoff.
        tokio::time::timeout(Duration::from_secs(60), is_listed)
            .await
            .context("the pod watch did not list the pods within 60 s")?
            .context("the pod watch ended before listing")?;
        Ok(Self { seen, task })
    }

    /// Each ended container of the pod `uid`, with its exit code.
    pub fn of(&self, uid: &str) -> BTreeMap<String, i32> {
        assert!(!self.task.is_finished(), "the pod watch stopped");
        self.seen
            .lock()
            .unwrap()
            .get(uid)
            .cloned()
            .unwrap_or_default()
    }
}

impl Drop for ContainerExits {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The pod's Ready condition is True.
pub fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The valkey-server listening on `pod_ip`, port 6379 (its process title names the
/// address): the pod's process on this machine, for freezing it with [`signal`].
pub fn valkey_server_pid(pod_ip: &str) -> Result<u32> {
    for entry in std::fs::read_dir("/proc")? {
        let entry = entry?;
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let text = String::from_utf8_lossy(&cmdline);
        if text.starts_with(&format!("valkey-server {pod_ip}:6379")) {
            return Ok(pid);
        }
    }
    anyhow::bail!("no valkey-server on {pod_ip}")
}

/// `kill -<name> <pid>`: `STOP` freezes a process, `CONT` lets it go on.
pub fn signal(pid: u32, name: &str) -> Result<()> {
    let status = Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()?;
    if !status.success() {
        anyhow::bail!("kill -{name} {pid} failed");
    }
    Ok(())
}

/// Each ValkeyNode's pod UID and the restart count of its containers, by node name: equal
/// before and after a change means no pod was replaced or restarted.
pub async fn pod_starts(
    pods: &Api<Pod>,
    members: &[ValkeyNode],
) -> Result<BTreeMap<String, (String, i32)>> {
    let mut starts = BTreeMap::new();
    for node in members {
        let name = crd_types::names::statefulset_pod_name(&node.name_any());
        let pod = pods
            .get(&name)
            .await
            .with_context(|| format!("pod {name}"))?;
        let restarts = pod
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .map(|c| c.iter().map(|c| c.restart_count).sum())
            .unwrap_or(0);
        starts.insert(node.name_any(), (pod.uid().unwrap_or_default(), restarts));
    }
    Ok(starts)
}

/// The `valkey_version` line of `INFO server`.
pub fn running_version(info: &str) -> Option<&str> {
    info.lines()
        .find_map(|l| l.strip_prefix("valkey_version:"))
        .map(str::trim)
}

/// Whether `client`'s user may `verb` `resource` of API group `group` in `namespace`, as the
/// API server's authorizer answers a SelfSubjectAccessReview.
pub async fn allowed(
    client: &kube::Client,
    verb: &str,
    group: &str,
    resource: &str,
    namespace: &str,
) -> bool {
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
    };
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                group: Some(group.into()),
                resource: Some(resource.into()),
                namespace: Some(namespace.into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let api: kube::Api<SelfSubjectAccessReview> = kube::Api::all(client.clone());
    let answer = api
        .create(&Default::default(), &review)
        .await
        .expect("a SelfSubjectAccessReview is always allowed");
    answer.status.is_some_and(|s| s.allowed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_line_of_info_server() {
        let info =
            "# Server\r\nredis_version:7.2.4\r\nvalkey_version:9.1.2\r\nserver_mode:cluster\r\n";
        assert_eq!(running_version(info), Some("9.1.2"));
        assert_eq!(running_version("# Server\r\n"), None);
    }
}
