//! Planner: the next step for a ValkeyReplication, from what its data nodes and sentinels say
//! right now and never from memory. One step per reconcile, in order: form (a new group
//! waits for every member), the `replication` user where a data node lacks it, attach replicas to the primary (and demote a data node that
//! serves as primary when the sentinels name another), have every sentinel monitor the
//! primary with the spec's options, keep every replica's priority (a switchover's target
//! is preferred), the switchover, the roll. Sentinel elects primaries; the planner never
//! promotes one on its own (only the first, at creation: data node 0); a switchover and the
//! hand-over before a primary restarts ask Sentinel to, with writes paused (see
//! [`crate::replication::execute`]).

use std::fmt;

use crd_types::conditions::reasons::Waiting;

use crate::replication::PORT;
use crate::replication::model::{DataNode, Group, Members, Peer, Rolling, SWITCHOVER_PRIORITY};
use crate::replication::survey::{forming, primary};
use crate::shared::acl::{self, ReplicationPassword};
use crate::shared::guard::{self, GuardedStep};
use crate::shared::roll::{self, FailoverReason, RollStep};
use crate::shared::{live, target};

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
    /// `SENTINEL REMOVE` then `MONITOR` (and its options and login) on `sentinel`, which
    /// names another primary than the majority while no failover runs: a sentinel reset in
    /// the middle of a failover keeps the old address with the failover's config epoch, and
    /// its peers' hellos, carrying the same epoch, never correct it.
    Remonitor {
        sentinel: String,
        primary: String,
        ip: String,
    },
    /// `SENTINEL SET` on `sentinel` of the options that differ from the spec.
    Configure {
        sentinel: String,
        options: Vec<(String, String)>,
    },
    /// Delete these ValkeyNodes: the spec no longer wants them and none is the primary.
    Remove(Vec<String>),
    /// `SENTINEL RESET` on `sentinel`: it forgets the replicas and sentinels it lists and
    /// finds the current ones again, dropping those that are gone.
    Reset { sentinel: String },
    /// `CONFIG SET name value` of each pair on each data node (live directives).
    SetConfig(Vec<(String, Vec<(String, String)>)>),
    /// `ACL SETUSER replication` on each of the data nodes `members`, whose running config
    /// predates the user (or lost it): before a rolled replica logs in to one as that user.
    CreateReplicationUser {
        /// Each member, with whether it gets the atomic slot migration rules (a cluster
        /// member on 9.0+).
        members: Vec<(String, bool)>,
        password: ReplicationPassword,
    },
    /// `CONFIG SET replica-priority` on the replica `member`.
    SetPriority { member: String, priority: u32 },
    /// Hand `primary` over with nothing lost: pause its writes until every replica holds
    /// its last offset, `SENTINEL FAILOVER` through `sentinel`, then make it a replica of the
    /// promoted one and disconnect its clients. With a `target`, Sentinel is expected to
    /// promote it (it prefers it by priority).
    HandOver {
        primary: String,
        target: Option<String>,
        sentinel: String,
        reason: FailoverReason,
    },
    /// Open the roll gate of `member` for `revision`.
    AllowRoll { member: String, revision: String },
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
            Step::Remonitor {
                sentinel, primary, ..
            } => write!(
                f,
                "{sentinel} forgets its stale primary and monitors {primary}"
            ),
            Step::Configure { sentinel, options } => {
                let set: Vec<String> = options.iter().map(|(k, v)| format!("{k} {v}")).collect();
                write!(f, "{sentinel} sets {}", set.join(", "))
            }
            Step::Remove(names) => write!(f, "removing {}", names.join(", ")),
            Step::Reset { sentinel } => {
                write!(
                    f,
                    "{sentinel} forgets the members that are gone (SENTINEL RESET)"
                )
            }
            Step::SetPriority { member, priority } => {
                write!(f, "{member} gets replica-priority {priority}")
            }
            Step::SetConfig(changes) => f.write_str(&live::describe(changes)),
            Step::CreateReplicationUser { members, .. } => {
                let names: Vec<&str> = members.iter().map(|(m, _)| m.as_str()).collect();
                write!(f, "{} get the replication user", names.join(", "))
            }
            Step::HandOver {
                primary,
                target,
                reason,
                ..
            } => {
                let to = target.as_deref().unwrap_or("a replica Sentinel picks");
                let why = match reason {
                    FailoverReason::Roll => "before it restarts",
                    FailoverReason::Removal => "before it is removed",
                    FailoverReason::Switchover => "as requested by spec.switchover",
                    // Sentinel replaces a failed primary by itself; the group planner never
                    // asks for this.
                    FailoverReason::PrimaryGone => "because its server is not running",
                };
                write!(f, "{primary} hands over to {to} {why}")
            }
            Step::AllowRoll { member, revision } => write!(f, "{member} restarts into {revision}"),
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
        matches!(
            self,
            Step::Idle
                | Step::AllowRoll { .. }
                | Step::HandOver {
                    reason: FailoverReason::Roll,
                    ..
                }
        )
    }
}

