//! service-controller: gives each ValkeyNode its own ClusterIP Service, the stable address
//! the node announces, and writes `status.endpoint`.

use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use crd_types::{FieldManager, ValkeyNode};
use operator_runtime::{CommonArgs, Context, RequiredCrd, controller};

/// Gives each ValkeyNode its own ClusterIP Service and writes status.endpoint.
#[derive(Parser)]
#[command(name = "service-controller", version)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let required = [RequiredCrd::of::<ValkeyNode>()];
    operator_runtime::run(
        "service-controller",
        FieldManager::Service.as_str(),
        cli.common,
        &required,
        run,
    )
    .await
}

async fn run(ctx: Context) -> Result<(), std::convert::Infallible> {
    // Domain logic arrives with its issue; until then every change is observed and counted.
    controller::run_watching::<ValkeyNode, _, _, _, _>(
        &ctx,
        |nodes| nodes,
        Arc::new(()),
        controller::observe,
    )
    .await;
    Ok(())
}
