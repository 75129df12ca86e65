//! Write attempts run side by side, each on its own connection in its own `valkey-cli`
//! process, for timing when an address starts accepting writes: a frozen server holds up
//! only the attempts sent to it, never the next one.

use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};

use anyhow::{Context, Result};

/// How long one attempt may take (`timeout`), connection included.
const ATTEMPT_SECONDS: &str = "2";

/// One attempt: `INFO server` then `SET <key> <key>` on one connection.
struct Attempt {
    child: Child,
}

impl Attempt {
    fn start(ip: &str, port: u16, password: Option<&str>, key: &str) -> Result<Self> {
        let mut command = Command::new("timeout");
        command
            .args([
                ATTEMPT_SECONDS,
                "valkey-cli",
                "-h",
                ip,
                "-p",
                &port.to_string(),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        if let Some(password) = password {
            command.env("REDISCLI_AUTH", password);
        }
        let mut child = command.spawn().context("starting valkey-cli")?;
        let mut stdin = child.stdin.take().context("valkey-cli has no stdin")?;
        // Commands read from stdin run in turn on the one connection.
        stdin.write_all(format!("INFO server\nSET {key} {key}\n").as_bytes())?;
        Ok(Self { child })
    }

    /// `None` while it runs; then the run id of the server that accepted the write, or
    /// `Some(None)` when it was refused or timed out.
    fn outcome(&mut self) -> Result<Option<Option<String>>> {
        if self.child.try_wait()?.is_none() {
            return Ok(None);
        }
        let mut out = String::new();
        if let Some(mut stdout) = self.child.stdout.take() {
            stdout.read_to_string(&mut out)?;
        }
        let accepted = out.lines().any(|l| l.trim() == "OK");
        let run_id = out
            .lines()
            .find_map(|l| l.trim().strip_prefix("run_id:").map(str::to_string));
        Ok(Some(run_id.filter(|_| accepted)))
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Write attempts in flight; see the module docs.
#[derive(Default)]
pub struct WriteProbes {
    running: Vec<Attempt>,
    sent: usize,
}

impl WriteProbes {
    /// Starts one more attempt against `ip:port` (logging in with `password` when given),
    /// writing a key of its own under `prefix`.
    pub fn send(
        &mut self,
        ip: &str,
        port: u16,
        password: Option<&str>,
        prefix: &str,
    ) -> Result<()> {
        let key = format!("{prefix}:{}", self.sent);
        self.sent += 1;
        self.running.push(Attempt::start(ip, port, password, &key)?);
        Ok(())
    }

    /// The run ids of the servers that accepted the attempts finished since the last call
    /// (finished attempts are dropped).
    pub fn accepted(&mut self) -> Result<Vec<String>> {
        let mut accepted = Vec::new();
        let mut still = Vec::new();
        for mut attempt in self.running.drain(..) {
            match attempt.outcome()? {
                None => still.push(attempt),
                Some(Some(run_id)) => accepted.push(run_id),
                Some(None) => {}
            }
        }
        self.running = still;
        Ok(accepted)
    }

    /// How many attempts were sent.
    pub fn sent(&self) -> usize {
        self.sent
    }
}
