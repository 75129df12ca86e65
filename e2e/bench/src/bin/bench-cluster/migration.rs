//! 3 -> 4 shards: slots moved by the operator or by `valkey-cli --cluster rebalance`, timed
//! from the new primary Ready to balanced.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use crd_types::ValkeyNode;
use e2e_kit::cluster_testing::{Access, ClusterApis, ClusterNode, Progress};
use kube::Api;
use serde_json::json;

use crate::clusters::{apply_cluster_with, cluster_access, load_keys, wait};
use crate::floor::{
    Cli, addr, cluster_cli, cluster_cli_ok, floor_cluster, hand_node_ready, valkey_root,
};
use crate::report::first_line;
use crate::{LIMIT, POLL, V91, image};

/// How long `valkey-cli --cluster rebalance` may run before it is killed and the figure
/// reported as missing.
const CLI_LIMIT: Duration = Duration::from_secs(300);

/// Slots a primary of four holds once balanced.
const QUARTER: u32 = 4096;

pub(crate) struct Migration {
    /// From the new primary answering until it holds its share and no slot is open.
    pub(crate) total: Duration,
    /// From the first slot seen opening to the last closed.
    pub(crate) moving: Duration,
    pub(crate) moved_keys: usize,
    /// The new primary's ClusterIP.
    pub(crate) new_ip: String,
    /// The operator's scale-outs: how `total` began.
    pub(crate) operator: Option<OperatorStart>,
}

/// The start of an operator's scale-out.
pub(crate) struct OperatorStart {
    /// From the patch of `spec.shards` to the new primary seen Ready (where `total` starts).
    pub(crate) ready_after_patch: Duration,
    /// Slots the new primary held, by its own view, at the first look after that: the
    /// operator starts moving on the same readiness (watching it rather than polling), so
    /// a small move may be over before the bench's first look.
    pub(crate) held_at_start: u32,
}

/// Slots owned by `id` and the open slots, as the node at `ip` sees them.
pub(crate) fn slots_seen_by(access: &Access, ip: &str, id: &str) -> Result<(u32, usize)> {
    let view = access.nodes_seen_by(ip)?;
    let owned = view
        .iter()
        .find(|n| n.id == id)
        .map_or(0, ClusterNode::slot_count);
    let open = view.iter().map(|n| n.open_slots.len()).sum();
    Ok((owned, open))
}

/// Whether a move to `new_ip` has started: the new primary imports or owns a slot.
pub(crate) fn moving(access: &Access, new_ip: &str, new_id: &str) -> Result<bool> {
    let (owned, open) = slots_seen_by(access, new_ip, new_id)?;
    Ok(owned > 0 || open > 0)
}

/// Whether the new primary holds [`QUARTER`] slots with nothing open, as both it and
/// `observer` see it.
pub(crate) fn balanced(
    access: &Access,
    observer: &str,
    new_ip: &str,
    new_id: &str,
) -> Result<Progress<()>> {
    for ip in [observer, new_ip] {
        let (owned, open) = slots_seen_by(access, ip, new_id)?;
        if owned < QUARTER || open > 0 {
            return Ok(Err(format!(
                "{ip} sees {owned} slots on the new primary, {open} open"
            )));
        }
    }
    Ok(Ok(()))
}

pub(crate) async fn operator_scale_out(
    apis: &ClusterApis,
    access: &Access,
    name: &str,
) -> Result<Migration> {
    let observer = access.members[0].ip.clone();
    let patched = Instant::now();
    apis.patch(name, json!({"spec": {"shards": 4}})).await?;
    let new_member = format!("{name}-3-0");
    let new_ip = wait("the new primary to answer", LIMIT, || async {
        let Some(n) = apis.nodes.get_opt(&new_member).await? else {
            return Ok(Err("not created".into()));
        };
        let status = n.status.unwrap_or_default();
        let ready = status.workload.is_some_and(|w| w.ready);
        let ip = status.endpoint.and_then(|e| e.cluster_ip);
        Ok(ip.filter(|_| ready).ok_or_else(|| "not Ready".to_string()))
    })
    .await?;
    let started = Instant::now();
    let ready_after_patch = started - patched;
    let new_id = access.node_id(&new_ip)?;
    let mut first_move: Option<Instant> = None;
    let mut held_at_start: Option<u32> = None;
    wait("the operator's migration", LIMIT, || {
        // What `moving` looks at, the first look's slot count kept.
        if first_move.is_none()
            && let Ok((owned, open)) = slots_seen_by(access, &new_ip, &new_id)
        {
            held_at_start.get_or_insert(owned);
            if owned > 0 || open > 0 {
                first_move = Some(Instant::now());
            }
        }
        let done = balanced(access, &observer, &new_ip, &new_id);
        async move { done }
    })
    .await?;
    let done = Instant::now();
    Ok(Migration {
        total: done - started,
        moving: done - first_move.unwrap_or(done),
        moved_keys: access.cli(&new_ip, &["DBSIZE"]).parse()?,
        new_ip,
        operator: Some(OperatorStart {
            ready_after_patch,
            held_at_start: held_at_start.unwrap_or(0),
        }),
    })
}

