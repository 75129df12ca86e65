//! Helpers for the ValkeyCluster e2e tests (`tests/valkey_cluster.rs`): a ValkeyCluster
//! fixture, waiting with a timeout of the caller's choosing (slot moves outlast the launcher's
//! 120 s) for phase Ready, Valkey's own view of the cluster (`CLUSTER NODES`,
//! `valkey-cli --cluster check`), a key set loaded and read back with the fred cluster client
//! (keys of a slot left open by a cut-off migration over plain connections, see
//! [`DataSet::missing`]), a background writer that records every write a replica acknowledged
//! (`WAIT 1`), and a watch over a roll through the members' roll gates.
//!
//! Every member is reached on its Service ClusterIP, port 6379: the address it announces, a
//! loopback address the test process reaches through the node agent's proxy.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use crd_types::cluster::{Phase, ValkeyClusterSpec};
use crd_types::conditions::{self, types};
use crd_types::config::ValkeyConfig;
use crd_types::names::{self, labels};
use crd_types::node::Role;
use crd_types::template::{Persistence, ReclaimPolicy, ValkeyNodeTemplate};
use crd_types::{ValkeyCluster, ValkeyClusterStatus, ValkeyNode};
use fred::prelude::{
    ClientLike, ConnectionConfig, KeysInterface, PerformanceConfig, ReconnectPolicy, ServerConfig,
};
use fred::types::{ClusterHash, CustomCommand};
use futures::stream::{self, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod, Secret};
use k8s_openapi::api::events::v1::Event;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};

use crate::LocalCluster;

/// Hash slots of a Valkey cluster.
pub const SLOTS: u32 = 16384;
/// The client port of every member, on its ClusterIP.
pub const PORT: u16 = names::ports::VALKEY as u16;
/// The reporting controller of the topology-controller's Events.
pub const TOPOLOGY_CONTROLLER: &str = "topology-controller";

/// A fred client (the name `Client` is kube's in this crate's tests).
pub type ValkeyClient = fred::clients::Client;

/// "Not yet, because ..." (`Err`) or the awaited value (`Ok`).
pub type Progress<T> = std::result::Result<T, String>;

/// The APIs the cluster tests use, in one namespace.
#[derive(Clone)]
pub struct ClusterApis {
    pub clusters: Api<ValkeyCluster>,
    pub nodes: Api<ValkeyNode>,
    pub pods: Api<Pod>,
    pub secrets: Api<Secret>,
    pub events: Api<Event>,
    /// Kubernetes Nodes (cluster-scoped).
    pub k8s_nodes: Api<Node>,
}

impl ClusterApis {
    pub fn new(client: &kube::Client, namespace: &str) -> Self {
        Self {
            clusters: Api::namespaced(client.clone(), namespace),
            nodes: Api::namespaced(client.clone(), namespace),
            pods: Api::namespaced(client.clone(), namespace),
            secrets: Api::namespaced(client.clone(), namespace),
            events: Api::namespaced(client.clone(), namespace),
            k8s_nodes: Api::all(client.clone()),
        }
    }

    /// Creates the cluster.
    pub async fn create(&self, cluster: &ValkeyCluster) -> Result<ValkeyCluster> {
        self.clusters
            .create(&PostParams::default(), cluster)
            .await
            .with_context(|| format!("creating ValkeyCluster {}", cluster.name_any()))
    }

    /// A JSON merge patch of the cluster (its spec, typically).
    pub async fn patch(&self, name: &str, patch: serde_json::Value) -> Result<ValkeyCluster> {
        self.clusters
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .with_context(|| format!("patching ValkeyCluster {name} with {patch}"))
    }

    /// The cluster's members, by the `valkey.rs/cluster` label, in name order.
    pub async fn members(&self, cluster: &str) -> Result<Vec<ValkeyNode>> {
        let selector = format!("{}={cluster}", labels::CLUSTER);
        let mut nodes = self
            .nodes
            .list(&ListParams::default().labels(&selector))
            .await?
            .items;
        nodes.sort_by_key(|n| n.name_any());
        Ok(nodes)
    }

    /// Events about the cluster reported by topology-controller.
    pub async fn topology_events(&self, cluster: &str) -> Result<Vec<Event>> {
        Ok(self
            .events
            .list(&Default::default())
            .await?
            .items
            .into_iter()
            .filter(|e| {
                let regarding = e.regarding.as_ref();
                regarding.and_then(|r| r.kind.as_deref()) == Some("ValkeyCluster")
                    && regarding.and_then(|r| r.name.as_deref()) == Some(cluster)
                    && e.reporting_controller.as_deref() == Some(TOPOLOGY_CONTROLLER)
            })
            .collect())
    }

    /// How many times topology-controller reported an Event about the cluster (an Event
    /// repeated as a series counts each time).
    pub async fn topology_event_count(&self, cluster: &str) -> Result<i64> {
        Ok(self
            .topology_events(cluster)
            .await?
            .iter()
            .map(|e| e.series.as_ref().map_or(1, |s| i64::from(s.count.max(1))))
            .sum())
    }

    /// Deletes a pod with grace period 0: the process is killed, the object gone at once.
    pub async fn kill_pod(&self, pod: &str) -> Result<()> {
        self.pods
            .delete(
                pod,
                &DeleteParams {
                    grace_period_seconds: Some(0),
                    ..Default::default()
                },
            )
            .await
            .with_context(|| format!("killing pod {pod}"))?;
        Ok(())
    }

    /// Cordons (`false`) or uncordons (`true`) every Kubernetes Node: while cordoned, a
    /// deleted pod's replacement stays Pending, as after the loss of its machine.
    pub async fn set_schedulable(&self, schedulable: bool) -> Result<()> {
        let unschedulable = if schedulable {
            serde_json::Value::Null
        } else {
            serde_json::Value::Bool(true)
        };
        for node in self.k8s_nodes.list(&Default::default()).await?.items {
            self.k8s_nodes
                .patch(
                    &node.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(serde_json::json!({"spec": {"unschedulable": unschedulable}})),
                )
                .await?;
        }
        Ok(())
    }
}

