//! The next step for a ValkeyCluster, decided from what its members report right now
//! (CLUSTER NODES and INFO replication of each one) and never from memory: a controller
//! restarted at any moment decides the same step again, or the next one if the last step
//! took effect. One step per reconcile, in a fixed order of precedence: join members, forget
//! dead identities, assign slots, repair open slots, attach replicas, move slots, remove
//! leaving members, switchover, roll.

use std::collections::{BTreeMap, BTreeSet};

use crd_types::conditions::reasons::Waiting;
use crd_types::node::Role;

use crate::cluster_nodes::{ClusterNode, ClusterView};
use crate::model::{Address, Member, Shape};
use crate::slots::{self, Move, SlotRange};

/// Why a failover is asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailoverReason {
    /// The primary is about to restart for a roll.
    Roll,
    /// The primary's member is being removed.
    Removal,
    /// `spec.switchover`.
    Switchover,
}

/// The one thing to do next.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Nothing can be done until something changes: why, for machines and for people.
    Wait { reason: Waiting, message: String },
    /// `CLUSTER MEET` each target, sent to `via`.
    Meet { via: String, targets: Vec<Address> },
    /// `CLUSTER FORGET node_id` on each of `on`, together (the 60 s ban covers the rest).
    Forget { node_id: String, on: Vec<String> },
    /// `CLUSTER ADDSLOTSRANGE` on each member.
    AddSlots(Vec<(String, Vec<SlotRange>)>),
    /// Finish an interrupted migration of `slot` from `source` to `target` (members).
    FixOpenSlot {
        slot: u16,
        source: String,
        target: String,
    },
    /// Clear open-slot markers no migration can finish (`SETSLOT STABLE` on each member).
    Stabilize { slot: u16, on: Vec<String> },
    /// `CLUSTER REPLICATE primary_id` on `member`.
    Replicate { member: String, primary_id: String },
    /// Move slots between members.
    Migrate(Vec<Move<String>>),
    /// Delete these ValkeyNodes: they hold no slots and the spec no longer wants them.
    Remove(Vec<String>),
    /// `CLUSTER FAILOVER` on the replica `member`.
    Failover {
        member: String,
        reason: FailoverReason,
    },
    /// Open the roll gate of `member` for `revision`.
    AllowRoll { member: String, revision: String },
    /// Everything is as the spec asks.
    Idle,
}

impl Step {
    pub fn wait(reason: Waiting, message: impl Into<String>) -> Step {
        Step::Wait {
            reason,
            message: message.into(),
        }
    }

    /// Steps that change membership or slot ownership (the Scaling phase).
    pub fn is_scaling(&self) -> bool {
        matches!(
            self,
            Step::Meet { .. }
                | Step::Forget { .. }
                | Step::AddSlots(_)
                | Step::FixOpenSlot { .. }
                | Step::Stabilize { .. }
                | Step::Replicate { .. }
                | Step::Migrate(_)
                | Step::Remove(_)
        )
    }
}

/// The cluster as the planner sees it: members, and the view it trusts.
struct Snapshot<'a> {
    shape: &'a Shape,
    members: &'a [Member],
    /// The view of the member that knows the most (see [`anchor`]).
    anchor: &'a Member,
    view: &'a ClusterView,
}

