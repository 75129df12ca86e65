//! Child processes of a run: started with their output in `logs/<name>.log`, recorded in
//! `pids/<name>.pid` (PID and start time, so a recycled PID is never signalled), and stopped
//! by PID: SIGTERM, then SIGKILL after a grace period.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// A process this run started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    pub name: String,
    pub pid: i32,
    /// Start time in clock ticks since boot (field 22 of /proc/<pid>/stat).
    pub start_ticks: u64,
}

/// Starts `command` in its own process group with stdout and stderr appended to
/// `<run>/logs/<name>.log`, and records it under `<run>/pids/`. The caller keeps the
/// `Child` to reap it (a long-lived test process) or drops it (`local-cluster up`, whose
/// children outlive it and are stopped by PID later).
pub fn spawn(run_dir: &Path, name: &str, command: &mut Command) -> Result<(Recorded, Child)> {
    use std::os::unix::process::CommandExt;
    let logs = run_dir.join("logs");
    let pids = run_dir.join("pids");
    std::fs::create_dir_all(&logs)?;
    std::fs::create_dir_all(&pids)?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(logs.join(format!("{name}.log")))?;
    let child = command
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        // Own process group: a Ctrl-C in the terminal that ran `just up` does not reach it.
        .process_group(0)
        .spawn()
        .with_context(|| format!("starting {name} ({:?})", command.get_program()))?;
    let pid = child.id() as i32;
    let start_ticks = start_ticks(pid).with_context(|| format!("{name} exited at once"))?;
    let recorded = Recorded {
        name: name.to_string(),
        pid,
        start_ticks,
    };
    std::fs::write(pid_file(run_dir, name), format!("{pid} {start_ticks}\n"))?;
    Ok((recorded, child))
}

fn pid_file(run_dir: &Path, name: &str) -> PathBuf {
    run_dir.join("pids").join(format!("{name}.pid"))
}

/// Every process recorded in `run_dir`.
pub fn recorded(run_dir: &Path) -> Result<Vec<Recorded>> {
    let dir = run_dir.join("pids");
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(found);
    };
    for entry in entries {
        let path = entry?.path();
        let Some(name) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        let text = std::fs::read_to_string(&path)?;
        if let Some(record) = parse_record(name, &text) {
            found.push(record);
        }
    }
    found.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(found)
}

fn parse_record(name: &str, text: &str) -> Option<Recorded> {
    let mut fields = text.split_whitespace();
    Some(Recorded {
        name: name.to_string(),
        pid: fields.next()?.parse().ok()?,
        start_ticks: fields.next()?.parse().ok()?,
    })
}

/// Start time of `pid` in clock ticks since boot, if it runs (and is not a zombie).
fn start_ticks(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&stat)
}

/// Field 22 (starttime) of /proc/<pid>/stat; None for a zombie (state Z).
fn parse_stat(stat: &str) -> Option<u64> {
    // The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    if fields.first() == Some(&"Z") {
        return None;
    }
    fields.get(19)?.parse().ok()
}

impl Recorded {
    /// Still the same live process (not exited, not a recycled PID).
    pub fn is_alive(&self) -> bool {
        start_ticks(self.pid) == Some(self.start_ticks)
    }

    /// SIGTERM, wait up to `grace`, then SIGKILL the whole process group.
    pub fn stop(&self, grace: Duration) -> Result<()> {
        if !self.is_alive() {
            return Ok(());
        }
        signal_group(self.pid, libc::SIGTERM);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if !self.is_alive() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        signal_group(self.pid, libc::SIGKILL);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if !self.is_alive() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        bail!("{} (pid {}) survived SIGKILL", self.name, self.pid)
    }
}

fn signal_group(pid: i32, signal: i32) {
    // The child leads its own process group (see spawn), so -pid reaches its children too.
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe {
        libc::kill(-pid, signal);
    }
}

