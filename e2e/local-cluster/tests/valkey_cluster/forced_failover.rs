//! Scenario: a primary in a crash loop is replaced by force, before Valkey would.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crd_types::names::statefulset_pod_name;
use e2e_kit::cluster_testing::{AckedWriter, valkey_cluster};
use e2e_kit::testing::{signal, valkey_server_pid};

use crate::env::{Env, FAILOVER, FORM, SETTLE, at_valkeys_node_timeout};

/// Kills the valkey-server of `pod_ip` with SIGKILL whenever one runs, until dropped: a
/// container that crashes at every start. Dropping stops it even when the test panics, so
/// it never reaches the next test's pods (pod IPs repeat between local clusters).
struct Killer {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<u32>>,
}

impl Killer {
    fn start(pod_ip: String) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut kills = 0;
            while !flag.load(Ordering::Relaxed) {
                if let Ok(pid) = valkey_server_pid(&pod_ip)
                    && signal(pid, "KILL").is_ok()
                {
                    kills += 1;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            kills
        });
        Self {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops killing; how many times it killed.
    fn stop(mut self) -> u32 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().map_or(0, |t| t.join().unwrap_or(0))
    }
}

impl Drop for Killer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// With a writer running, shard 0's primary server is killed with SIGKILL and killed again
/// at every restart (a crash loop). The kubelet reports its container waiting after it
/// exited, and topology-controller has the replica take over with `CLUSTER FAILOVER FORCE`
/// instead of waiting for Valkey, which promotes a replica only after a majority flagged the
/// primary `fail` (cluster-node-timeout, set to Valkey's 15 s here: at the operator's 3 s
/// the two would race): when the replica is seen primary, no member
/// flags the old one `fail`. Once the crashes stop, the old member rejoins as a replica of
/// its successor, and no acknowledged write is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_crash_looping_primary_is_replaced_by_force_before_node_timeout() {
    let env = Env::start().await;
    let name = "crash";
    let access = env
        .create_ready(at_valkeys_node_timeout(valkey_cluster(name, 3, 1, true)))
        .await;
    let writer = AckedWriter::start(&access).await.unwrap();
    writer.progressed(200, SETTLE).await.unwrap();

    let (old, successor) = env.primary_and_successor(name, &access, 0).await;
    let (old_primary, old_ip, old_id) = (old.name, old.ip, old.id);
    let (successor, successor_ip, successor_id) = (successor.name, successor.ip, successor.id);
    let pod = statefulset_pod_name(&old_primary);
    let pod_ip = env
        .apis
        .pods
        .get(&pod)
        .await
        .unwrap()
        .status
        .and_then(|s| s.pod_ip)
        .unwrap();

    let killer = Killer::start(pod_ip);
    env.wait(
        &format!("{successor} to take over shard 0 in Valkey"),
        FAILOVER,
        || async {
            let view = access.nodes_seen_by(&successor_ip)?;
            Ok(match view.iter().find(|n| n.id == successor_id) {
                Some(n) if n.is_primary() && n.slot_count() > 0 => Ok(()),
                other => Err(format!("{successor} says {other:?}")),
            })
        },
    )
    .await;
    for viewer in access.members.iter().filter(|m| m.ip != old_ip) {
        let view = access.nodes_seen_by(&viewer.ip).unwrap();
        if let Some(old) = view.iter().find(|n| n.id == old_id) {
            assert!(
                !old.has_flag("fail"),
                "{} already flags {old_primary} failed, so Valkey may have failed it over by itself: {old:?}",
                viewer.name
            );
        }
    }
    // The Event follows the step, which returns once the replica reports itself primary.
    env.wait("the forced Failover Event", SETTLE, || async {
        let events = env.apis.topology_events(name).await?;
        let forced = events.iter().any(|e| {
            e.reason.as_deref() == Some("Failover")
                && e.note.as_deref().is_some_and(|n| n.contains("by force"))
        });
        Ok(if forced {
            Ok(())
        } else {
            Err(format!(
                "Events: {:?}",
                events.iter().map(|e| &e.note).collect::<Vec<_>>()
            ))
        })
    })
    .await;

    let kills = killer.stop();
    eprintln!("{name}: {old_primary}'s server killed {kills} times");
    env.ready(name, FORM).await;
    env.healthy(name, &access, 3, 1).await;
    env.rejoined_as_replica(&access, &old_primary, &old_id, &successor_id)
        .await;

    writer.progressed(200, SETTLE).await.unwrap();
    env.nothing_lost(name, "through the crash loop", writer, &access)
        .await;
    env.finish().await;
}
