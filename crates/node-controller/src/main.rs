//! node-controller: runs each ValkeyNode as a ConfigMap, an operator-created PVC and a
//! singleton StatefulSet or Deployment, and writes `status.workload`.
//!
//! The pure stages and builders live in the library (`node_controller::*`); [`reconcile`]
//! does the I/O around them: fetch, apply with server-side apply, publish Events and status.

mod error;
mod reconcile;

use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use crd_types::names::labels;
use crd_types::{FieldManager, ValkeyNode};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use operator_runtime::controller::{self, Guarded};
use operator_runtime::{CommonArgs, Context, RequiredCrd};

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

/// The ValkeyNode an object labelled `valkey.rs/node` belongs to (same namespace).
fn labelled_node<K: Resource>(object: K) -> Option<ObjectRef<Guarded<ValkeyNode>>> {
    let node = object.labels().get(labels::NODE)?.clone();
    let namespace = object.namespace()?;
    Some(ObjectRef::new(&node).within(&namespace))
}

async fn run(ctx: Context) -> Result<(), std::convert::Infallible> {
    // Only the operator's own objects are watched (the builders label every one of them).
    let ours = watcher::Config::default().labels(&format!(
        "{}={}",
        labels::MANAGED_BY,
        labels::MANAGED_BY_VALUE
    ));
    // Pods: readiness, IP and restarts go into status.workload as they change.
    let node_pods = watcher::Config::default().labels(labels::NODE);
    let (statefulsets, deployments, config_maps, claims, pods) = (
        ctx.touched::<StatefulSet>(ours.clone()),
        ctx.touched::<Deployment>(ours.clone()),
        ctx.touched::<ConfigMap>(ours.clone()),
        ctx.touched::<PersistentVolumeClaim>(ours),
        ctx.touched::<Pod>(node_pods),
    );
    controller::run_watching::<ValkeyNode, _, _, _, _>(
        &ctx,
        |nodes| {
            nodes
                .owns_stream(statefulsets)
                .owns_stream(deployments)
                .owns_stream(config_maps)
                // By label, not owner: a Retain claim has no owner reference.
                .watches_stream(claims, labelled_node)
                .watches_stream(pods, labelled_node)
        },
        Arc::new(()),
        reconcile::reconcile,
    )
    .await;
    Ok(())
}