/// Stops every recorded process (reverse name order is irrelevant: each stops on its own)
/// and removes the records of those that are gone.
pub fn stop_all(run_dir: &Path, grace: Duration) -> Result<Vec<String>> {
    let mut stopped = Vec::new();
    let mut failures = Vec::new();
    for record in recorded(run_dir)? {
        match record.stop(grace) {
            Ok(()) => {
                let _ = std::fs::remove_file(pid_file(run_dir, &record.name));
                stopped.push(record.name);
            }
            Err(error) => failures.push(error.to_string()),
        }
    }
    if !failures.is_empty() {
        bail!("{}", failures.join("; "));
    }
    Ok(stopped)
}

/// Kills, with their process groups, the container processes the node agent recorded under
/// `agent_state_dir` (`pods/<uid>/<container>/pid`: PID and start time) that still run. The
/// agent gives each pod its grace period when it stops, and an agent stopped before that
/// ends leaves them behind, still serving on their pod IPs: a later run given the same
/// address slot would reach them instead of its own pods. Returns how many it killed.
pub fn kill_container_leftovers(agent_state_dir: &Path) -> usize {
    let mut killed = 0;
    let Ok(pods) = std::fs::read_dir(agent_state_dir.join("pods")) else {
        return 0;
    };
    for container in pods
        .flatten()
        .filter_map(|p| std::fs::read_dir(p.path()).ok())
    {
        for dir in container.flatten() {
            let Ok(text) = std::fs::read_to_string(dir.path().join("pid")) else {
                continue;
            };
            let Some(record) = parse_record("container", &text) else {
                continue;
            };
            if record.is_alive() {
                // SAFETY: killpg(2) on a group whose leader's PID and start time were just
                // checked; no memory is involved.
                unsafe { libc::killpg(record.pid, libc::SIGKILL) };
                killed += 1;
            }
        }
    }
    killed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_leftovers_are_killed_by_their_recorded_pid_and_start_time() {
        use std::os::unix::process::{CommandExt, ExitStatusExt};
        let state = tempfile::tempdir().unwrap();
        let mut sleeper = std::process::Command::new("sleep")
            .arg("600")
            .process_group(0)
            .spawn()
            .unwrap();
        let pid = sleeper.id() as i32;
        let live = state.path().join("pods/uid-1/valkey");
        std::fs::create_dir_all(&live).unwrap();
        std::fs::write(
            live.join("pid"),
            format!("{pid} {}\n", start_ticks(pid).unwrap()),
        )
        .unwrap();
        // A recycled PID (wrong start time) and an exited container are left alone.
        let stale = state.path().join("pods/uid-2/valkey");
        std::fs::create_dir_all(&stale).unwrap();
        std::fs::write(stale.join("pid"), format!("{} 1\n", std::process::id())).unwrap();
        assert_eq!(kill_container_leftovers(state.path()), 1);
        let status = sleeper.wait().unwrap();
        assert_eq!(status.signal(), Some(libc::SIGKILL));
        assert_eq!(kill_container_leftovers(state.path()), 0);
    }

    #[test]
    fn parses_start_time_even_with_odd_command_names() {
        let stat =
            "1234 (a) b (c)) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 98765 1000 10";
        assert_eq!(parse_stat(stat), Some(98765));
        let zombie = "1234 (x) Z 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 98765 0 0";
        assert_eq!(parse_stat(zombie), None);
    }

    #[test]
    fn spawned_processes_are_recorded_and_stopped_by_pid() {
        let run = tempfile::tempdir().unwrap();
        let (record, mut child) =
            spawn(run.path(), "sleeper", Command::new("sleep").arg("30")).unwrap();
        assert!(record.is_alive());
        assert_eq!(recorded(run.path()).unwrap(), vec![record.clone()]);
        // Until reaped the stopped child is a zombie, which is_alive counts as gone.
        let stopped = stop_all(run.path(), Duration::from_secs(5)).unwrap();
        assert_eq!(stopped, vec!["sleeper".to_string()]);
        assert!(!record.is_alive());
        assert!(child.wait().is_ok());
        assert!(recorded(run.path()).unwrap().is_empty());
    }

    #[test]
    fn a_recycled_pid_is_not_ours() {
        let me = Recorded {
            name: "me".into(),
            pid: std::process::id() as i32,
            start_ticks: start_ticks(std::process::id() as i32).unwrap() + 1,
        };
        assert!(!me.is_alive());
    }
}
