//! topology-controller: builds ValkeyClusters and ValkeyReplications from ValkeyNodes and
//! talks to Valkey (MEET, slots, replication, failover, Sentinel); writes `status.valkey` on
//! each member and the topology's status.

mod driver;

use driver::cluster::moved::MovedCounters;
use driver::cluster::reconcile;
use driver::replication;
use driver::shared::pipeline;
use driver::shared::stages::Common;
use driver::shared::{password_look, pulse};

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use crd_types::names::labels;
use crd_types::{FieldManager, ValkeyCluster, ValkeyNode, ValkeyReplication};
use kube::runtime::watcher;
use operator_runtime::controller::Guarded;
use operator_runtime::{CommonArgs, Context, RequiredCrd, controller};
use topology_controller::shared::cert_expiry::ExpiryBook;

/// Builds ValkeyClusters and ValkeyReplications from ValkeyNodes and drives Valkey to match.
#[derive(Parser)]
#[command(name = "topology-controller", version)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,

    /// Seconds between two looks at a Ready ValkeyCluster or ValkeyReplication with nothing
    /// to do: a backstop, as the watches and the pulse wake its reconcile on every change.
    #[arg(long, env = "IDLE_LOOK_SECONDS", default_value_t = 300)]
    idle_look_seconds: u64,

    /// Milliseconds between two beats of the pulse, which asks every cluster member
    /// CLUSTER INFO and INFO replication (a replication group's data nodes INFO
    /// replication) and wakes the reconciles on a change; 0 turns it off (Valkey's own
    /// changes then show at the idle look).
    #[arg(long, env = "PULSE_MILLIS", default_value_t = 1000)]
    pulse_millis: u64,

    /// Whether a ValkeyCluster primary whose server Kubernetes shows not running (its
    /// container waiting to restart after it exited) is replaced by its most caught-up
    /// replica with CLUSTER FAILOVER FORCE at once; false leaves every unplanned failover to
    /// Valkey's own election after cluster-node-timeout.
    #[arg(long, env = "FORCED_FAILOVER", default_value_t = true, action = clap::ArgAction::Set)]
    forced_failover: bool,
}

/// What the command line sets for the reconciles.
#[derive(Clone)]
struct Settings {
    idle_look: Duration,
    pulse_period: Duration,
    forced_failover: bool,
    /// Where topology-controller runs: members' network policies let its pods in.
    operator_namespace: String,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let settings = Settings {
        idle_look: Duration::from_secs(cli.idle_look_seconds),
        pulse_period: Duration::from_millis(cli.pulse_millis),
        forced_failover: cli.forced_failover,
        operator_namespace: cli.common.lease_namespace.clone(),
    };
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
        |ctx| run(ctx, settings),
    )
    .await
}

async fn run(ctx: Context, settings: Settings) -> Result<(), std::convert::Infallible> {
    let Settings {
        idle_look,
        pulse_period,
        forced_failover,
        operator_namespace,
    } = settings;
    // Members: their readiness, address and revisions arrive as ValkeyNode status changes.
    // Guarded: a member that does not deserialize still wakes its topology, and never
    // breaks the watch.
    let members = watcher::Config::default().labels(labels::CLUSTER);
    // Valkey's own changes (a failover, a member failing) wake them through the pulse.
    let (pulse, beats) = pulse::Pulse::new(pulse::Kind::Cluster, pulse_period);
    // A changed default password Secret, looked at (not watched).
    let (password_look, looks) = password_look::PasswordLook::new();
    let clusters = controller::watching::<ValkeyCluster>(&ctx)
        .owns_stream(ctx.touched::<Guarded<ValkeyNode>>(members))
        .reconcile_all_on(futures::stream::select(beats, looks));
    let group_members = watcher::Config::default().labels(labels::REPLICATION);
    // A group's: the sentinels announcing a failover, and the data nodes' pulse.
    let (switches, wakes) = replication::SwitchWatch::new();
    let (group_pulse, group_beats) = pulse::Pulse::new(pulse::Kind::Replication, pulse_period);
    let (group_password_look, group_looks) = password_look::PasswordLook::new();
    let group_wakes = futures::stream::select(group_beats, group_looks);
    let replications = controller::watching::<ValkeyReplication>(&ctx)
        .owns_stream(ctx.touched::<Guarded<ValkeyNode>>(group_members))
        .reconcile_all_on(futures::stream::select(wakes, group_wakes));
    let (cluster_store, replication_store) = (clusters.store(), replications.store());
    // Both kinds' reconciles record their certificates' expiry here; /metrics reads it.
    let certificates = ExpiryBook::default();
    let figures = driver::figures::register(
        &ctx.metrics,
        cluster_store.clone(),
        replication_store.clone(),
        certificates.clone(),
    );
    if let Err(error) = figures {
        tracing::warn!(%error, "the topologies' figures are not on /metrics");
    }
    let moved = MovedCounters::new();
    if let Err(error) = moved.register(&ctx.metrics) {
        tracing::warn!(%error, "the slots and keys moved are not on /metrics");
    }
    controller::ready_when(&ctx, async move {
        cluster_store.wait_until_ready().await?;
        replication_store.wait_until_ready().await
    });
    tokio::join!(
        controller::run(
            &ctx,
            clusters,
            Arc::new(reconcile::Shared {
                common: Common {
                    pulse,
                    password_look,
                    idle_look,
                    operator_namespace: operator_namespace.clone(),
                    user_checks: Default::default(),
                    certificates: certificates.clone(),
                },
                forced_failover,
                attempts: Default::default(),
                moved,
            }),
            pipeline::reconcile::<ValkeyCluster>
        ),
        controller::run(
            &ctx,
            replications,
            Arc::new(replication::Shared {
                common: Common {
                    pulse: group_pulse,
                    password_look: group_password_look,
                    idle_look,
                    operator_namespace,
                    user_checks: Default::default(),
                    certificates,
                },
                switches,
            }),
            pipeline::reconcile::<ValkeyReplication>
        ),
    );
    Ok(())
}
