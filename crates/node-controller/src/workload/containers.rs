//! The pod's containers: valkey (the server or Sentinel, started through a shell that checks
//! its passwords and writes its users when it has any), the Sentinel init container that
//! prepares its writable config, and the exporter sidecar.

use crd_types::ValkeyNode;
use crd_types::names::ports;
use crd_types::node::Mode;
use crd_types::template::{Exporter, TLS_DIR};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, SecurityContext, VolumeMount,
};

use super::layout::main_port;
use super::layout::{
    DATA_VOLUME, EXPORTER_AUTH_VOLUME, OPERATOR_PASSWORD_VOLUME, TLS_VOLUME, TMP_VOLUME,
    USERS_VOLUME, operator_secret,
};
use super::{env, lifecycle, probes, scripts};
use crate::config::{
    CONFIG_DIR, DATA_DIR, EXPORTER_AUTH_DIR, OPERATOR_PASSWORD_DIR, OPERATOR_PASSWORD_ENV,
    PASSWORD_ENV, RenderedConfig, SENTINEL_CONFIG_FILE, USERS_DIR, exporter_logs_in_as_monitoring,
    exporter_password_file_script, users_secret,
};
use crate::configmap::CONFIG_VOLUME;

pub use crd_types::names::VALKEY_CONTAINER;
pub const EXPORTER_CONTAINER: &str = "exporter";
/// Sentinel mode: copies sentinel.conf to /data before Sentinel starts.
pub const SENTINEL_INIT_CONTAINER: &str = "sentinel-config";
/// Next to an exporter on a data node with passwords: writes the monitoring user's
/// password file before the exporter starts (it exits when the file is missing).
pub const EXPORTER_AUTH_INIT_CONTAINER: &str = "exporter-auth";

fn container_port(name: &str, port: i32) -> ContainerPort {
    ContainerPort {
        name: Some(name.into()),
        container_port: port,
        protocol: Some("TCP".into()),
        ..Default::default()
    }
}

/// Every container's security context: the restricted Pod Security Standard, read-only root.
pub(super) fn restricted() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            add: None,
            drop: Some(vec!["ALL".into()]),
        }),
        read_only_root_filesystem: Some(true),
        run_as_non_root: Some(true),
        ..Default::default()
    }
}

fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: read_only.then_some(true),
        ..Default::default()
    }
}

/// The TLS Secret, read-only, for a container that serves or dials the node (see
/// [`super::pod`]'s `tls` volume); `None` without `spec.tls`.
fn tls_mount(node: &ValkeyNode) -> Option<VolumeMount> {
    node.spec
        .tls
        .as_ref()
        .map(|_| mount(TLS_VOLUME, TLS_DIR, true))
}

pub(super) fn valkey_container(node: &ValkeyNode, rendered: &RenderedConfig) -> Container {
    let t = &node.spec.template;
    let mode = node.spec.mode;
    let (port, port_name) = main_port(mode);
    let mut container_ports = vec![container_port(port_name, port)];
    if node.spec.serves_plain_text_beside_tls() {
        container_ports.push(container_port(
            ports::VALKEY_PLAIN_NAME,
            ports::VALKEY_PLAIN,
        ));
    }
    if mode == Mode::Cluster {
        container_ports.push(container_port(ports::CLUSTER_BUS_NAME, ports::CLUSTER_BUS));
    }
    let (program, config_path) = match mode {
        Mode::Sentinel => (
            "valkey-sentinel",
            format!("{DATA_DIR}/{}", rendered.file_name),
        ),
        Mode::Standalone | Mode::Cluster => (
            "valkey-server",
            format!("{CONFIG_DIR}/{}", rendered.file_name),
        ),
    };
    let mut args = vec![config_path];
    args.extend(rendered.args.iter().cloned());

    let mut mounts = Vec::new();
    if mode != Mode::Sentinel {
        mounts.push(mount(CONFIG_VOLUME, CONFIG_DIR, true));
    }
    mounts.push(mount(DATA_VOLUME, DATA_DIR, false));
    mounts.push(mount(TMP_VOLUME, "/tmp", false));
    if users_secret(&node.spec).is_some() {
        mounts.push(mount(USERS_VOLUME, USERS_DIR, true));
    }
    mounts.extend(tls_mount(node));
    // For the preStop hooks, which may run after the password was rotated.
    if operator_secret(node).is_some() {
        mounts.push(mount(OPERATOR_PASSWORD_VOLUME, OPERATOR_PASSWORD_DIR, true));
    }
    // The monitoring password the exporter has, for a server restarted after a rotation.
    if exporter_logs_in_as_monitoring(&node.spec) {
        mounts.push(mount(EXPORTER_AUTH_VOLUME, EXPORTER_AUTH_DIR, true));
    }

    Container {
        name: VALKEY_CONTAINER.into(),
        image: Some(t.image.clone()),
        image_pull_policy: t.image_pull_policy.clone(),
        command: Some(server_command(node, program)),
        args: Some(args),
        ports: Some(container_ports),
        env: Some(env::valkey_env(node)),
        volume_mounts: Some(mounts),
        resources: t.resources.clone(),
        security_context: Some(restricted()),
        startup_probe: Some(probes::startup(port_name)),
        liveness_probe: Some(probes::liveness(port_name)),
        readiness_probe: Some(probes::readiness(&node.spec)),
        lifecycle: lifecycle::valkey_lifecycle(mode, node.spec.replication.is_some()),
        // Valkey logs to stdout; a crash shows its last lines in the pod status.
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Default::default()
    }
}

