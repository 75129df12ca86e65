//! `spec.users` (see [`crd_types::users`]): what every data node's ACL should hold, and
//! bringing it there. Everything is read again each time, from live state:
//! - the spec, and each user's password as its SHA-256 (the password is never kept);
//! - the `<topology>-users` Secret ([`render_file`]): the `user` lines members start with,
//!   hashes only, which also records what was last applied (a refused rule or a missing
//!   password keeps its user's previous line) and when a rotation began (a comment line);
//! - each data node's `ACL LIST`.
//!
//! Rules are checked before anything is written ([`prepare`]): a scratch user, switched
//! off, takes them on one member of each Valkey build (version and image) the topology runs.
//! Valkey refuses a bad rule atomically, while a bad `user` line at start would stop the
//! server, so an entry no member could check, or that one refuses, never reaches the Secret:
//! the previous entry stays. The scratch user's `ACL LIST` line is also the form every
//! member's line is compared with ([`apply_live`]), so a user someone changed by hand is set
//! back. Only users the spec listed are ever deleted, once it no longer does.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use crd_types::users::User;
use k8s_openapi::jiff::Timestamp;

use crate::shared::auth::PasswordError;
use crate::shared::commands::{ErrorKind, ValkeyError};

/// The scratch user rules are checked with (`_` is not allowed in a spec user's name).
pub const CHECK_USER: &str = "__valkey-operator-check";

/// How soon, at the latest, a topology with users looks again: password Secrets are not
/// watched (that would take list and watch on every Secret of the namespace), so a changed
/// password is noticed by looking.
pub const USERS_LOOK: Duration = Duration::from_secs(10);

/// The next look, at most [`USERS_LOOK`] away for a topology with users or TLS (whose
/// Secret is not watched either: a renewed certificate is noticed by looking).
pub fn idle_look(look: Duration, looks_at_secrets: bool) -> Duration {
    if looks_at_secrets {
        look.min(USERS_LOOK)
    } else {
        look
    }
}

/// The ACL commands this module sends to one data node.
pub trait AclMember: Send + Sync {
    /// `ACL LIST`: one `user ...` line per user.
    fn acl_lines(&self) -> impl Future<Output = Result<Vec<String>, ValkeyError>> + Send;
    /// `ACL SETUSER user arg...`.
    fn acl_set(
        &self,
        user: &str,
        args: &[String],
    ) -> impl Future<Output = Result<(), ValkeyError>> + Send;
    /// `ACL DELUSER user...`.
    fn acl_del(&self, users: &[String]) -> impl Future<Output = Result<(), ValkeyError>> + Send;
}

/// A user as the data nodes should have it.
#[derive(Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    /// SHA-256 (hex) of each password that logs in: one, or during a rotation the previous
    /// one and then the new one.
    pub hashes: Vec<String>,
    pub rules: Vec<String>,
    /// When the new hash was added beside the previous one.
    pub rotating_since: Option<Timestamp>,
}

impl fmt::Debug for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Entry")
            .field("name", &self.name)
            .field("hashes", &self.hashes.len())
            .field("rules", &self.rules)
            .field("rotating_since", &self.rotating_since)
            .finish()
    }
}

impl Entry {
    /// `ACL SETUSER <name>` arguments giving exactly this user (`on`), or the same rules to
    /// the scratch user (`off`: it can never log in).
    pub fn setuser_args(&self, on: bool) -> Vec<String> {
        let state = if on { "on" } else { "off" };
        ["reset", "resetchannels", state]
            .into_iter()
            .map(String::from)
            .chain(self.hashes.iter().map(|h| format!("#{h}")))
            .chain(self.rules.iter().cloned())
            .collect()
    }
}

/// What the users Secret holds: the entries members start with, and the users deleted from
/// the spec that some data node may still have (kept until every data node answered
/// without them).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UsersFile {
    pub entries: Vec<Entry>,
    pub removed: Vec<String>,
}

