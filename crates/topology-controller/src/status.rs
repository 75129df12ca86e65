//! Status (layer 5): the ValkeyCluster's status (phase, shards, conditions, switchover
//! outcome), from the survey and the step. Each member's `status.valkey` is in
//! [`crate::member_status`].

use crd_types::cluster::{
    MemberStatus, Phase, ShardStatus, SwitchoverOutcome, SwitchoverStatus, ValkeyClusterStatus,
};
use crd_types::conditions::reasons::{Degraded, Progressing, SlotsAssigned, TopologyReady};
use crd_types::conditions::{self, ConditionSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::model::{Member, Shape};
use crate::plan::{FailoverReason, Step};
use crate::slots::{self, SLOTS};
use crate::survey::Survey;

/// Everything the cluster status is computed from.
pub struct Inputs<'a> {
    pub shape: &'a Shape,
    pub members: &'a [Member],
    pub survey: &'a Survey,
    pub step: &'a Step,
    /// What went wrong executing the step, if anything.
    pub step_error: Option<&'a str>,
    /// Switchover outcome from [`crate::survey::switchover_outcome`].
    pub switchover: Option<Result<String, String>>,
    pub current: Option<&'a ValkeyClusterStatus>,
    pub generation: Option<i64>,
    pub now: Timestamp,
}

pub fn cluster_status(i: Inputs) -> ValkeyClusterStatus {
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
    // The shape Valkey has differs from the spec's: shards serving slots, or members.
    let reshaping = i
        .survey
        .shards
        .iter()
        .filter(|s| !s.slots.is_empty())
        .count()
        != wanted_shards
        || i.members.iter().any(|m| !i.shape.wants(m.at))
        || !i.survey.strangers.is_empty();
    let all_there =
        wanted_members.count() == (i.shape.shards * (1 + i.shape.replicas_per_shard)) as usize;
    let ready = matches!(i.step, Step::Idle)
        && complete
        && i.survey.strangers.is_empty()
        && i.survey.disagreement.is_none()
        && i.survey.unsettled_shard_ids.is_none()
        && i.survey.not_serving.is_none()
        && ready_shards == wanted_shards
        && all_there
        && i.step_error.is_none();
    // Creating until the first Ready: replicas syncing after formation are not a degradation.
    let was_ready_before = i
        .current
        .and_then(|c| c.phase)
        .is_some_and(|p| p != Phase::Creating);
    let ever_formed = i.survey.slots_assigned > 0 && was_ready_before;
    let phase = if ready {
        Phase::Ready
    } else if !ever_formed {
        Phase::Creating
    } else if i.step.is_scaling() || !all_there || reshaping {
        Phase::Scaling
    } else if rolling || matches!(i.step, Step::AllowRoll { .. } | Step::Failover { .. }) {
        Phase::Updating
    } else {
        Phase::Degraded
    };

    let current_conditions = i.current.map(|c| c.conditions.as_slice()).unwrap_or(&[]);
    let progress = match i.step_error {
        Some(e) => format!("{}; failed: {e}", i.step),
        None => i.step.to_string(),
    };
    let unwell_message = if !unwell.is_empty() {
        format!("not ready: {}", unwell.join(", "))
    } else if let Some(d) = &i.survey.disagreement {
        format!("members do not agree yet: {d}")
    } else if let Some(m) = &i.survey.not_serving {
        format!("{m} says cluster_state:fail (it answers CLUSTERDOWN)")
    } else if let Some(u) = &i.survey.unsettled_shard_ids {
        format!("shard ids are settling: {u}")
    } else if !i.survey.strangers.is_empty() {
        format!(
            "Valkey lists nodes that are no member (removed ones are forgotten once Valkey \
             marks them failed): {}",
            i.survey.strangers.join(", ")
        )
    } else {
        format!("{ready_shards} of {wanted_shards} shards ready")
    };
    let degraded = ever_formed
        && !ready
        && (!unwell.is_empty() || ready_shards < wanted_shards || !i.survey.strangers.is_empty());
    let wanted = [
        ConditionSpec::new(
            if ready {
                TopologyReady::ClusterReady
            } else {
                TopologyReady::from(phase)
            },
            ready,
            if ready {
                format!("{wanted_shards} shards, all {SLOTS} slots served")
            } else if matches!(i.step, Step::Idle) {
                // Nothing left to do, yet not ready: say what is still missing.
                unwell_message.clone()
            } else {
                progress.clone()
            },
        ),
        ConditionSpec::new(
            match i.step {
                Step::Idle => Progressing::Idle,
                Step::Wait { reason, .. } => Progressing::Waiting(*reason),
                _ => Progressing::Step(phase),
            },
            !matches!(i.step, Step::Idle | Step::Wait { .. }),
            progress,
        ),
        ConditionSpec::new(
            if !degraded {
                Degraded::Healthy
            } else if !unwell.is_empty() {
                Degraded::MembersNotReady
            } else if !i.survey.strangers.is_empty() {
                Degraded::UnknownNodes
            } else {
                Degraded::ShardsNotReady
            },
            degraded,
            unwell_message,
        ),
        ConditionSpec::new(
            if complete {
                SlotsAssigned::AllSlotsAssigned
            } else {
                SlotsAssigned::SlotsMissing
            },
            complete,
            format!(
                "{} of {SLOTS} slots assigned, {} open",
                i.survey.slots_assigned, i.survey.open_slots
            ),
        ),
    ];
    let conditions = wanted
        .into_iter()
        .map(|w| conditions::transition(current_conditions, w, i.generation, i.now))
        .collect();

    ValkeyClusterStatus {
        phase: Some(phase),
        ready_shards: ready_shards as i32,
        slots_assigned: i.survey.slots_assigned as i32,
        shards: i
            .survey
            .shards
            .iter()
            .map(|s| ShardStatus {
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
            })
            .collect(),
        switchover: switchover_status(&i),
        observed_generation: i.generation,
        conditions,
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
        Some(Ok(message)) => finished(SwitchoverOutcome::Succeeded, message.clone()),
        Some(Err(message)) => finished(SwitchoverOutcome::Failed, message.clone()),
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
    use crate::model::SwitchoverRequest;
    use crate::survey::ShardSurvey;
    use crd_types::conditions::reasons::Waiting;
    use crd_types::conditions::types;

    fn shape() -> Shape {
        Shape {
            cluster: "c".into(),
            shards: 1,
            replicas_per_shard: 0,
            switchover: Some(SwitchoverRequest {
                id: "s1".into(),
                target: "c-0-0".into(),
            }),
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
        i.switchover = Some(Err("later trouble".into()));
        assert_eq!(cluster_status(i).switchover, done.switchover);
    }
}
