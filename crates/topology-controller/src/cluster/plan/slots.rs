//! Planner rules (layer 4): slots. Assign the even split to a new cluster, finish or clear
//! slots an interrupted move left open, and move slots to an even split over the wanted
//! shards.

use std::collections::{BTreeMap, BTreeSet};

use crd_types::conditions::reasons::Waiting;

use super::progress::TRIES_PER_METHOD;
use super::snapshot::Snapshot;
use super::{MarkerHeal, Step};
use crate::cluster::cluster_nodes::ClusterView;
use crate::cluster::model::Member;
use crate::cluster::slots::{SlotRange, even_split, format_ranges, plan_rebalance};

/// A new cluster: member 0 of every shard takes its part of the even split.
pub(super) fn form(s: &Snapshot, forming: bool) -> Option<Step> {
    if !forming {
        return None;
    }
    let split = even_split(s.shape.shards as usize);
    let mut out = Vec::new();
    for (shard, ranges) in split.into_iter().enumerate() {
        let Some(first) = s
            .shard_members(shard as u32)
            .find(|m| m.at.member == 0 && s.shape.wants(m.at))
        else {
            return Some(Step::wait(
                Waiting::MemberMissing,
                format!("shard {shard} has no member 0 yet"),
            ));
        };
        out.push((first.name.clone(), ranges));
    }
    Some(Step::AddSlots(out))
}

/// Slots left importing or migrating (a migration interrupted by a restart): finish the
/// move when both ends are members, otherwise clear the markers.
pub(super) fn open_slots(s: &Snapshot) -> Option<Step> {
    // Primaries only: Valkey 8 copies SETSLOT to replicas, which refuse it from us, and a
    // replica's copy of a marker is its primary's business.
    let (m, slot, from, to) = s.reachable().find_map(|m| {
        let me = m.reply.as_ref().unwrap().view.myself();
        if !me.flags.primary {
            return None;
        }
        let migrating = me
            .migrating
            .first()
            .map(|(slot, to)| (*slot, me.id.clone(), to.clone()));
        let importing = me
            .importing
            .first()
            .map(|(slot, from)| (*slot, from.clone(), me.id.clone()));
        let (slot, from, to) = migrating.or(importing)?;
        Some((m, slot, from, to))
    })?;
    // The owner as the anchor sees it is the source, whatever the marker says.
    let source = s
        .view
        .slot_owner(slot)
        .map(|n| n.id.clone())
        .unwrap_or(from);
    let stabilize = Step::Stabilize {
        slot,
        on: vec![m.name.clone()],
    };
    Some(match (s.member_with_id(&source), s.member_with_id(&to)) {
        (Some(src), Some(dst)) if src.name == dst.name => stabilize,
        (Some(src), Some(dst)) if src.reply.is_some() && dst.reply.is_some() => {
            // Finishing sends the final NODE: every replica must be online to receive it.
            if let Some(why) = replica_not_online(src).or_else(|| replica_not_online(dst)) {
                return Some(Step::wait(
                    Waiting::ReplicaNotSynced,
                    format!("slot {slot} is open: {why}; it is finished once they are online"),
                ));
            }
            Step::FixOpenSlot {
                slot,
                source: src.name.clone(),
                target: dst.name.clone(),
            }
        }
        (Some(_), Some(_)) => Step::wait(
            Waiting::SlotEndUnreachable,
            format!("slot {slot} is open and one of its ends does not answer"),
        ),
        _ => stabilize,
    })
}

/// Which marker a replica keeps, and the node it names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkerKind {
    Importing,
    Migrating,
}

impl MarkerKind {
    pub fn as_str(self) -> &'static str {
        match self {
            MarkerKind::Importing => "importing",
            MarkerKind::Migrating => "migrating",
        }
    }
}

/// A slot marker a replica keeps but its primary does not have.
pub(crate) struct StaleMarker<'a> {
    pub slot: u16,
    pub kind: MarkerKind,
    pub replica: &'a Member,
    pub primary: &'a Member,
}

