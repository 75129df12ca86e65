use std::sync::Mutex;

use super::*;
use crd_types::users::RESERVED_USER_NAMES;

/// One data node's ACL, as far as this module looks: a user's line is its state, hashes and
/// rules in the order given. Commands outside `known` are refused as Valkey does.
struct FakeNode {
    known: &'static [&'static str],
    users: Mutex<BTreeMap<String, String>>,
    sets: Mutex<Vec<String>>,
    /// Answers every ACL SETUSER with BUSY (a long script runs).
    busy: Mutex<bool>,
}

impl FakeNode {
    fn new(known: &'static [&'static str]) -> Self {
        let users = RESERVED_USER_NAMES
            .iter()
            .map(|u| (u.to_string(), format!("user {u} on #0 ~* +@all")))
            .collect();
        Self {
            known,
            users: Mutex::new(users),
            sets: Mutex::new(Vec::new()),
            busy: Mutex::new(false),
        }
    }

    fn line(&self, user: &str) -> Option<String> {
        self.users.lock().unwrap().get(user).cloned()
    }

    fn sets(&self) -> Vec<String> {
        std::mem::take(&mut *self.sets.lock().unwrap())
    }
}

const V8: &[&str] = &["get", "set"];
const V9: &[&str] = &["get", "set", "hsetex"];

impl AclMember for FakeNode {
    async fn acl_lines(&self) -> Result<Vec<String>, ValkeyError> {
        Ok(self.users.lock().unwrap().values().cloned().collect())
    }

    async fn acl_set(&self, user: &str, args: &[String]) -> Result<(), ValkeyError> {
        if *self.busy.lock().unwrap() {
            return Err(ValkeyError::new(
                ErrorKind::Refused,
                "BUSY Valkey is busy running a script",
            ));
        }
        let mut words = vec![];
        for a in args {
            if let Some(cmd) = a.strip_prefix('+').filter(|c| !c.starts_with('@'))
                && !self.known.contains(&cmd)
            {
                return Err(ValkeyError::new(
                    ErrorKind::Refused,
                    format!("ERR Error in ACL SETUSER modifier '{a}': Unknown command"),
                ));
            }
            match a.as_str() {
                "reset" | "resetchannels" => {}
                _ => words.push(a.clone()),
            }
        }
        self.sets.lock().unwrap().push(user.to_string());
        let line = format!("user {user} {}", words.join(" "));
        self.users.lock().unwrap().insert(user.to_string(), line);
        Ok(())
    }

    async fn acl_del(&self, users: &[String]) -> Result<(), ValkeyError> {
        let mut all = self.users.lock().unwrap();
        for u in users {
            all.remove(u);
        }
        Ok(())
    }
}

fn user(name: &str, rules: &[&str], overlap: i64) -> User {
    User {
        name: name.into(),
        rules: rules.iter().map(|r| r.to_string()).collect(),
        password_secret_ref: None,
        password_overlap_seconds: overlap,
    }
}

fn hash(c: char) -> String {
    std::iter::repeat_n(c, 64).collect()
}

fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + secs).unwrap()
}

