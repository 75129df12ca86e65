//! service-controller: gives each ValkeyNode its own ClusterIP Service, the stable address
//! the node announces, and writes `status.endpoint`.
//!
//! - [`service`]: the desired Service (pure);
//! - [`status`]: `status.endpoint` and the `EndpointReady` condition (pure);
//! - [`reconcile`]: fetch, apply with server-side apply, Events, status.

mod error;
mod reconcile;
mod service;
mod status;

use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use crd_types::names::labels;
use crd_types::{FieldManager, ValkeyNode};
use k8s_openapi::api::core::v1::Service;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::watcher;
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
    let reporter = Reporter {
        controller: ctx.name.into(),
        instance: std::env::var("POD_NAME").ok(),
    };
    let state = reconcile::State {
        recorder: Recorder::new(ctx.client.clone(), reporter),
    };
    // Owning the Services means a deleted or edited Service reconciles its ValkeyNode at
    // once (and gets recreated or put back); only the operator's Services are watched.
    let services = ctx.watch_api::<Service>();
    let ours = watcher::Config::default().labels(&format!(
        "{}={}",
        labels::MANAGED_BY,
        labels::MANAGED_BY_VALUE
    ));
    controller::run_watching::<ValkeyNode, _, _, _, _>(
        &ctx,
        |nodes| nodes.owns(services, ours),
        Arc::new(state),
        reconcile::reconcile,
    )
    .await;
    Ok(())
}
