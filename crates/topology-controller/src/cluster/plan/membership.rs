//! Planner rules (layer 4): membership. Meet the members the cluster does not know, forget
//! identities no member has any more, and remove the members the spec no longer wants.

use std::collections::BTreeMap;

use crd_types::conditions::reasons::Waiting;

use super::replicas::hand_over;
use super::snapshot::Snapshot;
use super::{FailoverReason, Step};
use crate::cluster::model::Member;
use crate::shared::member_facts::Address;

/// Members that do not know each other yet, each pair met directly (one side sends `MEET`)
/// rather than left to gossip, which takes a second or more per hop. A member joining as a
/// replica (an empty primary in a shard that has its primary) is met only by that primary,
/// and by the rest once it follows it ([`super::replicas::attach_replicas`]), so fewer views
/// need correcting after its REPLICATE: a handshake carries its replica flag but neither its
/// primary nor its shard id ([`refresh`] brings those).
pub(super) fn meet(s: &Snapshot) -> Option<Step> {
    let members: Vec<(&Member, Option<&Member>)> = s
        .reachable()
        .filter(|m| m.id().is_some())
        .map(|m| (m, joining_primary(s, m)))
        .collect();
    let mut meets: BTreeMap<String, Vec<Address>> = BTreeMap::new();
    for &(m, joining) in &members {
        let Some(address) = m.address.clone() else {
            continue;
        };
        if let Some(primary) = joining {
            if !knows(primary, m) && !knows(m, primary) {
                meets.entry(primary.name.clone()).or_default().push(address);
            }
            continue;
        }
        // Each pair once: the member whose name sorts first sends the MEET.
        let joined = members.iter().filter(|(_, j)| j.is_none()).map(|(p, _)| *p);
        for peer in joined.filter(|p| p.name < m.name) {
            if !knows(peer, m) && !knows(m, peer) {
                meets
                    .entry(peer.name.clone())
                    .or_default()
                    .push(address.clone());
            }
        }
    }
    (!meets.is_empty()).then(|| Step::Meet(meets.into_iter().collect()))
}

/// The primary a wanted member that is still an empty primary of its own should follow:
/// its shard's primary as the anchor sees it, or, while the anchor does not know that
/// shard's member 0 yet (a forming cluster), member 0 itself.
fn joining_primary<'a>(s: &Snapshot<'a>, m: &Member) -> Option<&'a Member> {
    let me = m.reply.as_ref()?.view.myself();
    if !s.shape.wants(m.at) || !me.is_empty_primary() {
        return None;
    }
    let primary = match s.shard_primary(m.at.shard) {
        Ok(Some(p)) => p,
        Ok(None) => s.shard_members(m.at.shard).find(|p| {
            p.at.member == 0 && p.reply.is_some() && s.node_of(p).is_none() && s.shape.wants(p.at)
        })?,
        Err(_) => return None,
    };
    (primary.name != m.name && primary.reply.is_some()).then_some(primary)
}

/// Whether `member`'s own view holds `other`'s node id.
fn knows(member: &Member, other: &Member) -> bool {
    let (Some(reply), Some(id)) = (member.reply.as_ref(), other.id()) else {
        return false;
    };
    reply.view.by_id(id).is_some()
}

