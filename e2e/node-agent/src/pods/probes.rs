//! Startup, liveness and readiness probes: threshold bookkeeping, scheduling
//! and the exec / tcpSocket / httpGet checks themselves.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, ExecAction, HTTPGetAction, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

use crate::container_exec::ExecInSpec;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Startup,
    Liveness,
    Readiness,
}

/// Timing and thresholds of a probe with Kubernetes defaults applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    pub initial_delay: Duration,
    pub period: Duration,
    pub timeout: Duration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
}

impl Timing {
    pub fn of(p: &Probe) -> Self {
        let secs =
            |v: Option<i32>, d: i32, min: i32| Duration::from_secs(v.unwrap_or(d).max(min) as u64);
        Timing {
            initial_delay: secs(p.initial_delay_seconds, 0, 0),
            period: secs(p.period_seconds, 10, 1),
            timeout: secs(p.timeout_seconds, 1, 1),
            success_threshold: p.success_threshold.unwrap_or(1).max(1) as u32,
            failure_threshold: p.failure_threshold.unwrap_or(3).max(1) as u32,
        }
    }
}

/// One probe's state for the current container run.
#[derive(Debug, Clone)]
pub struct Tracker {
    pub kind: Kind,
    pub probe: Probe,
    pub timing: Timing,
    successes: u32,
    failures: u32,
    /// Current verdict: readiness starts failing, liveness starts passing,
    /// startup starts unknown (treated as not yet passed).
    pub result: bool,
    next_at: Instant,
    pub last_message: Option<String>,
}

impl Tracker {
    pub fn new(kind: Kind, probe: Probe, container_started: Instant) -> Self {
        let timing = Timing::of(&probe);
        Self {
            kind,
            probe,
            timing,
            successes: 0,
            failures: 0,
            result: kind == Kind::Liveness,
            next_at: container_started + timing.initial_delay,
            last_message: None,
        }
    }

    pub fn next_at(&self) -> Instant {
        self.next_at
    }

    /// Records one outcome at `now`; returns the new verdict when it flips.
    pub fn record(&mut self, ok: bool, now: Instant) -> Option<bool> {
        self.next_at = now + self.timing.period;
        if ok {
            self.successes += 1;
            self.failures = 0;
        } else {
            self.failures += 1;
            self.successes = 0;
        }
        // Startup and liveness need one success (the API enforces it).
        let success_needed = match self.kind {
            Kind::Readiness => self.timing.success_threshold,
            _ => 1,
        };
        let verdict = if ok && self.successes >= success_needed {
            Some(true)
        } else if !ok && self.failures >= self.timing.failure_threshold {
            Some(false)
        } else {
            None
        };
        match verdict {
            Some(v) if v != self.result => {
                self.result = v;
                Some(v)
            }
            _ => None,
        }
    }
}

/// The probes of a container run, active according to the startup gate.
#[derive(Debug, Clone)]
pub struct ProbeSet {
    pub startup: Option<Tracker>,
    pub liveness: Option<Tracker>,
    pub readiness: Option<Tracker>,
    pub started: bool,
}

impl ProbeSet {
    pub fn new(c: &Container, now: Instant) -> Self {
        let startup = c
            .startup_probe
            .clone()
            .map(|p| Tracker::new(Kind::Startup, p, now));
        Self {
            started: startup.is_none(),
            startup,
            liveness: c
                .liveness_probe
                .clone()
                .map(|p| Tracker::new(Kind::Liveness, p, now)),
            readiness: c
                .readiness_probe
                .clone()
                .map(|p| Tracker::new(Kind::Readiness, p, now)),
        }
    }

    /// Probes that may run now: only startup until it passed, then the others.
    pub fn active(&mut self) -> Vec<&mut Tracker> {
        if !self.started {
            return self.startup.iter_mut().collect();
        }
        self.liveness
            .iter_mut()
            .chain(self.readiness.iter_mut())
            .collect()
    }

    /// When the next probe is due, if any.
    pub fn next_due(&mut self) -> Option<Instant> {
        self.active().iter().map(|t| t.next_at()).min()
    }

    /// Container readiness: readiness probe verdict, or started when none.
    pub fn ready(&self) -> bool {
        self.started && self.readiness.as_ref().is_none_or(|r| r.result)
    }
}

/// Where and how to run checks for one container.
#[derive(Debug, Clone)]
pub struct Target {
    pub pod_ip: Ipv4Addr,
    pub container: Container,
    /// Template for exec probes (argv filled per probe).
    pub exec: Option<ExecInSpec>,
}

/// Runs one check; Err carries the failure message.
pub async fn check(probe: &Probe, target: &Target, timeout: Duration) -> Result<(), String> {
    if let Some(exec) = &probe.exec {
        return exec_action(exec, target, timeout).await;
    }
    if let Some(tcp) = &probe.tcp_socket {
        let port = resolve_port(&tcp.port, &target.container)?;
        let addr = SocketAddr::new(host_or(&tcp.host, target.pod_ip).into(), port);
        return match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(addr)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(format!("dial tcp {addr}: {e}")),
            Err(_) => Err(format!("dial tcp {addr}: i/o timeout")),
        };
    }
    if let Some(http) = &probe.http_get {
        let code = http_get(http, target, timeout, "kube-probe/1.36").await?;
        return if (200..400).contains(&code) {
            Ok(())
        } else {
            Err(format!("HTTP probe failed with statuscode: {code}"))
        };
    }
    Err("probe type not supported by the node agent (exec, tcpSocket, httpGet are)".into())
}

