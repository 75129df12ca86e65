use std::sync::Mutex;

use super::*;
use crate::shared::commands::ErrorKind;

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + seconds).unwrap()
}

const MINUTE: Duration = Duration::from_secs(60);

fn facts(recorded: Option<Timestamp>, now: Timestamp) -> Facts {
    Facts {
        recorded,
        overlap: MINUTE,
        drop_allowed: true,
        now,
    }
}

fn rep(operator: &str) -> String {
    derived_password(REPLICATION_PASSWORD_PREFIX, operator)
}

/// A member started with operator password `started`: its users' hashes and its own login,
/// as Valkey keeps them; it may refuse commands or lose its connection.
struct Fake {
    kind: Kind,
    operator: Mutex<BTreeSet<String>>,
    replication: Mutex<BTreeSet<String>>,
    outgoing: Mutex<String>,
    refuses: bool,
    gone: bool,
}

impl Fake {
    fn started(kind: Kind, password: &str) -> Fake {
        let outgoing = match kind {
            Kind::DataNode => rep(password),
            Kind::Sentinel => password.to_string(),
        };
        Fake {
            kind,
            operator: Mutex::new([sha256_hex(password)].into()),
            replication: Mutex::new(match kind {
                Kind::DataNode => [sha256_hex(rep(password))].into(),
                Kind::Sentinel => BTreeSet::new(),
            }),
            outgoing: Mutex::new(outgoing),
            refuses: false,
            gone: false,
        }
    }

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

    /// Whether `password` logs in as `operator` (and, on a data node, its replication
    /// password as `replication`).
    fn takes(&self, password: &str) -> bool {
        let operator = self
            .operator
            .lock()
            .unwrap()
            .contains(&sha256_hex(password));
        let replication = self.kind == Kind::Sentinel
            || self
                .replication
                .lock()
                .unwrap()
                .contains(&sha256_hex(rep(password)));
        operator && replication
    }

    /// Whether it logs in to the others with `password`.
    fn logs_in_with(&self, password: &str) -> bool {
        *self.outgoing.lock().unwrap() == Wanted::of(password).outgoing(self.kind)
    }

    fn member<'a>(&'a self, name: &'a str) -> Member<'a, Fake> {
        Member {
            name,
            kind: self.kind,
            conn: Some(self),
        }
    }
}

impl AclMember for Fake {
    async fn acl_lines(&self) -> Result<Vec<String>, ValkeyError> {
        let line = |user: &str, hashes: &BTreeSet<String>| {
            let hashes: Vec<String> = hashes.iter().map(|h| format!("#{h}")).collect();
            format!("user {user} on {} ~* &* +@all", hashes.join(" "))
        };
        let mut lines = vec![
            "user default on nopass ~* &* +@all".to_string(),
            line("operator", &self.operator.lock().unwrap()),
        ];
        if self.kind == Kind::DataNode {
            lines.push(line("replication", &self.replication.lock().unwrap()));
        }
        Ok(lines)
    }

    async fn acl_set(&self, user: &str, args: &[String]) -> Result<(), ValkeyError> {
        self.answer()?;
        let mut hashes = match (user, self.kind) {
            ("operator", _) => self.operator.lock().unwrap(),
            ("replication", Kind::DataNode) => self.replication.lock().unwrap(),
            _ => panic!("no such user here: {user}"),
        };
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
        unreachable!("no user is deleted")
    }
}

impl OutgoingLogin for Fake {
    async fn outgoing(&self) -> Result<Option<String>, ValkeyError> {
        Ok(Some(self.outgoing.lock().unwrap().clone()))
    }

    async fn switch_outgoing(&self, password: &str) -> Result<(), ValkeyError> {
        self.answer()?;
        *self.outgoing.lock().unwrap() = password.to_string();
        Ok(())
    }
}

#[tokio::test]
async fn a_rotation_adds_then_switches_then_drops_after_the_overlap() {
    let a = Fake::started(Kind::DataNode, "old");
    let b = Fake::started(Kind::DataNode, "old");
    let s = Fake::started(Kind::Sentinel, "old");
    let members = [a.member("a"), b.member("b"), s.member("s")];

    // First pass: every member takes the new password, then logs in with it.
    let first = rotate("new", &members, facts(None, at(0))).await;
    assert_eq!(first.new_added, ["a", "b", "s"]);
    assert_eq!(first.switched, ["a", "b", "s"]);
    for m in [&a, &b, &s] {
        assert!(m.takes("old") && m.takes("new") && m.logs_in_with("new"));
    }
    let rotation = first.rotation.unwrap();
    // The spec's minute is raised to the least overlap.
    assert_eq!((rotation.since, rotation.previous_until), (at(0), at(120)));
    assert!(!first.settled);

    // Within the overlap: nothing changes.
    let waiting = rotate("new", &members, facts(Some(at(0)), at(119))).await;
    assert_eq!(waiting.rotation.unwrap().since, at(0));
    assert!(waiting.new_added.is_empty() && waiting.previous_dropped.is_empty());
    assert!(a.takes("old"));

    // After it: only the new password, and the rotation is over.
    let last = rotate("new", &members, facts(Some(at(0)), at(120))).await;
    assert_eq!(last.previous_dropped, ["a", "b", "s"]);
    assert_eq!((last.rotation, last.settled), (None, true));
    for m in [&a, &b, &s] {
        assert!(!m.takes("old") && m.takes("new"));
    }

    // Then a pass has nothing to do.
    let after = rotate("new", &members, facts(None, at(200))).await;
    assert_eq!(
        after,
        Outcome {
            settled: true,
            ..Outcome::default()
        }
    );
}

