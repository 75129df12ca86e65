//! Planner rules (layer 4): the roll and the switchover. One member at a time through the
//! roll gate, replicas first, a primary handing over before it restarts; and a requested
//! switchover. Shared with a ValkeyReplication: the topology's facts (a member's node id,
//! the primary of the target's shard) come in as plain data.

use crd_types::conditions::reasons::Waiting;
use crd_types::node::Role;

use super::replicas::{best_replica, hand_over};
use super::{FailoverReason, Step};
use crate::model::{Member, SwitchoverRequest};

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

/// One member of `wanted` at a time through the roll gate: replicas first; with
/// `with_replicas`, a primary hands over to its most caught-up replica (the one following
/// `node_id(primary)`) before it may restart.
pub fn roll<'a>(
    wanted: &[&'a Member],
    with_replicas: bool,
    node_id: impl Fn(&Member) -> Option<&'a str>,
) -> Option<Step> {
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
            && (m.role() == Some(Role::Primary) || m.is_synced_replica())
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
    let is_replica = |m: &Member| m.role() == Some(Role::Replica);
    let next = pending
        .iter()
        .find(|m| is_replica(m))
        .or_else(|| pending.first())?;
    if !is_replica(next) && with_replicas {
        // A primary with replicas never restarts while it serves: hand over first.
        return Some(hand_over(
            wanted.iter().copied(),
            next,
            node_id(next),
            FailoverReason::Roll,
            "waits for an in-sync replica to hand over to before it restarts",
        ));
    }
    Some(Step::AllowRoll {
        member: next.name.clone(),
        revision: next.revisions.desired.clone()?,
    })
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