impl<'a> Snapshot<'a> {
    fn reachable(&self) -> impl Iterator<Item = &'a Member> {
        self.members.iter().filter(|m| m.reply.is_some())
    }

    /// The member whose Valkey identity is `id`: its own answer, or for a member that does
    /// not answer, the node the anchor sees at its address.
    fn member_with_id(&self, id: &str) -> Option<&'a Member> {
        self.members.iter().find(|m| match m.id() {
            Some(own) => own == id,
            None => self.node_of(m).is_some_and(|n| n.id == id),
        })
    }

    /// The anchor's entry for `member`: by id when it answers, else by address.
    fn node_of(&self, member: &Member) -> Option<&'a ClusterNode> {
        match member.id() {
            Some(id) => self.view.by_id(id),
            None => {
                let address = member.address.as_ref()?;
                self.view
                    .nodes()
                    .iter()
                    .find(|n| n.ip == address.ip && n.port == address.port && !n.flags.handshake)
            }
        }
    }

    fn shard_members(&self, shard: u32) -> impl Iterator<Item = &'a Member> {
        self.members.iter().filter(move |m| m.at.shard == shard)
    }

    /// The member serving `shard`'s slots: the one primary of the shard holding slots (even
    /// a failing one: Valkey promotes its replica by itself), else member 0 while it is an
    /// empty primary (a shard being formed or added). `Err` when two members hold slots.
    fn shard_primary(&self, shard: u32) -> Result<Option<&'a Member>, String> {
        let holding: Vec<&Member> = self
            .shard_members(shard)
            .filter(|m| {
                self.node_of(m)
                    .is_some_and(|n| n.flags.primary && !n.slots.is_empty())
            })
            .collect();
        match holding.as_slice() {
            [one] => Ok(Some(one)),
            [] => Ok(self.shard_members(shard).find(|m| {
                m.at.member == 0
                    && self
                        .node_of(m)
                        .is_some_and(|n| n.flags.primary && n.slots.is_empty())
            })),
            many => Err(format!(
                "shard {shard} has {} members holding slots ({}); resolve by hand",
                many.len(),
                many.iter()
                    .map(|m| m.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    }
}

/// The member whose view to trust: one that answers, holding the most assigned slots, then
/// knowing the most nodes; wanted members before leaving ones, then by name.
fn anchor<'a>(shape: &Shape, members: &'a [Member]) -> Option<&'a Member> {
    members
        .iter()
        .filter(|m| m.reply.is_some())
        .min_by_key(|m| {
            let view = &m.reply.as_ref().unwrap().view;
            (
                std::cmp::Reverse(view.assigned_slot_count()),
                std::cmp::Reverse(view.nodes().len()),
                !shape.wants(m.at),
                m.name.clone(),
            )
        })
}

/// The next step. `recorded_switchover` is the request id status already reports as done.
pub fn next_step(shape: &Shape, members: &[Member], recorded_switchover: Option<&str>) -> Step {
    let Some(anchor) = anchor(shape, members) else {
        return Step::wait(Waiting::NoMemberAnswers, "no member answers yet");
    };
    let s = Snapshot {
        shape,
        members,
        anchor,
        view: &anchor.reply.as_ref().unwrap().view,
    };
    let forming = s.view.assigned_slot_count() == 0;
    if forming {
        let wanted: Vec<&Member> = members.iter().filter(|m| shape.wants(m.at)).collect();
        let answering = wanted.iter().filter(|m| m.reply.is_some()).count();
        if wanted.len() < shape.member_count() || answering < wanted.len() {
            return Step::wait(
                Waiting::Forming,
                format!(
                    "forming: {answering} of {} members answer",
                    shape.member_count()
                ),
            );
        }
    }
    meet(&s)
        .or_else(|| forget(&s))
        .or_else(|| form(&s, forming))
        .or_else(|| open_slots(&s))
        .or_else(|| attach_replicas(&s))
        .or_else(|| rebalance(&s))
        .or_else(|| remove(&s))
        .or_else(|| switchover(&s, recorded_switchover))
        .or_else(|| roll(&s))
        .unwrap_or(Step::Idle)
}

/// Members the anchor does not know yet.
fn meet(s: &Snapshot) -> Option<Step> {
    let targets: Vec<Address> = s
        .reachable()
        .filter(|m| m.id().is_some_and(|id| s.view.by_id(id).is_none()))
        .filter_map(|m| m.address.clone())
        .collect();
    (!targets.is_empty()).then(|| Step::Meet {
        via: s.anchor.name.clone(),
        targets,
    })
}

