//! Planner rules (layer 4): replicas. Make every member of a shard a replica of the shard's
//! primary, and hand a primary over to its most caught-up replica before it stops serving.
//! The hand-over ([`hand_over`], [`best_replica`]) is shared with a ValkeyReplication: it
//! takes the primary's node id as plain data and knows nothing of shards.

use std::cmp::Reverse;

use crd_types::conditions::reasons::Waiting;
use crd_types::node::Role;

use super::snapshot::Snapshot;
use super::{FailoverReason, Step};
use crate::cluster::model::Member;

/// Members of a wanted shard that are not following the shard's primary: every one that
/// can be attached now, in one step; else the first wait.
pub(super) fn attach_replicas(s: &Snapshot) -> Option<Step> {
    let mut attaches = Vec::new();
    let mut first_wait = None;
    for shard in 0..s.shape.shards {
        let primary = match s.shard_primary(shard) {
            Ok(Some(p)) => p,
            Ok(None) => {
                first_wait = first_wait.or_else(|| old_identity_wait(s, shard));
                continue;
            }
            Err(why) => return Some(Step::wait(Waiting::TwoPrimariesInShard, why.to_string())),
        };
        let Some(primary_node) = s.node_of(primary) else {
            continue;
        };
        if primary_node.flags.fail || primary_node.flags.pfail {
            // Valkey is failing over; let it finish.
            continue;
        }
        let others = s.shard_members(shard).filter(|m| m.name != primary.name);
        let wait = attach(others, primary, &primary_node.id, &mut attaches);
        first_wait = first_wait.or(wait);
    }
    if attaches.is_empty() {
        first_wait
    } else {
        Some(Step::Replicate(attaches))
    }
}

/// The wait while `shard`'s slots are held by a member's old identity (see
/// [`Snapshot::old_identity_follower`]): Valkey fails it over to that identity's replica.
fn old_identity_wait(s: &Snapshot, shard: u32) -> Option<Step> {
    let (replica, old) = s.old_identity_follower(shard)?;
    Some(Step::wait(
        Waiting::ShardWithoutPrimary,
        format!(
            "shard {shard}: {} follows {}, an identity no member has any more (a member that \
             came back with an empty data directory), which holds the shard's slots; {} holds \
             the shard's data, so it is attached to no empty primary: Valkey fails the old \
             identity over to it",
            replica.name,
            short(&old.id),
            replica.name
        ),
    ))
}

fn short(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}

/// Adds to `attaches` each of `others` that is an empty primary or follows someone else
/// than `primary` (node id `primary_id`); a wait for the first that does not know the
/// primary yet.
fn attach<'a>(
    others: impl IntoIterator<Item = &'a Member>,
    primary: &Member,
    primary_id: &str,
    attaches: &mut Vec<(String, String)>,
) -> Option<Step> {
    let mut wait = None;
    for m in others {
        let Some(reply) = &m.reply else { continue };
        let me = reply.view.myself();
        let follows = me.flags.replica && me.primary_id.as_deref() == Some(primary_id);
        if follows || !(me.is_empty_primary() || me.flags.replica) {
            continue;
        }
        if reply.view.by_id(primary_id).is_none() {
            wait = wait.or_else(|| {
                Some(Step::wait(
                    Waiting::MembersDisagree,
                    format!("{} does not know {} yet", m.name, primary.name),
                ))
            });
            continue;
        }
        attaches.push((m.name.clone(), primary_id.to_string()));
    }
    wait
}

/// A failover from `primary` (node id `primary_id`; `None`: unknown) to the most caught-up
/// of `candidates`, or a wait naming the primary and saying why not (`no_replica`).
pub fn hand_over<'a>(
    candidates: impl IntoIterator<Item = &'a Member>,
    primary: &Member,
    primary_id: Option<&str>,
    reason: FailoverReason,
    no_replica: &str,
) -> Step {
    match primary_id.and_then(|id| best_replica(candidates, primary, id)) {
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

/// Among `candidates`, the ready, in-sync replica of `primary` (node id `primary_id`) with
/// the highest replication offset.
pub fn best_replica<'a>(
    candidates: impl IntoIterator<Item = &'a Member>,
    primary: &Member,
    primary_id: &str,
) -> Option<&'a Member> {
    most_caught_up(
        candidates
            .into_iter()
            .filter(|r| r.name != primary.name && r.is_synced_replica()),
        primary_id,
    )
}

