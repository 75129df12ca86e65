//! Rotating the `operator` user's password live on every member of a topology, with the
//! `replication` user's derived from it (data nodes) and the logins members make of each
//! other: a data node's `masterauth`, a sentinel's `sentinel-pass` and its group's
//! `auth-pass`. Running servers keep what they started with, so a changed Secret reaches
//! them through commands, in three phases read back from live state at every pass:
//! 1. **add**: every member lacking the new hashes gets them next to what it has (`ACL
//!    SETUSER operator #<sha256>`, the same for `replication`); the overlap starts again;
//! 2. **switch**: once every member answered and holds the new hashes, each one's own
//!    logins go to the new password (`CONFIG SET masterauth`; `SENTINEL SET <group>
//!    auth-pass` and `SENTINEL CONFIG SET sentinel-pass`): they are used at the next
//!    connection, which the others now accept;
//! 3. **drop**: once every member answered switched, the overlap has run and every pod's
//!    hooks read the password from a file that follows the Secret, each member keeps the
//!    new hashes alone (`ACL SETUSER ... resetpass #<sha256>`).
//!
//! A member restarted meanwhile starts with the new password only, and gets the previous
//! hashes back (those other members hold) until they all go, so the hooks of pods started
//! before can still reach it. The caller keeps the password every member was last brought
//! to, to log in with until the members take the new one.

use std::collections::BTreeSet;
use std::future::Future;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use crate::shared::acl::sha256_hex;
use crate::shared::commands::{ErrorKind, ValkeyError};
use crate::shared::default_password::{Rotation, hashes_in, whole_second_after};
use crate::shared::users::{AclMember, lines_by_user};
use crd_types::template::{
    OPERATOR_USER, REPLICATION_PASSWORD_PREFIX, REPLICATION_USER, derived_password,
};

/// The least overlap of an operator password rotation: pods' hooks read the password from
/// a mounted Secret, which the kubelet updates within about a minute.
pub const MIN_OVERLAP: Duration = Duration::from_secs(120);

/// A member's own logins to the other members.
pub trait OutgoingLogin: Send + Sync {
    /// The password it logs in with now (a data node's `masterauth`, a sentinel's
    /// `sentinel-pass`); `None` when it has none.
    fn outgoing(&self) -> impl Future<Output = Result<Option<String>, ValkeyError>> + Send;
    /// Makes `password` what it logs in with (for a data node the replication password).
    fn switch_outgoing(
        &self,
        password: &str,
    ) -> impl Future<Output = Result<(), ValkeyError>> + Send;
}

/// The new password, as hashes and logins.
#[derive(Clone, PartialEq, Eq)]
pub struct Wanted {
    pub operator_hash: String,
    pub replication_hash: String,
    operator: String,
    replication: String,
}

impl std::fmt::Debug for Wanted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Wanted(<redacted>)")
    }
}

impl Wanted {
    pub fn of(operator_password: &str) -> Self {
        let replication = derived_password(REPLICATION_PASSWORD_PREFIX, operator_password);
        Self {
            operator_hash: sha256_hex(operator_password.as_bytes()),
            replication_hash: sha256_hex(replication.as_bytes()),
            operator: operator_password.to_string(),
            replication,
        }
    }

    /// What a member of `kind` logs in to the others with.
    fn outgoing(&self, kind: Kind) -> &str {
        match kind {
            Kind::DataNode => &self.replication,
            Kind::Sentinel => &self.operator,
        }
    }
}

/// Data nodes carry both users; sentinels only `operator` (they log in to each other and to
/// the data nodes as it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    DataNode,
    Sentinel,
}

/// A member as one pass read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Read {
    pub kind: Kind,
    pub operator: BTreeSet<String>,
    /// Empty on a sentinel.
    pub replication: BTreeSet<String>,
    /// Whether its own logins already use the new password.
    pub switched: bool,
}

