//! A background writer that records every write a replica acknowledged (`WAIT 1`).

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::Access;
use super::data::missing_pairs;
use super::plain::{Nodes, redirect_ip};
use crate::topology::{WriterCount, raw};

/// `WAIT 1 <this>`: how long a write waits for a replica's acknowledgement.
const WAIT_TIMEOUT_MS: i64 = 1000;
/// Pause between two writes of a stream: keeps the writer from starving the 2-core machine.
const WRITE_INTERVAL: Duration = Duration::from_millis(5);

/// What one write stream did.
#[derive(Clone, Debug, Default)]
pub struct StreamReport {
    /// The shard whose slots the stream's hash tag fell in when the writer started.
    pub shard: u32,
    /// The hash tag of every key of the stream (so all its keys share one slot).
    pub tag: String,
    pub slot: u16,
    /// Writes a replica acknowledged (`WAIT 1` answered >= 1): key and value.
    pub acked: Vec<(String, String)>,
    /// Writes the primary took but no replica acknowledged in time.
    pub unacknowledged: u64,
    /// Writes that failed (or whose fate is unknown: the reply was lost).
    pub failed: u64,
    /// The longest time without an acknowledged write, start and stop included.
    pub longest_pause: Duration,
    /// The longest time from the end of an accepted write to the primary accepting the next
    /// `SET` (acknowledged by a replica or not; the `WAIT` after it not counted): how long
    /// the shard refused writes. After a failover with one replica per shard no replica can
    /// acknowledge until the old primary is back, so this is the shorter figure.
    pub longest_refusal: Duration,
    pub last_error: Option<String>,
}

/// What an [`AckedWriter`] did, per stream.
#[derive(Clone, Debug, Default)]
pub struct WriterReport {
    pub streams: Vec<StreamReport>,
}

impl WriterReport {
    /// Acknowledged writes in all.
    pub fn acked(&self) -> usize {
        self.streams.iter().map(|s| s.acked.len()).sum()
    }

    /// Acknowledged writes that do not read back with their value.
    pub async fn lost(&self, access: &Access) -> Result<Vec<String>> {
        let pairs = self.streams.iter().flat_map(|s| s.acked.clone()).collect();
        missing_pairs(access, pairs).await
    }