/// The server's command. With passwords, a shell first refuses an empty one (or `-`, which
/// valkey-server would read as "config from stdin"): Valkey takes an empty `requirepass` as
/// no password at all, so a blank Secret must stop the start, loudly, rather than serve
/// everyone. It then writes the users: a data node's to its auth file, a sentinel's into its
/// config copy (see [`crate::config::sentinel_auth_script`]); those of a data node's users
/// Secret to its users file (see [`crate::config::users_file_script`]); a replication data
/// node's shell decides its role, see [`scripts`]; a cluster member's repairs the replicas'
/// shard ids in its nodes.conf (see [`crate::config::shard_id_repair_script`]); a TLS node's
/// adds the certificate reload where the server has it (see
/// [`crate::config::tls::auto_reload_script`]). `exec`
/// keeps the server the container's process; `$0` is the program.
fn server_command(node: &ValkeyNode, program: &str) -> Vec<String> {
    let mut checks = Vec::new();
    if let Some(auth) = &node.spec.auth {
        for (set, var, field) in [
            (
                auth.password_secret_ref.is_some(),
                PASSWORD_ENV,
                "passwordSecretRef",
            ),
            (
                auth.operator_secret_ref.is_some(),
                OPERATOR_PASSWORD_ENV,
                "operatorSecretRef",
            ),
        ] {
            if set {
                checks.push(format!(
                    "case \"${{{var}-}}\" in ''|-) echo \"the password from auth.{field} is empty (or '-'): refusing to start without one\" >&2; exit 1;;\n  *'\n'*) echo \"the password from auth.{field} has a line break, which no Valkey config line can hold: refusing to start\" >&2; exit 1;; esac"
                ));
            }
        }
    }
    if let Some(script) = crate::config::auth_file_script(&node.spec) {
        checks.push(script);
    }
    if let Some(script) = crate::config::users_file_script(&node.spec) {
        checks.push(script);
    }
    let sentinel_config = format!("{DATA_DIR}/{SENTINEL_CONFIG_FILE}");
    if let Some(script) = crate::config::sentinel_auth_script(&node.spec, &sentinel_config) {
        checks.push(script);
    }
    let memory_only = node.spec.template.is_memory_only();
    if node.spec.replication.is_some() && node.spec.mode != Mode::Sentinel {
        checks.push(match memory_only {
            true => scripts::memory_only_data_role(),
            false => scripts::data_role(),
        });
    }
    if node.spec.mode == Mode::Cluster {
        if memory_only {
            checks.push(super::memory_only::cluster_start());
        }
        checks.push(crate::config::shard_id_repair_script());
    }
    if node.spec.tls.is_some() {
        checks.push(crate::config::tls::auto_reload_script());
    }
    if checks.is_empty() {
        return vec![program.into()];
    }
    checks.push("exec \"$0\" \"$@\"".into());
    vec!["sh".into(), "-c".into(), checks.join("\n"), program.into()]
}

