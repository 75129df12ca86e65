//! Issue 42: a full restart must not lose an acknowledged write (`SET` then `WAIT 1`), even
//! when a replica was behind the others as every member went down. See docs/replication.md,
//! "A full restart".

use e2e_kit::replication_testing::full_restart::{Fault, full_restart};
use e2e_kit::replication_testing::valkey_replication;

use crate::env::{Env, FORM};

/// Full restarts in a row under a Sentinel-aware and a Service writer, the even ones with a
/// replica behind (before the fix those lost about half the time: the sentinels elected by
/// run id between replicas reporting the same offset), the odd ones every pod deleted at
/// once. Every acknowledged write reads back after each.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn full_restarts_lose_no_acknowledged_write() {
    let env = Env::start().await;
    let name = "outage";
    env.create_ready(valkey_replication(name, 3, 3, true)).await;
    env.contexts_monitored(name).await;
    let restarts = 20;
    let (mut acked, mut elected_behind) = (0, 0);
    for i in 1..=restarts {
        let fault = if i % 2 == 0 {
            Fault::Behind
        } else {
            Fault::AllAtOnce
        };
        let r = full_restart(&env.cluster, &env.apis, name, &i.to_string(), fault, FORM)
            .await
            .unwrap_or_else(|e| panic!("restart {i} ({fault:?}): {e:#}"));
        eprintln!(
            "restart {i} ({fault:?}): {} acknowledged, {} lost, primary {} -> {}, Ready {:?} \
             after the deletes",
            r.acked,
            r.lost.len(),
            r.primary_before,
            r.primary_after,
            r.ready_after
        );
        assert!(
            r.lost.is_empty(),
            "restart {i} ({fault:?}) lost {} of {} acknowledged writes: {:?}",
            r.lost.len(),
            r.acked,
            r.lost
        );
        acked += r.acked;
        elected_behind += usize::from(r.singled_out.as_ref() == Some(&r.primary_after));
    }
    // The replica behind never takes over: the old primary, which stopped cleanly, does.
    assert_eq!(elected_behind, 0, "a replica behind was elected");
    eprintln!("{restarts} full restarts, {acked} acknowledged writes, none lost");
    env.finish().await;
}
