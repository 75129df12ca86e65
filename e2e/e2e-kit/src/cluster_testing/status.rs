//! The ValkeyCluster's status: what the spec asks for, readiness per the topology-controller's
//! contract, and agreement with Valkey's own view.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{Context, Result};
use crd_types::cluster::{Phase, ValkeyClusterSpec};
use crd_types::conditions::{self, types};
use crd_types::names;
use crd_types::node::Role;
use crd_types::{ValkeyCluster, ValkeyClusterStatus, ValkeyNode};
use kube::ResourceExt;

use super::{Access, ClusterApis, Progress, SLOTS, wait_until};
use crate::topology;
use local_cluster::LocalCluster;

/// The member names the spec asks for, `<cluster>-<shard>-<member>`.
pub fn desired_members(name: &str, spec: &ValkeyClusterSpec) -> BTreeSet<String> {
    let members = 1 + spec.replicas_per_shard.max(0) as u32;
    (0..spec.shards.max(0) as u32)
        .flat_map(|s| (0..members).map(move |m| names::cluster_member_name(name, s, m)))
        .collect()
}

/// Number of slots in ranges such as "0-5460" or "5461".
pub fn count_slots<S: AsRef<str>>(ranges: &[S]) -> u32 {
    ranges
        .iter()
        .filter_map(|r| parse_range(r.as_ref()))
        .map(|(a, b)| u32::from(b) - u32::from(a) + 1)
        .sum()
}

pub(super) fn parse_range(range: &str) -> Option<(u16, u16)> {
    match range.split_once('-') {
        Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
        None => {
            let slot = range.parse().ok()?;
            Some((slot, slot))
        }
    }
}

/// Why `cluster` is not Ready per its status (the topology-controller's contract), or
/// `None` when it is: phase Ready, conditions Ready and SlotsAssigned True (Degraded and
/// Progressing not True), the current generation observed, all 16384 slots assigned, every
/// shard ready with its primary and exactly the members the spec asks for, all ready, and
/// every desired ValkeyNode present in `members`.
pub fn not_ready(cluster: &ValkeyCluster, members: &[ValkeyNode]) -> Option<String> {
    let name = cluster.name_any();
    let spec = &cluster.spec;
    let Some(status) = &cluster.status else {
        return Some("no status yet".into());
    };
    let summary = describe_status(status);
    let why = |reason: String| Some(format!("{reason} (status: {summary})"));
    if status.phase != Some(Phase::Ready) {
        return why(format!("phase is {:?}", status.phase));
    }
    if status.observed_generation != cluster.metadata.generation {
        return why(format!(
            "observedGeneration {:?} is not generation {:?}",
            status.observed_generation, cluster.metadata.generation
        ));
    }
    for type_ in [types::READY, types::SLOTS_ASSIGNED] {
        if !conditions::is_true(&status.conditions, type_) {
            return why(format!("condition {type_} is not True"));
        }
    }
    for type_ in [types::DEGRADED, types::PROGRESSING] {
        if conditions::is_true(&status.conditions, type_) {
            return why(format!("condition {type_} is True"));
        }
    }
    if status.slots_assigned != SLOTS as i32 {
        return why(format!("slotsAssigned is {}", status.slots_assigned));
    }
    if status.ready_shards != spec.shards {
        return why(format!(
            "readyShards {} of {}",
            status.ready_shards, spec.shards
        ));
    }
    if status.shards.len() != spec.shards.max(0) as usize {
        return why(format!("{} shards in status", status.shards.len()));
    }
    let desired = desired_members(&name, spec);
    let mut in_status = BTreeSet::new();
    let mut slots = 0;
    for (i, shard) in status.shards.iter().enumerate() {
        if shard.index != i as i32 {
            return why(format!("shards[{i}] has index {}", shard.index));
        }
        let primaries: Vec<&str> = shard
            .members
            .iter()
            .filter(|m| m.role == Some(Role::Primary))
            .map(|m| m.name.as_str())
            .collect();
        if primaries.len() != 1 || shard.primary.as_deref() != primaries.first().copied() {
            return why(format!(
                "shard {i}: primary {:?}, members with role Primary {primaries:?}",
                shard.primary
            ));
        }
        if shard.members.len() != 1 + spec.replicas_per_shard.max(0) as usize {
            return why(format!("shard {i} has {} members", shard.members.len()));
        }
        if let Some(m) = shard.members.iter().find(|m| !m.ready) {
            return why(format!("member {} is not ready", m.name));
        }
        let prefix = format!("{name}-{i}-");
        if let Some(m) = shard.members.iter().find(|m| !m.name.starts_with(&prefix)) {
            return why(format!("shard {i} lists member {}", m.name));
        }
        if shard.slots.is_empty() {
            return why(format!("shard {i} owns no slots"));
        }
        slots += count_slots(&shard.slots);
        in_status.extend(shard.members.iter().map(|m| m.name.clone()));
    }
    if slots != SLOTS {
        return why(format!("the shards' slot ranges add up to {slots}"));
    }
    if in_status != desired {
        return why(format!(
            "members in status {in_status:?}, desired {desired:?}"
        ));
    }
    let existing: BTreeSet<String> = members.iter().map(|n| n.name_any()).collect();
    if let Some(missing) = desired.difference(&existing).next() {
        return why(format!("ValkeyNode {missing} does not exist"));
    }
    None
}

