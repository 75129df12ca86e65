//! Maps container images to binaries installed on the host.
//!
//! There is no container runtime: a pod's container is a host binary run in a
//! private mount namespace. Only images we know how to emulate are accepted;
//! anything else stays Waiting so tests never see a fake Running container.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// Image repositories the agent can run.
pub const KNOWN_IMAGES: &[&str] = &["valkey/valkey"];

/// Binaries shipped by the valkey image (the image also has redis-* symlinks).
const VALKEY_TOOLS: &[&str] = &[
    "valkey-server",
    "valkey-sentinel",
    "valkey-cli",
    "valkey-benchmark",
    "valkey-check-aof",
    "valkey-check-rdb",
];

/// Host tools a test may use as a container command by bare name.
const SHELL_TOOLS: &[&str] = &[
    "sh", "bash", "cat", "sleep", "echo", "true", "false", "env", "ls", "mkdir", "cp", "mv", "rm",
    "touch", "chmod", "chown", "grep", "sed", "awk", "test", "date", "tail", "head", "timeout",
    "kill", "hostname", "id", "printf", "wc", "sort", "tee", "stat", "df", "du", "ps", "pwd",
];

const HOST_PATH: &[&str] = &["/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin"];

/// A container command resolved to a host program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapped {
    /// Absolute path of the program, valid both on the host and in the container root.
    pub program: PathBuf,
    /// Full argv, argv[0] as the pod spec spelled it.
    pub argv: Vec<String>,
    /// valkey-server / valkey-sentinel: the daemon gets the pod IP as bind address.
    pub is_daemon: bool,
}

/// Why a container cannot start; becomes its Waiting reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapFailure {
    pub reason: &'static str,
    pub message: String,
}

/// Repository part of an image reference: no registry host, tag or digest.
pub fn image_repository(image: &str) -> String {
    let no_digest = image.split('@').next().unwrap_or(image);
    // A tag is a ':' after the last '/'; a ':' before it belongs to a registry port.
    let no_tag = match no_digest.rfind(':') {
        Some(i) if !no_digest[i..].contains('/') => &no_digest[..i],
        _ => no_digest,
    };
    let mut parts: Vec<&str> = no_tag.split('/').collect();
    if parts.len() > 1 {
        let first = parts[0];
        if first.contains('.') || first.contains(':') || first == "localhost" {
            parts.remove(0);
        }
    }
    if parts.len() == 2 && parts[0] == "library" {
        parts.remove(0);
    }
    parts.join("/")
}

pub struct ImageMapper {
    bin_dir: PathBuf,
    warned_fallback: AtomicBool,
}

impl ImageMapper {
    pub fn new(bin_dir: PathBuf) -> Self {
        Self {
            bin_dir,
            warned_fallback: AtomicBool::new(false),
        }
    }

    pub fn bin_dir(&self) -> &Path {
        &self.bin_dir
    }

    /// Resolves a container to a host program using the real filesystem.
    pub fn map(
        &self,
        image: &str,
        command: &[String],
        args: &[String],
        pod_ip: Ipv4Addr,
    ) -> Result<Mapped, MapFailure> {
        let mapped = map_container(&self.bin_dir, image, command, args, pod_ip, &|p| {
            p.is_file()
        })?;
        if mapped
            .program
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("redis-"))
            && !self.warned_fallback.swap(true, Ordering::Relaxed)
        {
            tracing::warn!(
                bin_dir = %self.bin_dir.display(),
                "valkey binaries not found, falling back to redis-* binaries"
            );
        }
        Ok(mapped)
    }
}