/// Identities no member has any more (a removed member, or one that lost its nodes.conf),
/// once Valkey itself has marked them failed. A healthy unknown node is never forgotten:
/// it may be a member alive at an address we do not know.
fn forget(s: &Snapshot) -> Option<Step> {
    let ghost = s.view.nodes().iter().find(|n| {
        !n.flags.myself
            && !n.flags.handshake
            && (n.flags.fail || n.flags.noaddr)
            && n.slots.is_empty()
            && s.member_with_id(&n.id).is_none()
    })?;
    let on: Vec<String> = s
        .reachable()
        .filter(|m| {
            let view = &m.reply.as_ref().unwrap().view;
            view.by_id(&ghost.id).is_some()
                // A replica cannot forget its own primary.
                && view.myself().primary_id.as_deref() != Some(ghost.id.as_str())
        })
        .map(|m| m.name.clone())
        .collect();
    (!on.is_empty()).then(|| Step::Forget {
        node_id: ghost.id.clone(),
        on,
    })
}

/// A new cluster: member 0 of every shard takes its part of the even split.
fn form(s: &Snapshot, forming: bool) -> Option<Step> {
    if !forming {
        return None;
    }
    let split = slots::even_split(s.shape.shards as usize);
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
fn open_slots(s: &Snapshot) -> Option<Step> {
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
        (Some(src), Some(dst)) if src.reply.is_some() && dst.reply.is_some() => Step::FixOpenSlot {
            slot,
            source: src.name.clone(),
            target: dst.name.clone(),
        },
        (Some(_), Some(_)) => Step::wait(
            Waiting::SlotEndUnreachable,
            format!("slot {slot} is open and one of its ends does not answer"),
        ),
        _ => stabilize,
    })
}

/// Members of a wanted shard that are not following the shard's primary.
fn attach_replicas(s: &Snapshot) -> Option<Step> {
    for shard in 0..s.shape.shards {
        let primary = match s.shard_primary(shard) {
            Ok(Some(p)) => p,
            Ok(None) => continue,
            Err(why) => return Some(Step::wait(Waiting::TwoPrimariesInShard, why)),
        };
        let Some(primary_node) = s.node_of(primary) else {
            continue;
        };
        if primary_node.flags.fail || primary_node.flags.pfail {
            // Valkey is failing over; let it finish.
            continue;
        }
        for m in s.shard_members(shard).filter(|m| m.name != primary.name) {
            let Some(reply) = &m.reply else { continue };
            let me = reply.view.myself();
            let follows = me.flags.replica && me.primary_id.as_deref() == Some(&primary_node.id);
            let empty_primary = me.flags.primary && me.slots.is_empty();
            if follows || !(empty_primary || me.flags.replica) {
                continue;
            }
            if reply.view.by_id(&primary_node.id).is_none() {
                return Some(Step::wait(
                    Waiting::MembersDisagree,
                    format!("{} does not know {} yet", m.name, primary.name),
                ));
            }
            return Some(Step::Replicate {
                member: m.name.clone(),
                primary_id: primary_node.id.clone(),
            });
        }
    }
    None
}

/// Slots not on an even split over the wanted shards: leaving shards give all theirs away.
fn rebalance(s: &Snapshot) -> Option<Step> {
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
            Err(why) => return Some(Step::wait(Waiting::TwoPrimariesInShard, why)),
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
                    slots::format_ranges(&ranges).join(",")
                ),
            ));
        };
        ownership
            .entry(owner.name.clone())
            .or_default()
            .extend(ranges);
    }
    let plan = match slots::plan_rebalance(&ownership, &receivers) {
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
    Some(Step::Migrate(plan.moves))
}

