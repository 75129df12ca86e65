//! Planner: the next step for a ValkeyReplication, from what its data nodes and sentinels say
//! right now and never from memory. One step per reconcile, in order: form (a new group
//! waits for every member), the `replication` user where a data node lacks it, attach replicas to the primary (and demote a data node that
//! serves as primary when the sentinels name another), have every sentinel monitor the
//! primary with the spec's options, keep every replica's priority (a switchover's target
//! is preferred), the switchover, the roll. Sentinel elects primaries; the planner never
//! promotes one on its own (only the first, at creation: data node 0); a switchover and the
//! hand-over before a primary restarts ask Sentinel to, with writes paused (see
//! [`crate::replication::execute`]).
//!
//! The rules live in one module each, by what they act on: `data_nodes` (the replication
//! user, attaching replicas, live directives, the image's version), `sentinels` (monitor,
//! remonitor, reset, a failover in flight), `removal` (members the spec no longer wants)
//! and `handover` (replica priorities, the switchover, the roll).

mod data_nodes;
mod handover;
mod removal;
mod sentinels;

use std::fmt;

use crd_types::conditions::reasons::Waiting;

use crate::replication::model::{Group, Members};
use crate::replication::survey::{forming, primary};
use crate::shared::acl::ReplicationPassword;
use crate::shared::guard::{self, Holds, PlannedStep, step_states};
use crate::shared::live;
use crate::shared::roll::FailoverReason;
use data_nodes::{attach, refused_target, replication_user, set_live_config};
use handover::{priorities, rolling, switch_over};
use removal::{remove, remove_primary};
use sentinels::{failover_running, monitor, remonitor, reset};

/// The one thing to do next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing can be done until something changes: why, for machines and for people.
    Wait { reason: Waiting, message: String },
    /// `REPLICAOF ip 6379` on `member`, following `primary`. With `demote`, `member` serves
    /// as a primary the sentinels do not name: its clients are disconnected afterwards, so
    /// they reconnect to the primary.
    ReplicaOf {
        member: String,
        primary: String,
        ip: String,
        demote: bool,
    },
    /// `SENTINEL MONITOR` the primary on `sentinel`, then its options and the login.
    Monitor {
        sentinel: String,
        primary: String,
        ip: String,
    },
    /// `SENTINEL REMOVE` then `MONITOR` (and its options and login) on `sentinel`, which
    /// names another primary than the majority while no failover runs: a sentinel reset in
    /// the middle of a failover keeps the old address with the failover's config epoch, and
    /// its peers' hellos, carrying the same epoch, never correct it.
    Remonitor {
        sentinel: String,
        primary: String,
        ip: String,
    },
    /// `SENTINEL SET` on `sentinel` of the options that differ from the spec.
    Configure {
        sentinel: String,
        options: Vec<(String, String)>,
    },
    /// Delete these ValkeyNodes: the spec no longer wants them and none is the primary.
    Remove(Vec<String>),
    /// `SENTINEL RESET` on `sentinel`: it forgets the replicas and sentinels it lists and
    /// finds the current ones again, dropping those that are gone.
    Reset { sentinel: String },
    /// `CONFIG SET name value` of each pair on each data node (live directives).
    SetConfig(Vec<(String, Vec<(String, String)>)>),
    /// `ACL SETUSER replication` on each of the data nodes `members`, whose running config
    /// predates the user (or lost it): before a rolled replica logs in to one as that user.
    CreateReplicationUser {
        /// Each member, with whether it gets the atomic slot migration rules (a cluster
        /// member on 9.0+).
        members: Vec<(String, bool)>,
        password: ReplicationPassword,
    },
    /// `CONFIG SET replica-priority` on the replica `member`.
    SetPriority { member: String, priority: u32 },
    /// Hand `primary` over with nothing lost: pause its writes until every replica holds
    /// its last offset, `SENTINEL FAILOVER` through `sentinel`, then make it a replica of the
    /// promoted one and disconnect its clients. With a `target`, Sentinel is expected to
    /// promote it (it prefers it by priority).
    HandOver {
        primary: String,
        target: Option<String>,
        sentinel: String,
        reason: FailoverReason,
    },
    /// Open the roll gate of `member` for `revision`.
    AllowRoll { member: String, revision: String },
    /// Everything is as the spec asks.
    Idle,
}

step_states!(Step);

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Wait { message, .. } => write!(f, "waiting: {message}"),
            Step::ReplicaOf {
                member,
                primary,
                demote,
                ..
            } => {
                if *demote {
                    write!(
                        f,
                        "{member} stops serving as primary and replicates {primary}"
                    )
                } else {
                    write!(f, "{member} replicates {primary}")
                }
            }
            Step::Monitor {
                sentinel, primary, ..
            } => write!(f, "{sentinel} monitors {primary}"),
            Step::Remonitor {
                sentinel, primary, ..
            } => write!(
                f,
                "{sentinel} forgets its stale primary and monitors {primary}"
            ),
            Step::Configure { sentinel, options } => {
                let set: Vec<String> = options.iter().map(|(k, v)| format!("{k} {v}")).collect();
                write!(f, "{sentinel} sets {}", set.join(", "))
            }
            Step::Remove(names) => write!(f, "removing {}", names.join(", ")),
            Step::Reset { sentinel } => {
                write!(
                    f,
                    "{sentinel} forgets the members that are gone (SENTINEL RESET)"
                )
            }
            Step::SetPriority { member, priority } => {
                write!(f, "{member} gets replica-priority {priority}")
            }
            Step::SetConfig(changes) => f.write_str(&live::describe(changes)),
            Step::CreateReplicationUser { members, .. } => {
                let names: Vec<&str> = members.iter().map(|(m, _)| m.as_str()).collect();
                write!(f, "{} get the replication user", names.join(", "))
            }
            Step::HandOver {
                primary,
                target,
                reason,
                ..
            } => {
                let to = target.as_deref().unwrap_or("a replica Sentinel picks");
                let why = match reason {
                    FailoverReason::Roll => "before it restarts",
                    FailoverReason::Removal => "before it is removed",
                    FailoverReason::Switchover => "as requested by spec.switchover",
                    // Sentinel replaces a failed primary by itself; the group planner never
                    // asks for this.
                    FailoverReason::PrimaryGone => "because its server is not running",
                };
                write!(f, "{primary} hands over to {to} {why}")
            }
            Step::AllowRoll { member, revision } => write!(f, "{member} restarts into {revision}"),
            Step::Idle => f.write_str("the group is as specified"),
        }
    }
}

