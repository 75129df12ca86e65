//! Rotating the default user's password on a topology's data nodes, live and with an
//! overlap; the same on a ValkeyReplication's sentinels, whose default user has its own
//! password (see [`Sentinel`]). Running servers keep the password they started with (the
//! pod's environment is read once), so a changed Secret reaches them through ACL commands:
//! 1. every data node lacking the new password gets it next to what it has
//!    (`ACL SETUSER default #<sha256>`); the overlap starts again from then;
//! 2. once every data node answered with the new one and the overlap has run, each keeps
//!    only it (`ACL SETUSER default resetpass #<sha256>`, then `CONFIG SET requirepass` so
//!    that `CONFIG GET` tells the truth: that alone would not do, as Valkey skips a `CONFIG
//!    SET` to the value it has, which a data node restarted with the new password has).
//!
//! Progress is read from live state on every pass: each data node's `ACL LIST` line of the
//! default user, and the overlap's start from the topology's status (recorded there, no
//! password or hash in it). A data node restarted during the overlap starts with the new
//! password only; it gets the previous ones back (the hashes other data nodes hold) until
//! they all go. A pass that dies half-way leaves data nodes with the new password and maybe
//! the previous one: the next pass goes on from there.

use std::collections::BTreeSet;
use std::future::Future;
use std::time::Duration;

use k8s_openapi::jiff::{RoundMode, SignedDuration, Timestamp, TimestampRound, Unit};

use crate::shared::acl::sha256_hex;
use crate::shared::commands::{ErrorKind, ValkeyError};
use crate::shared::users::{AclMember, lines_by_user};
use crd_types::template::PROBE_USER;

/// The user whose password this module rotates.
pub const USER: &str = "default";

/// Setting the `requirepass` directive.
pub trait RequirePass: Send + Sync {
    /// `CONFIG SET requirepass <password>`. Valkey resets the default user's passwords to
    /// this one, but only when the value differs from the one it has.
    fn set_requirepass(
        &self,
        password: &str,
    ) -> impl Future<Output = Result<(), ValkeyError>> + Send;
}

/// The password hashes (hex SHA-256) in an `ACL LIST` line, as Valkey prints them (`#<hex>`).
pub fn hashes_in(line: &str) -> BTreeSet<String> {
    line.split(' ')
        .filter_map(|w| w.strip_prefix('#'))
        .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        .map(str::to_ascii_lowercase)
        .collect()
}

/// A rotation under way, as the status records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rotation {
    /// When the new password last reached a data node that lacked it.
    pub since: Timestamp,
    /// When the previous passwords go, if every data node has the new one by then.
    pub previous_until: Timestamp,
    pub members_with_new: usize,
    pub members: usize,
}

/// What one pass does to each data node, in the order of the members given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Hashes to add, per data node (empty: nothing to add).
    pub add: Vec<BTreeSet<String>>,
    /// Data nodes to leave with the new password alone.
    pub keep_only_new: Vec<usize>,
    /// The rotation to record; `None` when every data node has the new password alone.
    pub rotation: Option<Rotation>,
}

/// What a pass knows besides the data nodes' hashes.
#[derive(Clone, Copy, Debug)]
pub struct Facts {
    /// The overlap's start from the status, if it records one for this version of the
    /// Secret (a Secret changed again, even back to a previous password, starts it again).
    pub recorded: Option<Timestamp>,
    pub overlap: Duration,
    /// Whether every data node can lose the previous passwords: each has the `probe` user,
    /// so its readiness probe needs none (a pod still on an older template probes with the
    /// password it started with).
    pub drop_allowed: bool,
    pub now: Timestamp,
}