/// What the next step depends on besides the members' answers.
#[derive(Clone, Debug, Default)]
pub struct Circumstances<'a> {
    /// `status.currentPrimary` as last written.
    pub recorded_primary: Option<&'a str>,
    /// The switchover request id status already reports as done.
    pub recorded_switchover: Option<&'a str>,
    /// A ValkeyNode with a member's name that this group does not own.
    pub foreign_member: Option<&'a str>,
    pub operator_password_problem: Option<&'a str>,
    /// Why the TLS Secret cannot be used, if it cannot.
    pub tls_problem: Option<&'a str>,
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
        None => next_step(group, members, c.recorded_primary, c.recorded_switchover),
    };
    guard::guard_step(
        step,
        c.operator_password_problem,
        c.tls_problem,
        c.default_password_problem,
        c.login_refused,
    )
}

/// The next step; `recorded_primary` is `status.currentPrimary`, `recorded_switchover` the
/// switchover request id status reports as done.
pub fn next_step(
    group: &Group,
    members: &Members,
    recorded_primary: Option<&str>,
    recorded_switchover: Option<&str>,
) -> Step {
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
    let switchover = group
        .switchover
        .as_ref()
        .filter(|r| recorded_switchover != Some(r.id.as_str()))
        .map(|r| r.target.as_str());
    // A failover first: Sentinel promotes a replica before the sentinels name it, and
    // re-pointing that one (or a replica it already follows) would stall the failover.
    replication_user(group, members)
        .or_else(|| failover_running(members))
        .or_else(|| attach(group, members, p, ip))
        .or_else(|| monitor(group, members, p, ip))
        .or_else(|| remonitor(group, members, p, ip))
        .or_else(|| remove(group, members, p))
        .or_else(|| reset(group, members, ip))
        .or_else(|| remove_primary(group, members, p, ip))
        .or_else(|| set_live_config(group, members))
        .or_else(|| priorities(group, members, p, switchover))
        .or_else(|| switch_over(group, members, p, ip, switchover))
        .or_else(|| refused_target(group, members))
        .or_else(|| rolling(group, members, p, ip))
        .unwrap_or(Step::Idle)
}

/// `Step::CreateReplicationUser` for the data nodes that answered without a usable
/// `replication` user (a replica re-pointed, promoted or rolled logs in to them as it).
/// First: creating a user disturbs no failover Sentinel runs.
fn replication_user(group: &Group, members: &Members) -> Option<Step> {
    let password = group.replication_password.as_ref()?;
    let lacking = acl::lacking_replication_user(
        password,
        members.data.iter().map(|d| {
            let read = d.answer.as_ref().and_then(|a| a.replication_user.as_ref());
            // Not a cluster: no atomic slot migration.
            (d.name(), read.map(Option::as_ref), false)
        }),
    );
    (!lacking.is_empty()).then(|| Step::CreateReplicationUser {
        members: lacking,
        password: password.clone(),
    })
}

/// `Step::SetConfig` for every wanted data node that runs a live directive at another value.
fn set_live_config(group: &Group, members: &Members) -> Option<Step> {
    let changes = live::live_changes(
        &group.config,
        members
            .data
            .iter()
            .filter(|d| group.wants(d.facts.at))
            .map(|d| {
                let running = d.answer.as_ref().and_then(|a| a.live_config.as_ref());
                (d.name(), running)
            }),
    );
    (!changes.is_empty()).then_some(Step::SetConfig(changes))
}

/// A wait while the data nodes' image may reach none of them ([`target`]).
fn refused_target(group: &Group, members: &Members) -> Option<Step> {
    let running: Vec<(&str, _)> = members
        .data
        .iter()
        .filter_map(|d| Some((d.name(), d.answer.as_ref()?.live_config.as_ref()?.version)))
        .collect();
    let (reason, message) = target::refuse(&group.image, &group.config, &running)?;
    Some(Step::wait(reason, message))
}

/// While a sentinel runs a failover (it reconfigures the replicas one by one, until each
/// follows the promoted one or counts down), nothing else changes: a reset or another
/// hand-over in the middle would leave it behind.
fn failover_running(members: &Members) -> Option<Step> {
    // Every sentinel, wanted or leaving: one the spec removes still votes and may lead.
    let busy = members
        .sentinels
        .iter()
        .find(|s| s.monitored().is_some_and(|m| m.failing_over()))?;
    Some(Step::wait(
        Waiting::SentinelsCatchingUp,
        format!("{} runs a failover", busy.name()),
    ))
}

