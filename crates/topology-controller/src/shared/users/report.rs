//! The report of a pass over a topology's users: the `UsersReady` condition and the notes of
//! its Events.

use std::collections::BTreeMap;

use crd_types::conditions::reasons::UsersReady;
use crd_types::conditions::{self, ConditionSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use super::{Applied, Prepared, Problem};

/// `UsersReady`: problems first (they need a person), then what is still under way.
pub fn condition(prepared: &Prepared, applied: &Applied, members: usize) -> ConditionSpec {
    let problems = &prepared.problems;
    if !problems.is_empty() {
        let refused = problems
            .iter()
            .any(|p| matches!(p, Problem::RulesRefused { .. }));
        let reason = match refused {
            true => UsersReady::RulesRefused,
            false => UsersReady::PasswordMissing,
        };
        let message: Vec<String> = problems.iter().map(ToString::to_string).collect();
        return ConditionSpec::new(reason, false, message.join("; "));
    }
    let mut waiting: Vec<String> = prepared
        .unchecked
        .iter()
        .map(|u| format!("user {u}: its change waits for a data node of each version to check it"))
        .collect();
    waiting.extend(
        applied
            .pending
            .iter()
            .map(|(member, why)| format!("{member}: {why}")),
    );
    let rotating: Vec<String> = prepared
        .file
        .entries
        .iter()
        .filter_map(|e| {
            let since = e.rotating_since?;
            Some(format!(
                "user {}'s previous password works too (since {since}) until its overlap has passed and every data node has the new one",
                e.name
            ))
        })
        .collect();
    if !waiting.is_empty() {
        waiting.extend(rotating);
        return ConditionSpec::new(UsersReady::UsersApplying, false, waiting.join("; "));
    }
    let names: Vec<&str> = prepared
        .file
        .entries
        .iter()
        .map(|e| e.name.as_str())
        .collect();
    let mut message = match names.as_slice() {
        [] => format!("no users on all {members} data nodes"),
        _ => format!("{} on all {members} data nodes", names.join(", ")),
    };
    for r in rotating {
        message.push_str("; ");
        message.push_str(&r);
    }
    ConditionSpec::new(UsersReady::UsersApplied, true, message)
}

/// Whether `condition` differs from the one written (reason or message).
pub fn is_news(current: &[Condition], condition: &ConditionSpec) -> bool {
    conditions::find(current, condition.type_())
        .is_none_or(|c| c.reason != condition.reason() || c.message != condition.message())
}

/// "set app on g-0, g-1; deleted old on g-0", or `None` when nothing changed.
pub fn applied_note(applied: &Applied) -> Option<String> {
    let group = |pairs: &[(String, String)], verb: &str| {
        let mut by_user: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (member, user) in pairs {
            by_user.entry(user).or_default().push(member);
        }
        by_user
            .into_iter()
            .map(|(user, members)| format!("{verb} {user} on {}", members.join(", ")))
            .collect::<Vec<_>>()
    };
    let parts = [
        group(&applied.set, "set"),
        group(&applied.deleted, "deleted"),
    ]
    .concat();
    (!parts.is_empty()).then(|| parts.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::auth::PasswordError;
    use crate::shared::users::{Entry, UsersFile};
    use k8s_openapi::jiff::Timestamp;

    fn prepared(
        entries: &[(&str, Option<i64>)],
        problems: Vec<Problem>,
        unchecked: &[&str],
    ) -> Prepared {
        let entries = entries
            .iter()
            .map(|(name, since)| Entry {
                name: name.to_string(),
                hashes: vec!["a".repeat(64)],
                rules: vec![],
                rotating_since: since.map(|s| Timestamp::from_second(s).unwrap()),
            })
            .collect();
        Prepared {
            file: UsersFile {
                entries,
                removed: vec![],
            },
            problems,
            unchecked: unchecked.iter().map(|u| u.to_string()).collect(),
            expected: Default::default(),
            live: Default::default(),
        }
    }

    fn pending(pairs: &[(&str, &str)]) -> Applied {
        Applied {
            pending: pairs
                .iter()
                .map(|(m, w)| (m.to_string(), w.to_string()))
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn problems_come_first_then_what_is_under_way() {
        let missing = Problem::PasswordMissing {
            user: "app".into(),
            why: PasswordError::SecretMissing(crd_types::template::SecretKeyRef {
                name: "app-pw".into(),
                key: "password".into(),
            }),
        };
        let refused = Problem::RulesRefused {
            user: "ro".into(),
            version: "8.0.1 (valkey/valkey:8.0)".into(),
            answer: "ERR Error in ACL SETUSER modifier '+x'".into(),
        };
        let c = condition(
            &prepared(&[], vec![missing.clone(), refused], &[]),
            &pending(&[("g-1", "does not answer")]),
            2,
        );
        assert_eq!((c.reason(), c.status()), ("RulesRefused", false));
        assert!(
            c.message()
                .starts_with("user app: Secret app-pw does not exist"),
            "{}",
            c.message()
        );
        let c = condition(&prepared(&[], vec![missing], &[]), &Applied::default(), 2);
        assert_eq!(c.reason(), "PasswordMissing");

        let c = condition(
            &prepared(&[("app", None)], vec![], &["ro"]),
            &pending(&[("g-1", "does not answer")]),
            2,
        );
        assert_eq!((c.reason(), c.status()), ("UsersApplying", false));
        assert_eq!(
            c.message(),
            "user ro: its change waits for a data node of each version to check it; g-1: does not answer"
        );
    }

    #[test]
    fn applied_names_the_users_and_any_rotation() {
        let c = condition(
            &prepared(&[("app", None), ("ro", Some(1_800_000_000))], vec![], &[]),
            &Applied::default(),
            3,
        );
        assert_eq!((c.reason(), c.status()), ("UsersApplied", true));
        assert!(c.message().starts_with("app, ro on all 3 data nodes; user ro's previous password works too (since 2027-01-15T08:00:00Z)"), "{}", c.message());
        let none = condition(&prepared(&[], vec![], &[]), &Applied::default(), 3);
        assert_eq!(none.message(), "no users on all 3 data nodes");
    }

    #[test]
    fn a_condition_is_news_when_its_reason_or_message_changes() {
        let c = condition(
            &prepared(&[("app", None)], vec![], &[]),
            &Applied::default(),
            1,
        );
        let written =
            conditions::transition(&[], c.clone(), None, Timestamp::from_second(0).unwrap());
        assert!(is_news(&[], &c));
        assert!(!is_news(std::slice::from_ref(&written), &c));
        let other = condition(
            &prepared(&[("ro", None)], vec![], &[]),
            &Applied::default(),
            1,
        );
        assert!(is_news(&[written], &other));
    }

    #[test]
    fn the_applied_note_groups_members_by_user() {
        let applied = Applied {
            set: vec![
                ("g-0".into(), "app".into()),
                ("g-1".into(), "app".into()),
                ("g-1".into(), "ro".into()),
            ],
            deleted: vec![("g-0".into(), "old".into())],
            pending: vec![],
        };
        assert_eq!(
            applied_note(&applied).as_deref(),
            Some("set app on g-0, g-1; set ro on g-1; deleted old on g-0")
        );
        assert_eq!(applied_note(&Applied::default()), None);
    }
}
