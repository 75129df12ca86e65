//! Planner rules (layer 4): the roll and the switchover. One member at a time through the
//! roll gate, replicas first, a primary handing over before it restarts; and a requested
//! switchover. Shared with a ValkeyReplication: the topology's facts (a member's node id,
//! the primary of the target's shard) come in as plain data.

use crd_types::node::Role;

use super::replicas::best_replica;
use super::{FailoverReason, Step};
use crate::cluster::model::Member;
use crate::shared::member_facts::{Revisions, SwitchoverRequest};
use crate::shared::roll::RollMember;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::plan::next_step;
    use crate::cluster::sim::*;
    use crate::shared::member_facts::Revisions;
    use crd_types::conditions::reasons::Waiting;

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