#[tokio::test]
async fn a_drop_stopped_half_way_goes_on_without_bringing_the_previous_password_back() {
    let a = Fake::started(Kind::DataNode, "old");
    let b = Fake::started(Kind::DataNode, "old");
    let members = [a.member("a"), b.member("b")];
    rotate("new", &members, facts(None, at(0))).await;
    // The pass that dropped stopped after a: b still holds both.
    for user in ["operator", "replication"] {
        let new_hash = match user {
            "operator" => sha256_hex("new"),
            _ => sha256_hex(rep("new")),
        };
        let only = ["resetpass".to_string(), format!("#{new_hash}")];
        a.acl_set(user, &only).await.unwrap();
    }
    let pass = rotate("new", &members, facts(Some(at(0)), at(130))).await;
    assert_eq!(pass.previous_dropped, ["b"]);
    assert!(pass.new_added.is_empty());
    assert_eq!((pass.rotation, pass.settled), (None, true));
    for m in [&a, &b] {
        assert!(!m.takes("old") && m.takes("new"));
    }
}

#[tokio::test]
async fn a_silent_member_holds_back_the_switch_and_the_drop() {
    let a = Fake::started(Kind::DataNode, "old");
    let b = Fake::started(Kind::DataNode, "old");
    let with_b = |b_answers: bool| {
        [
            a.member("a"),
            Member {
                conn: Some(&b).filter(|_| b_answers),
                ..b.member("b")
            },
        ]
    };
    let first = rotate("new", &with_b(false), facts(None, at(0))).await;
    assert_eq!(
        (first.new_added.as_slice(), first.silent.as_slice()),
        (&["a".to_string()][..], &["b".to_string()][..])
    );
    // a must not log in with a password b would refuse.
    assert!(first.switched.is_empty() && a.logs_in_with("old"));
    // Long after the overlap, b still silent: nothing is dropped.
    let later = rotate("new", &with_b(false), facts(Some(at(0)), at(600))).await;
    assert!(later.previous_dropped.is_empty() && a.takes("old"));
    let rotation = later.rotation.unwrap();
    assert_eq!((rotation.members_with_new, rotation.members), (1, 2));
    assert!(!later.settled);
    // b back: it takes the new password, both switch, and the overlap starts again.
    let back = rotate("new", &with_b(true), facts(Some(at(0)), at(700))).await;
    assert_eq!(back.new_added, ["b"]);
    assert_eq!(back.switched, ["a", "b"]);
    assert_eq!(back.rotation.unwrap().since, at(700));
}

#[tokio::test]
async fn a_member_restarted_during_the_overlap_gets_the_previous_password_back() {
    let a = Fake::started(Kind::DataNode, "old");
    let b = Fake::started(Kind::DataNode, "old");
    let members = [a.member("a"), b.member("b")];
    rotate("new", &members, facts(None, at(0))).await;
    // b restarts: it starts with the new password only.
    let restarted = Fake::started(Kind::DataNode, "new");
    let members = [a.member("a"), restarted.member("b")];
    let pass = rotate("new", &members, facts(Some(at(0)), at(30))).await;
    // Hooks of pods started before still reach it with the previous one.
    assert!(restarted.takes("old") && restarted.takes("new"));
    assert!(pass.new_added.is_empty());
    // The new one arrived nowhere: the overlap keeps its start.
    assert_eq!(pass.rotation.unwrap().since, at(0));
}

#[tokio::test]
async fn pods_whose_hooks_hold_the_previous_password_hold_back_the_drop() {
    let a = Fake::started(Kind::DataNode, "old");
    let members = [a.member("a")];
    rotate("new", &members, facts(None, at(0))).await;
    let held = Facts {
        drop_allowed: false,
        ..facts(Some(at(0)), at(600))
    };
    let pass = rotate("new", &members, held).await;
    assert!(pass.previous_dropped.is_empty() && a.takes("old"));
    assert!(pass.rotation.is_some());
}

#[tokio::test]
async fn a_refusing_member_stops_every_switch_of_the_pass() {
    let a = Fake::started(Kind::DataNode, "old");
    let b = Fake {
        refuses: true,
        ..Fake::started(Kind::DataNode, "old")
    };
    let pass = rotate("new", &[a.member("a"), b.member("b")], facts(None, at(0))).await;
    assert_eq!(pass.failed, [("b".to_string(), "ERR refused".to_string())]);
    assert!(pass.switched.is_empty() && a.logs_in_with("old"));
    let rotation = pass.rotation.unwrap();
    assert_eq!((rotation.members_with_new, rotation.members), (1, 2));
}

#[tokio::test]
async fn a_member_going_away_mid_pass_is_silent_not_refusing() {
    let a = Fake::started(Kind::DataNode, "old");
    let b = Fake {
        gone: true,
        ..Fake::started(Kind::DataNode, "old")
    };
    let pass = rotate("new", &[a.member("a"), b.member("b")], facts(None, at(0))).await;
    assert!(pass.failed.is_empty());
    assert_eq!(pass.silent, ["b"]);
    assert!(pass.switched.is_empty());
}

#[test]
fn the_sentinels_have_no_replication_user_and_log_in_with_the_operator_password() {
    let wanted = Wanted::of("new");
    let sentinel = Read {
        kind: Kind::Sentinel,
        operator: [wanted.operator_hash.clone()].into(),
        replication: BTreeSet::new(),
        switched: true,
    };
    assert!(sentinel.settled(&wanted));
    assert_eq!(wanted.outgoing(Kind::Sentinel), "new");
    assert_eq!(wanted.outgoing(Kind::DataNode), rep("new"));
    let plan = plan(&wanted, &[Some(sentinel)], facts(None, at(0)));
    assert_eq!(
        plan,
        Plan {
            add: vec![Add::default()],
            ..Plan::default()
        }
    );
    assert_eq!(format!("{wanted:?}"), "Wanted(<redacted>)");
}
