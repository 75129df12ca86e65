//! An upgrade 8.0 -> 8.1 -> 9.1 by the image, under a writer acknowledged by replicas.

use std::cell::RefCell;
use std::time::{Duration, Instant};

use anyhow::Result;
use crd_types::node::Role;
use e2e_kit::cluster_testing::{
    AckedWriter, ClusterApis, DataSet, RollWatch, WriterReport, ready_status,
};
use serde_json::json;

use crate::clusters::{apply_cluster_with, cluster_access, load_keys, wait};
use crate::{LIMIT, V80, V81, V91, image};

/// One step of [`upgrade`].
pub(crate) struct UpgradeStep {
    pub(crate) from: &'static str,
    pub(crate) to: &'static str,
    /// From the patch of `spec.template.image` to Ready with every member on `to`.
    pub(crate) took: Duration,
    pub(crate) members: usize,
    /// The most members seen rolling at once ([`RollWatch`]).
    pub(crate) max_rolling: usize,
    /// Members whose roll gate opened while they were primary (a primary hands over
    /// first, so none is expected).
    pub(crate) gates_on_primaries: Vec<String>,
}

pub(crate) struct Upgrade {
    pub(crate) steps: Vec<UpgradeStep>,
    /// The writer, stopped after both steps.
    pub(crate) report: WriterReport,
    /// Acknowledged writes that do not read back.
    pub(crate) lost: Result<Vec<String>>,
    /// Keys loaded before the first step that do not read back after the last.
    pub(crate) missing: Result<Vec<String>>,
    /// Whether the writer acknowledged 200 more writes after the last step.
    pub(crate) progressed: Result<()>,
}

/// A 3 x 1 cluster on [`V80`] with `keys` keys, upgraded to [`V81`] and then [`V91`] by
/// patching `spec.template.image`, an [`AckedWriter`] running throughout. Each step ends when
/// every member rolled ([`RollWatch`]), the cluster is Ready and `status.versions` lists only
/// the new version.
pub(crate) async fn upgrade(apis: &ClusterApis, name: &str, keys: usize) -> Result<Upgrade> {
    apply_cluster_with(apis, name, 3, 1, Some(&image(V80)), &[], &[]).await?;
    let access = cluster_access(apis, name).await?;
    load_keys(&access, name, keys).await?;
    let writer = AckedWriter::start(&access).await?;
    writer.progressed(200, Duration::from_secs(60)).await?;
    let mut steps = Vec::new();
    for (from, to) in [(V80, V81), (V81, V91)] {
        let members = apis.members(name).await?;
        let watch = RefCell::new(RollWatch::new(&members));
        let started = Instant::now();
        apis.patch(name, json!({"spec": {"template": {"image": image(to)}}}))
            .await?;
        wait(
            &format!("every member of {name} to run {to} and {name} to be Ready"),
            LIMIT,
            || async {
                let members = apis.members(name).await?;
                if let Err(why) = watch.borrow_mut().sample_until_rolled(&members) {
                    return Ok(Err(why));
                }
                let status = match ready_status(apis, name).await? {
                    Ok(status) => status,
                    Err(why) => return Ok(Err(why)),
                };
                Ok(
                    if status.versions.len() == 1 && status.versions[0].starts_with(to) {
                        Ok(())
                    } else {
                        Err(format!("status.versions {:?}", status.versions))
                    },
                )
            },
        )
        .await?;
        let took = started.elapsed();
        let watch = watch.into_inner();
        eprintln!(
            "bench-cluster: {name}: {from} -> {to} in {took:?}, gate order {:?}",
            watch.gate_order
        );
        steps.push(UpgradeStep {
            from,
            to,
            took,
            members: members.len(),
            max_rolling: watch.max_rolling,
            gates_on_primaries: watch
                .gate_order
                .iter()
                .filter(|(_, role)| *role != Some(Role::Replica))
                .map(|(n, role)| format!("{n} ({role:?})"))
                .collect(),
        });
    }
    let progressed = writer.progressed(200, Duration::from_secs(60)).await;
    let report = writer.stop().await?;
    eprintln!(
        "bench-cluster: {name}: writer during both steps\n{}",
        report.summary()
    );
    let lost = report.lost(&access).await;
    if let Ok(lost) = &lost
        && !lost.is_empty()
    {
        eprintln!(
            "bench-cluster: !!! {name}: {} OF {} ACKNOWLEDGED WRITES LOST, e.g. {:?}",
            lost.len(),
            report.acked(),
            &lost[..lost.len().min(10)]
        );
    }
    let missing = DataSet::new(name, keys).missing(&access).await;
    Ok(Upgrade {
        steps,
        report,
        lost,
        missing,
        progressed,
    })
}
