//! Planner: the next step for a ValkeyReplication, from what its data nodes and sentinels say
//! right now and never from memory. One step per reconcile, in order: form (a new group
//! waits for every member), attach replicas to the primary (and demote a data node that
//! serves as primary when the sentinels name another), have every sentinel monitor the
//! primary with the spec's options. Sentinel elects primaries; the planner never promotes
//! one (only the first, at creation, is chosen here: data node 0).

use std::fmt;

use crd_types::conditions::reasons::Waiting;

use crate::plan::guard::{self, GuardedStep};
use crate::replication::PORT;
use crate::replication::model::{DataNode, Group, Members};
use crate::replication::survey::{forming, primary};

/// The one thing to do next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing can be done until something changes: why, for machines and for people.
    Wait { reason: Waiting, message: String },
    /// `REPLICAOF ip 6379` on `member`, following `primary`. With `demote`, `member` serves
    /// as a primary the sentinels do not name: its clients are disconnected afterwards, so
    /// they reconnect to the primary.
    ReplicaOf {
        member: String,
        primary: String,
        ip: String,
        demote: bool,
    },
    /// `SENTINEL MONITOR` the primary on `sentinel`, then its options and the login.
    Monitor {
        sentinel: String,
        primary: String,
        ip: String,
    },
    /// `SENTINEL SET` on `sentinel` of the options that differ from the spec.
    Configure {
        sentinel: String,
        options: Vec<(String, String)>,
    },
    /// Everything is as the spec asks.
    Idle,
}

impl Step {
    pub fn wait(reason: Waiting, message: impl Into<String>) -> Step {
        Step::Wait {
            reason,
            message: message.into(),
        }
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Wait { message, .. } => write!(f, "waiting: {message}"),
            Step::ReplicaOf {
                member,
                primary,
                demote,
                ..
            } => {
                if *demote {
                    write!(
                        f,
                        "{member} stops serving as primary and replicates {primary}"
                    )
                } else {
                    write!(f, "{member} replicates {primary}")
                }
            }
            Step::Monitor {
                sentinel, primary, ..
            } => write!(f, "{sentinel} monitors {primary}"),
            Step::Configure { sentinel, options } => {
                let set: Vec<String> = options.iter().map(|(k, v)| format!("{k} {v}")).collect();
                write!(f, "{sentinel} sets {}", set.join(", "))
            }
            Step::Idle => f.write_str("the group is as specified"),
        }
    }
}

impl GuardedStep for Step {
    fn waiting(reason: Waiting, message: String) -> Self {
        Step::Wait { reason, message }
    }

    fn wait_message(&self) -> Option<&str> {
        match self {
            Step::Wait { message, .. } => Some(message),
            _ => None,
        }
    }

    fn needs_default_password(&self) -> bool {
        matches!(self, Step::Idle)
    }
}

/// What the next step depends on besides the members' answers.
#[derive(Clone, Debug, Default)]
pub struct Circumstances<'a> {
    /// `status.currentPrimary` as last written.
    pub recorded_primary: Option<&'a str>,
    /// A ValkeyNode with a member's name that this group does not own.
    pub foreign_member: Option<&'a str>,
    pub operator_password_problem: Option<&'a str>,
    pub default_password_problem: Option<&'a str>,
    /// Members that refuse the operator user's login.
    pub login_refused: &'a [&'a str],
}

/// The step to take: the planner's, unless a foreign ValkeyNode holds a member's name,
/// then held back by what is known of the passwords.
pub fn decide(group: &Group, members: &Members, c: &Circumstances) -> Step {
    let step = match c.foreign_member {
        Some(name) => Step::wait(
            Waiting::ForeignMember,
            format!(
                "ValkeyNode {name} exists but does not belong to {}; rename or delete it",
                group.name
            ),
        ),
        None => next_step(group, members, c.recorded_primary),
    };
    guard::guard_step(
        step,
        c.operator_password_problem,
        c.default_password_problem,
        c.login_refused,
    )
}

/// The next step; `recorded_primary` is `status.currentPrimary`.
pub fn next_step(group: &Group, members: &Members, recorded_primary: Option<&str>) -> Step {
    let answering = members.data.iter().filter(|d| d.answer.is_some()).count()
        + members
            .sentinels
            .iter()
            .filter(|s| s.answer.is_some())
            .count();
    if answering == 0 {
        return Step::wait(Waiting::NoMemberAnswers, "no member answers yet");
    }
    let forming = forming(members);
    if forming {
        let wanted = group.positions().len();
        let ready = members
            .data
            .iter()
            .map(|d| (&d.facts, d.answer.is_some()))
            .chain(
                members
                    .sentinels
                    .iter()
                    .map(|s| (&s.facts, s.answer.is_some())),
            )
            .filter(|(f, answers)| group.wants(f.at) && *answers)
            .count();
        if ready < wanted {
            return Step::wait(
                Waiting::Forming,
                format!("forming: {ready} of {wanted} members answer"),
            );
        }
    }
    let p = match primary(group, members, recorded_primary) {
        Ok(p) => p,
        Err(why) => return Step::wait(Waiting::NoPrimary, why),
    };
    let Some(ip) = p.address().filter(|_| p.is_primary()) else {
        return Step::wait(
            Waiting::NoPrimary,
            format!(
                "{} is the primary but does not serve as one (yet)",
                p.name()
            ),
        );
    };
    attach(group, members, p, ip)
        .or_else(|| monitor(group, members, p, ip))
        .unwrap_or(Step::Idle)
}