/// A ValkeyCluster fixture: `maxmemory 100mb` and, when `persistent`, a 1Gi volume per
/// member in the default StorageClass (reclaimPolicy Delete, so scale-in leaves nothing).
pub fn valkey_cluster(
    name: &str,
    shards: i32,
    replicas_per_shard: i32,
    persistent: bool,
) -> ValkeyCluster {
    ValkeyCluster::new(
        name,
        ValkeyClusterSpec {
            shards,
            replicas_per_shard,
            template: ValkeyNodeTemplate {
                config: ValkeyConfig(BTreeMap::from([(
                    "maxmemory".to_string(),
                    "100mb".to_string(),
                )])),
                persistence: persistent.then(|| Persistence {
                    size: "1Gi".into(),
                    reclaim_policy: ReclaimPolicy::Delete,
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        },
    )
}

/// Polls `check` every 250 ms until it yields a value. Fails after `timeout` with the last
/// "not yet" reason (or error), or as soon as a process of the run died.
pub async fn wait_until<T, F, Fut>(
    cluster: &LocalCluster,
    what: &str,
    timeout: Duration,
    mut check: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Progress<T>>>,
{
    let started = Instant::now();
    let mut last;
    loop {
        if let Some((dead, _)) = cluster.children.iter().find(|(r, _)| !r.is_alive()) {
            bail!(
                "{} exited while waiting for {what}; its log ends:\n{}",
                dead.name,
                cluster.log_tail(&dead.name, 30)
            );
        }
        match check().await {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(why)) => last = why,
            Err(error) => last = format!("error: {error:#}"),
        }
        if started.elapsed() > timeout {
            bail!("timed out after {timeout:?} waiting for {what}; last: {last}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The member names the spec asks for, `<cluster>-<shard>-<member>`.
pub fn desired_members(name: &str, spec: &ValkeyClusterSpec) -> BTreeSet<String> {
    let members = 1 + spec.replicas_per_shard.max(0) as u32;
    (0..spec.shards.max(0) as u32)
        .flat_map(|s| (0..members).map(move |m| names::cluster_member_name(name, s, m)))
        .collect()
}

/// Number of slots in ranges such as "0-5460" or "5461".
pub fn count_slots<S: AsRef<str>>(ranges: &[S]) -> u32 {
    ranges
        .iter()
        .filter_map(|r| parse_range(r.as_ref()))
        .map(|(a, b)| u32::from(b) - u32::from(a) + 1)
        .sum()
}

fn parse_range(range: &str) -> Option<(u16, u16)> {
    match range.split_once('-') {
        Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
        None => {
            let slot = range.parse().ok()?;
            Some((slot, slot))
        }
    }
}

/// Why `cluster` is not Ready per its status (the topology-controller's contract), or
/// `None` when it is: phase Ready, conditions Ready and SlotsAssigned True (Degraded and
/// Progressing not True), the current generation observed, all 16384 slots assigned, every
/// shard ready with its primary and exactly the members the spec asks for, all ready, and
/// every desired ValkeyNode present in `members`.
pub fn not_ready(cluster: &ValkeyCluster, members: &[ValkeyNode]) -> Option<String> {
    let name = cluster.name_any();
    let spec = &cluster.spec;
    let Some(status) = &cluster.status else {
        return Some("no status yet".into());
    };
    let summary = describe_status(status);
    let why = |reason: String| Some(format!("{reason} (status: {summary})"));
    if status.phase != Some(Phase::Ready) {
        return why(format!("phase is {:?}", status.phase));
    }
    if status.observed_generation != cluster.metadata.generation {
        return why(format!(
            "observedGeneration {:?} is not generation {:?}",
            status.observed_generation, cluster.metadata.generation
        ));
    }
    for type_ in [types::READY, types::SLOTS_ASSIGNED] {
        if !conditions::is_true(&status.conditions, type_) {
            return why(format!("condition {type_} is not True"));
        }
    }
    for type_ in [types::DEGRADED, types::PROGRESSING] {
        if conditions::is_true(&status.conditions, type_) {
            return why(format!("condition {type_} is True"));
        }
    }
    if status.slots_assigned != SLOTS as i32 {
        return why(format!("slotsAssigned is {}", status.slots_assigned));
    }
    if status.ready_shards != spec.shards {
        return why(format!(
            "readyShards {} of {}",
            status.ready_shards, spec.shards
        ));
    }
    if status.shards.len() != spec.shards.max(0) as usize {
        return why(format!("{} shards in status", status.shards.len()));
    }
    let desired = desired_members(&name, spec);
    let mut in_status = BTreeSet::new();
    let mut slots = 0;
    for (i, shard) in status.shards.iter().enumerate() {
        if shard.index != i as i32 {
            return why(format!("shards[{i}] has index {}", shard.index));
        }
        let primaries: Vec<&str> = shard
            .members
            .iter()
            .filter(|m| m.role == Some(Role::Primary))
            .map(|m| m.name.as_str())
            .collect();
        if primaries.len() != 1 || shard.primary.as_deref() != primaries.first().copied() {
            return why(format!(
                "shard {i}: primary {:?}, members with role Primary {primaries:?}",
                shard.primary
            ));
        }
        if shard.members.len() != 1 + spec.replicas_per_shard.max(0) as usize {
            return why(format!("shard {i} has {} members", shard.members.len()));
        }
        if let Some(m) = shard.members.iter().find(|m| !m.ready) {
            return why(format!("member {} is not ready", m.name));
        }
        let prefix = format!("{name}-{i}-");
        if let Some(m) = shard.members.iter().find(|m| !m.name.starts_with(&prefix)) {
            return why(format!("shard {i} lists member {}", m.name));
        }
        if shard.slots.is_empty() {
            return why(format!("shard {i} owns no slots"));
        }
        slots += count_slots(&shard.slots);
        in_status.extend(shard.members.iter().map(|m| m.name.clone()));
    }
    if slots != SLOTS {
        return why(format!("the shards' slot ranges add up to {slots}"));
    }
    if in_status != desired {
        return why(format!(
            "members in status {in_status:?}, desired {desired:?}"
        ));
    }
    let existing: BTreeSet<String> = members.iter().map(|n| n.name_any()).collect();
    if let Some(missing) = desired.difference(&existing).next() {
        return why(format!("ValkeyNode {missing} does not exist"));
    }
    None
}

/// A one-line summary of a cluster status, for failure messages.
pub fn describe_status(status: &ValkeyClusterStatus) -> String {
    let conditions: Vec<String> = status
        .conditions
        .iter()
        .map(|c| format!("{}={} {:?}", c.type_, c.status, c.message))
        .collect();
    let shards: Vec<String> = status
        .shards
        .iter()
        .map(|s| {
            let members: Vec<String> = s
                .members
                .iter()
                .map(|m| format!("{}:{:?}:{}", m.name, m.role, m.ready))
                .collect();
            format!(
                "#{} primary {:?} slots {:?} [{}]",
                s.index,
                s.primary,
                s.slots,
                members.join(" ")
            )
        })
        .collect();
    format!(
        "phase {:?}, readyShards {}, slotsAssigned {}, observedGeneration {:?}, switchover {:?}, conditions [{}], shards [{}]",
        status.phase,
        status.ready_shards,
        status.slots_assigned,
        status.observed_generation,
        status.switchover,
        conditions.join("; "),
        shards.join("; ")
    )
}

/// The cluster's status once [`not_ready`] finds nothing wrong.
pub async fn ready_status(apis: &ClusterApis, name: &str) -> Result<Progress<ValkeyClusterStatus>> {
    let cluster = apis.clusters.get(name).await?;
    let members = apis.members(name).await?;
    Ok(match not_ready(&cluster, &members) {
        Some(why) => Err(why),
        None => Ok(cluster.status.unwrap_or_default()),
    })
}

/// Waits for [`ready_status`].
pub async fn wait_ready(
    cluster: &LocalCluster,
    apis: &ClusterApis,
    name: &str,
    timeout: Duration,
) -> Result<ValkeyClusterStatus> {
    wait_until(
        cluster,
        &format!("ValkeyCluster {name} to be Ready"),
        timeout,
        || ready_status(apis, name),
    )
    .await
}

/// One member and the address it serves on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberAddr {
    pub name: String,
    pub shard: u32,
    pub member: u32,
    /// Its Service's ClusterIP.
    pub ip: String,
}

/// How to reach a cluster: its members' ClusterIPs and the password, if any.
#[derive(Clone, Debug)]
pub struct Access {
    pub members: Vec<MemberAddr>,
    pub password: Option<String>,
}

/// The password of the members' `spec.auth`, if they have one (its Secret named there or
/// generated as `<cluster>-auth`).
async fn password(
    apis: &ClusterApis,
    cluster: &str,
    members: &[ValkeyNode],
) -> Result<Option<String>> {
    let Some(auth) = members.iter().find_map(|n| n.spec.auth.clone()) else {
        return Ok(None);
    };
    let (secret, key) = match auth.password_secret_ref {
        Some(r) => (r.name, r.key),
        None => (
            names::generated_auth_secret_name(cluster),
            "password".to_string(),
        ),
    };
    let secret = apis.secrets.get(&secret).await?;
    let value = secret
        .data
        .and_then(|d| d.get(&key).cloned())
        .with_context(|| {
            format!(
                "Secret {} has no key {key}",
                secret.metadata.name.unwrap_or_default()
            )
        })?;
    Ok(Some(String::from_utf8(value.0)?))
}

/// [`Access`] to the members that exist now (those with a ClusterIP).
pub async fn access(apis: &ClusterApis, cluster: &str) -> Result<Access> {
    let nodes = apis.members(cluster).await?;
    let mut members = Vec::new();
    for node in &nodes {
        let l = node.labels();
        let (Some(shard), Some(member)) = (
            l.get(labels::SHARD).and_then(|s| s.parse().ok()),
            l.get(labels::MEMBER).and_then(|s| s.parse().ok()),
        ) else {
            continue;
        };
        let ip = node
            .status
            .as_ref()
            .and_then(|s| s.endpoint.as_ref())
            .and_then(|e| e.cluster_ip.clone());
        if let Some(ip) = ip {
            members.push(MemberAddr {
                name: node.name_any(),
                shard,
                member,
                ip,
            });
        }
    }
    if members.is_empty() {
        bail!("ValkeyCluster {cluster} has no member with a ClusterIP");
    }
    members.sort_by_key(|m| (m.shard, m.member));
    Ok(Access {
        password: password(apis, cluster, &nodes).await?,
        members,
    })
}

/// Runs `valkey-cli` (bounded by `timeout 30`): its trimmed stdout, or stderr when stdout is
/// empty, and whether it exited 0.
fn run_cli(args: &[String]) -> (String, bool) {
    let output = match Command::new("timeout")
        .arg("30")
        .arg("valkey-cli")
        .args(args)
        .output()
    {
        Ok(output) => output,
        Err(error) => return (format!("valkey-cli did not run: {error}"), false),
    };
    let stdout = String::from_utf8_lossy(&output.stdout).trim().to_string();
    let text = if stdout.is_empty() {
        String::from_utf8_lossy(&output.stderr).trim().to_string()
    } else {
        stdout
    };
    (text, output.status.success())
}

impl Access {
    /// The member's ClusterIP.
    pub fn ip(&self, member: &str) -> Option<&str> {
        self.members
            .iter()
            .find(|m| m.name == member)
            .map(|m| m.ip.as_str())
    }

    /// The member serving on `ip`.
    pub fn member_at(&self, ip: &str) -> Option<&MemberAddr> {
        self.members.iter().find(|m| m.ip == ip)
    }

    fn auth_args(&self) -> Vec<String> {
        match &self.password {
            Some(p) => vec!["-a".into(), p.clone(), "--no-auth-warning".into()],
            None => vec![],
        }
    }

    /// `valkey-cli -h <ip> -p 6379 <args>` (trimmed output, or the error text).
    pub fn cli(&self, ip: &str, args: &[&str]) -> String {
        let mut all: Vec<String> = vec!["-h".into(), ip.into(), "-p".into(), PORT.to_string()];
        all.extend(self.auth_args());
        all.extend(args.iter().map(|a| a.to_string()));
        run_cli(&all).0
    }

    /// A member answering PING, preferring the cluster's order.
    pub fn live_ip(&self) -> Option<&str> {
        self.members
            .iter()
            .map(|m| m.ip.as_str())
            .find(|ip| self.cli(ip, &["PING"]) == "PONG")
    }

    /// `valkey-cli -c` (following redirections) against a live member.
    pub fn cli_cluster(&self, args: &[&str]) -> String {
        let Some(ip) = self.live_ip() else {
            return "no member answers PING".into();
        };
        let mut all: Vec<&str> = vec!["-c"];
        all.extend(args);
        self.cli(ip, &all)
    }

    /// `valkey-cli --cluster check <ip>:6379` from a live member: its output when it exits 0,
    /// covers every slot and reports neither an error nor a warning (an open slot is a
    /// warning), else why not.
    pub fn check(&self) -> Progress<String> {
        let ip = self.live_ip().ok_or("no member answers PING")?;
        let mut args: Vec<String> =
            vec!["--cluster".into(), "check".into(), format!("{ip}:{PORT}")];
        args.extend(self.auth_args());
        let (output, success) = run_cli(&args);
        check_passed(&output, success).map(|()| output)
    }

    /// `CLUSTER NODES` as the member on `ip` sees it.
    pub fn nodes_seen_by(&self, ip: &str) -> Result<Vec<ClusterNode>> {
        let text = self.cli(ip, &["CLUSTER", "NODES"]);
        let nodes = parse_cluster_nodes(&text);
        if nodes.is_empty() {
            bail!("CLUSTER NODES on {ip}: {text}");
        }
        Ok(nodes)
    }

    /// Every member's `CLUSTER NODES`, by member name.
    pub fn views(&self) -> Result<BTreeMap<String, Vec<ClusterNode>>> {
        self.members
            .iter()
            .map(|m| Ok((m.name.clone(), self.nodes_seen_by(&m.ip)?)))
            .collect()
    }

    /// The member's own cluster node id (`CLUSTER MYID`).
    pub fn node_id(&self, ip: &str) -> Result<String> {
        let id = self.cli(ip, &["CLUSTER", "MYID"]);
        if id.len() != 40 || !id.chars().all(|c| c.is_ascii_hexdigit()) {
            bail!("CLUSTER MYID on {ip}: {id}");
        }
        Ok(id)
    }

    /// A fred cluster client seeded with every member's ClusterIP; it follows MOVED and ASK
    /// and reconnects for ever (every 250 ms).
    pub async fn client(&self) -> Result<ValkeyClient> {
        let hosts = self.members.iter().map(|m| (m.ip.clone(), PORT)).collect();
        let config = fred::types::config::Config {
            password: self.password.clone(),
            server: ServerConfig::new_clustered(hosts),
            ..Default::default()
        };
        let connection = ConnectionConfig {
            connection_timeout: Duration::from_secs(5),
            internal_command_timeout: Duration::from_secs(10),
            max_command_attempts: 20,
            max_redirections: 50,
            ..Default::default()
        };
        let performance = PerformanceConfig {
            default_command_timeout: Duration::from_secs(30),
            ..Default::default()
        };
        let client = ValkeyClient::new(
            config,
            Some(performance),
            Some(connection),
            Some(ReconnectPolicy::new_constant(0, 250)),
        );
        tokio::time::timeout(Duration::from_secs(30), client.init())
            .await
            .context("connecting the cluster client: timed out")?
            .context("connecting the cluster client")?;
        Ok(client)
    }
}

/// Whether `valkey-cli --cluster check` passed, from its output and exit status.
pub fn check_passed(output: &str, success: bool) -> Progress<()> {
    if !success {
        return Err(format!("--cluster check failed: {output}"));
    }
    if !output.contains("[OK] All 16384 slots covered") {
        return Err(format!(
            "--cluster check does not cover every slot: {output}"
        ));
    }
    if output.contains("[ERR]") || output.contains("[WARNING]") {
        return Err(format!("--cluster check complains: {output}"));
    }
    Ok(())
}

/// One line of `CLUSTER NODES`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterNode {
    pub id: String,
    /// The announced IP (empty for a node without address).
    pub ip: String,
    pub flags: Vec<String>,
    /// The primary's id, for a replica.
    pub primary_id: Option<String>,
    /// The cluster bus link is connected.
    pub connected: bool,
    /// Owned slot ranges ("0-5460", "5461").
    pub slots: Vec<String>,
    /// Migrating or importing slots (`[5461->-<id>]`, `[5461-<-<id>]`).
    pub open_slots: Vec<String>,
}

impl ClusterNode {
    pub fn has_flag(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }
    pub fn is_primary(&self) -> bool {
        self.has_flag("master")
    }
    pub fn is_replica(&self) -> bool {
        self.has_flag("slave")
    }
    /// Flagged `fail` or `fail?`.
    pub fn failing(&self) -> bool {
        self.has_flag("fail") || self.has_flag("fail?")
    }
    pub fn is_myself(&self) -> bool {
        self.has_flag("myself")
    }
    pub fn slot_count(&self) -> u32 {
        count_slots(&self.slots)
    }
    pub fn owns(&self, slot: u16) -> bool {
        self.slots
            .iter()
            .filter_map(|r| parse_range(r))
            .any(|(a, b)| (a..=b).contains(&slot))
    }
}

/// Parses `CLUSTER NODES` output; lines that do not parse are skipped.
pub fn parse_cluster_nodes(text: &str) -> Vec<ClusterNode> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 8 || fields[0].len() != 40 {
                return None;
            }
            let address = fields[1].split('@').next().unwrap_or_default();
            let ip = address
                .rsplit_once(':')
                .map(|(ip, _)| ip)
                .unwrap_or_default();
            let (open_slots, slots): (Vec<String>, Vec<String>) = fields[8..]
                .iter()
                .map(|s| s.to_string())
                .partition(|s| s.starts_with('['));
            Some(ClusterNode {
                id: fields[0].to_string(),
                ip: ip.to_string(),
                flags: fields[2].split(',').map(str::to_string).collect(),
                primary_id: (fields[3] != "-").then(|| fields[3].to_string()),
                connected: fields[7] == "connected",
                slots,
                open_slots,
            })
        })
        .collect()
}

/// Slots per primary that owns any, by node id.
pub fn slots_by_primary(view: &[ClusterNode]) -> BTreeMap<String, u32> {
    view.iter()
        .filter(|n| n.is_primary() && n.slot_count() > 0)
        .map(|n| (n.id.clone(), n.slot_count()))
        .collect()
}

/// Open slots in any member's view, as `<member>: [<slot>->-<id>]`.
pub fn open_slots(views: &BTreeMap<String, Vec<ClusterNode>>) -> Vec<String> {
    views
        .iter()
        .flat_map(|(member, view)| {
            view.iter()
                .flat_map(|n| n.open_slots.iter())
                .map(move |s| format!("{member}: {s}"))
        })
        .collect()
}

/// Whether Valkey has the shape asked for, as every member sees it: `shards` primaries with
/// slots, split evenly (each owns 16384 / shards, rounded down or up), each the only primary
/// of its shard's members with `replicas` replicas of it, all of its own shard, linked
/// (`master_link_status:up`), none flagged failing, and no open slot anywhere.
pub fn shape(access: &Access, shards: u32, replicas: u32) -> Result<Progress<()>> {
    let views = access.views()?;
    let open = open_slots(&views);
    if !open.is_empty() {
        return Ok(Err(format!("open slots: {open:?}")));
    }
    let (low, high) = (SLOTS / shards, SLOTS.div_ceil(shards));
    for (viewer, view) in &views {
        let counts = slots_by_primary(view);
        if counts.len() != shards as usize || !counts.values().all(|c| (low..=high).contains(c)) {
            return Ok(Err(format!(
                "{viewer} sees primaries with slots {counts:?}, not {shards} with {low}-{high} each"
            )));
        }
        if let Some(n) = view.iter().find(|n| n.failing()) {
            return Ok(Err(format!(
                "{viewer} flags {} ({}) {:?}",
                n.ip, n.id, n.flags
            )));
        }
        for shard in 0..shards {
            let members: Vec<&MemberAddr> =
                access.members.iter().filter(|m| m.shard == shard).collect();
            if members.len() != 1 + replicas as usize {
                return Ok(Err(format!("shard {shard} has {} members", members.len())));
            }
            let mut lines = Vec::new();
            for m in &members {
                match view.iter().find(|n| n.ip == m.ip) {
                    Some(line) => lines.push((m, line)),
                    None => {
                        return Ok(Err(format!("{viewer} does not list {} ({})", m.name, m.ip)));
                    }
                }
            }
            let primaries: Vec<_> = lines.iter().filter(|(_, n)| n.is_primary()).collect();
            let [(_, primary)] = primaries.as_slice() else {
                return Ok(Err(format!(
                    "{viewer}: shard {shard} has primaries {:?}",
                    primaries.iter().map(|(m, _)| &m.name).collect::<Vec<_>>()
                )));
            };
            if primary.slot_count() == 0 {
                return Ok(Err(format!(
                    "{viewer}: shard {shard}'s primary owns no slot"
                )));
            }
            for (m, line) in lines.iter().filter(|(_, n)| !n.is_primary()) {
                if line.primary_id.as_deref() != Some(primary.id.as_str()) {
                    return Ok(Err(format!(
                        "{viewer}: {} follows {:?}, not its shard's primary {}",
                        m.name, line.primary_id, primary.id
                    )));
                }
            }
        }
    }
    for m in &access.members {
        let role = access.cli(&m.ip, &["ROLE"]);
        if role.starts_with("slave") {
            let info = access.cli(&m.ip, &["INFO", "replication"]);
            if !info.contains("master_link_status:up") {
                return Ok(Err(format!(
                    "{}'s link to its primary is not up: {info}",
                    m.name
                )));
            }
        }
    }
    Ok(Ok(()))
}

/// Checks Valkey's own view against the member statuses: for every member, `status.valkey`
/// names the node id Valkey reports (`CLUSTER MYID`), its role, a replica's primary and
/// `linkUp`; the ValkeyCluster's `shards[].primary` and member roles agree with
/// `CLUSTER NODES`. Returns the mismatches.
pub async fn status_matches_valkey(
    apis: &ClusterApis,
    access: &Access,
    cluster: &str,
) -> Result<Progress<()>> {
    let nodes = apis.members(cluster).await?;
    let vc = apis.clusters.get(cluster).await?;
    let status = vc.status.unwrap_or_default();
    let ip = access.live_ip().context("no member answers PING")?;
    let view = access.nodes_seen_by(ip)?;
    let mut wrong = Vec::new();
    let mut ids = BTreeMap::new();
    for m in &access.members {
        let id = access.node_id(&m.ip)?;
        let Some(line) = view.iter().find(|n| n.id == id) else {
            wrong.push(format!("{} ({id}) is not in CLUSTER NODES of {ip}", m.name));
            continue;
        };
        let role = if line.is_primary() {
            Role::Primary
        } else {
            Role::Replica
        };
        ids.insert(m.name.clone(), (id.clone(), role));
        let Some(node) = nodes.iter().find(|n| n.name_any() == m.name) else {
            continue;
        };
        let valkey = node
            .status
            .as_ref()
            .and_then(|s| s.valkey.clone())
            .unwrap_or_default();
        if valkey.node_id.as_deref() != Some(id.as_str()) {
            wrong.push(format!(
                "{}: status.valkey.nodeId {:?}, Valkey says {id}",
                m.name, valkey.node_id
            ));
        }
        if valkey.role != Some(role) {
            wrong.push(format!(
                "{}: status.valkey.role {:?}, Valkey says {role:?}",
                m.name, valkey.role
            ));
        }
        if role == Role::Replica {
            if valkey.primary_node_id != line.primary_id {
                wrong.push(format!(
                    "{}: status.valkey.primaryNodeId {:?}, Valkey says {:?}",
                    m.name, valkey.primary_node_id, line.primary_id
                ));
            }
            if valkey.link_up != Some(true) {
                wrong.push(format!(
                    "{}: status.valkey.linkUp {:?}",
                    m.name, valkey.link_up
                ));
            }
        }
    }
    for shard in &status.shards {
        for member in &shard.members {
            let Some((_, role)) = ids.get(&member.name) else {
                continue;
            };
            if member.role != Some(*role) {
                wrong.push(format!(
                    "status.shards[{}] says {} is {:?}, Valkey says {role:?}",
                    shard.index, member.name, member.role
                ));
            }
            if *role == Role::Primary && shard.primary.as_deref() != Some(member.name.as_str()) {
                wrong.push(format!(
                    "status.shards[{}].primary is {:?}, Valkey's primary is {}",
                    shard.index, shard.primary, member.name
                ));
            }
        }
    }
    Ok(if wrong.is_empty() {
        Ok(())
    } else {
        Err(wrong.join("; "))
    })
}

/// `count` keys `<prefix>:<i>` with value `<prefix>-value-<i>`.
#[derive(Clone, Debug)]
pub struct DataSet {
    pub prefix: String,
    pub count: usize,
}

/// Commands in flight at once when loading or reading a data set.
const CONCURRENCY: usize = 64;

impl DataSet {
    pub fn new(prefix: &str, count: usize) -> Self {
        Self {
            prefix: prefix.to_string(),
            count,
        }
    }

    pub fn key(&self, i: usize) -> String {
        format!("{}:{i}", self.prefix)
    }

    pub fn value(&self, i: usize) -> String {
        format!("{}-value-{i}", self.prefix)
    }

    /// Key indexes grouped by hash slot (MSET and MGET take keys of one slot).
    fn by_slot(&self) -> Vec<Vec<usize>> {
        let mut groups: BTreeMap<u16, Vec<usize>> = BTreeMap::new();
        for i in 0..self.count {
            let slot = fred::util::redis_keyslot(self.key(i).as_bytes());
            groups.entry(slot).or_default().push(i);
        }
        groups.into_values().collect()
    }

    /// Writes every key (MSET per slot, 64 at a time) through the cluster
    /// client; returns how long it took.
    pub async fn load(&self, access: &Access) -> Result<Duration> {
        let client = access.client().await?;
        let started = Instant::now();
        let result: Result<Vec<()>> = stream::iter(self.by_slot())
            .map(|group| {
                let client = client.clone();
                let pairs: Vec<(String, String)> = group
                    .iter()
                    .map(|&i| (self.key(i), self.value(i)))
                    .collect();
                async move {
                    tokio::time::timeout(CLIENT_TIMEOUT, client.mset(pairs))
                        .await
                        .context("MSET: timed out")?
                        .context("MSET")
                }
            })
            .buffer_unordered(CONCURRENCY)
            .try_collect()
            .await;
        let took = started.elapsed();
        let _ = tokio::time::timeout(Duration::from_secs(5), client.quit()).await;
        result.with_context(|| format!("loading {} keys", self.count))?;
        Ok(took)
    }

    /// Keys that do not read back with their value: MGET per slot through the fred cluster
    /// client, keys of open slots one by one over plain connections following MOVED and ASK
    /// (fred 10.1's own ASK handling fails against Valkey 8 and then cancels every later
    /// command of the client).
    pub async fn missing(&self, access: &Access) -> Result<Vec<String>> {
        let pairs: Vec<(String, String)> = (0..self.count)
            .map(|i| (self.key(i), self.value(i)))
            .collect();
        missing_pairs(access, pairs).await
    }

    /// Fails, naming up to ten, when any key does not read back.
    pub async fn verify(&self, access: &Access) -> Result<()> {
        let missing = self.missing(access).await?;
        if !missing.is_empty() {
            bail!(
                "{} of {} keys do not read back, e.g. {:?}",
                missing.len(),
                self.count,
                &missing[..missing.len().min(10)]
            );
        }
        Ok(())
    }
}

/// Slot numbers open (migrating or importing) in any of `views`.
pub fn open_slot_numbers(views: &BTreeMap<String, Vec<ClusterNode>>) -> BTreeSet<u16> {
    views
        .values()
        .flatten()
        .flat_map(|n| n.open_slots.iter())
        .filter_map(|s| s.trim_start_matches('[').split('-').next()?.parse().ok())
        .collect()
}

/// The keys of `pairs` that do not read back with their value.
///
/// Keys of stable slots are read with the fred cluster client, MGET per slot. Keys of open
/// slots (a migration cut off midway) are read one by one over plain connections that follow
/// MOVED and ASK here: fred 10.1's own ASK handling fails with "Max attempts reached" against
/// Valkey 8 and leaves the client cancelling every later command. Any error fails the read.
async fn missing_pairs(access: &Access, pairs: Vec<(String, String)>) -> Result<Vec<String>> {
    let views: BTreeMap<String, Vec<ClusterNode>> = access
        .members
        .iter()
        .filter_map(|m| Some((m.name.clone(), access.nodes_seen_by(&m.ip).ok()?)))
        .collect();
    let open = open_slot_numbers(&views);
    let mut groups: BTreeMap<u16, Vec<(String, String)>> = BTreeMap::new();
    for (key, value) in pairs {
        groups
            .entry(fred::util::redis_keyslot(key.as_bytes()))
            .or_default()
            .push((key, value));
    }
    let (unstable, stable): (Vec<_>, Vec<_>) = groups
        .into_iter()
        .partition(|(slot, _)| open.contains(slot));
    let wrong = |group: &[(String, String)], values: Vec<Option<String>>| -> Vec<String> {
        group
            .iter()
            .zip(values)
            .filter(|((_, want), got)| got.as_deref() != Some(want.as_str()))
            .map(|((key, _), _)| key.clone())
            .collect()
    };

    let mut missing = Vec::new();
    if !stable.is_empty() {
        let client = access.client().await?;
        let results: Result<Vec<Vec<String>>> = stream::iter(stable)
            .map(|(slot, group)| {
                let client = client.clone();
                async move {
                    let keys: Vec<String> = group.iter().map(|(k, _)| k.clone()).collect();
                    let values: Vec<Option<String>> =
                        tokio::time::timeout(CLIENT_TIMEOUT, client.mget(keys))
                            .await
                            .with_context(|| format!("MGET in slot {slot}: timed out"))?
                            .with_context(|| format!("MGET in slot {slot}"))?;
                    Ok(wrong(&group, values))
                }
            })
            .buffer_unordered(CONCURRENCY)
            .try_collect()
            .await;
        let _ = tokio::time::timeout(Duration::from_secs(5), client.quit()).await;
        missing.extend(results?.into_iter().flatten());
    }
    if !unstable.is_empty() {
        let mut nodes = Nodes::new(access);
        let mut result = Ok(());
        'groups: for (_, group) in &unstable {
            let mut values = Vec::with_capacity(group.len());
            for (key, _) in group {
                match nodes.get(key).await {
                    Ok(value) => values.push(value),
                    Err(error) => {
                        result = Err(error);
                        break 'groups;
                    }
                }
            }
            missing.extend(wrong(group, values));
        }
        nodes.close().await;
        result?;
    }
    missing.sort();
    Ok(missing)
}

/// `WAIT 1 <this>`: how long a write waits for a replica's acknowledgement.
const WAIT_TIMEOUT_MS: i64 = 1000;
/// Pause between two writes of a stream: keeps the writer from starving the 2-core machine.
const WRITE_INTERVAL: Duration = Duration::from_millis(5);
/// Bound on connecting to a member and on each command of the writer.
const WRITER_TIMEOUT: Duration = Duration::from_secs(3);
/// Bound on each command of the cluster client: a stuck client fails the load or read, never
/// hangs it.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);

/// What one write stream did.
#[derive(Clone, Debug, Default)]
pub struct StreamReport {
    /// The shard whose slots the stream's hash tag fell in when the writer started.
    pub shard: u32,
    /// The hash tag of every key of the stream (so all its keys share one slot).
    pub tag: String,
    pub slot: u16,
    /// Writes a replica acknowledged (`WAIT 1` answered >= 1): key and value.
    pub acked: Vec<(String, String)>,
    /// Writes the primary took but no replica acknowledged in time.
    pub unacknowledged: u64,
    /// Writes that failed (or whose fate is unknown: the reply was lost).
    pub failed: u64,
    /// The longest time without an acknowledged write, start and stop included.
    pub longest_pause: Duration,
    pub last_error: Option<String>,
}

/// What an [`AckedWriter`] did, per stream.
#[derive(Clone, Debug, Default)]
pub struct WriterReport {
    pub streams: Vec<StreamReport>,
}

impl WriterReport {
    /// Acknowledged writes in all.
    pub fn acked(&self) -> usize {
        self.streams.iter().map(|s| s.acked.len()).sum()
    }

    /// Acknowledged writes that do not read back with their value.
    pub async fn lost(&self, access: &Access) -> Result<Vec<String>> {
        let pairs = self.streams.iter().flat_map(|s| s.acked.clone()).collect();
        missing_pairs(access, pairs).await
    }

    /// Per shard: acknowledged, unacknowledged and failed writes, the longest pause.
    pub fn summary(&self) -> String {
        self.streams
            .iter()
            .map(|s| {
                format!(
                    "shard {} (slot {}): {} acknowledged, {} unacknowledged, {} failed, longest pause {:?}{}",
                    s.shard,
                    s.slot,
                    s.acked.len(),
                    s.unacknowledged,
                    s.failed,
                    s.longest_pause,
                    s.last_error
                        .as_ref()
                        .map(|e| format!(", last error: {e}"))
                        .unwrap_or_default()
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// A background writer: one stream per shard (keys `{tag}:<n>` whose hash tag falls in that
/// shard's slots), each writing a new key every few milliseconds with `SET` and then
/// `WAIT 1 1000` on the same connection, and recording the write as acknowledged only when
/// `WAIT` answered >= 1, i.e. a replica has it.
///
/// It routes by itself rather than through the fred cluster client: `WAIT` counts the
/// replicas that have the writes of *its own connection*, so it must follow the `SET` on the
/// very connection that carried it, which a multiplexed cluster client that re-sends on
/// redirections and reconnections cannot promise. Each stream keeps one plain connection per
/// member, never reconnected behind its back, and finds a slot's primary from
/// `CLUSTER NODES`, following MOVED and ASK. A stream thus needs a replica in its shard.
pub struct AckedWriter {
    stop: Arc<AtomicBool>,
    acked: Arc<AtomicUsize>,
    tasks: Vec<tokio::task::JoinHandle<StreamReport>>,
}

/// The first `w<n>` whose hash slot `owns` accepts.
pub fn tag_for(owns: impl Fn(u16) -> bool) -> Option<(String, u16)> {
    (0..1_000_000).find_map(|n| {
        let tag = format!("w{n}");
        let slot = fred::util::redis_keyslot(tag.as_bytes());
        owns(slot).then_some((tag, slot))
    })
}

impl AckedWriter {
    /// Starts one stream per primary that owns slots now.
    pub async fn start(access: &Access) -> Result<Self> {
        let ip = access.live_ip().context("no member answers PING")?;
        let view = access.nodes_seen_by(ip)?;
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for primary in view.iter().filter(|n| n.is_primary() && n.slot_count() > 0) {
            let (tag, slot) = tag_for(|slot| primary.owns(slot))
                .with_context(|| format!("no hash tag for the slots of {}", primary.id))?;
            let shard = access
                .member_at(&primary.ip)
                .map(|m| m.shard)
                .with_context(|| format!("no member serves on {}", primary.ip))?;
            let stream = Stream {
                nodes: Nodes::new(access),
                report: StreamReport {
                    shard,
                    tag,
                    slot,
                    ..Default::default()
                },
            };
            tasks.push(tokio::spawn(stream.run(stop.clone(), acked.clone())));
        }
        if tasks.is_empty() {
            bail!("no primary owns slots: nothing to write to");
        }
        Ok(Self { stop, acked, tasks })
    }

    /// Acknowledged writes so far.
    pub fn acked(&self) -> usize {
        self.acked.load(Ordering::Relaxed)
    }

    /// Waits until `more` further writes have been acknowledged.
    pub async fn progressed(&self, more: usize, timeout: Duration) -> Result<()> {
        let target = self.acked() + more;
        let started = Instant::now();
        while self.acked() < target {
            if started.elapsed() > timeout {
                bail!(
                    "the writer acknowledged {} of {more} more writes in {timeout:?}",
                    self.acked() + more - target
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    /// Stops every stream and returns what they did.
    pub async fn stop(self) -> Result<WriterReport> {
        self.stop.store(true, Ordering::Relaxed);
        let mut streams = Vec::new();
        for task in self.tasks {
            streams.push(task.await.context("a writer stream panicked")?);
        }
        Ok(WriterReport { streams })
    }
}

struct Stream {
    nodes: Nodes,
    report: StreamReport,
}

/// Plain connections to the members, one per IP, made on demand; routing by `CLUSTER NODES`
/// and redirections followed here, so `ASKING` immediately precedes its command on the one
/// connection that carries both (callers use a `Nodes` from one task, one command at a time).
struct Nodes {
    seeds: Vec<String>,
    password: Option<String>,
    connections: HashMap<String, ValkeyClient>,
}

enum Outcome {
    Acked,
    NotReplicated,
    Moved(String),
    Ask(String),
    Failed(String),
}

/// The IP of a MOVED / ASK error's `<slot> <ip>:<port>`.
fn redirect_ip(details: &str) -> Option<String> {
    let address = details.split_whitespace().nth(2)?;
    Some(address.rsplit_once(':')?.0.to_string())
}

/// A plain (non-cluster) connection that fails fast and never reconnects by itself.
async fn connect_node(ip: &str, password: Option<&str>) -> Result<ValkeyClient> {
    let config = fred::types::config::Config {
        fail_fast: true,
        password: password.map(str::to_string),
        server: ServerConfig::new_centralized(ip, PORT),
        ..Default::default()
    };
    let connection = ConnectionConfig {
        connection_timeout: WRITER_TIMEOUT,
        internal_command_timeout: WRITER_TIMEOUT,
        max_command_attempts: 1,
        ..Default::default()
    };
    let performance = PerformanceConfig {
        default_command_timeout: WRITER_TIMEOUT,
        ..Default::default()
    };
    let client = ValkeyClient::new(config, Some(performance), Some(connection), None);
    tokio::time::timeout(WRITER_TIMEOUT, client.init())
        .await
        .with_context(|| format!("connecting to {ip}: timed out"))?
        .with_context(|| format!("connecting to {ip}"))?;
    Ok(client)
}

async fn raw<R: fred::types::FromValue>(
    client: &ValkeyClient,
    command: &'static str,
    args: Vec<fred::types::Value>,
) -> std::result::Result<R, fred::error::Error> {
    client
        .custom(
            CustomCommand::new_static(command, ClusterHash::Random, false),
            args,
        )
        .await
}

impl Nodes {
    fn new(access: &Access) -> Self {
        Self {
            seeds: access.members.iter().map(|m| m.ip.clone()).collect(),
            password: access.password.clone(),
            connections: HashMap::new(),
        }
    }

    async fn close(mut self) {
        for (_, client) in self.connections.drain() {
            let _ = tokio::time::timeout(Duration::from_secs(1), client.quit()).await;
        }
    }

    async fn connection(&mut self, ip: &str) -> Result<ValkeyClient> {
        if let Some(client) = self.connections.get(ip) {
            if client.is_connected() {
                return Ok(client.clone());
            }
            self.drop_connection(ip).await;
        }
        let client = connect_node(ip, self.password.as_deref()).await?;
        self.connections.insert(ip.to_string(), client.clone());
        Ok(client)
    }

    async fn drop_connection(&mut self, ip: &str) {
        if let Some(client) = self.connections.remove(ip) {
            let _ = tokio::time::timeout(Duration::from_secs(1), client.quit()).await;
        }
    }

    /// The primary owning `slot`, as the first member that answers sees it.
    async fn owner(&mut self, slot: u16) -> Result<String> {
        let mut errors = Vec::new();
        for seed in self.seeds.clone() {
            let text: std::result::Result<String, String> = match self.connection(&seed).await {
                Ok(client) => raw(&client, "CLUSTER", vec!["NODES".into()])
                    .await
                    .map_err(|e| e.to_string()),
                Err(error) => Err(format!("{error:#}")),
            };
            match text {
                Ok(text) => {
                    if let Some(owner) = parse_cluster_nodes(&text)
                        .into_iter()
                        .find(|n| n.is_primary() && !n.failing() && n.owns(slot))
                    {
                        return Ok(owner.ip);
                    }
                    errors.push(format!("{seed}: no live primary owns slot {slot}"));
                }
                Err(error) => {
                    self.drop_connection(&seed).await;
                    errors.push(format!("{seed}: {error}"));
                }
            }
        }
        bail!("{}", errors.join("; "))
    }

    /// `GET key`, following MOVED and ASK.
    async fn get(&mut self, key: &str) -> Result<Option<String>> {
        let slot = fred::util::redis_keyslot(key.as_bytes());
        let mut ip = self.owner(slot).await?;
        let mut asking = false;
        for _ in 0..5 {
            let client = self.connection(&ip).await?;
            if asking {
                raw::<fred::types::Value>(&client, "ASKING", vec![])
                    .await
                    .with_context(|| format!("ASKING on {ip}"))?;
            }
            match raw::<Option<String>>(&client, "GET", vec![key.into()]).await {
                Ok(value) => return Ok(value),
                Err(error) => {
                    let details = error.details().to_string();
                    match redirect_ip(&details) {
                        Some(target) if details.starts_with("MOVED") => {
                            (ip, asking) = (target, false)
                        }
                        Some(target) if details.starts_with("ASK") => (ip, asking) = (target, true),
                        _ => {
                            self.drop_connection(&ip).await;
                            bail!("GET {key} on {ip}: {error}");
                        }
                    }
                }
            }
        }
        bail!("GET {key}: more than 5 redirections")
    }
}

impl Stream {
    async fn run(mut self, stop: Arc<AtomicBool>, acked: Arc<AtomicUsize>) -> StreamReport {
        let started = Instant::now();
        let mut last_ack = started;
        let mut owner: Option<String> = None;
        let mut seq: u64 = 0;
        while !stop.load(Ordering::Relaxed) {
            let ip = match owner.clone() {
                Some(ip) => ip,
                None => match self.nodes.owner(self.report.slot).await {
                    Ok(ip) => {
                        owner = Some(ip.clone());
                        ip
                    }
                    Err(error) => {
                        self.report.last_error = Some(format!("{error:#}"));
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        continue;
                    }
                },
            };
            let key = format!("{{{}}}:{seq}", self.report.tag);
            let value = format!("{}-{seq}", self.report.tag);
            seq += 1;
            let mut outcome = self.write(&ip, &key, &value, false).await;
            if let Outcome::Ask(target) = outcome {
                outcome = self.write(&target, &key, &value, true).await;
            }
            match outcome {
                Outcome::Acked => {
                    let now = Instant::now();
                    self.report.longest_pause = self.report.longest_pause.max(now - last_ack);
                    last_ack = now;
                    self.report.acked.push((key, value));
                    acked.fetch_add(1, Ordering::Relaxed);
                }
                Outcome::NotReplicated => self.report.unacknowledged += 1,
                Outcome::Moved(target) => owner = Some(target),
                Outcome::Ask(_) => {
                    self.report.failed += 1;
                    owner = None;
                }
                Outcome::Failed(error) => {
                    self.report.failed += 1;
                    self.report.last_error = Some(error);
                    owner = None;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            tokio::time::sleep(WRITE_INTERVAL).await;
        }
        self.report.longest_pause = self.report.longest_pause.max(last_ack.elapsed());
        self.nodes.close().await;
        self.report
    }

    /// SET then WAIT 1 on one connection to `ip` (after ASKING when `asking`).
    async fn write(&mut self, ip: &str, key: &str, value: &str, asking: bool) -> Outcome {
        let client = match self.nodes.connection(ip).await {
            Ok(client) => client,
            Err(error) => return Outcome::Failed(format!("{error:#}")),
        };
        if asking && let Err(error) = raw::<fred::types::Value>(&client, "ASKING", vec![]).await {
            self.nodes.drop_connection(ip).await;
            return Outcome::Failed(format!("ASKING on {ip}: {error}"));
        }
        let set = raw::<fred::types::Value>(
            &client,
            "SET",
            vec![key.to_string().into(), value.to_string().into()],
        )
        .await;
        if let Err(error) = set {
            let details = error.details().to_string();
            if details.starts_with("MOVED")
                && let Some(target) = redirect_ip(&details)
            {
                return Outcome::Moved(target);
            }
            if details.starts_with("ASK")
                && let Some(target) = redirect_ip(&details)
            {
                return Outcome::Ask(target);
            }
            self.nodes.drop_connection(ip).await;
            return Outcome::Failed(format!("SET on {ip}: {error}"));
        }
        match raw::<i64>(&client, "WAIT", vec![1.into(), WAIT_TIMEOUT_MS.into()]).await {
            Ok(n) if n >= 1 => Outcome::Acked,
            Ok(_) => Outcome::NotReplicated,
            Err(error) => {
                self.nodes.drop_connection(ip).await;
                Outcome::Failed(format!("WAIT on {ip}: {error}"))
            }
        }
    }
}

/// How a roll through the members' roll gates went, sampled from the ValkeyNodes.
///
/// A member's gate is open for the new template once `spec.allowedRevision` equals its
/// `status.workload.desiredRevision` and that differs from the revision it ran when the watch
/// began; it is rolling while its gate is open and it is not ready at that revision. Each
/// sample is one LIST, a single resourceVersion: the topology-controller opens a gate only
/// after it saw the previous member ready, so a consistent snapshot never shows that member
/// not ready next to the next open gate unless two really rolled at once.
#[derive(Debug, Default)]
pub struct RollWatch {
    /// Each member's revision when the watch began.
    initial: BTreeMap<String, Option<String>>,
    pub samples: usize,
    pub max_rolling: usize,
    /// The sample with the most members rolling.
    pub worst: Vec<String>,
    pub max_not_ready: usize,
    /// Members in the order their gate was first seen open, with the role
    /// `status.valkey.role` gave them in that sample.
    pub gate_order: Vec<(String, Option<Role>)>,
}

impl RollWatch {
    /// Starts from the members' current revisions.
    pub fn new(members: &[ValkeyNode]) -> Self {
        Self {
            initial: members
                .iter()
                .map(|n| {
                    let revision = n
                        .status
                        .as_ref()
                        .and_then(|s| s.workload.as_ref())
                        .and_then(|w| w.revision.clone());
                    (n.name_any(), revision)
                })
                .collect(),
            ..Default::default()
        }
    }

    /// The member's gate is open for a revision other than its initial one.
    pub fn gate_open(&self, node: &ValkeyNode) -> bool {
        let desired = node
            .status
            .as_ref()
            .and_then(|s| s.workload.as_ref())
            .and_then(|w| w.desired_revision.clone());
        desired.is_some()
            && node.spec.allowed_revision == desired
            && self.initial.get(&node.name_any()) != Some(&desired)
    }

    /// The member runs, ready, a revision other than its initial one, and it is the one
    /// the spec asks for.
    pub fn rolled(&self, node: &ValkeyNode) -> bool {
        let Some(w) = node.status.as_ref().and_then(|s| s.workload.as_ref()) else {
            return false;
        };
        w.ready
            && w.revision.is_some()
            && w.revision == w.desired_revision
            && self.initial.get(&node.name_any()) != Some(&w.revision)
    }

    /// Members whose pod is not ready.
    pub fn not_ready(members: &[ValkeyNode]) -> Vec<String> {
        members
            .iter()
            .filter(|n| {
                !n.status
                    .as_ref()
                    .and_then(|s| s.workload.as_ref())
                    .is_some_and(|w| w.ready)
            })
            .map(|n| n.name_any())
            .collect()
    }

    /// Records one snapshot of the members.
    pub fn sample(&mut self, members: &[ValkeyNode]) {
        self.samples += 1;
        let rolling: Vec<String> = members
            .iter()
            .filter(|n| self.initial.contains_key(&n.name_any()))
            .filter(|n| self.gate_open(n) && !self.rolled(n))
            .map(|n| n.name_any())
            .collect();
        if rolling.len() > self.max_rolling {
            self.max_rolling = rolling.len();
            self.worst = rolling;
        }
        self.max_not_ready = self.max_not_ready.max(Self::not_ready(members).len());
        for node in members {
            let name = node.name_any();
            if self.initial.contains_key(&name)
                && self.gate_open(node)
                && !self.gate_order.iter().any(|(n, _)| *n == name)
            {
                let role = node
                    .status
                    .as_ref()
                    .and_then(|s| s.valkey.as_ref())
                    .and_then(|v| v.role);
                self.gate_order.push((name, role));
            }
        }
    }

    /// Whether every watched member has rolled.
    pub fn all_rolled(&self, members: &[ValkeyNode]) -> bool {
        self.initial.keys().all(|name| {
            members
                .iter()
                .find(|n| n.name_any() == *name)
                .is_some_and(|n| self.rolled(n))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crd_types::cluster::{MemberStatus, ShardStatus};
    use crd_types::node::{ValkeyNodeStatus, ValkeyStatus, WorkloadStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

    const NODES: &str = "\
07c37dfeb235213a872192d90877d0cd55635b91 127.100.0.7:6379@16379 slave e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected
67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.100.0.2:6379@16379 master - 0 1426238316232 2 connected 5461-10922 [10923->-292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f]
292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f 127.100.0.3:6379@16379 master - 0 1426238318243 3 connected 10923-16383 [10923-<-67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1]
6ec23923021cf3ffec47632106199cb7f496ce01 127.100.0.5:6379@16379 slave 67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 0 1426238316232 5 disconnected
824fe116063bc5fcf9f4ffd895bc17aee7731ac3 127.100.0.6:6379@16379 master,fail - 1426238317741 1426238316000 6 disconnected
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.100.0.1:6379@16379,host1 myself,master - 0 0 1 connected 0-5460 16000
";

    #[test]
    fn cluster_nodes_lines_parse() {
        let nodes = parse_cluster_nodes(NODES);
        assert_eq!(nodes.len(), 6);
        let me = nodes.iter().find(|n| n.is_myself()).unwrap();
        assert_eq!(me.ip, "127.100.0.1");
        assert!(me.is_primary());
        assert_eq!(me.slots, ["0-5460", "16000"]);
        assert_eq!(me.slot_count(), 5462);
        assert!(me.owns(16000) && me.owns(0) && !me.owns(5461));
        let replica = &nodes[0];
        assert!(replica.is_replica() && replica.connected);
        assert_eq!(
            replica.primary_id.as_deref(),
            Some("e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca")
        );
        assert_eq!(nodes[1].open_slots.len(), 1);
        assert_eq!(nodes[1].slot_count(), 5462);
        assert!(!nodes[3].connected);
        assert!(nodes[4].failing());
        assert_eq!(nodes[4].slot_count(), 0);
        let views = BTreeMap::from([("a".to_string(), nodes.clone())]);
        assert_eq!(open_slots(&views).len(), 2);
        assert_eq!(open_slot_numbers(&views), BTreeSet::from([10923]));
        let by_primary = slots_by_primary(&nodes);
        assert_eq!(by_primary.len(), 3);
        assert_eq!(by_primary.values().sum::<u32>(), 5462 + 5462 + 5461);
        assert!(parse_cluster_nodes("ERR This instance has cluster support disabled").is_empty());
    }

    #[test]
    fn redirections_name_their_target() {
        assert_eq!(
            redirect_ip("MOVED 3999 127.100.0.3:6379").as_deref(),
            Some("127.100.0.3")
        );
        assert_eq!(
            redirect_ip("ASK 3999 127.100.0.4:6379").as_deref(),
            Some("127.100.0.4")
        );
        assert_eq!(redirect_ip("CLUSTERDOWN The cluster is down"), None);
    }

    #[test]
    fn slot_ranges_count() {
        assert_eq!(count_slots(&["0-5460"]), 5461);
        assert_eq!(count_slots(&["0-4095", "8192", "10000-10001"]), 4099);
        assert_eq!(count_slots::<&str>(&[]), 0);
    }

    #[test]
    fn hash_tags_land_where_asked() {
        let (tag, slot) = tag_for(|s| (12000..13000).contains(&s)).unwrap();
        assert!((12000..13000).contains(&slot));
        let key = format!("{{{tag}}}:17");
        assert_eq!(fred::util::redis_keyslot(key.as_bytes()), slot);
    }

    #[test]
    fn check_output_is_judged() {
        let ok = "127.100.0.1:6379 (e7d1eecc...) -> 0 keys | 5461 slots | 1 slaves.\n\
                  [OK] All nodes agree about slots configuration.\n\
                  >>> Check for open slots...\n>>> Check slots coverage...\n\
                  [OK] All 16384 slots covered.";
        assert!(check_passed(ok, true).is_ok());
        assert!(check_passed(ok, false).is_err());
        let open =
            format!("{ok}\n[WARNING] Node 127.100.0.2:6379 has slots in migrating state 10923.");
        assert!(check_passed(&open, true).is_err());
        assert!(check_passed("[ERR] Not all 16384 slots are covered by nodes.", true).is_err());
    }

    fn ready_cluster() -> (ValkeyCluster, Vec<ValkeyNode>) {
        let mut vc = valkey_cluster("c", 2, 1, false);
        vc.metadata.generation = Some(3);
        let condition = |type_: &str, status: &str| Condition {
            type_: type_.into(),
            status: status.into(),
            reason: "R".into(),
            message: String::new(),
            observed_generation: Some(3),
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ),
        };
        let shard = |i: i32, slots: &str| ShardStatus {
            index: i,
            primary: Some(format!("c-{i}-0")),
            slots: vec![slots.into()],
            members: vec![
                MemberStatus {
                    name: format!("c-{i}-0"),
                    role: Some(Role::Primary),
                    ready: true,
                },
                MemberStatus {
                    name: format!("c-{i}-1"),
                    role: Some(Role::Replica),
                    ready: true,
                },
            ],
        };
        vc.status = Some(ValkeyClusterStatus {
            phase: Some(Phase::Ready),
            ready_shards: 2,
            slots_assigned: 16384,
            shards: vec![shard(0, "0-8191"), shard(1, "8192-16383")],
            switchover: None,
            observed_generation: Some(3),
            conditions: vec![
                condition(types::READY, "True"),
                condition(types::SLOTS_ASSIGNED, "True"),
                condition(types::PROGRESSING, "False"),
                condition(types::DEGRADED, "False"),
            ],
        });
        let nodes = ["c-0-0", "c-0-1", "c-1-0", "c-1-1"]
            .into_iter()
            .map(|n| ValkeyNode::new(n, Default::default()))
            .collect();
        (vc, nodes)
    }

    #[test]
    fn readiness_follows_the_contract() {
        let (vc, nodes) = ready_cluster();
        assert_eq!(not_ready(&vc, &nodes), None);

        let mut stale = vc.clone();
        stale.metadata.generation = Some(4);
        assert!(
            not_ready(&stale, &nodes)
                .unwrap()
                .contains("observedGeneration")
        );

        let mut short = vc.clone();
        short.status.as_mut().unwrap().shards[1].slots = vec!["8192-16000".into()];
        assert!(not_ready(&short, &nodes).unwrap().contains("add up to"));

        let mut unready = vc.clone();
        unready.status.as_mut().unwrap().shards[0].members[1].ready = false;
        assert!(not_ready(&unready, &nodes).unwrap().contains("c-0-1"));

        let mut degraded = vc.clone();
        degraded.status.as_mut().unwrap().conditions[3].status = "True".into();
        assert!(not_ready(&degraded, &nodes).unwrap().contains("Degraded"));

        let mut scaled = vc.clone();
        scaled.spec.replicas_per_shard = 2;
        assert!(not_ready(&scaled, &nodes).is_some());

        assert!(not_ready(&vc, &nodes[..3]).unwrap().contains("c-1-1"));
    }

    fn member(
        name: &str,
        revision: &str,
        desired: &str,
        allowed: Option<&str>,
        ready: bool,
    ) -> ValkeyNode {
        let mut node = ValkeyNode::new(name, Default::default());
        node.spec.allowed_revision = allowed.map(str::to_string);
        node.status = Some(ValkeyNodeStatus {
            workload: Some(WorkloadStatus {
                ready,
                revision: Some(revision.into()),
                desired_revision: Some(desired.into()),
                ..Default::default()
            }),
            valkey: Some(ValkeyStatus {
                role: Some(if name.ends_with("-0") {
                    Role::Primary
                } else {
                    Role::Replica
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        node
    }

    #[test]
    fn roll_watch_counts_members_rolling_at_once() {
        let before = [
            member("c-0-0", "a", "a", Some("a"), true),
            member("c-0-1", "a", "a", Some("a"), true),
        ];
        let mut watch = RollWatch::new(&before);
        // The template changed: both want b, no gate open yet.
        watch.sample(&[
            member("c-0-0", "a", "b", Some("a"), true),
            member("c-0-1", "a", "b", Some("a"), true),
        ]);
        assert_eq!((watch.max_rolling, watch.gate_order.len()), (0, 0));
        // The replica's gate opens, its pod restarts.
        watch.sample(&[
            member("c-0-0", "a", "b", Some("a"), true),
            member("c-0-1", "b", "b", Some("b"), false),
        ]);
        assert_eq!((watch.max_rolling, watch.max_not_ready), (1, 1));
        // Rolled; then the primary's turn.
        let done = [
            member("c-0-0", "b", "b", Some("b"), true),
            member("c-0-1", "b", "b", Some("b"), true),
        ];
        watch.sample(&[
            member("c-0-0", "a", "b", Some("b"), true),
            member("c-0-1", "b", "b", Some("b"), true),
        ]);
        watch.sample(&done);
        assert_eq!(watch.max_rolling, 1);
        assert!(watch.all_rolled(&done));
        assert_eq!(
            watch.gate_order,
            [
                ("c-0-1".to_string(), Some(Role::Replica)),
                ("c-0-0".to_string(), Some(Role::Primary))
            ]
        );
        // Two at once is seen.
        let mut watch = RollWatch::new(&before);
        watch.sample(&[
            member("c-0-0", "a", "b", Some("b"), true),
            member("c-0-1", "b", "b", Some("b"), false),
        ]);
        assert_eq!(watch.max_rolling, 2);
        assert!(!watch.all_rolled(&done[..1]));
    }
}
