//! Scenario: Ready follows Valkey: a frozen primary takes the group's Ready away before
//! Sentinel judges it, and Ready comes back once it serves again.

use std::time::Instant;

use agent_services::ControlClient;
use crd_types::names::statefulset_pod_name;
use e2e_kit::replication_testing::{self, GroupWriter, Route, valkey_replication};

use e2e_kit::topology::freeze;

use crate::env::{Env, FAILOVER, FORM, SETTLE, nothing_lost};

/// Sentinel's `down-after-milliseconds` here: long enough that no sentinel judges the frozen
/// primary while the test watches Ready (the default, 5 s, would race the assertion).
const DOWN_AFTER_MS: i64 = 30_000;

/// With a writer running, the primary is frozen (SIGSTOP): it keeps its pod, its
/// connections and, for a while, its Ready pod condition, and only stops answering. The
/// group's Ready goes False, Degraded naming the frozen primary, while no sentinel flags it
/// `s_down`: the operator saw it first (its pulse asks every data node `INFO replication`
/// each second), not at an idle look. Thawed, it serves again, still the primary, Ready
/// comes back True, and the operator holds one connection to it (the pulse's). No
/// acknowledged write is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ready_goes_false_while_the_primary_is_frozen_and_true_after() {
    let env = Env::start().await;
    let ns = env.namespace.as_str();
    let name = "pulse";
    let mut group = valkey_replication(name, 3, 3, false);
    group.spec.sentinel.down_after_milliseconds = DOWN_AFTER_MS;
    let access = env.create_ready(group).await;
    let primary = env.ready(name, SETTLE).await.current_primary.unwrap();
    let ip = access.ip(&primary).unwrap().to_string();
    let writer = GroupWriter::start(
        &access,
        Route::Service(access.service_ip.clone().unwrap()),
        "svc",
    );
    writer.progressed(200, SETTLE).await.unwrap();

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
    for sentinel in &access.sentinels {
        let master = access.sentinel_cli(&sentinel.ip, &["SENTINEL", "MASTER", name]);
        let flags = master
            .lines()
            .skip_while(|l| *l != "flags")
            .nth(1)
            .unwrap_or_default()
            .to_string();
        if !flags.contains("master") || flags.contains("s_down") {
            panic!(
                "{} already judged the frozen {primary} when Ready went False ({:?} after the \
                 freeze: {}): flags {flags:?}\ntopology-controller:\n{}",
                sentinel.name,
                frozen.elapsed(),
                degraded.message,
                env.cluster.controller_log("topology-controller", 300).await
            );
        }
    }
    eprintln!(
        "{name}: {primary} frozen, Ready False after {:?}: {}",
        frozen.elapsed(),
        degraded.message
    );

    control.thaw(&pod).await.unwrap();
    env.ready_agreeing(name, Some(&primary), FORM).await;
    // The pulse's connection that timed out during the freeze is closed, not kept: once no
    // look is in flight the operator holds one connection (the pulse's) to the primary.
    // The sentinels log in as `operator` too; their connections carry their names.
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
    let access = replication_testing::access(&env.apis, name).await.unwrap();
    nothing_lost(name, [writer], &access).await;
    env.finish().await;
}
