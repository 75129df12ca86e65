//! The floor: hand-made cluster-mode ValkeyNodes formed and grown by valkey-cli.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use crd_types::ValkeyNode;
use crd_types::node::Mode;
use crd_types::template::WorkloadType;
use e2e_kit::cluster_testing::{Access, MemberAddr, PORT, Progress, check_passed};
use e2e_kit::testing::valkey_node;
use kube::Api;
use kube::api::PostParams;
use local_cluster::run_script;

use crate::LIMIT;
use crate::clusters::wait;

/// ClusterIPs of hand-made nodes named `<prefix>-<i>`, in name order.
pub(crate) async fn member_ips(nodes: &Api<ValkeyNode>, prefix: &str) -> Result<Vec<String>> {
    let mut ips: BTreeMap<String, String> = BTreeMap::new();
    for n in nodes.list(&Default::default()).await? {
        let name = n.metadata.name.clone().unwrap_or_default();
        if !name.starts_with(&format!("{prefix}-")) {
            continue;
        }
        if let Some(ip) = n.status.and_then(|s| s.endpoint).and_then(|e| e.cluster_ip) {
            ips.insert(name, ip);
        }
    }
    Ok(ips.into_values().collect())
}

/// A hand-made cluster-mode ValkeyNode (no `spec.auth`: it serves without a password), on
/// `image` if given, else the template's default image.
pub(crate) fn hand_node(name: &str, image: Option<&str>) -> ValkeyNode {
    let mut node = valkey_node(name, WorkloadType::StatefulSet, true, None);
    node.spec.mode = Mode::Cluster;
    node.spec.template.config.0.clear();
    if let Some(image) = image {
        node.spec.template.image = image.to_string();
    }
    node
}

/// Hand-made nodes `<prefix>-<i>`; returns their IPs once all are Ready.
pub(crate) async fn hand_nodes(
    nodes: &Api<ValkeyNode>,
    prefix: &str,
    count: usize,
    image: Option<&str>,
) -> Result<Vec<String>> {
    for i in 0..count {
        let node = hand_node(&format!("{prefix}-{i}"), image);
        nodes.create(&PostParams::default(), &node).await?;
    }
    wait(&format!("{count} {prefix} nodes"), LIMIT, || async {
        let mut ready = 0;
        for i in 0..count {
            let n = nodes.get_status(&format!("{prefix}-{i}")).await?;
            if n.status.and_then(|s| s.workload).is_some_and(|w| w.ready) {
                ready += 1;
            }
        }
        Ok(if ready == count {
            Ok(())
        } else {
            Err(format!("{ready} of {count} Ready"))
        })
    })
    .await?;
    member_ips(nodes, prefix).await
}

/// One more hand-made node named exactly `name`; its IP once Ready.
pub(crate) async fn hand_node_ready(
    nodes: &Api<ValkeyNode>,
    name: &str,
    image: Option<&str>,
) -> Result<String> {
    nodes
        .create(&PostParams::default(), &hand_node(name, image))
        .await?;
    wait(&format!("{name} to be Ready"), LIMIT, || async {
        let status = nodes.get_status(name).await?.status.unwrap_or_default();
        let ready = status.workload.is_some_and(|w| w.ready);
        let ip = status.endpoint.and_then(|e| e.cluster_ip);
        Ok(ip.filter(|_| ready).ok_or_else(|| "not Ready".to_string()))
    })
    .await
}

/// [`Access`] to hand-made primaries (no password).
pub(crate) fn floor_access(prefix: &str, ips: &[String]) -> Access {
    Access {
        members: ips
            .iter()
            .enumerate()
            .map(|(i, ip)| MemberAddr {
                name: format!("{prefix}-{i}"),
                shard: i as u32,
                member: 0,
                ip: ip.clone(),
            })
            .collect(),
        password: None,
        operator_password: None,
        tls: None,
    }
}

pub(crate) struct Floor {
    pub(crate) nodes_ready: Duration,
    pub(crate) formed: Duration,
}

pub(crate) async fn floor_formation(
    nodes: &Api<ValkeyNode>,
    prefix: &str,
    count: usize,
    replicas: usize,
) -> Result<Floor> {
    let started = Instant::now();
    let ips = hand_nodes(nodes, prefix, count, None).await?;
    let nodes_ready = started.elapsed();
    let started = Instant::now();
    cli_create(&Cli::Host, &floor_access(prefix, &ips), replicas).await?;
    Ok(Floor {
        nodes_ready,
        formed: started.elapsed(),
    })
}