/// Decides a pass: `wanted` is the new password's hash, `members` each data node's hashes
/// (`None`: it did not answer).
pub fn plan(wanted: &str, members: &[Option<BTreeSet<String>>], facts: Facts) -> Plan {
    let Facts {
        recorded,
        overlap,
        drop_allowed,
        now,
    } = facts;
    let only_new = |h: &BTreeSet<String>| h.len() == 1 && h.contains(wanted);
    let answered: Vec<&BTreeSet<String>> = members.iter().flatten().collect();
    let settled = answered.iter().all(|h| only_new(h));
    if settled && (answered.len() == members.len() || recorded.is_none()) {
        // Nothing to do; a silent data node with a rotation recorded keeps it recorded, as
        // it may still hold a previous password.
        return Plan {
            add: vec![BTreeSet::new(); members.len()],
            ..Plan::default()
        };
    }
    // Every password some data node takes, so one restarted meanwhile (new password only)
    // takes the previous ones again until they all go.
    let union: BTreeSet<String> = answered
        .iter()
        .flat_map(|h| h.iter().cloned())
        .chain([wanted.to_string()])
        .collect();
    let add: Vec<BTreeSet<String>> = members
        .iter()
        .map(|h| match h {
            Some(h) => union.difference(h).cloned().collect(),
            None => BTreeSet::new(),
        })
        .collect();
    let new_arrives = add.iter().any(|a| a.contains(wanted));
    let since = match recorded {
        Some(at) if !new_arrives => at,
        _ => whole_second_after(now),
    };
    let overlap = SignedDuration::try_from(overlap).unwrap_or(SignedDuration::MAX);
    let previous_until = since.checked_add(overlap).unwrap_or(Timestamp::MAX);
    let everyone_has_new = answered.len() == members.len() && !new_arrives;
    let keep_only_new = if everyone_has_new && drop_allowed && now >= previous_until {
        members
            .iter()
            .enumerate()
            .filter(|(_, h)| h.as_ref().is_some_and(|h| !only_new(h)))
            .map(|(i, _)| i)
            .collect()
    } else {
        Vec::new()
    };
    let members_with_new = members.iter().flatten().count();
    Plan {
        add: if keep_only_new.is_empty() {
            add
        } else {
            vec![BTreeSet::new(); members.len()]
        },
        rotation: Some(Rotation {
            since,
            previous_until,
            members_with_new,
            members: members.len(),
        }),
        keep_only_new,
    }
}

/// `at` rounded up to a whole second: the status keeps whole seconds, and an overlap
/// counted from a rounded-down start would end early.
pub(crate) fn whole_second_after(at: Timestamp) -> Timestamp {
    let up = TimestampRound::new()
        .smallest(Unit::Second)
        .mode(RoundMode::Ceil);
    at.round(up).unwrap_or(at)
}

/// One data node: its name and connection, `None` when it does not answer.
pub struct Member<'a, V> {
    pub name: &'a str,
    pub conn: Option<&'a V>,
}

/// What a pass did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// The rotation to record (see [`Plan::rotation`]); after the pass, every data node
    /// counted in `members_with_new` answered with the new password or took it.
    pub rotation: Option<Rotation>,
    /// Data nodes that took the new password next to the previous one.
    pub new_added: Vec<String>,
    /// Data nodes left with the new password alone.
    pub previous_dropped: Vec<String>,
    /// Data nodes that refused a command, with their answer.
    pub failed: Vec<(String, String)>,
    /// Data nodes without the `probe` user (not rolled onto this operator's template yet),
    /// which hold back the drop of the previous passwords.
    pub without_probe: Vec<String>,
    /// Data nodes that did not answer, or whose connection went during the pass (a pod
    /// stopping), which hold it back too.
    pub silent: Vec<String>,
}

impl Outcome {
    /// Records that `member` answered a command with `e`: a lost connection makes it
    /// silent (it is told again at the next pass), anything else a refusal.
    fn failed_on(&mut self, member: &str, e: ValkeyError) {
        if e.kind == ErrorKind::Unreachable {
            self.silent.push(member.to_string());
        } else {
            self.failed.push((member.to_string(), e.to_string()));
        }
    }
}