pub(crate) struct CliMigration {
    /// `total` runs from the new node Ready (`add-node` starts) to `rebalance` done.
    pub(crate) migration: Migration,
    /// `add-node` until the new node can take slots (see [`joined`]).
    pub(crate) joined: Duration,
    /// The `rebalance` process's run.
    pub(crate) rebalance: Duration,
}

/// Whether a node just added is ready for `rebalance`:
/// - every other member lists it by its id (not in handshake), linked: otherwise `rebalance`
///   run from a member that does not list it yet says "No rebalancing needed", and a source
///   that does not know it refuses `CLUSTER SETSLOT <slot> MIGRATING <id>` ("I don't know
///   about node"), leaving the slot importing on the new node;
/// - the new node reports `cluster_state:ok`: a primary that was in a minority (a new node
///   with no slot map yet) waits out the rejoin delay (the node timeout, at most 5 s) before
///   it does, and until then it answers MIGRATE's RESTORE-ASKING with CLUSTERDOWN, which also
///   stops `rebalance` with its first slot open;
/// - `--cluster check` passes (every node agrees, every slot covered, nothing open).
pub(crate) fn joined(
    cli: &Cli,
    access: &Access,
    new_ip: &str,
    new_id: &str,
) -> Result<Progress<()>> {
    for m in &access.members {
        let view = access.nodes_seen_by(&m.ip)?;
        match view.iter().find(|n| n.id == new_id) {
            None => return Ok(Err(format!("{} does not know the new node", m.name))),
            Some(n) if n.has_flag("handshake") || !n.connected || n.failing() => {
                return Ok(Err(format!(
                    "{} sees the new node as {:?}",
                    m.name, n.flags
                )));
            }
            Some(_) => {}
        }
    }
    let info = access.cli(new_ip, &["CLUSTER", "INFO"]);
    if !info.lines().any(|l| l.trim() == "cluster_state:ok") {
        return Ok(Err(format!(
            "the new node is not cluster_state:ok: {}",
            first_line(&info)
        )));
    }
    Ok(cli.check(access).map(|_| ()))
}

/// The floor: a fourth hand-made node (on `image`, the default image if `None`),
/// `valkey-cli --cluster add-node`, then (once it can take slots, see [`joined`])
/// `valkey-cli --cluster rebalance --cluster-use-empty-masters` with its defaults
/// (`--cluster-pipeline 10`, `--cluster-timeout 60000`), all by `cli`, its output in
/// `<run>/<prefix>-rebalance.out`.
pub(crate) async fn cli_scale_out(
    nodes: &Api<ValkeyNode>,
    access: &Access,
    prefix: &str,
    run: &Path,
    image: Option<&str>,
    cli: &Cli,
) -> Result<CliMigration> {
    let new_ip = hand_node_ready(nodes, &format!("{prefix}-3"), image).await?;
    let new_id = access.node_id(&new_ip)?;
    let seed = addr(&access.members[0].ip);
    let started = Instant::now();
    cluster_cli_ok(cli, access, &["add-node", &addr(&new_ip), &seed])?;
    wait("the new node to join", Duration::from_secs(60), || async {
        match joined(cli, access, &new_ip, &new_id) {
            Err(e) => Ok(Err(format!("{e:#}"))),
            other => other,
        }
    })
    .await?;
    let joined = started.elapsed();

    let log = |ext: &str| run.join(format!("{prefix}-rebalance.{ext}"));
    let rebalance_started = Instant::now();
    let mut child = cluster_cli(
        cli,
        access,
        &["rebalance", &seed, "--cluster-use-empty-masters"],
    )
    .stdout(File::create(log("out"))?)
    .stderr(Stdio::from(File::create(log("err"))?))
    .spawn()
    .context("starting valkey-cli --cluster rebalance")?;
    let mut first_move: Option<Instant> = None;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if first_move.is_none() && moving(access, &new_ip, &new_id).unwrap_or(false) {
            first_move = Some(Instant::now());
        }
        if rebalance_started.elapsed() > CLI_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "rebalance did not finish in {CLI_LIMIT:?}: {}",
                tail(run, prefix)
            );
        }
        tokio::time::sleep(POLL).await;
    };
    let done = Instant::now();
    if !status.success() {
        bail!("rebalance exited with {status}: {}", tail(run, prefix));
    }
    // It exits 0 also when it moved nothing ("No rebalancing needed"): check the result.
    balanced(access, &access.members[0].ip, &new_ip, &new_id)?
        .map_err(|why| anyhow::anyhow!("rebalance exited 0 but {why}: {}", tail(run, prefix)))?;
    Ok(CliMigration {
        migration: Migration {
            total: done - started,
            moving: done - first_move.unwrap_or(done),
            moved_keys: access.cli(&new_ip, &["DBSIZE"]).parse()?,
            new_ip,
            operator: None,
        },
        joined,
        rebalance: done - rebalance_started,
    })
}