pub(super) fn sentinel_init_container(node: &ValkeyNode) -> Container {
    let t = &node.spec.template;
    Container {
        name: SENTINEL_INIT_CONTAINER.into(),
        image: Some(t.image.clone()),
        image_pull_policy: t.image_pull_policy.clone(),
        command: Some(vec!["sh".into(), "-c".into(), scripts::sentinel_init()]),
        // The operator's password (asking the other sentinels) and the pod IP (its own
        // address with `announce: PodIP`).
        env: Some(env::valkey_env(node)),
        // With TLS, the certificate it asks the other sentinels with.
        volume_mounts: Some(
            [
                mount(CONFIG_VOLUME, CONFIG_DIR, true),
                mount(DATA_VOLUME, DATA_DIR, false),
            ]
            .into_iter()
            .chain(tls_mount(node))
            .collect(),
        ),
        resources: t.resources.clone(),
        security_context: Some(restricted()),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Default::default()
    }
}

/// The `exporter-auth` init container (see [`EXPORTER_AUTH_INIT_CONTAINER`]): the Valkey
/// image's shell derives the password from the node's, as the server's start script does.
pub(super) fn exporter_auth_init_container(node: &ValkeyNode) -> Option<Container> {
    let script = exporter_password_file_script(&node.spec)?;
    let t = &node.spec.template;
    Some(Container {
        name: EXPORTER_AUTH_INIT_CONTAINER.into(),
        image: Some(t.image.clone()),
        image_pull_policy: t.image_pull_policy.clone(),
        command: Some(vec!["sh".into(), "-c".into(), script]),
        env: Some(env::valkey_env(node)),
        volume_mounts: Some(vec![mount(EXPORTER_AUTH_VOLUME, EXPORTER_AUTH_DIR, false)]),
        resources: t.resources.clone(),
        security_context: Some(restricted()),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Default::default()
    })
}

