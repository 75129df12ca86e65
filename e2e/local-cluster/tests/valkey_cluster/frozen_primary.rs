//! Scenario: at the operator's cluster-node-timeout (3 s, not Valkey's 15 s) a frozen
//! primary is failed over by Valkey, while one that is only slow is never failed over.

use std::time::{Duration, Instant};

use agent_services::ControlClient;
use crd_types::names::statefulset_pod_name;
use e2e_kit::cluster_testing::{Access, AckedWriter, DataSet, valkey_cluster};

use crate::env::{Env, FAILOVER, FORM, SETTLE};

/// The operator's default every member runs (topology-controller's `member_config`).
const NODE_TIMEOUT: &str = "3000";

/// With a writer running, shard 0's primary is frozen (SIGSTOP) and stays frozen: every
/// member runs the operator's cluster-node-timeout, the others flag the primary `fail` and
/// its replica wins Valkey's election, while the frozen pod keeps its Ready condition (its
/// probe needs two misses 5 s apart). Thawed, the old primary rejoins as a replica of its
/// successor and no acknowledged write is lost. The time to the successor's first write is
/// printed; docs/benchmarks.md (`bench-cluster node-timeout`) has the figures.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_frozen_primary_is_failed_over_at_the_operators_node_timeout() {
    let env = Env::start().await;
    let ns = env.namespace.as_str();
    let name = "frozen";
    let access = env.create_ready(valkey_cluster(name, 3, 1, true)).await;
    for m in &access.members {
        assert_eq!(
            access.admin_cli(&m.ip, &["CONFIG", "GET", "cluster-node-timeout"]),
            format!("cluster-node-timeout\n{NODE_TIMEOUT}"),
            "{}",
            m.name
        );
        assert_eq!(
            access.admin_cli(&m.ip, &["CONFIG", "GET", "busy-reply-threshold"]),
            "busy-reply-threshold\n2000",
            "{}",
            m.name
        );
    }
    let writer = AckedWriter::start(&access).await.unwrap();
    writer.progressed(200, SETTLE).await.unwrap();

    let (old, successor) = env.primary_and_successor(name, &access, 0).await;
    let control = ControlClient::new(env.cluster.control_addr.expect("the node agent runs"));
    let pod = format!("{ns}/{}", statefulset_pod_name(&old.name));
    let shard_key = owned_key(&access, &old.ip, "frozen-probe-");
    control.freeze(&pod).await.unwrap();
    let frozen = Instant::now();
    // The successor serves once Valkey's election made it primary with the slots.
    env.wait(
        &format!("{} to accept a write to shard 0", successor.name),
        FAILOVER,
        || async {
            let reply = access.cli(&successor.ip, &["SET", &shard_key, "v"]);
            Ok(if reply == "OK" { Ok(()) } else { Err(reply) })
        },
    )
    .await;
    let took = frozen.elapsed();
    for viewer in access.members.iter().filter(|m| m.ip != old.ip) {
        let view = access.nodes_seen_by(&viewer.ip).unwrap();
        let line = view.iter().find(|n| n.id == old.id).unwrap();
        assert!(
            line.has_flag("fail"),
            "{} does not flag the frozen {} failed, yet {} took a write: {line:?}",
            viewer.name,
            old.name,
            successor.name
        );
    }
    eprintln!(
        "{name}: {} frozen, {} accepted a write {took:?} after",
        old.name, successor.name
    );

    control.thaw(&pod).await.unwrap();
    env.wait_rejoined(&access, &old.name, &old.id, &successor.name, &successor.id)
        .await;
    env.ready(name, FORM).await;
    env.healthy(name, &access, 3, 1).await;
    env.rejoined_as_replica(&access, &old.name, &old.id, &successor.id)
        .await;
    writer.progressed(200, SETTLE).await.unwrap();
    env.nothing_lost(name, "through the freeze", writer, &access)
        .await;
    env.finish().await;
}

