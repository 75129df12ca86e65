//! A frozen member as both kinds' tests watch status follow it, and the connections
//! topology-controller holds once it is thawed.

use anyhow::Result;
use crd_types::conditions::reasons::Degraded;
use crd_types::conditions::types;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use super::{Progress, Topology, TopologyApis, TopologyStatus};

/// Its Degraded condition once Ready is False and Degraded True for `MembersNotReady`,
/// naming `member`.
pub async fn degraded_naming<T: Topology>(
    apis: &TopologyApis<T>,
    name: &str,
    member: &str,
) -> Result<Progress<Condition>> {
    let status = apis.status(name).await?;
    let conditions = status.conditions();
    let condition = |t: &str| conditions.iter().find(|c| c.type_ == t);
    Ok(
        match (condition(types::READY), condition(types::DEGRADED)) {
            (Some(r), Some(d))
                if r.status == "False"
                    && d.status == "True"
                    && d.reason == Degraded::MembersNotReady.as_str()
                    && d.message.contains(member) =>
            {
                Ok(d.clone())
            }
            _ => Err(conditions
                .iter()
                .map(|c| format!("{}={} {} {:?}", c.type_, c.status, c.reason, c.message))
                .collect::<Vec<_>>()
                .join("; ")),
        },
    )
}

/// The connections of topology-controller in a `CLIENT LIST` answer: user `operator`, a
/// normal client, not a sentinel (sentinels log in as `operator` too, under their names).
pub fn operator_connections(client_list: &str) -> Vec<&str> {
    client_list
        .lines()
        .filter(|l| l.contains(" user=operator ") && l.contains(" flags=N "))
        .filter(|l| !l.contains(" name=sentinel-"))
        .collect()
}

/// Done once `client_list` shows exactly one connection of topology-controller (the
/// pulse's, when no look is in flight).
pub fn one_operator_connection(client_list: &str) -> Progress<()> {
    match operator_connections(client_list).as_slice() {
        [_] => Ok(()),
        more => Err(format!("{more:#?}")),
    }
}
