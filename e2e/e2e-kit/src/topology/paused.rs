//! The pause (`valkey.rs/paused`) as both kinds' tests set it and check it.

use anyhow::Result;
use crd_types::cluster::Phase;
use crd_types::conditions::{self, types};
use crd_types::names::annotations;
use serde_json::json;

use super::{Progress, Topology, TopologyApis, TopologyStatus};

/// The merge patch that pauses a topology.
pub fn pause() -> serde_json::Value {
    json!({"metadata": {"annotations": {(annotations::PAUSED): "true"}}})
}

/// The merge patch that resumes it.
pub fn resume() -> serde_json::Value {
    json!({"metadata": {"annotations": {(annotations::PAUSED): null}}})
}

/// Its status once it says Paused for `generation`: the controller saw the spec it holds
/// back.
pub async fn paused_at<T: Topology>(
    apis: &TopologyApis<T>,
    name: &str,
    generation: Option<i64>,
) -> Result<Progress<T::Status>> {
    let status = apis.status(name).await?;
    let seen = status.observed_generation() == generation;
    Ok(match (status.phase(), seen) {
        (Some(Phase::Paused), true) => Ok(status),
        (phase, _) => Err(format!(
            "phase {phase:?} at generation {:?}",
            status.observed_generation()
        )),
    })
}

/// Paused says so in its conditions: Progressing False, and the last Ready seen kept, both
/// for reason Paused.
pub fn assert_paused(status: &impl TopologyStatus) {
    let progressing = conditions::find(status.conditions(), types::PROGRESSING).unwrap();
    assert_eq!(
        (progressing.status.as_str(), progressing.reason.as_str()),
        (conditions::FALSE, "Paused")
    );
    let ready = conditions::find(status.conditions(), types::READY).unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        (conditions::TRUE, "Paused"),
        "the last Ready seen is kept"
    );
}