/// The last lines of `rebalance`'s output (stdout, then stderr) other than its progress
/// marks.
pub(crate) fn tail(run: &Path, prefix: &str) -> String {
    let read = |ext: &str| {
        std::fs::read_to_string(run.join(format!("{prefix}-rebalance.{ext}"))).unwrap_or_default()
    };
    let text = read("out") + &read("err");
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.chars().all(|c| c == '#'))
        .collect();
    lines[lines.len().saturating_sub(6)..].join(" / ")
}

/// A 3 -> 4 scale-out on Valkey 9.1.
pub(crate) struct Scaled {
    /// `moving` is not reported: the atomic path never shows a slot importing.
    pub(crate) migration: Migration,
    /// valkey-cli's: `add-node` until the new node can take slots, then `rebalance`.
    pub(crate) cli: Option<(Duration, Duration)>,
    /// What `CLUSTER GETSLOTMIGRATIONS` lists on the new primary, see [`migration_jobs`].
    pub(crate) jobs: String,
}

/// 3 x 0 on [`V91`] with `keys` keys (and `annotations`), scaled to 4 shards by the operator.
pub(crate) async fn operator_scale_out_on(
    apis: &ClusterApis,
    name: &str,
    keys: usize,
    annotations: &[(&str, &str)],
) -> Result<Scaled> {
    let image = image(V91);
    apply_cluster_with(apis, name, 3, 0, Some(&image), annotations, &[]).await?;
    let access = cluster_access(apis, name).await?;
    load_keys(&access, name, keys).await?;
    let migration = operator_scale_out(apis, &access, name).await?;
    let jobs = migration_jobs(&access, &migration.new_ip);
    Ok(Scaled {
        migration,
        cli: None,
        jobs,
    })
}

/// 3 hand-made primaries on [`V91`] with `keys` keys, a fourth added and the slots
/// rebalanced by [`V91`]'s own valkey-cli (from the image's root filesystem).
pub(crate) async fn cli_scale_out_on(
    nodes: &Api<ValkeyNode>,
    prefix: &str,
    keys: usize,
    run: &Path,
) -> Result<Scaled> {
    let cli = Cli::Chroot(valkey_root(V91)?);
    let image = image(V91);
    let access = floor_cluster(nodes, prefix, 3, 0, Some(&image), &cli).await?;
    load_keys(&access, prefix, keys).await?;
    let m = cli_scale_out(nodes, &access, prefix, run, Some(&image), &cli).await?;
    let jobs = migration_jobs(&access, &m.migration.new_ip);
    Ok(Scaled {
        migration: m.migration,
        cli: Some((m.joined, m.rebalance)),
        jobs,
    })
}

/// The atomic slot migration jobs `CLUSTER GETSLOTMIGRATIONS` lists on `ip`, counted by
/// operation and state ("none": the slots it holds came the classic way). valkey-cli prints
/// each job's fields and values one per line.
pub(crate) fn migration_jobs(access: &Access, ip: &str) -> String {
    let text = access.admin_cli(ip, &["CLUSTER", "GETSLOTMIGRATIONS"]);
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let after = |field: &str| -> Vec<&str> {
        lines
            .windows(2)
            .filter(|w| w[0] == field)
            .map(|w| w[1])
            .collect()
    };
    let (operations, states) = (after("operation"), after("state"));
    if operations.is_empty() {
        return if text.is_empty() {
            "none".to_string()
        } else {
            format!("none ({})", first_line(&text))
        };
    }
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for (i, operation) in operations.iter().enumerate() {
        let state = states.get(i).copied().unwrap_or("?");
        *counts.entry(format!("{operation} {state}")).or_default() += 1;
    }
    counts
        .iter()
        .map(|(what, n)| format!("{n} {what}"))
        .collect::<Vec<_>>()
        .join(", ")
}
