//! pvc-resizer: grows each ValkeyNode's PVC when the spec asks for more and when
//! usage crosses the autoResize threshold, and writes `status.storage`.

use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use crd_types::{FieldManager, ValkeyNode};
use operator_runtime::{CommonArgs, Context, RequiredCrd, controller};

/// Grows ValkeyNode volumes on request and when usage crosses a threshold; writes
/// status.storage.
#[derive(Parser)]
#[command(name = "pvc-resizer", version)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let required = [RequiredCrd::of::<ValkeyNode>()];
    operator_runtime::run(
        "pvc-resizer",
        FieldManager::PvcResizer.as_str(),
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