/// A wanted sentinel that names another address than the primary `p` (at `ip`), which the
/// majority names and which serves: it monitors `p` afresh.
fn remonitor(group: &Group, members: &Members, p: &DataNode, ip: &str) -> Option<Step> {
    let stale = members
        .sentinels
        .iter()
        .filter(|s| group.wants(s.facts.at))
        .find(|s| {
            s.monitored()
                .is_some_and(|m| m.primary != (ip.to_string(), PORT))
        })?;
    Some(Step::Remonitor {
        sentinel: stale.name().to_string(),
        primary: p.name().to_string(),
        ip: ip.to_string(),
    })
}

/// Members the spec no longer wants, every one at once but the primary (which hands over
/// first, see [`remove_primary`]).
fn remove(group: &Group, members: &Members, p: &DataNode) -> Option<Step> {
    let leaving: Vec<String> = members
        .data
        .iter()
        .map(|d| (&d.facts, d.name() == p.name()))
        .chain(members.sentinels.iter().map(|s| (&s.facts, false)))
        .filter(|(f, primary)| !group.wants(f.at) && !primary)
        .map(|(f, _)| f.name.clone())
        .collect();
    (!leaving.is_empty()).then_some(Step::Remove(leaving))
}

/// A primary the spec no longer wants hands over, once the removed replicas are forgotten
/// (so Sentinel can only pick a wanted one) and every wanted replica is in sync.
fn remove_primary(group: &Group, members: &Members, p: &DataNode, ip: &str) -> Option<Step> {
    if group.wants(p.facts.at) {
        return None;
    }
    let lagging = members
        .data
        .iter()
        .filter(|d| group.wants(d.facts.at))
        .find(|d| !(d.facts.ready && d.in_sync_with(p)));
    if let Some(r) = lagging {
        return Some(Step::wait(
            Waiting::NoReplicaInSync,
            format!(
                "{} leaves the group and hands over once every replica is in sync; {} is not",
                p.name(),
                r.name()
            ),
        ));
    }
    Some(match sentinel_for(group, members, ip) {
        Some(sentinel) => Step::HandOver {
            primary: p.name().to_string(),
            target: None,
            sentinel: sentinel.to_string(),
            reason: FailoverReason::Removal,
        },
        None => Step::wait(
            Waiting::SentinelsCatchingUp,
            format!(
                "no sentinel names {} and sees a replica it could elect",
                p.name()
            ),
        ),
    })
}

/// `SENTINEL RESET` on the first wanted sentinel that lists a replica or sentinel no member
/// announces any more (a removed one), or itself, while every other wanted sentinel knows the whole
/// group: one at a time, so the others can still agree on a failover meanwhile.
fn reset(group: &Group, members: &Members, ip: &str) -> Option<Step> {
    let wanted = || members.sentinels.iter().filter(|s| group.wants(s.facts.at));
    let stale = wanted().find(|s| {
        s.monitored().is_some_and(|m| {
            // Itself as a peer: a hello of its previous run (another run id, same address),
            // replayed to it from a replica's backlog after it restarted; it ignores only
            // hellos with its own run id, and the ghost answers its pings, so it stays.
            let itself = |peer: &&Peer| s.facts.address.as_deref() == Some(peer.ip.as_str());
            m.primary.0 == ip
                && (m
                    .replicas
                    .iter()
                    .chain(&m.sentinels)
                    .any(|peer| !members.has_address(&peer.ip))
                    || m.sentinels.iter().any(|peer| itself(&peer)))
        })
    })?;
    let incomplete = wanted()
        .filter(|o| o.name() != stale.name())
        .find(|o| !knows_the_group(group, members, o));
    Some(match incomplete {
        Some(o) => Step::wait(
            Waiting::SentinelsCatchingUp,
            format!(
                "{} lists members that are gone (or itself); it is reset once {} knows the whole group",
                stale.name(),
                o.name()
            ),
        ),
        None => Step::Reset {
            sentinel: stale.name().to_string(),
        },
    })
}

/// Whether sentinel `s` answers and lists every wanted data node but the one it names
/// primary, and every other wanted sentinel.
fn knows_the_group(
    group: &Group,
    members: &Members,
    s: &crate::replication::model::Sentinel,
) -> bool {
    let Some(m) = s.monitored() else {
        return false;
    };
    let replicas = members
        .data
        .iter()
        .filter(|d| group.wants(d.facts.at))
        .filter_map(|d| d.address())
        .filter(|ip| *ip != m.primary.0);
    let sentinels = members
        .sentinels
        .iter()
        .filter(|o| group.wants(o.facts.at) && o.name() != s.name())
        .filter_map(|o| o.facts.address.as_deref());
    replicas
        .into_iter()
        .all(|ip| m.replicas.iter().any(|r| r.ip == ip))
        && sentinels
            .into_iter()
            .all(|ip| m.sentinels.iter().any(|o| o.ip == ip))
}