/// The users Secret's text: per user, a comment while it rotates, then its `user` line; a
/// comment per removed user.
pub fn render_file(file: &UsersFile) -> String {
    let mut text = String::from(
        "# Rendered by valkey-operator (topology-controller) from spec.users; hashes only.\n",
    );
    for e in &file.entries {
        if let Some(since) = e.rotating_since {
            text.push_str(&format!("# rotating {} since {since}\n", e.name));
        }
        text.push_str(&format!(
            "user {} {}\n",
            e.name,
            e.setuser_args(true).join(" ")
        ));
    }
    for name in &file.removed {
        text.push_str(&format!("# removed {name}\n"));
    }
    text
}

/// A users Secret's text read back ([`render_file`]). Lines it did not write are skipped, and
/// so is an entry with a rule admission would refuse (the Secret may have been edited).
pub fn parse_file(text: &str) -> UsersFile {
    let mut since = BTreeMap::new();
    let mut file = UsersFile::default();
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["#", "rotating", name, "since", at] => {
                if let Ok(at) = at.parse::<Timestamp>() {
                    since.insert(name.to_string(), at);
                }
            }
            ["#", "removed", name] => file.removed.push(name.to_string()),
            ["user", name, "reset", "resetchannels", "on", rest @ ..] => {
                let (hashes, rules): (Vec<&str>, Vec<&str>) =
                    rest.iter().partition(|w| is_hash_word(w));
                if !rules.iter().all(|r| admissible_rule(r)) {
                    continue;
                }
                file.entries.push(Entry {
                    name: name.to_string(),
                    hashes: hashes.iter().map(|h| h[1..].to_string()).collect(),
                    rules: rules.iter().map(|r| r.to_string()).collect(),
                    rotating_since: None,
                });
            }
            _ => {}
        }
    }
    for e in &mut file.entries {
        e.rotating_since = since.get(&e.name).copied();
    }
    // The operator's own users (`probe` was a name `spec.users` could take before): never
    // set nor deleted from here.
    file.entries.retain(|e| !reserved(&e.name));
    file.removed.retain(|name| !reserved(name));
    file
}

/// Whether `name` is one of the operator's own users.
pub fn reserved(name: &str) -> bool {
    crd_types::users::RESERVED_USER_NAMES.contains(&name)
}

/// A rule as admission takes it (see [`crd_types::users::User`]): printable ASCII without
/// quotes or parentheses, no state or password of its own.
fn admissible_rule(rule: &str) -> bool {
    const OWNED: [&str; 5] = ["on", "off", "reset", "nopass", "resetpass"];
    !rule.is_empty()
        && rule
            .bytes()
            .all(|b| b.is_ascii_graphic() && !b"()\"'".contains(&b))
        && !OWNED.contains(&rule.to_ascii_lowercase().as_str())
        && !rule.starts_with(['<', '>', '#', '!'])
}

fn is_hash_word(word: &str) -> bool {
    word.len() == 65
        && word.starts_with('#')
        && word[1..]
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// `ACL LIST` lines by user name.
pub fn lines_by_user(lines: &[String]) -> BTreeMap<String, String> {
    lines
        .iter()
        .filter_map(|l| {
            let name = l.strip_prefix("user ")?.split(' ').next()?;
            Some((name.to_string(), l.clone()))
        })
        .collect()
}

/// One spec user and its current password's hash, or why it cannot be read.
pub struct Wanted<'a> {
    pub user: &'a User,
    pub password_hash: Result<String, PasswordError>,
}

/// One data node: its name, its build ([`build`]) and its connection, `None` when it does
/// not answer.
pub struct Member<'a, V> {
    pub name: &'a str,
    pub version: Option<&'a str>,
    pub conn: Option<&'a V>,
}

/// What rule checks are keyed by: the Valkey version a member runs and its image (two images
/// of one version may hold different modules, so different commands).
pub fn build(version: &str, node: &crd_types::ValkeyNode) -> String {
    format!("{version} ({})", node.spec.template.image)
}

impl<V> Member<'_, V> {
    /// What rule checks are keyed by: members of one version judge rules alike.
    fn version_key(&self) -> String {
        match self.version {
            Some(v) => v.to_string(),
            None => format!("unknown version, {}", self.name),
        }
    }
}

