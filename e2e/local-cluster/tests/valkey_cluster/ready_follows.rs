//! Scenario: Ready follows Valkey: a frozen primary takes Ready away before Valkey itself
//! judges it, and Ready comes back once it serves again.

use std::time::Instant;

use agent_services::ControlClient;
use crd_types::names::statefulset_pod_name;
use e2e_kit::cluster_testing::{AckedWriter, valkey_cluster};

use e2e_kit::topology::freeze;

use crate::env::{Env, FAILOVER, FORM, SETTLE, at_valkeys_node_timeout};

/// With a writer running, shard 0's primary is frozen (SIGSTOP): it keeps its pod, its
/// connections and its Ready pod condition, and only stops answering. The cluster's Ready
/// goes False, Degraded naming the frozen member, while every other member still lists it
/// as a primary without the `fail` flag: the operator saw it first (its pulse asks each
/// member every second), not after Valkey's cluster-node-timeout (set to its 15 s here, as
/// the operator's 3 s would make it a race) and not at an idle
/// look. Thawed, the member serves again and Ready comes back True, and the operator holds
/// one connection to it (none left over from the freeze). No acknowledged write is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ready_goes_false_while_a_primary_is_frozen_and_true_after() {
    let env = Env::start().await;
    let ns = env.namespace.as_str();
    let name = "pulse";
    let access = env
        .create_ready(at_valkeys_node_timeout(valkey_cluster(name, 3, 1, true)))
        .await;
    let writer = AckedWriter::start(&access).await.unwrap();
    writer.progressed(200, SETTLE).await.unwrap();

    let status = env.ready(name, SETTLE).await;
    let primary = status.shards[0].primary.clone().unwrap();
    let ip = access.ip(&primary).unwrap().to_string();
    let id = access.node_id(&ip).unwrap();
    let control = ControlClient::new(env.cluster.control_addr.expect("the node agent runs"));
    let pod = format!("{ns}/{}", statefulset_pod_name(&primary));

    control.freeze(&pod).await.unwrap();
    let frozen = Instant::now();
    let degraded = env
        .wait(
            "Ready to go False, Degraded naming the frozen primary",
            FAILOVER,
            || freeze::degraded_naming(&env.apis, name, &primary),
        )
        .await;
    for viewer in access.members.iter().filter(|m| m.ip != ip) {
        let view = access.nodes_seen_by(&viewer.ip).unwrap();
        let line = view.iter().find(|n| n.id == id).unwrap();
        if !line.is_primary() || line.has_flag("fail") {
            panic!(
                "{} already judged the frozen {primary} when Ready went False ({} after the \
                 freeze: {}): {line:?}\ntopology-controller:\n{}",
                viewer.name,
                frozen.elapsed().as_secs_f64(),
                degraded.message,
                env.topology_controller().leader_log(&env.client, 300).await
            );
        }
    }
    eprintln!(
        "{name}: {primary} frozen, Ready False after {:?}: {}",
        frozen.elapsed(),
        degraded.message
    );

    control.thaw(&pod).await.unwrap();
    env.ready(name, FORM).await;
    env.healthy(name, &access, 3, 1).await;
    // The pulse's connection that timed out during the freeze is closed, not kept: once no
    // look is in flight the operator holds one connection (the pulse's) to the member.
    env.wait(
        &format!("topology-controller to hold one connection to {primary}"),
        SETTLE,
        || async {
            let clients = access.cli(&ip, &["CLIENT", "LIST"]);
            Ok(freeze::one_operator_connection(&clients))
        },
    )
    .await;
    writer.progressed(200, SETTLE).await.unwrap();
    env.nothing_lost(name, "through the freeze", writer, &access)
        .await;
    env.finish().await;
}
