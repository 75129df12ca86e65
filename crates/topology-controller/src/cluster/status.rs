//! Status (layer 5): the ValkeyCluster's status (phase, shards, conditions, switchover
//! outcome), from the survey and the step. Each member's `status.valkey` is in
//! [`crate::shared::member_status`].

use crd_types::cluster::{
    ConfigPaths, MemberStatus, Phase, ShardStatus, SwitchoverOutcome, SwitchoverStatus,
    ValkeyClusterStatus,
};
use crd_types::conditions::ConditionSpec;
use crd_types::conditions::reasons::{Degraded, SlotsAssigned, TopologyReady};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::cluster::model::{Member, Shape};
use crate::cluster::plan::Step;
use crate::cluster::slots::{self, SLOTS};
use crate::cluster::survey::{NotAMember, ShardSurvey, Survey, TargetServes};
use crate::shared::conditions::{PhaseFacts, not_ready, progressing, topology_phase, transitioned};
use crate::shared::guard::PlannedStep;
use crate::shared::roll::FailoverReason;

/// Everything the cluster status is computed from.
pub struct Inputs<'a> {
    pub shape: &'a Shape,
    pub members: &'a [Member],
    pub survey: &'a Survey,
    pub step: &'a Step,
    /// What went wrong executing the step, if anything.
    pub step_error: Option<&'a str>,
    /// Switchover outcome from [`crate::cluster::survey::switchover_outcome`].
    pub switchover: Option<Result<TargetServes, NotAMember>>,
    pub current: Option<&'a ValkeyClusterStatus>,
    pub generation: Option<i64>,
    pub now: Timestamp,
}

/// The cluster's status: the phase, one condition per type (each from its own function
/// below), the shards and the switchover outcome.
pub fn cluster_status(i: Inputs) -> ValkeyClusterStatus {
    let health = Health::of(&i);
    let phase = phase(&i, &health);
    let current = i.current.map(|c| c.conditions.as_slice()).unwrap_or(&[]);
    let conditions = [
        ready(&i, &health, phase),
        progressing(i.step, i.step_error, phase),
        degraded(&i, &health),
        slots_assigned(i.survey, &health),
    ];
    ValkeyClusterStatus {
        phase: Some(phase),
        ready_shards: health.ready_shards as i32,
        slots_assigned: i.survey.slots_assigned as i32,
        shards: i.survey.shards.iter().map(shard_status).collect(),
        switchover: switchover_status(&i),
        config: ConfigPaths::of(&i.shape.config),
        observed_generation: i.generation,
        conditions: transitioned(current, conditions, i.generation, i.now),
        // The members' storage and versions, the rotations and the CA replacement: the
        // caller's, from what it read and its passes over the credentials.
        ..Default::default()
    }
}

/// What the phase and the conditions are decided from, counted once.
struct Health<'a> {
    wanted_shards: usize,
    ready_shards: usize,
    /// Every slot has an owner and none is open.
    complete: bool,
    /// Wanted members that are not ready or do not answer.
    unwell: Vec<&'a str>,
    /// Some wanted member runs another revision than its spec renders to.
    rolling: bool,
    /// The shape Valkey has differs from the spec's: shards serving slots, or members.
    reshaping: bool,
    /// Every member the spec wants exists.
    all_there: bool,
    /// Idle, complete, every shard ready, every view in agreement, every member serving and
    /// answering the operator.
    ready: bool,
    /// Past Creating: slots are assigned and the cluster was Ready once. Until then,
    /// replicas syncing after formation are no degradation.
    ever_formed: bool,
}

