//! Renders a node's valkey.conf (or sentinel.conf) from its spec.
//!
//! The user's `config` comes first, the operator-owned directives last, so ours win even if
//! an owned directive slipped past admission (Valkey keeps the last occurrence).
//!
//! `bind` is never rendered: in the official image Valkey binds 0.0.0.0 inside the pod's own
//! network namespace, which is exactly the pod IP plus loopback; the local node agent (pods
//! share the host network there) appends `--bind <podIP>` itself. Pinning an address in the
//! file would break one of the two.
//!
//! The values themselves are read and written as valkey.conf does, by [`args`]. Passwords and
//! users are written by the container's start-up shell into files the config includes
//! ([`auth_file_script`], [`users_file_script`]). With `spec.tls`, the node serves TLS only,
//! on the same ports ([`tls`]).

pub mod args;
mod auth;
pub mod cluster_context;
mod nodes_conf;
pub mod replication;
pub mod tls;
mod users;

pub use auth::{
    EXPORTER_AUTH_DIR, EXPORTER_PASSWORD_FILE, auth_file_script, exporter_logs_in_as_monitoring,
    exporter_password_file_script, sentinel_auth_script,
};
pub use nodes_conf::shard_id_repair_script;
pub use users::{users_file_script, users_secret};

use crd_types::conditions::reasons::ConfigValid;
use crd_types::live_config;
use crd_types::names::ports;
use crd_types::node::{Mode, RolloutPolicy};
use crd_types::template::{Announce, Tls};
use crd_types::versions::{self, Version};

use args::{quote, split_args};
use crd_types::{ValkeyNode, ValkeyNodeSpec};

/// Where the ConfigMap is mounted (read-only).
pub const CONFIG_DIR: &str = "/etc/valkey";
/// The data directory: the PVC or an emptyDir.
pub const DATA_DIR: &str = "/data";
/// A cluster member's own cluster state, kept by Valkey in the data directory.
pub const CLUSTER_CONFIG_FILE: &str = "/data/nodes.conf";
/// File name of a server's config.
pub const SERVER_CONFIG_FILE: &str = "valkey.conf";
/// File name of a sentinel's config.
pub const SENTINEL_CONFIG_FILE: &str = "sentinel.conf";
/// Environment variable carrying the pod IP (downward API) in every container.
pub const POD_IP_ENV: &str = "POD_IP";
/// Environment variable carrying the default user's password (from `auth.passwordSecretRef`).
/// valkey-cli reads this name itself, so the readiness probe and `kubectl exec valkey-cli`
/// log in without the password on a command line.
pub const PASSWORD_ENV: &str = "REDISCLI_AUTH";
/// Environment variable carrying the `operator` user's password (`auth.operatorSecretRef`).
pub const OPERATOR_PASSWORD_ENV: &str = "VALKEY_OPERATOR_PASSWORD";
/// Where the valkey container has that Secret's key mounted, read-only: the whole directory,
/// as a subPath mount never sees the Secret change. The password may be rotated live, and a
/// running container's env keeps the value it started with, so the preStop hooks, which run
/// long after the start, read [`OPERATOR_PASSWORD_FILE`] (falling back to the env).
pub const OPERATOR_PASSWORD_DIR: &str = "/etc/valkey-operator/operator";
/// The file in [`OPERATOR_PASSWORD_DIR`] the Secret's key is projected to.
pub const OPERATOR_PASSWORD_FILE_NAME: &str = "password";
/// [`OPERATOR_PASSWORD_DIR`]/[`OPERATOR_PASSWORD_FILE_NAME`].
pub const OPERATOR_PASSWORD_FILE: &str = "/etc/valkey-operator/operator/password";

/// ConfigMap key and file name of a Gated data node's live directives, included by its config.
pub const LIVE_FILE: &str = "live.conf";