/// `CONFIG SET replica-priority` on the first wanted replica in sync with `p` whose priority
/// is not the group's, or not the switchover priority for a pending switchover's target. A
/// replica not in sync is left alone: a restarted one holds `0` until its first sync, so
/// Sentinel cannot elect it with unknown contents (see node-controller's start script).
fn priorities(
    group: &Group,
    members: &Members,
    p: &DataNode,
    switchover: Option<&str>,
) -> Option<Step> {
    members
        .data
        .iter()
        .filter(|d| group.wants(d.facts.at) && d.name() != p.name() && d.in_sync_with(p))
        .find_map(|d| {
            let have = d.answer.as_ref()?.priority?;
            let want = if switchover == Some(d.name()) {
                SWITCHOVER_PRIORITY
            } else {
                group.replica_priority
            };
            (have != want).then(|| Step::SetPriority {
                member: d.name().to_string(),
                priority: want,
            })
        })
}

/// The first wanted sentinel that answers, names `p` (at `ip`) and sees a replica it could
/// elect (priority above 0: a restarted replica holds 0 until its first sync, and Sentinel
/// reads it back only every 10 s), to run a hand-over.
fn sentinel_for<'a>(group: &Group, members: &'a Members, ip: &str) -> Option<&'a str> {
    members
        .sentinels
        .iter()
        .filter(|s| group.wants(s.facts.at))
        .find(|s| {
            s.monitored().is_some_and(|m| {
                m.primary == (ip.to_string(), PORT)
                    && m.replicas.iter().any(|r| r.priority.is_some_and(|p| p > 0))
            })
        })
        .map(|s| s.name())
}

/// A pending switchover to `target`: once it is an in-sync replica and every sentinel that
/// names the primary prefers it (its priority is the switchover priority, and no other
/// replica's is as low), the hand-over.
fn switch_over(
    group: &Group,
    members: &Members,
    p: &DataNode,
    ip: &str,
    switchover: Option<&str>,
) -> Option<Step> {
    let target = members.data_node(switchover?)?;
    if target.name() == p.name() {
        return None;
    }
    if !(target.facts.ready && target.in_sync_with(p)) {
        return Some(Step::wait(
            Waiting::NoReplicaInSync,
            format!(
                "{} must be an in-sync replica of {} to take over",
                target.name(),
                p.name()
            ),
        ));
    }
    let target_ip = target.address()?;
    let unprepared = members
        .sentinels
        .iter()
        .filter(|s| group.wants(s.facts.at))
        .filter_map(|s| Some((s.name(), s.monitored()?)))
        .find(|(_, m)| {
            m.replicas.iter().any(|r| {
                let preferred = r
                    .priority
                    .is_some_and(|p| p > 0 && p <= SWITCHOVER_PRIORITY);
                preferred != (r.ip == target_ip)
            }) || !m.replicas.iter().any(|r| r.ip == target_ip)
        });
    if let Some((sentinel, _)) = unprepared {
        return Some(Step::wait(
            Waiting::SentinelsCatchingUp,
            format!(
                "{sentinel} does not prefer {} yet (sentinels read replica-priority every 10 s)",
                target.name()
            ),
        ));
    }
    let Some(sentinel) = sentinel_for(group, members, ip) else {
        return Some(Step::wait(
            Waiting::SentinelsCatchingUp,
            format!(
                "no sentinel names {} and sees a replica it could elect",
                p.name()
            ),
        ));
    };
    Some(Step::HandOver {
        primary: p.name().to_string(),
        target: Some(target.name().to_string()),
        sentinel: sentinel.to_string(),
        reason: FailoverReason::Switchover,
    })
}

/// One member at a time through the roll gate (shared with a cluster's roll): replicas and
/// sentinels first; the primary hands over first, once every replica is in sync.
fn rolling(group: &Group, members: &Members, p: &DataNode, ip: &str) -> Option<Step> {
    let wanted: Vec<Rolling> = members
        .data
        .iter()
        .filter(|d| group.wants(d.facts.at))
        .map(Rolling::Data)
        .chain(
            members
                .sentinels
                .iter()
                .filter(|s| group.wants(s.facts.at))
                .map(Rolling::Sentinel),
        )
        .collect();
    let refs: Vec<&Rolling> = wanted.iter().collect();
    Some(match roll::roll(&refs, group.data_nodes > 1)? {
        RollStep::Wait { reason, message } => Step::Wait { reason, message },
        RollStep::Allow { member, revision } => Step::AllowRoll { member, revision },
        RollStep::HandOver { primary } => {
            let lagging = members
                .data
                .iter()
                .filter(|d| group.wants(d.facts.at) && d.name() != p.name())
                .find(|d| !(d.facts.ready && d.in_sync_with(p)));
            if let Some(r) = lagging {
                return Some(Step::wait(
                    Waiting::NoReplicaInSync,
                    format!(
                        "{primary} hands over before it restarts once every replica is in sync; {} is not",
                        r.name()
                    ),
                ));
            }
            let Some(sentinel) = sentinel_for(group, members, ip) else {
                return Some(Step::wait(
                    Waiting::SentinelsCatchingUp,
                    format!("no sentinel names {primary} and sees a replica it could elect"),
                ));
            };
            Step::HandOver {
                primary,
                target: None,
                sentinel: sentinel.to_string(),
                reason: FailoverReason::Roll,
            }
        }
    })
}