/// Members the spec no longer wants, once they hold no slots. A member that is its shard's
/// primary in a shard that stays hands over to a wanted replica first.
fn remove(s: &Snapshot) -> Option<Step> {
    let mut gone = Vec::new();
    for m in s.members.iter().filter(|m| !s.shape.wants(m.at)) {
        let node = s.node_of(m);
        let holds_slots = node.is_some_and(|n| !n.slots.is_empty());
        if m.at.shard >= s.shape.shards {
            if holds_slots {
                return Some(Step::wait(
                    Waiting::MemberHoldsSlots,
                    format!("{} still holds slots", m.name),
                ));
            }
            gone.push(m.name.clone());
        } else if holds_slots {
            return Some(hand_over(
                s,
                m,
                FailoverReason::Removal,
                "is its shard's primary and no wanted replica is in sync to take over",
            ));
        } else {
            gone.push(m.name.clone());
        }
    }
    (!gone.is_empty()).then_some(Step::Remove(gone))
}

/// A failover from `primary` to its most caught-up wanted replica, or a wait saying why not.
fn hand_over(s: &Snapshot, primary: &Member, reason: FailoverReason, no_replica: &str) -> Step {
    match best_replica(s, primary, |r| s.shape.wants(r.at)) {
        Some(r) => Step::Failover {
            member: r.name.clone(),
            reason,
        },
        None => Step::wait(
            Waiting::NoReplicaInSync,
            format!("{} {no_replica}", primary.name),
        ),
    }
}

/// The in-sync replica of `primary` with the highest replication offset.
fn best_replica<'a>(
    s: &Snapshot<'a>,
    primary: &Member,
    eligible: impl Fn(&Member) -> bool,
) -> Option<&'a Member> {
    let primary_id = s.node_of(primary)?.id.clone();
    s.reachable()
        .filter(|r| r.name != primary.name && r.ready && eligible(r) && r.is_synced_replica())
        .filter(|r| {
            r.reply
                .as_ref()
                .unwrap()
                .view
                .myself()
                .primary_id
                .as_deref()
                == Some(&primary_id)
        })
        .max_by_key(|r| (r.offset(), std::cmp::Reverse(r.name.clone())))
}

/// A requested switchover not yet recorded: fail over to the target when it is an in-sync
/// replica. Status reports the outcome (see [`switchover_outcome`]).
fn switchover(s: &Snapshot, recorded: Option<&str>) -> Option<Step> {
    let request = s.shape.switchover.as_ref()?;
    if recorded == Some(request.id.as_str()) {
        return None;
    }
    let member = s.members.iter().find(|m| m.name == request.target)?;
    let shard_primary = s.shard_primary(member.at.shard).ok()??;
    if shard_primary.name == member.name {
        return None;
    }
    let best = best_replica(s, shard_primary, |r| r.name == member.name)?;
    Some(Step::Failover {
        member: best.name.clone(),
        reason: FailoverReason::Switchover,
    })
}

/// What status should say about a switchover request: `None` while it is still to be done.
pub fn switchover_outcome(shape: &Shape, members: &[Member]) -> Option<Result<String, String>> {
    let target = &shape.switchover.as_ref()?.target;
    let Some(member) = members.iter().find(|m| &m.name == target) else {
        return Some(Err(format!("{target} is not a member of the cluster")));
    };
    let reply = member.reply.as_ref()?;
    let me = reply.view.myself();
    (me.flags.primary && !me.slots.is_empty()).then(|| {
        Ok(format!(
            "{target} is the primary of shard {}",
            member.at.shard
        ))
    })
}