/// Where a data node's start-up shell writes its password directives (in the /tmp emptyDir,
/// owner-only), included by the rendered config.
pub const AUTH_FILE: &str = "/tmp/valkey-auth.conf";
/// Where a data node's users Secret (`spec.usersSecretName`) is mounted, read-only: the
/// whole directory, as a subPath mount never sees the Secret change. Beside [`CONFIG_DIR`],
/// not in it: the e2e node agent makes a mount point in a read-only volume by shadowing it
/// with a copy, which would stop following the ConfigMap (the preStop hook reads it).
pub const USERS_DIR: &str = "/etc/valkey-users";
/// Where a data node's start-up shell writes the users it takes from that Secret (in the
/// /tmp emptyDir, owner-only), included by the rendered config.
pub const USERS_FILE: &str = "/tmp/valkey-users.conf";

const HEADER: &str = "# Rendered by valkey-operator (node-controller); edits are overwritten.\n";
const LIVE_HEADER: &str =
    "# Directives applied live with CONFIG SET (node-controller renders this file for restarts).\n";

/// `sentinel <sub>` directives the operator or the topology controller owns in Sentinel mode.
const SENTINEL_OWNED_SUBCOMMANDS: &[&str] = &[
    "announce-ip",
    "announce-port",
    "auth-pass",
    "auth-user",
    "config-epoch",
    "current-epoch",
    "known-replica",
    "known-sentinel",
    "known-slave",
    "leader-epoch",
    "monitor",
    "myid",
    "sentinel-pass",
    "sentinel-user",
];

/// Why a spec's config cannot be rendered. The controller reports it as `ConfigValid=False`
/// (reason [`ConfigError::reason`]) and an Event; nothing is rolled out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// Directives the operator manages, as the user spelled them.
    #[error(
        "config sets directives the operator manages: {}; remove them (the operator renders these itself)",
        .0.join(", ")
    )]
    OwnedDirectives(Vec<String>),
    /// Directives that are not valid valkey.conf lines: `(name, why)`.
    #[error("config has invalid directives: {}", describe(.0))]
    InvalidDirectives(Vec<(String, String)>),
    /// Directives the image's Valkey version does not know (a typo, or one too new for it).
    #[error("{0}")]
    UnknownDirectives(String),
}

fn describe(problems: &[(String, String)]) -> String {
    problems
        .iter()
        .map(|(name, why)| format!("{name:?} ({why})"))
        .collect::<Vec<_>>()
        .join("; ")
}

impl ConfigError {
    /// The reason of the `ConfigValid=False` condition.
    pub fn reason(&self) -> ConfigValid {
        match self {
            ConfigError::OwnedDirectives(_) => ConfigValid::OwnedDirective,
            ConfigError::InvalidDirectives(_) => ConfigValid::InvalidDirective,
            ConfigError::UnknownDirectives(_) => ConfigValid::UnknownDirective,
        }
    }
}

/// A rendered config file plus what must go on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderedConfig {
    /// `valkey.conf` or `sentinel.conf`.
    pub file_name: &'static str,
    /// The file's content.
    pub text: String,
    /// Extra arguments after the config file: with `announce: PodIP` the address is only
    /// known at runtime, so it comes from `$(POD_IP)` (expanded by Kubernetes in args).
    pub args: Vec<String>,
    /// The replication context (`spec.replication`), kept apart from the config: it is not
    /// part of the revision (see [`replication`]).
    pub replication: Option<String>,
    /// A memory-only cluster member's context (`spec.cluster`, see [`cluster_context`]),
    /// outside the revision like the replication context.
    pub cluster: Option<String>,
    /// For a topology's data node (`rolloutPolicy: Gated`, Cluster mode or with a replication
    /// context), the user's directives that change live (see [`crd_types::live_config`]):
    /// topology-controller sets them with CONFIG SET, and the server reads this file
    /// ([`LIVE_FILE`]) at start, so it is no part of the revision either.
    pub live: Option<String>,
}

/// What rendering decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rendered {
    Config(RenderedConfig),
    /// `announce: Service` but service-controller has not published the ClusterIP yet: the
    /// node must not start announcing anything else, so nothing is created until it does.
    WaitingForEndpoint,
}

