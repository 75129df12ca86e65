//! `kubectl valkey switchover <name> <member>`: spec.switchover with a new id, and its
//! outcome from status.switchover.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use crd_types::cluster::SwitchoverOutcome;

use crate::cli::WaitArgs;
use crate::kube_api::Session;
use crate::patches;

pub async fn run(session: &Session, name: &str, member: &str, wait: WaitArgs) -> Result<()> {
    let topology = session.topology(name).await?;
    let object = super::object(&topology);
    let target = patches::switchover_target(topology.kind(), name, member)?;
    let nodes = session.members(&topology).await?;
    if !nodes
        .iter()
        .any(|n| n.metadata.name.as_deref() == Some(member))
    {
        bail!("{object} has no member {member} (kubectl valkey status {name} lists them)");
    }
    let id = format!("kubectl-valkey-{}", super::now());
    session
        .patch_topology(&topology, &patches::switchover(target, &id))
        .await?;
    println!("{object}: switchover {id} to {member} requested (spec.switchover)");
    if !wait.wait {
        println!("Follow status.switchover (kubectl valkey status {name}).");
        return Ok(());
    }
    let start = Instant::now();
    loop {
        let now = session.topology(name).await?;
        let status = now.switchover().filter(|s| s.id == id);
        if let Some(s) = status.as_ref().filter(|s| s.outcome.is_finished()) {
            let message = if s.message.is_empty() {
                String::new()
            } else {
                format!(": {}", s.message)
            };
            if s.outcome == SwitchoverOutcome::Failed {
                bail!("switchover {id} Failed{message}");
            }
            println!("switchover {id} {:?}{message}", s.outcome);
            if let Some(primary) = now.current_primary() {
                println!("primary: {primary}");
            }
            return Ok(());
        }
        if start.elapsed() >= wait.timeout {
            let state = status
                .map(|s| format!("{:?} {}", s.outcome, s.message))
                .unwrap_or_else(|| "not picked up by the operator yet".into());
            bail!(
                "timed out after {}s waiting for switchover {id}: {}",
                wait.timeout.as_secs(),
                state.trim()
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
