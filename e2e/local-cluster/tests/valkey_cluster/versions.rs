//! Scenario 9: the same ValkeyCluster forms on every Valkey version the local registry has
//! an image for, and on the busybox image (docs/images.md), and each member runs the
//! version its image carries, with an exporter that scrapes it as the monitoring user
//! (whose rules differ by version).

use crd_types::template::Exporter;
use e2e_kit::cluster_testing::{DataSet, valkey_cluster};
use e2e_kit::testing::{events_about, running_version};
use kube::api::DeleteParams;
use local_cluster::images::{BUSYBOX_IMAGE, VALKEY_VERSIONS, exporter_image};
use local_cluster::operator::http_get;

use crate::env::{Env, SETTLE};

/// Scenario 9: a 3x1 cluster on `valkey/valkey:<version>` for each version in turn, then on
/// the busybox image: Ready, healthy, every member reporting that version and scraped by
/// its exporter, no live directive needing a set, keys written and read back; then deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_same_cluster_forms_on_every_version() {
    let env = Env::start().await;
    let exporter = exporter_image().unwrap();
    let images = VALKEY_VERSIONS
        .iter()
        .map(|v| format!("valkey/valkey:{v}"))
        .chain([BUSYBOX_IMAGE.to_string()]);
    for image in images {
        let tag = image.trim_start_matches("valkey/valkey:");
        let version = tag.split('-').next().unwrap();
        let name = format!("v{}", tag.replace('.', "-"));
        let mut cluster = valkey_cluster(&name, 3, 1, false);
        cluster.spec.common.template.image = image.clone();
        cluster.spec.common.template.exporter = Some(Exporter {
            image: exporter.clone(),
            port: 9121,
            resources: None,
        });
        let access = env.create_ready(cluster).await;
        let mut runs = Vec::new();
        for member in &access.members {
            let info = access.cli(&member.ip, &["INFO", "server"]);
            let running = running_version(&info).unwrap_or_else(|| panic!("{info}"));
            runs.push(running.to_string());
            assert!(
                running.starts_with(&format!("{version}.")),
                "{}: runs {running}, image {image}",
                member.name
            );
        }
        runs.dedup();
        // The monitoring user loaded with this version's rules and lets the exporter in.
        for member in &access.members {
            let addr = format!("{}:9121", member.ip);
            env.wait(
                &format!("{}'s exporter to scrape it", member.name),
                SETTLE,
                || async {
                    let body = http_get(&addr, "/metrics").await.unwrap_or_default();
                    Ok(if body.lines().any(|l| l == "redis_up 1") {
                        Ok(())
                    } else {
                        Err(body.lines().filter(|l| l.starts_with("redis_up")).collect())
                    })
                },
            )
            .await;
        }
        let status = env.apis.clusters.get(&name).await.unwrap().status.unwrap();
        assert_eq!(status.versions, runs, "status.versions");
        let data = DataSet::new(&format!("{name}-key"), 2_000);
        data.load(&access).await.unwrap();
        data.verify(&access).await.unwrap();
        eprintln!("{name}: 3x1 on {image} Ready and serving");
        // Members start with their live directives from their files, so none differs from
        // the spec and none was set: the table's defaults are this version's.
        let set = events_about(&env.apis.events, "ValkeyCluster", &name, "ConfigSetLive")
            .await
            .unwrap();
        assert!(set.is_empty(), "{name}: {set:?}");

        env.apis
            .clusters
            .delete(&name, &DeleteParams::foreground())
            .await
            .unwrap();
        env.wait(&format!("{name}'s members to be gone"), SETTLE, || async {
            let left = env.apis.members(&name).await?;
            Ok(if left.is_empty() {
                Ok(())
            } else {
                Err(format!("{} members left", left.len()))
            })
        })
        .await;
    }
    env.finish().await;
}
