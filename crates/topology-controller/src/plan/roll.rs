//! Planner rules (layer 4): the roll and the switchover. One member at a time through the
//! roll gate, replicas first, a primary handing over before it restarts; and a requested
//! switchover. Shared with a ValkeyReplication: the topology's facts (a member's node id,
//! the primary of the target's shard) come in as plain data.

use crd_types::conditions::reasons::Waiting;
use crd_types::node::Role;

use super::replicas::best_replica;
use super::{FailoverReason, Step};
use crate::model::{Member, Revisions, SwitchoverRequest};

/// A requested switchover not yet `recorded` as done: fail over to the target when it is an
/// in-sync replica of the primary `primary_of` names (member and node id) for it. Status
/// reports the outcome.
pub fn switchover<'a>(
    request: Option<&SwitchoverRequest>,
    recorded: Option<&str>,
    members: &'a [Member],
    primary_of: impl FnOnce(&Member) -> Option<(&'a Member, &'a str)>,
) -> Option<Step> {
    let request = request?;
    if recorded == Some(request.id.as_str()) {
        return None;
    }
    let member = members.iter().find(|m| m.name == request.target)?;
    let (primary, primary_id) = primary_of(member)?;
    if primary.name == member.name {
        return None;
    }
    let best = best_replica([member], primary, primary_id)?;
    Some(Step::Failover {
        member: best.name.clone(),
        reason: FailoverReason::Switchover,
    })
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

impl RollMember for Member {
    fn name(&self) -> &str {
        &self.name
    }

    fn ready(&self) -> bool {
        self.ready
    }

    fn revisions(&self) -> &Revisions {
        &self.revisions
    }

    fn answers(&self) -> bool {
        self.reply.is_some()
    }

    fn restarts_freely(&self) -> bool {
        self.role() == Some(Role::Replica)
    }

    fn plays_its_part(&self) -> bool {
        self.role() == Some(Role::Primary) || self.is_synced_replica()
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Revisions;
    use crate::plan::next_step;
    use crate::sim::*;

    #[test]
    fn rolls_replicas_first_one_at_a_time_and_fails_over_before_a_primary() {
        let d = shape(2, 1);
        let mut sims = formed(2, 1);
        for s in &mut sims {
            s.revisions.desired = Some("r2".into());
        }
        assert_eq!(
            step(&d, &sims),
            Step::AllowRoll {
                member: "c-0-1".into(),
                revision: "r2".into()
            }
        );
        // c-0-1 is restarting: nobody else rolls.
        sims[1].revisions.allowed = Some("r2".into());
        sims[1].ready = false;
        let (reason, why) = wait_of(step(&d, &sims));
        assert_eq!(reason, Waiting::MemberRolling);
        assert!(why.contains("c-0-1"), "{why}");
        // Back, but still resyncing: still waiting.
        sims[1].ready = true;
        sims[1].revisions.running = Some("r2".into());
        sims[1].synced = false;
        assert_eq!(wait_of(step(&d, &sims)).0, Waiting::MemberRolling);
        sims[1].synced = true;
        sims[3].revisions.running = Some("r2".into());
        sims[3].revisions.allowed = Some("r2".into());
        // Only primaries left: hand over to the in-sync replica first.
        assert_eq!(
            step(&d, &sims),
            Step::Failover {
                member: "c-0-1".into(),
                reason: FailoverReason::Roll
            }
        );
        // With its replica out of sync, the primary waits.
        sims[1].synced = false;
        sims[1].revisions.allowed = None;
        sims[1].revisions.running = Some("r2".into());
        assert_eq!(wait_of(step(&d, &sims)).0, Waiting::MemberNotReady);
    }

    #[test]
    fn no_roll_until_node_controller_has_rendered_every_member() {
        let d = shape(1, 1);
        let mut sims = formed(1, 1);
        // The primary's new revision is known, its replica's not yet.
        sims[0].revisions.desired = Some("r2".into());
        sims[1].revisions.observed = false;
        let (reason, why) = wait_of(step(&d, &sims));
        assert_eq!(reason, Waiting::SpecNotRendered);
        assert!(why.contains("c-0-1"), "{why}");
        sims[1].revisions.observed = true;
        sims[1].revisions.desired = Some("r2".into());
        assert_eq!(
            step(&d, &sims),
            Step::AllowRoll {
                member: "c-0-1".into(),
                revision: "r2".into()
            }
        );
    }

    #[test]
    fn a_reverted_bad_image_rolls_the_stuck_member_back() {
        let d = shape(1, 1);
        let mut sims = formed(1, 1);
        // c-0-1 was let roll to r2, whose image never starts; the spec went back to r1.
        sims[1].revisions = Revisions {
            desired: Some("r1".into()),
            running: Some("r2".into()),
            allowed: Some("r2".into()),
            observed: true,
        };
        sims[1].ready = false;
        sims[1].id = None; // does not answer
        assert_eq!(
            step(&d, &sims),
            Step::AllowRoll {
                member: "c-0-1".into(),
                revision: "r1".into()
            }
        );
    }

    #[test]
    fn a_down_member_that_is_not_pending_holds_the_roll() {
        let d = shape(1, 1);
        let mut sims = formed(1, 1);
        sims[0].revisions.desired = Some("r2".into());
        sims[1].ready = false;
        let (reason, why) = wait_of(step(&d, &sims));
        assert_eq!(reason, Waiting::MemberNotReady);
        assert!(why.contains("c-0-1"), "{why}");
    }

    #[test]
    fn a_primary_without_replicas_rolls_in_place() {
        let d = shape(1, 0);
        let mut sims = formed(1, 0);
        sims[0].revisions.desired = Some("r2".into());
        assert_eq!(
            step(&d, &sims),
            Step::AllowRoll {
                member: "c-0-0".into(),
                revision: "r2".into()
            }
        );
    }

    #[test]
    fn switchover_fails_over_to_the_target_once() {
        let mut d = shape(1, 2);
        d.switchover = Some(SwitchoverRequest {
            id: "s1".into(),
            target: "c-0-2".into(),
        });
        let mut sims = formed(1, 2);
        sims[1].offset = 200; // the best replica, but not the target
        assert_eq!(
            next_step(&d, &members(&sims), None),
            Step::Failover {
                member: "c-0-2".into(),
                reason: FailoverReason::Switchover
            }
        );
        assert_eq!(next_step(&d, &members(&sims), Some("s1")), Step::Idle);
    }
}
