//! The re-executed helpers that become container processes.
//!
//! `node-agent run-container --spec <file>` runs in a fresh, single-threaded
//! process: in a private mount namespace it lays a writable overlay over the
//! image's unpacked root, mounts the volumes, chroots into it, drops privileges
//! and execs the program found on the container's PATH. Doing this in a
//! separate process keeps non-async-signal-safe work out of pre_exec hooks of
//! the multithreaded agent. `node-agent exec-in <json>` joins a running
//! container's namespaces to run exec probes.

use std::ffi::CString;
use std::fs;
use std::io::Write;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use nix::mount::{MsFlags, mount};
use nix::sched::{CloneFlags, setns, unshare};
use nix::unistd::{Gid, Uid, chdir, chroot, execve, setgid, setgroups, sethostname, setuid};
use serde::{Deserialize, Serialize};

/// Default PATH of the valkey image.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct MountSpec {
    /// Host path (file or directory).
    pub source: PathBuf,
    /// Absolute path inside the container.
    pub target: String,
    pub read_only: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ContainerSpec {
    /// Where the container's root is mounted (host path).
    pub root: PathBuf,
    /// The image's unpacked root filesystem, shared read-only by its containers.
    pub image_root: PathBuf,
    /// This container's writable layer (overlay upper and work dirs below it).
    pub layer: PathBuf,
    /// securityContext.readOnlyRootFilesystem: the root is remounted read-only once set up.
    pub read_only_root: bool,
    /// Scratch directory for stashes (host path).
    pub scratch: PathBuf,
    /// Files placed over /etc/hosts, /etc/resolv.conf, /etc/hostname.
    pub etc_files: Vec<(PathBuf, String)>,
    pub mounts: Vec<MountSpec>,
    pub hostname: String,
    pub workdir: String,
    /// argv[0] is looked up on the container's PATH inside its root, as runc does.
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub groups: Vec<u32>,
    /// Setup failures are written here before exiting, so the agent can
    /// report StartError instead of a plain exit code.
    pub error_file: PathBuf,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExecInSpec {
    pub pid: u32,
    pub root: PathBuf,
    pub workdir: String,
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub groups: Vec<u32>,
}

/// Exit code when the container could not be set up (like runc's 128 range).
pub const SETUP_FAILED: i32 = 128;

/// Entry point of `node-agent run-container --spec <file>`; never returns.
pub fn run_container_main(args: &[String]) -> ! {
    let path = match args {
        [flag, p] if flag == "--spec" => PathBuf::from(p),
        _ => {
            eprintln!("usage: node-agent run-container --spec <file>");
            std::process::exit(2);
        }
    };
    let spec: ContainerSpec = match fs::read(&path)
        .map_err(anyhow::Error::from)
        .and_then(|b| serde_json::from_slice(&b).map_err(Into::into))
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!(
                "node-agent: reading container spec {}: {e:#}",
                path.display()
            );
            std::process::exit(SETUP_FAILED);
        }
    };
    // Opened before the chroot: a failure after it (the program not found in the image)
    // could not name a host path any more. Close-on-exec, so the program never holds it.
    let error_out = fs::File::create(&spec.error_file);
    let err = match setup_and_exec(&spec) {
        Ok(never) => match never {},
        Err(e) => e,
    };
    let msg = format!("{err:#}");
    eprintln!("node-agent: container start failed: {msg}");
    match error_out {
        Ok(mut file) => {
            let _ = std::io::Write::write_all(&mut file, msg.as_bytes());
        }
        Err(_) => {
            let _ = fs::write(&spec.error_file, &msg);
        }
    }
    std::process::exit(SETUP_FAILED);
}

