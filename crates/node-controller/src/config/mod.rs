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
        for (name, value) in SERVER_DEFAULTS {
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
    text.push_str("\n# Operator-owned directives\n");

    let pod_ip = format!("$({POD_IP_ENV})");
    let mut args = Vec::new();
    let tls = spec.tls.as_ref();
    match spec.mode {
        Mode::Standalone | Mode::Cluster => {
            for (name, value) in
                tls::listen(tls, ports::VALKEY, spec.serves_plain_text_beside_tls())
            {
                push(&mut text, name, &value);
            }
            push(&mut text, "dir", DATA_DIR);
            push(&mut text, "protected-mode", "no");
            let (ip_directive, port_directive) = if spec.mode == Mode::Cluster {
                push(&mut text, "cluster-enabled", "yes");
                push(&mut text, "cluster-config-file", CLUSTER_CONFIG_FILE);
                push(&mut text, "cluster-port", &ports::CLUSTER_BUS.to_string());
                push(
                    &mut text,
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
            push(&mut text, port_directive, &ports::VALKEY.to_string());
            match announce_ip {
                Some(ip) => push(&mut text, ip_directive, ip),
                None => args.extend([format!("--{ip_directive}"), pod_ip]),
            }
            push_tls(&mut text, tls, spec.mode);
            if auth_file_script(spec).is_some() {
                push(&mut text, "include", AUTH_FILE);
            }
            if users_secret(spec).is_some() {
                push(&mut text, "include", USERS_FILE);
            }
        }
        Mode::Sentinel => {
            for (name, value) in tls::listen(tls, ports::SENTINEL, false) {
                push(&mut text, name, &value);
            }
            push(&mut text, "dir", DATA_DIR);
            push(&mut text, "protected-mode", "no");
            push(
                &mut text,
                "sentinel announce-port",
                &ports::SENTINEL.to_string(),
            );
            match announce_ip {
                Some(ip) => push(&mut text, "sentinel announce-ip", ip),
                None => args.extend(["--sentinel".to_string(), "announce-ip".to_string(), pod_ip]),
            }
            push_tls(&mut text, tls, spec.mode);
            text.push_str(
                "# 'sentinel monitor' and the rest of the monitoring state are written at runtime by\n\
                 # topology-controller (SENTINEL MONITOR / SET) and persisted by Sentinel itself.\n",
            );
        }
    }
    let replication = spec
        .replication
        .as_ref()
        .map(|r| replication::render_context(r, announce_ip))
        .transpose()?;
    Ok(Rendered::Config(RenderedConfig {
        file_name: file_name(spec.mode),
        text,
        args,
        replication,
        live: split_live.then_some(live),
    }))
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
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use crd_types::config::ValkeyConfig;
    use crd_types::template::{Auth, SecretKeyRef, TlsAuthClients};

    fn spec(mode: Mode, announce: Announce, config: &[(&str, &str)]) -> ValkeyNodeSpec {
        let mut spec = ValkeyNodeSpec {
            mode,
            ..Default::default()
        };
        spec.template.announce = announce;
        spec.template.config = ValkeyConfig(
            config
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
        );
        spec
    }

    fn config(r: Result<Rendered, ConfigError>) -> RenderedConfig {
        match r.expect("renders") {
            Rendered::Config(c) => c,
            Rendered::WaitingForEndpoint => panic!("waiting for endpoint"),
        }
    }

    /// The directive lines, comments and blank lines dropped.
    fn lines(text: &str) -> Vec<&str> {
        text.lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .collect()
    }

    #[test]
    fn a_gated_data_node_renders_live_directives_apart() {
        let mut s = spec(
            Mode::Cluster,
            Announce::PodIP,
            &[
                ("maxmemory", "1gb"),
                ("databases", "4"),
                ("io-threads", "2"),
            ],
        );
        s.rollout_policy = RolloutPolicy::Gated;
        let c = config(render(&s, None));
        let text = lines(&c.text);
        // Restart-only here, and io-threads is live only from 9.1 (the version is unknown).
        assert!(text.contains(&"databases 4"), "{text:?}");
        assert!(text.contains(&"io-threads 2"), "{text:?}");
        assert!(!c.text.contains("maxmemory"), "{}", c.text);
        assert!(text.contains(&"include /etc/valkey/live.conf"), "{text:?}");
        // The rendered default of a live directive is live too: adding one (the SIGTERM
        // default, say) to running members rolls none of them.
        assert!(!c.text.contains("shutdown-on-sigterm"), "{}", c.text);
        assert_eq!(
            lines(c.live.as_deref().unwrap()),
            [
                "repl-diskless-sync-delay 0",
                "shutdown-on-sigterm force",
                "maxmemory 1gb"
            ]
        );

        // A new live value changes only the live file, so the revision stays.
        let mut changed = s.clone();
        changed
            .template
            .config
            .0
            .insert("maxmemory".into(), "2gb".into());
        let c2 = config(render(&changed, None));
        assert_eq!(c2.text, c.text);
        assert_eq!(
            lines(c2.live.as_deref().unwrap()),
            [
                "repl-diskless-sync-delay 0",
                "shutdown-on-sigterm force",
                "maxmemory 2gb"
            ]
        );
        // So does naming a live default.
        changed
            .template
            .config
            .0
            .insert("repl-diskless-sync-delay".into(), "3".into());
        let c3 = config(render(&changed, None));
        assert_eq!(c3.text, c.text);
        assert_eq!(
            lines(c3.live.as_deref().unwrap()),
            [
                "shutdown-on-sigterm force",
                "maxmemory 2gb",
                "repl-diskless-sync-delay 3"
            ]
        );

        // Without live directives in the spec the file is still there (with the live
        // defaults), so adding one later restarts nothing either.
        let mut none = s.clone();
        none.template.config.0.remove("maxmemory");
        let c4 = config(render(&none, None));
        assert_eq!(c4.text, c.text);
        assert_eq!(
            lines(c4.live.as_deref().unwrap()),
            ["repl-diskless-sync-delay 0", "shutdown-on-sigterm force"]
        );
    }

    #[test]
    fn live_directives_stay_inline_where_nobody_sets_them_live() {
        // A hand-made node (Immediate) and a sentinel: no parent runs CONFIG SET on them.
        let s = spec(Mode::Standalone, Announce::PodIP, &[("maxmemory", "1gb")]);
        let c = config(render(&s, None));
        assert!(lines(&c.text).contains(&"maxmemory 1gb"));
        assert_eq!(c.live, None);
        assert!(!c.text.contains("live.conf"));
        let mut sentinel = spec(Mode::Sentinel, Announce::PodIP, &[]);
        sentinel.rollout_policy = RolloutPolicy::Gated;
        assert_eq!(config(render(&sentinel, None)).live, None);
        // Gated but no topology's member: nobody to set them.
        let mut gated = spec(Mode::Standalone, Announce::PodIP, &[("maxmemory", "1gb")]);
        gated.rollout_policy = RolloutPolicy::Gated;
        assert_eq!(config(render(&gated, None)).live, None);
        // A ValkeyReplication's data node is one.
        gated.replication = Some(crd_types::node::NodeReplication {
            primary_name: "cache".into(),
            ..Default::default()
        });
        let c = config(render(&gated, None));
        assert_eq!(
            lines(c.live.as_deref().unwrap()),
            [
                "repl-diskless-sync-delay 0",
                "shutdown-on-sigterm force",
                "maxmemory 1gb"
            ]
        );
    }

    #[test]
    fn live_directive_values_are_checked_by_kind() {
        let s = spec(
            Mode::Standalone,
            Announce::PodIP,
            &[("maxmemory", "lots"), ("timeout", "30")],
        );
        match render(&s, None) {
            Err(ConfigError::InvalidDirectives(problems)) => {
                assert_eq!(problems.len(), 1, "{problems:?}");
                assert_eq!(problems[0].0, "maxmemory");
                assert!(problems[0].1.contains("size in bytes"), "{}", problems[0].1);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn directives_the_image_version_does_not_know_are_refused() {
        let mut s = spec(
            Mode::Cluster,
            Announce::PodIP,
            &[("maxmemory", "1gb"), ("cluster-databases", "4")],
        );
        s.template.image = "valkey/valkey:8.1".into();
        let err = render(&s, None).unwrap_err();
        assert_eq!(err.reason(), ConfigValid::UnknownDirective);
        assert!(
            err.to_string().starts_with(
                "valkey/valkey:8.1 runs Valkey 8.1, which does not know cluster-databases"
            ),
            "{err}"
        );
        // The version that has it renders it; a tag naming no version is not judged.
        for image in ["valkey/valkey:9.1.2", "valkey/valkey:latest"] {
            s.template.image = image.into();
            let c = config(render(&s, None));
            assert!(lines(&c.text).contains(&"cluster-databases 4"), "{image}");
        }
        // A typo is refused on every measured version.
        s.template.image = "valkey/valkey:9.1".into();
        s.template.config.0.insert("maxmemroy".into(), "1gb".into());
        assert!(
            render(&s, None)
                .unwrap_err()
                .to_string()
                .contains("not know maxmemroy")
        );
    }

    #[test]
    fn standalone_with_service_announce() {
        let s = spec(
            Mode::Standalone,
            Announce::Service,
            &[("maxmemory", "1gb"), ("appendonly", "yes")],
        );
        let c = config(render(&s, Some("10.96.0.7")));
        assert_eq!(c.file_name, "valkey.conf");
        assert!(c.args.is_empty());
        assert_eq!(
            lines(&c.text),
            [
                // The user set appendonly, so only the other defaults are rendered.
                "appendfsync everysec",
                "repl-diskless-sync-delay 0",
                "shutdown-on-sigterm force",
                "appendonly yes",
                "maxmemory 1gb",
                "port 6379",
                "dir /data",
                "protected-mode no",
                "replica-announce-port 6379",
                "replica-announce-ip 10.96.0.7",
            ]
        );
    }

    fn with_auth(mode: Mode, password: bool, operator: bool) -> ValkeyNodeSpec {
        let secret = |name: &str| SecretKeyRef {
            name: name.into(),
            key: "password".into(),
        };
        let mut s = spec(mode, Announce::Service, &[]);
        s.auth = Some(Auth {
            password_secret_ref: password.then(|| secret("app")),
            operator_secret_ref: operator.then(|| secret("op")),
            ..Default::default()
        });
        s
    }

    #[test]
    fn data_node_passwords_are_in_neither_the_configmap_nor_the_arguments() {
        for (password, operator) in [(true, true), (true, false), (false, true)] {
            let c = config(render(
                &with_auth(Mode::Cluster, password, operator),
                Some("10.96.0.7"),
            ));
            assert!(c.args.is_empty(), "{:?}", c.args);
            assert!(!c.text.contains("pass"), "{}", c.text);
            assert!(lines(&c.text).contains(&"include /tmp/valkey-auth.conf"));
        }
        let c = config(render(
            &spec(Mode::Cluster, Announce::Service, &[]),
            Some("10.96.0.7"),
        ));
        assert!(!c.text.contains("include"), "no passwords, no include");
    }

    #[test]
    fn the_users_file_is_included_only_by_data_nodes_naming_a_users_secret() {
        let includes = |s: &ValkeyNodeSpec| {
            let c = config(render(s, Some("10.96.0.7")));
            lines(&c.text)
                .into_iter()
                .filter(|l| l.starts_with("include "))
                .map(String::from)
                .collect::<Vec<_>>()
        };
        for mode in [Mode::Standalone, Mode::Cluster] {
            let mut s = spec(mode, Announce::Service, &[]);
            assert_eq!(includes(&s), Vec::<String>::new());
            s.users_secret_name = Some("orders-users".into());
            // Without passwords too: there is no auth file, but there are users.
            assert_eq!(includes(&s), ["include /tmp/valkey-users.conf"]);
            let mut s = with_auth(mode, true, true);
            s.users_secret_name = Some("orders-users".into());
            assert_eq!(
                includes(&s),
                [
                    "include /tmp/valkey-auth.conf",
                    "include /tmp/valkey-users.conf"
                ]
            );
        }
        let mut sentinel = with_auth(Mode::Sentinel, true, true);
        sentinel.users_secret_name = Some("orders-users".into());
        assert_eq!(includes(&sentinel), Vec::<String>::new());
    }

    #[test]
    fn sentinels_get_no_password_from_their_config_or_arguments() {
        let c = config(render(
            &with_auth(Mode::Sentinel, true, true),
            Some("10.96.0.7"),
        ));
        // Their start-up shell writes them into the config copy (see sentinel_auth_script).
        assert!(c.args.is_empty(), "{:?}", c.args);
        assert!(!c.text.contains("pass"), "{}", c.text);
        assert!(!c.text.contains("include"), "{}", c.text);
    }

    #[test]
    fn pod_ip_announce_with_passwords() {
        let mut s = with_auth(Mode::Cluster, true, false);
        s.template.announce = Announce::PodIP;
        let c = config(render(&s, None));
        assert_eq!(c.args, ["--cluster-announce-ip", "$(POD_IP)"]);
        assert!(lines(&c.text).contains(&"include /tmp/valkey-auth.conf"));
    }

    #[test]
    fn durability_defaults_yield_to_the_user() {
        let defaults = config(render(
            &spec(Mode::Cluster, Announce::Service, &[]),
            Some("10.96.0.8"),
        ));
        assert!(lines(&defaults.text).starts_with(&["appendonly yes", "appendfsync everysec"]));
        let user = spec(Mode::Standalone, Announce::Service, &[("appendonly", "no")]);
        let user_text = config(render(&user, Some("10.96.0.8"))).text;
        let rendered: Vec<&str> = lines(&user_text)
            .into_iter()
            .filter(|l| l.starts_with("appendonly"))
            .collect();
        assert_eq!(rendered, ["appendonly no"]);
        let sentinel = config(render(
            &spec(Mode::Sentinel, Announce::Service, &[]),
            Some("10.96.0.8"),
        ));
        assert!(!sentinel.text.contains("appendonly"));
        // A SIGTERM stops a data node even while it writes its first AOF (see SERVER_DEFAULTS).
        assert!(lines(&defaults.text).contains(&"shutdown-on-sigterm force"));
        assert!(lines(&user_text).contains(&"shutdown-on-sigterm force"));
        assert!(!sentinel.text.contains("shutdown-on-sigterm"));
    }

    #[test]
    fn cluster_with_service_announce() {
        let s = spec(Mode::Cluster, Announce::Service, &[]);
        let c = config(render(&s, Some("10.96.0.8")));
        assert_eq!(
            lines(&c.text),
            [
                "appendonly yes",
                "appendfsync everysec",
                "repl-diskless-sync-delay 0",
                "shutdown-on-sigterm force",
                "port 6379",
                "dir /data",
                "protected-mode no",
                "cluster-enabled yes",
                "cluster-config-file /data/nodes.conf",
                "cluster-port 16379",
                "cluster-announce-bus-port 16379",
                "cluster-announce-port 6379",
                "cluster-announce-ip 10.96.0.8",
            ]
        );
        assert!(!c.text.contains("# User directives"));
    }

    #[test]
    fn pod_ip_announce_goes_to_the_command_line() {
        let c = config(render(&spec(Mode::Cluster, Announce::PodIP, &[]), None));
        assert_eq!(c.args, ["--cluster-announce-ip", "$(POD_IP)"]);
        assert!(!c.text.contains("announce-ip"));
        assert!(c.text.contains("cluster-announce-port 6379\n"));

        let c = config(render(&spec(Mode::Standalone, Announce::PodIP, &[]), None));
        assert_eq!(c.args, ["--replica-announce-ip", "$(POD_IP)"]);

        let c = config(render(&spec(Mode::Sentinel, Announce::PodIP, &[]), None));
        assert_eq!(c.args, ["--sentinel", "announce-ip", "$(POD_IP)"]);
    }

    #[test]
    fn pod_ip_announce_ignores_a_published_cluster_ip() {
        let c = config(render(
            &spec(Mode::Standalone, Announce::PodIP, &[]),
            Some("10.96.0.9"),
        ));
        assert!(!c.text.contains("10.96.0.9"));
    }

    #[test]
    fn service_announce_without_cluster_ip_waits() {
        for mode in [Mode::Standalone, Mode::Cluster, Mode::Sentinel] {
            assert_eq!(
                render(&spec(mode, Announce::Service, &[]), None),
                Ok(Rendered::WaitingForEndpoint)
            );
        }
    }

    #[test]
    fn cluster_ip_is_read_from_the_endpoint_status() {
        use crd_types::node::{EndpointStatus, ValkeyNodeStatus};
        let mut node = ValkeyNode::new("a", ValkeyNodeSpec::default());
        assert_eq!(cluster_ip(&node), None);
        node.status = Some(ValkeyNodeStatus {
            endpoint: Some(EndpointStatus {
                cluster_ip: Some("None".into()),
                ..Default::default()
            }),
            ..Default::default()
        });
        assert_eq!(cluster_ip(&node), None, "a headless Service has no address");
        node.status
            .as_mut()
            .unwrap()
            .endpoint
            .as_mut()
            .unwrap()
            .cluster_ip = Some("10.0.0.1".into());
        assert_eq!(cluster_ip(&node), Some("10.0.0.1"));
    }

    #[test]
    fn sentinel_config() {
        let s = spec(
            Mode::Sentinel,
            Announce::Service,
            &[("sentinel resolve-hostnames", "yes")],
        );
        let c = config(render(&s, Some("10.96.0.10")));
        assert_eq!(c.file_name, "sentinel.conf");
        assert_eq!(
            lines(&c.text),
            [
                "sentinel resolve-hostnames yes",
                "port 26379",
                "dir /data",
                "protected-mode no",
                "sentinel announce-port 26379",
                "sentinel announce-ip 10.96.0.10",
            ]
        );
        assert!(c.text.contains("sentinel monitor"), "leaves a note");
    }

    #[test]
    fn owned_directives_are_refused_in_any_case() {
        let s = spec(
            Mode::Standalone,
            Announce::Service,
            &[("Port", "7000"), ("maxmemory", "1gb"), ("DIR", "/tmp")],
        );
        let err = render(&s, Some("10.0.0.1")).unwrap_err();
        assert_eq!(
            err,
            ConfigError::OwnedDirectives(vec!["DIR".into(), "Port".into()])
        );
        assert_eq!(err.reason(), ConfigValid::OwnedDirective);
        assert!(err.to_string().contains("DIR, Port"), "{err}");
    }

    #[test]
    fn owned_directives_are_refused_before_waiting_for_the_endpoint() {
        let s = spec(
            Mode::Cluster,
            Announce::Service,
            &[("cluster-enabled", "no")],
        );
        assert!(matches!(
            render(&s, None),
            Err(ConfigError::OwnedDirectives(_))
        ));
    }

    #[test]
    fn sentinel_state_directives_are_owned() {
        let s = spec(
            Mode::Sentinel,
            Announce::PodIP,
            &[
                ("sentinel monitor", "m 1.2.3.4 6379 2"),
                ("SENTINEL myid", "x"),
            ],
        );
        assert_eq!(
            render(&s, None).unwrap_err(),
            ConfigError::OwnedDirectives(vec!["SENTINEL myid".into(), "sentinel monitor".into()])
        );
    }

    #[test]
    fn invalid_names_and_values_are_refused() {
        let s = spec(
            Mode::Standalone,
            Announce::PodIP,
            &[
                ("max memory", "1gb"),
                ("bad\nname", "x"),
                ("maxmemory-policy", "\"allkeys-lru"),
                ("timeout", "'0'x"),
                ("Hz", "10"),
                ("hz", "20"),
            ],
        );
        let err = render(&s, None).unwrap_err();
        assert_eq!(err.reason(), ConfigValid::InvalidDirective);
        let ConfigError::InvalidDirectives(problems) = err else {
            unreachable!()
        };
        let names: Vec<&str> = problems.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "bad\nname",
                "hz",
                "max memory",
                "maxmemory-policy",
                "timeout"
            ]
        );
    }

    #[test]
    fn values_are_split_like_valkey_conf_and_requoted() {
        let s = spec(
            Mode::Standalone,
            Announce::PodIP,
            &[
                ("client-output-buffer-limit", "normal 0 0 0"),
                ("save", ""),
                ("rename-command", "FLUSHALL \"\""),
                ("notify-keyspace-events", "'KEA'"),
                ("syslog-ident", "\"my \\\"valkey\\\"\""),
            ],
        );
        let c = config(render(&s, None));
        let l = lines(&c.text);
        // After the four defaults.
        assert_eq!(
            &l[4..9],
            [
                "client-output-buffer-limit normal 0 0 0",
                "notify-keyspace-events KEA",
                "rename-command FLUSHALL \"\"",
                "save \"\"",
                "syslog-ident \"my \\\"valkey\\\"\"",
            ]
        );
    }

    #[test]
    fn a_newline_in_a_value_cannot_inject_a_directive() {
        let s = spec(
            Mode::Standalone,
            Announce::PodIP,
            &[("save", "1gb\nport 7000")],
        );
        let c = config(render(&s, None));
        // Same line: Valkey refuses the extra arguments instead of changing the port.
        assert!(c.text.contains("save 1gb port 7000\n"));
        let s = spec(
            Mode::Standalone,
            Announce::PodIP,
            &[("save", "\"1gb\nport 7000\"")],
        );
        let c = config(render(&s, None));
        assert!(c.text.contains("save \"1gb\\nport 7000\"\n"));
        assert_eq!(
            lines(&c.text)
                .iter()
                .filter(|l| l.starts_with("port"))
                .count(),
            1
        );
    }

    #[test]
    fn rendering_is_deterministic() {
        let s = spec(Mode::Cluster, Announce::Service, &[("b", "2"), ("a", "1")]);
        assert_eq!(
            render(&s, Some("10.0.0.1")),
            render(&s.clone(), Some("10.0.0.1"))
        );
    }

    fn with_tls(mut s: ValkeyNodeSpec, auth_clients: TlsAuthClients) -> ValkeyNodeSpec {
        s.tls = Some(Tls {
            secret_name: "orders-tls".into(),
            auth_clients,
            plain_text_clients: false,
        });
        s
    }

    const TLS_FILES: [&str; 3] = [
        "tls-cert-file /etc/valkey-tls/tls.crt",
        "tls-key-file /etc/valkey-tls/tls.key",
        "tls-ca-cert-file /etc/valkey-tls/ca.crt",
    ];

    #[test]
    fn standalone_with_tls_serves_tls_only_on_the_same_port() {
        let s = with_tls(
            spec(Mode::Standalone, Announce::Service, &[]),
            TlsAuthClients::Never,
        );
        let c = config(render(&s, Some("10.96.0.7")));
        assert!(c.args.is_empty());
        let mut expected = vec![
            "appendonly yes",
            "appendfsync everysec",
            "repl-diskless-sync-delay 0",
            "shutdown-on-sigterm force",
            "port 0",
            "tls-port 6379",
            "dir /data",
            "protected-mode no",
            // The TLS port is 6379, so the announced port stays right.
            "replica-announce-port 6379",
            "replica-announce-ip 10.96.0.7",
        ];
        expected.extend(TLS_FILES);
        expected.extend(["tls-auth-clients no", "tls-replication yes"]);
        assert_eq!(lines(&c.text), expected);
    }

    #[test]
    fn a_cluster_member_with_tls_announces_its_tls_port() {
        let s = with_tls(
            spec(Mode::Cluster, Announce::Service, &[]),
            TlsAuthClients::Optional,
        );
        let c = config(render(&s, Some("10.96.0.8")));
        let mut expected = vec![
            "appendonly yes",
            "appendfsync everysec",
            "repl-diskless-sync-delay 0",
            "shutdown-on-sigterm force",
            "port 0",
            "tls-port 6379",
            "dir /data",
            "protected-mode no",
            "cluster-enabled yes",
            "cluster-config-file /data/nodes.conf",
            "cluster-port 16379",
            "cluster-announce-bus-port 16379",
            // CLUSTER NODES shows this one with tls-cluster; cluster-announce-port would
            // announce a plain-text port nobody listens on.
            "cluster-announce-tls-port 6379",
            "cluster-announce-ip 10.96.0.8",
        ];
        expected.extend(TLS_FILES);
        expected.extend([
            "tls-auth-clients optional",
            "tls-replication yes",
            "tls-cluster yes",
        ]);
        assert_eq!(lines(&c.text), expected);
        assert!(!c.text.contains("cluster-announce-port"), "{}", c.text);
    }

    #[test]
    fn plain_text_clients_open_port_6380_on_data_nodes_only() {
        let plain_beside = |mode| {
            let mut s = with_tls(spec(mode, Announce::Service, &[]), TlsAuthClients::Never);
            s.tls.as_mut().unwrap().plain_text_clients = true;
            lines(&config(render(&s, Some("10.96.0.8"))).text)
                .into_iter()
                .filter(|l| l.contains("port"))
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        // A cluster member announces 6380 as its plain-text `port` by default, 6379 as TLS.
        assert_eq!(
            plain_beside(Mode::Cluster),
            [
                "port 6380",
                "tls-port 6379",
                "cluster-port 16379",
                "cluster-announce-bus-port 16379",
                "cluster-announce-tls-port 6379",
            ]
        );
        assert_eq!(
            plain_beside(Mode::Standalone),
            ["port 6380", "tls-port 6379", "replica-announce-port 6379"]
        );
        // Sentinels name the TLS port and serve TLS alone.
        assert_eq!(
            plain_beside(Mode::Sentinel),
            ["port 0", "tls-port 26379", "sentinel announce-port 26379"]
        );
    }

    #[test]
    fn a_sentinel_with_tls_uses_it_to_data_nodes_and_sentinels() {
        let s = with_tls(
            spec(Mode::Sentinel, Announce::Service, &[]),
            TlsAuthClients::Required,
        );
        let c = config(render(&s, Some("10.96.0.10")));
        let mut expected = vec![
            "port 0",
            "tls-port 26379",
            "dir /data",
            "protected-mode no",
            "sentinel announce-port 26379",
            "sentinel announce-ip 10.96.0.10",
        ];
        expected.extend(TLS_FILES);
        expected.extend(["tls-auth-clients yes", "tls-replication yes"]);
        assert_eq!(lines(&c.text), expected);
        assert!(c.text.contains("sentinel monitor"), "still leaves its note");
    }

    #[test]
    fn tls_auth_clients_is_always_rendered() {
        // Valkey's own default is yes: leaving the line out would not mean No.
        for (auth_clients, line) in [
            (TlsAuthClients::Never, "tls-auth-clients no"),
            (TlsAuthClients::Optional, "tls-auth-clients optional"),
            (TlsAuthClients::Required, "tls-auth-clients yes"),
        ] {
            for mode in [Mode::Standalone, Mode::Cluster, Mode::Sentinel] {
                let s = with_tls(spec(mode, Announce::PodIP, &[]), auth_clients);
                let text = config(render(&s, None)).text;
                assert!(lines(&text).contains(&line), "{mode:?}: {text}");
            }
        }
    }

    #[test]
    fn tls_keeps_the_arguments_and_includes() {
        for (mode, args) in [
            (Mode::Standalone, vec!["--replica-announce-ip", "$(POD_IP)"]),
            (Mode::Cluster, vec!["--cluster-announce-ip", "$(POD_IP)"]),
            (
                Mode::Sentinel,
                vec!["--sentinel", "announce-ip", "$(POD_IP)"],
            ),
        ] {
            let s = with_tls(spec(mode, Announce::PodIP, &[]), TlsAuthClients::Never);
            assert_eq!(config(render(&s, None)).args, args);
        }
        let mut s = with_tls(with_auth(Mode::Cluster, true, true), TlsAuthClients::Never);
        s.users_secret_name = Some("orders-users".into());
        let text = config(render(&s, Some("10.96.0.7"))).text;
        let l = lines(&text);
        assert_eq!(
            l[l.len() - 2..],
            [
                "include /tmp/valkey-auth.conf",
                "include /tmp/valkey-users.conf"
            ]
        );
        assert!(l.contains(&"tls-cluster yes"));
    }

    #[test]
    fn without_tls_no_tls_line_is_rendered() {
        for mode in [Mode::Standalone, Mode::Cluster, Mode::Sentinel] {
            let text = config(render(
                &spec(mode, Announce::Service, &[]),
                Some("10.96.0.7"),
            ))
            .text;
            assert!(!text.contains("tls"), "{text}");
            assert!(!text.contains("port 0"), "{text}");
        }
    }
}
