//! topology-controller: builds ValkeyClusters from ValkeyNodes and talks to Valkey (MEET,
//! slots, replication, failover); writes `status.valkey` on each member and the cluster's
//! status. ValkeyReplication is observed only, until its issue.

mod connect;
mod error;
mod objects;
mod reconcile;
mod secrets;
mod valkey;

use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use crd_types::names::labels;
use crd_types::{FieldManager, ValkeyCluster, ValkeyNode, ValkeyReplication};
use kube::runtime::watcher;
use operator_runtime::{CommonArgs, Context, RequiredCrd, controller};

/// Builds ValkeyClusters from ValkeyNodes and drives Valkey to match.
#[derive(Parser)]
#[command(name = "topology-controller", version)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let required = [
        RequiredCrd::of::<ValkeyNode>(),
        RequiredCrd::of::<ValkeyCluster>(),
        RequiredCrd::of::<ValkeyReplication>(),
    ];
    operator_runtime::run(
        "topology-controller",
        FieldManager::Topology.as_str(),
        cli.common,
        &required,
        run,
    )
    .await
}

async fn run(ctx: Context) -> Result<(), std::convert::Infallible> {
    // Members: their readiness, address and revisions arrive as ValkeyNode status changes.
    let members = watcher::Config::default().labels(labels::CLUSTER);
    let clusters =
        controller::watching::<ValkeyCluster>(&ctx).owns(ctx.watch_api::<ValkeyNode>(), members);
    let replications = controller::watching::<ValkeyReplication>(&ctx);
    let (cluster_store, replication_store) = (clusters.store(), replications.store());
    controller::ready_when(&ctx, async move {
        cluster_store.wait_until_ready().await?;
        replication_store.wait_until_ready().await
    });
    tokio::join!(
        controller::run(&ctx, clusters, Arc::new(()), reconcile::reconcile),
        controller::run(&ctx, replications, Arc::new(()), controller::observe),
    );
    Ok(())
}