/// Peers whose view of a member lags behind what the member says of itself (its slots,
/// its role and primary, its shard id): the member meets them again. A MEET to a node that
/// already knows the sender is handled like a ping, so the peer updates its view at once
/// instead of at the member's next ping to it, which can be seconds away (a handshake
/// alone carries neither slots nor primary). Only healthy entries count: a suspected or
/// failed node is Valkey's business.
pub(super) fn refresh(s: &Snapshot) -> Option<Step> {
    let mut meets: BTreeMap<String, Vec<Address>> = BTreeMap::new();
    for peer in s.reachable() {
        let Some(address) = peer.address.clone() else {
            continue;
        };
        let filed_apart = peer.replicas_filed_apart();
        for m in s.reachable().filter(|m| m.name != peer.name) {
            let (Some(id), Some(reply)) = (m.id(), m.reply.as_ref()) else {
                continue;
            };
            let Some(seen) = peer.reply.as_ref().and_then(|r| r.view.by_id(id)) else {
                continue;
            };
            let f = seen.flags;
            if f.pfail || f.fail || f.handshake || f.noaddr {
                continue;
            }
            let me = reply.view.myself();
            let lags = seen.slots != me.slots
                || seen.flags.replica != me.flags.replica
                || seen.primary_id != me.primary_id
                || filed_apart.iter().any(|(replica, _)| replica == id);
            if lags {
                meets
                    .entry(m.name.clone())
                    .or_default()
                    .push(address.clone());
            }
        }
    }
    (!meets.is_empty()).then(|| Step::Refresh(meets.into_iter().collect()))
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
    use crate::cluster::cluster_nodes::ClusterView;
    use crate::cluster::plan::next_step;
    use crate::cluster::sim::*;
    use crate::cluster::slots::even_split;

    /// (member, ips it meets) of a Meet or Refresh step.
    fn meets_of(meets: &[(String, Vec<Address>)]) -> Vec<(&str, Vec<&str>)> {
        meets
            .iter()
            .map(|(via, t)| (via.as_str(), t.iter().map(|a| a.ip.as_str()).collect()))
            .collect()
    }

    #[test]
    fn a_peer_whose_view_of_a_member_lags_is_met_again_by_that_member() {
        let d = shape(2, 1);
        let sims = formed(2, 1);
        let mut m = members(&sims);
        assert_eq!(next_step(&d, &m, None), Step::Idle);

        // c-1-0 met c-0-1 before it followed c-0-0 (a handshake carries no primary).
        let mut before = sims.clone();
        before[1].follows = None;
        let text: Vec<String> = [(0, false), (1, false), (2, true), (3, false)]
            .iter()
            .filter_map(|&(i, myself)| line(&before[i], myself))
            .collect();
        m[2].reply.as_mut().unwrap().view = ClusterView::parse(&text.join("\n")).unwrap();
        match next_step(&d, &m, None) {
            Step::Refresh(meets) => {
                assert_eq!(meets_of(&meets), vec![("c-0-1", vec![ip(1, 0).as_str()])])
            }
            other => panic!("{other:?}"),
        }

        // c-1-1 still files c-0-1 under a shard id of its own.
        let mut m = members(&sims);
        m[3].reply.as_mut().unwrap().shard_groups = Some(vec![
            vec![id(0, 0)],
            vec![id(0, 1)],
            vec![id(1, 0), id(1, 1)],
        ]);
        match next_step(&d, &m, None) {
            Step::Refresh(meets) => {
                assert_eq!(meets_of(&meets), vec![("c-0-1", vec![ip(1, 1).as_str()])])
            }
            other => panic!("{other:?}"),
        }

        // A peer that suspects the member is left to Valkey.
        let mut suspected = sims.clone();
        suspected[1].follows = None;
        suspected[1].flags = "fail?";
        let text: Vec<String> = [(0, false), (1, false), (2, true), (3, false)]
            .iter()
            .filter_map(|&(i, myself)| line(&suspected[i], myself))
            .collect();
        let mut m = members(&sims);
        m[2].reply.as_mut().unwrap().view = ClusterView::parse(&text.join("\n")).unwrap();
        assert_eq!(next_step(&d, &m, None), Step::Idle);
    }

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

    /// A primary that came back with an empty data directory before Valkey failed its old
    /// identity over: the replica still following the old identity holds the shard's data
    /// and is never attached to the empty one (a full sync from it would wipe the shard),
    /// whatever the views say of the old identity yet.
    #[test]
    fn a_primary_back_empty_before_its_failover_never_gets_the_shards_replica() {
        for flags in ["", "fail?", "noaddr", "fail"] {
            let d = shape(1, 1);
            let mut sims = formed(1, 1);
            let mut old = sims[0].clone();
            old.member = 9; // not a member any more: only a line in the views
            old.flags = flags;
            sims[0].id = Some("f".repeat(40));
            sims[0].slots = vec![];
            sims.push(old);
            let mut m = members(&sims);
            m.pop();
            let (reason, message) = wait_of(next_step(&d, &m, None));
            assert_eq!(reason, Waiting::ShardWithoutPrimary, "{flags:?}: {message}");
            assert!(
                message.contains("c-0-1 follows 00000000") && message.contains("no empty primary"),
                "{flags:?}: {message}"
            );
        }
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
