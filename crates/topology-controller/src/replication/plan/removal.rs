//! Members the spec no longer wants: removed at once, but the primary, which hands over
//! first.

use crd_types::conditions::reasons::Waiting;

use super::Step;
use super::sentinels::sentinel_for;
use crate::replication::model::{DataNode, Group, Members};
use crate::shared::roll::FailoverReason;

/// Members the spec no longer wants, every one at once but the primary (which hands over
/// first, see [`remove_primary`]).
pub(super) fn remove(group: &Group, members: &Members, p: &DataNode) -> Option<Step> {
    let leaving: Vec<String> = members
        .data
        .iter()
        .map(|d| (&d.facts, d.name() == p.name()))
        .chain(members.sentinels.iter().map(|s| (&s.facts, false)))
        .filter(|(f, primary)| !group.wants(f.at) && !primary)
        .map(|(f, _)| f.name.clone())
        .collect();
    (!leaving.is_empty()).then_some(Step::Remove(leaving))
}

/// A primary the spec no longer wants hands over, once the removed replicas are forgotten
/// (so Sentinel can only pick a wanted one) and every wanted replica is in sync.
pub(super) fn remove_primary(
    group: &Group,
    members: &Members,
    p: &DataNode,
    ip: &str,
) -> Option<Step> {
    if group.wants(p.facts.at) {
        return None;
    }
    let lagging = members
        .data
        .iter()
        .filter(|d| group.wants(d.facts.at))
        .find(|d| !(d.facts.ready && d.in_sync_with(p)));
    if let Some(r) = lagging {
        return Some(Step::wait(
            Waiting::NoReplicaInSync,
            format!(
                "{} leaves the group and hands over once every replica is in sync; {} is not",
                p.name(),
                r.name()
            ),
        ));
    }
    Some(match sentinel_for(group, members, ip) {
        Some(sentinel) => Step::HandOver {
            primary: p.name().to_string(),
            target: None,
            sentinel: sentinel.to_string(),
            reason: FailoverReason::Removal,
        },
        None => Step::wait(
            Waiting::SentinelsCatchingUp,
            format!(
                "no sentinel names {} and sees a replica it could elect",
                p.name()
            ),
        ),
    })
}
