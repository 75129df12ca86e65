//! The hand-overs the operator asks Sentinel for: a switchover (prepared by the replicas'
//! priorities) and the one before a primary restarts in the roll.

use crd_types::conditions::reasons::Waiting;

use super::Step;
use super::sentinels::sentinel_for;
use crate::replication::model::{DataNode, Group, Members, Rolling, SWITCHOVER_PRIORITY};
use crate::shared::roll::{self, FailoverReason, RollStep};

/// `CONFIG SET replica-priority` on the first wanted replica in sync with `p` whose priority
/// is not the group's, or not the switchover priority for a pending switchover's target. A
/// replica not in sync is left alone: a restarted one holds `0` until its first sync, so
/// Sentinel cannot elect it with unknown contents (see node-controller's start script).
pub(super) fn priorities(
    group: &Group,
    members: &Members,
    p: &DataNode,
    switchover: Option<&str>,
) -> Option<Step> {
    members
        .data
        .iter()
        .filter(|d| group.wants(d.facts.at) && d.name() != p.name() && d.in_sync_with(p))
        .find_map(|d| {
            let have = d.answer.as_ref()?.priority?;
            let want = if switchover == Some(d.name()) {
                SWITCHOVER_PRIORITY
            } else {
                group.replica_priority
            };
            (have != want).then(|| Step::SetPriority {
                member: d.name().to_string(),
                priority: want,
            })
        })
}

/// A pending switchover to `target`: once it is an in-sync replica and every sentinel that
/// names the primary prefers it (its priority is the switchover priority, and no other
/// replica's is as low), the hand-over.
pub(super) fn switch_over(
    group: &Group,
    members: &Members,
    p: &DataNode,
    ip: &str,
    switchover: Option<&str>,
) -> Option<Step> {
    let target = members.data_node(switchover?)?;
    if target.name() == p.name() {
        return None;
    }
    if !(target.facts.ready && target.in_sync_with(p)) {
        return Some(Step::wait(
            Waiting::NoReplicaInSync,
            format!(
                "{} must be an in-sync replica of {} to take over",
                target.name(),
                p.name()
            ),
        ));
    }
    let target_ip = target.address()?;
    let unprepared = members
        .sentinels
        .iter()
        .filter(|s| group.wants(s.facts.at))
        .filter_map(|s| Some((s.name(), s.monitored()?)))
        .find(|(_, m)| {
            m.replicas.iter().any(|r| {
                let preferred = r
                    .priority
                    .is_some_and(|p| p > 0 && p <= SWITCHOVER_PRIORITY);
                preferred != (r.ip == target_ip)
            }) || !m.replicas.iter().any(|r| r.ip == target_ip)
        });
    if let Some((sentinel, _)) = unprepared {
        return Some(Step::wait(
            Waiting::SentinelsCatchingUp,
            format!(
                "{sentinel} does not prefer {} yet (sentinels read replica-priority every 10 s)",
                target.name()
            ),
        ));
    }
    let Some(sentinel) = sentinel_for(group, members, ip) else {
        return Some(Step::wait(
            Waiting::SentinelsCatchingUp,
            format!(
                "no sentinel names {} and sees a replica it could elect",
                p.name()
            ),
        ));
    };
    Some(Step::HandOver {
        primary: p.name().to_string(),
        target: Some(target.name().to_string()),
        sentinel: sentinel.to_string(),
        reason: FailoverReason::Switchover,
    })
}

/// One member at a time through the roll gate (shared with a cluster's roll): replicas and
/// sentinels first; the primary hands over first, once every replica is in sync.
pub(super) fn rolling(group: &Group, members: &Members, p: &DataNode, ip: &str) -> Option<Step> {
    let wanted: Vec<Rolling> = members
        .data
        .iter()
        .filter(|d| group.wants(d.facts.at))
        .map(Rolling::Data)
        .chain(
            members
                .sentinels
                .iter()
                .filter(|s| group.wants(s.facts.at))
                .map(Rolling::Sentinel),
        )
        .collect();
    let refs: Vec<&Rolling> = wanted.iter().collect();
    Some(match roll::roll(&refs, group.data_nodes > 1)? {
        RollStep::Wait { reason, message } => Step::Wait { reason, message },
        RollStep::Allow { member, revision } => Step::AllowRoll { member, revision },
        RollStep::HandOver { primary } => {
            let lagging = members
                .data
                .iter()
                .filter(|d| group.wants(d.facts.at) && d.name() != p.name())
                .find(|d| !(d.facts.ready && d.in_sync_with(p)));
            if let Some(r) = lagging {
                return Some(Step::wait(
                    Waiting::NoReplicaInSync,
                    format!(
                        "{primary} hands over before it restarts once every replica is in sync; {} is not",
                        r.name()
                    ),
                ));
            }
            let Some(sentinel) = sentinel_for(group, members, ip) else {
                return Some(Step::wait(
                    Waiting::SentinelsCatchingUp,
                    format!("no sentinel names {primary} and sees a replica it could elect"),
                ));
            };
            Step::HandOver {
                primary,
                target: None,
                sentinel: sentinel.to_string(),
                reason: FailoverReason::Roll,
            }
        }
    })
}