impl PlannedStep for Step {
    /// Who replicates whom or who watches changes.
    fn is_scaling(&self) -> bool {
        matches!(
            self,
            Step::ReplicaOf { .. }
                | Step::Monitor { .. }
                | Step::Remonitor { .. }
                | Step::Configure { .. }
                | Step::Remove(_)
                | Step::Reset { .. }
                | Step::HandOver {
                    reason: FailoverReason::Removal,
                    ..
                }
        )
    }

    fn is_update(&self) -> bool {
        matches!(
            self,
            Step::HandOver { .. }
                | Step::AllowRoll { .. }
                | Step::SetPriority { .. }
                | Step::SetConfig(_)
                | Step::CreateReplicationUser { .. }
        )
    }

    fn keeps_ready(&self) -> bool {
        matches!(self, Step::Idle | Step::SetConfig(_))
    }

    fn lets_member_restart(&self) -> bool {
        matches!(
            self,
            Step::AllowRoll { .. }
                | Step::HandOver {
                    reason: FailoverReason::Roll,
                    ..
                }
        )
    }
}

/// What the next step depends on besides the members' answers.
#[derive(Clone, Debug, Default)]
pub struct Circumstances<'a> {
    /// `status.currentPrimary` as last written.
    pub recorded_primary: Option<&'a str>,
    /// The switchover request id status already reports as done.
    pub recorded_switchover: Option<&'a str>,
    /// A foreign member, the passwords, the TLS Secret ([`guard::Holds`]).
    pub holds: Holds<'a>,
}

/// The step to take: the planner's, unless a foreign ValkeyNode holds a member's name,
/// then held back by what is known of the passwords ([`guard::decide`]).
pub fn decide(group: &Group, members: &Members, c: &Circumstances) -> Step {
    guard::decide(&c.holds, &group.name, || {
        next_step(group, members, c.recorded_primary, c.recorded_switchover)
    })
}

/// The next step; `recorded_primary` is `status.currentPrimary`, `recorded_switchover` the
/// switchover request id status reports as done.
pub fn next_step(
    group: &Group,
    members: &Members,
    recorded_primary: Option<&str>,
    recorded_switchover: Option<&str>,
) -> Step {
    let answering = members.data.iter().filter(|d| d.answer.is_some()).count()
        + members
            .sentinels
            .iter()
            .filter(|s| s.answer.is_some())
            .count();
    if answering == 0 {
        return Step::wait(Waiting::NoMemberAnswers, "no member answers yet");
    }
    let forming = forming(members);
    if forming {
        let wanted = group.positions().len();
        let ready = members
            .data
            .iter()
            .map(|d| (&d.facts, d.answer.is_some()))
            .chain(
                members
                    .sentinels
                    .iter()
                    .map(|s| (&s.facts, s.answer.is_some())),
            )
            .filter(|(f, answers)| group.wants(f.at) && *answers)
            .count();
        if ready < wanted {
            return Step::wait(
                Waiting::Forming,
                format!("forming: {ready} of {wanted} members answer"),
            );
        }
    }
    let p = match primary(group, members, recorded_primary) {
        Ok(p) => p,
        Err(why) => return Step::wait(Waiting::NoPrimary, why.to_string()),
    };
    let Some(ip) = p.address().filter(|_| p.is_primary()) else {
        return Step::wait(
            Waiting::NoPrimary,
            format!(
                "{} is the primary but does not serve as one (yet)",
                p.name()
            ),
        );
    };
    let switchover = group
        .switchover
        .as_ref()
        .filter(|r| recorded_switchover != Some(r.id.as_str()))
        .map(|r| r.target.as_str());
    // A failover first: Sentinel promotes a replica before the sentinels name it, and
    // re-pointing that one (or a replica it already follows) would stall the failover.
    replication_user(group, members)
        .or_else(|| failover_running(members))
        .or_else(|| attach(group, members, p, ip))
        .or_else(|| monitor(group, members, p, ip))
        .or_else(|| remonitor(group, members, p, ip))
        .or_else(|| remove(group, members, p))
        .or_else(|| reset(group, members, ip))
        .or_else(|| remove_primary(group, members, p, ip))
        .or_else(|| set_live_config(group, members))
        .or_else(|| priorities(group, members, p, switchover))
        .or_else(|| switch_over(group, members, p, ip, switchover))
        .or_else(|| refused_target(group, members))
        .or_else(|| rolling(group, members, p, ip))
        .unwrap_or(Step::Idle)
}

#[cfg(test)]
mod tests;