/// Why a user is not as the spec says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    PasswordMissing {
        user: String,
        why: PasswordError,
    },
    RulesRefused {
        user: String,
        version: String,
        answer: String,
    },
}

impl Problem {
    /// The user it is about.
    pub fn user(&self) -> &str {
        match self {
            Problem::PasswordMissing { user, .. } | Problem::RulesRefused { user, .. } => user,
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::PasswordMissing { user, why } => write!(
                f,
                "user {user}: {why}; it keeps its previous password, if it had one"
            ),
            Problem::RulesRefused {
                user,
                version,
                answer,
            } => write!(
                f,
                "user {user}: Valkey {version} refuses its rules ({answer}); it keeps its previous rules, if it had any"
            ),
        }
    }
}

/// Rule checks already made: `(version, scratch arguments)` to what the server answered. A
/// pure function of its key, so it is only a memo: losing it (a restart) costs a few checks.
#[derive(Default)]
pub struct Checks(Mutex<HashMap<CheckKey, Answer>>);

/// What a server answered a check with.
#[derive(Clone)]
enum Answer {
    /// Accepted: the scratch user's `ACL LIST` line's tail after `user <name> off`.
    Tail(String),
    /// Refused: the server's words.
    Refused(String),
}

/// A Valkey version and the scratch user's arguments.
type CheckKey = (String, Vec<String>);

/// Entries kept before the memo is cleared (each rule or password change adds one per
/// version; an entry is at most 64 rules of 512 bytes).
const CHECKS_KEPT: usize = 512;

impl Checks {
    fn get(&self, key: &CheckKey) -> Option<Answer> {
        self.0.lock().ok()?.get(key).cloned()
    }

    fn put(&self, key: CheckKey, value: Answer) {
        if let Ok(mut memo) = self.0.lock() {
            if memo.len() >= CHECKS_KEPT {
                memo.clear();
            }
            memo.insert(key, value);
        }
    }
}

/// What a check said of an entry on one version.
enum Checked {
    /// Accepted: the `ACL LIST` line a member holding it shows.
    Line(String),
    /// Refused by the server, with its answer.
    Refused(String),
    /// Not known: no member of that version could be asked.
    Unknown,
}

/// The scratch user's line for `entry` on `member`'s version, asked when not yet known.
async fn check<V: AclMember>(checks: &Checks, member: &Member<'_, V>, entry: &Entry) -> Checked {
    let args = entry.setuser_args(false);
    let key = (member.version_key(), args.clone());
    let line = |tail: String| Checked::Line(format!("user {} on{tail}", entry.name));
    match checks.get(&key) {
        Some(Answer::Tail(tail)) => return line(tail),
        Some(Answer::Refused(answer)) => return Checked::Refused(answer),
        None => {}
    }
    let Some(conn) = member.conn else {
        return Checked::Unknown;
    };
    let asked = match conn.acl_set(CHECK_USER, &args).await {
        Err(e) if is_rule_refusal(&e) => Answer::Refused(e.message),
        Err(_) => return Checked::Unknown,
        Ok(()) => {
            let prefix = format!("user {CHECK_USER} off");
            let listed = conn.acl_lines().await;
            // Best effort: a scratch user left behind is deleted as unwanted next time.
            let _ = conn.acl_del(&[CHECK_USER.to_string()]).await;
            match listed {
                Ok(lines) => match lines.iter().find_map(|l| l.strip_prefix(&prefix)) {
                    Some(tail) => Answer::Tail(tail.to_string()),
                    None => return Checked::Unknown,
                },
                Err(_) => return Checked::Unknown,
            }
        }
    };
    checks.put(key, asked.clone());
    match asked {
        Answer::Tail(tail) => line(tail),
        Answer::Refused(answer) => Checked::Refused(answer),
    }
}

/// Whether `error` is Valkey refusing the rules themselves (remembered), not a passing
/// trouble such as BUSY or a lost connection (asked again next time).
fn is_rule_refusal(error: &ValkeyError) -> bool {
    error.kind == ErrorKind::Refused && error.message.contains("Error in ACL SETUSER modifier")
}