fn bind(source: &Path, target: &Path, read_only: bool) -> Result<()> {
    mount(
        Some(source),
        target,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .with_context(|| format!("bind {} -> {}", source.display(), target.display()))?;
    if read_only {
        mount(
            None::<&str>,
            target,
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY,
            None::<&str>,
        )
        .with_context(|| format!("remount {} read-only", target.display()))?;
    }
    Ok(())
}

fn tmpfs(target: &Path, mode: &str) -> Result<()> {
    mount(
        Some("tmpfs"),
        target,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(format!("mode={mode}").as_str()),
    )
    .with_context(|| format!("mount tmpfs on {}", target.display()))
}

/// Builds the container filesystem; the mount work happens only in the
/// private namespace.
fn setup_and_exec(spec: &ContainerSpec) -> Result<std::convert::Infallible> {
    unshare(CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWUTS).context("unshare")?;
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .context("make / rprivate")?;
    let root = &spec.root;
    fs::create_dir_all(root).with_context(|| format!("mkdir {}", root.display()))?;
    fs::create_dir_all(&spec.scratch)?;
    overlay(&spec.image_root, &spec.layer, root)?;
    for d in ["dev", "proc", "sys"] {
        let inside = ensure_path(root, &spec.scratch, &mut 0, d, true)?;
        bind(&Path::new("/").join(d), &inside, false)?;
    }
    let mut stash_counter = 0;
    for (src, target) in &spec.etc_files {
        let t = ensure_path(root, &spec.scratch, &mut stash_counter, target, false)?;
        bind(src, &t, true)?;
    }
    // Parents before children so nested mountPaths layer correctly.
    let mut mounts = spec.mounts.clone();
    mounts.sort_by_key(|m| Path::new(&m.target).components().count());
    for m in &mounts {
        let is_dir = fs::metadata(&m.source)
            .with_context(|| format!("volume source {}", m.source.display()))?
            .is_dir();
        let t = ensure_path(root, &spec.scratch, &mut stash_counter, &m.target, is_dir)?;
        bind(&m.source, &t, m.read_only)?;
    }

    if spec.read_only_root {
        // A recursive bind keeps the volumes below writable; only the root itself turns read-only.
        bind(root, root, true)?;
    }

    sethostname(&spec.hostname).context("sethostname")?;
    chroot(root).context("chroot")?;
    enter_workdir(&spec.workdir)?;
    let first = spec.argv.first().context("empty command")?;
    let program = resolve_in_path(first, &spec.env)
        .with_context(|| format!("exec: {first:?}: executable file not found in $PATH"))?;
    drop_privileges(spec.uid, spec.gid, &spec.groups)?;
    exec(&program, &spec.argv, &spec.env)
}

/// The image's root read-only below, this container's own writable layer on top.
fn overlay(image_root: &Path, layer: &Path, target: &Path) -> Result<()> {
    let upper = layer.join("upper");
    let work = layer.join("work");
    fs::create_dir_all(&upper)?;
    fs::create_dir_all(&work)?;
    let opts = format!(
        "lowerdir={},upperdir={},workdir={}",
        image_root.display(),
        upper.display(),
        work.display()
    );
    mount(
        Some("overlay"),
        target,
        Some("overlay"),
        MsFlags::empty(),
        Some(opts.as_str()),
    )
    .with_context(|| {
        format!(
            "mount overlay of {} on {}",
            image_root.display(),
            target.display()
        )
    })
}

fn enter_workdir(workdir: &str) -> Result<()> {
    let wd = if workdir.is_empty() { "/" } else { workdir };
    // Container runtimes create a missing workingDir.
    let _ = fs::create_dir_all(wd);
    chdir(wd).with_context(|| format!("chdir to workingDir {wd}"))
}

fn drop_privileges(uid: Option<u32>, gid: Option<u32>, groups: &[u32]) -> Result<()> {
    let gids: Vec<Gid> = groups.iter().map(|g| Gid::from_raw(*g)).collect();
    setgroups(&gids).context("setgroups")?;
    setgid(Gid::from_raw(gid.unwrap_or(0))).context("setgid")?;
    if let Some(uid) = uid {
        setuid(Uid::from_raw(uid)).context("setuid")?;
    }
    Ok(())
}

fn exec(
    program: &Path,
    argv: &[String],
    env: &[(String, String)],
) -> Result<std::convert::Infallible> {
    let c = |s: &str| CString::new(s).map_err(|_| anyhow!("NUL byte in {s:?}"));
    let prog = c(&program.to_string_lossy())?;
    let args = argv.iter().map(|a| c(a)).collect::<Result<Vec<_>>>()?;
    let envs = env
        .iter()
        .map(|(k, v)| c(&format!("{k}={v}")))
        .collect::<Result<Vec<_>>>()?;
    let e = execve(&prog, &args, &envs).unwrap_err();
    bail!("exec {}: {e}", program.display())
}

/// Makes `target` (absolute, inside the container) exist below `root` as a
/// directory or file. A parent that is a read-only volume is shadowed: its
/// entries are re-bound onto a fresh tmpfs so the mount point can be created,
/// as a container runtime does for nested mounts.
fn ensure_path(
    root: &Path,
    scratch: &Path,
    counter: &mut usize,
    target: &str,
    is_dir: bool,
) -> Result<PathBuf> {
    let comps: Vec<String> = Path::new(target)
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect();
    if Path::new(target)
        .components()
        .any(|c| c == Component::ParentDir)
    {
        bail!("path {target:?} must not contain ..");
    }
    let mut cur = root.to_path_buf();
    for (i, comp) in comps.iter().enumerate() {
        let last = i + 1 == comps.len();
        let mut next = cur.join(comp);
        for _ in 0..8 {
            match fs::symlink_metadata(&next) {
                Ok(m) if m.file_type().is_symlink() => {
                    let link = fs::read_link(&next)?;
                    next = if link.is_absolute() {
                        root.join(link.strip_prefix("/").unwrap_or(&link))
                    } else {
                        cur.join(link)
                    };
                }
                _ => break,
            }
        }
        if fs::symlink_metadata(&next).is_err() {
            let create = |p: &Path| -> std::io::Result<()> {
                if last && !is_dir {
                    fs::File::create(p).map(drop)
                } else {
                    fs::create_dir(p)
                }
            };
            if let Err(e) = create(&next) {
                if e.raw_os_error() != Some(libc::EROFS) {
                    return Err(e).with_context(|| format!("creating {}", next.display()));
                }
                shadow(&cur, scratch, counter)?;
                create(&next).with_context(|| format!("creating {}", next.display()))?;
            }
        }
        cur = next;
    }
    Ok(cur)
}

fn shadow(dir: &Path, scratch: &Path, counter: &mut usize) -> Result<()> {
    *counter += 1;
    let stash = scratch.join(format!("stash-{counter}"));
    fs::create_dir_all(&stash)?;
    bind(dir, &stash, false)?;
    tmpfs(dir, "0755")?;
    for entry in fs::read_dir(&stash)? {
        let entry = entry?;
        let name = entry.file_name();
        let from = stash.join(&name);
        let to = dir.join(&name);
        let ft = entry.file_type()?;
        if ft.is_symlink() {
            std::os::unix::fs::symlink(fs::read_link(&from)?, &to)?;
            continue;
        }
        if ft.is_dir() {
            fs::create_dir(&to)?;
        } else {
            fs::File::create(&to)?;
        }
        bind(&from, &to, true)?;
    }
    Ok(())
}

/// Entry point of `node-agent exec-in <json>`; never returns.
pub fn exec_in_main(args: &[String]) -> ! {
    let result = (|| -> Result<std::convert::Infallible> {
        let json = args.first().context("usage: node-agent exec-in <json>")?;
        let spec: ExecInSpec = serde_json::from_str(json)?;
        for (ns, flag) in [
            ("mnt", CloneFlags::CLONE_NEWNS),
            ("uts", CloneFlags::CLONE_NEWUTS),
        ] {
            let f = fs::File::open(format!("/proc/{}/ns/{ns}", spec.pid))
                .with_context(|| format!("container process {} is gone", spec.pid))?;
            setns(&f, flag).with_context(|| format!("setns {ns}"))?;
        }
        chroot(&spec.root).context("chroot")?;
        enter_workdir(&spec.workdir)?;
        drop_privileges(spec.uid, spec.gid, &spec.groups)?;
        let first = spec.argv.first().context("empty exec command")?;
        let program = resolve_in_path(first, &spec.env)
            .with_context(|| format!("executable {first:?} not found in $PATH"))?;
        exec(&program, &spec.argv, &spec.env)
    })();
    let err = match result {
        Ok(never) => match never {},
        Err(e) => e,
    };
    let _ = writeln!(std::io::stderr(), "{err:#}");
    std::process::exit(127);
}

fn resolve_in_path(cmd: &str, env: &[(String, String)]) -> Option<PathBuf> {
    if cmd.contains('/') {
        return Some(PathBuf::from(cmd));
    }
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_str())
        .unwrap_or(DEFAULT_PATH);
    path.split(':')
        .map(|d| Path::new(d).join(cmd))
        .find(|p| p.is_file())
}

