//! Status (layer 5): the conditions every topology kind words the same way from its
//! planner's step: `Progressing`, and `Ready` while not ready.

use crd_types::cluster::Phase;
use crd_types::conditions::ConditionSpec;
use crd_types::conditions::reasons::{Progressing, TopologyReady};

use crate::shared::guard::{PlannedStep, StepState};

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
