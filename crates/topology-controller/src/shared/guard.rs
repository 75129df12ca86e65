//! Planner (layer 4): the planner's step held back by what is known of the passwords (read
//! by the binary from the Secrets [`crate::shared::auth`] names).

use crd_types::conditions::reasons::Waiting;

/// A planner's step as the guard sees it: a cluster's [`Step`], a replication's.
pub trait GuardedStep: Sized {
    /// A wait with `reason` and `message`.
    fn waiting(reason: Waiting, message: String) -> Self;
    /// The message of a wait; `None` for any other step.
    fn wait_message(&self) -> Option<&str>;
    /// Idle, or a step that lets a member restart: held while the default user's password
    /// cannot be read (a member that restarts would not start again, and nothing is Ready).
    fn needs_default_password(&self) -> bool;
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
pub fn guard_step<S: GuardedStep>(
    step: S,
    operator_problem: Option<&str>,
    tls_problem: Option<&str>,
    default_problem: Option<&str>,
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
    if let Some(why) = default_problem {
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
    if default_problem.is_some() && step.needs_default_password() {
        return S::waiting(reason, problems);
    }
    step
}
