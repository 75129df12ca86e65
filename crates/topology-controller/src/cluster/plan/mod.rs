//! Planner (layer 4): the next step for a ValkeyCluster, decided from what its members
//! report right now (CLUSTER NODES and INFO replication of each one) and never from memory:
//! a controller restarted at any moment decides the same step again, or the next one if the
//! last step took effect. One step per reconcile, in a fixed order of precedence: replace
//! a primary Kubernetes shows is not running ([`gone`]), the `replication` user where a member
//! lacks it ([`crate::shared::acl`]), join members, forget dead identities, assign slots, repair open slots and replicas' stale
//! markers, attach replicas, wait for atomic slot migrations in flight, move slots (never to
//! an older data format; atomically where both ends run 9.0+), remove leaving members, set
//! live directives, switchover, refuse a template the members cannot take ([`crate::shared::target`]),
//! roll. [`guard`] then holds the step back for what is known of the passwords.
//!
//! The one input besides the members' answers is [`progress`]: how often a step was already
//! taken on the cluster as it is now. A stale marker's heal escalates on it, and a step that
//! keeps changing nothing is held back; a restarted controller counts from zero, so it
//! still decides the first method again.
//!
//! The rules live in one module each: `membership` (meet, forget, remove), `slots`
//! (form, open slots, rebalance), [`replicas`] (attach, hand over) and [`roll`]
//! (switchover, roll). `replicas` and `roll` know no slots: a cluster's facts reach them as
//! plain data (a member's node id, its shard's primary), so a ValkeyReplication can share
//! them.

mod gone;
pub mod guard;
pub mod live;
mod membership;
pub mod progress;
pub mod replicas;
pub mod roll;
pub(crate) mod slots;
pub(crate) mod snapshot;

use std::fmt;

use crd_types::conditions::reasons::Waiting;
use crd_types::versions;

use crate::cluster::model::{Member, Shape};
use crate::cluster::slot_jobs;
use crate::cluster::slots::{Move, SlotRange, format_ranges, slot_count};
use crate::shared::acl::{self, ReplicationPassword};
use crate::shared::guard::{Holds, step_states};
use crate::shared::member_facts::Address;
use crate::shared::roll::{FailoverReason, RollStep};
use progress::{Attempts, Seen};
pub use slots::MarkerKind;
use snapshot::Snapshot;

/// How a replica's stale slot marker is cleared. Each method is taken only after the one
/// before it changed nothing (see [`progress`]); docs/cluster.md has the table of
/// marker shapes and what reaches the replica on each Valkey version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkerHeal {
    /// `SETSLOT slot STABLE` on the primary, which has no marker for the slot: Valkey 8.0+
    /// copies it to its online replicas, where it clears both markers whoever owns the slot
    /// (`SETSLOT NODE owner` would not: a replica drops an importing marker for it only when
    /// the owner is its own primary, and a migrating one only for a slot without keys).
    Stable,
    /// Where another shard owns the slot: the primary opens it (`IMPORTING owner`) and
    /// closes it again (`STABLE`), both copied to its replicas.
    Reopen,
    /// The last resort: `CLUSTER RESET SOFT` on the replica, which forgets its markers and
    /// its data (its primary has the data); the planner then meets it and attaches it again,
    /// a full sync.
    Resync,
}

impl MarkerHeal {
    /// The methods in the order they are tried.
    pub fn ladder(owned_by_primary: bool) -> &'static [MarkerHeal] {
        if owned_by_primary {
            &[MarkerHeal::Stable, MarkerHeal::Resync]
        } else {
            &[MarkerHeal::Stable, MarkerHeal::Reopen, MarkerHeal::Resync]
        }
    }
}

