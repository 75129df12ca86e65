//! Scenario 10: a ValkeyReplication upgraded 8.0 -> 8.1 -> 9.1 under a Sentinel-aware
//! writer, then a downgrade refused with nothing restarted.

use std::collections::BTreeMap;
use std::time::Instant;

use e2e_kit::replication_testing::{self, GroupWriter, Route, ready_status, valkey_replication};
use e2e_kit::testing::pod_starts;
use e2e_kit::topology::upgrades;

use crate::env::{Env, FORM, SETTLE, agrees};

/// Every member's pod uid and restart count.
async fn starts(env: &Env, name: &str) -> BTreeMap<String, (String, i32)> {
    let members = env.apis.members(name).await.unwrap();
    pod_starts(&env.apis.pods, &members).await.unwrap()
}

/// 3 data nodes and 3 sentinels on 8.0, upgraded to 8.1 then 9.1 (data nodes and sentinels
/// both run the template's image): each step ends Ready, agreeing, with every data node and
/// `status.versions` on the new version, the primary having handed over before it
/// restarted. A downgrade to 8.0 is then refused (Progressing `VersionRefused`, an
/// `UpdateRefused` Event) with no pod restarted. The writer loses no acknowledged write and
/// the keys loaded on 8.0 read back on 9.1.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn upgrades_hand_over_before_the_primary_restarts_and_downgrades_are_refused() {
    let env = Env::start().await;
    let name = "up";
    let mut group = valkey_replication(name, 3, 3, true);
    group.spec.common.template.image = "valkey/valkey:8.0".into();
    let access = env.create_ready(group).await;
    let keys = access.load("up", 2000).await.unwrap();
    let writer = GroupWriter::start(
        &access,
        Route::Sentinel(access.sentinel_service_ip.clone().unwrap()),
        "up-w",
    );
    writer.progressed(200, SETTLE).await.unwrap();

    for version in ["8.1", "9.1"] {
        let handovers_before = env
            .apis
            .group_events(name, Some("HandedOver"))
            .await
            .unwrap()
            .iter()
            .map(|e| e.series.as_ref().map_or(1, |s| s.count))
            .sum::<i32>();
        let started = Instant::now();
        env.apis
            .patch(name, upgrades::image(version))
            .await
            .unwrap();
        let status = env
            .wait(
                &format!("every member on {version}, Ready and agreeing"),
                FORM,
                || async {
                    let status = match upgrades::ready_on(&env.apis, name, version).await? {
                        Ok(status) => status,
                        Err(why) => return Ok(Err(why)),
                    };
                    let access = replication_testing::access(&env.apis, name).await?;
                    let primary = status.current_primary.clone().unwrap_or_default();
                    Ok(agrees(&access, &primary).map(|()| status))
                },
            )
            .await;
        eprintln!(
            "{name}: upgraded to {version} in {:?}, primary {:?}",
            started.elapsed(),
            status.current_primary
        );
        let access = replication_testing::access(&env.apis, name).await.unwrap();
        let data = access
            .data
            .iter()
            .map(|m| (m, access.cli(&m.ip, &["INFO", "server"])));
        let sentinels = access
            .sentinels
            .iter()
            .map(|m| (m, access.sentinel_cli(&m.ip, &["INFO", "server"])));
        for (m, info) in data.chain(sentinels) {
            let running = upgrades::version_of(&info);
            assert!(
                running.starts_with(&format!("{version}.")),
                "{}: {running}",
                m.name
            );
        }
        let handovers = env
            .apis
            .group_events(name, Some("HandedOver"))
            .await
            .unwrap();
        let count = handovers
            .iter()
            .map(|e| e.series.as_ref().map_or(1, |s| s.count))
            .sum::<i32>();
        assert!(
            count > handovers_before
                && handovers.iter().any(|e| e
                    .note
                    .as_deref()
                    .is_some_and(|n| n.contains("before it restarts"))),
            "the primary did not hand over before restarting: {handovers:?}"
        );
        writer.progressed(100, SETTLE).await.unwrap();
    }

    // A downgrade past the data format: refused before any member restarts.
    let before = starts(&env, name).await;
    env.apis.patch(name, upgrades::image("8.0")).await.unwrap();
    let progressing = env
        .wait("the downgrade to be refused", SETTLE, || {
            upgrades::version_refused(&env.apis, name)
        })
        .await;
    eprintln!("{name}: downgrade refused: {}", progressing.message);
    let status = env.apis.status(name).await.unwrap();
    upgrades::assert_downgrade_to_8_0_refused(&progressing, &status);
    assert_eq!(starts(&env, name).await, before, "a pod restarted");
    let access = replication_testing::access(&env.apis, name).await.unwrap();
    for m in &access.data {
        let running = upgrades::version_of(&access.cli(&m.ip, &["INFO", "server"]));
        assert!(running.starts_with("9.1."), "{}: {running}", m.name);
    }
    env.apis.patch(name, upgrades::image("9.1")).await.unwrap();
    env.wait("Ready again on 9.1", SETTLE, || async {
        Ok(ready_status(&env.apis, name).await?.map(drop))
    })
    .await;
    assert_eq!(starts(&env, name).await, before, "a pod restarted");

    writer.progressed(100, SETTLE).await.unwrap();
    let report = writer.stop().await.unwrap();
    eprintln!("{name}: writer\n{}", report.summary());
    let lost = report.lost(&access).await.unwrap();
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged writes lost: {:?}",
        lost.len(),
        report.acked.len(),
        &lost[..lost.len().min(10)]
    );
    access.verify(&keys).await.unwrap();
    env.finish().await;
}
