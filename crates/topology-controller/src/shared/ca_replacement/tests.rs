use std::sync::Arc;
use std::time::UNIX_EPOCH;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, RootCertStore};

use super::*;
use crate::shared::issuer::{CA_LIFETIME, Leaf};

const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(24 * 3600);

fn now() -> SystemTime {
    // 2026-12-01T00:00:00Z.
    UNIX_EPOCH + Duration::from_secs(1_796_083_200)
}

fn ca(at: SystemTime) -> Authority {
    Authority::generate("shop", "orders", at).unwrap()
}

fn request(i: usize) -> Request {
    Request::member(&format!("orders-{i}"), "shop", &format!("10.96.0.{i}"), &[]).unwrap()
}

/// Whether a peer trusting `trusted` (PEM, one CA or more) accepts `cert`, as Valkey checks
/// peers: the chain to a CA, not the names.
fn accepts(trusted: &str, cert: &str) -> Result<(), rustls::Error> {
    let mut roots = RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(trusted.as_bytes()) {
        roots.add(ca.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .unwrap();
    let cert = CertificateDer::from_pem_slice(cert.as_bytes()).unwrap();
    let name = ServerName::try_from("peer.invalid").unwrap();
    let at = UnixTime::since_unix_epoch(now().duration_since(UNIX_EPOCH).unwrap() + 2 * DAY);
    match verifier.verify_server_cert(&cert, &[], &name, &[], at) {
        Ok(_) => Ok(()),
        Err(rustls::Error::InvalidCertificate(CertificateError::NotValidForName))
        | Err(rustls::Error::InvalidCertificate(CertificateError::NotValidForNameContext {
            ..
        })) => Ok(()),
        Err(e) => Err(e),
    }
}

fn held<'a>(ca: &'a str, leaf: &'a Leaf) -> Held<'a> {
    Held {
        cert: Some(&leaf.cert_pem),
        key: Some(&leaf.key_pem),
        ca: Some(ca),
    }
}

fn trusting(current: Authority, next: Authority) -> Cas {
    Cas {
        current,
        next: Some(Next {
            authority: next,
            phase: Phase::Trusting,
        }),
    }
}

#[test]
fn a_replacement_is_due_when_asked_anew_or_with_a_third_of_the_life_left() {
    let current = ca(now());
    assert_eq!(due(None, None, &current, now()), None);
    assert_eq!(due(Some(""), None, &current, now()), None);
    assert_eq!(due(Some("1"), Some("1"), &current, now()), None);
    assert_eq!(
        due(Some("2"), Some("1"), &current, now()),
        Some("the topology asks for it (\"2\")".into())
    );
    assert!(due(Some("1"), None, &current, now()).is_some());
    let late = now() + CA_LIFETIME - CA_LIFETIME / 3 - DAY;
    assert_eq!(due(None, None, &current, late), None);
    let later = now() + CA_LIFETIME - CA_LIFETIME / 3 + DAY;
    let why = due(None, None, &current, later).unwrap();
    assert!(why.starts_with("it expires in 121"), "{why}");
}

#[test]
fn both_cas_are_trusted_while_the_next_one_comes() {
    let (a, b) = (ca(now()), ca(now() + HOUR));
    assert_ne!(a.cert_pem, b.cert_pem);
    let cas = trusting(a, b);
    let trusted = cas.trusted();
    assert_eq!(
        CertificateDer::pem_slice_iter(trusted.as_bytes()).count(),
        2
    );
    let from_a = cas.current.issue(&request(0), now()).unwrap();
    let from_b = cas
        .next
        .as_ref()
        .unwrap()
        .authority
        .issue(&request(0), now())
        .unwrap();
    accepts(&trusted, &from_a.cert_pem).unwrap();
    accepts(&trusted, &from_b.cert_pem).unwrap();
    accepts(&cas.current.cert_pem, &from_b.cert_pem).unwrap_err();
}

#[test]
fn each_phase_issues_from_its_ca_with_both_trusted() {
    let (a, b) = (ca(now()), ca(now() + HOUR));
    let stranger = ca(now() + 2 * HOUR);
    let from_a = a.issue(&request(0), now()).unwrap();
    let from_b = b.issue(&request(0), now()).unwrap();
    let from_stranger = stranger.issue(&request(0), now()).unwrap();
    let a_pem = a.cert_pem.clone();
    let mut cas = trusting(a, b);
    let both = cas.trusted();
    let issue = |why: &str| Verdict::Issue(why.to_string());
    let ca_changed = issue("its ca.crt is not the CA the topology trusts");

    // Trusting: certificates from the current CA, ca.crt both.
    assert!(std::ptr::eq(cas.issuing(), &cas.current));
    assert_eq!(
        cas.judge(&held(&a_pem, &from_a), &request(0), now()),
        ca_changed
    );
    assert_eq!(
        cas.judge(&held(&both, &from_a), &request(0), now()),
        Verdict::Keep
    );
    assert_eq!(
        cas.judge(&held(&both, &from_b), &request(0), now()),
        issue("its certificate is from the next CA, not trusted by all yet")
    );
    assert!(matches!(
        cas.judge(&held(&both, &from_stranger), &request(0), now()),
        Verdict::Refuse(_)
    ));

    // Switching: from the next CA.
    cas.next.as_mut().unwrap().phase = Phase::Switching;
    assert!(std::ptr::eq(
        cas.issuing(),
        &cas.next.as_ref().unwrap().authority
    ));
    assert_eq!(
        cas.judge(&held(&both, &from_a), &request(0), now()),
        issue("the CA is being replaced")
    );
    assert_eq!(
        cas.judge(&held(&both, &from_b), &request(0), now()),
        Verdict::Keep
    );
    assert!(matches!(
        cas.judge(&held(&both, &from_stranger), &request(0), now()),
        Verdict::Refuse(_)
    ));

    // Promoted: the next CA alone.
    let promoted = Cas {
        current: cas.next.take().unwrap().authority,
        next: None,
    };
    assert_eq!(
        promoted.judge(&held(&both, &from_b), &request(0), now()),
        ca_changed
    );
    let alone = promoted.trusted();
    assert_eq!(
        promoted.judge(&held(&alone, &from_b), &request(0), now()),
        Verdict::Keep
    );
    assert!(matches!(
        promoted.judge(&held(&alone, &from_a), &request(0), now()),
        Verdict::Refuse(_)
    ));
}

fn replacement(phase: Phase) -> Replacement {
    Replacement {
        phase,
        next_cert_pem: String::new(),
        clients_told: unix(now()),
        overlap: HOUR,
    }
}

fn member(name: &str, secret_done: bool, serving: Option<bool>) -> MemberCa<'_> {
    MemberCa {
        name,
        secret_done,
        serving,
    }
}

#[test]
fn a_step_waits_for_every_member_and_then_for_the_clients() {
    let all = |serving| vec![member("a", true, serving), member("b", true, Some(true))];
    let trusting = replacement(Phase::Trusting);
    let later = now() + 2 * HOUR;
    assert_eq!(
        step(&trusting, &all(Some(false)), later),
        Step::Wait("waiting for members to trust both CAs: a".into())
    );
    assert_eq!(
        step(&trusting, &all(None), later),
        Step::Wait("waiting for members to trust both CAs: a".into())
    );
    let unwritten = [member("a", true, Some(true)), member("c", false, None)];
    assert_eq!(
        step(&trusting, &unwritten, later),
        Step::Wait("waiting for members to trust both CAs: c".into())
    );
    let Step::Wait(why) = step(&trusting, &all(Some(true)), now() + HOUR / 2) else {
        panic!("the overlap has not passed");
    };
    assert!(why.contains("until clientsUntil"), "{why}");
    assert_eq!(
        step(
            &trusting,
            &all(Some(true)),
            now() + HOUR - Duration::from_secs(1)
        ),
        Step::Wait(why)
    );
    assert_eq!(
        step(&trusting, &all(Some(true)), now() + HOUR),
        Step::Switch
    );

    let switching = replacement(Phase::Switching);
    assert_eq!(
        step(&switching, &all(Some(false)), later),
        Step::Wait("waiting for members to serve a certificate of the next CA: a".into())
    );
    // No overlap before the promotion: clients met the next CA's certificates at the switch.
    assert_eq!(step(&switching, &all(Some(true)), now()), Step::Promote);
}

/// One member: what its Secret holds, and what its server has loaded.
struct Sim {
    secret: (String, Leaf),
    loaded: (String, Leaf),
}

/// A reconcile's writes: each member's Secret as the CAs judge it.
fn write(cas: &Cas, members: &mut [Sim]) {
    for (i, m) in members.iter_mut().enumerate() {
        let verdict = cas.judge(&held(&m.secret.0, &m.secret.1), &request(i), now());
        match verdict {
            Verdict::Keep => {}
            Verdict::Issue(_) => {
                m.secret = (
                    cas.trusted(),
                    cas.issuing().issue(&request(i), now()).unwrap(),
                );
            }
            Verdict::Refuse(why) => panic!("member {i} refused: {why}"),
        }
    }
}

/// Every member accepts every other and the operator (presenting `operator`, trusting
/// `cas`'s bundle), both ways.
fn all_talk(cas: &Cas, operator: &Leaf, members: &[Sim], when: &str) {
    for (i, m) in members.iter().enumerate() {
        for (j, peer) in members.iter().enumerate() {
            accepts(&m.loaded.0, &peer.loaded.1.cert_pem)
                .unwrap_or_else(|e| panic!("{when}: member {i} refuses member {j}: {e}"));
        }
        accepts(&m.loaded.0, &operator.cert_pem)
            .unwrap_or_else(|e| panic!("{when}: member {i} refuses the operator: {e}"));
        accepts(&cas.trusted(), &m.loaded.1.cert_pem)
            .unwrap_or_else(|e| panic!("{when}: the operator refuses member {i}: {e}"));
    }
}

fn states(members: &[Sim]) -> Vec<MemberCa<'static>> {
    const NAMES: [&str; 3] = ["m0", "m1", "m2"];
    members
        .iter()
        .enumerate()
        .map(|(i, m)| member(NAMES[i], true, Some(m.loaded.1 == m.secret.1)))
        .collect()
}

