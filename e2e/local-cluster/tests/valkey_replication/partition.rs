//! Scenario 7: a primary cut off from its replicas and sentinels stops taking writes
//! (min-replicas-to-write), Sentinel fails over on the majority side, and after the heal the
//! old primary is a replica.

use std::time::Instant;

use agent_services::ControlClient;
use crd_types::names::statefulset_pod_name;
use e2e_kit::replication_testing::{self, GroupWriter, Route, valkey_replication};

use crate::env::{Env, FAILOVER, SETTLE, nothing_lost};

/// With two writers running, the primary's pod is cut from every other member's pod (the
/// agent's service proxy tears their connections down and refuses new ones): the primary
/// refuses writes once no replica acknowledged within min-replicas-max-lag, Sentinel
/// promotes a replica, the read-write Service follows; healed, the old primary is a replica
/// of the new one. No acknowledged write is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_primary_cut_off_stops_taking_writes_and_rejoins_as_replica() {
    let env = Env::start().await;
    let ns = env.namespace.as_str();
    let name = "cut";
    let access = env
        .create_ready(valkey_replication(name, 3, 3, false))
        .await;
    let old = env.ready(name, SETTLE).await.current_primary.unwrap();
    let old_ip = access.ip(&old).unwrap().to_string();
    let writers = [
        GroupWriter::start(
            &access,
            Route::Service(access.service_ip.clone().unwrap()),
            "svc",
        ),
        GroupWriter::start(
            &access,
            Route::Sentinel(access.sentinel_service_ip.clone().unwrap()),
            "snt",
        ),
    ];
    for w in &writers {
        w.progressed(200, SETTLE).await.unwrap();
    }

    let control = ControlClient::new(env.cluster.control_addr.unwrap());
    let primary_pod = format!("{ns}/{}", statefulset_pod_name(&old));
    let others: Vec<String> = access
        .data
        .iter()
        .chain(&access.sentinels)
        .filter(|m| m.name != old)
        .map(|m| format!("{ns}/{}", statefulset_pod_name(&m.name)))
        .collect();
    for other in &others {
        control.cut(&primary_pod, other).await.unwrap();
    }
    let cut = Instant::now();
    // The test reaches the old primary directly (it is not cut from the test).
    let refusal = env
        .wait(&format!("{old} to refuse writes"), FAILOVER, || async {
            let answer = access.cli(&old_ip, &["SET", "cut:probe", "x"]);
            Ok(
                if answer.starts_with("NOREPLICAS") || answer.starts_with("READONLY") {
                    Ok(answer)
                } else {
                    Err(format!("SET on {old} answers {answer}"))
                },
            )
        })
        .await;
    eprintln!(
        "{name}: {old} refuses writes {:?} after the cut: {refusal}",
        cut.elapsed()
    );
    let new = env
        .wait(
            "Sentinel to fail over on the majority side",
            FAILOVER,
            || async {
                let status = env.apis.groups.get(name).await?.status.unwrap_or_default();
                Ok(match status.current_primary {
                    Some(p) if p != old => Ok(p),
                    other => Err(format!("currentPrimary is {other:?}")),
                })
            },
        )
        .await;
    eprintln!(
        "{name}: {new} named primary {:?} after the cut",
        cut.elapsed()
    );
    for w in &writers {
        w.progressed(100, SETTLE).await.unwrap();
    }

    control.heal_all().await.unwrap();
    let healed = Instant::now();
    env.ready_agreeing(name, Some(&new), FAILOVER).await;
    eprintln!(
        "{name}: Ready with {old} a replica {:?} after the heal",
        healed.elapsed()
    );
    let access = replication_testing::access(&env.apis, name).await.unwrap();
    for writer in &writers {
        writer.progressed(100, SETTLE).await.unwrap();
    }
    nothing_lost(name, writers, &access).await;
    env.finish().await;
}
