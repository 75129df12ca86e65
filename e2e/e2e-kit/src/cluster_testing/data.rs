//! A key set loaded and read back with the fred cluster client (keys of open slots over plain
//! connections).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use fred::prelude::{ClientLike, KeysInterface};
use futures::stream::{self, StreamExt, TryStreamExt};

use super::plain::Nodes;
use super::{Access, ClusterNode, open_slot_numbers};

/// `count` keys `<prefix>:<i>` with value `<prefix>-value-<i>`.
#[derive(Clone, Debug)]
pub struct DataSet {
    pub prefix: String,
    pub count: usize,
}

/// Commands in flight at once when loading or reading a data set.
const CONCURRENCY: usize = 64;
/// Bound on each command of the cluster client: a stuck client fails the load or read, never
/// hangs it.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);

impl DataSet {
    pub fn new(prefix: &str, count: usize) -> Self {
        Self {
            prefix: prefix.to_string(),
            count,
        }
    }

    pub fn key(&self, i: usize) -> String {
        format!("{}:{i}", self.prefix)
    }

    pub fn value(&self, i: usize) -> String {
        format!("{}-value-{i}", self.prefix)
    }

    /// Key indexes grouped by hash slot (MSET and MGET take keys of one slot).
    fn by_slot(&self) -> Vec<Vec<usize>> {
        let mut groups: BTreeMap<u16, Vec<usize>> = BTreeMap::new();
        for i in 0..self.count {
            let slot = fred::util::redis_keyslot(self.key(i).as_bytes());
            groups.entry(slot).or_default().push(i);
        }
        groups.into_values().collect()
    }

    /// Writes every key (MSET per slot, 64 at a time) through the cluster
    /// client; returns how long it took.
    pub async fn load(&self, access: &Access) -> Result<Duration> {
        let client = access.client().await?;
        let started = Instant::now();
        let result: Result<Vec<()>> = stream::iter(self.by_slot())
            .map(|group| {
                let client = client.clone();
                let pairs: Vec<(String, String)> = group
                    .iter()
                    .map(|&i| (self.key(i), self.value(i)))
                    .collect();
                async move {
                    tokio::time::timeout(CLIENT_TIMEOUT, client.mset(pairs))
                        .await
                        .context("MSET: timed out")?
                        .context("MSET")
                }
            })
            .buffer_unordered(CONCURRENCY)
            .try_collect()
            .await;
        let took = started.elapsed();
        let _ = tokio::time::timeout(Duration::from_secs(5), client.quit()).await;
        result.with_context(|| format!("loading {} keys", self.count))?;
        Ok(took)
    }

    /// Keys that do not read back with their value: MGET per slot through the fred cluster
    /// client, keys of open slots one by one over plain connections following MOVED and ASK
    /// (fred 10.1's own ASK handling fails against Valkey 8 and then cancels every later
    /// command of the client).
    pub async fn missing(&self, access: &Access) -> Result<Vec<String>> {
        let pairs: Vec<(String, String)> = (0..self.count)
            .map(|i| (self.key(i), self.value(i)))
            .collect();
        missing_pairs(access, pairs).await
    }

    /// Fails, naming up to ten, when any key does not read back.
    pub async fn verify(&self, access: &Access) -> Result<()> {
        let missing = self.missing(access).await?;
        if !missing.is_empty() {
            bail!(
                "{} of {} keys do not read back, e.g. {:?}",
                missing.len(),
                self.count,
                &missing[..missing.len().min(10)]
            );
        }
        Ok(())
    }
}

/// The keys of `pairs` that do not read back with their value.
///
/// Keys of stable slots are read with the fred cluster client, MGET per slot. Keys of open
/// slots (a migration cut off midway) are read one by one over plain connections that follow
/// MOVED and ASK here: fred 10.1's own ASK handling fails with "Max attempts reached" against
/// Valkey 8 and leaves the client cancelling every later command. Any error fails the read.
pub(super) async fn missing_pairs(
    access: &Access,
    pairs: Vec<(String, String)>,
) -> Result<Vec<String>> {
    let views: BTreeMap<String, Vec<ClusterNode>> = access
        .members
        .iter()
        .filter_map(|m| Some((m.name.clone(), access.nodes_seen_by(&m.ip).ok()?)))
        .collect();
    let open = open_slot_numbers(&views);
    let mut groups: BTreeMap<u16, Vec<(String, String)>> = BTreeMap::new();
    for (key, value) in pairs {
        groups
            .entry(fred::util::redis_keyslot(key.as_bytes()))
            .or_default()
            .push((key, value));
    }
    let (unstable, stable): (Vec<_>, Vec<_>) = groups
        .into_iter()
        .partition(|(slot, _)| open.contains(slot));
    let wrong = |group: &[(String, String)], values: Vec<Option<String>>| -> Vec<String> {
        group
            .iter()
            .zip(values)
            .filter(|((_, want), got)| got.as_deref() != Some(want.as_str()))
            .map(|((key, _), _)| key.clone())
            .collect()
    };

    let mut missing = Vec::new();
    if !stable.is_empty() {
        let client = access.client().await?;
        let results: Result<Vec<Vec<String>>> = stream::iter(stable)
            .map(|(slot, group)| {
                let client = client.clone();
                async move {
                    let keys: Vec<String> = group.iter().map(|(k, _)| k.clone()).collect();
                    let values: Vec<Option<String>> =
                        tokio::time::timeout(CLIENT_TIMEOUT, client.mget(keys))
                            .await
                            .with_context(|| format!("MGET in slot {slot}: timed out"))?
                            .with_context(|| format!("MGET in slot {slot}"))?;
                    Ok(wrong(&group, values))
                }
            })
            .buffer_unordered(CONCURRENCY)
            .try_collect()
            .await;
        let _ = tokio::time::timeout(Duration::from_secs(5), client.quit()).await;
        missing.extend(results?.into_iter().flatten());
    }
    if !unstable.is_empty() {
        let mut nodes = Nodes::new(access);
        let mut result = Ok(());
        'groups: for (_, group) in &unstable {
            let mut values = Vec::with_capacity(group.len());
            for (key, _) in group {
                match nodes.get(key).await {
                    Ok(value) => values.push(value),
                    Err(error) => {
                        result = Err(error);
                        break 'groups;
                    }
                }
            }
            missing.extend(wrong(group, values));
        }
        nodes.close().await;
        result?;
    }
    missing.sort();
    Ok(missing)
}
