//! Upgrades and the refused downgrade, as both kinds' tests ask for them and check them.
//! How a roll is watched (gates, hand-overs, Sentinel) stays with each kind's test.

use anyhow::Result;
use crd_types::conditions::{self, types};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use serde_json::json;

use super::{Progress, Topology, TopologyApis, TopologyStatus, ready_status};
use crate::testing::running_version;

/// The merge patch that sets the members' image to the upstream `valkey/valkey:<version>`.
pub fn image(version: &str) -> serde_json::Value {
    json!({"spec": {"template": {"image": format!("valkey/valkey:{version}")}}})
}

/// The running version `INFO server` reports.
pub fn version_of(info: &str) -> String {
    running_version(info)
        .unwrap_or_else(|| panic!("no valkey_version in {info}"))
        .to_string()
}

/// Its status once it is Ready with every member on `version` (`status.versions`).
pub async fn ready_on<T: Topology>(
    apis: &TopologyApis<T>,
    name: &str,
    version: &str,
) -> Result<Progress<T::Status>> {
    let status = match ready_status(apis, name).await? {
        Ok(status) => status,
        Err(why) => return Ok(Err(why)),
    };
    let versions = status.versions();
    Ok(match versions {
        [one] if one.starts_with(version) => Ok(status),
        _ => Err(format!("status.versions {versions:?}")),
    })
}

/// Its Progressing condition once it refuses a version (`VersionRefused`) and an
/// `UpdateRefused` Event says so.
pub async fn version_refused<T: Topology>(
    apis: &TopologyApis<T>,
    name: &str,
) -> Result<Progress<Condition>> {
    let status = apis.status(name).await?;
    let progressing = conditions::find(status.conditions(), types::PROGRESSING).cloned();
    let events = apis.events_about(name, Some("UpdateRefused")).await?;
    Ok(match progressing {
        Some(c) if c.reason == "VersionRefused" && !events.is_empty() => Ok(c),
        other => Err(format!(
            "Progressing {other:?}, {} UpdateRefused Events",
            events.len()
        )),
    })
}

/// The refusal of 8.0 after 9.1 says why and what to do, and Ready is not claimed.
pub fn assert_downgrade_to_8_0_refused(progressing: &Condition, status: &impl TopologyStatus) {
    let message = &progressing.message;
    assert!(
        message.contains("Valkey 8.0 cannot read the data files of Valkey 9.1")
            && message.contains("set the image back to Valkey 9.1 or newer"),
        "{message}"
    );
    assert!(!conditions::is_true(status.conditions(), types::READY));
}
