//! Planner (layer 4): the planner's step held back by what is known of the passwords (read
//! by the binary from the Secrets [`crate::shared::auth`] names).

use crd_types::cluster::Phase;
use crd_types::conditions::reasons::Waiting;

use super::{FailoverReason, Step};
#[cfg(test)]
use crate::shared::guard::guard_step;
use crate::shared::guard::{PlannedStep, StepState};

impl PlannedStep for Step {
    fn waiting(reason: Waiting, message: String) -> Self {
        Step::wait(reason, message)
    }

    fn serves(&self) -> Option<Phase> {
        if self.is_scaling() {
            return Some(Phase::Scaling);
        }
        let updates = matches!(
            self,
            Step::AllowRoll { .. }
                | Step::Failover { .. }
                | Step::SetConfig(_)
                | Step::CreateReplicationUser { .. }
        );
        updates.then_some(Phase::Updating)
    }

    fn state(&self) -> StepState<'_> {
        match self {
            Step::Idle => StepState::Idle,
            Step::Wait { reason, message } => StepState::Waiting(*reason, message),
            _ => StepState::Running,
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
