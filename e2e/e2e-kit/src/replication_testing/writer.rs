//! A background writer for a group that records every write a replica acknowledged
//! (`SET` then `WAIT 1 1000` on the same connection), reaching the primary the way a client
//! does: through the read-write Service, or as a Sentinel-aware client asking the
//! sentinels (through `<name>-sentinel`) where the primary is after every failure.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use fred::prelude::{ClientLike, Server};
use fred::types::Value;

use super::{GroupAccess, ValkeyClient};
use crate::topology::{WriterCount, connect_one, raw};
use crate::valkey_tls::ClientTls;

/// `WAIT 1 <this>`: how long a write waits for a replica's acknowledgement.
const WAIT_TIMEOUT_MS: i64 = 1000;
/// Pause between two writes: keeps the writer from starving the 2-core machine.
const WRITE_INTERVAL: Duration = Duration::from_millis(5);

/// How the writer finds the primary.
#[derive(Clone, Debug)]
pub enum Route {
    /// Always the read-write Service's ClusterIP.
    Service(String),
    /// Ask the sentinels behind this ClusterIP (`<name>-sentinel`) after every failure.
    Sentinel(String),
}

/// What a writer did.
#[derive(Clone, Debug, Default)]
pub struct GroupWriterReport {
    pub route: String,
    /// Writes a replica acknowledged: key and value.
    pub acked: Vec<(String, String)>,
    /// Writes the primary took but no replica acknowledged in time.
    pub unacknowledged: u64,
    /// Failed writes, by the first word of the error (`READONLY`, `NOREPLICAS`,
    /// `connection`...).
    pub failed: BTreeMap<String, u64>,
    /// The longest time without an acknowledged write, start and stop included.
    pub longest_pause: Duration,
    pub last_error: Option<String>,
}

impl GroupWriterReport {
    pub fn summary(&self) -> String {
        format!(
            "{}: {} acknowledged, {} unacknowledged, failed {:?}, longest pause {:?}{}",
            self.route,
            self.acked.len(),
            self.unacknowledged,
            self.failed,
            self.longest_pause,
            self.last_error
                .as_ref()
                .map(|e| format!(", last error: {e}"))
                .unwrap_or_default()
        )
    }

    /// Acknowledged writes that do not read back with their value from the primary (through
    /// the read-write Service).
    pub async fn lost(&self, access: &GroupAccess) -> Result<Vec<String>> {
        let service = access
            .service_ip
            .clone()
            .context("the read-write Service has no ClusterIP")?;
        let client = connect(access.tls.as_ref(), &service, 6379, Some(&access.password)).await?;
        let mut lost = Vec::new();
        for chunk in self.acked.chunks(200) {
            let keys: Vec<Value> = chunk.iter().map(|(k, _)| k.as_str().into()).collect();
            let values: Vec<Option<String>> = raw(&client, "MGET", keys).await?;
            for ((key, value), got) in chunk.iter().zip(values) {
                if got.as_deref() != Some(value.as_str()) {
                    lost.push(key.clone());
                }
            }
        }
        let _ = client.quit().await;
        Ok(lost)
    }
}

/// A background writer; see the module docs.
pub struct GroupWriter {
    count: WriterCount,
    task: tokio::task::JoinHandle<GroupWriterReport>,
}

/// A plain connection to `ip:port` (over TLS with `tls`, checking its server name).
pub(super) async fn connect(
    tls: Option<&ClientTls>,
    ip: &str,
    port: u16,
    password: Option<&str>,
) -> Result<ValkeyClient> {
    let server = match tls {
        Some(tls) => Server::new_with_tls(ip, port, Some(tls.server_name().to_string())),
        None => Server::new(ip, port),
    };
    let address = format!("{ip}:{port}");
    connect_one(server, password, tls.map(ClientTls::fred), &address).await
}

impl GroupWriter {
    /// Starts writing keys `<prefix>:<n>` along `route`.
    pub fn start(access: &GroupAccess, route: Route, prefix: &str) -> Self {
        let count = WriterCount::default();
        let stream = Stream {
            access: access.clone(),
            route,
            prefix: prefix.to_string(),
        };
        let task = tokio::spawn(stream.run(count.clone()));
        Self { count, task }
    }