impl Read {
    fn settled(&self, wanted: &Wanted) -> bool {
        let only = |h: &BTreeSet<String>, w: &str| h.len() == 1 && h.contains(w);
        self.switched
            && only(&self.operator, &wanted.operator_hash)
            && (self.kind == Kind::Sentinel || only(&self.replication, &wanted.replication_hash))
    }
}

/// What a pass knows besides the members.
#[derive(Clone, Copy, Debug)]
pub struct Facts {
    /// The overlap's start from the status, if it records one for this version of the Secret.
    pub recorded: Option<Timestamp>,
    /// The spec's overlap; at least [`MIN_OVERLAP`] is kept.
    pub overlap: Duration,
    /// Whether every member's pod reads the password from the mounted Secret (hooks).
    pub drop_allowed: bool,
    pub now: Timestamp,
}

/// Hashes to add to one member.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Add {
    pub operator: BTreeSet<String>,
    pub replication: BTreeSet<String>,
}

impl Add {
    fn is_empty(&self) -> bool {
        self.operator.is_empty() && self.replication.is_empty()
    }
}

/// What one pass does, per member in the order given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub add: Vec<Add>,
    /// Members whose own logins go to the new password.
    pub switch: Vec<usize>,
    /// Members to leave with the new hashes alone.
    pub keep_only_new: Vec<usize>,
    /// The rotation to record; `None` when every member is settled on the new password.
    pub rotation: Option<Rotation>,
}

/// Decides a pass from each member's state (`None`: it did not answer).
pub fn plan(wanted: &Wanted, members: &[Option<Read>], facts: Facts) -> Plan {
    let answered: Vec<&Read> = members.iter().flatten().collect();
    let everyone_answered = answered.len() == members.len();
    if answered.iter().all(|r| r.settled(wanted)) && (everyone_answered || facts.recorded.is_none())
    {
        return Plan {
            add: vec![Add::default(); members.len()],
            ..Plan::default()
        };
    }
    let union = |pick: fn(&Read) -> &BTreeSet<String>, new: &str| -> BTreeSet<String> {
        answered
            .iter()
            .flat_map(|r| pick(r).iter().cloned())
            .chain([new.to_string()])
            .collect()
    };
    let operator = union(|r| &r.operator, &wanted.operator_hash);
    let replication = union(|r| &r.replication, &wanted.replication_hash);
    let add: Vec<Add> = members
        .iter()
        .map(|r| match r {
            Some(r) => Add {
                operator: operator.difference(&r.operator).cloned().collect(),
                replication: match r.kind {
                    Kind::DataNode => replication.difference(&r.replication).cloned().collect(),
                    Kind::Sentinel => BTreeSet::new(),
                },
            },
            None => Add::default(),
        })
        .collect();
    let new_arrives = add.iter().any(|a| {
        a.operator.contains(&wanted.operator_hash)
            || a.replication.contains(&wanted.replication_hash)
    });
    let since = match facts.recorded {
        Some(at) if !new_arrives => at,
        _ => whole_second_after(facts.now),
    };
    let overlap = facts.overlap.max(MIN_OVERLAP);
    let previous_until = k8s_openapi::jiff::SignedDuration::try_from(overlap)
        .ok()
        .and_then(|o| since.checked_add(o).ok())
        .unwrap_or(Timestamp::MAX);
    // Switch only once every member takes the new password: a member that logs in with it
    // before then is refused by one that lacks it.
    let switch: Vec<usize> = if everyone_answered {
        members
            .iter()
            .enumerate()
            .filter(|(_, r)| r.as_ref().is_some_and(|r| !r.switched))
            .map(|(i, _)| i)
            .collect()
    } else {
        Vec::new()
    };
    let all_switched = answered.iter().all(|r| r.switched);
    let keep_only_new = if everyone_answered
        && !new_arrives
        && all_switched
        && facts.drop_allowed
        && facts.now >= previous_until
    {
        members
            .iter()
            .enumerate()
            .filter(|(_, r)| r.as_ref().is_some_and(|r| !r.settled(wanted)))
            .map(|(i, _)| i)
            .collect()
    } else {
        Vec::new()
    };
    Plan {
        rotation: Some(Rotation {
            since,
            previous_until,
            members_with_new: answered.len(),
            members: members.len(),
        }),
        // Dropping: no previous hash goes back to a member that already lost it (one
        // dropped by a pass that stopped half-way, or restarted with the new one).
        add: match keep_only_new.is_empty() {
            true => add,
            false => vec![Add::default(); members.len()],
        },
        switch,
        keep_only_new,
    }
}