impl<'a> Health<'a> {
    fn of(i: &Inputs<'a>) -> Self {
        let wanted_shards = i.shape.shards as usize;
        let ready_shards = i
            .survey
            .shards
            .iter()
            .filter(|s| (s.index as usize) < wanted_shards && s.ready)
            .count();
        let complete = i.survey.slots_assigned == SLOTS as usize && i.survey.open_slots == 0;
        let wanted_members = i.members.iter().filter(|m| i.shape.wants(m.at));
        let unwell: Vec<&str> = wanted_members
            .clone()
            .filter(|m| !m.ready || m.reply.is_none())
            .map(|m| m.name.as_str())
            .collect();
        let rolling = wanted_members
            .clone()
            .any(|m| m.revisions.desired != m.revisions.running);
        let serving_shards = i.survey.shards.iter().filter(|s| !s.slots.is_empty());
        let reshaping = serving_shards.count() != wanted_shards
            || i.members.iter().any(|m| !i.shape.wants(m.at))
            || !i.survey.strangers.is_empty();
        let all_there = wanted_members.count() == i.shape.member_count();
        let ready = i.step.keeps_ready()
            && complete
            && i.survey.strangers.is_empty()
            && i.survey.disagreement.is_none()
            && i.survey.unsettled_shard_ids.is_none()
            && i.survey.not_serving.is_none()
            && i.survey.stale_marker.is_none()
            && ready_shards == wanted_shards
            && all_there
            // A member that does not answer (frozen, cut off) may still look fine to its
            // peers until cluster-node-timeout; the operator does not wait for them.
            && unwell.is_empty()
            && i.step_error.is_none();
        let was_ready_before = i
            .current
            .and_then(|c| c.phase)
            .is_some_and(|p| p != Phase::Creating);
        Health {
            wanted_shards,
            ready_shards,
            complete,
            unwell,
            rolling,
            reshaping,
            all_there,
            ready,
            ever_formed: i.survey.slots_assigned > 0 && was_ready_before,
        }
    }
}

/// The cluster's phase ([`crate::shared::conditions::topology_phase`]).
fn phase(i: &Inputs, h: &Health) -> Phase {
    let facts = PhaseFacts {
        ready: h.ready,
        formed: h.ever_formed,
        reshaping: !h.all_there || h.reshaping,
        rolling: h.rolling,
    };
    topology_phase(i.step, facts)
}

/// `Ready`: its reason is the phase while not ready.
fn ready(i: &Inputs, h: &Health, phase: Phase) -> ConditionSpec {
    if h.ready {
        let message = format!("{} shards, all {SLOTS} slots served", h.wanted_shards);
        return ConditionSpec::new(TopologyReady::ClusterReady, true, message);
    }
    not_ready(i.step, i.step_error, phase, || unwell_message(i, h))
}

/// `Degraded`: formed once, not ready, and a member, a shard or Valkey's node list is not
/// as it should be.
fn degraded(i: &Inputs, h: &Health) -> ConditionSpec {
    let degraded = h.ever_formed
        && !h.ready
        && (!h.unwell.is_empty()
            || h.ready_shards < h.wanted_shards
            || !i.survey.strangers.is_empty()
            || i.survey.stale_marker.is_some());
    let reason = if !degraded {
        Degraded::Healthy
    } else if !h.unwell.is_empty() {
        Degraded::MembersNotReady
    } else if !i.survey.strangers.is_empty() {
        Degraded::UnknownNodes
    } else if i.survey.stale_marker.is_some() {
        Degraded::StaleSlotMarker
    } else {
        Degraded::ShardsNotReady
    };
    ConditionSpec::new(reason, degraded, unwell_message(i, h))
}

/// `SlotsAssigned`: every slot has an owner and none is open.
fn slots_assigned(survey: &Survey, h: &Health) -> ConditionSpec {
    let reason = if h.complete {
        SlotsAssigned::AllSlotsAssigned
    } else {
        SlotsAssigned::SlotsMissing
    };
    let message = format!(
        "{} of {SLOTS} slots assigned, {} open",
        survey.slots_assigned, survey.open_slots
    );
    ConditionSpec::new(reason, h.complete, message)
}

/// The first thing that keeps the cluster from Ready, in words.
fn unwell_message(i: &Inputs, h: &Health) -> String {
    let survey = i.survey;
    if !h.unwell.is_empty() {
        format!("not ready: {}", h.unwell.join(", "))
    } else if let Some(d) = &survey.disagreement {
        format!("members do not agree yet: {d}")
    } else if let Some(m) = &survey.not_serving {
        format!("{m} says cluster_state:fail (it answers CLUSTERDOWN)")
    } else if let Some(stale) = &survey.stale_marker {
        format!("{stale}; it is cleared through the primary")
    } else if let Some(u) = &survey.unsettled_shard_ids {
        format!("shard ids are settling: {u}")
    } else if !survey.strangers.is_empty() {
        format!(
            "Valkey lists nodes that are no member (removed ones are forgotten once Valkey \
             marks them failed): {}",
            survey.strangers.join(", ")
        )
    } else {
        format!("{} of {} shards ready", h.ready_shards, h.wanted_shards)
    }
}

fn shard_status(s: &ShardSurvey) -> ShardStatus {
    ShardStatus {
        index: s.index as i32,
        primary: s.primary.clone(),
        slots: slots::format_ranges(&s.slots),
        members: s
            .members
            .iter()
            .map(|(name, role, ready)| MemberStatus {
                name: name.clone(),
                role: *role,
                ready: *ready,
            })
            .collect(),
    }
}