/// The command line the image would run: `command` overrides the entrypoint;
/// otherwise the official image's entrypoint prepends `valkey-server` when the
/// first argument is an option or a config file, and runs args as-is otherwise.
pub fn effective_argv(command: &[String], args: &[String]) -> Vec<String> {
    if !command.is_empty() {
        return command.iter().chain(args).cloned().collect();
    }
    match args.first() {
        None => vec!["valkey-server".to_string()],
        Some(first) if first.starts_with('-') || first.ends_with(".conf") => {
            std::iter::once("valkey-server".to_string())
                .chain(args.iter().cloned())
                .collect()
        }
        Some(_) => args.to_vec(),
    }
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

/// Pure mapping logic; `exists` tells whether a host file exists.
pub fn map_container(
    bin_dir: &Path,
    image: &str,
    command: &[String],
    args: &[String],
    pod_ip: Ipv4Addr,
    exists: &dyn Fn(&Path) -> bool,
) -> Result<Mapped, MapFailure> {
    let repo = image_repository(image);
    if !KNOWN_IMAGES.contains(&repo.as_str()) {
        return Err(MapFailure {
            reason: "ImageNotMapped",
            message: format!(
                "image {image:?} has no local binary in the node agent (known images: {})",
                KNOWN_IMAGES.join(", ")
            ),
        });
    }
    let mut argv = effective_argv(command, args);
    let first = argv[0].clone();
    let base = first.rsplit('/').next().unwrap_or(&first).to_string();
    // The image ships redis-* as aliases of the valkey tools.
    let tool = match base.strip_prefix("redis-") {
        Some(rest) => format!("valkey-{rest}"),
        None => base.clone(),
    };
    if VALKEY_TOOLS.contains(&tool.as_str()) {
        let valkey = bin_dir.join(&tool);
        let redis = bin_dir.join(tool.replacen("valkey-", "redis-", 1));
        let program = if exists(&valkey) {
            valkey
        } else if exists(&redis) {
            redis
        } else {
            return Err(MapFailure {
                reason: "BinaryNotFound",
                message: format!(
                    "neither {} nor {} exists on the node (install valkey, see e2e/setup-valkey.sh)",
                    valkey.display(),
                    redis.display()
                ),
            });
        };
        let is_daemon = tool == "valkey-server" || tool == "valkey-sentinel";
        if is_daemon {
            argv.extend(bind_args(pod_ip));
        }
        return Ok(Mapped {
            program,
            argv,
            is_daemon,
        });
    }
    if first.starts_with('/') {
        let p = PathBuf::from(&first);
        if exists(&p) {
            return Ok(Mapped {
                program: p,
                argv,
                is_daemon: false,
            });
        }
    } else if SHELL_TOOLS.contains(&first.as_str())
        && let Some(p) = HOST_PATH
            .iter()
            .map(|d| Path::new(d).join(&first))
            .find(|p| exists(p))
    {
        // `sh -c '<checks>; exec "$0" "$@"' valkey-server <args>`: a shell that ends by
        // becoming the server gets the server's bind arguments after its own.
        let wraps_daemon = argv.len() >= 4
            && argv[1] == "-c"
            && ["valkey-server", "valkey-sentinel"]
                .contains(&argv[3].rsplit('/').next().unwrap_or_default());
        if wraps_daemon {
            argv.extend(bind_args(pod_ip));
        }
        return Ok(Mapped {
            program: p,
            argv,
            is_daemon: wraps_daemon,
        });
    }
    Err(MapFailure {
        reason: "CommandNotMapped",
        message: format!(
            "command {first:?} of image {image:?} has no local binary in the node agent \
             (valkey tools, host paths and common shell tools are supported)"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    const IP: Ipv4Addr = Ipv4Addr::new(127, 64, 0, 5);

    fn all_exist(_: &Path) -> bool {
        true
    }

    #[test]
    fn repository_parsing() {
        assert_eq!(image_repository("valkey/valkey"), "valkey/valkey");
        assert_eq!(image_repository("valkey/valkey:8.1"), "valkey/valkey");
        assert_eq!(
            image_repository("docker.io/valkey/valkey:8.1"),
            "valkey/valkey"
        );
        assert_eq!(
            image_repository("registry:5000/valkey/valkey@sha256:abc"),
            "valkey/valkey"
        );
        assert_eq!(
            image_repository("localhost/valkey/valkey:8.1-alpine@sha256:abc"),
            "valkey/valkey"
        );
        assert_eq!(image_repository("docker.io/library/busybox:1"), "busybox");
    }

    #[test]
    fn default_command_is_valkey_server_with_bind() {
        let m = map_container(
            Path::new("/usr/bin"),
            "valkey/valkey:8.1",
            &[],
            &s(&["--port", "6379"]),
            IP,
            &all_exist,
        )
        .unwrap();
        assert_eq!(m.program, PathBuf::from("/usr/bin/valkey-server"));
        assert_eq!(
            m.argv,
            s(&[
                "valkey-server",
                "--port",
                "6379",
                "--bind",
                "127.64.0.5",
                "--bind-source-addr",
                "127.64.0.5"
            ])
        );
        assert!(m.is_daemon);
    }

    #[test]
    fn a_shell_that_becomes_the_server_gets_its_bind() {
        let script = "exec \"$0\" \"$@\"";
        let m = map_container(
            Path::new("/usr/bin"),
            "valkey/valkey:8.1",
            &s(&["sh", "-c", script, "valkey-server"]),
            &s(&["/etc/valkey/valkey.conf"]),
            IP,
            &all_exist,
        )
        .unwrap();
        assert!(m.is_daemon);
        assert_eq!(
            m.argv[3..],
            s(&[
                "valkey-server",
                "/etc/valkey/valkey.conf",
                "--bind",
                "127.64.0.5",
                "--bind-source-addr",
                "127.64.0.5"
            ])
        );
        // Any other shell command is left alone.
        let m = map_container(
            Path::new("/usr/bin"),
            "valkey/valkey:8.1",
            &s(&["sh", "-c", "cp a b"]),
            &[],
            IP,
            &all_exist,
        )
        .unwrap();
        assert!(!m.is_daemon);
        assert_eq!(m.argv, s(&["sh", "-c", "cp a b"]));
    }

    #[test]
    fn args_without_command_follow_the_entrypoint() {
        assert_eq!(
            effective_argv(&[], &s(&["/etc/valkey/valkey.conf"])),
            s(&["valkey-server", "/etc/valkey/valkey.conf"])
        );
        assert_eq!(
            effective_argv(&[], &s(&["valkey-cli", "ping"])),
            s(&["valkey-cli", "ping"])
        );
        assert_eq!(effective_argv(&[], &[]), s(&["valkey-server"]));
    }

    #[test]
    fn sentinel_and_absolute_image_paths() {
        let m = map_container(
            Path::new("/opt/v"),
            "valkey/valkey",
            &s(&["/usr/local/bin/valkey-sentinel", "/conf/s.conf"]),
            &[],
            IP,
            &all_exist,
        )
        .unwrap();
        assert_eq!(m.program, PathBuf::from("/opt/v/valkey-sentinel"));
        assert!(m.is_daemon);
        let cli = map_container(
            Path::new("/opt/v"),
            "valkey/valkey",
            &s(&["redis-cli", "ping"]),
            &[],
            IP,
            &all_exist,
        )
        .unwrap();
        assert_eq!(cli.program, PathBuf::from("/opt/v/valkey-cli"));
        assert_eq!(cli.argv, s(&["redis-cli", "ping"]));
    }

    #[test]
    fn falls_back_to_redis_binaries() {
        let only_redis = |p: &Path| p.to_string_lossy().contains("redis-");
        let m = map_container(
            Path::new("/usr/bin"),
            "valkey/valkey",
            &[],
            &[],
            IP,
            &only_redis,
        )
        .unwrap();
        assert_eq!(m.program, PathBuf::from("/usr/bin/redis-server"));
        let none = map_container(
            Path::new("/usr/bin"),
            "valkey/valkey",
            &[],
            &[],
            IP,
            &|_| false,
        )
        .unwrap_err();
        assert_eq!(none.reason, "BinaryNotFound");
    }

    #[test]
    fn shell_tools_resolve_to_host_paths() {
        let m = map_container(
            Path::new("/usr/bin"),
            "valkey/valkey",
            &s(&["sh", "-c", "echo hi"]),
            &[],
            IP,
            &|p| p == Path::new("/usr/bin/sh"),
        )
        .unwrap();
        assert_eq!(m.program, PathBuf::from("/usr/bin/sh"));
        assert!(!m.is_daemon);
        let err = map_container(
            Path::new("/usr/bin"),
            "valkey/valkey",
            &s(&["python3"]),
            &[],
            IP,
            &all_exist,
        )
        .unwrap_err();
        assert_eq!(err.reason, "CommandNotMapped");
    }

    #[test]
    fn unknown_image_is_not_mapped() {
        let err = map_container(Path::new("/usr/bin"), "foo/bar:1", &[], &[], IP, &all_exist)
            .unwrap_err();
        assert_eq!(err.reason, "ImageNotMapped");
        assert_eq!(
            err.message,
            "image \"foo/bar:1\" has no local binary in the node agent (known images: valkey/valkey)"
        );
    }
}