/// One member: its name, kind and connection (`None` when it does not answer).
pub struct Member<'a, V> {
    pub name: &'a str,
    pub kind: Kind,
    pub conn: Option<&'a V>,
}

/// What a pass did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// The rotation to record; `None` when every member is settled on the new password.
    pub rotation: Option<Rotation>,
    /// Whether every member answered settled on the new password: the caller may then
    /// keep it as the one members hold.
    pub settled: bool,
    /// Members that took the new password next to the previous one.
    pub new_added: Vec<String>,
    /// Members whose own logins went to the new password.
    pub switched: Vec<String>,
    /// Members left with the new password alone.
    pub previous_dropped: Vec<String>,
    /// Members that refused a command, with their answer.
    pub failed: Vec<(String, String)>,
    /// Members that did not answer, or whose connection went during the pass.
    pub silent: Vec<String>,
}

impl Outcome {
    fn failed_on(&mut self, member: &str, e: ValkeyError) {
        if e.kind == ErrorKind::Unreachable {
            self.silent.push(member.to_string());
        } else {
            self.failed.push((member.to_string(), e.to_string()));
        }
    }
}

/// Reads a member's state.
async fn read<V: AclMember + OutgoingLogin>(
    conn: &V,
    kind: Kind,
    wanted: &Wanted,
) -> Result<Read, ValkeyError> {
    let users = lines_by_user(&conn.acl_lines().await?);
    let hashes = |user: &str| users.get(user).map(|l| hashes_in(l)).unwrap_or_default();
    let outgoing = conn.outgoing().await?;
    Ok(Read {
        kind,
        operator: hashes(OPERATOR_USER),
        replication: match kind {
            Kind::DataNode => hashes(REPLICATION_USER),
            Kind::Sentinel => BTreeSet::new(),
        },
        switched: outgoing.as_deref() == Some(wanted.outgoing(kind)),
    })
}

