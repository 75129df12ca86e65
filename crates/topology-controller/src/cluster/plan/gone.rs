//! A primary Kubernetes knows is not running: its replica takes over at once.
//!
//! Valkey promotes a replica by itself only once a majority of primaries have missed the
//! failed one for cluster-node-timeout (15 s), and the shard refuses writes meanwhile. When
//! the kubelet reports the primary's container waiting to restart after it exited (see
//! [`crate::cluster::members::server_gone`]) and the primary does not answer, no process can be
//! serving its slots, so `CLUSTER FAILOVER FORCE` on its most caught-up replica is safe: no
//! other primary of the shard can take a write, and every write a replica acknowledged
//! (`WAIT`) reached that replica or one behind it in offset. FORCE still needs the
//! other primaries' votes (never TAKEOVER), so a replica cut off from the majority cannot
//! promote itself. A pod being deleted, a missing pod or a partition tell nothing of the
//! process and are left to the preStop hand-over or to Valkey.

use crate::cluster::plan::Step;
use crate::cluster::plan::replicas::most_caught_up;
use crate::cluster::plan::snapshot::Snapshot;
use crate::shared::roll::FailoverReason;

/// `Failover` (forced) for the first shard whose slot-holding primary is gone, if one of
/// its replicas can take over; `None` when no such shard, or none can.
pub(crate) fn replace_gone_primary(s: &Snapshot) -> Option<Step> {
    s.members
        .iter()
        .filter(|m| m.reply.is_none() && m.gone.is_some())
        .find_map(|gone| {
            let node = s.node_of(gone)?;
            // Valkey already declared it failed: its own election is under way.
            if !node.flags.primary || node.slots.is_empty() || node.flags.fail {
                return None;
            }
            let successor = most_caught_up(s.reachable(), &node.id)?;
            Some(Step::Failover {
                member: successor.name.clone(),
                reason: FailoverReason::PrimaryGone,
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::model::Member;
    use crate::cluster::sim::*;

    /// The rule's step for a 3 x 1 cluster of `members`.
    fn planned(members: &[Member]) -> Option<Step> {
        let shape = shape(3, 1);
        replace_gone_primary(&Snapshot::new(&shape, members).unwrap())
    }

    fn gone_primary(sims: &mut [Sim]) {
        sims[0].gone = Some("its container waits in CrashLoopBackOff".into());
        for r in sims.iter_mut().filter(|r| r.follows == Some(id(0, 0))) {
            r.synced = false; // its link is down
        }
    }

    #[test]
    fn the_most_caught_up_replica_of_a_gone_primary_takes_over_by_force() {
        let mut sims = formed(3, 2);
        gone_primary(&mut sims);
        sims[1].offset = 500;
        sims[2].offset = 700;
        let step = step(&shape(3, 2), &sims);
        assert_eq!(
            step,
            Step::Failover {
                member: "c-0-2".into(),
                reason: FailoverReason::PrimaryGone,
            }
        );
        assert!(step.to_string().contains("not running"), "{step}");
    }

    #[test]
    fn a_silent_primary_kubernetes_says_nothing_about_is_left_to_valkey() {
        let mut sims = formed(3, 1);
        sims[0].flags = "fail?"; // not answering, perhaps partitioned
        let members = members(&sims);
        let silent: Vec<Member> = members
            .into_iter()
            .map(|mut m| {
                if m.name == "c-0-0" {
                    m.reply = None;
                }
                m
            })
            .collect();
        assert_eq!(planned(&silent), None);
    }

    #[test]
    fn no_forced_failover_without_a_ready_replica_or_once_valkey_declared_it_failed() {
        let mut sims = formed(3, 1);
        gone_primary(&mut sims);
        sims[1].ready = false;
        let m = members(&sims);
        assert_eq!(planned(&m), None);

        let mut sims = formed(3, 1);
        gone_primary(&mut sims);
        sims[0].flags = "fail";
        let m = members(&sims);
        assert_eq!(planned(&m), None);
    }

    #[test]
    fn a_gone_replica_or_an_answering_primary_needs_nothing() {
        let mut sims = formed(3, 1);
        sims[1].gone = Some("crash loop".into());
        let m = members(&sims);
        assert_eq!(planned(&m), None);
        // Kubernetes' word alone is not enough: the primary answers, so it runs.
        let sims = formed(3, 1);
        let mut m = members(&sims);
        m[0].gone = Some("stale status".into());
        assert_eq!(planned(&m), None);
    }
}