    pub fn acked(&self) -> usize {
        self.count.acked()
    }

    /// Waits until `more` further writes have been acknowledged.
    pub async fn progressed(&self, more: usize, timeout: Duration) -> Result<()> {
        self.count.progressed(more, timeout).await
    }

    pub async fn stop(self) -> Result<GroupWriterReport> {
        self.count.stop();
        self.task.await.context("the writer panicked")
    }
}

struct Stream {
    access: GroupAccess,
    route: Route,
    prefix: String,
}

impl Stream {
    /// Where the primary is now: the Service, or what the sentinels answer.
    async fn primary(&self) -> Result<String> {
        match &self.route {
            Route::Service(ip) => Ok(ip.clone()),
            Route::Sentinel(ip) => {
                let client = connect(
                    self.access.tls.as_ref(),
                    ip,
                    26379,
                    Some(&self.access.sentinel_password),
                )
                .await?;
                let answer: Vec<String> = raw(
                    &client,
                    "SENTINEL",
                    vec![
                        "GET-MASTER-ADDR-BY-NAME".into(),
                        self.access.name.as_str().into(),
                    ],
                )
                .await?;
                let _ = client.quit().await;
                answer
                    .into_iter()
                    .next()
                    .context("the sentinels name no primary")
            }
        }
    }

    async fn run(self, count: WriterCount) -> GroupWriterReport {
        let mut report = GroupWriterReport {
            route: format!("{:?}", self.route),
            ..Default::default()
        };
        let started = Instant::now();
        let mut last_ack = started;
        let mut client: Option<ValkeyClient> = None;
        let mut seq: u64 = 0;
        while !count.stopping() {
            let conn = match &client {
                Some(c) => c.clone(),
                None => {
                    let connected = match self.primary().await {
                        Ok(ip) => {
                            connect(
                                self.access.tls.as_ref(),
                                &ip,
                                6379,
                                Some(&self.access.password),
                            )
                            .await
                        }
                        Err(e) => Err(e),
                    };
                    match connected {
                        Ok(c) => {
                            client = Some(c.clone());
                            c
                        }
                        Err(e) => {
                            *report.failed.entry("connect".into()).or_default() += 1;
                            report.last_error = Some(format!("{e:#}"));
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    }
                }
            };
            let key = format!("{}:{seq}", self.prefix);
            let value = format!("{}-{seq}", self.prefix);
            seq += 1;
            let set = raw::<Value>(
                &conn,
                "SET",
                vec![key.as_str().into(), value.as_str().into()],
            )
            .await;
            let outcome = match set {
                Ok(_) => raw::<i64>(&conn, "WAIT", vec![1.into(), WAIT_TIMEOUT_MS.into()]).await,
                Err(e) => Err(e),
            };
            match outcome {
                Ok(n) if n >= 1 => {
                    let now = Instant::now();
                    report.longest_pause = report.longest_pause.max(now - last_ack);
                    last_ack = now;
                    report.acked.push((key, value));
                    count.add_acked();
                }
                Ok(_) => report.unacknowledged += 1,
                Err(e) => {
                    let details = e.details().to_string();
                    let kind = details
                        .split_whitespace()
                        .next()
                        .filter(|w| w.chars().all(|c| c.is_ascii_uppercase()))
                        .unwrap_or("connection")
                        .to_string();
                    *report.failed.entry(kind).or_default() += 1;
                    report.last_error = Some(details);
                    // As a client library does: a new connection (and, Sentinel-aware, a new
                    // question to the sentinels) after an error.
                    if let Some(c) = client.take() {
                        let _ = c.quit().await;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            tokio::time::sleep(WRITE_INTERVAL).await;
        }
        report.longest_pause = report.longest_pause.max(last_ack.elapsed());
        if let Some(c) = client {
            let _ = c.quit().await;
        }
        report
    }
}