/// `REPLICAOF` for the first wanted data node that serves as a primary besides `p` or
/// follows another address. A primary that has served (its replication offset moved) is
/// demoted; a new one (offset 0) has nothing and nobody to disconnect. Only new ones while a
/// sentinel whose pod is Ready does not answer: it may be the one failing over, to one of
/// these data nodes or to the primary one follows. (A sentinel whose pod is not Ready runs
/// no failover: its process is gone, frozen or not started.)
fn attach(group: &Group, members: &Members, p: &DataNode, ip: &str) -> Option<Step> {
    let mut strays = members
        .data
        .iter()
        .filter(|d| group.wants(d.facts.at) && d.name() != p.name() && d.answer.is_some())
        .filter(|d| d.is_primary() || d.follows() != Some((ip, PORT)));
    let unheard = members
        .sentinels
        .iter()
        .find(|s| s.answer.is_none() && s.facts.ready);
    let d = match unheard {
        None => strays.next()?,
        Some(unheard) => {
            let strays: Vec<&DataNode> = strays.collect();
            let first = strays.first()?;
            match strays.iter().find(|d| d.is_primary() && d.offset() == 0) {
                Some(new) => *new,
                None => {
                    return Some(Step::wait(
                        Waiting::SentinelsCatchingUp,
                        format!(
                            "{} does not follow {}, and {} does not answer although its pod is Ready: it may be failing over",
                            first.name(),
                            p.name(),
                            unheard.name()
                        ),
                    ));
                }
            }
        }
    };
    Some(Step::ReplicaOf {
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
        let (reason, why) = wait_of(next_step(&g, &m, None, None));
        assert_eq!(reason, Waiting::Forming);
        assert!(why.contains("5 of 6"), "{why}");

        let m = fresh(3, 3);
        assert_eq!(
            next_step(&g, &m, None, None),
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
            next_step(&g, &m, None, None),
            Step::Monitor {
                sentinel: "g-sentinel-0".into(),
                primary: "g-0".into(),
                ip: ip(0),
            }
        );
        assert_eq!(next_step(&g, &formed(3, 3), None, None), Step::Idle);
    }

    #[test]
    fn the_sentinels_majority_names_the_primary() {
        let g = group(3, 3);
        // A failover made g-2 primary; g-0 came back serving as primary on its own.
        let mut m = formed(3, 3);
        promote(&mut m, 2);
        m.data[0] = data_primary(0, 0);
        assert_eq!(
            next_step(&g, &m, Some("g-0"), None),
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
        let (reason, why) = wait_of(next_step(&g, &m, None, None));
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
        monitored_mut(&mut m, 1).primary = (ip(1), PORT);
        let (reason, why) = wait_of(next_step(&g, &m, None, None));
        assert_eq!(reason, Waiting::NoPrimary);
        assert!(why.contains("disagree"), "{why}");
    }

    #[test]
    fn sentinels_get_the_specs_options() {
        let mut g = group(2, 3);
        g.options.quorum = 3;
        let m = formed(2, 3);
        assert_eq!(
            next_step(&g, &m, None, None),
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

    fn switchover_to(g: &mut Group, member: u32) {
        g.switchover = Some(crate::shared::member_facts::SwitchoverRequest {
            id: "s1".into(),
            target: format!("g-{member}"),
        });
    }

    /// Sets what data node `i` and every sentinel say of its replica-priority.
    fn priority(m: &mut Members, i: u32, priority: u32) {
        m.data[i as usize].answer.as_mut().unwrap().priority = Some(priority);
        for s in &mut m.sentinels {
            for r in &mut s
                .answer
                .as_mut()
                .unwrap()
                .monitored
                .as_mut()
                .unwrap()
                .replicas
            {
                if r.ip == ip(i) {
                    r.priority = Some(priority);
                }
            }
        }
    }

    #[test]
    fn a_switchover_prefers_its_target_then_hands_over_once() {
        let mut g = group(3, 3);
        switchover_to(&mut g, 2);
        let mut m = formed(3, 3);
        assert_eq!(
            next_step(&g, &m, None, None),
            Step::SetPriority {
                member: "g-2".into(),
                priority: 1
            }
        );
        // Set on the replica, not yet read by the sentinels (every 10 s).
        m.data[2].answer.as_mut().unwrap().priority = Some(1);
        let (reason, why) = wait_of(next_step(&g, &m, None, None));
        assert_eq!(reason, Waiting::SentinelsCatchingUp);
        assert!(why.contains("does not prefer g-2"), "{why}");
        priority(&mut m, 2, 1);
        assert_eq!(
            next_step(&g, &m, None, None),
            Step::HandOver {
                primary: "g-0".into(),
                target: Some("g-2".into()),
                sentinel: "g-sentinel-0".into(),
                reason: FailoverReason::Switchover,
            }
        );
        // Done: g-2 is primary; recorded, the request is not done again and g-0, now a
        // replica, keeps the default priority.
        promote(&mut m, 2);
        priority(&mut m, 0, 100);
        assert_eq!(next_step(&g, &m, None, Some("s1")), Step::Idle);
        // A replica left preferred after an earlier switchover gets its priority back.
        priority(&mut m, 1, 1);
        assert_eq!(
            next_step(&g, &m, None, Some("s1")),
            Step::SetPriority {
                member: "g-1".into(),
                priority: 100
            }
        );
    }

    #[test]
    fn a_replica_gets_its_priority_back_only_once_in_sync() {
        let g = group(3, 3);
        let mut m = formed(3, 3);
        // Restarted: priority 0 from its start script, its first sync not complete.
        priority(&mut m, 1, 0);
        let link = |m: &mut Members, up: bool| {
            let answer = m.data[1].answer.as_mut().unwrap();
            answer.replication.primary.as_mut().unwrap().link_up = up;
        };
        link(&mut m, false);
        assert_eq!(next_step(&g, &m, None, None), Step::Idle);
        link(&mut m, true);
        assert_eq!(
            next_step(&g, &m, None, None),
            Step::SetPriority {
                member: "g-1".into(),
                priority: 100
            }
        );
    }

    #[test]
    fn a_roll_hands_over_only_through_a_sentinel_that_sees_an_electable_replica() {
        let g = group(2, 1);
        let mut m = formed(2, 1);
        let new =
            |f: &mut crate::replication::model::Facts| f.revisions.desired = Some("r2".into());
        let rolled = |f: &mut crate::replication::model::Facts| {
            new(f);
            f.revisions.running = Some("r2".into());
            f.revisions.allowed = Some("r2".into());
        };
        rolled(&mut m.data[0].facts);
        rolled(&mut m.data[1].facts);
        rolled(&mut m.sentinels[0].facts);
        m.data[0].facts.revisions.running = Some("r1".into());
        m.data[0].facts.revisions.allowed = None;
        // The replica rolled and synced; the sentinel still read its start-up priority 0.
        priority(&mut m, 1, 0);
        m.data[1].answer.as_mut().unwrap().priority = Some(100);
        let (reason, why) = wait_of(next_step(&g, &m, None, None));
        assert_eq!(reason, Waiting::SentinelsCatchingUp);
        assert!(why.contains("sees a replica it could elect"), "{why}");
        priority(&mut m, 1, 100);
        assert!(matches!(
            next_step(&g, &m, None, None),
            Step::HandOver {
                reason: FailoverReason::Roll,
                ..
            }
        ));
    }

    #[test]
    fn a_switchover_target_must_be_an_in_sync_replica() {
        let mut g = group(3, 3);
        switchover_to(&mut g, 1);
        let mut m = formed(3, 3);
        priority(&mut m, 1, 1);
        m.data[1]
            .answer
            .as_mut()
            .unwrap()
            .replication
            .primary
            .as_mut()
            .unwrap()
            .link_up = false;
        let (reason, why) = wait_of(next_step(&g, &m, None, None));
        assert_eq!(reason, Waiting::NoReplicaInSync);
        assert!(
            why.contains("g-1 must be an in-sync replica of g-0"),
            "{why}"
        );
    }

    #[test]
    fn replicas_and_sentinels_roll_first_then_the_primary_hands_over() {
        let g = group(2, 1);
        let mut m = formed(2, 1);
        let new =
            |f: &mut crate::replication::model::Facts| f.revisions.desired = Some("r2".into());
        new(&mut m.data[0].facts);
        new(&mut m.data[1].facts);
        new(&mut m.sentinels[0].facts);
        assert_eq!(
            next_step(&g, &m, None, None),
            Step::AllowRoll {
                member: "g-1".into(),
                revision: "r2".into()
            }
        );
        m.data[1].facts.revisions.running = Some("r2".into());
        m.data[1].facts.revisions.allowed = Some("r2".into());
        assert_eq!(
            next_step(&g, &m, None, None),
            Step::AllowRoll {
                member: "g-sentinel-0".into(),
                revision: "r2".into()
            }
        );
        m.sentinels[0].facts.revisions.running = Some("r2".into());
        m.sentinels[0].facts.revisions.allowed = Some("r2".into());
        assert_eq!(
            next_step(&g, &m, None, None),
            Step::HandOver {
                primary: "g-0".into(),
                target: None,
                sentinel: "g-sentinel-0".into(),
                reason: FailoverReason::Roll,
            }
        );
        // With the replica resyncing, the primary waits.
        m.data[1]
            .answer
            .as_mut()
            .unwrap()
            .replication
            .primary
            .as_mut()
            .unwrap()
            .sync_in_progress = true;
        assert_eq!(
            wait_of(next_step(&g, &m, None, None)).0,
            Waiting::MemberRolling
        );
    }

    #[test]
    fn scaling_in_removes_replicas_first_and_hands_a_leaving_primary_over() {
        // 3 -> 1 data nodes while g-2 is primary: g-1 goes at once, g-2 hands over first.
        let g = group(1, 3);
        let mut m = formed(3, 3);
        promote(&mut m, 2);
        assert_eq!(
            next_step(&g, &m, None, None),
            Step::Remove(vec!["g-1".into()])
        );
        m.data.remove(1);
        // The sentinels forget g-1 first, so Sentinel cannot pick it.
        assert_eq!(
            next_step(&g, &m, None, None),
            Step::Reset {
                sentinel: "g-sentinel-0".into()
            }
        );
        for s in &mut m.sentinels {
            let m = s.answer.as_mut().unwrap().monitored.as_mut().unwrap();
            m.replicas.retain(|r| r.ip != ip(1));
        }
        assert_eq!(
            next_step(&g, &m, None, None),
            Step::HandOver {
                primary: "g-2".into(),
                target: None,
                sentinel: "g-sentinel-0".into(),
                reason: FailoverReason::Removal,
            }
        );
        // Handed over: g-0 is primary, g-2 a replica that goes now.
        m.data[0] = data_primary(0, 1);
        m.data[1] = data_replica(2, 0);
        for s in &mut m.sentinels {
            s.answer
                .as_mut()
                .unwrap()
                .monitored
                .as_mut()
                .unwrap()
                .primary
                .0 = ip(0);
        }
        assert_eq!(
            next_step(&g, &m, None, None),
            Step::Remove(vec!["g-2".into()])
        );
    }

    #[test]
    fn sentinels_forget_the_departed_one_at_a_time() {
        // Sentinel 2 is gone; 0 and 1 still list it, and data node 2 left too.
        let g = group(2, 2);
        let mut m = formed(3, 3);
        m.data.pop();
        m.sentinels.pop();
        assert_eq!(
            next_step(&g, &m, None, None),
            Step::Reset {
                sentinel: "g-sentinel-0".into()
            }
        );
        // Reset: g-sentinel-0 has not found g-sentinel-1 again yet, so 1 waits.
        m.sentinels[0] = sentinel(0, Some(0), 2, 2);
        monitored_mut(&mut m, 0).sentinels.clear();
        let (reason, why) = wait_of(next_step(&g, &m, None, None));
        assert_eq!(reason, Waiting::SentinelsCatchingUp);
        assert!(
            why.contains("g-sentinel-1 lists members that are gone"),
            "{why}"
        );
        m.sentinels[0] = sentinel(0, Some(0), 2, 2);
        assert_eq!(
            next_step(&g, &m, None, None),
            Step::Reset {
                sentinel: "g-sentinel-1".into()
            }
        );
        m.sentinels[1] = sentinel(1, Some(0), 2, 2);
        assert_eq!(next_step(&g, &m, None, None), Step::Idle);
    }

    /// After a roll, g-sentinel-1 lists its own address as a peer (a hello of its previous
    /// run replayed to it): it is reset once the others know the group, like one that lists
    /// a member that is gone.
    #[test]
    fn a_sentinel_that_lists_itself_is_reset() {
        let g = group(3, 3);
        let mut m = formed(3, 3);
        monitored_mut(&mut m, 1)
            .sentinels
            .push(crate::replication::model::Peer {
                ip: sentinel_ip(1),
                port: 26379,
                flags: vec!["sentinel".into()],
                priority: None,
            });
        assert_eq!(
            next_step(&g, &m, None, None),
            Step::Reset {
                sentinel: "g-sentinel-1".into()
            }
        );
    }

    /// A data node whose running config predates the `replication` user gets it before any
    /// replica is re-pointed at it, even while Sentinel fails over.
    #[test]
    fn data_nodes_get_the_replication_user_first() {
        use crate::shared::acl::ReplicationPassword;
        let password = ReplicationPassword::from_operator("op");
        let g = Group {
            replication_password: Some(password.clone()),
            ..group(3, 3)
        };
        let mut m = formed(3, 3);
        m.data[2] = data_primary(2, 0);
        monitored_mut(&mut m, 1)
            .flags
            .push("failover_in_progress".into());
        let usable = crate::shared::acl::set_user(None, &password.setuser_rules(false));
        for (d, user) in m
            .data
            .iter_mut()
            .zip([None, Some(None), Some(Some(usable.clone()))])
        {
            d.answer.as_mut().unwrap().replication_user = user;
        }
        match next_step(&g, &m, Some("g-0"), None) {
            Step::CreateReplicationUser { members, .. } => {
                assert_eq!(members, [("g-1".to_string(), false)])
            }
            other => panic!("{other:?}"),
        }
        m.data[1].answer.as_mut().unwrap().replication_user = Some(Some(usable));
        let (reason, _) = wait_of(next_step(&g, &m, Some("g-0"), None));
        assert_eq!(reason, Waiting::SentinelsCatchingUp);
    }

    /// Sentinel's leader sent `REPLICAOF NO ONE` to g-2 and waits for its next INFO to see
    /// the role; every sentinel still names g-0, which serves on (cut off from the others).
    /// Demoting g-2 now would stall the failover until failover-timeout.
    #[test]
    fn a_replica_being_promoted_is_left_alone() {
        let g = group(3, 3);
        let mut m = formed(3, 3);
        m.data[2] = data_primary(2, 0);
        let mut promoting = m.clone();
        monitored_mut(&mut promoting, 1)
            .flags
            .push("failover_in_progress".into());
        let (reason, why) = wait_of(next_step(&g, &promoting, Some("g-0"), None));
        assert_eq!(reason, Waiting::SentinelsCatchingUp);
        assert!(why.contains("g-sentinel-1 runs a failover"), "{why}");
        // The leader does not answer, its pod Ready: g-2 may be its pick.
        let mut unheard = m.clone();
        unheard.sentinels[1].answer = None;
        let (reason, why) = wait_of(next_step(&g, &unheard, Some("g-0"), None));
        assert_eq!(reason, Waiting::SentinelsCatchingUp);
        assert!(
            why.contains("g-2 does not follow g-0, and g-sentinel-1 does not answer"),
            "{why}"
        );
        // Its pod is not Ready: it runs no failover, and g-2 is demoted.
        let mut gone = unheard.clone();
        gone.sentinels[1].facts.ready = false;
        assert!(matches!(
            next_step(&g, &gone, Some("g-0"), None),
            Step::ReplicaOf { demote: true, .. }
        ));
        // A leaving sentinel's failover holds everything too.
        let mut leaving = promoting.clone();
        let g2 = group(3, 1);
        leaving.sentinels.swap(0, 1);
        let (reason, _) = wait_of(next_step(&g2, &leaving, Some("g-0"), None));
        assert_eq!(reason, Waiting::SentinelsCatchingUp);
        // Every sentinel answers and none fails over: g-2 serves on its own and is demoted.
        assert_eq!(
            next_step(&g, &m, Some("g-0"), None),
            Step::ReplicaOf {
                member: "g-2".into(),
                primary: "g-0".into(),
                ip: ip(0),
                demote: true,
            }
        );
        // A new empty primary (a fresh data node) is attached even so.
        unheard.data[2] = data_primary(2, 0);
        unheard.data[2]
            .answer
            .as_mut()
            .unwrap()
            .replication
            .repl_offset = 0;
        assert!(matches!(
            next_step(&g, &unheard, Some("g-0"), None),
            Step::ReplicaOf { demote: false, .. }
        ));
    }

    #[test]
    fn nothing_moves_while_a_sentinel_fails_over_and_a_stale_sentinel_monitors_afresh() {
        let g = group(3, 3);
        let mut m = formed(3, 3);
        monitored_mut(&mut m, 1)
            .flags
            .push("failover_in_progress".into());
        let (reason, why) = wait_of(next_step(&g, &m, None, None));
        assert_eq!(reason, Waiting::SentinelsCatchingUp);
        assert!(why.contains("g-sentinel-1 runs a failover"), "{why}");
        // Reset mid-failover, g-sentinel-2 kept the old address; the majority names g-0.
        let mut m = formed(3, 3);
        monitored_mut(&mut m, 2).primary.0 = ip(1);
        assert_eq!(
            next_step(&g, &m, None, None),
            Step::Remonitor {
                sentinel: "g-sentinel-2".into(),
                primary: "g-0".into(),
                ip: ip(0),
            }
        );
    }
}
