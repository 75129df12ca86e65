//! What a kubelet derives from a pulled image: the command line, user, environment and
//! working directory of a container, and the pull policy.
//!
//! Pulling and unpacking live in the oci-image crate; this module is pure. The local special
//! cases come from pods sharing the host network here: a Valkey server or sentinel is told
//! to listen on its pod IP only ([`bind_args`]), and so is redis_exporter
//! ([`pin_exporter_listen_address`]).

use std::net::Ipv4Addr;
use std::path::Path;

use oci_image::{ImageConfig, PullError, PullPolicy};

/// The command line a container runs, as a kubelet builds it from the pod and the image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Argv {
    pub argv: Vec<String>,
    /// The process is (or execs into) valkey-server or valkey-sentinel.
    pub is_daemon: bool,
}

/// Kubernetes' rules: `command` replaces the image's Entrypoint (and drops its Cmd), `args`
/// replaces Cmd; the server's bind arguments are appended when the process is a server.
pub fn container_argv(
    config: &ImageConfig,
    command: &[String],
    args: &[String],
    pod_ip: Ipv4Addr,
) -> Result<Argv, String> {
    let mut argv: Vec<String> = if !command.is_empty() {
        command.iter().chain(args).cloned().collect()
    } else if !args.is_empty() {
        config.entrypoint.iter().chain(args).cloned().collect()
    } else {
        config
            .entrypoint
            .iter()
            .chain(&config.cmd)
            .cloned()
            .collect()
    };
    if argv.is_empty() {
        return Err(
            "no command specified: the pod sets none and the image has no Entrypoint or Cmd".into(),
        );
    }
    let is_daemon = runs_server(&argv);
    if is_daemon {
        argv.extend(bind_args(pod_ip));
    }
    Ok(Argv { argv, is_daemon })
}

fn base(arg: &str) -> &str {
    arg.rsplit('/').next().unwrap_or(arg)
}

fn is_server(arg: &str) -> bool {
    matches!(
        base(arg),
        "valkey-server" | "valkey-sentinel" | "redis-server" | "redis-sentinel"
    )
}

/// Whether `argv` ends up as a server: directly, through the image's entrypoint script
/// (which prepends valkey-server to options or a config file), or as
/// `sh -c '<checks>; exec "$0" "$@"' valkey-server <args>`.
fn runs_server(argv: &[String]) -> bool {
    let first = base(&argv[0]);
    if is_server(first) {
        return true;
    }
    if first == "docker-entrypoint.sh" {
        return argv
            .get(1)
            .is_some_and(|a| is_server(a) || a.starts_with('-') || a.ends_with(".conf"));
    }
    matches!(first, "sh" | "bash" | "dash")
        && argv.len() >= 4
        && argv[1] == "-c"
        && is_server(&argv[3])
}

/// A server listens on its pod IP only (pods share the host network here), and its outgoing
/// connections carry that IP so the service proxy can tell which pod a connection comes from.
fn bind_args(pod_ip: Ipv4Addr) -> [String; 4] {
    let ip = pod_ip.to_string();
    [
        "--bind".to_string(),
        ip.clone(),
        "--bind-source-addr".to_string(),
        ip,
    ]
}

/// redis_exporter listens on all addresses (`:9121`) by default, which here would collide
/// with the service proxy's sockets on the same port: pin its listen address to the pod IP,
/// keeping the port `REDIS_EXPORTER_WEB_LISTEN_ADDRESS` names. Other programs are left alone.
pub fn pin_exporter_listen_address(
    argv: &[String],
    env: &mut Vec<(String, String)>,
    pod_ip: Ipv4Addr,
) {
    const LISTEN: &str = "REDIS_EXPORTER_WEB_LISTEN_ADDRESS";
    if !argv
        .first()
        .is_some_and(|a| matches!(base(a), "redis_exporter" | "prometheus-redis-exporter"))
    {
        return;
    }
    let current = env.iter().position(|(k, _)| k == LISTEN);
    let port = current
        .and_then(|i| env[i].1.rsplit_once(':').map(|(_, p)| p.to_string()))
        .unwrap_or_else(|| "9121".into());
    let pinned = (LISTEN.to_string(), format!("{pod_ip}:{port}"));
    match current {
        Some(i) => env[i] = pinned,
        None => env.push(pinned),
    }
}