/// The ClusterIP service-controller published for `node`, if any.
pub fn cluster_ip(node: &ValkeyNode) -> Option<&str> {
    node.status
        .as_ref()?
        .endpoint
        .as_ref()?
        .cluster_ip
        .as_deref()
        .filter(|ip| !ip.is_empty() && *ip != "None")
}

/// Config file name for `mode`.
pub fn file_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Sentinel => SENTINEL_CONFIG_FILE,
        Mode::Standalone | Mode::Cluster => SERVER_CONFIG_FILE,
    }
}

/// Checks the user's directives; the first error class found wins (owned before invalid,
/// because an owned directive is the more actionable message).
pub fn validate(spec: &ValkeyNodeSpec) -> Result<(), ConfigError> {
    let config = &spec.template.config;
    let mut owned: Vec<String> = config
        .owned_directives()
        .into_iter()
        .map(str::to_string)
        .collect();
    if spec.template.is_memory_only() && spec.mode != Mode::Sentinel {
        owned.extend(
            config
                .0
                .keys()
                .filter(|k| MEMORY_ONLY_OWNED.contains(&k.to_ascii_lowercase().as_str()))
                .cloned(),
        );
    }
    let mut invalid = Vec::new();
    let mut seen = std::collections::BTreeMap::<String, &str>::new();
    for (name, value) in &config.0 {
        let words: Vec<&str> = name.split(' ').collect();
        if words.iter().any(|w| !is_name_word(w)) {
            invalid.push((
                name.clone(),
                "a directive name is letters, digits, '-', '_' or '.'".to_string(),
            ));
            continue;
        }
        let lower = name.to_ascii_lowercase();
        match (spec.mode, words.as_slice()) {
            (_, [_]) => {}
            (Mode::Sentinel, [first, sub]) if first.eq_ignore_ascii_case("sentinel") => {
                if SENTINEL_OWNED_SUBCOMMANDS.contains(&sub.to_ascii_lowercase().as_str()) {
                    owned.push(name.clone());
                }
            }
            _ => {
                invalid.push((
                    name.clone(),
                    "only Sentinel mode takes two-word directives, as 'sentinel <option>'"
                        .to_string(),
                ));
                continue;
            }
        }
        if let Some(first) = seen.insert(lower, name) {
            invalid.push((name.clone(), format!("also set as {first:?}")));
        }
        if let Err(why) = split_args(value) {
            invalid.push((name.clone(), why));
        } else if let Some(live) = live_config::find(name)
            && spec.mode != Mode::Sentinel
            && live_config::canonical(live.kind, value).is_none()
        {
            // Caught here rather than by a server that refuses to start (or to CONFIG SET).
            invalid.push((name.clone(), format!("{value:?} is not {}", live.kind)));
        }
    }
    if !owned.is_empty() {
        owned.sort();
        owned.dedup();
        return Err(ConfigError::OwnedDirectives(owned));
    }
    if !invalid.is_empty() {
        return Err(ConfigError::InvalidDirectives(invalid));
    }
    unknown_to_image(spec)
}

/// A server's directives its image's Valkey version does not know, judged when the image tag
/// names a version whose directives were measured ([`versions`]); otherwise the server says.
fn unknown_to_image(spec: &ValkeyNodeSpec) -> Result<(), ConfigError> {
    let image = &spec.template.image;
    let Some(version) = Version::of_image(image).filter(|_| spec.mode != Mode::Sentinel) else {
        return Ok(());
    };
    match versions::unknown_directives(&spec.template.config, version) {
        Some(unknown) if !unknown.is_empty() => Err(ConfigError::UnknownDirectives(
            versions::describe_unknown(&unknown, version, image),
        )),
        _ => Ok(()),
    }
}

use crd_types::config::SERVER_DEFAULTS;

/// What a memory-only data node (`memoryOnly`) renders itself: no append-only file, no RDB
/// snapshots. Admission refuses them in its config.
pub const MEMORY_ONLY_OWNED: &[&str] = &["appendonly", "save"];

