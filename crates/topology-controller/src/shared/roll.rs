//! The roll (a planner rule every topology kind uses): one member at a time through the roll
//! gate, those that restart freely first, a primary handing over before it restarts. The
//! topology's facts come in through [`RollMember`].

use crd_types::conditions::reasons::Waiting;

use crate::shared::member_facts::Revisions;

/// Why a failover is asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailoverReason {
    /// The primary is about to restart for a roll.
    Roll,
    /// The primary's member is being removed.
    Removal,
    /// `spec.switchover`.
    Switchover,
    /// Kubernetes shows the primary's server is not running and it does not answer
    /// (`CLUSTER FAILOVER FORCE`, see [`gone`]).
    PrimaryGone,
}

/// What the roll needs to know of a member: a cluster's members, and a replication's data
/// nodes and sentinels.
pub trait RollMember {
    fn name(&self) -> &str;
    fn ready(&self) -> bool;
    fn revisions(&self) -> &Revisions;
    /// Its Valkey answered this time.
    fn answers(&self) -> bool;
    /// Restarting it costs a resync at most: a replica, or a sentinel.
    fn restarts_freely(&self) -> bool;
    /// It plays its part: a primary serves, a replica is in sync, a sentinel monitors.
    fn plays_its_part(&self) -> bool;
}

/// The roll's next move.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RollStep {
    Wait {
        reason: Waiting,
        message: String,
    },
    /// Open `member`'s roll gate for `revision`.
    Allow {
        member: String,
        revision: String,
    },
    /// `primary` must hand over to a replica before it may restart.
    HandOver {
        primary: String,
    },
}

/// One member of `wanted` at a time through the roll gate: those that restart freely first;
/// with `with_replicas`, a primary hands over before it may restart.
pub fn roll<M: RollMember>(wanted: &[&M], with_replicas: bool) -> Option<RollStep> {
    let wait = |reason, message: String| Some(RollStep::Wait { reason, message });
    // A template change reaches members one by one: wait until node-controller has rendered
    // every one, or the first member seen changing would roll first, replica or not.
    if let Some(behind) = wanted.iter().find(|m| !m.revisions().observed) {
        return wait(
            Waiting::SpecNotRendered,
            format!(
                "node-controller has not rendered {}'s current spec yet",
                behind.name()
            ),
        );
    }
    let settled =
        |m: &M| m.ready() && m.revisions().running == m.revisions().desired && m.plays_its_part();
    if let Some(busy) = wanted.iter().find(|m| {
        let r = m.revisions();
        r.desired.is_some() && r.allowed == r.desired && !settled(m)
    }) {
        return wait(
            Waiting::MemberRolling,
            format!(
                "{} must be ready and in sync before the next member rolls",
                busy.name()
            ),
        );
    }
    let pending: Vec<&M> = wanted
        .iter()
        .copied()
        .filter(|m| {
            let r = m.revisions();
            r.desired.is_some() && r.running != r.desired && r.allowed != r.desired
        })
        .collect();
    if pending.is_empty() {
        return None;
    }
    // Only a healthy topology rolls: every wanted member answering, ready and settled,
    // except those waiting for their own roll.
    let is_pending = |m: &M| pending.iter().any(|p| p.name() == m.name());
    if let Some(unwell) = wanted
        .iter()
        .find(|m| !is_pending(m) && (!m.answers() || !m.ready() || !settled(m)))
    {
        return wait(
            Waiting::MemberNotReady,
            format!(
                "{} must be ready before the next member rolls",
                unwell.name()
            ),
        );
    }
    let allow = |m: &M| {
        Some(RollStep::Allow {
            member: m.name().to_string(),
            revision: m.revisions().desired.clone()?,
        })
    };
    // A pending member that is down serves nothing, so its roll costs nothing and may be what
    // heals it (a bad image reverted: its gate still names the broken revision).
    if let Some(down) = pending.iter().find(|m| !m.answers() || !m.ready()) {
        return allow(down);
    }
    let next = pending
        .iter()
        .find(|m| m.restarts_freely())
        .or_else(|| pending.first())?;
    if !next.restarts_freely() && with_replicas {
        // A primary with replicas never restarts while it serves: hand over first.
        return Some(RollStep::HandOver {
            primary: next.name().to_string(),
        });
    }
    allow(next)
}