/// uid and gid from the image's `User` ("name", "uid", "uid:gid", "name:group"), names
/// looked up in the image's own /etc/passwd and /etc/group.
pub fn image_user(user: Option<&str>, rootfs: &Path) -> Result<(Option<u32>, Option<u32>), String> {
    let Some(user) = user.filter(|u| !u.is_empty()) else {
        return Ok((None, None));
    };
    let (u, g) = match user.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (user, None),
    };
    let passwd = std::fs::read_to_string(rootfs.join("etc/passwd")).unwrap_or_default();
    let (uid, primary_gid) = match u.parse::<u32>() {
        Ok(uid) => (
            uid,
            lookup(&passwd, |f| f[2] == u).and_then(|f| f[3].parse().ok()),
        ),
        Err(_) => {
            let f = lookup(&passwd, |f| f[0] == u)
                .ok_or_else(|| format!("image user {u:?} is not in the image's /etc/passwd"))?;
            (
                f[2].parse().map_err(|_| format!("bad uid for {u:?}"))?,
                f[3].parse().ok(),
            )
        }
    };
    let gid = match g {
        None => primary_gid,
        Some(g) => Some(match g.parse::<u32>() {
            Ok(gid) => gid,
            Err(_) => {
                let group = std::fs::read_to_string(rootfs.join("etc/group")).unwrap_or_default();
                lookup(&group, |f| f[0] == g)
                    .and_then(|f| f[2].parse().ok())
                    .ok_or_else(|| format!("image group {g:?} is not in the image's /etc/group"))?
            }
        }),
    };
    Ok((Some(uid), gid))
}

fn lookup(table: &str, pick: impl Fn(&[&str]) -> bool) -> Option<Vec<&str>> {
    table
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.len() >= 4 && pick(f))
}

/// The image's environment under the container's: a variable the pod sets wins.
pub fn merge_env(image_env: &[String], pod_env: Vec<(String, String)>) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = image_env
        .iter()
        .filter_map(|kv| kv.split_once('='))
        .filter(|(k, _)| !pod_env.iter().any(|(n, _)| n == k))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    out.extend(pod_env);
    out
}

/// The pod's imagePullPolicy; unset (the API server defaults it) follows the same rule.
pub fn pull_policy(policy: Option<&str>, image: &str) -> PullPolicy {
    match policy {
        Some("Always") => PullPolicy::Always,
        Some("Never") => PullPolicy::Never,
        Some("IfNotPresent") => PullPolicy::IfNotPresent,
        _ => {
            let name = image.split('@').next().unwrap_or(image);
            let tagged = name
                .rsplit('/')
                .next()
                .is_some_and(|last| last.contains(':'));
            if image.contains('@') || (tagged && !name.ends_with(":latest")) {
                PullPolicy::IfNotPresent
            } else {
                PullPolicy::Always
            }
        }
    }
}

