use std::sync::Mutex;

use super::*;
use crate::shared::commands::ErrorKind;

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + seconds).unwrap()
}

fn set(hashes: &[&str]) -> Option<BTreeSet<String>> {
    Some(hashes.iter().map(|h| h.to_string()).collect())
}

const MINUTE: Duration = Duration::from_secs(60);

fn facts(recorded: Option<Timestamp>, overlap: Duration, now: Timestamp) -> Facts {
    Facts {
        recorded,
        overlap,
        drop_allowed: true,
        now,
    }
}

#[test]
fn nothing_happens_while_every_data_node_has_the_new_password_alone() {
    let plan = plan("n", &[set(&["n"]), set(&["n"])], facts(None, MINUTE, at(0)));
    assert_eq!(plan.rotation, None);
    assert!(plan.add.iter().all(BTreeSet::is_empty));
    assert!(plan.keep_only_new.is_empty());
}

#[test]
fn a_new_password_is_added_next_to_the_previous_and_the_overlap_starts() {
    let plan = plan(
        "n",
        &[set(&["o"]), set(&["o"]), None],
        facts(None, MINUTE, at(0)),
    );
    assert_eq!(
        plan.add,
        [set(&["n"]).unwrap(), set(&["n"]).unwrap(), BTreeSet::new()]
    );
    assert!(plan.keep_only_new.is_empty());
    let rotation = plan.rotation.unwrap();
    assert_eq!((rotation.since, rotation.previous_until), (at(0), at(60)));
    assert_eq!((rotation.members_with_new, rotation.members), (2, 3));
}

#[test]
fn the_previous_password_goes_only_after_the_overlap_and_only_when_every_data_node_answered() {
    let both = || set(&["o", "n"]);
    // Within the overlap: nothing.
    let plan_at = |now, members: &[Option<BTreeSet<String>>]| {
        plan("n", members, facts(Some(at(0)), MINUTE, at(now)))
    };
    let early = plan_at(59, &[both(), both()]);
    assert!(early.keep_only_new.is_empty());
    assert_eq!(early.rotation.unwrap().since, at(0));
    // A silent data node holds it back.
    let silent = plan_at(120, &[both(), None]);
    assert!(silent.keep_only_new.is_empty());
    assert!(silent.rotation.is_some());
    // Then each data node with more than the new one keeps only it.
    let done = plan_at(60, &[both(), set(&["n"])]);
    assert_eq!(done.keep_only_new, [0]);
    assert!(done.add.iter().all(BTreeSet::is_empty));
}

#[test]
fn a_data_node_restarted_during_the_overlap_gets_the_previous_passwords_back() {
    let plan = plan(
        "n",
        &[set(&["o", "n"]), set(&["n"])],
        facts(Some(at(0)), MINUTE, at(10)),
    );
    assert_eq!(plan.add, [BTreeSet::new(), set(&["o"]).unwrap()]);
    // The new one did not arrive anywhere: the overlap keeps its start.
    assert_eq!(plan.rotation.unwrap().since, at(0));
}

#[test]
fn another_change_during_the_overlap_starts_it_again() {
    let plan = plan(
        "m",
        &[set(&["o", "n"]), set(&["o", "n"])],
        facts(Some(at(0)), MINUTE, at(50)),
    );
    assert_eq!(plan.add, [set(&["m"]).unwrap(), set(&["m"]).unwrap()]);
    assert_eq!(plan.rotation.unwrap().since, at(50));
}

#[test]
fn a_secret_changed_back_during_the_overlap_starts_it_again() {
    // Back to "o", which every data node still takes: the status records the overlap for
    // another version of the Secret, so the pass is given none, and "n" goes only after a
    // whole overlap from now.
    let plan = plan(
        "o",
        &[set(&["o", "n"]), set(&["o", "n"])],
        facts(None, MINUTE, at(50)),
    );
    assert!(plan.add.iter().all(BTreeSet::is_empty) && plan.keep_only_new.is_empty());
    assert_eq!(plan.rotation.unwrap().previous_until, at(110));
}

#[test]
fn no_previous_password_goes_while_a_data_node_lacks_the_probe_user() {
    let held = Facts {
        drop_allowed: false,
        ..facts(Some(at(0)), MINUTE, at(600))
    };
    let plan = plan("n", &[set(&["o", "n"]), set(&["o", "n"])], held);
    assert!(plan.keep_only_new.is_empty());
    assert!(plan.rotation.is_some());
}

#[test]
fn a_rotation_recorded_with_a_data_node_silent_stays_recorded() {
    let recorded = plan(
        "n",
        &[set(&["n"]), None],
        facts(Some(at(0)), MINUTE, at(600)),
    );
    assert!(recorded.rotation.is_some());
    // A record lost meanwhile (status rewritten): the silent one is left for later.
    let lost = plan("n", &[set(&["n"]), None], facts(None, MINUTE, at(600)));
    assert_eq!(lost.rotation, None);
}