/// The one thing to do next.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Nothing can be done until something changes: why, for machines and for people.
    Wait { reason: Waiting, message: String },
    /// `CLUSTER MEET` each target, sent to the member it is listed under.
    Meet(Vec<(String, Vec<Address>)>),
    /// `CLUSTER MEET` again, to peers that already know the member it is listed under but
    /// hold a stale view of it (see `membership::refresh`).
    Refresh(Vec<(String, Vec<Address>)>),
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
    /// A replica kept a marker for `slot` its primary no longer has (it missed the move's
    /// final state while syncing, or its primary dropped the marker by itself): cleared by
    /// `heal`, through `primary` where it can be.
    ClearStaleMarker {
        slot: u16,
        marker: MarkerKind,
        replica: String,
        primary: String,
        /// The slot's owner, and how it stands to the replica, for people.
        owner_id: String,
        owner: String,
        heal: MarkerHeal,
    },
    /// `CLUSTER REPLICATE primary_id` on each `(member, primary_id)`: every replica that can
    /// be attached, at once (a forming cluster attaches all its replicas in one step).
    Replicate(Vec<(String, String)>),
    /// Move slots between members the classic way (IMPORTING/MIGRATING, MIGRATE).
    Migrate(Vec<Move<String>>),
    /// Move slots with Valkey's atomic slot migration (both ends on 9.0+).
    MigrateAtomically(Vec<Move<String>>),
    /// Delete these ValkeyNodes: they hold no slots and the spec no longer wants them.
    Remove(Vec<String>),
    /// `CLUSTER FAILOVER` on the replica `member` (`FORCE` for [`FailoverReason::PrimaryGone`]).
    Failover {
        member: String,
        reason: FailoverReason,
    },
    /// `CONFIG SET name value` of each pair on each member (live directives).
    SetConfig(Vec<(String, Vec<(String, String)>)>),
    /// `ACL SETUSER replication` on each of `members`, whose running config predates the
    /// user (or lost it): before a rolled replica logs in to one of them as that user.
    CreateReplicationUser {
        /// Each member, with whether it gets the atomic slot migration rules (a cluster
        /// member on 9.0+).
        members: Vec<(String, bool)>,
        password: ReplicationPassword,
    },
    /// Open the roll gate of `member` for `revision`.
    AllowRoll { member: String, revision: String },
    /// Everything is as the spec asks.
    Idle,
}

step_states!(Step);

/// "a meets 10.0.0.1:6379, 10.0.0.2:6379; b meets ..." with `suffix` after each.
fn describe_meets(meets: &[(String, Vec<Address>)], suffix: &str) -> String {
    let each: Vec<String> = meets
        .iter()
        .map(|(via, targets)| {
            let who: Vec<String> = targets
                .iter()
                .map(|a| format!("{}:{}", a.ip, a.port))
                .collect();
            format!("{via} meets {}{suffix}", who.join(", "))
        })
        .collect();
    each.join("; ")
}