/// The container's Waiting reason for a failed pull, as a kubelet names it.
pub fn pull_failure_reason(e: &PullError) -> &'static str {
    match e {
        PullError::InvalidName(_) => "InvalidImageName",
        PullError::NeverPull(_) => "ErrImageNeverPull",
        PullError::Pull(_) => "ErrImagePull",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    const IP: Ipv4Addr = Ipv4Addr::new(127, 64, 0, 5);

    fn valkey_image() -> ImageConfig {
        ImageConfig {
            entrypoint: s(&["docker-entrypoint.sh"]),
            cmd: s(&["valkey-server"]),
            env: s(&["PATH=/usr/local/bin:/usr/bin:/bin", "VALKEY_VERSION=8.1.4"]),
            working_dir: Some("/data".into()),
            ..Default::default()
        }
    }

    const BIND: [&str; 4] = ["--bind", "127.64.0.5", "--bind-source-addr", "127.64.0.5"];

    #[test]
    fn the_exporter_listens_on_its_pod_ip() {
        let mut env = vec![(
            "REDIS_EXPORTER_WEB_LISTEN_ADDRESS".to_string(),
            ":9200".to_string(),
        )];
        pin_exporter_listen_address(&s(&["/redis_exporter"]), &mut env, IP);
        assert_eq!(env[0].1, format!("{IP}:9200"));
        let mut env = Vec::new();
        pin_exporter_listen_address(&s(&["redis_exporter", "-debug"]), &mut env, IP);
        assert_eq!(
            env,
            [(
                "REDIS_EXPORTER_WEB_LISTEN_ADDRESS".to_string(),
                format!("{IP}:9121")
            )]
        );
        let mut env = Vec::new();
        pin_exporter_listen_address(&s(&["valkey-server"]), &mut env, IP);
        assert!(env.is_empty());
    }

    #[test]
    fn image_defaults_run_the_server_with_bind() {
        let a = container_argv(&valkey_image(), &[], &[], IP).unwrap();
        assert!(a.is_daemon);
        assert_eq!(a.argv[..2], s(&["docker-entrypoint.sh", "valkey-server"]));
        assert_eq!(a.argv[2..], s(&BIND));
    }

    #[test]
    fn args_replace_cmd_and_keep_the_entrypoint() {
        let a = container_argv(&valkey_image(), &[], &s(&["--port", "7000"]), IP).unwrap();
        assert_eq!(a.argv[..3], s(&["docker-entrypoint.sh", "--port", "7000"]));
        assert!(
            a.is_daemon,
            "the entrypoint prepends valkey-server to options"
        );
        let a = container_argv(&valkey_image(), &[], &s(&["valkey-cli", "ping"]), IP).unwrap();
        assert_eq!(a.argv, s(&["docker-entrypoint.sh", "valkey-cli", "ping"]));
        assert!(!a.is_daemon);
    }

    #[test]
    fn command_replaces_entrypoint_and_cmd() {
        let a = container_argv(&valkey_image(), &s(&["sleep"]), &s(&["5"]), IP).unwrap();
        assert_eq!(a.argv, s(&["sleep", "5"]));
        assert!(!a.is_daemon);
        let a = container_argv(
            &valkey_image(),
            &s(&["/usr/bin/valkey-sentinel", "/conf/s.conf"]),
            &[],
            IP,
        )
        .unwrap();
        assert!(a.is_daemon);
        assert_eq!(a.argv[2..], s(&BIND));
    }

    #[test]
    fn a_shell_that_becomes_the_server_gets_its_bind() {
        let script = "exec \"$0\" \"$@\"";
        let a = container_argv(
            &valkey_image(),
            &s(&["sh", "-c", script, "valkey-server"]),
            &s(&["/etc/valkey/valkey.conf"]),
            IP,
        )
        .unwrap();
        assert!(a.is_daemon);
        assert_eq!(
            a.argv[3..5],
            s(&["valkey-server", "/etc/valkey/valkey.conf"])
        );
        assert_eq!(a.argv[5..], s(&BIND));
        let a = container_argv(&valkey_image(), &s(&["sh", "-c", "cp a b"]), &[], IP).unwrap();
        assert!(!a.is_daemon);
        assert_eq!(a.argv, s(&["sh", "-c", "cp a b"]));
    }

    #[test]
    fn an_image_without_a_command_is_refused() {
        let err = container_argv(&ImageConfig::default(), &[], &[], IP).unwrap_err();
        assert!(err.contains("no command specified"), "{err}");
    }

    #[test]
    fn users_by_number_and_by_name() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("etc")).unwrap();
        std::fs::write(
            dir.path().join("etc/passwd"),
            "root:x:0:0:root:/root:/bin/sh\nvalkey:x:999:999::/data:/usr/sbin/nologin\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("etc/group"), "root:x:0:\nvalkey:x:999:\n").unwrap();
        let r = dir.path();
        assert_eq!(image_user(None, r), Ok((None, None)));
        assert_eq!(image_user(Some(""), r), Ok((None, None)));
        assert_eq!(image_user(Some("valkey"), r), Ok((Some(999), Some(999))));
        assert_eq!(image_user(Some("999"), r), Ok((Some(999), Some(999))));
        assert_eq!(
            image_user(Some("65532:65532"), r),
            Ok((Some(65532), Some(65532)))
        );
        assert_eq!(image_user(Some("1000"), r), Ok((Some(1000), None)));
        assert_eq!(image_user(Some("valkey:root"), r), Ok((Some(999), Some(0))));
        assert!(
            image_user(Some("nobody"), r)
                .unwrap_err()
                .contains("nobody")
        );
    }

    #[test]
    fn pod_env_wins_over_image_env() {
        let env = merge_env(
            &s(&["PATH=/usr/bin", "A=image", "EMPTY="]),
            vec![("A".into(), "pod".into()), ("B".into(), "pod".into())],
        );
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("PATH"), Some("/usr/bin"));
        assert_eq!(get("A"), Some("pod"));
        assert_eq!(get("B"), Some("pod"));
        assert_eq!(get("EMPTY"), Some(""));
        assert_eq!(env.iter().filter(|(k, _)| k == "A").count(), 1);
    }

    #[test]
    fn pull_policy_follows_the_api_defaults() {
        use PullPolicy::*;
        assert_eq!(pull_policy(Some("Never"), "a:1"), Never);
        assert_eq!(pull_policy(Some("Always"), "a:1"), Always);
        assert_eq!(pull_policy(None, "valkey/valkey:8.1"), IfNotPresent);
        assert_eq!(pull_policy(None, "valkey/valkey"), Always);
        assert_eq!(pull_policy(None, "valkey/valkey:latest"), Always);
        assert_eq!(pull_policy(None, "127.0.0.1:5000/valkey"), Always);
        assert_eq!(pull_policy(None, "valkey/valkey@sha256:00"), IfNotPresent);
    }
}
