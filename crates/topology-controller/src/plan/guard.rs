//! Planner (layer 4): the planner's step held back by what is known of the passwords (read
//! by the binary from the Secrets [`crate::auth`] names).

use crd_types::conditions::reasons::Waiting;

use super::{FailoverReason, Step};

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

impl GuardedStep for Step {
    fn waiting(reason: Waiting, message: String) -> Self {
        Step::wait(reason, message)
    }

    fn wait_message(&self) -> Option<&str> {
        match self {
            Step::Wait { message, .. } => Some(message),
            _ => None,
        }
    }

    fn needs_default_password(&self) -> bool {
        matches!(
            self,
            Step::Idle
                | Step::AllowRoll { .. }
                | Step::Failover {
                    reason: FailoverReason::Roll,
                    ..
                }
        )
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn password_problems_hold_back_restarts_and_explain_waits() {
        let roll = || Step::AllowRoll {
            member: "c-0-1".into(),
            revision: "r2".into(),
        };
        let wait = |s: &Step| match s {
            Step::Wait { reason, message } => (*reason, message.clone()),
            other => panic!("not a wait: {other:?}"),
        };
        assert_eq!(guard_step(roll(), None, None, None, &[]), roll());
        assert_eq!(guard_step(Step::Idle, None, None, None, &[]), Step::Idle);
        let (reason, why) = wait(&guard_step(
            Step::Idle,
            None,
            None,
            Some("Secret a key p is empty"),
            &[],
        ));
        assert_eq!(reason, Waiting::DefaultPasswordUnreadable);
        assert!(why.starts_with("Secret a key p is empty"));
        let (reason, why) = wait(&guard_step(
            roll(),
            Some("Secret o does not exist"),
            None,
            None,
            &[],
        ));
        assert_eq!(reason, Waiting::NoOperatorPassword);
        assert!(why.starts_with("cannot log in to the members: Secret o does not exist"));
        let (reason, why) = wait(&guard_step(
            roll(),
            None,
            Some("TLS Secret c-tls has no ca.crt"),
            Some("Secret a does not exist"),
            &[],
        ));
        assert_eq!(reason, Waiting::TlsSecretUnusable);
        assert_eq!(
            why,
            "cannot connect to the members: TLS Secret c-tls has no ca.crt (spec.tls)"
        );
        let (reason, why) = wait(&guard_step(
            roll(),
            None,
            None,
            Some("Secret a does not exist"),
            &[],
        ));
        assert_eq!(reason, Waiting::DefaultPasswordUnreadable);
        assert!(why.contains("Secret a does not exist") && why.contains("no member may restart"));
        let hand_over = Step::Failover {
            member: "c-0-1".into(),
            reason: FailoverReason::Roll,
        };
        assert!(matches!(
            guard_step(hand_over, None, None, Some("x"), &[]),
            Step::Wait {
                reason: Waiting::DefaultPasswordUnreadable,
                ..
            }
        ));
        // A switchover is no restart: it goes on.
        let switchover = Step::Failover {
            member: "c-0-1".into(),
            reason: FailoverReason::Switchover,
        };
        assert_eq!(
            guard_step(switchover.clone(), None, None, Some("x"), &[]),
            switchover
        );
        // The wait's own reason is kept.
        let foreign = Step::wait(
            Waiting::ForeignMember,
            "ValkeyNode c-0-0 exists but does not belong",
        );
        let (reason, why) = wait(&guard_step(
            foreign.clone(),
            None,
            None,
            Some("Secret a does not exist"),
            &["c-0-1"],
        ));
        assert_eq!(reason, Waiting::DefaultPasswordUnreadable);
        assert!(why.contains("Secret a does not exist"));
        assert!(why.contains("c-0-1 refuse the operator's password"));
        assert!(why.ends_with("ValkeyNode c-0-0 exists but does not belong"));
        // Refused logins alone: the wait says so first, with its own reason.
        let (reason, why) = wait(&guard_step(foreign, None, None, None, &["c-0-1"]));
        assert_eq!(reason, Waiting::LoginRefused);
        assert!(why.starts_with("c-0-1 refuse") && why.ends_with("does not belong"));
        assert_eq!(guard_step(roll(), None, None, None, &["c-0-1"]), roll());
    }
}