/// A person's description of the step, for the Progressing condition and Events.
impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Wait { message, .. } => write!(f, "waiting: {message}"),
            Step::Meet(meets) => f.write_str(&describe_meets(meets, "")),
            Step::Refresh(meets) => f.write_str(&describe_meets(
                meets,
                " again (their view of it lags behind)",
            )),
            Step::Forget { node_id, on } => {
                write!(f, "forgetting removed node {node_id} on {}", on.join(", "))
            }
            Step::AddSlots(assign) => {
                let parts: Vec<String> = assign
                    .iter()
                    .map(|(m, r)| format!("{} to {m}", format_ranges(r).join(",")))
                    .collect();
                write!(f, "assigning slots {}", parts.join("; "))
            }
            Step::FixOpenSlot {
                slot,
                source,
                target,
            } => write!(
                f,
                "finishing the interrupted move of slot {slot} from {source} to {target}"
            ),
            Step::Stabilize { slot, on } => {
                write!(f, "clearing the open slot {slot} on {}", on.join(", "))
            }
            Step::ClearStaleMarker {
                slot,
                marker,
                replica,
                primary,
                owner,
                heal,
                ..
            } => {
                let how = match heal {
                    MarkerHeal::Stable => format!("SETSLOT {slot} STABLE through {primary}"),
                    MarkerHeal::Reopen => format!(
                        "opening and closing slot {slot} on {primary} (STABLE alone changed nothing)"
                    ),
                    MarkerHeal::Resync => format!(
                        "CLUSTER RESET SOFT and a full sync from {primary} (nothing sent through {primary} reached it)"
                    ),
                };
                write!(
                    f,
                    "clearing the stale {} marker of slot {slot} (owned by {owner}) on replica {replica}: {how}",
                    marker.as_str()
                )
            }
            Step::Replicate(attaches) => {
                let each: Vec<String> = attaches
                    .iter()
                    .map(|(member, primary_id)| format!("{member} replicates {primary_id}"))
                    .collect();
                write!(f, "{}", each.join(", "))
            }
            Step::Migrate(moves) => {
                let count: usize = moves.iter().map(|m| slot_count(&[m.slots])).sum();
                write!(f, "moving {count} slots")
            }
            Step::MigrateAtomically(moves) => {
                let count: usize = moves.iter().map(|m| slot_count(&[m.slots])).sum();
                write!(f, "moving {count} slots atomically")
            }
            Step::Remove(names) => write!(f, "removing {}", names.join(", ")),
            Step::Failover { member, reason } => {
                let why = match reason {
                    FailoverReason::Roll => "before its primary restarts",
                    FailoverReason::Removal => "before its primary is removed",
                    FailoverReason::Switchover => "as requested by spec.switchover",
                    FailoverReason::PrimaryGone => {
                        "by force: Kubernetes shows its primary's server is not running"
                    }
                };
                write!(f, "{member} takes over its shard {why}")
            }
            Step::SetConfig(changes) => f.write_str(&crate::shared::live::describe(changes)),
            Step::CreateReplicationUser { members, .. } => {
                let names: Vec<&str> = members.iter().map(|(m, _)| m.as_str()).collect();
                write!(f, "{} get the replication user", names.join(", "))
            }
            Step::AllowRoll { member, revision } => write!(f, "{member} restarts into {revision}"),
            Step::Idle => f.write_str("the cluster is as specified"),
        }
    }
}

/// What the next step depends on besides the members' answers.
#[derive(Clone, Debug, Default)]
pub struct Circumstances<'a> {
    /// The switchover request id status already reports as done.
    pub recorded_switchover: Option<&'a str>,
    /// A foreign member, the passwords, the TLS Secret ([`crate::shared::guard::Holds`]).
    pub holds: Holds<'a>,
    /// The steps this controller took lately and how often, for the progress check
    /// ([`progress`]); `None` counts nothing.
    pub attempts: Option<&'a Attempts>,
}

/// The step to take: the planner's, unless a foreign ValkeyNode holds a member's name (never
/// taken over), then held back by what is known of the passwords ([`crate::shared::guard::decide`]).
pub fn decide(shape: &Shape, members: &[Member], c: &Circumstances) -> Step {
    crate::shared::guard::decide(&c.holds, "this cluster", || {
        let seen = Seen::of(members);
        let tried = |step: &Step| c.attempts.map_or(0, |a| a.times(step, seen));
        let step = next_step_after(shape, members, c.recorded_switchover, &tried);
        let times = tried(&step);
        progress::hold_without_effect(step, times)
    })
}

/// Names the wanted members without an address, and where the address comes from: an
/// installation without service-controller (the minimal overlay) stops here for good.
fn unaddressed(shape: &Shape, members: &[Member]) -> String {
    let names: Vec<&str> = members
        .iter()
        .filter(|m| shape.wants(m.at) && m.address.is_none())
        .map(|m| m.name.as_str())
        .collect();
    if names.is_empty() {
        return String::new();
    }
    format!(
        "; no address yet for {}: with announce: Service the address is the member's Service \
         IP, which service-controller publishes in the ValkeyNode's status.endpoint (is it \
         installed?); with announce: PodIP it is the pod's IP",
        names.join(", ")
    )
}

