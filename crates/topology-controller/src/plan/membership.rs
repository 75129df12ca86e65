//! Planner rules (layer 4): membership. Meet the members the cluster does not know, forget
//! identities no member has any more, and remove the members the spec no longer wants.

use crd_types::conditions::reasons::Waiting;

use super::replicas::hand_over;
use super::snapshot::Snapshot;
use super::{FailoverReason, Step};
use crate::model::Address;

/// Members the anchor does not know yet.
pub(super) fn meet(s: &Snapshot) -> Option<Step> {
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
pub(super) fn forget(s: &Snapshot) -> Option<Step> {
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

/// Members the spec no longer wants, once they hold no slots. A member that is its shard's
/// primary in a shard that stays hands over to a wanted replica first.
pub(super) fn remove(s: &Snapshot) -> Option<Step> {
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
                s.reachable().filter(|r| s.shape.wants(r.at)),
                m,
                node.map(|n| n.id.as_str()),
                FailoverReason::Removal,
                "is its shard's primary and no wanted replica is in sync to take over",
            ));
        } else {
            gone.push(m.name.clone());
        }
    }
    (!gone.is_empty()).then_some(Step::Remove(gone))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Member;
    use crate::plan::next_step;
    use crate::sim::*;
    use crate::slots::even_split;

    #[test]
    fn scale_in_drains_then_removes_then_forgets() {
        let d = shape(2, 1);
        let mut sims = formed(3, 1);
        match step(&d, &sims) {
            Step::Migrate(moves) => assert!(moves.iter().all(|m| m.from == "c-2-0")),
            other => panic!("{other:?}"),
        }
        // Drained: shard 2 goes.
        let split = even_split(2);
        sims[0].slots = split[0].clone();
        sims[2].slots = split[1].clone();
        sims[4].slots = vec![];
        assert_eq!(
            step(&d, &sims),
            Step::Remove(vec!["c-2-0".into(), "c-2-1".into()])
        );
        // Deleted: Valkey marks them failed; every member forgets them, one id per step.
        sims[4].flags = "fail";
        sims[5].flags = "fail";
        let m: Vec<Member> = members(&sims).into_iter().take(4).collect();
        match next_step(&d, &m, None) {
            Step::Forget { node_id, on } => {
                assert_eq!(node_id, id(2, 0));
                assert_eq!(on, vec!["c-0-0", "c-0-1", "c-1-0", "c-1-1"]);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_dead_node_that_is_not_failed_yet_is_not_forgotten() {
        let d = shape(1, 1);
        let mut sims = formed(1, 1);
        sims.push(sim(0, 2));
        sims[2].follows = Some(id(0, 0));
        sims[2].flags = "fail?";
        // c-0-2 is gone from the spec and from Kubernetes, but only suspected by Valkey.
        let m: Vec<Member> = members(&sims).into_iter().take(2).collect();
        assert_eq!(next_step(&d, &m, None), Step::Idle);
    }

    #[test]
    fn fewer_replicas_removes_the_extra_member_but_a_primary_hands_over_first() {
        let d = shape(1, 1);
        let mut sims = formed(1, 2);
        assert_eq!(step(&d, &sims), Step::Remove(vec!["c-0-2".into()]));
        // The member to remove is the primary (after an earlier failover).
        sims[2].slots = std::mem::take(&mut sims[0].slots);
        sims[2].follows = None;
        sims[0].follows = Some(id(0, 2));
        sims[1].follows = Some(id(0, 2));
        sims[1].offset = 90;
        assert_eq!(
            step(&d, &sims),
            Step::Failover {
                member: "c-0-0".into(),
                reason: FailoverReason::Removal
            }
        );
    }

    #[test]
    fn a_returning_empty_member_rejoins_as_replica_and_its_old_identity_is_forgotten() {
        let d = shape(1, 1);
        let mut sims = formed(1, 1);
        // c-0-0 failed over to c-0-1, then came back with an empty data directory: new id,
        // an empty primary; its old identity is failed.
        sims[1].slots = std::mem::take(&mut sims[0].slots);
        sims[1].follows = None;
        let mut old = sims[0].clone();
        old.member = 9; // not a member any more: only a line in the views
        old.flags = "fail";
        old.follows = Some(id(0, 1));
        sims[0].id = Some("f".repeat(40));
        sims[0].follows = None;
        sims.push(old);
        let mut m = members(&sims);
        m.pop();
        match next_step(&d, &m, None) {
            Step::Forget { node_id, .. } => assert_eq!(node_id, id(0, 0)),
            other => panic!("{other:?}"),
        }
        sims.pop();
        assert_eq!(
            step(&d, &sims),
            Step::Replicate(vec![("c-0-0".into(), id(0, 1))])
        );
    }
}