/// The operator's certificate as a reconcile judges it.
fn operator_cert(cas: &Cas, held_now: Leaf) -> Leaf {
    let trusted = cas.trusted();
    let request = Request::operator("orders");
    let held = held(&trusted, &held_now);
    match cas.judge(&held, &request, now()) {
        Verdict::Keep => held_now,
        Verdict::Issue(_) => cas.issuing().issue(&request, now()).unwrap(),
        Verdict::Refuse(why) => panic!("operator refused: {why}"),
    }
}

#[test]
fn members_loading_in_any_order_always_trust_each_other() {
    let a = ca(now());
    let operator = a.issue(&Request::operator("orders"), now()).unwrap();
    let mut members: Vec<Sim> = (0..3)
        .map(|i| {
            let leaf = a.issue(&request(i), now()).unwrap();
            Sim {
                secret: (a.cert_pem.clone(), leaf.clone()),
                loaded: (a.cert_pem.clone(), leaf),
            }
        })
        .collect();
    let mut cas = trusting(a, ca(now() + HOUR));
    let mut operator = operator_cert(&cas, operator);
    // Members load the written Secrets in an order of their own, one at a time; each
    // reconcile between loads writes again (writes nothing new) and judges the step.
    let orders = [[2, 0, 1], [1, 2, 0], [0, 1, 2]];
    for (phase, order) in orders.iter().enumerate() {
        write(&cas, &mut members);
        all_talk(
            &cas,
            &operator,
            &members,
            &format!("phase {phase}, written"),
        );
        for (k, &i) in order.iter().enumerate() {
            let replacement = cas.replacement(Duration::ZERO);
            if let Some(r) = &replacement {
                assert!(matches!(step(r, &states(&members), now()), Step::Wait(_)));
            }
            members[i].loaded = members[i].secret.clone();
            write(&cas, &mut members);
            operator = operator_cert(&cas, operator);
            all_talk(
                &cas,
                &operator,
                &members,
                &format!("phase {phase}, {k} loaded"),
            );
        }
        let Some(r) = cas.replacement(Duration::ZERO) else {
            break;
        };
        match step(&r, &states(&members), now() + HOUR) {
            Step::Switch => cas.next.as_mut().unwrap().phase = Phase::Switching,
            Step::Promote => {
                cas = Cas {
                    current: cas.next.take().unwrap().authority,
                    next: None,
                }
            }
            Step::Wait(why) => panic!("phase {phase}: {why}"),
        }
        operator = operator_cert(&cas, operator);
        all_talk(
            &cas,
            &operator,
            &members,
            &format!("phase {phase}, stepped"),
        );
    }
    assert!(cas.next.is_none(), "promoted after the third phase");
    // In the end, the previous CA is trusted by no one.
    for m in &members {
        assert_eq!(m.loaded.0, cas.current.cert_pem);
    }
    assert_eq!(cas.trusted(), cas.current.cert_pem);
}

#[test]
fn the_status_names_the_phase_and_when_clients_must_trust_the_next_ca() {
    let trusting = replacement(Phase::Trusting);
    let waiting = Step::Wait("waiting for members to trust both CAs: a".into());
    let status = super::status(&trusting, &waiting).unwrap();
    assert_eq!(status.phase, Phase::Trusting);
    assert_eq!(status.started.0.as_second(), unix(now()));
    assert_eq!(
        status.clients_until.unwrap().0.as_second(),
        unix(now() + HOUR)
    );
    assert_eq!(
        status.waiting_for.as_deref(),
        Some("waiting for members to trust both CAs: a")
    );
    let switched = super::status(&trusting, &Step::Switch).unwrap();
    assert_eq!(switched.phase, Phase::Switching);
    assert_eq!((switched.clients_until, switched.waiting_for), (None, None));
    assert_eq!(
        super::status(&replacement(Phase::Switching), &Step::Promote),
        None
    );
}