/// The next step. `recorded_switchover` is the request id status already reports as done.
pub fn next_step(shape: &Shape, members: &[Member], recorded_switchover: Option<&str>) -> Step {
    next_step_after(shape, members, recorded_switchover, &|_| 0)
}

/// The next step, with `tried` telling how often a step was taken already on the cluster as
/// it is now (heals escalate on it).
fn next_step_after(
    shape: &Shape,
    members: &[Member],
    recorded_switchover: Option<&str>,
    tried: &dyn Fn(&Step) -> u32,
) -> Step {
    let Some(s) = Snapshot::new(shape, members) else {
        return Step::wait(
            Waiting::NoMemberAnswers,
            format!("no member answers yet{}", unaddressed(shape, members)),
        );
    };
    let forming = s.view.assigned_slot_count() == 0;
    if forming {
        let wanted: Vec<&Member> = members.iter().filter(|m| shape.wants(m.at)).collect();
        let answering = wanted.iter().filter(|m| m.reply.is_some()).count();
        if wanted.len() < shape.member_count() || answering < wanted.len() {
            return Step::wait(
                Waiting::Forming,
                format!(
                    "forming: {answering} of {} members answer{}",
                    shape.member_count(),
                    unaddressed(shape, members)
                ),
            );
        }
    }
    let step = decide_next(&s, recorded_switchover, forming, tried);
    // Nothing to do but wait for gossip: bring stale views up to date instead.
    match step {
        Step::Idle
        | Step::Wait {
            reason: Waiting::MembersDisagree,
            ..
        } => membership::refresh(&s).unwrap_or(step),
        step => step,
    }
}

/// `Step::CreateReplicationUser` for the members that answered without a usable
/// `replication` user: a replica attached, failed over or rolled onto one of them logs in as
/// that user. Before everything but a forced failover, so no such step finds it missing.
fn replication_user(shape: &Shape, members: &[Member]) -> Option<Step> {
    let password = shape.replication_password.as_ref()?;
    let lacking = acl::lacking_replication_user(
        password,
        members.iter().map(|m| {
            let read = m.reply.as_ref().and_then(|r| r.replication_user.as_ref());
            let atomic = m.version().is_some_and(|v| v >= slot_jobs::SINCE);
            (m.name.as_str(), read.map(Option::as_ref), atomic)
        }),
    );
    (!lacking.is_empty()).then(|| Step::CreateReplicationUser {
        members: lacking,
        password: password.clone(),
    })
}

/// The first rule that has something to do, in order.
fn decide_next(
    s: &Snapshot,
    recorded_switchover: Option<&str>,
    forming: bool,
    tried: &dyn Fn(&Step) -> u32,
) -> Step {
    let (shape, members) = (s.shape, s.members);
    let node_id = |m: &Member| s.node_of(m).map(|n| n.id.as_str());
    // Slots first, while the primaries know nobody: they join already holding them.
    gone::replace_gone_primary(s)
        .or_else(|| replication_user(shape, members))
        .or_else(|| slots::form(s, forming))
        .or_else(|| membership::meet(s))
        .or_else(|| membership::forget(s))
        .or_else(|| slots::open_slots(s).map(|step| across_versions(step, members)))
        .or_else(|| slots::clear_stale_markers(s, tried))
        .or_else(|| replicas::attach_replicas(s))
        .or_else(|| atomic_in_flight(s))
        .or_else(|| {
            slots::rebalance(s)
                .map(|step| across_versions(step, members))
                .map(|step| atomically(step, shape, members))
        })
        .or_else(|| membership::remove(s))
        .or_else(|| live::set_live_config(shape, members))
        .or_else(|| {
            roll::switchover(
                shape.switchover.as_ref(),
                recorded_switchover,
                members,
                |target| {
                    let primary = s.shard_primary(target.at.shard).ok()??;
                    Some((primary, node_id(primary)?))
                },
            )
        })
        .or_else(|| refused_target(shape, members))
        .or_else(|| {
            let wanted: Vec<&Member> = members.iter().filter(|m| shape.wants(m.at)).collect();
            Some(
                match crate::shared::roll::roll(&wanted, shape.replicas_per_shard > 0)? {
                    RollStep::Wait { reason, message } => Step::wait(reason, message),
                    RollStep::Allow { member, revision } => Step::AllowRoll { member, revision },
                    RollStep::HandOver { primary } => {
                        let primary = wanted.iter().find(|m| m.name == primary)?;
                        replicas::hand_over(
                            wanted.iter().copied(),
                            primary,
                            node_id(primary),
                            FailoverReason::Roll,
                            "waits for an in-sync replica to hand over to before it restarts",
                        )
                    }
                },
            )
        })
        .unwrap_or(Step::Idle)
}

