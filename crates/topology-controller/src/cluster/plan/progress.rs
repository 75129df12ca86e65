//! The planner's progress check: a step that changes nothing Valkey shows is not taken
//! forever. The planner is pure and decides from live state, so a step whose effect never
//! shows (a command Valkey accepts but does not apply where it matters) would otherwise be
//! decided again at every look. [`Attempts`] counts, per step, how often it was taken while
//! the members showed the same [`Seen`]; anything they show changing starts the count again.
//! Heal steps escalate to their next method after [`TRIES_PER_METHOD`]; every step that
//! should show its effect at once is held back after [`MAX_NO_EFFECT`] (a `NoProgress` wait,
//! reported as Degraded with a Warning Event) until something changes.
//!
//! The count lives in the controller's memory: a restarted controller counts afresh, which
//! bounds the repeats per process and never blocks a controller that just started.

use std::collections::BTreeMap;
use std::collections::hash_map::DefaultHasher;
use std::fmt::Write as _;
use std::hash::{Hash, Hasher};

use crd_types::conditions::reasons::Waiting;

use super::Step;
use crate::cluster::model::Member;
use crate::shared::guard::PlannedStep;

/// How often one method of a heal is taken on an unchanged cluster before the next one.
pub const TRIES_PER_METHOD: u32 = 3;
/// How often any other step that should show its effect at once is taken on an unchanged
/// cluster before it is held back.
pub const MAX_NO_EFFECT: u32 = 5;

/// A digest of what the members show that a step can change: membership, roles, slot
/// owners, markers, config epochs, replica links, live directives, users and slot jobs.
/// Replication offsets, ping times and anything else that moves while nothing is done are
/// left out, so an idle cluster shows the same digest look after look.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Seen(u64);

impl Seen {
    pub fn of(members: &[Member]) -> Seen {
        let mut text = String::new();
        for m in members {
            let _ = write!(text, "{}|", m.name);
            let Some(reply) = &m.reply else {
                text.push_str("silent\n");
                continue;
            };
            // Sorted: Valkey lists its nodes in its own table's order, which may change.
            let mut nodes: Vec<String> = reply
                .view
                .nodes()
                .iter()
                .map(|n| {
                    let f = &n.flags;
                    format!(
                        "{} {}:{} p{} r{} f{} pf{} h{} na{} {:?} e{} {:?} i{:?} m{:?};",
                        n.id,
                        n.ip,
                        n.port,
                        f.primary,
                        f.replica,
                        f.fail,
                        f.pfail,
                        f.handshake,
                        f.noaddr,
                        n.primary_id,
                        n.config_epoch,
                        n.slots,
                        n.importing,
                        n.migrating,
                    )
                })
                .collect();
            nodes.sort();
            text.extend(nodes);
            let r = &reply.replication;
            let _ = write!(text, "|{:?}", r.role);
            for c in &r.replicas {
                let _ = write!(text, " {}:{}={}", c.ip, c.port, c.state);
            }
            if let Some(link) = &r.primary {
                let _ = write!(
                    text,
                    " to {}:{} up{} sync{}",
                    link.host, link.port, link.link_up, link.sync_in_progress
                );
            }
            let _ = writeln!(
                text,
                "|{:?}|{:?}|{:?}|{:?}|{:?}",
                reply.live_config,
                reply.replication_user,
                reply.slot_jobs,
                reply.shard_groups,
                reply.cluster_state_ok,
            );
        }
        let mut hasher = DefaultHasher::new();
        text.hash(&mut hasher);
        Seen(hasher.finish())
    }
}

/// What one cluster's reconciles remember of the steps they took: how often each was taken
/// while the members showed `seen`.
#[derive(Clone, Debug, Default)]
pub struct Attempts {
    seen: Seen,
    taken: BTreeMap<String, u32>,
}

impl Attempts {
    /// How often `step` was taken already while the members showed `seen`.
    pub fn times(&self, step: &Step, seen: Seen) -> u32 {
        if seen != self.seen {
            return 0;
        }
        self.taken.get(&key(step)).copied().unwrap_or(0)
    }

    /// `step` is taken while the members show `seen`.
    pub fn record(&mut self, step: &Step, seen: Seen) {
        if !expects_effect(step) {
            return;
        }
        if seen != self.seen {
            self.seen = seen;
            self.taken.clear();
        }
        *self.taken.entry(key(step)).or_default() += 1;
    }
}

/// The step as a key: the whole step, so a step with other arguments is another step.
fn key(step: &Step) -> String {
    format!("{step:?}")
}

/// Steps whose effect shows in what the members answer right after them: the scaling steps
/// but removal, and the live settings. Waiting, meeting again for gossip's sake, failing
/// over (an election takes its time) and Kubernetes-side steps (removing members, opening a
/// roll gate) are not judged by Valkey's answers.
fn expects_effect(step: &Step) -> bool {
    match step {
        Step::Remove(_) => false,
        Step::SetConfig(_) | Step::CreateReplicationUser { .. } => true,
        _ => step.is_scaling(),
    }
}

/// `step`, unless it was taken [`MAX_NO_EFFECT`] times on the cluster as it is now: then a
/// wait that says so, until anything the members show changes.
pub fn hold_without_effect(step: Step, times: u32) -> Step {
    if !expects_effect(&step) || times < MAX_NO_EFFECT {
        return step;
    }
    Step::wait(
        Waiting::NoProgress,
        format!(
            "{step} was done {times} times and changed nothing the members show; it is not \
             done again until something changes (or topology-controller restarts)"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::sim::*;

    #[test]
    fn the_digest_ignores_offsets_and_sees_markers() {
        let sims = formed(2, 1);
        let before = Seen::of(&members(&sims));
        let mut later = sims.clone();
        for s in &mut later {
            s.offset += 1000;
        }
        assert_eq!(Seen::of(&members(&later)), before);
        later[3].markers = format!("[100-<-{}]", id(0, 0));
        assert_ne!(Seen::of(&members(&later)), before);
    }

    #[test]
    fn repeats_count_only_while_nothing_changes() {
        let stable = Step::Stabilize {
            slot: 7,
            on: vec!["c-0-0".into()],
        };
        let (a, b) = (Seen(1), Seen(2));
        let mut attempts = Attempts::default();
        for _ in 0..MAX_NO_EFFECT {
            attempts.record(&stable, a);
        }
        assert_eq!(attempts.times(&stable, a), MAX_NO_EFFECT);
        assert_eq!(attempts.times(&stable, b), 0);
        let other = Step::Stabilize {
            slot: 8,
            on: vec!["c-0-0".into()],
        };
        assert_eq!(attempts.times(&other, a), 0);
        match hold_without_effect(stable.clone(), MAX_NO_EFFECT) {
            Step::Wait { reason, message } => {
                assert_eq!(reason, Waiting::NoProgress);
                assert!(
                    message.starts_with("clearing the open slot 7 on c-0-0 was done 5 times"),
                    "{message}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(hold_without_effect(stable.clone(), 4), stable);
        // Something changed: counting starts again.
        attempts.record(&stable, b);
        assert_eq!(attempts.times(&stable, b), 1);
        assert_eq!(attempts.times(&stable, a), 0);
        // Steps not judged by Valkey's answers are never held or counted.
        let roll = Step::AllowRoll {
            member: "c-0-1".into(),
            revision: "r2".into(),
        };
        attempts.record(&roll, b);
        assert_eq!(attempts.times(&roll, b), 0);
        assert_eq!(hold_without_effect(roll.clone(), 100), roll);
    }
}
