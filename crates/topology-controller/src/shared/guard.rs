//! Planner (layer 4): the planner's step held back by what is known of the passwords (read
//! by the binary from the Secrets [`crate::shared::auth`] names).

use std::error::Error;

use crd_types::cluster::Phase;
use crd_types::conditions::reasons::Waiting;

use crate::shared::auth::PasswordError;

/// What a planner's step is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepState<'a> {
    /// Nothing to do.
    Idle,
    /// Nothing can be done until something changes: why, in a reason and words.
    Waiting(Waiting, &'a str),
    /// A step that changes something.
    Running,
}

/// A step enum's `Wait { reason, message }` and `Idle` variants, as the shared rules make and
/// read them; [`step_states!`] implements it for a kind's `Step`.
pub trait StepStates {
    /// A wait with `reason` and `message`.
    fn waiting(reason: Waiting, message: String) -> Self;
    fn state(&self) -> StepState<'_>;
}

/// Implements [`StepStates`] for `$step`, and `$step::wait` for the planner's own waits:
/// every kind's step enum has the same `Wait` and `Idle` variants, and only its type differs.
macro_rules! step_states {
    ($step:ty) => {
        impl $step {
            pub fn wait(
                reason: ::crd_types::conditions::reasons::Waiting,
                message: impl Into<String>,
            ) -> Self {
                Self::Wait {
                    reason,
                    message: message.into(),
                }
            }
        }

        impl $crate::shared::guard::StepStates for $step {
            fn waiting(reason: ::crd_types::conditions::reasons::Waiting, message: String) -> Self {
                Self::Wait { reason, message }
            }

            fn state(&self) -> $crate::shared::guard::StepState<'_> {
                use $crate::shared::guard::StepState;
                match self {
                    Self::Idle => StepState::Idle,
                    Self::Wait { reason, message } => StepState::Waiting(*reason, message),
                    _ => StepState::Running,
                }
            }
        }
    };
}
pub(crate) use step_states;

/// A planner's step as the shared rules and reports see it: a cluster's, a replication's.
pub trait PlannedStep: StepStates + Sized + std::fmt::Display {
    /// Changes the topology's shape: who replicates whom, membership, slots.
    fn is_scaling(&self) -> bool;
    /// Changes its members' template or config.
    fn is_update(&self) -> bool;
    /// Lets a member restart: a roll, or the hand-over before one.
    fn lets_member_restart(&self) -> bool;
    /// Idle, or a step the members serve through as before, so Ready need not go False
    /// for it: live directives (`CONFIG SET`), which an operator upgrade bringing a new
    /// default also runs.
    fn keeps_ready(&self) -> bool;

    /// Idle, or a step that lets a member restart: held while the default user's password
    /// cannot be read (a member that restarts would not start again, and nothing is Ready).
    fn needs_default_password(&self) -> bool {
        self.state() == StepState::Idle || self.lets_member_restart()
    }

    /// The phase a running step serves: `Scaling` (the topology's shape changes) or
    /// `Updating` (its members' template or config); `None` for the others.
    fn serves(&self) -> Option<Phase> {
        if self.is_scaling() {
            return Some(Phase::Scaling);
        }
        self.is_update().then_some(Phase::Updating)
    }

    /// The message of a wait; `None` for any other step.
    fn wait_message(&self) -> Option<&str> {
        match self.state() {
            StepState::Waiting(_, message) => Some(message),
            _ => None,
        }
    }
}

/// What holds every topology's planner back besides its members' answers: a ValkeyNode it
/// does not own under a member's name, and what is known of the passwords and the TLS Secret.
#[derive(Clone, Debug, Default)]
pub struct Holds<'a> {
    /// A ValkeyNode with a member's name that the topology does not own.
    pub foreign_member: Option<&'a str>,
    /// Why the operator user's password cannot be read, if it cannot.
    pub operator_password_problem: Option<&'a PasswordError>,
    /// Why the TLS Secret cannot be used, if it cannot (the binary says why: its Secret, or
    /// the CA the operator keeps).
    pub tls_problem: Option<&'a dyn Error>,
    /// Why the passwords members need to start cannot be read, if any cannot.
    pub default_password_problems: &'a [&'a PasswordError],
    /// Members that refuse the operator user's login.
    pub login_refused: &'a [&'a str],
}

/// The step to take: `plan`'s, unless a foreign ValkeyNode holds a member's name (never taken
/// over; `owner` names the topology in the message), then held back by [`guard_step`].
pub fn decide<S: PlannedStep>(holds: &Holds, owner: &str, plan: impl FnOnce() -> S) -> S {
    let step = match holds.foreign_member {
        Some(name) => S::waiting(
            Waiting::ForeignMember,
            format!("ValkeyNode {name} exists but does not belong to {owner}; rename or delete it"),
        ),
        None => plan(),
    };
    guard_step(
        step,
        holds.operator_password_problem,
        holds.tls_problem,
        holds.default_password_problems,
        holds.login_refused,
    )
}

/// The planner's step, held back by what is known of the passwords:
/// - without the operator's password, or with a TLS Secret that cannot be used, nothing was
///   asked, so nothing may be done;
/// - while the default user's password cannot be read (missing, empty), no member may
///   restart (a roll, or the hand-over before one) and the topology is not Ready: a member
///   that restarts would not start again;
/// - members refusing the operator's login say why they seem silent.
///
/// Each problem is put in front of a waiting step's own message, never instead of it; the
/// wait then carries the first problem's reason, the cause to act on.
pub fn guard_step<S: PlannedStep>(
    step: S,
    operator_problem: Option<&PasswordError>,
    tls_problem: Option<&dyn Error>,
    default_problems: &[&PasswordError],
    refused_by: &[&str],
) -> S {
    if let Some(why) = operator_problem {
        return S::waiting(
            Waiting::NoOperatorPassword,
            format!("cannot log in to the members: {why} (spec.auth.operatorSecretRef)"),
        );
    }
    if let Some(why) = tls_problem {
        return S::waiting(
            Waiting::TlsSecretUnusable,
            format!("cannot connect to the members: {why} (spec.tls)"),
        );
    }
    let mut problems = Vec::new();
    if !default_problems.is_empty() {
        let why = default_problems
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        problems.push((
            Waiting::DefaultPasswordUnreadable,
            format!("{why} (spec.auth.passwordSecretRef), so no member may restart"),
        ));
    }
    if !refused_by.is_empty() {
        problems.push((
            Waiting::LoginRefused,
            format!(
                "{} refuse the operator's password (was the operator Secret changed? running \
                 servers keep the password they started with)",
                refused_by.join(", ")
            ),
        ));
    }
    let Some(&(reason, _)) = problems.first() else {
        return step;
    };
    let problems = problems
        .into_iter()
        .map(|(_, problem)| problem)
        .collect::<Vec<_>>()
        .join("; ");
    if let Some(message) = step.wait_message() {
        return S::waiting(reason, format!("{problems}; {message}"));
    }
    if !default_problems.is_empty() && step.needs_default_password() {
        return S::waiting(reason, problems);
    }
    step
}