/// `step`, unless it moves keys from a member to one whose Valkey writes an older data format:
/// that one refuses the newer payloads (`MIGRATE` fails, measured 9.1 -> 8.0), so the move
/// waits until the upgrade reaches it.
fn across_versions(step: Step, members: &[Member]) -> Step {
    let ends: Vec<(&str, &str)> = match &step {
        Step::Migrate(moves) => moves
            .iter()
            .map(|m| (m.from.as_str(), m.to.as_str()))
            .collect(),
        Step::FixOpenSlot { source, target, .. } => vec![(source.as_str(), target.as_str())],
        _ => return step,
    };
    let version = |name: &str| members.iter().find(|m| m.name == name)?.version();
    for (from, to) in ends {
        if let (Some(newer), Some(older)) = (version(from), version(to))
            && versions::rdb_format(newer) > versions::rdb_format(older)
        {
            return Step::wait(
                Waiting::MigrationAcrossVersions,
                format!(
                    "slots wait to move from {from} (Valkey {newer}) to {to} (Valkey {older}), \
                     which cannot read the newer key payloads; they move once {to} runs the \
                     new version"
                ),
            );
        }
    }
    step
}

/// A wait while any member reports an atomic slot migration job in flight: Valkey finishes
/// it on its own (even when the controller that started it died), and nothing else moves or
/// restarts meanwhile.
fn atomic_in_flight(s: &Snapshot) -> Option<Step> {
    let (member, job) = s.members.iter().find_map(|m| {
        let jobs = m.reply.as_ref()?.slot_jobs.as_ref()?;
        Some((m, jobs.iter().find(|j| j.in_flight())?))
    })?;
    Some(Step::wait(
        Waiting::SlotsMovingAtomically,
        format!(
            "slots {} move atomically ({}, {} {})",
            job.slot_ranges,
            job.state,
            if job.export { "sent by" } else { "received by" },
            member.name
        ),
    ))
}

/// A classic move as an atomic one when the shape allows it and both ends of every move run
/// Valkey 9.0+ (a member on an older version never gets a 9.x command).
fn atomically(step: Step, shape: &Shape, members: &[Member]) -> Step {
    let Step::Migrate(moves) = step else {
        return step;
    };
    let version = |name: &str| members.iter().find(|m| m.name == name)?.version();
    let ends = moves
        .iter()
        .flat_map(|m| [version(&m.from), version(&m.to)]);
    if shape.atomic_migration && slot_jobs::all_support(ends) {
        Step::MigrateAtomically(moves)
    } else {
        Step::Migrate(moves)
    }
}

/// A wait while the template's image may reach no member ([`crate::shared::target`]).
fn refused_target(shape: &Shape, members: &[Member]) -> Option<Step> {
    let running: Vec<(&str, _)> = members
        .iter()
        .filter_map(|m| Some((m.name.as_str(), m.version()?)))
        .collect();
    let (reason, message) = crate::shared::target::refuse(&shape.image, &shape.config, &running)?;
    Some(Step::wait(reason, message))
}

#[cfg(test)]
mod tests;