fn members<'a>(nodes: &'a [(&'a str, &'a str, Option<&'a FakeNode>)]) -> Vec<Member<'a, FakeNode>> {
    nodes
        .iter()
        .map(|(name, version, conn)| Member {
            name,
            version: Some(version),
            conn: *conn,
        })
        .collect()
}

/// One pass as the controller makes it: prepare, then apply; the entries become the
/// next pass's previous ones (the Secret).
async fn pass(
    checks: &Checks,
    users: &[(&User, Result<String, PasswordError>)],
    previous: &UsersFile,
    nodes: &[Member<'_, FakeNode>],
    now: Timestamp,
) -> (Prepared, Applied) {
    let wanted: Vec<Wanted> = users
        .iter()
        .map(|(user, hash)| Wanted {
            user,
            password_hash: hash.clone(),
        })
        .collect();
    let prepared = prepare(checks, &wanted, previous, nodes, now).await;
    let applied = apply_live(&prepared, nodes).await;
    (prepared, applied)
}

#[test]
fn the_file_round_trips_and_skips_lines_it_did_not_write() {
    let file = UsersFile {
        entries: vec![
            Entry {
                name: "app".into(),
                hashes: vec![hash('a'), hash('b')],
                rules: vec!["~app:*".into(), "+@read".into()],
                rotating_since: Some(at(5)),
            },
            Entry {
                name: "ro".into(),
                hashes: vec![hash('c')],
                rules: vec![],
                rotating_since: None,
            },
        ],
        removed: vec!["old".into()],
    };
    let text = render_file(&file);
    assert!(text.contains(&format!(
        "user app reset resetchannels on #{} #{} ~app:* +@read\n",
        hash('a'),
        hash('b')
    )));
    assert_eq!(parse_file(&text), file);
    let edited = format!(
        "{text}user evil on nopass +@all\nrequirepass x\nuser sneaky reset resetchannels on #{} nopass\n",
        hash('d')
    );
    assert_eq!(
        parse_file(&edited),
        file,
        "foreign and inadmissible lines are skipped"
    );
    assert_eq!(
        format!("{:?}", file.entries[0]).matches(&hash('a')).count(),
        0
    );
}

#[tokio::test]
async fn users_reach_every_member_once_and_only_removed_ones_are_deleted() {
    let (a, b) = (FakeNode::new(V8), FakeNode::new(V8));
    let nodes = [("g-0", "8.0.1", Some(&a)), ("g-1", "8.0.1", Some(&b))];
    let nodes = members(&nodes);
    let app = user("app", &["~app:*", "+get"], 300);
    let tmp = user("tmp", &["+get"], 300);
    let checks = Checks::default();
    let hand_made = "user stranger on nopass".to_string();
    b.users
        .lock()
        .unwrap()
        .insert("stranger".into(), hand_made.clone());

    let both = [(&app, Ok(hash('a'))), (&tmp, Ok(hash('t')))];
    let (first, applied) = pass(&checks, &both, &UsersFile::default(), &nodes, at(0)).await;
    assert!(first.problems.is_empty());
    assert_eq!(first.file.entries[0].hashes, [hash('a')]);
    assert_eq!(applied.set.len(), 4, "{applied:?}");
    assert!(applied.deleted.is_empty(), "a user it never made stays");
    assert_eq!(b.line("stranger"), Some(hand_made));
    let want = format!("user app on #{} ~app:* +get", hash('a'));
    assert_eq!(a.line("app"), Some(want.clone()));
    assert_eq!(a.line(CHECK_USER), None, "the scratch user is gone");
    assert!(a.line("operator").is_some(), "the operator's own stay");

    // Nothing to do the second time; a user changed by hand is set back; a scratch user
    // left by a crash goes.
    a.sets();
    b.users
        .lock()
        .unwrap()
        .insert("app".into(), "user app on nopass +@all".into());
    b.users
        .lock()
        .unwrap()
        .insert(CHECK_USER.into(), format!("user {CHECK_USER} off"));
    let (second, applied) = pass(&checks, &both, &first.file, &nodes, at(1)).await;
    assert_eq!(applied.set, [("g-1".into(), "app".into())]);
    assert_eq!(applied.deleted, [("g-1".into(), CHECK_USER.into())]);
    assert!(a.sets().is_empty(), "checks were memoised");
    assert_eq!(b.line("app"), Some(want));

    // tmp leaves the spec: deleted where it is, and recorded as removed while a member may
    // still have it.
    let only_app = [(&app, Ok(hash('a')))];
    let silent_b = [("g-0", "8.0.1", Some(&a)), ("g-1", "8.0.1", None)];
    let silent_b = members(&silent_b);
    let (third, applied) = pass(&checks, &only_app, &second.file, &silent_b, at(2)).await;
    assert_eq!(applied.deleted, [("g-0".into(), "tmp".into())]);
    assert_eq!(third.file.removed, ["tmp"]);
    let (fourth, applied) = pass(&checks, &only_app, &third.file, &nodes, at(3)).await;
    assert_eq!(applied.deleted, [("g-1".into(), "tmp".into())]);
    assert_eq!(
        fourth.file.removed,
        ["tmp"],
        "written before g-1 was seen without it"
    );
    let (fifth, _) = pass(&checks, &only_app, &fourth.file, &nodes, at(4)).await;
    assert!(fifth.file.removed.is_empty());
}

#[tokio::test]
async fn nothing_unchecked_reaches_the_file() {
    let a = FakeNode::new(V8);
    let silent = [("g-0", "8.0.1", None)];
    let app = user("app", &["+get"], 300);
    let bad = user("bad", &["+nosuch"], 300);
    let checks = Checks::default();
    let wanted = [(&app, Ok(hash('a'))), (&bad, Ok(hash('b')))];
    let (none, applied) = pass(
        &checks,
        &wanted,
        &UsersFile::default(),
        &members(&silent),
        at(0),
    )
    .await;
    assert!(
        none.file.entries.is_empty(),
        "no member answers: nothing checked"
    );
    assert_eq!(none.unchecked, ["app", "bad"]);
    assert_eq!(applied.pending, [("g-0".into(), "does not answer".into())]);

    let answering = [("g-0", "8.0.1", Some(&a))];
    let (first, _) = pass(&checks, &wanted, &none.file, &members(&answering), at(1)).await;
    let names: Vec<&str> = first.file.entries.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["app"], "a refused user never reaches the file");
    assert_eq!(first.problems[0].user(), "bad");
    assert_eq!(a.line("bad"), None);
}

#[tokio::test]
async fn a_refusal_keeps_the_previous_entry_and_never_deletes_the_user() {
    let (old, new) = (FakeNode::new(V8), FakeNode::new(V9));
    let new_only = [("g-1", "9.1.2", Some(&new))];
    let both = [("g-0", "8.0.1", Some(&old)), ("g-1", "9.1.2", Some(&new))];
    let (new_only, both) = (members(&new_only), members(&both));
    let checks = Checks::default();
    // Only 9.1 answers when the rule goes in: it is accepted there.
    let app = user("app", &["+get", "+hsetex"], 300);
    let (first, _) = pass(
        &checks,
        &[(&app, Ok(hash('a')))],
        &UsersFile::default(),
        &new_only,
        at(0),
    )
    .await;
    assert_eq!(first.file.entries.len(), 1);

    // 8.0 answers again: the unchanged entry is refused there; it stays, nothing is deleted.
    let (kept, applied) = pass(&checks, &[(&app, Ok(hash('a')))], &first.file, &both, at(1)).await;
    assert_eq!(kept.file, first.file);
    let Problem::RulesRefused {
        user: who,
        version,
        answer,
    } = &kept.problems[0]
    else {
        panic!("{:?}", kept.problems);
    };
    assert_eq!((who.as_str(), version.as_str()), ("app", "8.0.1"));
    assert!(answer.contains("'+hsetex': Unknown command"), "{answer}");
    assert!(applied.deleted.is_empty(), "{applied:?}");
    assert!(new.line("app").is_some());
    assert!(
        applied.pending.iter().any(|(m, _)| m == "g-0"),
        "{applied:?}"
    );

    // A rule change refused together with a password change: the password still changes,
    // with the rules that are accepted everywhere.
    let plain = user("app", &["+get"], 0);
    let hsetex = user("app", &["+get", "+hsetex"], 0);
    let (plain_first, _) = pass(
        &checks,
        &[(&plain, Ok(hash('a')))],
        &UsersFile::default(),
        &both,
        at(2),
    )
    .await;
    let (changed, _) = pass(
        &checks,
        &[(&hsetex, Ok(hash('b')))],
        &plain_first.file,
        &both,
        at(3),
    )
    .await;
    assert_eq!(changed.file.entries[0].rules, ["+get"]);
    assert_eq!(changed.file.entries[0].hashes, [hash('b')]);
    assert_eq!(
        old.line("app"),
        Some(format!("user app on #{} +get", hash('b')))
    );
}

#[tokio::test]
async fn a_busy_server_is_asked_again_not_taken_for_a_refusal() {
    let a = FakeNode::new(V8);
    let nodes = [("g-0", "8.0.1", Some(&a))];
    let nodes = members(&nodes);
    let checks = Checks::default();
    let app = user("app", &["+get"], 300);
    *a.busy.lock().unwrap() = true;
    let (busy, _) = pass(
        &checks,
        &[(&app, Ok(hash('a')))],
        &UsersFile::default(),
        &nodes,
        at(0),
    )
    .await;
    assert!(busy.problems.is_empty(), "{:?}", busy.problems);
    assert_eq!(busy.unchecked, ["app"]);
    *a.busy.lock().unwrap() = false;
    let (done, _) = pass(&checks, &[(&app, Ok(hash('a')))], &busy.file, &nodes, at(1)).await;
    assert_eq!(done.file.entries.len(), 1);
    assert!(a.line("app").is_some());
}

#[tokio::test]
async fn a_missing_password_keeps_the_previous_one_and_a_silent_member_is_pending() {
    let a = FakeNode::new(V8);
    let nodes = [("g-0", "8.0.1", Some(&a)), ("g-1", "8.0.1", None)];
    let nodes = members(&nodes);
    let checks = Checks::default();
    let app = user("app", &["+get"], 300);
    let (first, applied) = pass(
        &checks,
        &[(&app, Ok(hash('a')))],
        &UsersFile::default(),
        &nodes,
        at(0),
    )
    .await;
    assert_eq!(applied.pending, [("g-1".into(), "does not answer".into())]);

    let gone = || {
        Err(PasswordError::NoKey(crd_types::template::SecretKeyRef {
            name: "app-pw".into(),
            key: "password".into(),
        }))
    };
    let (prepared, _) = pass(&checks, &[(&app, gone())], &first.file, &nodes, at(1)).await;
    assert_eq!(prepared.file, first.file);
    assert_eq!(
        prepared.problems[0].to_string(),
        "user app: Secret app-pw has no key password; it keeps its previous password, if it had one"
    );
    let fresh = user("fresh", &["+get"], 300);
    let (prepared, _) = pass(
        &checks,
        &[(&fresh, gone())],
        &UsersFile::default(),
        &nodes,
        at(2),
    )
    .await;
    assert!(prepared.file.entries.is_empty());
    assert_eq!(prepared.problems[0].user(), "fresh");
}

#[tokio::test]
async fn a_new_password_overlaps_the_old_until_every_member_has_both_and_time_passed() {
    let (a, b) = (FakeNode::new(V8), FakeNode::new(V8));
    let both = [("g-0", "8.0.1", Some(&a)), ("g-1", "8.0.1", Some(&b))];
    let one_silent = [("g-0", "8.0.1", Some(&a)), ("g-1", "8.0.1", None)];
    let (both, one_silent) = (members(&both), members(&one_silent));
    let checks = Checks::default();
    let app = user("app", &["+get"], 60);
    let new = [(&app, Ok(hash('b')))];
    let (start, _) = pass(
        &checks,
        &[(&app, Ok(hash('a')))],
        &UsersFile::default(),
        &both,
        at(0),
    )
    .await;

    let (rotating, _) = pass(&checks, &new, &start.file, &one_silent, at(10)).await;
    let entry = &rotating.file.entries[0];
    assert_eq!(entry.hashes, [hash('a'), hash('b')]);
    assert_eq!(entry.rotating_since, Some(at(10)));
    let pair = format!("user app on #{} #{} +get", hash('a'), hash('b'));
    assert_eq!(a.line("app"), Some(pair));

    // g-1 answers and gets both; before the overlap is over, nothing drops.
    let (kept, applied) = pass(&checks, &new, &rotating.file, &both, at(20)).await;
    assert_eq!(kept.file, rotating.file);
    assert_eq!(applied.set, [("g-1".into(), "app".into())]);
    // The overlap has passed but g-1 is silent: the old password stays.
    let (kept, _) = pass(&checks, &new, &kept.file, &one_silent, at(100)).await;
    assert_eq!(kept.file, rotating.file);
    // A clock that stepped back does not end it either.
    let (kept, _) = pass(&checks, &new, &kept.file, &both, at(5)).await;
    assert_eq!(kept.file, rotating.file);
    // A restarted controller (no memo) carries on from the file.
    let fresh = Checks::default();
    let (done, _) = pass(&fresh, &new, &kept.file, &both, at(110)).await;
    assert_eq!(done.file.entries[0].hashes, [hash('b')]);
    assert_eq!(done.file.entries[0].rotating_since, None);
    assert_eq!(
        b.line("app"),
        Some(format!("user app on #{} +get", hash('b')))
    );

    // Without overlap a change replaces the password at once.
    let quick = user("app", &["+get"], 0);
    let (now, _) = pass(
        &fresh,
        &[(&quick, Ok(hash('c')))],
        &done.file,
        &both,
        at(120),
    )
    .await;
    assert_eq!(now.file.entries[0].hashes, [hash('c')]);
}

#[test]
fn the_operators_own_users_are_never_read_back_from_the_users_secret() {
    let hash = "a".repeat(64);
    let text = format!(
        "user probe reset resetchannels on #{hash} +ping\n# removed probe\nuser app reset resetchannels on #{hash} +get\n"
    );
    let file = parse_file(&text);
    let names: Vec<&str> = file.entries.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["app"]);
    assert!(file.removed.is_empty(), "{:?}", file.removed);
}