/// Hand-made primaries on `image` (the default image if `None`) formed into a cluster by
/// `cli`; its [`Access`].
pub(crate) async fn floor_cluster(
    nodes: &Api<ValkeyNode>,
    prefix: &str,
    count: usize,
    replicas: usize,
    image: Option<&str>,
    cli: &Cli,
) -> Result<Access> {
    let ips = hand_nodes(nodes, prefix, count, image).await?;
    let access = floor_access(prefix, &ips);
    cli_create(cli, &access, replicas).await?;
    Ok(access)
}

/// Which valkey-cli runs the `--cluster` commands of a floor.
pub(crate) enum Cli {
    /// The host's (8.0.1, `e2e/setup-valkey.sh`); `--cluster check` through
    /// [`Access::check`].
    Host,
    /// `/usr/bin/valkey-cli` of an image's root filesystem, run with `chroot <root>` (it
    /// needs that root's libc). The chroot keeps the host's network, so it reaches the
    /// members' ClusterIPs as the host's does.
    Chroot(PathBuf),
}

impl Cli {
    /// The command line that starts this valkey-cli.
    fn argv(&self) -> Vec<OsString> {
        match self {
            Cli::Host => vec!["valkey-cli".into()],
            Cli::Chroot(root) => vec!["chroot".into(), root.into(), "/usr/bin/valkey-cli".into()],
        }
    }

    /// `valkey-cli --cluster check` from a live member, passed as [`Access::check`] says
    /// (exit 0, every slot covered, neither an error nor a warning), bounded by
    /// `timeout 30` as [`Access::check`].
    pub(crate) fn check(&self, access: &Access) -> Progress<String> {
        if let Cli::Host = self {
            return access.check();
        }
        let ip = access.live_ip().ok_or("no member answers PING")?;
        let mut command = Command::new("timeout");
        command.arg("30").args(self.argv());
        if let Some(password) = &access.password {
            command.env("REDISCLI_AUTH", password);
        }
        command.args(["--cluster", "check", &addr(ip)]);
        let out = command
            .output()
            .map_err(|e| format!("valkey-cli did not run: {e}"))?;
        let stdout = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let text = if stdout.is_empty() {
            String::from_utf8_lossy(&out.stderr).trim().to_string()
        } else {
            stdout
        };
        check_passed(&text, out.status.success()).map(|()| text)
    }
}

/// The root filesystem of the `valkey/valkey:<version>` image, as `e2e/images/build.sh`
/// builds it: `e2e/images/valkey-rootfs.sh` prints its directory (cached, and warm once the
/// local cluster has started: it built the images from the same roots).
pub(crate) fn valkey_root(version: &str) -> Result<PathBuf> {
    let out = run_script("e2e/images/valkey-rootfs.sh", &[version], &[])?;
    let root = PathBuf::from(out.trim());
    if !root.join("usr/bin/valkey-cli").is_file() {
        bail!("no usr/bin/valkey-cli in {}", root.display());
    }
    Ok(root)
}

/// `valkey-cli --cluster <args>`, logged in with `access`'s password if it has one
/// (REDISCLI_AUTH, so it is not on the command line).
pub(crate) fn cluster_cli(cli: &Cli, access: &Access, args: &[&str]) -> Command {
    let argv = cli.argv();
    let mut command = Command::new(&argv[0]);
    command.args(&argv[1..]);
    if let Some(password) = &access.password {
        command.env("REDISCLI_AUTH", password);
    }
    command.arg("--cluster").args(args);
    command
}

/// Runs a `valkey-cli --cluster` command that must succeed (bounded by [`LIMIT`]).
pub(crate) fn cluster_cli_ok(cli: &Cli, access: &Access, args: &[&str]) -> Result<String> {
    let out = cluster_cli(cli, access, args).output()?;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    if !out.status.success() {
        bail!(
            "valkey-cli --cluster {} exited with {}: {text}{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(text)
}

pub(crate) fn addr(ip: &str) -> String {
    format!("{ip}:{PORT}")
}

/// `valkey-cli --cluster create`, then wait for `--cluster check` to pass (every node agrees,
/// every slot covered, nothing open).
pub(crate) async fn cli_create(cli: &Cli, access: &Access, replicas: usize) -> Result<()> {
    let addrs: Vec<String> = access.members.iter().map(|m| addr(&m.ip)).collect();
    let mut args = vec!["create"];
    args.extend(addrs.iter().map(String::as_str));
    let replicas = replicas.to_string();
    args.extend(["--cluster-replicas", &replicas, "--cluster-yes"]);
    cluster_cli_ok(cli, access, &args)?;
    wait("--cluster check to pass", LIMIT, || async {
        Ok(cli.check(access).map(|_| ()))
    })
    .await
}