/// Kills a process group when dropped: an exec abandoned mid-run (a hook cut
/// short by the container's exit or a stop) must not leave its children behind.
struct GroupGuard(Option<u32>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pid) = self.0 {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// Whether `pid` still runs the agent's own binary: a container helper that
/// has not yet exec'd the container's program, so its mounts may be incomplete.
fn still_in_setup(pid: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    let (Ok(agent), Ok(it)) = (
        fs::metadata("/proc/self/exe"),
        fs::metadata(format!("/proc/{pid}/exe")),
    ) else {
        return false;
    };
    (agent.dev(), agent.ino()) == (it.dev(), it.ino())
}

/// Runs a command (exec probe or hook) in a container; Err carries a message with the output.
pub async fn exec_in(spec: &ExecInSpec, timeout: Duration) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + timeout;
    // A postStart hook runs right after launch: joining the helper's namespace
    // before its setup is done would see an empty root.
    while still_in_setup(spec.pid) {
        if tokio::time::Instant::now() >= deadline {
            return Err(format!("container process {} is still starting", spec.pid));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let json = serde_json::to_string(spec).map_err(|e| e.to_string())?;
    let child = tokio::process::Command::new("/proc/self/exe")
        .arg("exec-in")
        .arg(json)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("spawning exec probe: {e}"))?;
    let mut group = GroupGuard(child.id());
    let result = tokio::time::timeout_at(deadline, child.wait_with_output()).await;
    if result.is_ok() {
        // Finished: background children live on, as in a real container.
        group.0 = None;
    }
    match result {
        Ok(Ok(out)) if out.status.success() => {
            // A hook's words (the kubelet drops them; AGENT_LOG=debug shows them here).
            if !out.stdout.is_empty() || !out.stderr.is_empty() {
                tracing::debug!(
                    argv = ?spec.argv.first(),
                    stdout = %String::from_utf8_lossy(&out.stdout).trim(),
                    stderr = %String::from_utf8_lossy(&out.stderr).trim(),
                    "exec output"
                );
            }
            Ok(())
        }
        Ok(Ok(out)) => {
            let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
            text.push_str(&String::from_utf8_lossy(&out.stderr));
            text.truncate(1024);
            Err(format!(
                "command {:?} exited with {}: {}",
                spec.argv,
                out.status.code().unwrap_or(-1),
                text.trim()
            ))
        }
        Ok(Err(e)) => Err(format!("waiting for exec probe: {e}")),
        Err(_) => Err(format!(
            "command {:?} timed out after {}s",
            spec.argv,
            timeout.as_secs()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_resolution_uses_container_env() {
        let env = vec![("PATH".to_string(), "/nonexistent:/bin:/usr/bin".to_string())];
        assert!(resolve_in_path("sh", &env).is_some());
        assert_eq!(resolve_in_path("/x/y", &env), Some(PathBuf::from("/x/y")));
        assert_eq!(resolve_in_path("definitely-not-a-tool", &env), None);
    }

    #[test]
    fn setup_ends_with_the_exec() {
        assert!(
            still_in_setup(std::process::id()),
            "runs the agent's binary"
        );
        let mut other = std::process::Command::new("sleep")
            .arg("10")
            .spawn()
            .unwrap();
        assert!(!still_in_setup(other.id()), "exec'd another program");
        other.kill().unwrap();
        other.wait().unwrap();
        assert!(!still_in_setup(u32::MAX), "gone");
    }

    #[test]
    fn spec_roundtrips_as_json() {
        let spec = ExecInSpec {
            pid: 1,
            root: "/r".into(),
            workdir: "/".into(),
            argv: vec!["valkey-cli".into(), "ping".into()],
            env: vec![],
            uid: Some(999),
            gid: None,
            groups: vec![],
        };
        let back: ExecInSpec =
            serde_json::from_str(&serde_json::to_string(&spec).unwrap()).unwrap();
        assert_eq!(back.argv, spec.argv);
        assert_eq!(back.uid, Some(999));
    }
}
