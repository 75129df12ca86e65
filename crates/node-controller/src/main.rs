//! node-controller: runs each ValkeyNode as a ConfigMap, an operator-created PVC and a
//! singleton StatefulSet or Deployment, and writes `status.workload`.

use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use crd_types::{FieldManager, ValkeyNode};
use operator_runtime::{CommonArgs, Context, RequiredCrd, controller};

/// Runs each ValkeyNode's ConfigMap, PVC and singleton StatefulSet or Deployment, and
/// writes status.workload.
#[derive(Parser)]
#[command(name = "node-controller", version)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let required = [RequiredCrd::of::<ValkeyNode>()];
    operator_runtime::run(
        "node-controller",
        FieldManager::Node.as_str(),
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