/// Replicas' slot markers their primaries no longer have. Valkey 8.0 copies slot states
/// only to replicas online at that moment, a replica's full sync loads the markers its
/// primary had when the sync began (valkey-io/valkey#998), and a primary's own gossip
/// handling clears an importing marker without telling its replicas: a replica left so
/// keeps its marker, refuses SETSLOT itself, and would serve with it if promoted. During a
/// move a replica mirrors its primary's markers, which is not stale.
pub(crate) fn stale_markers<'a>(s: &Snapshot<'a>) -> Vec<StaleMarker<'a>> {
    let mut found = Vec::new();
    for replica in s.reachable() {
        let me = replica.reply.as_ref().unwrap().view.myself();
        if !me.flags.replica {
            continue;
        }
        let Some(primary) = me.primary_id.as_deref().and_then(|id| s.member_with_id(id)) else {
            continue;
        };
        let Some(primary_reply) = &primary.reply else {
            continue;
        };
        let theirs = primary_reply.view.myself();
        let open_there = |slot: u16| {
            theirs
                .importing
                .iter()
                .chain(&theirs.migrating)
                .any(|(open, _)| *open == slot)
        };
        let markers = (me.importing.iter().map(|m| (m, MarkerKind::Importing)))
            .chain(me.migrating.iter().map(|m| (m, MarkerKind::Migrating)));
        for ((slot, _), kind) in markers {
            if !open_there(*slot) {
                found.push(StaleMarker {
                    slot: *slot,
                    kind,
                    replica,
                    primary,
                });
            }
        }
    }
    found
}

/// A stale marker on a replica, cleared through its primary once the replica is online:
/// the methods of [`MarkerHeal::ladder`] in turn, each taken until it has been taken
/// [`TRIES_PER_METHOD`] times on an unchanged cluster (`tried` counts), then the next; once
/// every method is spent, a `NoProgress` wait.
pub(super) fn clear_stale_markers(s: &Snapshot, tried: &dyn Fn(&Step) -> u32) -> Option<Step> {
    let stale = stale_markers(s);
    let first = stale.first()?;
    let Some(owner) = s.view.slot_owner(first.slot) else {
        return None; // an unowned slot is form's or rebalance's business
    };
    // The replica says it is in sync, and its primary that every replica is online: what
    // the primary is sent then reaches it.
    let not_online = replica_not_online(first.primary).or_else(|| {
        (!first.replica.is_synced_replica())
            .then(|| format!("{} is not in sync", first.replica.name))
    });
    if let Some(why) = not_online {
        return Some(Step::wait(
            Waiting::ReplicaNotSynced,
            format!(
                "{} keeps a stale marker for slot {}; it is cleared once it is online ({why})",
                first.replica.name, first.slot
            ),
        ));
    }
    let owned_by_primary = first.primary.id() == Some(owner.id.as_str());
    let owner_name = match s.member_with_id(&owner.id) {
        _ if owned_by_primary => format!("its primary {}", first.primary.name),
        Some(m) if !s.shape.wants(m.at) => format!("{}, which is leaving", m.name),
        Some(m) => format!("{} of another shard", m.name),
        None => format!("node {}, which is no member", owner.id),
    };
    let step = |heal| Step::ClearStaleMarker {
        slot: first.slot,
        marker: first.kind,
        replica: first.replica.name.clone(),
        primary: first.primary.name.clone(),
        owner_id: owner.id.clone(),
        owner: owner_name.clone(),
        heal,
    };
    let ladder = MarkerHeal::ladder(owned_by_primary);
    if let Some(heal) = ladder
        .iter()
        .find(|heal| tried(&step(**heal)) < TRIES_PER_METHOD)
    {
        return Some(step(*heal));
    }
    let last = step(*ladder.last().unwrap());
    Some(Step::wait(
        Waiting::NoProgress,
        format!(
            "{last}: every method was tried {TRIES_PER_METHOD} times and the marker stays; \
             nothing more is tried until something changes (or topology-controller restarts)"
        ),
    ))
}

/// Why some replica of `primary` (as its own CLUSTER NODES counts them) is not online on
/// it; `None` when all are. A slot may open or close only then, or that replica misses the
/// slot's state.
fn replica_not_online(primary: &Member) -> Option<String> {
    let reply = primary.reply.as_ref()?;
    let me = reply.view.myself();
    let expected = reply.view.replicas_of(&me.id).count();
    reply
        .replication
        .replicas_not_online(expected)
        .map(|why| format!("on {}, {why}", primary.name))
}