/// Runs an exec action's command inside the container (probes and hooks).
pub async fn exec_action(
    exec: &ExecAction,
    target: &Target,
    timeout: Duration,
) -> Result<(), String> {
    let Some(tpl) = &target.exec else {
        return Err("container is not running".into());
    };
    let mut spec = tpl.clone();
    spec.argv = exec.command.clone().unwrap_or_default();
    crate::container_exec::exec_in(&spec, timeout).await
}

/// Sends an httpGet action's request (probes and hooks); Ok carries the
/// status code, which each caller judges its own way.
pub async fn http_get(
    http: &HTTPGetAction,
    target: &Target,
    timeout: Duration,
    user_agent: &str,
) -> Result<u16, String> {
    if http
        .scheme
        .as_deref()
        .is_some_and(|s| s.eq_ignore_ascii_case("https"))
    {
        return Err("https probes are not supported by the node agent".into());
    }
    let port = resolve_port(&http.port, &target.container)?;
    let addr = SocketAddr::new(host_or(&http.host, target.pod_ip).into(), port);
    let path = http.path.clone().unwrap_or_else(|| "/".into());
    let headers: String = http
        .http_headers
        .iter()
        .flatten()
        .map(|h| format!("{}: {}\r\n", h.name, h.value))
        .collect();
    let fut = async {
        let mut s = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| format!("Get http://{addr}{path}: {e}"))?;
        let req = format!(
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: {user_agent}\r\n{headers}Connection: close\r\n\r\n"
        );
        s.write_all(req.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut buf = vec![0u8; 512];
        let n = s.read(&mut buf).await.map_err(|e| e.to_string())?;
        let line = String::from_utf8_lossy(&buf[..n]);
        line.split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| "malformed HTTP response".to_string())
    };
    match tokio::time::timeout(timeout, fut).await {
        Ok(r) => r,
        Err(_) => Err(format!(
            "Get http://{addr}{path}: context deadline exceeded"
        )),
    }
}

fn host_or(host: &Option<String>, ip: Ipv4Addr) -> Ipv4Addr {
    host.as_deref().and_then(|h| h.parse().ok()).unwrap_or(ip)
}

/// Resolves a numeric or named container port.
pub fn resolve_port(port: &IntOrString, c: &Container) -> Result<u16, String> {
    match port {
        IntOrString::Int(p) => u16::try_from(*p).map_err(|_| format!("bad port {p}")),
        IntOrString::String(name) => {
            if let Ok(p) = name.parse::<u16>() {
                return Ok(p);
            }
            c.ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .and_then(|p| u16::try_from(p.container_port).ok())
                .ok_or_else(|| format!("named port {name:?} not found in container"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(json: serde_json::Value) -> Probe {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn defaults() {
        let t = Timing::of(&probe(serde_json::json!({"tcpSocket": {"port": 1}})));
        assert_eq!(t.period, Duration::from_secs(10));
        assert_eq!(t.timeout, Duration::from_secs(1));
        assert_eq!(t.failure_threshold, 3);
        assert_eq!(t.success_threshold, 1);
    }

    #[test]
    fn readiness_thresholds() {
        let now = Instant::now();
        let p = probe(serde_json::json!({
            "tcpSocket": {"port": 1}, "initialDelaySeconds": 5, "periodSeconds": 2,
            "successThreshold": 2, "failureThreshold": 2
        }));
        let mut t = Tracker::new(Kind::Readiness, p, now);
        assert!(!t.result);
        assert_eq!(t.next_at(), now + Duration::from_secs(5));
        assert_eq!(t.record(true, now), None, "one success is not enough");
        assert_eq!(t.next_at(), now + Duration::from_secs(2));
        assert_eq!(t.record(true, now), Some(true));
        assert_eq!(t.record(false, now), None);
        assert_eq!(
            t.record(true, now),
            None,
            "success resets the failure count"
        );
        assert_eq!(t.record(false, now), None);
        assert_eq!(t.record(false, now), Some(false));
    }

    #[test]
    fn liveness_and_startup_gate() {
        let now = Instant::now();
        let c: Container = serde_json::from_value(serde_json::json!({
            "name": "c",
            "startupProbe": {"tcpSocket": {"port": 1}, "failureThreshold": 1},
            "livenessProbe": {"tcpSocket": {"port": 1}, "initialDelaySeconds": 3},
            "readinessProbe": {"tcpSocket": {"port": 1}}
        }))
        .unwrap();
        let mut set = ProbeSet::new(&c, now);
        assert!(!set.ready());
        assert_eq!(set.active().len(), 1);
        assert_eq!(set.active()[0].kind, Kind::Startup);
        assert_eq!(set.next_due(), Some(now));
        assert_eq!(set.startup.as_mut().unwrap().record(true, now), Some(true));
        set.started = true;
        let kinds: Vec<Kind> = set.active().iter().map(|t| t.kind).collect();
        assert_eq!(kinds, vec![Kind::Liveness, Kind::Readiness]);
        assert_eq!(set.next_due(), Some(now), "readiness has no delay");
        let live = set.liveness.as_mut().unwrap();
        assert!(live.result);
        assert_eq!(live.record(false, now), None);
        assert_eq!(live.record(false, now), None);
        assert_eq!(live.record(false, now), Some(false));
    }

    #[test]
    fn named_ports() {
        let c: Container = serde_json::from_value(serde_json::json!({
            "name": "c", "ports": [{"name": "valkey", "containerPort": 6379}]
        }))
        .unwrap();
        assert_eq!(
            resolve_port(&IntOrString::String("valkey".into()), &c),
            Ok(6379)
        );
        assert_eq!(resolve_port(&IntOrString::Int(80), &c), Ok(80));
        assert!(resolve_port(&IntOrString::String("nope".into()), &c).is_err());
    }
}