/// The outcome of the current request; a finished outcome is kept as it was.
fn switchover_status(i: &Inputs) -> Option<SwitchoverStatus> {
    let id = &i.shape.switchover.as_ref()?.id;
    if let Some(done) = i.current.and_then(|c| c.switchover.as_ref())
        && &done.id == id
        && done.outcome.is_finished()
    {
        return Some(done.clone());
    }
    let finished = |outcome: SwitchoverOutcome, message: String| SwitchoverStatus {
        id: id.clone(),
        outcome,
        message,
        finished_at: Some(Time(i.now)),
    };
    Some(match &i.switchover {
        Some(Ok(done)) => finished(SwitchoverOutcome::Succeeded, done.to_string()),
        Some(Err(why)) => finished(SwitchoverOutcome::Failed, why.to_string()),
        None => SwitchoverStatus {
            id: id.clone(),
            outcome: SwitchoverOutcome::Pending,
            message: match i.step {
                Step::Failover {
                    reason: FailoverReason::Switchover,
                    member,
                } => format!("{member} is taking over"),
                _ => "waiting for the target to be an in-sync replica".to_string(),
            },
            finished_at: None,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::plan::next_step;
    use crate::cluster::sim::{self, Sim, formed, members};
    use crate::cluster::survey::survey;
    use crate::shared::member_facts::SwitchoverRequest;
    use crd_types::conditions;
    use crd_types::conditions::reasons::Waiting;
    use crd_types::conditions::types;

    fn shape() -> Shape {
        Shape {
            cluster: "c".into(),
            shards: 1,
            config: Default::default(),
            image: crd_types::template::DEFAULT_IMAGE.into(),
            atomic_migration: true,
            replicas_per_shard: 0,
            switchover: Some(SwitchoverRequest {
                id: "s1".into(),
                target: "c-0-0".into(),
            }),
            replication_password: None,
        }
    }

    fn inputs<'a>(
        d: &'a Shape,
        survey: &'a Survey,
        step: &'a Step,
        current: Option<&'a ValkeyClusterStatus>,
    ) -> Inputs<'a> {
        Inputs {
            shape: d,
            members: &[],
            survey,
            step,
            step_error: None,
            switchover: None,
            current,
            generation: Some(3),
            now: Timestamp::from_second(1_000).unwrap(),
        }
    }

    #[test]
    fn a_cluster_without_slots_is_creating_and_not_ready() {
        let d = shape();
        let step = Step::wait(Waiting::Forming, "forming");
        let s = cluster_status(inputs(&d, &Survey::default(), &step, None));
        assert_eq!(s.phase, Some(Phase::Creating));
        assert!(!conditions::is_true(&s.conditions, types::READY));
        assert!(!conditions::is_true(&s.conditions, types::DEGRADED));
        assert_eq!(s.observed_generation, Some(3));
        assert_eq!(s.switchover.unwrap().outcome, SwitchoverOutcome::Pending);
    }

    #[test]
    fn missing_members_are_not_ready_even_with_every_slot() {
        let d = shape();
        let survey = Survey {
            slots_assigned: SLOTS as usize,
            open_slots: 0,
            shards: vec![ShardSurvey {
                index: 0,
                slots: vec![(0, 16383)],
                ready: true,
                ..Default::default()
            }],
            strangers: vec![],
            disagreement: None,
            unsettled_shard_ids: None,
            not_serving: None,
            stale_marker: None,
        };
        let was_ready = ValkeyClusterStatus {
            phase: Some(Phase::Ready),
            ..Default::default()
        };
        // No member in `members`: the spec's one member does not exist.
        let s = cluster_status(inputs(&d, &survey, &Step::Idle, Some(&was_ready)));
        assert_eq!(s.phase, Some(Phase::Scaling));
        assert!(conditions::is_true(&s.conditions, types::SLOTS_ASSIGNED));
        assert!(!conditions::is_true(&s.conditions, types::READY));
    }

    #[test]
    fn a_member_answering_clusterdown_keeps_the_cluster_from_ready() {
        let d = shape();
        let survey = Survey {
            slots_assigned: SLOTS as usize,
            shards: vec![ShardSurvey {
                index: 0,
                slots: vec![(0, 16383)],
                ready: true,
                ..Default::default()
            }],
            not_serving: Some("c-0-0".into()),
            ..Default::default()
        };
        let s = cluster_status(inputs(&d, &survey, &Step::Idle, None));
        let ready = conditions::find(&s.conditions, types::READY).unwrap();
        assert_eq!(ready.status, "False");
    }

    #[test]
    fn waiting_for_slots_in_flight_is_scaling_and_a_refused_image_is_no_roll() {
        let d = shape();
        let survey = Survey {
            slots_assigned: SLOTS as usize,
            shards: vec![ShardSurvey {
                index: 0,
                slots: vec![(0, 16383)],
                ready: true,
                ..Default::default()
            }],
            ..Default::default()
        };
        let was_ready = ValkeyClusterStatus {
            phase: Some(Phase::Ready),
            ..Default::default()
        };
        let m = members(&formed(1, 0));
        let status = |step: &Step| {
            cluster_status(Inputs {
                members: &m,
                ..inputs(&d, &survey, step, Some(&was_ready))
            })
        };
        let moving = Step::wait(Waiting::SlotsMovingAtomically, "slots 0-99 move atomically");
        assert_eq!(status(&moving).phase, Some(Phase::Scaling));
        // Everything there and serving: a refusal is no roll and no scaling.
        let refused = Step::wait(
            Waiting::VersionRefused,
            "valkey/valkey:8.0 is not rolled out",
        );
        let s = status(&refused);
        assert_eq!(s.phase, Some(Phase::Degraded));
        let progressing = conditions::find(&s.conditions, types::PROGRESSING).unwrap();
        assert_eq!(
            (progressing.reason.as_str(), progressing.status.as_str()),
            ("VersionRefused", "False")
        );
    }

    #[test]
    fn a_finished_switchover_is_kept_as_it_was() {
        let d = shape();
        let done = ValkeyClusterStatus {
            switchover: Some(SwitchoverStatus {
                id: "s1".into(),
                outcome: SwitchoverOutcome::Succeeded,
                message: "done".into(),
                finished_at: None,
            }),
            ..Default::default()
        };
        let survey = Survey::default();
        let mut i = inputs(&d, &survey, &Step::Idle, Some(&done));
        i.switchover = Some(Err(NotAMember {
            target: "c-0-7".into(),
        }));
        assert_eq!(cluster_status(i).switchover, done.switchover);
    }

    /// The status of the simulated cluster `sims` as the planner sees it, after a status
    /// that read `was`.
    fn status_of(d: &Shape, sims: &[Sim], was: Phase) -> ValkeyClusterStatus {
        let m = members(sims);
        let survey = survey(d, &m);
        let step = next_step(d, &m, None);
        let current = ValkeyClusterStatus {
            phase: Some(was),
            ..Default::default()
        };
        cluster_status(Inputs {
            members: &m,
            ..inputs(d, &survey, &step, Some(&current))
        })
    }

    fn reason<'a>(s: &'a ValkeyClusterStatus, type_: &str) -> (&'a str, &'a str) {
        let c = conditions::find(&s.conditions, type_).unwrap();
        (c.status.as_str(), c.reason.as_str())
    }

    #[test]
    fn a_live_directive_step_keeps_a_ready_cluster_ready() {
        let d = sim::shape(1, 1);
        let m = members(&formed(1, 1));
        let survey = survey(&d, &m);
        let current = ValkeyClusterStatus {
            phase: Some(Phase::Ready),
            ..Default::default()
        };
        let set = Step::SetConfig(vec![(
            "c-0-0".into(),
            vec![("cluster-node-timeout".into(), "3000".into())],
        )]);
        let s = cluster_status(Inputs {
            members: &m,
            ..inputs(&d, &survey, &set, Some(&current))
        });
        assert_eq!(s.phase, Some(Phase::Ready));
        assert_eq!(reason(&s, types::READY), ("True", "ClusterReady"));
        assert_eq!(reason(&s, types::PROGRESSING), ("True", "Updating"));
        // A step a member restarts for does take Ready away.
        let roll = Step::AllowRoll {
            member: "c-0-1".into(),
            revision: "r2".into(),
        };
        let s = cluster_status(Inputs {
            members: &m,
            ..inputs(&d, &survey, &roll, Some(&current))
        });
        assert_eq!(reason(&s, types::READY).0, "False");
    }

    #[test]
    fn a_member_that_stops_answering_is_not_ready_before_its_peers_notice() {
        let d = sim::shape(1, 1);
        let mut m = members(&formed(1, 1));
        // Frozen: its pod is still Ready and its peers still list it healthy.
        m[0].reply = None;
        let survey = survey(&d, &m);
        let step = next_step(&d, &m, None);
        let current = ValkeyClusterStatus {
            phase: Some(Phase::Ready),
            ..Default::default()
        };
        let s = cluster_status(Inputs {
            members: &m,
            ..inputs(&d, &survey, &step, Some(&current))
        });
        assert_eq!(reason(&s, types::READY).0, "False");
        assert_eq!(reason(&s, types::DEGRADED), ("True", "MembersNotReady"));
        let degraded = conditions::find(&s.conditions, types::DEGRADED).unwrap();
        assert_eq!(degraded.message, format!("not ready: {}", m[0].name));
    }

    #[test]
    fn conditions_carry_typed_reasons() {
        let d = sim::shape(1, 1);
        let s = status_of(&d, &formed(1, 1), Phase::Ready);
        assert_eq!(s.phase, Some(Phase::Ready));
        assert_eq!(reason(&s, types::READY), ("True", "ClusterReady"));
        assert_eq!(reason(&s, types::PROGRESSING), ("False", "Idle"));
        assert_eq!(reason(&s, types::DEGRADED), ("False", "Healthy"));
        assert_eq!(
            reason(&s, types::SLOTS_ASSIGNED),
            ("True", "AllSlotsAssigned")
        );
        // A member down: Degraded says which, Progressing the wait's own reason.
        let mut sims = formed(1, 1);
        sims[1].ready = false;
        sims[0].revisions.desired = Some("r2".into());
        let s = status_of(&d, &sims, Phase::Ready);
        assert_eq!(reason(&s, types::DEGRADED), ("True", "MembersNotReady"));
        assert_eq!(reason(&s, types::PROGRESSING), ("False", "MemberNotReady"));
        // A step runs: Progressing is True with the phase it serves.
        sims[1].ready = true;
        let s = status_of(&d, &sims, Phase::Ready);
        assert_eq!(s.phase, Some(Phase::Updating));
        assert_eq!(reason(&s, types::PROGRESSING), ("True", "Updating"));
        assert_eq!(reason(&s, types::READY), ("False", "Updating"));
    }

    #[test]
    fn the_end_of_a_roll_reads_as_the_roll_not_as_a_fault() {
        let d = sim::shape(1, 1);
        // Every member runs r2: the replica rolled, took over, and the old primary, now its
        // replica, rolled last and is still resyncing.
        let mut sims = formed(1, 1);
        sims[1].slots = std::mem::take(&mut sims[0].slots);
        sims[1].follows = None;
        sims[0].follows = Some(sim::id(0, 1));
        sims[0].synced = false;
        for s in &mut sims {
            s.revisions.desired = Some("r2".into());
            s.revisions.running = Some("r2".into());
            s.revisions.allowed = Some("r2".into());
        }
        let s = status_of(&d, &sims, Phase::Updating);
        assert_eq!(reason(&s, types::PROGRESSING), ("False", "MemberRolling"));
        assert_eq!(s.phase, Some(Phase::Updating));
        assert_eq!(reason(&s, types::READY), ("False", "Updating"));
        // Resynced: the roll is over.
        sims[0].synced = true;
        assert_eq!(
            status_of(&d, &sims, Phase::Updating).phase,
            Some(Phase::Ready)
        );
        // A template change node-controller has not rendered yet is the start of a roll.
        sims[1].revisions.observed = false;
        let s = status_of(&d, &sims, Phase::Ready);
        assert_eq!(reason(&s, types::PROGRESSING), ("False", "SpecNotRendered"));
        assert_eq!(s.phase, Some(Phase::Updating));
    }

    #[test]
    fn a_replicas_stale_slot_marker_keeps_the_cluster_from_ready_and_is_named() {
        let d = sim::shape(2, 1);
        let mut sims = formed(2, 1);
        sims[3].markers = format!("[100-<-{}]", sim::id(0, 0));
        let s = status_of(&d, &sims, Phase::Ready);
        assert_eq!(reason(&s, types::READY).0, "False");
        assert_eq!(reason(&s, types::DEGRADED), ("True", "StaleSlotMarker"));
        let degraded = conditions::find(&s.conditions, types::DEGRADED).unwrap();
        assert!(
            degraded
                .message
                .contains("replica c-1-1 keeps a marker for slot 100 that its primary c-1-0"),
            "{}",
            degraded.message
        );
        sims[3].markers.clear();
        assert_eq!(
            status_of(&d, &sims, Phase::Degraded).phase,
            Some(Phase::Ready)
        );
    }
}
