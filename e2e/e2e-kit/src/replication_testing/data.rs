//! A key set written through the read-write Service and read back from it.

use anyhow::{Context, Result, bail};
use fred::prelude::ClientLike;
use fred::types::Value;

use super::writer::connect;
use super::{GroupAccess, ValkeyClient};
use crate::topology::raw;

/// Keys `<prefix>:<i>` with values `<prefix>-value-<i>`.
#[derive(Clone, Debug)]
pub struct Keys {
    pub prefix: String,
    pub count: usize,
}

impl Keys {
    fn pair(&self, i: usize) -> (String, String) {
        (
            format!("{}:{i}", self.prefix),
            format!("{}-value-{i}", self.prefix),
        )
    }
}

impl GroupAccess {
    async fn primary_client(&self) -> Result<ValkeyClient> {
        let ip = self
            .service_ip
            .as_deref()
            .context("the read-write Service has no ClusterIP")?;
        connect(self.tls.as_ref(), ip, 6379, Some(&self.password)).await
    }

    /// Writes `count` keys through the read-write Service (MSET by 200), then waits until
    /// every replica has them (WAIT).
    pub async fn load(&self, prefix: &str, count: usize) -> Result<Keys> {
        let keys = Keys {
            prefix: prefix.to_string(),
            count,
        };
        let client = self.primary_client().await?;
        for start in (0..count).step_by(200) {
            let mut args: Vec<Value> = Vec::new();
            for i in start..(start + 200).min(count) {
                let (k, v) = keys.pair(i);
                args.push(k.into());
                args.push(v.into());
            }
            raw::<Value>(&client, "MSET", args).await?;
        }
        let replicas = self.data.len().saturating_sub(1) as i64;
        let acked: i64 = raw(&client, "WAIT", vec![replicas.into(), 10_000.into()]).await?;
        let _ = client.quit().await;
        if acked < replicas {
            bail!("only {acked} of {replicas} replicas acknowledged the keys");
        }
        Ok(keys)
    }

    /// Reads every key back through the read-write Service.
    pub async fn verify(&self, keys: &Keys) -> Result<()> {
        let client = self.primary_client().await?;
        let mut missing = Vec::new();
        for start in (0..keys.count).step_by(200) {
            let range: Vec<usize> = (start..(start + 200).min(keys.count)).collect();
            let args: Vec<Value> = range.iter().map(|i| keys.pair(*i).0.into()).collect();
            let got: Vec<Option<String>> = raw(&client, "MGET", args).await?;
            for (i, value) in range.into_iter().zip(got) {
                if value.as_deref() != Some(keys.pair(i).1.as_str()) {
                    missing.push(keys.pair(i).0);
                }
            }
        }
        let _ = client.quit().await;
        if !missing.is_empty() {
            bail!(
                "{} of {} keys missing, e.g. {:?}",
                missing.len(),
                keys.count,
                &missing[..missing.len().min(10)]
            );
        }
        Ok(())
    }
}
