//! Status read model (layer 5): what status reports about the cluster, read the way the
//! planner reads it (through its `Snapshot`): shards, slots, nodes that are no member, views
//! that disagree, and the outcome of a switchover.

use std::collections::BTreeSet;

use crd_types::node::Role;

use crate::cluster::model::{Member, Shape};
use crate::cluster::plan::slots::stale_markers;
use crate::cluster::plan::snapshot::Snapshot;
use crate::cluster::slots::SlotRange;

/// What status reports about the cluster, read the way the planner reads it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Survey {
    /// Slots with an owner, in the anchor's view.
    pub slots_assigned: usize,
    /// Slots some member marks importing or migrating.
    pub open_slots: usize,
    pub shards: Vec<ShardSurvey>,
    /// Nodes Valkey lists that are no member ("id ip:port"): removed ones not yet
    /// forgotten, or strangers.
    pub strangers: Vec<String>,
    /// The first way a member's view differs from the anchor's (membership or a slot's
    /// owner), if any: clients seeded with that member would see another cluster.
    pub disagreement: Option<String>,
    /// A member that still files a replica under another shard id than its primary's. Valkey
    /// 8.0 settles shard ids by gossip after REPLICATE, and a node restarted before that
    /// refuses its own nodes.conf ("corrupted cluster config file"), so the cluster is not
    /// Ready until they settle.
    pub unsettled_shard_ids: Option<String>,
    /// A wanted member whose Valkey says `cluster_state:fail`: it answers CLUSTERDOWN.
    pub not_serving: Option<String>,
    /// A replica keeping a slot marker its primary does not have (it missed the end of a
    /// move while syncing): promoted, it would serve with a stale migration state.
    pub stale_marker: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ShardSurvey {
    pub index: u32,
    /// Member serving the shard's slots.
    pub primary: Option<String>,
    pub slots: Vec<SlotRange>,
    /// (member, role as the anchor sees it, pod ready)
    pub members: Vec<(String, Option<Role>, bool)>,
    /// The primary holds slots and every wanted member is ready and, if a replica, follows
    /// the primary in sync.
    pub ready: bool,
}

/// Describes every shard that has members (wanted or leaving).
pub fn survey(shape: &Shape, members: &[Member]) -> Survey {
    let Some(s) = Snapshot::new(shape, members) else {
        return Survey::default();
    };
    let open: BTreeSet<u16> = s
        .reachable()
        .map(|m| m.reply.as_ref().unwrap().view.myself())
        .filter(|me| me.flags.primary)
        .flat_map(|me| {
            me.migrating
                .iter()
                .chain(&me.importing)
                .map(|(slot, _)| *slot)
        })
        .collect();
    let last_shard = members.iter().map(|m| m.at.shard + 1).max().unwrap_or(0);
    let shards = (0..last_shard.max(shape.shards))
        .map(|index| {
            let primary = s.shard_primary(index).ok().flatten();
            let primary_node = primary.and_then(|p| s.node_of(p));
            let mut in_shard: Vec<&Member> = s.shard_members(index).collect();
            in_shard.sort_by_key(|m| m.at.member);
            let ready = primary_node.is_some_and(|n| !n.slots.is_empty() && n.is_healthy())
                && in_shard.len() == 1 + shape.replicas_per_shard as usize
                && in_shard.iter().all(|m| {
                    m.ready
                        && (primary.is_some_and(|p| p.name == m.name)
                            || (m.is_synced_replica()
                                && m.primary_id() == primary_node.map(|n| n.id.as_str())))
                });
            ShardSurvey {
                index,
                primary: primary.map(|p| p.name.clone()),
                slots: primary_node.map(|n| n.slots.clone()).unwrap_or_default(),
                members: in_shard
                    .iter()
                    .map(|m| (m.name.clone(), s.node_of(m).and_then(|n| n.role()), m.ready))
                    .collect(),
                ready,
            }
        })
        .collect();
    let strangers = s
        .view
        .nodes()
        .iter()
        .filter(|n| !n.flags.handshake && s.member_with_id(&n.id).is_none())
        .map(|n| format!("{} {}:{}", n.id, n.ip, n.port))
        .collect();
    let disagreement = s
        .reachable()
        .filter(|m| m.name != s.anchor.name)
        .find_map(|m| s.view.disagreement_with(&m.reply.as_ref().unwrap().view))
        .map(|d| d.to_string());
    Survey {
        slots_assigned: s.view.assigned_slot_count(),
        open_slots: open.len(),
        shards,
        strangers,
        disagreement,
        unsettled_shard_ids: s.reachable().find_map(unsettled_shard_ids),
        not_serving: s
            .reachable()
            .filter(|m| shape.wants(m.at))
            .find(|m| m.reply.as_ref().unwrap().cluster_state_ok == Some(false))
            .map(|m| m.name.clone()),
        stale_marker: stale_markers(&s).first().map(|m| {
            format!(
                "replica {} keeps a marker for slot {} that its primary {} does not have",
                m.replica.name, m.slot, m.primary.name
            )
        }),
    }
}