#[test]
fn overlap_zero_still_waits_for_every_data_node_to_have_the_new_one() {
    let first = plan(
        "n",
        &[set(&["o"]), set(&["o"])],
        facts(None, Duration::ZERO, at(0)),
    );
    assert!(
        first.keep_only_new.is_empty(),
        "added this pass, dropped the next"
    );
    let next = plan(
        "n",
        &[set(&["o", "n"]), set(&["o", "n"])],
        facts(Some(at(0)), Duration::ZERO, at(1)),
    );
    assert_eq!(next.keep_only_new, [0, 1]);
}

#[test]
fn hashes_are_read_from_an_acl_list_line() {
    let h = "a".repeat(64);
    let line = format!(
        "user default on sanitize-payload #{h} #{} ~* &* +@all",
        "B".repeat(64)
    );
    assert_eq!(
        hashes_in(&line),
        [h, "b".repeat(64)].into_iter().collect::<BTreeSet<_>>()
    );
    assert!(hashes_in("user default on nopass ~* &* +@all").is_empty());
}

/// A data node's default user: its hashes, its `requirepass` value (the password it
/// started with), whether it refuses commands, and whether its connection is gone after
/// `ACL LIST` (its pod stopping).
struct Fake {
    hashes: Mutex<BTreeSet<String>>,
    requirepass: Mutex<String>,
    refuses: bool,
    gone: bool,
    /// Started from an older operator's template: no `probe` user.
    old_template: bool,
}

impl Fake {
    /// Started with the last of `passwords`, then given the others.
    fn with(passwords: &[&str]) -> Fake {
        Fake {
            hashes: Mutex::new(passwords.iter().map(sha256_hex).collect()),
            requirepass: Mutex::new(passwords.last().unwrap().to_string()),
            refuses: false,
            gone: false,
            old_template: false,
        }
    }

    /// How it answers a command that changes something.
    fn answer(&self) -> Result<(), ValkeyError> {
        if self.gone {
            return Err(ValkeyError::new(
                ErrorKind::Unreachable,
                "Connection closed.",
            ));
        }
        if self.refuses {
            return Err(ValkeyError::new(ErrorKind::Refused, "ERR refused"));
        }
        Ok(())
    }

    fn takes(&self, password: &str) -> bool {
        self.hashes.lock().unwrap().contains(&sha256_hex(password))
    }
}

impl AclMember for Fake {
    async fn acl_lines(&self) -> Result<Vec<String>, ValkeyError> {
        let hashes: Vec<String> = self
            .hashes
            .lock()
            .unwrap()
            .iter()
            .map(|h| format!("#{h}"))
            .collect();
        let mut lines = vec![
            format!(
                "user default on sanitize-payload {} ~* &* +@all",
                hashes.join(" ")
            ),
            format!("user operator on #{} ~* &* +@all", "c".repeat(64)),
        ];
        if !self.old_template {
            lines.push("user probe on nopass sanitize-payload resetchannels -@all +ping".into());
        }
        Ok(lines)
    }

    async fn acl_set(&self, user: &str, args: &[String]) -> Result<(), ValkeyError> {
        assert_eq!(user, "default");
        self.answer()?;
        let mut hashes = self.hashes.lock().unwrap();
        for a in args {
            match a.strip_prefix('#') {
                Some(hash) => hashes.insert(hash.to_string()),
                None if a == "resetpass" => {
                    hashes.clear();
                    true
                }
                None => panic!("only hashes and resetpass: {a}"),
            };
        }
        Ok(())
    }

    async fn acl_del(&self, _: &[String]) -> Result<(), ValkeyError> {
        unreachable!("the default user is never deleted")
    }
}

impl RequirePass for Fake {
    async fn set_requirepass(&self, password: &str) -> Result<(), ValkeyError> {
        self.answer()?;
        // As Valkey: the same value again changes nothing.
        let mut value = self.requirepass.lock().unwrap();
        if *value != password {
            *value = password.to_string();
            *self.hashes.lock().unwrap() = [sha256_hex(password)].into_iter().collect();
        }
        Ok(())
    }
}

