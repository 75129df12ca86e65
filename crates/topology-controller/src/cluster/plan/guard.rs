//! Planner (layer 4): the planner's step held back by what is known of the passwords (read
//! by the binary from the Secrets [`crate::shared::auth`] names).

use super::{FailoverReason, Step};
use crate::shared::guard::PlannedStep;
#[cfg(test)]
use crate::shared::guard::guard_step;

impl PlannedStep for Step {
    /// Membership or slot ownership changes.
    fn is_scaling(&self) -> bool {
        matches!(
            self,
            Step::Meet(_)
                | Step::Forget { .. }
                | Step::AddSlots(_)
                | Step::FixOpenSlot { .. }
                | Step::Stabilize { .. }
                | Step::ClearStaleMarker { .. }
                | Step::Replicate(_)
                | Step::Migrate(_)
                | Step::MigrateAtomically(_)
                | Step::Remove(_)
        )
    }

    fn is_update(&self) -> bool {
        matches!(
            self,
            Step::AllowRoll { .. }
                | Step::Failover { .. }
                | Step::SetConfig(_)
                | Step::CreateReplicationUser { .. }
        )
    }

    fn keeps_ready(&self) -> bool {
        matches!(self, Step::Idle | Step::SetConfig(_))
    }

    fn lets_member_restart(&self) -> bool {
        matches!(
            self,
            Step::AllowRoll { .. }
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
    use crate::shared::auth::PasswordError;
    use crate::shared::tls::SecretError;
    use crd_types::conditions::reasons::Waiting;
    use crd_types::template::SecretKeyRef;

    fn key(name: &str, key: &str) -> SecretKeyRef {
        SecretKeyRef {
            name: name.into(),
            key: key.into(),
        }
    }

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
        // Words: "Secret a key p is empty", "Secret o does not exist", "Secret a does not
        // exist", "TLS Secret c-tls has no ca.crt".
        let empty = PasswordError::Empty(key("a", "p"));
        let no_operator = PasswordError::SecretMissing(key("o", "password"));
        let no_default = PasswordError::SecretMissing(key("a", "password"));
        let no_ca = SecretError::NoKey {
            secret: "c-tls".into(),
            key: "ca.crt",
        };
        assert_eq!(guard_step(roll(), None, None, &[], &[]), roll());
        assert_eq!(guard_step(Step::Idle, None, None, &[], &[]), Step::Idle);
        let (reason, why) = wait(&guard_step(Step::Idle, None, None, &[&empty], &[]));
        assert_eq!(reason, Waiting::DefaultPasswordUnreadable);
        assert!(why.starts_with("Secret a key p is empty"));
        let (reason, why) = wait(&guard_step(roll(), Some(&no_operator), None, &[], &[]));
        assert_eq!(reason, Waiting::NoOperatorPassword);
        assert!(why.starts_with("cannot log in to the members: Secret o does not exist"));
        let (reason, why) = wait(&guard_step(roll(), None, Some(&no_ca), &[&no_default], &[]));
        assert_eq!(reason, Waiting::TlsSecretUnusable);
        assert_eq!(
            why,
            "cannot connect to the members: TLS Secret c-tls has no ca.crt (spec.tls)"
        );
        let (reason, why) = wait(&guard_step(roll(), None, None, &[&no_default], &[]));
        assert_eq!(reason, Waiting::DefaultPasswordUnreadable);
        assert!(why.contains("Secret a does not exist") && why.contains("no member may restart"));
        // A replication's sentinels need their own password too: both are told.
        let no_sentinel = PasswordError::SecretMissing(key("s", "password"));
        let (_, why) = wait(&guard_step(
            roll(),
            None,
            None,
            &[&no_default, &no_sentinel],
            &[],
        ));
        assert_eq!(
            why,
            "Secret a does not exist; Secret s does not exist (spec.auth.passwordSecretRef), so \
             no member may restart"
        );
        let hand_over = Step::Failover {
            member: "c-0-1".into(),
            reason: FailoverReason::Roll,
        };
        assert!(matches!(
            guard_step(hand_over, None, None, &[&no_default], &[]),
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
            guard_step(switchover.clone(), None, None, &[&no_default], &[]),
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
            &[&no_default],
            &["c-0-1"],
        ));
        assert_eq!(reason, Waiting::DefaultPasswordUnreadable);
        assert!(why.contains("Secret a does not exist"));
        assert!(why.contains("c-0-1 refuse the operator's password"));
        assert!(why.ends_with("ValkeyNode c-0-0 exists but does not belong"));
        // Refused logins alone: the wait says so first, with its own reason.
        let (reason, why) = wait(&guard_step(foreign, None, None, &[], &["c-0-1"]));
        assert_eq!(reason, Waiting::LoginRefused);
        assert!(why.starts_with("c-0-1 refuse") && why.ends_with("does not belong"));
        assert_eq!(guard_step(roll(), None, None, &[], &["c-0-1"]), roll());
    }
}
