//! service-controller: gives each ValkeyNode its own ClusterIP Service, the stable address
//! the node announces, and writes `status.endpoint`.
//!
//! A reconcile is five stages (see [`reconcile`]); the pure ones are their own modules:
//! - [`build`]: what to do with the node's Service, from the live one;
//! - [`service`]: the desired Service;
//! - [`report`]: the status and Events to publish, built on [`status`] (`status.endpoint`
//!   and the `EndpointReady` condition) and [`events`] (the typed Event reasons);
//! - [`reconcile`]: the I/O stages (fetch, apply, publish) around them.

mod build;
mod error;
mod events;
mod reconcile;
mod report;
mod service;
mod status;

use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use crd_types::names::labels;
use crd_types::{FieldManager, ValkeyNode};
use k8s_openapi::api::core::v1::Service;
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
    // Owning the Services means a deleted or edited Service reconciles its ValkeyNode at
    // once (and gets recreated or put back); only the operator's Services are watched.
    let ours = watcher::Config::default().labels(&format!(
        "{}={}",
        labels::MANAGED_BY,
        labels::MANAGED_BY_VALUE
    ));
    let services = ctx.touched::<Service>(ours);
    controller::run_watching::<ValkeyNode, _, _, _, _>(
        &ctx,
        |nodes| nodes.owns_stream(services),
        Arc::new(()),
        reconcile::reconcile,
    )
    .await;
    Ok(())
}
