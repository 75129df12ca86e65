//! topology-controller: builds ValkeyClusters and ValkeyReplications from ValkeyNodes and
//! talks to Valkey (MEET, slots, replication, failover, Sentinel); writes `status.valkey` on
//! each member and the topology's status.

mod connect;
mod error;
mod objects;
mod reconcile;
mod secrets;
mod valkey;
mod vkr;

use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use crd_types::names::labels;
use crd_types::{FieldManager, ValkeyCluster, ValkeyNode, ValkeyReplication};
use kube::runtime::watcher;
use operator_runtime::{CommonArgs, Context, RequiredCrd, controller};

/// Builds ValkeyClusters and ValkeyReplications from ValkeyNodes and drives Valkey to match.
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
    let group_members = watcher::Config::default().labels(labels::REPLICATION);
    let (switches, wakes) = vkr::SwitchWatch::new();
    let replications = controller::watching::<ValkeyReplication>(&ctx)
        .owns(ctx.watch_api::<ValkeyNode>(), group_members)
        .reconcile_all_on(wakes);
    let (cluster_store, replication_store) = (clusters.store(), replications.store());
    controller::ready_when(&ctx, async move {
        cluster_store.wait_until_ready().await?;
        replication_store.wait_until_ready().await
    });
    tokio::join!(
        controller::run(&ctx, clusters, Arc::new(()), reconcile::reconcile),
        controller::run(&ctx, replications, Arc::new(switches), vkr::reconcile),
    );
    Ok(())
}