/// One member at a time through the roll gate: replicas first; a primary hands over to its
/// most caught-up replica before it may restart.
fn roll(s: &Snapshot) -> Option<Step> {
    let wanted: Vec<&Member> = s.members.iter().filter(|m| s.shape.wants(m.at)).collect();
    // A template change reaches members one by one: wait until node-controller has rendered
    // every one, or the first member seen changing would roll first, replica or not.
    if let Some(behind) = wanted.iter().find(|m| !m.revisions.observed) {
        return Some(Step::wait(
            Waiting::SpecNotRendered,
            format!(
                "node-controller has not rendered {}'s current spec yet",
                behind.name
            ),
        ));
    }
    let settled = |m: &Member| {
        m.ready
            && m.revisions.running == m.revisions.desired
            && (m
                .reply
                .as_ref()
                .is_some_and(|r| r.replication.role == Role::Primary)
                || m.is_synced_replica())
    };
    if let Some(busy) = wanted.iter().find(|m| {
        m.revisions.desired.is_some() && m.revisions.allowed == m.revisions.desired && !settled(m)
    }) {
        return Some(Step::wait(
            Waiting::MemberRolling,
            format!(
                "{} must be ready and in sync before the next member rolls",
                busy.name
            ),
        ));
    }
    let pending: Vec<&Member> = wanted
        .iter()
        .copied()
        .filter(|m| {
            m.revisions.desired.is_some()
                && m.revisions.running != m.revisions.desired
                && m.revisions.allowed != m.revisions.desired
        })
        .collect();
    if pending.is_empty() {
        return None;
    }
    // Only a healthy cluster rolls: every wanted member answering, ready and settled, except
    // those waiting for their own roll.
    let is_pending = |m: &Member| pending.iter().any(|p| p.name == m.name);
    if let Some(unwell) = wanted
        .iter()
        .find(|m| !is_pending(m) && (m.reply.is_none() || !m.ready || !settled(m)))
    {
        return Some(Step::wait(
            Waiting::MemberNotReady,
            format!("{} must be ready before the next member rolls", unwell.name),
        ));
    }
    let is_down = |m: &Member| m.reply.is_none() || !m.ready;
    // A pending member that is down serves nothing, so its roll costs nothing and may be what
    // heals it (a bad image reverted: its gate still names the broken revision).
    if let Some(down) = pending.iter().find(|m| is_down(m)) {
        return Some(Step::AllowRoll {
            member: down.name.clone(),
            revision: down.revisions.desired.clone()?,
        });
    }
    let is_replica = |m: &Member| {
        m.reply
            .as_ref()
            .is_some_and(|r| r.replication.role == Role::Replica)
    };
    let next = pending
        .iter()
        .find(|m| is_replica(m))
        .or_else(|| pending.first())?;
    if !is_replica(next) && s.shape.replicas_per_shard > 0 {
        // A primary with replicas never restarts while it serves: hand over first.
        return Some(hand_over(
            s,
            next,
            FailoverReason::Roll,
            "waits for an in-sync replica to hand over to before it restarts",
        ));
    }
    Some(Step::AllowRoll {
        member: next.name.clone(),
        revision: next.revisions.desired.clone()?,
    })
}

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
    let Some(anchor) = anchor(shape, members) else {
        return Survey::default();
    };
    let s = Snapshot {
        shape,
        members,
        anchor,
        view: &anchor.reply.as_ref().unwrap().view,
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
                                && m.reply
                                    .as_ref()
                                    .unwrap()
                                    .view
                                    .myself()
                                    .primary_id
                                    .as_deref()
                                    == primary_node.map(|n| n.id.as_str())))
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
        .filter(|m| m.name != anchor.name)
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
    }
}

/// Whether `member` files some replica under another shard id than its primary's.
fn unsettled_shard_ids(member: &Member) -> Option<String> {
    let reply = member.reply.as_ref()?;
    let groups = reply.shard_groups.as_ref()?;
    let group_of = |id: &str| groups.iter().position(|g| g.iter().any(|n| n == id));
    reply.view.nodes().iter().find_map(|n| {
        let primary = n.primary_id.as_deref().filter(|_| n.flags.replica)?;
        let (mine, theirs) = (group_of(&n.id)?, group_of(primary)?);
        (mine != theirs).then(|| {
            format!(
                "{} still files replica {} apart from its primary {primary}",
                member.name, n.id
            )
        })
    })
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
