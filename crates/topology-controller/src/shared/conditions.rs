//! Status (layer 5): what every topology kind reports the same way from its planner's step:
//! the phase, `Progressing`, and `Ready` while not ready.

use crd_types::cluster::Phase;
use crd_types::conditions::reasons::{Progressing, TopologyReady, Waiting};
use crd_types::conditions::{self, ConditionSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;

use crate::shared::guard::{PlannedStep, StepState};

/// What a kind knows of its topology, for the phase.
pub struct PhaseFacts {
    pub ready: bool,
    /// It was Ready once (past Creating).
    pub formed: bool,
    /// Its shape is changing: members come or go.
    pub reshaping: bool,
    /// Its members are rolling to a new template.
    pub rolling: bool,
}

/// A status's conditions, from `specs`: each keeps its last transition time from `current`
/// while its status holds.
pub fn transitioned(
    current: &[Condition],
    specs: impl IntoIterator<Item = ConditionSpec>,
    generation: Option<i64>,
    now: Timestamp,
) -> Vec<Condition> {
    specs
        .into_iter()
        .map(|c| conditions::transition(current, c, generation, now))
        .collect()
}

/// Creating until the first Ready; then Scaling while the shape changes, Updating while
/// members roll or take a new config, Degraded for anything else that keeps it from Ready.
pub fn topology_phase<S: PlannedStep>(step: &S, facts: PhaseFacts) -> Phase {
    // A wait that is part of moving slots, or of the roll itself (the last member to roll
    // runs the new revision but is not in sync yet, or a template is not rendered yet).
    let waits = |is: fn(Waiting) -> bool| matches!(step.state(), StepState::Waiting(r, _) if is(r));
    if facts.ready {
        Phase::Ready
    } else if !facts.formed {
        Phase::Creating
    } else if facts.reshaping || step.serves() == Some(Phase::Scaling) || waits(Waiting::is_scaling)
    {
        Phase::Scaling
    } else if facts.rolling || step.serves() == Some(Phase::Updating) || waits(Waiting::is_roll) {
        Phase::Updating
    } else {
        Phase::Degraded
    }
}

/// The step in words, and how it failed.
pub fn progress_message<S: PlannedStep>(step: &S, error: Option<&str>) -> String {
    match error {
        Some(e) => format!("{step}; failed: {e}"),
        None => step.to_string(),
    }
}

/// `Progressing`: True while a step runs (the reason is the phase it serves), False while
/// idle or waiting (the reason says for what).
pub fn progressing<S: PlannedStep>(step: &S, error: Option<&str>, phase: Phase) -> ConditionSpec {
    let (reason, running) = match step.state() {
        StepState::Idle => (Progressing::Idle, false),
        StepState::Waiting(reason, _) => (Progressing::Waiting(reason), false),
        // A live directive step keeps the topology Ready (PlannedStep::keeps_ready): it
        // updates the members' config.
        StepState::Running if phase == Phase::Ready => (Progressing::Step(Phase::Updating), true),
        StepState::Running => (Progressing::Step(phase), true),
    };
    ConditionSpec::new(reason, running, progress_message(step, error))
}

/// `Ready` False, its reason the phase: with nothing left to do, what is still missing
/// (`unwell`); else the step.
pub fn not_ready<S: PlannedStep>(
    step: &S,
    error: Option<&str>,
    phase: Phase,
    unwell: impl FnOnce() -> String,
) -> ConditionSpec {
    let message = match step.state() {
        StepState::Idle => unwell(),
        _ => progress_message(step, error),
    };
    ConditionSpec::new(TopologyReady::from(phase), false, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::guard::StepStates;

    /// A planner's step reduced to what the reports read.
    #[derive(Debug)]
    enum Fake {
        Idle,
        Wait(Waiting),
        Run(Option<Phase>),
    }

    impl std::fmt::Display for Fake {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "{self:?}")
        }
    }

    impl StepStates for Fake {
        fn waiting(reason: Waiting, _: String) -> Self {
            Fake::Wait(reason)
        }

        fn state(&self) -> StepState<'_> {
            match self {
                Fake::Idle => StepState::Idle,
                Fake::Wait(reason) => StepState::Waiting(*reason, "waiting"),
                Fake::Run(_) => StepState::Running,
            }
        }
    }

    impl PlannedStep for Fake {
        fn is_scaling(&self) -> bool {
            matches!(self, Fake::Run(Some(Phase::Scaling)))
        }

        fn is_update(&self) -> bool {
            matches!(self, Fake::Run(Some(Phase::Updating)))
        }

        fn lets_member_restart(&self) -> bool {
            false
        }

        fn keeps_ready(&self) -> bool {
            matches!(self, Fake::Idle)
        }

        fn needs_default_password(&self) -> bool {
            false
        }
    }

    fn facts(ready: bool, formed: bool, reshaping: bool, rolling: bool) -> PhaseFacts {
        PhaseFacts {
            ready,
            formed,
            reshaping,
            rolling,
        }
    }

    #[test]
    fn the_phase_reads_ready_then_formation_then_shape_then_roll() {
        let formed = facts(false, true, false, false);
        let cases = [
            (
                Fake::Run(Some(Phase::Scaling)),
                facts(true, true, true, true),
                Phase::Ready,
            ),
            (
                Fake::Run(Some(Phase::Scaling)),
                facts(false, false, true, true),
                Phase::Creating,
            ),
            (Fake::Idle, facts(false, true, true, true), Phase::Scaling),
            (
                Fake::Run(Some(Phase::Scaling)),
                facts(false, true, false, true),
                Phase::Scaling,
            ),
            (
                Fake::Wait(Waiting::SlotsMovingAtomically),
                formed,
                Phase::Scaling,
            ),
            (Fake::Idle, facts(false, true, false, true), Phase::Updating),
            (
                Fake::Run(Some(Phase::Updating)),
                facts(false, true, false, false),
                Phase::Updating,
            ),
            (
                Fake::Wait(Waiting::MemberRolling),
                facts(false, true, false, false),
                Phase::Updating,
            ),
            (
                Fake::Run(None),
                facts(false, true, false, false),
                Phase::Degraded,
            ),
            (
                Fake::Wait(Waiting::NoPrimary),
                facts(false, true, false, false),
                Phase::Degraded,
            ),
        ];
        for (step, facts, want) in cases {
            assert_eq!(topology_phase(&step, facts), want, "{step}");
        }
    }

    #[test]
    fn progressing_is_true_only_while_a_step_runs() {
        let running = progressing(&Fake::Run(None), Some("refused"), Phase::Scaling);
        assert!(running.status());
        assert_eq!(running.reason(), "Scaling");
        assert_eq!(running.message(), "Run(None); failed: refused");
        let waiting = progressing(&Fake::Wait(Waiting::NoPrimary), None, Phase::Degraded);
        assert!(!waiting.status());
        assert_eq!(waiting.reason(), "NoPrimary");
        let idle = not_ready(&Fake::Idle, None, Phase::Degraded, || "r-1 lags".into());
        assert_eq!((idle.reason(), idle.message()), ("Degraded", "r-1 lags"));
    }
}