/// Reads every data node's default user, plans ([`plan`]) and carries the plan out.
pub async fn rotate<V: AclMember + RequirePass>(
    password: &str,
    members: &[Member<'_, V>],
    mut facts: Facts,
) -> Outcome {
    let wanted = sha256_hex(password.as_bytes());
    let mut outcome = Outcome::default();
    let mut hashes = Vec::with_capacity(members.len());
    let mut without_probe = Vec::new();
    for m in members {
        let Some(conn) = m.conn else {
            outcome.silent.push(m.name.to_string());
            hashes.push(None);
            continue;
        };
        match conn.acl_lines().await {
            Ok(lines) => {
                let mut users = lines_by_user(&lines);
                if !users.contains_key(PROBE_USER) {
                    without_probe.push(m.name.to_string());
                }
                let line = users.remove(USER).unwrap_or_default();
                hashes.push(Some(hashes_in(&line)));
            }
            Err(e) => {
                if e.kind != ErrorKind::Unreachable {
                    outcome.failed.push((m.name.to_string(), e.to_string()));
                }
                outcome.silent.push(m.name.to_string());
                hashes.push(None);
            }
        }
    }
    facts.drop_allowed &= without_probe.is_empty();
    let plan = plan(&wanted, &hashes, facts);
    outcome.without_probe = without_probe;
    let mut with_new = 0;
    for ((m, add), had) in members.iter().zip(&plan.add).zip(&hashes) {
        let Some(conn) = m.conn.filter(|_| had.is_some()) else {
            continue;
        };
        if add.is_empty() {
            with_new += 1;
            continue;
        }
        let args: Vec<String> = add.iter().map(|h| format!("#{h}")).collect();
        match conn.acl_set(USER, &args).await {
            Ok(()) => {
                with_new += 1;
                if add.contains(&wanted) {
                    outcome.new_added.push(m.name.to_string());
                }
            }
            Err(e) => outcome.failed_on(m.name, e),
        }
    }
    for &i in &plan.keep_only_new {
        let (Some(m), Some(conn)) = (members.get(i), members.get(i).and_then(|m| m.conn)) else {
            continue;
        };
        // `requirepass` first: should the second fail, the data node still holds the
        // previous passwords and the next pass tries again.
        let only_new = ["resetpass".to_string(), format!("#{wanted}")];
        let dropped = match conn.set_requirepass(password).await {
            Ok(()) => conn.acl_set(USER, &only_new).await,
            Err(e) => Err(e),
        };
        match dropped {
            Ok(()) => outcome.previous_dropped.push(m.name.to_string()),
            Err(e) => outcome.failed_on(m.name, e),
        }
    }
    let all_dropped = !plan.keep_only_new.is_empty()
        && outcome.previous_dropped.len() == plan.keep_only_new.len();
    outcome.rotation = plan.rotation.filter(|_| !all_dropped).map(|r| Rotation {
        members_with_new: with_new,
        ..r
    });
    outcome
}

/// A sentinel's connection, for [`rotate`]: Sentinel has no `CONFIG SET`, so `ACL SETUSER`
/// alone changes its passwords. The `requirepass` line it started with stays in its memory
/// and in the config it rewrites, which its start shell replaces from the Secret at every
/// start.
pub struct Sentinel<'a, V>(pub &'a V);

impl<V: AclMember> AclMember for Sentinel<'_, V> {
    fn acl_lines(&self) -> impl Future<Output = Result<Vec<String>, ValkeyError>> + Send {
        self.0.acl_lines()
    }

    fn acl_set(
        &self,
        user: &str,
        args: &[String],
    ) -> impl Future<Output = Result<(), ValkeyError>> + Send {
        self.0.acl_set(user, args)
    }

    fn acl_del(&self, users: &[String]) -> impl Future<Output = Result<(), ValkeyError>> + Send {
        self.0.acl_del(users)
    }
}

impl<V: Sync> RequirePass for Sentinel<'_, V> {
    async fn set_requirepass(&self, _password: &str) -> Result<(), ValkeyError> {
        Ok(())
    }
}

/// Whether the start shell of a member would take `password` (see node-controller's
/// `server_command`): not `-`, no line break. A password it refuses is never rotated in, as
/// every member restarted afterwards would refuse to start.
pub fn startable(password: &str) -> bool {
    password != "-" && !password.contains('\n')
}

/// The overlap a topology asks for (`spec.auth.passwordOverlapSeconds`, default 300).
pub fn overlap(auth: Option<&crd_types::template::Auth>) -> Duration {
    let seconds = auth
        .and_then(|a| a.password_overlap_seconds)
        .unwrap_or(crd_types::template::DEFAULT_PASSWORD_OVERLAP_SECONDS);
    Duration::from_secs(u64::try_from(seconds).unwrap_or(0))
}

#[cfg(test)]
mod tests;
