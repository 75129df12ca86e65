//! topology-controller: builds ValkeyClusters and ValkeyReplications from ValkeyNodes and
//! talks to Valkey (MEET, slots, replication, failover, sentinel); writes `status.valkey` on
//! each node and the topologies' status.

use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use crd_types::{FieldManager, ValkeyCluster, ValkeyNode, ValkeyReplication};
use kube::runtime::{Controller, watcher};
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
    let clusters = Controller::new(ctx.watch_api::<ValkeyCluster>(), watcher::Config::default());
    let replications = Controller::new(
        ctx.watch_api::<ValkeyReplication>(),
        watcher::Config::default(),
    );
    let (cluster_store, replication_store) = (clusters.store(), replications.store());
    controller::ready_when(&ctx, async move {
        cluster_store.wait_until_ready().await?;
        replication_store.wait_until_ready().await
    });
    // Domain logic arrives with its issue; until then every change is observed and counted.
    tokio::join!(
        controller::run(&ctx, clusters, Arc::new(()), controller::observe),
        controller::run(&ctx, replications, Arc::new(()), controller::observe),
    );
    Ok(())
}
