//! Helpers the e2e tests share: a cluster with the operator installed, valkey-cli, Events.

use std::path::Path;
use std::process::Command;

use anyhow::Result;
use k8s_openapi::api::events::v1::Event;
use kube::Api;

use crate::operator::{self, RunningController};
use crate::{LocalCluster, Options};

/// A local cluster (with or without the node agent) with the operator installed from
/// deploy/overlays/all: controllers as local processes with their own ServiceAccounts.
pub async fn cluster_with_operator(
    run_dir: &Path,
    agent: bool,
) -> Result<(LocalCluster, Vec<RunningController>)> {
    let mut options = Options::new(run_dir);
    options.agent = agent;
    let mut cluster = LocalCluster::start(options).await?;
    let overlay = crate::repo_root().join("deploy/overlays/all");
    let controllers = operator::install(&mut cluster, &overlay).await?;
    Ok((cluster, controllers))
}

/// `valkey-cli -h <host> -p 6379 <args>`: its trimmed output, or its error text when it
/// printed nothing (so a failed assertion shows why).
pub fn valkey_cli(host: &str, args: &[&str]) -> String {
    let output = Command::new("valkey-cli")
        .args(["-h", host, "-p", "6379"])
        .args(args)
        .output()
        .expect("valkey-cli runs");
    let stdout = String::from_utf8_lossy(&output.stdout).trim().to_string();
    if stdout.is_empty() {
        return String::from_utf8_lossy(&output.stderr).trim().to_string();
    }
    stdout
}

/// Events with `reason` about the object of `kind` named `name`.
pub async fn events_about(
    events: &Api<Event>,
    kind: &str,
    name: &str,
    reason: &str,
) -> Result<Vec<Event>> {
    Ok(events
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(|e| {
            let regarding = e.regarding.as_ref();
            e.reason.as_deref() == Some(reason)
                && regarding.and_then(|r| r.name.as_deref()) == Some(name)
                && regarding.and_then(|r| r.kind.as_deref()) == Some(kind)
        })
        .collect())
}