    /// Per shard: acknowledged, unacknowledged and failed writes, the longest pause.
    pub fn summary(&self) -> String {
        self.streams
            .iter()
            .map(|s| {
                format!(
                    "shard {} (slot {}): {} acknowledged, {} unacknowledged, {} failed, longest pause {:?}, longest refusal {:?}{}",
                    s.shard,
                    s.slot,
                    s.acked.len(),
                    s.unacknowledged,
                    s.failed,
                    s.longest_pause,
                    s.longest_refusal,
                    s.last_error
                        .as_ref()
                        .map(|e| format!(", last error: {e}"))
                        .unwrap_or_default()
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// A background writer: one stream per shard (keys `{tag}:<n>` whose hash tag falls in that
/// shard's slots), each writing a new key every few milliseconds with `SET` and then
/// `WAIT 1 1000` on the same connection, and recording the write as acknowledged only when
/// `WAIT` answered >= 1, i.e. a replica has it.
///
/// It routes by itself rather than through the fred cluster client: `WAIT` counts the
/// replicas that have the writes of *its own connection*, so it must follow the `SET` on the
/// very connection that carried it, which a multiplexed cluster client that re-sends on
/// redirections and reconnections cannot promise. Each stream keeps one plain connection per
/// member, never reconnected behind its back, and finds a slot's primary from
/// `CLUSTER NODES`, following MOVED and ASK. A stream thus needs a replica in its shard.
pub struct AckedWriter {
    count: WriterCount,
    tasks: Vec<tokio::task::JoinHandle<StreamReport>>,
}

/// The first `w<n>` whose hash slot `owns` accepts.
pub fn tag_for(owns: impl Fn(u16) -> bool) -> Option<(String, u16)> {
    (0..1_000_000).find_map(|n| {
        let tag = format!("w{n}");
        let slot = fred::util::redis_keyslot(tag.as_bytes());
        owns(slot).then_some((tag, slot))
    })
}

impl AckedWriter {
    /// Starts one stream per primary that owns slots now.
    pub async fn start(access: &Access) -> Result<Self> {
        let ip = access.live_ip().context("no member answers PING")?;
        let view = access.nodes_seen_by(ip)?;
        let count = WriterCount::default();
        let mut tasks = Vec::new();
        for primary in view.iter().filter(|n| n.is_primary() && n.slot_count() > 0) {
            let (tag, slot) = tag_for(|slot| primary.owns(slot))
                .with_context(|| format!("no hash tag for the slots of {}", primary.id))?;
            let shard = access
                .member_at(&primary.ip)
                .map(|m| m.shard)
                .with_context(|| format!("no member serves on {}", primary.ip))?;
            let stream = Stream {
                nodes: Nodes::new(access),
                report: StreamReport {
                    shard,
                    tag,
                    slot,
                    ..Default::default()
                },
                set_accepted: None,
            };
            tasks.push(tokio::spawn(stream.run(count.clone())));
        }
        if tasks.is_empty() {
            bail!("no primary owns slots: nothing to write to");
        }
        Ok(Self { count, tasks })
    }

    /// Acknowledged writes so far.
    pub fn acked(&self) -> usize {
        self.count.acked()
    }

    /// Waits until `more` further writes have been acknowledged.
    pub async fn progressed(&self, more: usize, timeout: Duration) -> Result<()> {
        self.count.progressed(more, timeout).await
    }

    /// Stops every stream and returns what they did.
    pub async fn stop(self) -> Result<WriterReport> {
        self.count.stop();
        let mut streams = Vec::new();
        for task in self.tasks {
            streams.push(task.await.context("a writer stream panicked")?);
        }
        Ok(WriterReport { streams })
    }
}

struct Stream {
    nodes: Nodes,
    report: StreamReport,
    /// When the primary accepted the last write's `SET`.
    set_accepted: Option<Instant>,
}

enum Outcome {
    Acked,
    NotReplicated,
    Moved(String),
    Ask(String),
    Failed(String),
}

impl Stream {
    async fn run(mut self, count: WriterCount) -> StreamReport {
        let started = Instant::now();
        let mut last_ack = started;
        let mut last_write_end = started;
        let mut owner: Option<String> = None;
        let mut seq: u64 = 0;
        while !count.stopping() {
            let ip = match owner.clone() {
                Some(ip) => ip,
                None => match self.nodes.owner(self.report.slot).await {
                    Ok(ip) => {
                        owner = Some(ip.clone());
                        ip
                    }
                    Err(error) => {
                        self.report.last_error = Some(format!("{error:#}"));
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        continue;
                    }
                },
            };
            let key = format!("{{{}}}:{seq}", self.report.tag);
            let value = format!("{}-{seq}", self.report.tag);
            seq += 1;
            let mut outcome = self.write(&ip, &key, &value, false).await;
            if let Outcome::Ask(target) = outcome {
                outcome = self.write(&target, &key, &value, true).await;
            }
            if matches!(outcome, Outcome::Acked | Outcome::NotReplicated) {
                let set_accepted = self.set_accepted.unwrap_or(last_write_end);
                self.report.longest_refusal = self
                    .report
                    .longest_refusal
                    .max(set_accepted.saturating_duration_since(last_write_end));
                last_write_end = Instant::now();
            }
            match outcome {
                Outcome::Acked => {
                    let now = Instant::now();
                    self.report.longest_pause = self.report.longest_pause.max(now - last_ack);
                    last_ack = now;
                    self.report.acked.push((key, value));
                    count.add_acked();
                }
                Outcome::NotReplicated => self.report.unacknowledged += 1,
                Outcome::Moved(target) => owner = Some(target),
                Outcome::Ask(_) => {
                    self.report.failed += 1;
                    owner = None;
                }
                Outcome::Failed(error) => {
                    self.report.failed += 1;
                    self.report.last_error = Some(error);
                    owner = None;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            tokio::time::sleep(WRITE_INTERVAL).await;
        }
        self.report.longest_pause = self.report.longest_pause.max(last_ack.elapsed());
        self.report.longest_refusal = self.report.longest_refusal.max(last_write_end.elapsed());
        self.nodes.close().await;
        self.report
    }

    /// SET then WAIT 1 on one connection to `ip` (after ASKING when `asking`).
    async fn write(&mut self, ip: &str, key: &str, value: &str, asking: bool) -> Outcome {
        let client = match self.nodes.connection(ip).await {
            Ok(client) => client,
            Err(error) => return Outcome::Failed(format!("{error:#}")),
        };
        if asking && let Err(error) = raw::<fred::types::Value>(&client, "ASKING", vec![]).await {
            self.nodes.drop_connection(ip).await;
            return Outcome::Failed(format!("ASKING on {ip}: {error}"));
        }
        let set = raw::<fred::types::Value>(
            &client,
            "SET",
            vec![key.to_string().into(), value.to_string().into()],
        )
        .await;
        if let Err(error) = set {
            let details = error.details().to_string();
            if details.starts_with("MOVED")
                && let Some(target) = redirect_ip(&details)
            {
                return Outcome::Moved(target);
            }
            if details.starts_with("ASK")
                && let Some(target) = redirect_ip(&details)
            {
                return Outcome::Ask(target);
            }
            self.nodes.drop_connection(ip).await;
            return Outcome::Failed(format!("SET on {ip}: {error}"));
        }
        self.set_accepted = Some(Instant::now());
        match raw::<i64>(&client, "WAIT", vec![1.into(), WAIT_TIMEOUT_MS.into()]).await {
            Ok(n) if n >= 1 => Outcome::Acked,
            Ok(_) => Outcome::NotReplicated,
            Err(error) => {
                self.nodes.drop_connection(ip).await;
                Outcome::Failed(format!("WAIT on {ip}: {error}"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_tags_land_where_asked() {
        let (tag, slot) = tag_for(|s| (12000..13000).contains(&s)).unwrap();
        assert!((12000..13000).contains(&slot));
        let key = format!("{{{tag}}}:17");
        assert_eq!(fred::util::redis_keyslot(key.as_bytes()), slot);
    }
}