/// A one-line summary of a cluster status, for failure messages.
pub fn describe_status(status: &ValkeyClusterStatus) -> String {
    let conditions: Vec<String> = status
        .conditions
        .iter()
        .map(|c| format!("{}={} {:?}", c.type_, c.status, c.message))
        .collect();
    let shards: Vec<String> = status
        .shards
        .iter()
        .map(|s| {
            let members: Vec<String> = s
                .members
                .iter()
                .map(|m| format!("{}:{:?}:{}", m.name, m.role, m.ready))
                .collect();
            format!(
                "#{} primary {:?} slots {:?} [{}]",
                s.index,
                s.primary,
                s.slots,
                members.join(" ")
            )
        })
        .collect();
    format!(
        "phase {:?}, readyShards {}, slotsAssigned {}, observedGeneration {:?}, switchover {:?}, conditions [{}], shards [{}]",
        status.phase,
        status.ready_shards,
        status.slots_assigned,
        status.observed_generation,
        status.switchover,
        conditions.join("; "),
        shards.join("; ")
    )
}

/// The cluster's status once [`not_ready`] finds nothing wrong.
pub async fn ready_status(apis: &ClusterApis, name: &str) -> Result<Progress<ValkeyClusterStatus>> {
    topology::ready_status::<ValkeyCluster>(apis, name).await
}

/// Waits for [`ready_status`].
pub async fn wait_ready(
    cluster: &LocalCluster,
    apis: &ClusterApis,
    name: &str,
    timeout: Duration,
) -> Result<ValkeyClusterStatus> {
    wait_until(
        cluster,
        &format!("ValkeyCluster {name} to be Ready"),
        timeout,
        || ready_status(apis, name),
    )
    .await
}