/// Reads every member, plans ([`plan`]) and carries the plan out.
pub async fn rotate<V: AclMember + OutgoingLogin>(
    password: &str,
    members: &[Member<'_, V>],
    facts: Facts,
) -> Outcome {
    let wanted = Wanted::of(password);
    let mut outcome = Outcome::default();
    let reads = read_all(members, &wanted, &mut outcome).await;
    let plan = plan(&wanted, &reads, facts);
    let Some(rotation) = plan.rotation else {
        outcome.settled = outcome.silent.is_empty() && outcome.failed.is_empty();
        return outcome;
    };
    // Switch only once every member holds what this pass adds: one that switches early is
    // refused by a member still lacking the new hashes.
    if add_hashes(members, &wanted, &plan.add, &mut outcome).await {
        switch_logins(members, &wanted, &plan.switch, &mut outcome).await;
    }
    keep_only_new(members, &wanted, &plan.keep_only_new, &mut outcome).await;
    let all_dropped = !plan.keep_only_new.is_empty()
        && outcome.previous_dropped.len() == plan.keep_only_new.len();
    if all_dropped {
        outcome.settled = outcome.silent.is_empty() && outcome.failed.is_empty();
    } else {
        // Those that answered, less those that refused or went silent on their way to it.
        let lost: BTreeSet<&String> = outcome
            .failed
            .iter()
            .map(|(name, _)| name)
            .chain(&outcome.silent)
            .collect();
        let members_with_new = members.len().saturating_sub(lost.len());
        outcome.rotation = Some(Rotation {
            members_with_new,
            ..rotation
        });
    }
    outcome
}

/// Each member's state, in order; `None` (and noted in `outcome`) for one that did not
/// answer.
async fn read_all<V: AclMember + OutgoingLogin>(
    members: &[Member<'_, V>],
    wanted: &Wanted,
    outcome: &mut Outcome,
) -> Vec<Option<Read>> {
    let mut reads = Vec::with_capacity(members.len());
    for m in members {
        let read = match m.conn {
            Some(conn) => read(conn, m.kind, wanted).await,
            None => Err(ValkeyError::new(ErrorKind::Unreachable, "no connection")),
        };
        match read {
            Ok(r) => reads.push(Some(r)),
            Err(e) => {
                if e.kind != ErrorKind::Unreachable {
                    outcome.failed.push((m.name.to_string(), e.to_string()));
                }
                outcome.silent.push(m.name.to_string());
                reads.push(None);
            }
        }
    }
    reads
}

/// Member `i`'s name and connection, when it has one.
fn conn_of<'m, V>(members: &'m [Member<'_, V>], i: usize) -> Option<(&'m str, &'m V)> {
    members.get(i).and_then(|m| Some((m.name, m.conn?)))
}

/// Adds each member's hashes (`add`, by member); whether every one took them.
async fn add_hashes<V: AclMember>(
    members: &[Member<'_, V>],
    wanted: &Wanted,
    add: &[Add],
    outcome: &mut Outcome,
) -> bool {
    let mut every_add_done = true;
    for (i, add) in add.iter().enumerate() {
        let Some((name, conn)) = conn_of(members, i).filter(|_| !add.is_empty()) else {
            continue;
        };
        let hashes = |h: &BTreeSet<String>| h.iter().map(|h| format!("#{h}")).collect::<Vec<_>>();
        let mut done = Ok(());
        for (user, add) in [
            (OPERATOR_USER, &add.operator),
            (REPLICATION_USER, &add.replication),
        ] {
            if !add.is_empty() && done.is_ok() {
                done = conn.acl_set(user, &hashes(add)).await;
            }
        }
        match done {
            Ok(()) => {
                if add.operator.contains(&wanted.operator_hash)
                    || add.replication.contains(&wanted.replication_hash)
                {
                    outcome.new_added.push(name.to_string());
                }
            }
            Err(e) => {
                every_add_done = false;
                outcome.failed_on(name, e);
            }
        }
    }
    every_add_done
}

/// Members `switch` log in to the others with the new password.
async fn switch_logins<V: OutgoingLogin>(
    members: &[Member<'_, V>],
    wanted: &Wanted,
    switch: &[usize],
    outcome: &mut Outcome,
) {
    for &i in switch {
        let (Some((name, conn)), Some(kind)) =
            (conn_of(members, i), members.get(i).map(|m| m.kind))
        else {
            continue;
        };
        match conn.switch_outgoing(wanted.outgoing(kind)).await {
            Ok(()) => outcome.switched.push(name.to_string()),
            Err(e) => outcome.failed_on(name, e),
        }
    }
}

/// Members `keep` are left with the new hashes alone.
async fn keep_only_new<V: AclMember>(
    members: &[Member<'_, V>],
    wanted: &Wanted,
    keep: &[usize],
    outcome: &mut Outcome,
) {
    for &i in keep {
        let (Some((name, conn)), Some(kind)) =
            (conn_of(members, i), members.get(i).map(|m| m.kind))
        else {
            continue;
        };
        let only = |hash: &str| vec!["resetpass".to_string(), format!("#{hash}")];
        let mut dropped = conn
            .acl_set(OPERATOR_USER, &only(&wanted.operator_hash))
            .await;
        if kind == Kind::DataNode && dropped.is_ok() {
            dropped = conn
                .acl_set(REPLICATION_USER, &only(&wanted.replication_hash))
                .await;
        }
        match dropped {
            Ok(()) => outcome.previous_dropped.push(name.to_string()),
            Err(e) => outcome.failed_on(name, e),
        }
    }
}

#[cfg(test)]
mod tests;
