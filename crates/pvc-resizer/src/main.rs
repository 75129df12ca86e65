//! pvc-resizer: the one owner of every ValkeyNode claim's size after its creation. It grows
//! the claim to `persistence.size` when the spec asks for more and, with
//! `persistence.autoResize`, when the volume's usage crosses the threshold; it writes
//! `status.storage` and the StorageReady condition.
//!
//! Usage comes from each kubelet's `/stats/summary`, read directly with the controller's own
//! ServiceAccount token and only `nodes/stats` (never `nodes/proxy`), one call per Node per
//! interval ([`usage`]). The pure stages are in the library (`pvc_resizer::*`); [`reconcile`]
//! does the I/O around them.

mod error;
mod kubelet;
mod metrics;
mod reconcile;
mod usage;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use crd_types::names::labels;
use crd_types::{FieldManager, ValkeyNode};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use operator_runtime::controller::{self, Guarded};
use operator_runtime::{CommonArgs, Context, RequiredCrd};

/// Grows ValkeyNode volumes when the spec asks for more and when usage crosses the
/// autoResize threshold; writes status.storage.
#[derive(Parser)]
#[command(name = "pvc-resizer", version)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
    /// Seconds between two reads of a kubelet's /stats/summary (only Nodes running a
    /// ValkeyNode with autoResize are read).
    #[arg(long, env = "STATS_INTERVAL", default_value_t = 60)]
    stats_interval: u64,
    /// CA bundle (PEM) that signs the kubelets' serving certificates [default: the API
    /// server's CA, right for kubelets with serverTLSBootstrap].
    #[arg(long, env = "KUBELET_CA_FILE")]
    kubelet_ca_file: Option<PathBuf>,
    /// Do not verify the kubelets' serving certificates (self-signed kubelet certificates).
    /// The ServiceAccount token is then sent to whoever answers at a Node's address.
    #[arg(long, env = "KUBELET_INSECURE_SKIP_TLS_VERIFY")]
    kubelet_insecure_skip_tls_verify: bool,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let required = [RequiredCrd::of::<ValkeyNode>()];
    let kubelets = kubelet::Settings {
        ca_file: cli.kubelet_ca_file,
        insecure_skip_tls_verify: cli.kubelet_insecure_skip_tls_verify,
    };
    let interval = Duration::from_secs(cli.stats_interval.max(1));
    operator_runtime::run(
        "pvc-resizer",
        FieldManager::PvcResizer.as_str(),
        cli.common,
        &required,
        move |ctx| run(ctx, kubelets, interval),
    )
    .await
}

/// The ValkeyNode an object labelled `valkey.rs/node` belongs to (same namespace).
fn labelled_node<K: Resource>(object: K) -> Option<ObjectRef<Guarded<ValkeyNode>>> {
    let node = object.labels().get(labels::NODE)?.clone();
    let namespace = object.namespace()?;
    Some(ObjectRef::new(&node).within(&namespace))
}

async fn run(ctx: Context, kubelets: kubelet::Settings, interval: Duration) -> Result<(), String> {
    let metrics = metrics::ResizerMetrics::register(&ctx.metrics)
        .map_err(|e| format!("cannot register the metrics: {e}"))?;
    let kubelets = kubelet::Kubelets::new(kubelets)
        .await
        .map_err(|e| format!("cannot build the kubelet client: {e}"))?;
    let nodes = controller::watching::<ValkeyNode>(&ctx);
    let store = nodes.store();
    let book = Arc::new(usage::Book::default());
    let (wake, woken) = futures::channel::mpsc::unbounded();
    let reader = usage::Reader {
        client: ctx.client.clone(),
        kubelets,
        nodes: store.clone(),
        book: book.clone(),
        metrics: metrics.clone(),
        wake,
        interval,
        readiness: ctx.readiness.clone(),
        scope: ctx.scope.clone(),
    };
    let reader = tokio::spawn(reader.run(ctx.shutdown.clone()));
    let ours = watcher::Config::default().labels(&format!(
        "{}={}",
        labels::MANAGED_BY,
        labels::MANAGED_BY_VALUE
    ));
    let claims = ctx.touched::<PersistentVolumeClaim>(ours);
    let nodes = nodes
        // By label, not owner: a Retain claim has no owner reference.
        .watches_stream(claims, labelled_node)
        .reconcile_on(woken);
    controller::ready_when(&ctx, async move { store.wait_until_ready().await });
    let data = Arc::new(reconcile::Data { book, metrics });
    controller::run(&ctx, nodes, data, reconcile::reconcile).await;
    reader.abort();
    Ok(())
}