/// A primary stopped for 1 s of every 2 (SIGSTOP, SIGCONT) for 30 s, while another primary
/// runs a 30 s BGSAVE and the third a 5 s script, and a writer runs: slow, never silent for
/// the node timeout (the script's server serves its peers again after the operator's
/// 2 s busy-reply-threshold; at Valkey's 5 s it would be flagged `fail`). No member starts
/// an election, every shard keeps its primary, and no acknowledged write is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slow_but_alive_primary_is_never_failed_over() {
    const STOPPED: Duration = Duration::from_secs(1);
    const LOAD: Duration = Duration::from_secs(30);
    let env = Env::start().await;
    let ns = env.namespace.as_str();
    let name = "slow";
    let access = env.create_ready(valkey_cluster(name, 3, 1, true)).await;
    DataSet::new("slow", 30_000).load(&access).await.unwrap();
    let before = env.ready(name, SETTLE).await;
    let primaries: Vec<Option<String>> = before.shards.iter().map(|s| s.primary.clone()).collect();
    let elections = access.elections_started();
    let writer = AckedWriter::start(&access).await.unwrap();
    writer.progressed(200, SETTLE).await.unwrap();

    let stopped = primaries[0].clone().unwrap();
    let saving_ip = access
        .ip(primaries[1].as_ref().unwrap())
        .unwrap()
        .to_string();
    access.start_slow_save(&saving_ip, LOAD).unwrap();
    let scripting_ip = access
        .ip(primaries[2].as_ref().unwrap())
        .unwrap()
        .to_string();
    let script = {
        let (access, ip) = (access.clone(), scripting_ip.clone());
        tokio::task::spawn_blocking(move || access.cli(&ip, &["EVAL", BUSY_FIVE_SECONDS, "0"]))
    };
    let control = ControlClient::new(env.cluster.control_addr.expect("the node agent runs"));
    let pod = format!("{ns}/{}", statefulset_pod_name(&stopped));
    let started = Instant::now();
    let mut stops = 0;
    while started.elapsed() < LOAD {
        control.freeze(&pod).await.unwrap();
        tokio::time::sleep(STOPPED).await;
        control.thaw(&pod).await.unwrap();
        stops += 1;
        tokio::time::sleep(STOPPED).await;
    }
    env.wait("the slowed BGSAVE to end", SETTLE, || async {
        Ok(match access.saving(&saving_ip) {
            true => Err("saving".to_string()),
            false => Ok(()),
        })
    })
    .await;
    access.end_slow_save(&saving_ip).unwrap();
    assert_eq!(script.await.unwrap(), "5", "the script on {scripting_ip}");
    eprintln!(
        "{name}: {stopped} stopped {stops} times for {STOPPED:?}, BGSAVE on {saving_ip} done {:?} after it began",
        started.elapsed()
    );

    let after = env.ready(name, SETTLE).await;
    let now: Vec<Option<String>> = after.shards.iter().map(|s| s.primary.clone()).collect();
    assert_eq!(now, primaries, "a shard changed primary");
    assert_eq!(
        access.elections_started(),
        elections,
        "a replica started a failover election"
    );
    env.healthy(name, &access, 3, 1).await;
    writer.progressed(200, SETTLE).await.unwrap();
    env.nothing_lost(name, "while a primary was slow", writer, &access)
        .await;
    env.finish().await;
}

/// A script that keeps its server busy for 5 s; it returns the seconds it ran.
const BUSY_FIVE_SECONDS: &str = "local s = redis.call('TIME') \
    local us = 0 \
    while us < 5000000 do \
        local n = redis.call('TIME') \
        us = (n[1] - s[1]) * 1000000 + (n[2] - s[2]) \
    end \
    return math.floor(us / 1000000)";

/// A key `<prefix><n>` whose slot the member at `ip` serves (its own view).
fn owned_key(access: &Access, ip: &str, prefix: &str) -> String {
    let own = access
        .nodes_seen_by(ip)
        .unwrap()
        .into_iter()
        .find(|n| n.is_myself())
        .unwrap();
    (0..100_000)
        .map(|i| format!("{prefix}{i}"))
        .find(|k| own.owns(fred::util::redis_keyslot(k.as_bytes())))
        .unwrap()
}