/// Among `candidates`, the ready replica of `primary_id` with the highest replication
/// offset, ties to the lowest name. Its link may be down: a gone primary's replicas keep the
/// offset they reached.
pub fn most_caught_up<'a>(
    candidates: impl IntoIterator<Item = &'a Member>,
    primary_id: &str,
) -> Option<&'a Member> {
    candidates
        .into_iter()
        .filter(|r| {
            r.ready && r.role() == Some(Role::Replica) && r.primary_id() == Some(primary_id)
        })
        .max_by_key(|r| (r.offset(), Reverse(r.name.clone())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::plan::next_step;
    use crate::cluster::sim::*;

    /// Three shards whose primaries hold slots and whose other members are still empty
    /// primaries.
    fn slots_assigned(replicas: u32) -> Vec<Sim> {
        let mut sims = formed(3, replicas);
        for s in sims.iter_mut().filter(|s| s.member > 0) {
            s.follows = None;
        }
        sims
    }

    #[test]
    fn every_replica_that_knows_its_primary_is_attached_in_one_step() {
        let sims = slots_assigned(2);
        match step(&shape(3, 2), &sims) {
            Step::Replicate(attaches) => assert_eq!(
                attaches,
                (0..3)
                    .flat_map(|shard| (1..=2).map(move |m| (shard, m)))
                    .map(|(shard, m)| (format!("c-{shard}-{m}"), id(shard, 0)))
                    .collect::<Vec<_>>()
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_replica_that_does_not_know_its_primary_waits_while_the_others_attach() {
        let sims = slots_assigned(1);
        let unaware = |viewer: &Sim, node: &Sim| {
            !(viewer.shard == 1 && viewer.member == 1 && node.member == 0 && node.shard == 1)
        };
        let step = next_step(&shape(3, 1), &members_with(&sims, unaware), None);
        assert_eq!(
            step,
            Step::Replicate(vec![("c-0-1".into(), id(0, 0)), ("c-2-1".into(), id(2, 0))])
        );
        // Once the others follow, it is a wait naming it and its primary.
        let mut rest = sims.clone();
        for s in rest.iter_mut().filter(|s| s.shard != 1 && s.member == 1) {
            s.follows = Some(id(s.shard, 0));
        }
        let (reason, message) =
            wait_of(next_step(&shape(3, 1), &members_with(&rest, unaware), None));
        assert_eq!(reason, Waiting::MembersDisagree);
        assert_eq!(message, "c-1-1 does not know c-1-0 yet");
    }

    #[test]
    fn the_most_caught_up_in_sync_replica_takes_over() {
        let mut sims = formed(1, 3);
        sims[1].offset = 300;
        sims[2].offset = 200;
        sims[3].offset = 400;
        sims[3].synced = false;
        let m = members(&sims);
        let primary = id(0, 0);
        let best = best_replica(&m, &m[0], &primary).unwrap();
        assert_eq!(best.name, "c-0-1");
        assert_eq!(
            hand_over(&m, &m[0], Some(&primary), FailoverReason::Roll, "waits"),
            Step::Failover {
                member: "c-0-1".into(),
                reason: FailoverReason::Roll
            }
        );
        // An unknown primary, or none in sync: a wait naming the primary.
        assert_eq!(
            hand_over(&m, &m[0], None, FailoverReason::Roll, "waits"),
            Step::wait(Waiting::NoReplicaInSync, "c-0-0 waits")
        );
        assert!(best_replica(&m[3..], &m[0], &primary).is_none());
    }
}