/// A memory-only data node's defaults besides [`SERVER_DEFAULTS`]: a replica that starts
/// empty (as every restarted one does) loads its first sync straight from the socket rather
/// than through an RDB file in /data, which may be tmpfs counted against its memory.
const MEMORY_ONLY_DEFAULTS: &[(&str, &str)] = &[("repl-diskless-load", "on-empty-db")];

/// Renders the node's config, or says it must wait for its Service's ClusterIP.
///
/// `cluster_ip` is `status.endpoint.clusterIP` (see [`cluster_ip`]); it is only used with
/// `announce: Service`.
pub fn render(spec: &ValkeyNodeSpec, cluster_ip: Option<&str>) -> Result<Rendered, ConfigError> {
    validate(spec)?;
    let announce_ip = match spec.template.announce {
        Announce::Service => match cluster_ip {
            Some(ip) => Some(ip),
            None => return Ok(Rendered::WaitingForEndpoint),
        },
        Announce::PodIP => None,
    };

    let (mut text, live) = user_directives(spec);
    text.push_str("\n# Operator-owned directives\n");
    let args = match spec.mode {
        Mode::Standalone | Mode::Cluster => push_server_owned(&mut text, spec, announce_ip),
        Mode::Sentinel => push_sentinel_owned(&mut text, spec, announce_ip),
    };
    let replication = spec
        .replication
        .as_ref()
        .map(|r| replication::render_context(r, announce_ip))
        .transpose()?;
    let cluster = (spec.mode == Mode::Cluster && spec.template.is_memory_only())
        .then(|| cluster_context::render(spec.cluster.as_ref(), announce_ip))
        .transpose()?;
    Ok(Rendered::Config(RenderedConfig {
        file_name: file_name(spec.mode),
        text,
        args,
        replication,
        cluster,
        live,
    }))
}

/// The file up to the operator-owned directives: the header, the defaults a server gets and
/// the user's directives. Beside it, for a gated topology data node, the live file (see
/// [`RenderedConfig::live`]), which takes the directives that change live.
fn user_directives(spec: &ValkeyNodeSpec) -> (String, Option<String>) {
    let mut text = String::from(HEADER);
    // A topology's data nodes: topology-controller sets their live directives. A hand-made
    // node has no parent to, and sentinels take no server directives.
    let data_member = spec.mode == Mode::Cluster || spec.replication.is_some();
    let split_live =
        spec.rollout_policy == RolloutPolicy::Gated && spec.mode != Mode::Sentinel && data_member;
    let is_live = |name: &str| split_live && live_config::is_live_everywhere(name);
    let mut live = String::from(LIVE_HEADER);
    if spec.mode != Mode::Sentinel {
        text.push_str("\n# Defaults (spec.config overrides them)\n");
        // A live default goes with the live directives: naming it in the spec later then
        // changes no revision.
        let memory_only = spec.template.is_memory_only();
        let defaults = SERVER_DEFAULTS
            .iter()
            .filter(|(name, _)| !(memory_only && MEMORY_ONLY_OWNED.contains(name)))
            .chain(MEMORY_ONLY_DEFAULTS.iter().filter(|_| memory_only));
        for (name, value) in defaults {
            if !spec.template.config.0.contains_key(*name) {
                match is_live(name) {
                    true => push(&mut live, name, value),
                    false => push(&mut text, name, value),
                }
            }
        }
    }
    if spec.template.config.0.keys().any(|n| !is_live(n)) {
        text.push_str("\n# User directives (spec.config)\n");
    }
    for (name, value) in &spec.template.config.0 {
        // validate() proved every value splits.
        let args = split_args(value).unwrap_or_default();
        match is_live(name) {
            true => push_line(&mut live, name, &args),
            false => push_line(&mut text, name, &args),
        }
    }
    if split_live {
        text.push_str("\n# User directives that change live (CONFIG SET by topology-controller)\n");
        push(&mut text, "include", &format!("{CONFIG_DIR}/{LIVE_FILE}"));
    }
    (text, split_live.then_some(live))
}