/// `REPLICAOF` for the first wanted data node that serves as a primary besides `p` or
/// follows another address. A primary that has served (its replication offset moved) is
/// demoted; a new one (offset 0) has nothing and nobody to disconnect.
fn attach(group: &Group, members: &Members, p: &DataNode, ip: &str) -> Option<Step> {
    members
        .data
        .iter()
        .filter(|d| group.wants(d.facts.at) && d.name() != p.name() && d.answer.is_some())
        .find(|d| d.is_primary() || d.follows() != Some((ip, PORT)))
        .map(|d| Step::ReplicaOf {
            member: d.name().to_string(),
            primary: p.name().to_string(),
            ip: ip.to_string(),
            demote: d.is_primary() && d.offset() > 0,
        })
}

/// `SENTINEL MONITOR` on the first wanted sentinel that does not monitor the group, then
/// `SENTINEL SET` where its options differ from the spec.
fn monitor(group: &Group, members: &Members, p: &DataNode, ip: &str) -> Option<Step> {
    let wanted = members
        .sentinels
        .iter()
        .filter(|s| group.wants(s.facts.at) && s.answer.is_some());
    for s in wanted {
        match s.monitored() {
            None => {
                return Some(Step::Monitor {
                    sentinel: s.name().to_string(),
                    primary: p.name().to_string(),
                    ip: ip.to_string(),
                });
            }
            Some(m) => {
                let options = group.options.differing(&m.options);
                if !options.is_empty() {
                    return Some(Step::Configure {
                        sentinel: s.name().to_string(),
                        options,
                    });
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication::sim::*;

    #[test]
    fn a_new_group_waits_for_every_member_then_attaches_then_monitors() {
        let g = group(3, 3);
        let mut m = fresh(3, 3);
        m.sentinels[2].answer = None;
        let (reason, why) = wait_of(next_step(&g, &m, None));
        assert_eq!(reason, Waiting::Forming);
        assert!(why.contains("5 of 6"), "{why}");

        let m = fresh(3, 3);
        assert_eq!(
            next_step(&g, &m, None),
            Step::ReplicaOf {
                member: "g-1".into(),
                primary: "g-0".into(),
                ip: ip(0),
                demote: false,
            },
            "data node 0 is the first primary; the others are empty primaries"
        );

        let m = formed_unmonitored(3, 3);
        assert_eq!(
            next_step(&g, &m, None),
            Step::Monitor {
                sentinel: "g-sentinel-0".into(),
                primary: "g-0".into(),
                ip: ip(0),
            }
        );
        assert_eq!(next_step(&g, &formed(3, 3), None), Step::Idle);
    }

    #[test]
    fn the_sentinels_majority_names_the_primary() {
        let g = group(3, 3);
        // A failover made g-2 primary; g-0 came back serving as primary on its own.
        let mut m = formed(3, 3);
        promote(&mut m, 2);
        m.data[0] = data_primary(0, 0);
        assert_eq!(
            next_step(&g, &m, Some("g-0")),
            Step::ReplicaOf {
                member: "g-0".into(),
                primary: "g-2".into(),
                ip: ip(2),
                demote: true,
            }
        );
        // Two sentinels of three still name g-0: the majority wins, and it does not serve.
        let mut m = formed(3, 3);
        promote(&mut m, 2);
        for s in &mut m.sentinels[..2] {
            s.answer
                .as_mut()
                .unwrap()
                .monitored
                .as_mut()
                .unwrap()
                .primary = (ip(0), PORT);
        }
        let (reason, why) = wait_of(next_step(&g, &m, None));
        assert_eq!(reason, Waiting::NoPrimary);
        assert!(
            why.contains("g-0 is the primary but does not serve"),
            "{why}"
        );
    }

    #[test]
    fn split_sentinels_name_nobody() {
        let g = group(3, 2);
        let mut m = formed(3, 2);
        m.sentinels[1]
            .answer
            .as_mut()
            .unwrap()
            .monitored
            .as_mut()
            .unwrap()
            .primary = (ip(1), PORT);
        let (reason, why) = wait_of(next_step(&g, &m, None));
        assert_eq!(reason, Waiting::NoPrimary);
        assert!(why.contains("disagree"), "{why}");
    }

    #[test]
    fn sentinels_get_the_specs_options() {
        let mut g = group(2, 3);
        g.options.quorum = 3;
        let m = formed(2, 3);
        assert_eq!(
            next_step(&g, &m, None),
            Step::Configure {
                sentinel: "g-sentinel-0".into(),
                options: vec![("quorum".into(), "3".into())],
            }
        );
    }

    #[test]
    fn a_foreign_member_and_password_problems_come_first() {
        let g = group(1, 1);
        let m = formed(1, 1);
        let c = Circumstances {
            foreign_member: Some("g-0"),
            ..Default::default()
        };
        assert_eq!(wait_of(decide(&g, &m, &c)).0, Waiting::ForeignMember);
        let c = Circumstances {
            default_password_problem: Some("Secret g-auth does not exist"),
            ..Default::default()
        };
        assert_eq!(
            wait_of(decide(&g, &m, &c)).0,
            Waiting::DefaultPasswordUnreadable
        );
        assert_eq!(decide(&g, &m, &Circumstances::default()), Step::Idle);
    }
}