/// What [`prepare`] decided: what the Secret should hold and every member should have, the
/// lines each member expects for the entries, and what to report.
pub struct Prepared {
    pub file: UsersFile,
    pub problems: Vec<Problem>,
    /// Users whose new or changed entry could not be checked yet (no data node of some
    /// version answers): they stay as they were.
    pub unchecked: Vec<String>,
    /// Per version key, user name to its expected `ACL LIST` line.
    pub(crate) expected: BTreeMap<String, BTreeMap<String, String>>,
    /// Each answering member's `ACL LIST`, by user.
    pub(crate) live: BTreeMap<String, BTreeMap<String, String>>,
}

/// What the checks on every version said of an entry.
enum Verdict {
    /// Every version the topology runs accepts it.
    Accepted,
    /// A version refuses it: that version, and its answer.
    Refused(String, String),
    /// Not every version could be asked (none answers, say).
    Unknown,
}

/// Reads every member's users, checks the wanted entries on each version, and decides what
/// the members should have: the spec's users with their current passwords. An entry nobody
/// could check, or that a version refuses, never replaces the previous one: the previous
/// entry stays (its rules with the new password, when only the rules are refused), and a
/// new user waits. A changed password is added beside the previous one; the previous one
/// goes once every member has both and the user's overlap has passed since. Users the spec
/// no longer lists are recorded as removed until no data node has them.
pub async fn prepare<V: AclMember>(
    checks: &Checks,
    wanted: &[Wanted<'_>],
    previous: &UsersFile,
    members: &[Member<'_, V>],
    now: Timestamp,
) -> Prepared {
    let mut judging = Judging::new(checks, members).await;
    let mut decided = Decided::default();
    for w in wanted {
        let before = previous.entries.iter().find(|e| e.name == w.user.name);
        judging.decide_user(w, before, now, &mut decided).await;
    }
    let removed = judging.still_removed(wanted, previous);
    Prepared {
        file: UsersFile {
            entries: decided.entries,
            removed,
        },
        problems: decided.problems,
        unchecked: decided.unchecked,
        expected: judging.expected,
        live: judging.live,
    }
}

/// What [`prepare`] decided so far, user by user.
#[derive(Default)]
struct Decided {
    entries: Vec<Entry>,
    problems: Vec<Problem>,
    unchecked: Vec<String>,
}

/// What [`prepare`] judges entries by: the members' users, and one member per version that
/// answers for it.
struct Judging<'p, 'a, V> {
    checks: &'p Checks,
    members: &'p [Member<'a, V>],
    /// Each answering member's `ACL LIST`, by user.
    live: BTreeMap<String, BTreeMap<String, String>>,
    /// Per version key, the first answering member of that version.
    judges: BTreeMap<String, &'p Member<'a, V>>,
    /// Per version key, user name to the line of the entry last judged on it.
    expected: BTreeMap<String, BTreeMap<String, String>>,
}

impl<'p, 'a, V: AclMember> Judging<'p, 'a, V> {
    /// Reads every member's users.
    async fn new(checks: &'p Checks, members: &'p [Member<'a, V>]) -> Self {
        let mut live = BTreeMap::new();
        for m in members {
            if let Some(conn) = m.conn
                && let Ok(lines) = conn.acl_lines().await
            {
                live.insert(m.name.to_string(), lines_by_user(&lines));
            }
        }
        // One member per version answers for it.
        let mut judges: BTreeMap<String, &Member<'_, V>> = BTreeMap::new();
        for m in members.iter().filter(|m| live.contains_key(m.name)) {
            judges.entry(m.version_key()).or_insert(m);
        }
        Self {
            checks,
            members,
            live,
            judges,
            expected: BTreeMap::new(),
        }
    }

    /// The verdict on `entry`; the line of each version that accepts it is recorded.
    async fn verdict(&mut self, entry: &Entry) -> Verdict {
        let mut unknown = self.judges.is_empty();
        for (version, member) in &self.judges {
            match check(self.checks, member, entry).await {
                Checked::Line(line) => {
                    let lines = self.expected.entry(version.clone()).or_default();
                    lines.insert(entry.name.clone(), line);
                }
                Checked::Refused(answer) => return Verdict::Refused(version.clone(), answer),
                Checked::Unknown => unknown = true,
            }
        }
        if unknown {
            Verdict::Unknown
        } else {
            Verdict::Accepted
        }
    }

    /// Decides the entry of wanted user `w`, whose previous entry is `before`.
    async fn decide_user(
        &mut self,
        w: &Wanted<'_>,
        before: Option<&Entry>,
        now: Timestamp,
        decided: &mut Decided,
    ) {
        let name = &w.user.name;
        // Checked first: the lines members holding it show, which the rotation's
        // `everywhere` compares with (also after a restart, with nothing memoised).
        let before_verdict = match before {
            Some(b) => Some(self.verdict(b).await),
            None => None,
        };
        let next = match &w.password_hash {
            Ok(hash) => {
                let everywhere = |e: &Entry| everywhere(e, self.members, &self.live, self.checks);
                Some(next_entry(w.user, hash.clone(), before, now, everywhere))
            }
            Err(why) => {
                decided.problems.push(Problem::PasswordMissing {
                    user: name.clone(),
                    why: why.clone(),
                });
                None
            }
        };
        let chosen = match next {
            Some(next) if Some(&next) != before => self.checked(name, next, before, decided).await,
            _ => None,
        };
        match (chosen, before) {
            (Some(entry), _) => decided.entries.push(entry),
            (None, Some(before)) => {
                if let Some(Verdict::Refused(version, answer)) = before_verdict
                    && w.password_hash.is_ok()
                    && !decided.problems.iter().any(|p| p.user() == name)
                {
                    decided.problems.push(Problem::RulesRefused {
                        user: name.clone(),
                        version,
                        answer,
                    });
                }
                decided.entries.push(before.clone());
            }
            (None, None) => {}
        }
    }

    /// `next` if every version accepts it. When one refuses its rules, the new password
    /// with the rules `before` had, if accepted; when one could not be asked, nothing.
    async fn checked(
        &mut self,
        name: &str,
        next: Entry,
        before: Option<&Entry>,
        decided: &mut Decided,
    ) -> Option<Entry> {
        match self.verdict(&next).await {
            Verdict::Accepted => Some(next),
            Verdict::Unknown => {
                decided.unchecked.push(name.to_string());
                None
            }
            Verdict::Refused(version, answer) => {
                decided.problems.push(Problem::RulesRefused {
                    user: name.to_string(),
                    version,
                    answer,
                });
                // The password still changes, with the rules it had.
                let kept_rules = before.filter(|b| b.rules != next.rules).map(|b| Entry {
                    rules: b.rules.clone(),
                    ..next
                });
                match kept_rules {
                    Some(e) if matches!(self.verdict(&e).await, Verdict::Accepted) => Some(e),
                    _ => None,
                }
            }
        }
    }

    /// Users the spec listed before and no longer does, until every data node answered
    /// without them.
    fn still_removed(&self, wanted: &[Wanted<'_>], previous: &UsersFile) -> Vec<String> {
        let listed: BTreeSet<&str> = wanted.iter().map(|w| w.user.name.as_str()).collect();
        let mut removed: BTreeSet<String> = previous.removed.iter().cloned().collect();
        removed.extend(previous.entries.iter().map(|e| e.name.clone()));
        removed.retain(|u| !listed.contains(u.as_str()));
        removed.retain(|u| {
            self.members.iter().any(|m| {
                self.live
                    .get(m.name)
                    .is_none_or(|users| users.contains_key(u))
            })
        });
        removed.into_iter().collect()
    }
}

/// Whether every member answered and holds `entry` exactly (as its version's check shows
/// it; an unchecked version counts as not holding it).
fn everywhere<V>(
    entry: &Entry,
    members: &[Member<'_, V>],
    live: &BTreeMap<String, BTreeMap<String, String>>,
    checks: &Checks,
) -> bool {
    let key = |m: &Member<'_, V>| (m.version_key(), entry.setuser_args(false));
    members.iter().all(|m| {
        let Some(Answer::Tail(tail)) = checks.get(&key(m)) else {
            return false;
        };
        let want = format!("user {} on{tail}", entry.name);
        live.get(m.name).and_then(|users| users.get(&entry.name)) == Some(&want)
    })
}

/// The entry `user` should have now, given its current password's `hash` and its previous
/// entry: a new hash joins the newest previous one (a rotation begins); the previous one
/// goes once `everywhere` holds the pair and the overlap has passed.
fn next_entry(
    user: &User,
    hash: String,
    before: Option<&Entry>,
    now: Timestamp,
    everywhere: impl Fn(&Entry) -> bool,
) -> Entry {
    let fresh = |hashes: Vec<String>, rotating_since| Entry {
        name: user.name.clone(),
        hashes,
        rules: user.rules.clone(),
        rotating_since,
    };
    let overlap = Duration::from_secs(user.password_overlap_seconds.max(0) as u64);
    let Some(before) = before else {
        return fresh(vec![hash], None);
    };
    if !before.hashes.contains(&hash) {
        return match before.hashes.last() {
            Some(previous) if !overlap.is_zero() => fresh(vec![previous.clone(), hash], Some(now)),
            _ => fresh(vec![hash], None),
        };
    }
    if before.hashes.len() == 1 {
        return fresh(vec![hash], None);
    }
    let since = before.rotating_since.unwrap_or(now);
    // A start in the future (a clock that stepped back) has not passed.
    let passed = now >= since && now.duration_since(since).unsigned_abs() >= overlap;
    if passed && everywhere(before) {
        fresh(vec![hash], None)
    } else {
        // The rules may have changed meanwhile; the pair stays until the overlap is over.
        fresh(before.hashes.clone(), Some(since))
    }
}

/// What [`apply_live`] did and could not do.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// `(member, user)` set with `ACL SETUSER`.
    pub set: Vec<(String, String)>,
    /// `(member, user)` deleted.
    pub deleted: Vec<(String, String)>,
    /// Members that do not have every entry yet: not answering, or a command failed (why).
    pub pending: Vec<(String, String)>,
}

/// Brings every answering member to `prepared`'s entries: `ACL SETUSER` for each user
/// whose line differs from its version's check, `ACL DELUSER` for the removed users and a
/// scratch user left behind. Users it never made are left alone. A member whose connection
/// fails is left for the next pass at once.
pub async fn apply_live<V: AclMember>(prepared: &Prepared, members: &[Member<'_, V>]) -> Applied {
    let mut applied = Applied::default();
    'members: for m in members {
        let (Some(conn), Some(users)) = (m.conn, prepared.live.get(m.name)) else {
            applied
                .pending
                .push((m.name.to_string(), "does not answer".into()));
            continue;
        };
        let expected = prepared.expected.get(&m.version_key());
        for e in &prepared.file.entries {
            let Some(want) = expected.and_then(|x| x.get(&e.name)) else {
                let why = format!("user {}'s rules are not checked on its version", e.name);
                applied.pending.push((m.name.to_string(), why));
                continue;
            };
            if users.get(&e.name) == Some(want) {
                continue;
            }
            match conn.acl_set(&e.name, &e.setuser_args(true)).await {
                Ok(()) => applied.set.push((m.name.to_string(), e.name.clone())),
                Err(err) => {
                    let why = format!("ACL SETUSER {}: {}", e.name, err.message);
                    applied.pending.push((m.name.to_string(), why));
                    if err.kind != ErrorKind::Refused {
                        continue 'members;
                    }
                }
            }
        }
        let gone: Vec<String> = users
            .keys()
            .filter(|u| *u == CHECK_USER || prepared.file.removed.contains(u))
            .cloned()
            .collect();
        if gone.is_empty() {
            continue;
        }
        match conn.acl_del(&gone).await {
            Ok(()) => applied
                .deleted
                .extend(gone.into_iter().map(|u| (m.name.to_string(), u))),
            Err(err) => applied
                .pending
                .push((m.name.to_string(), format!("ACL DELUSER: {}", err.message))),
        }
    }
    applied
}

pub mod report;

#[cfg(test)]
mod tests;
