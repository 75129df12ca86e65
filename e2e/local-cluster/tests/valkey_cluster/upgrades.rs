//! Scenario 10: rolling upgrades 8.0 -> 8.1 -> 9.1 under a writer, then the refusals: a
//! downgrade past the data format, and a directive the image's version does not know.

use std::cell::RefCell;
use std::time::Instant;

use crd_types::conditions::{self, types};
use crd_types::node::Role;
use e2e_kit::cluster_testing::{AckedWriter, DataSet, RollWatch, ready_status, valkey_cluster};
use e2e_kit::topology::upgrades;
use serde_json::json;

use crate::env::{Env, ROLL, SETTLE};

/// The reason of a cluster's Progressing condition.
async fn progressing_reason(env: &Env, name: &str) -> anyhow::Result<Option<String>> {
    let status = env.status(name).await?;
    Ok(conditions::find(&status.conditions, types::PROGRESSING).map(|c| c.reason.clone()))
}

/// Scenario 10, on a 3x1 cluster with a WAIT-acked writer running throughout:
/// - the image goes 8.0 -> 8.1 -> 9.1: each step rolls every member once, one at a time,
///   each gate opening on a replica (a primary hands over first), and ends Ready with every
///   member and `status.versions` on the new version;
/// - a downgrade to 8.0 is refused (Progressing `VersionRefused`, an `UpdateRefused` Event)
///   with no gate opened and no pod restarted; the image put back, the cluster is Ready;
/// - a directive 9.1 does not know is refused the same way (`DirectiveUnknown`, members'
///   `ConfigValid` False); removed, the cluster is Ready;
/// - no acknowledged write is lost, and a data set loaded on 8.0 reads back on 9.1.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn upgrades_roll_member_by_member_and_refusals_restart_nothing() {
    let env = Env::start().await;
    let name = "up";
    let mut cluster = valkey_cluster(name, 3, 1, true);
    cluster.spec.common.template.image = "valkey/valkey:8.0".into();
    let access = env.create_ready(cluster).await;
    let data = DataSet::new("up-key", 5_000);
    data.load(&access).await.unwrap();
    let writer = AckedWriter::start(&access).await.unwrap();
    writer.progressed(200, SETTLE).await.unwrap();

    for version in ["8.1", "9.1"] {
        let members = env.apis.members(name).await.unwrap();
        let watch = RefCell::new(RollWatch::new(&members));
        let started = Instant::now();
        env.apis
            .patch(name, upgrades::image(version))
            .await
            .unwrap();
        env.wait(
            &format!("every member to run {version} and the cluster to be Ready"),
            ROLL,
            || async {
                let members = env.apis.members(name).await?;
                if let Err(why) = watch.borrow_mut().sample_until_rolled(&members) {
                    return Ok(Err(why));
                }
                Ok(upgrades::ready_on(&env.apis, name, version)
                    .await?
                    .map(drop))
            },
        )
        .await;
        let elapsed = started.elapsed();
        let watch = watch.into_inner();
        eprintln!(
            "{name}: upgraded to {version} in {elapsed:?} ({:?} per member), gate order {:?}",
            elapsed / members.len() as u32,
            watch.gate_order
        );
        assert!(watch.max_rolling <= 1, "rolling at once: {:?}", watch.worst);
        assert!(
            watch.max_not_ready <= 1,
            "{} not ready at once",
            watch.max_not_ready
        );
        assert_eq!(
            watch.gate_order.len(),
            members.len(),
            "{:?}",
            watch.gate_order
        );
        // A primary hands over before its gate opens: every gate opens on a replica.
        for (member, role) in &watch.gate_order {
            assert_eq!(
                *role,
                Some(Role::Replica),
                "{member}'s gate opened while {role:?}"
            );
        }
        for member in &access.members {
            let running = upgrades::version_of(&access.cli(&member.ip, &["INFO", "server"]));
            assert!(
                running.starts_with(&format!("{version}.")),
                "{}: {running}",
                member.name
            );
        }
    }
    data.verify(&access).await.unwrap();

    // A downgrade past the data format: refused before any member restarts.
    let members = env.apis.members(name).await.unwrap();
    let starts = env.pod_starts(&members).await;
    let watch = RefCell::new(RollWatch::new(&members));
    env.apis.patch(name, upgrades::image("8.0")).await.unwrap();
    let progressing = env
        .wait("the downgrade to be refused", SETTLE, || async {
            let members = env.apis.members(name).await?;
            watch.borrow_mut().sample(&members);
            upgrades::version_refused(&env.apis, name).await
        })
        .await;
    eprintln!("{name}: downgrade refused: {}", progressing.message);
    let status = env.apis.status(name).await.unwrap();
    upgrades::assert_downgrade_to_8_0_refused(&progressing, &status);
    let members = env.apis.members(name).await.unwrap();
    watch.borrow_mut().sample(&members);
    assert!(
        watch.borrow().gate_order.is_empty(),
        "{:?}",
        watch.borrow().gate_order
    );
    assert_eq!(env.pod_starts(&members).await, starts, "a pod restarted");
    for member in &access.members {
        let running = upgrades::version_of(&access.cli(&member.ip, &["INFO", "server"]));
        assert!(running.starts_with("9.1."), "{}: {running}", member.name);
    }
    env.apis.patch(name, upgrades::image("9.1")).await.unwrap();
    env.wait("Ready again on 9.1", SETTLE, || async {
        Ok(ready_status(&env.apis, name).await?.map(drop))
    })
    .await;

    // A directive 9.1 does not know: refused before any member restarts.
    env.apis
        .patch(
            name,
            json!({"spec": {"template": {"config": {"maxmemroy": "100mb"}}}}),
        )
        .await
        .unwrap();
    env.wait("the unknown directive to be refused", SETTLE, || async {
        let reason = progressing_reason(&env, name).await?;
        let refused = env
            .apis
            .members(name)
            .await?
            .iter()
            .filter(|n| {
                n.status.as_ref().is_some_and(|s| {
                    conditions::find(&s.conditions, types::CONFIG_VALID)
                        .is_some_and(|c| c.reason == "UnknownDirective")
                })
            })
            .count();
        Ok(match reason.as_deref() {
            Some("DirectiveUnknown") if refused == starts.len() => Ok(()),
            other => Err(format!(
                "Progressing {other:?}, {refused} members ConfigValid False"
            )),
        })
    })
    .await;
    let status = env.apis.clusters.get(name).await.unwrap().status.unwrap();
    let progressing = conditions::find(&status.conditions, types::PROGRESSING).unwrap();
    assert!(
        progressing
            .message
            .contains("Valkey 9.1, which does not know maxmemroy"),
        "{}",
        progressing.message
    );
    assert_eq!(
        env.pod_starts(&env.apis.members(name).await.unwrap()).await,
        starts,
        "a pod restarted"
    );
    env.apis
        .patch(
            name,
            json!({"spec": {"template": {"config": {"maxmemroy": null}}}}),
        )
        .await
        .unwrap();
    env.wait("Ready again without the directive", SETTLE, || async {
        Ok(ready_status(&env.apis, name).await?.map(drop))
    })
    .await;
    env.healthy(name, &access, 3, 1).await;

    writer.progressed(200, SETTLE).await.unwrap();
    let report = writer.stop().await.unwrap();
    eprintln!("{name}: writer during both upgrades\n{}", report.summary());
    let lost = report.lost(&access).await.unwrap();
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged writes lost, e.g. {:?}",
        lost.len(),
        report.acked(),
        &lost[..lost.len().min(10)]
    );
    data.verify(&access).await.unwrap();
    env.finish().await;
}