pub(super) fn exporter_container(node: &ValkeyNode, exporter: &Exporter) -> Container {
    // The certificate and its key only where the node asks clients for one: the exporter is
    // a third party's image, and the key would let it join the cluster bus.
    let certificate = crate::config::tls::exporter_presents_certificate(node.spec.tls.as_ref());
    let mounts: Vec<_> = exporter_logs_in_as_monitoring(&node.spec)
        .then(|| mount(EXPORTER_AUTH_VOLUME, EXPORTER_AUTH_DIR, true))
        .into_iter()
        .chain(tls_mount(node).filter(|_| certificate))
        .collect();
    let mounts = (!mounts.is_empty()).then_some(mounts);
    Container {
        name: EXPORTER_CONTAINER.into(),
        image: Some(exporter.image.clone()),
        ports: Some(vec![container_port(ports::METRICS_NAME, exporter.port)]),
        env: Some(env::exporter_env(node, exporter)),
        volume_mounts: mounts,
        resources: exporter.resources.clone(),
        security_context: Some(restricted()),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crd_types::template::{Announce, Auth};

    use crate::workload::fixtures::{build, container, node, pod, port_names, secret};

    #[test]
    fn ports_follow_the_contract() {
        let name = |s: &str, p: i32| (s.to_string(), p);
        let d = build(&node(Mode::Standalone, |_| {}));
        assert_eq!(port_names(container(&d, "valkey")), [name("valkey", 6379)]);
        let d = build(&node(Mode::Cluster, |_| {}));
        assert_eq!(
            port_names(container(&d, "valkey")),
            [name("valkey", 6379), name("cluster-bus", 16379)]
        );
        let d = build(&node(Mode::Sentinel, |_| {}));
        assert_eq!(
            port_names(container(&d, "valkey")),
            [name("sentinel", 26379)]
        );
        // A TLS data node may serve plain-text clients beside; a sentinel never does.
        let plain_beside = |mode| {
            let d = build(&node(mode, |s| {
                s.tls = Some(crd_types::template::Tls {
                    secret_name: "t".into(),
                    auth_clients: Default::default(),
                    plain_text_clients: true,
                });
            }));
            port_names(container(&d, "valkey"))
        };
        assert_eq!(
            plain_beside(Mode::Cluster),
            [
                name("valkey", 6379),
                name("valkey-plain", 6380),
                name("cluster-bus", 16379)
            ]
        );
        assert_eq!(plain_beside(Mode::Sentinel), [name("sentinel", 26379)]);
    }

    #[test]
    fn server_command_and_config_mount() {
        let d = build(&node(Mode::Cluster, |_| {}));
        let c = container(&d, "valkey");
        // Even without passwords a cluster member's shell repairs its nodes.conf first.
        let repair_then_start = format!(
            "{}\nexec \"$0\" \"$@\"",
            crate::config::shard_id_repair_script()
        );
        assert_eq!(
            c.command.as_deref(),
            Some(
                &[
                    "sh".into(),
                    "-c".into(),
                    repair_then_start,
                    "valkey-server".into()
                ][..]
            )
        );
        assert_eq!(
            c.args.as_deref(),
            Some(&["/etc/valkey/valkey.conf".to_string()][..])
        );
        let config = pod(&d)
            .volumes
            .as_ref()
            .unwrap()
            .iter()
            .find(|v| v.name == "config")
            .unwrap();
        let cm = config.config_map.as_ref().unwrap();
        assert_eq!(cm.name, "cache-config");
        let item = &cm.items.as_ref().unwrap()[0];
        assert_eq!(item.key, d.config_key);
        assert_eq!(item.path, "valkey.conf");
        let mounts = c.volume_mounts.as_ref().unwrap();
        assert!(mounts.iter().any(|m| m.name == "config"
            && m.mount_path == "/etc/valkey"
            && m.read_only == Some(true)));
        assert!(
            mounts
                .iter()
                .any(|m| m.name == "data" && m.mount_path == "/data")
        );
        assert!(
            mounts
                .iter()
                .any(|m| m.name == "tmp" && m.mount_path == "/tmp")
        );
    }

    #[test]
    fn pod_ip_announce_expands_in_args() {
        let d = build(&node(Mode::Standalone, |s| {
            s.template.announce = Announce::PodIP
        }));
        let c = container(&d, "valkey");
        assert_eq!(
            c.args.as_ref().unwrap(),
            &[
                "/etc/valkey/valkey.conf",
                "--replica-announce-ip",
                "$(POD_IP)"
            ]
        );
        let env = c.env.as_ref().unwrap();
        let pod_ip = env.iter().find(|e| e.name == "POD_IP").unwrap();
        assert_eq!(
            pod_ip
                .value_from
                .as_ref()
                .unwrap()
                .field_ref
                .as_ref()
                .unwrap()
                .field_path,
            "status.podIP"
        );
        let names: Vec<_> = env.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["POD_IP", "POD_NAME", "POD_NAMESPACE"]);
    }

    #[test]
    fn sentinel_runs_from_a_writable_copy() {
        let d = build(&node(Mode::Sentinel, |s| {
            s.template.announce = Announce::PodIP
        }));
        let c = container(&d, "valkey");
        assert_eq!(
            c.command.as_deref(),
            Some(&["valkey-sentinel".to_string()][..])
        );
        assert_eq!(
            c.args.as_ref().unwrap(),
            &[
                "/data/sentinel.conf",
                "--sentinel",
                "announce-ip",
                "$(POD_IP)"
            ]
        );
        assert!(
            c.volume_mounts
                .as_ref()
                .unwrap()
                .iter()
                .all(|m| m.name != "config")
        );
        let init = &pod(&d).init_containers.as_ref().unwrap()[0];
        assert_eq!(init.name, SENTINEL_INIT_CONTAINER);
        assert_eq!(init.command.as_ref().unwrap()[2], scripts::sentinel_init());
        assert_eq!(
            init.image.as_deref(),
            Some(crd_types::template::DEFAULT_IMAGE)
        );
        let script = &init.command.as_ref().unwrap()[2];
        assert!(script.contains("cat /etc/valkey/sentinel.conf > \"$new\""));
        assert!(script.contains("mv \"$new\" /data/sentinel.conf"));
        assert_eq!(init.security_context, Some(restricted()));
        let cm = pod(&d).volumes.as_ref().unwrap()[0]
            .config_map
            .clone()
            .unwrap();
        assert_eq!(cm.items.unwrap()[0].path, "sentinel.conf");
    }

    #[test]
    fn exporter_sidecar() {
        let d = build(&node(Mode::Standalone, |_| {}));
        assert_eq!(pod(&d).containers.len(), 1);
        let d = build(&node(Mode::Cluster, |s| {
            s.template.exporter = Some(Exporter {
                image: "oliver006/redis_exporter:v1.86.0".into(),
                port: 9200,
                resources: None,
            })
        }));
        let e = container(&d, "exporter");
        assert_eq!(e.image.as_deref(), Some("oliver006/redis_exporter:v1.86.0"));
        assert_eq!(port_names(e), [("metrics".to_string(), 9200)]);
        let env: Vec<_> = e
            .env
            .iter()
            .flatten()
            .map(|v| (v.name.as_str(), v.value.as_deref()))
            .collect();
        assert_eq!(
            env,
            [
                ("POD_IP", None),
                ("REDIS_ADDR", Some("redis://$(POD_IP):6379")),
                ("REDIS_EXPORTER_DISABLE_SCRAPE_ENDPOINT", Some("true")),
                ("REDIS_EXPORTER_WEB_LISTEN_ADDRESS", Some(":9200")),
            ]
        );
        assert_eq!(e.security_context, Some(restricted()));
        // Without passwords there is no monitoring user to log in as.
        assert_eq!(pod(&d).init_containers, None);
        assert_eq!(e.volume_mounts, None);
    }

    #[test]
    fn a_node_with_users_but_no_passwords_writes_its_users_file_before_the_server() {
        let d = build(&node(Mode::Standalone, |s| {
            s.users_secret_name = Some("orders-users".into())
        }));
        let command = container(&d, "valkey").command.clone().unwrap();
        assert_eq!(command[..2], ["sh", "-c"]);
        assert_eq!(command[3], "valkey-server", "$0 is the program");
        let dir = tempfile::tempdir().unwrap();
        let (source, file) = (dir.path().join("users.acl"), dir.path().join("users.conf"));
        std::fs::write(&source, "user app on #00 +get\nuser default on nopass\n").unwrap();
        let script = command[2]
            .replace("/etc/valkey-users/users.acl", source.to_str().unwrap())
            .replace(crate::config::USERS_FILE, file.to_str().unwrap());
        let out = std::process::Command::new("sh")
            .args(["-c", &script, "echo", "started"])
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "started\n");
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            "user app on #00 +get\n"
        );
    }

    #[test]
    fn an_empty_password_stops_the_start() {
        let d = build(&node(Mode::Cluster, |s| {
            s.auth = Some(Auth {
                password_secret_ref: Some(secret("app")),
                operator_secret_ref: Some(secret("op")),
                ..Default::default()
            });
        }));
        let command = container(&d, "valkey").command.clone().unwrap();
        assert_eq!(command[..2], ["sh", "-c"]);
        assert_eq!(command[3], "valkey-server", "$0 is the program");
        // The auth file goes to a scratch directory, not the host's /tmp.
        let dir = tempfile::tempdir().unwrap();
        let script = command[2]
            .replace(
                crate::config::AUTH_FILE,
                dir.path().join("auth.conf").to_str().unwrap(),
            )
            .replace(
                crate::config::CLUSTER_CONFIG_FILE,
                dir.path().join("nodes.conf").to_str().unwrap(),
            );
        let run = |env: &[(&str, &str)]| {
            let out = std::process::Command::new("sh")
                .args(["-c", &script, "echo"])
                .arg("started")
                .env_clear()
                .envs(env.iter().copied())
                .output()
                .unwrap();
            (
                out.status.success(),
                String::from_utf8_lossy(&out.stdout).trim().to_string(),
                String::from_utf8_lossy(&out.stderr).to_string(),
            )
        };
        let ok = [
            ("REDISCLI_AUTH", "a b"),
            ("VALKEY_OPERATOR_PASSWORD", "--x"),
        ];
        assert_eq!(run(&ok).1, "started");
        for bad in [
            vec![("REDISCLI_AUTH", ""), ("VALKEY_OPERATOR_PASSWORD", "x")],
            vec![("REDISCLI_AUTH", "x"), ("VALKEY_OPERATOR_PASSWORD", "-")],
            vec![("REDISCLI_AUTH", "x")],
        ] {
            let (success, stdout, stderr) = run(&bad);
            assert!(!success && stdout.is_empty(), "{bad:?}");
            assert!(stderr.contains("refusing to start"), "{stderr}");
        }
        // Without auth a standalone server is started directly.
        let plain = build(&node(Mode::Standalone, |_| {}));
        assert_eq!(
            container(&plain, "valkey").command.as_deref(),
            Some(&["valkey-server".to_string()][..])
        );
    }
}