/// Whether `member` files some replica under another shard id than its primary's.
fn unsettled_shard_ids(member: &Member) -> Option<String> {
    let (replica, primary) = member.replicas_filed_apart().into_iter().next()?;
    Some(format!(
        "{} still files replica {replica} apart from its primary {primary}",
        member.name
    ))
}

/// What status should say about a switchover request: `None` while it is still to be done.
pub fn switchover_outcome(
    shape: &Shape,
    members: &[Member],
) -> Option<Result<TargetServes, NotAMember>> {
    let target = &shape.switchover.as_ref()?.target;
    let Some(member) = members.iter().find(|m| &m.name == target) else {
        return Some(Err(NotAMember {
            target: target.clone(),
        }));
    };
    let reply = member.reply.as_ref()?;
    let me = reply.view.myself();
    (me.flags.primary && !me.slots.is_empty()).then(|| {
        Ok(TargetServes {
            target: target.clone(),
            shard: member.at.shard,
        })
    })
}

/// A switchover done: its target holds its shard's slots.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetServes {
    pub target: String,
    pub shard: u32,
}

impl std::fmt::Display for TargetServes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} is the primary of shard {}", self.target, self.shard)
    }
}

/// A switchover that cannot be done: its target is no member.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{target} is not a member of the cluster")]
pub struct NotAMember {
    pub target: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::sim::*;
    use crate::shared::member_facts::SwitchoverRequest;

    #[test]
    fn removed_nodes_still_listed_by_valkey_are_strangers_until_forgotten() {
        let d = shape(1, 1);
        let mut sims = formed(1, 2);
        sims[2].flags = "fail?";
        // c-0-2's ValkeyNode is gone; Valkey still lists it.
        let m: Vec<Member> = members(&sims).into_iter().take(2).collect();
        let survey = survey(&d, &m);
        assert_eq!(survey.strangers.len(), 1);
        assert!(survey.strangers[0].starts_with(&id(0, 2)));
        assert!(survey.shards[0].ready);
        assert!(
            super::survey(&d, &members(&formed(1, 1)))
                .strangers
                .is_empty()
        );
    }

    #[test]
    fn a_replica_filed_under_another_shard_id_is_unsettled() {
        let d = shape(2, 1);
        let sims = formed(2, 1);
        let mut m = members(&sims);
        let settled = vec![vec![id(0, 0), id(0, 1)], vec![id(1, 0), id(1, 1)]];
        for member in &mut m {
            member.reply.as_mut().unwrap().shard_groups = Some(settled.clone());
        }
        assert_eq!(survey(&d, &m).unsettled_shard_ids, None);
        // c-1-1's view still has c-0-1 in a shard of its own.
        m[3].reply.as_mut().unwrap().shard_groups = Some(vec![
            vec![id(0, 0)],
            vec![id(0, 1)],
            vec![id(1, 0), id(1, 1)],
        ]);
        let unsettled = survey(&d, &m).unsettled_shard_ids.unwrap();
        assert!(
            unsettled.contains("c-1-1") && unsettled.contains(&id(0, 1)),
            "{unsettled}"
        );
    }

    #[test]
    fn a_member_answering_clusterdown_is_reported() {
        let d = shape(1, 1);
        let mut sims = formed(1, 1);
        assert_eq!(survey(&d, &members(&sims)).not_serving, None);
        sims[0].state_ok = Some(false);
        assert_eq!(
            survey(&d, &members(&sims)).not_serving.as_deref(),
            Some("c-0-0")
        );
        sims[0].state_ok = None;
        assert_eq!(survey(&d, &members(&sims)).not_serving, None);
    }

    #[test]
    fn a_replicas_copy_of_a_slot_marker_is_no_open_slot() {
        let d = shape(2, 1);
        let mut sims = formed(2, 1);
        // c-1-1 (a replica) still shows an importing marker its primary no longer has.
        sims[3].markers = format!("[100-<-{}]", id(0, 0));
        assert_eq!(survey(&d, &members(&sims)).open_slots, 0);
    }

    #[test]
    fn a_switchover_succeeds_once_the_target_holds_the_slots() {
        let mut d = shape(1, 2);
        d.switchover = Some(SwitchoverRequest {
            id: "s1".into(),
            target: "c-0-2".into(),
        });
        let mut sims = formed(1, 2);
        assert_eq!(switchover_outcome(&d, &members(&sims)), None);
        // Done: c-0-2 holds the slots.
        sims[2].slots = std::mem::take(&mut sims[0].slots);
        sims[2].follows = None;
        sims[0].follows = Some(id(0, 2));
        sims[1].follows = Some(id(0, 2));
        let done = switchover_outcome(&d, &members(&sims)).unwrap().unwrap();
        assert_eq!(done.to_string(), "c-0-2 is the primary of shard 0");
        d.switchover = Some(SwitchoverRequest {
            id: "s2".into(),
            target: "c-0-7".into(),
        });
        let failed = switchover_outcome(&d, &members(&sims))
            .unwrap()
            .unwrap_err();
        assert_eq!(failed.to_string(), "c-0-7 is not a member of the cluster");
    }
}