#[tokio::test]
async fn a_rotation_runs_from_the_first_pass_to_the_last() {
    let (a, b) = (Fake::with(&["old"]), Fake::with(&["old"]));
    let members = |b_answers: bool| {
        vec![
            Member {
                name: "a",
                conn: Some(&a),
            },
            Member {
                name: "b",
                conn: Some(&b).filter(|_| b_answers),
            },
        ]
    };
    // b silent: a takes the new one, b waits.
    let first = rotate("new", &members(false), facts(None, MINUTE, at(0))).await;
    assert_eq!(first.new_added, ["a"]);
    assert!(a.takes("old") && a.takes("new") && !b.takes("new"));
    let rotation = first.rotation.unwrap();
    assert_eq!((rotation.members_with_new, rotation.members), (1, 2));
    // b back: it takes it too, and the overlap starts again.
    let second = rotate(
        "new",
        &members(true),
        facts(Some(rotation.since), MINUTE, at(30)),
    )
    .await;
    assert_eq!(second.new_added, ["b"]);
    let rotation = second.rotation.unwrap();
    assert_eq!((rotation.since, rotation.members_with_new), (at(30), 2));
    // b restarts: it starts with the new password only, and gets the previous one back.
    *b.hashes.lock().unwrap() = [sha256_hex("new")].into_iter().collect();
    *b.requirepass.lock().unwrap() = "new".into();
    let restarted = rotate("new", &members(true), facts(Some(at(30)), MINUTE, at(60))).await;
    assert!(restarted.new_added.is_empty() && b.takes("old") && b.takes("new"));
    assert_eq!(
        restarted.rotation.unwrap().since,
        at(30),
        "the overlap keeps its start"
    );
    // Before the overlap ends, both passwords work; after it, only the new one.
    let third = rotate("new", &members(true), facts(Some(at(30)), MINUTE, at(89))).await;
    assert!(third.previous_dropped.is_empty() && a.takes("old"));
    let last = rotate("new", &members(true), facts(Some(at(30)), MINUTE, at(90))).await;
    assert_eq!(last.previous_dropped, ["a", "b"]);
    assert_eq!(last.rotation, None);
    for node in [&a, &b] {
        assert!(node.takes("new") && !node.takes("old"));
    }
}

#[tokio::test]
async fn a_refusing_data_node_keeps_the_rotation_recorded() {
    let a = Fake::with(&["old", "new"]);
    let b = Fake {
        refuses: true,
        ..Fake::with(&["old", "new"])
    };
    let members = [
        Member {
            name: "a",
            conn: Some(&a),
        },
        Member {
            name: "b",
            conn: Some(&b),
        },
    ];
    let outcome = rotate("new", &members, facts(Some(at(0)), MINUTE, at(60))).await;
    assert_eq!(outcome.previous_dropped, ["a"]);
    assert_eq!(
        outcome.failed,
        [("b".to_string(), "ERR refused".to_string())]
    );
    assert!(
        outcome.rotation.is_some(),
        "b still takes the previous password"
    );
}

#[tokio::test]
async fn a_data_node_on_an_older_template_holds_the_previous_password() {
    let a = Fake::with(&["old", "new"]);
    let b = Fake {
        old_template: true,
        ..Fake::with(&["new", "old"])
    };
    let members = [
        Member {
            name: "a",
            conn: Some(&a),
        },
        Member {
            name: "b",
            conn: Some(&b),
        },
    ];
    let outcome = rotate("new", &members, facts(Some(at(0)), MINUTE, at(600))).await;
    assert!(outcome.previous_dropped.is_empty());
    assert_eq!(outcome.without_probe, ["b"]);
    assert!(
        a.takes("old") && b.takes("old"),
        "its probe still logs in with it"
    );
    assert!(outcome.rotation.is_some());
}

#[test]
fn the_overlap_starts_at_a_whole_second_never_earlier() {
    // The status keeps whole seconds: a start rounded down would end the overlap early.
    let now = at(0).checked_add(SignedDuration::from_millis(300)).unwrap();
    let started = plan("n", &[set(&["o"])], facts(None, MINUTE, now));
    let rotation = started.rotation.unwrap();
    assert_eq!((rotation.since, rotation.previous_until), (at(1), at(61)));
    let whole = plan("n", &[set(&["o"])], facts(None, MINUTE, at(5)));
    assert_eq!(whole.rotation.unwrap().since, at(5));
}

#[tokio::test]
async fn a_sentinel_drops_the_previous_password_without_config_set() {
    let fake = Fake::with(&["old"]);
    let sentinel = Sentinel(&fake);
    let members = [Member {
        name: "s",
        conn: Some(&sentinel),
    }];
    let added = rotate("new", &members, facts(None, MINUTE, at(0))).await;
    assert_eq!(added.new_added, ["s"]);
    assert!(fake.takes("old") && fake.takes("new"));
    let since = added.rotation.unwrap().since;
    let dropped = rotate("new", &members, facts(Some(since), MINUTE, at(60))).await;
    assert_eq!(dropped.previous_dropped, ["s"]);
    assert!(fake.takes("new") && !fake.takes("old"));
    assert_eq!(
        *fake.requirepass.lock().unwrap(),
        "old",
        "Sentinel has no CONFIG SET: its requirepass is never sent"
    );
}

#[tokio::test]
async fn a_data_node_going_away_mid_pass_is_silent_not_refusing() {
    let a = Fake::with(&["old"]);
    let b = Fake {
        gone: true,
        ..Fake::with(&["old"])
    };
    let members = [
        Member {
            name: "a",
            conn: Some(&a),
        },
        Member {
            name: "b",
            conn: Some(&b),
        },
    ];
    let outcome = rotate("new", &members, facts(None, MINUTE, at(0))).await;
    assert_eq!(outcome.new_added, ["a"]);
    assert_eq!(outcome.failed, []);
    assert_eq!(outcome.silent, ["b"]);
    assert_eq!(outcome.rotation.unwrap().members_with_new, 1);
}