/// A data node's owned directives (Standalone or Cluster mode). Returns the arguments that
/// announce the pod IP when it is only known at runtime (`announce: PodIP`).
fn push_server_owned(
    text: &mut String,
    spec: &ValkeyNodeSpec,
    announce_ip: Option<&str>,
) -> Vec<String> {
    let tls = spec.tls.as_ref();
    for (name, value) in tls::listen(tls, ports::VALKEY, spec.serves_plain_text_beside_tls()) {
        push(text, name, &value);
    }
    push(text, "dir", DATA_DIR);
    push(text, "protected-mode", "no");
    if spec.template.is_memory_only() {
        push(text, "appendonly", "no");
        push_line(text, "save", &[]);
    }
    let (ip_directive, port_directive) = if spec.mode == Mode::Cluster {
        push(text, "cluster-enabled", "yes");
        push(text, "cluster-config-file", CLUSTER_CONFIG_FILE);
        push(text, "cluster-port", &ports::CLUSTER_BUS.to_string());
        push(
            text,
            "cluster-announce-bus-port",
            &ports::CLUSTER_BUS.to_string(),
        );
        (
            "cluster-announce-ip",
            tls::cluster_announce_port_directive(tls),
        )
    } else {
        ("replica-announce-ip", "replica-announce-port")
    };
    push(text, port_directive, &ports::VALKEY.to_string());
    let mut args = Vec::new();
    match announce_ip {
        Some(ip) => push(text, ip_directive, ip),
        None => args.extend([format!("--{ip_directive}"), format!("$({POD_IP_ENV})")]),
    }
    push_tls(text, tls, spec.mode);
    if auth_file_script(spec).is_some() {
        push(text, "include", AUTH_FILE);
    }
    if users_secret(spec).is_some() {
        push(text, "include", USERS_FILE);
    }
    args
}

/// A sentinel's owned directives; returns the arguments that announce the pod IP, as
/// [`push_server_owned`] does.
fn push_sentinel_owned(
    text: &mut String,
    spec: &ValkeyNodeSpec,
    announce_ip: Option<&str>,
) -> Vec<String> {
    let tls = spec.tls.as_ref();
    for (name, value) in tls::listen(tls, ports::SENTINEL, false) {
        push(text, name, &value);
    }
    push(text, "dir", DATA_DIR);
    push(text, "protected-mode", "no");
    push(text, "sentinel announce-port", &ports::SENTINEL.to_string());
    let mut args = Vec::new();
    match announce_ip {
        Some(ip) => push(text, "sentinel announce-ip", ip),
        None => args.extend([
            "--sentinel".to_string(),
            "announce-ip".to_string(),
            format!("$({POD_IP_ENV})"),
        ]),
    }
    push_tls(text, tls, spec.mode);
    text.push_str(
        "# 'sentinel monitor' and the rest of the monitoring state are written at runtime by\n\
         # topology-controller (SENTINEL MONITOR / SET) and persisted by Sentinel itself.\n",
    );
    args
}

/// The TLS directives, when the node has `spec.tls` (see [`tls::directives`]).
fn push_tls(text: &mut String, tls: Option<&Tls>, mode: Mode) {
    for (name, value) in tls.map(|t| tls::directives(t, mode)).unwrap_or_default() {
        push(text, name, &value);
    }
}

fn push(text: &mut String, name: &str, value: &str) {
    push_line(text, name, &[value.to_string()]);
}

fn push_line(text: &mut String, name: &str, args: &[String]) {
    text.push_str(name);
    if args.is_empty() {
        // `save ""`: an explicitly empty argument.
        text.push_str(" \"\"");
    }
    for arg in args {
        text.push(' ');
        text.push_str(&quote(arg));
    }
    text.push('\n');
}

fn is_name_word(w: &str) -> bool {
    !w.is_empty()
        && w.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

#[cfg(test)]
mod tests;