/// Slots not on an even split over the wanted shards: leaving shards give all theirs away.
pub(super) fn rebalance(s: &Snapshot) -> Option<Step> {
    let mut receivers = BTreeSet::new();
    for shard in 0..s.shape.shards {
        match s.shard_primary(shard) {
            Ok(Some(p)) => {
                receivers.insert(p.name.clone());
            }
            Ok(None) => {
                return Some(Step::wait(
                    Waiting::ShardWithoutPrimary,
                    format!("shard {shard} has no primary yet"),
                ));
            }
            Err(why) => return Some(Step::wait(Waiting::TwoPrimariesInShard, why.to_string())),
        }
    }
    // Ownership by member name; a slot owner that is no member (a failed identity) blocks.
    let mut ownership: BTreeMap<String, Vec<SlotRange>> = BTreeMap::new();
    for (id, ranges) in s.view.ownership() {
        let Some(owner) = s.member_with_id(&id) else {
            return Some(Step::wait(
                Waiting::SlotsOwnedByStranger,
                format!(
                    "slots {} belong to {id}, which is no member",
                    format_ranges(&ranges).join(",")
                ),
            ));
        };
        ownership
            .entry(owner.name.clone())
            .or_default()
            .extend(ranges);
    }
    let plan = match plan_rebalance(&ownership, &receivers) {
        Ok(plan) => plan,
        Err(e) => {
            return Some(Step::wait(
                Waiting::SlotPlanImpossible,
                format!("cannot plan slots: {e}"),
            ));
        }
    };
    if plan.is_empty() {
        return None;
    }
    // Moving keys needs every end to answer and every member to agree on the slot map.
    let ends: BTreeSet<&str> = plan
        .assignments
        .iter()
        .map(|a| a.to.as_str())
        .chain(
            plan.moves
                .iter()
                .flat_map(|m| [m.from.as_str(), m.to.as_str()]),
        )
        .collect();
    for end in &ends {
        let member = s.members.iter().find(|m| m.name == *end);
        if member.is_none_or(|m| m.reply.is_none() || !m.ready) {
            return Some(Step::wait(
                Waiting::MigrationEndNotReady,
                format!("{end} must answer before slots move"),
            ));
        }
    }
    let views: Vec<ClusterView> = s
        .reachable()
        .filter(|m| m.name != s.anchor.name)
        .map(|m| m.reply.as_ref().unwrap().view.clone())
        .collect();
    for other in &views {
        if let Some(d) = s.view.disagreement_with(other) {
            return Some(Step::wait(
                Waiting::MembersDisagree,
                format!("waiting for members to agree: {d}"),
            ));
        }
    }
    if !plan.assignments.is_empty() {
        let mut by_member: BTreeMap<String, Vec<SlotRange>> = BTreeMap::new();
        for a in plan.assignments {
            by_member.entry(a.to).or_default().push(a.slots);
        }
        return Some(Step::AddSlots(by_member.into_iter().collect()));
    }
    // A slot opens and closes only while every replica of both ends can receive its state.
    for end in &ends {
        let member = s.members.iter().find(|m| m.name == *end)?;
        if let Some(why) = replica_not_online(member) {
            return Some(Step::wait(
                Waiting::ReplicaNotSynced,
                format!("{why}; slots move only while every replica of both ends is online"),
            ));
        }
    }
    Some(Step::Migrate(plan.moves))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::plan::{next_step, next_step_after};
    use crate::cluster::sim::*;
    use crate::cluster::slots;

    #[test]
    fn formation_interrupted_after_some_slots_assigns_the_rest() {
        let d = shape(2, 0);
        let mut sims = vec![sim(0, 0), sim(1, 0)];
        sims[0].slots = vec![(0, 8191)];
        assert_eq!(
            step(&d, &sims),
            Step::AddSlots(vec![("c-1-0".into(), vec![(8192, 16383)])])
        );
    }

    #[test]
    fn scale_out_joins_attaches_then_moves_a_quarter() {
        let d = shape(4, 1);
        let mut sims = formed(3, 1);
        sims.push(sim(3, 0));
        sims.push(sim(3, 1));
        // New members are known to nobody yet.
        let fresh = |s: &Sim| s.shard == 3;
        let m = members_with(&sims, |viewer, node| fresh(viewer) == fresh(node));
        // Every member meets the new primary; its replica, known to it already, meets the
        // others only once it follows it.
        match next_step(&d, &m, None) {
            Step::Meet(meets) => {
                assert_eq!(meets.len(), 6, "{meets:?}");
                for (_, targets) in &meets {
                    let targets: Vec<&str> = targets.iter().map(|a| a.ip.as_str()).collect();
                    assert_eq!(targets, vec![ip(3, 0).as_str()]);
                }
            }
            other => panic!("{other:?}"),
        }
        // Joined: the new replica follows the new empty primary first.
        assert_eq!(
            step(&d, &sims),
            Step::Replicate(vec![("c-3-1".into(), id(3, 0))])
        );
        sims[7].follows = Some(id(3, 0));
        match step(&d, &sims) {
            Step::Migrate(moves) => {
                assert!(moves.iter().all(|m| m.to == "c-3-0"));
                let moved: usize = moves.iter().map(|m| slots::slot_count(&[m.slots])).sum();
                assert_eq!(moved, 4096);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn slots_do_not_move_while_a_member_is_down_or_views_disagree() {
        let d = shape(4, 0);
        let mut sims = formed(3, 0);
        sims.push(sim(3, 0));
        sims[3].ready = false;
        let (reason, why) = wait_of(step(&d, &sims));
        assert_eq!(reason, Waiting::MigrationEndNotReady);
        assert!(why.contains("c-3-0 must answer"), "{why}");
        sims[3].ready = true;
        // c-1-0 believes slot 0 is its own.
        let mut m = members(&sims);
        let other = &mut m[1].reply.as_mut().unwrap().view;
        let text = [
            line(&sims[0], false).unwrap().replace(" 0-5460", " 1-5460"),
            line(&sims[1], true).unwrap().replace(" 5461-", " 0 5461-"),
            line(&sims[2], false).unwrap(),
            line(&sims[3], false).unwrap(),
        ]
        .join("\n");
        *other = ClusterView::parse(&text).unwrap();
        // No move: instead of waiting for gossip, each side of the dispute tells the
        // other its own view again (Valkey settles the claim by config epoch).
        match next_step(&d, &m, None) {
            Step::Refresh(meets) => {
                let met: Vec<(&str, usize)> = meets
                    .iter()
                    .map(|(via, t)| (via.as_str(), t.len()))
                    .collect();
                assert_eq!(met, vec![("c-0-0", 1), ("c-1-0", 3)]);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_interrupted_migration_is_finished() {
        let d = shape(2, 0);
        let mut sims = formed(2, 0);
        sims[0].markers = format!("[100->-{}]", id(1, 0));
        sims[1].markers = format!("[100-<-{}]", id(0, 0));
        assert_eq!(
            step(&d, &sims),
            Step::FixOpenSlot {
                slot: 100,
                source: "c-0-0".into(),
                target: "c-1-0".into()
            }
        );
        // A marker towards a node that is no member: cleared.
        sims[1].markers.clear();
        sims[0].markers = format!("[100->-{}]", "e".repeat(40));
        assert_eq!(
            step(&d, &sims),
            Step::Stabilize {
                slot: 100,
                on: vec!["c-0-0".into()]
            }
        );
    }

    #[test]
    fn a_replicas_stale_marker_is_cleared_through_its_primary_once_it_is_online() {
        let d = shape(2, 1);
        let mut sims = formed(2, 1);
        // c-1-1 (a replica) still shows an importing marker its primary no longer has: it
        // missed the end of a move while syncing (valkey-io/valkey#998).
        sims[3].markers = format!("[100-<-{}]", id(0, 0));
        sims[3].synced = false;
        let (reason, why) = wait_of(step(&d, &sims));
        assert_eq!(reason, Waiting::ReplicaNotSynced);
        assert!(
            why.contains("c-1-1 keeps a stale marker for slot 100; it is cleared once it is online (on c-1-0, a replica (connected from 10.1.1.1:6379) is wait_bgsave)"),
            "{why}"
        );
        sims[3].synced = true;
        assert_eq!(step(&d, &sims), stale_step(MarkerHeal::Stable));
        // While its primary has the slot open too, it is a move in flight, not stale.
        sims[2].markers = format!("[100-<-{}]", id(0, 0));
        sims[0].markers = format!("[100->-{}]", id(1, 0));
        assert!(matches!(
            step(&d, &sims),
            Step::FixOpenSlot { slot: 100, .. }
        ));
    }

    /// The step clearing c-1-1's importing marker for slot 100, which c-0-0 of the other
    /// shard owns, by `heal`.
    fn stale_step(heal: MarkerHeal) -> Step {
        Step::ClearStaleMarker {
            slot: 100,
            marker: MarkerKind::Importing,
            replica: "c-1-1".into(),
            primary: "c-1-0".into(),
            owner_id: id(0, 0),
            owner: "c-0-0 of another shard".into(),
            heal,
        }
    }

    #[test]
    fn a_heal_that_changes_nothing_escalates_and_then_stops() {
        let d = shape(2, 1);
        let mut sims = formed(2, 1);
        // The shape of issue 41: the replica imports a slot another shard owns, its primary
        // has no marker, and `SETSLOT NODE owner` through the primary would not reach it.
        sims[3].markers = format!("[100-<-{}]", id(0, 0));
        let m = members(&sims);
        let after = |stable: u32, reopen: u32, resync: u32| {
            let tried = move |step: &Step| match step {
                Step::ClearStaleMarker { heal, .. } => match heal {
                    MarkerHeal::Stable => stable,
                    MarkerHeal::Reopen => reopen,
                    MarkerHeal::Resync => resync,
                },
                _ => 0,
            };
            next_step_after(&d, &m, None, &tried)
        };
        let t = TRIES_PER_METHOD;
        assert_eq!(after(0, 0, 0), stale_step(MarkerHeal::Stable));
        assert_eq!(after(t - 1, 0, 0), stale_step(MarkerHeal::Stable));
        assert_eq!(after(t, 0, 0), stale_step(MarkerHeal::Reopen));
        assert_eq!(after(t, t, 0), stale_step(MarkerHeal::Resync));
        assert_eq!(
            stale_step(MarkerHeal::Reopen).to_string(),
            "clearing the stale importing marker of slot 100 (owned by c-0-0 of another shard) \
             on replica c-1-1: opening and closing slot 100 on c-1-0 (STABLE alone changed \
             nothing)"
        );
        let (reason, why) = wait_of(after(t, t, t));
        assert_eq!(reason, Waiting::NoProgress);
        assert!(
            why.contains("CLUSTER RESET SOFT and a full sync from c-1-0 (nothing sent through c-1-0 reached it): every method was tried 3 times"),
            "{why}"
        );

        // Owned by the replica's own primary (and migrating): nothing to re-open through
        // the primary, so the resync follows STABLE.
        let mut sims = formed(2, 1);
        sims[3].markers = format!("[9000->-{}]", id(0, 0));
        let m = members(&sims);
        let tried = |step: &Step| match step {
            Step::ClearStaleMarker { heal, .. } if *heal == MarkerHeal::Stable => t,
            _ => 0,
        };
        match next_step_after(&d, &m, None, &tried) {
            Step::ClearStaleMarker {
                marker,
                owner,
                heal,
                ..
            } => {
                assert_eq!(marker, MarkerKind::Migrating);
                assert_eq!(owner, "its primary c-1-0");
                assert_eq!(heal, MarkerHeal::Resync);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn slots_move_and_open_slots_close_only_while_every_replica_of_both_ends_is_online() {
        let d = shape(4, 1);
        let mut sims = formed(3, 1);
        sims.push(sim(3, 0));
        sims.push(sim(3, 1));
        sims[7].follows = Some(id(3, 0));
        sims[7].synced = false; // the new shard's replica is still in its first full sync
        let (reason, why) = wait_of(step(&d, &sims));
        assert_eq!(reason, Waiting::ReplicaNotSynced);
        assert!(
            why.contains("on c-3-0, a replica (connected from 10.1.3.1:6379) is wait_bgsave"),
            "{why}"
        );
        sims[7].synced = true;
        assert!(matches!(step(&d, &sims), Step::Migrate(_)));

        // An open slot is finished only once the replicas of both ends are online.
        let d = shape(2, 1);
        let mut sims = formed(2, 1);
        sims[0].markers = format!("[100->-{}]", id(1, 0));
        sims[2].markers = format!("[100-<-{}]", id(0, 0));
        sims[1].synced = false;
        let (reason, why) = wait_of(step(&d, &sims));
        assert_eq!(reason, Waiting::ReplicaNotSynced);
        assert!(
            why.contains("slot 100 is open: on c-0-0, a replica (connected from 10.1.0.1:6379)"),
            "{why}"
        );
    }
}