/// Checks Valkey's own view against the member statuses: for every member, `status.valkey`
/// names the node id Valkey reports (`CLUSTER MYID`), its role, a replica's primary and
/// `linkUp`; the ValkeyCluster's `shards[].primary` and member roles agree with
/// `CLUSTER NODES`. Returns the mismatches.
pub async fn status_matches_valkey(
    apis: &ClusterApis,
    access: &Access,
    cluster: &str,
) -> Result<Progress<()>> {
    let nodes = apis.members(cluster).await?;
    let vc = apis.clusters.get(cluster).await?;
    let status = vc.status.unwrap_or_default();
    let ip = access.live_ip().context("no member answers PING")?;
    let view = access.nodes_seen_by(ip)?;
    let mut wrong = Vec::new();
    let mut ids = BTreeMap::new();
    for m in &access.members {
        let id = access.node_id(&m.ip)?;
        let Some(line) = view.iter().find(|n| n.id == id) else {
            wrong.push(format!("{} ({id}) is not in CLUSTER NODES of {ip}", m.name));
            continue;
        };
        let role = if line.is_primary() {
            Role::Primary
        } else {
            Role::Replica
        };
        ids.insert(m.name.clone(), (id.clone(), role));
        let Some(node) = nodes.iter().find(|n| n.name_any() == m.name) else {
            continue;
        };
        let valkey = node
            .status
            .as_ref()
            .and_then(|s| s.valkey.clone())
            .unwrap_or_default();
        if valkey.node_id.as_deref() != Some(id.as_str()) {
            wrong.push(format!(
                "{}: status.valkey.nodeId {:?}, Valkey says {id}",
                m.name, valkey.node_id
            ));
        }
        if valkey.role != Some(role) {
            wrong.push(format!(
                "{}: status.valkey.role {:?}, Valkey says {role:?}",
                m.name, valkey.role
            ));
        }
        if role == Role::Replica {
            if valkey.primary_node_id != line.primary_id {
                wrong.push(format!(
                    "{}: status.valkey.primaryNodeId {:?}, Valkey says {:?}",
                    m.name, valkey.primary_node_id, line.primary_id
                ));
            }
            if valkey.link_up != Some(true) {
                wrong.push(format!(
                    "{}: status.valkey.linkUp {:?}",
                    m.name, valkey.link_up
                ));
            }
        }
    }
    for shard in &status.shards {
        for member in &shard.members {
            let Some((_, role)) = ids.get(&member.name) else {
                continue;
            };
            if member.role != Some(*role) {
                wrong.push(format!(
                    "status.shards[{}] says {} is {:?}, Valkey says {role:?}",
                    shard.index, member.name, member.role
                ));
            }
            if *role == Role::Primary && shard.primary.as_deref() != Some(member.name.as_str()) {
                wrong.push(format!(
                    "status.shards[{}].primary is {:?}, Valkey's primary is {}",
                    shard.index, shard.primary, member.name
                ));
            }
        }
    }
    Ok(if wrong.is_empty() {
        Ok(())
    } else {
        Err(wrong.join("; "))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster_testing::valkey_cluster;
    use crd_types::cluster::{MemberStatus, ShardStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

    #[test]
    fn slot_ranges_count() {
        assert_eq!(count_slots(&["0-5460"]), 5461);
        assert_eq!(count_slots(&["0-4095", "8192", "10000-10001"]), 4099);
        assert_eq!(count_slots::<&str>(&[]), 0);
    }

    fn ready_cluster() -> (ValkeyCluster, Vec<ValkeyNode>) {
        let mut vc = valkey_cluster("c", 2, 1, false);
        vc.metadata.generation = Some(3);
        let condition = |type_: &str, status: &str| Condition {
            type_: type_.into(),
            status: status.into(),
            reason: "R".into(),
            message: String::new(),
            observed_generation: Some(3),
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ),
        };
        let shard = |i: i32, slots: &str| ShardStatus {
            index: i,
            primary: Some(format!("c-{i}-0")),
            slots: vec![slots.into()],
            members: vec![
                MemberStatus {
                    name: format!("c-{i}-0"),
                    role: Some(Role::Primary),
                    ready: true,
                },
                MemberStatus {
                    name: format!("c-{i}-1"),
                    role: Some(Role::Replica),
                    ready: true,
                },
            ],
        };
        vc.status = Some(ValkeyClusterStatus {
            phase: Some(Phase::Ready),
            ready_shards: 2,
            slots_assigned: 16384,
            shards: vec![shard(0, "0-8191"), shard(1, "8192-16383")],
            switchover: None,
            versions: Vec::new(),
            config: None,
            storage: None,
            password_rotations: Vec::new(),
            ca_replacement: None,
            observed_generation: Some(3),
            conditions: vec![
                condition(types::READY, "True"),
                condition(types::SLOTS_ASSIGNED, "True"),
                condition(types::PROGRESSING, "False"),
                condition(types::DEGRADED, "False"),
            ],
        });
        let nodes = ["c-0-0", "c-0-1", "c-1-0", "c-1-1"]
            .into_iter()
            .map(|n| ValkeyNode::new(n, Default::default()))
            .collect();
        (vc, nodes)
    }

    #[test]
    fn readiness_follows_the_contract() {
        let (vc, nodes) = ready_cluster();
        assert_eq!(not_ready(&vc, &nodes), None);

        let mut stale = vc.clone();
        stale.metadata.generation = Some(4);
        assert!(
            not_ready(&stale, &nodes)
                .unwrap()
                .contains("observedGeneration")
        );

        let mut short = vc.clone();
        short.status.as_mut().unwrap().shards[1].slots = vec!["8192-16000".into()];
        assert!(not_ready(&short, &nodes).unwrap().contains("add up to"));

        let mut unready = vc.clone();
        unready.status.as_mut().unwrap().shards[0].members[1].ready = false;
        assert!(not_ready(&unready, &nodes).unwrap().contains("c-0-1"));

        let mut degraded = vc.clone();
        degraded.status.as_mut().unwrap().conditions[3].status = "True".into();
        assert!(not_ready(&degraded, &nodes).unwrap().contains("Degraded"));

        let mut scaled = vc.clone();
        scaled.spec.replicas_per_shard = 2;
        assert!(not_ready(&scaled, &nodes).is_some());

        assert!(not_ready(&vc, &nodes[..3]).unwrap().contains("c-1-1"));
    }
}
