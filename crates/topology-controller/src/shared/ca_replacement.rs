//! Replacing the CA topology-controller keeps for a topology (docs/ca-replacement.md)
//! without a moment in which two members, or a member and the operator, do not trust each
//! other:
//!
//! 1. **Trusting.** The next CA is kept beside the current one in `<topology>-ca-key`.
//!    Every member's Secret gets both as `ca.crt` and, in the same write, a fresh
//!    certificate of the current CA: a member that serves that certificate has read the
//!    bundle too. Clients find both in `<topology>-ca`.
//! 2. **Switching**, once every member serves it and the overlap has passed since the next
//!    CA was made (clients have had that long to trust it): members and the operator are
//!    issued certificates of the next CA. Everyone trusts both, so no link breaks.
//! 3. **Promoted**, once every member serves one: the next CA becomes the CA, and members
//!    are issued certificates again with it alone as `ca.crt`.
//!
//! Pure. The phase is read from `<topology>-ca-key` (the next CA and [`PHASE_ANNOTATION`]),
//! and a step is taken only on what members serve at this reconcile, so a restarted
//! controller goes on where the last one was.

use std::time::{Duration, SystemTime};

use crd_types::rotation::CaReplacement;

use crate::shared::issuer::{Authority, BACKDATE, Held, Request, Verdict, unix};

/// The next CA's certificate in `<topology>-ca-key`, while it replaces `ca.crt`.
pub const NEXT_CA_CERT_KEY: &str = "next-ca.crt";
/// The next CA's key in `<topology>-ca-key`.
pub const NEXT_CA_KEY_KEY: &str = "next-ca.key";
/// On `<topology>-ca-key`: [`SWITCHING`] once members are issued the next CA's certificates.
pub const PHASE_ANNOTATION: &str = "valkey.rs/ca-replacement";
/// [`PHASE_ANNOTATION`]'s value in phase 2.
pub const SWITCHING: &str = "switching";
/// How long clients are given to trust the next CA when the topology does not say.
pub const DEFAULT_OVERLAP: Duration = Duration::from_secs(24 * 3600);

/// Where a replacement stands (status reports it as is).
pub use crd_types::rotation::CaReplacementPhase as Phase;

/// The phase `<topology>-ca-key`'s [`PHASE_ANNOTATION`] says, beside a next CA.
pub fn phase_from_annotation(value: Option<&str>) -> Phase {
    match value {
        Some(SWITCHING) => Phase::Switching,
        _ => Phase::Trusting,
    }
}

/// The CA replacing the current one, and how far it is.
pub struct Next {
    pub authority: Authority,
    pub phase: Phase,
}

/// A topology's CAs: the one in use, and the one replacing it, if any.
pub struct Cas {
    pub current: Authority,
    pub next: Option<Next>,
}

impl Cas {
    /// The CA certificates are issued from now.
    pub fn issuing(&self) -> &Authority {
        match &self.next {
            Some(Next {
                authority,
                phase: Phase::Switching,
            }) => authority,
            _ => &self.current,
        }
    }

    /// What members, clients and the operator trust now (`ca.crt`): the CA, or both during
    /// a replacement.
    pub fn trusted(&self) -> String {
        match &self.next {
            None => self.current.cert_pem.clone(),
            Some(next) => format!(
                "{}\n{}",
                self.current.cert_pem.trim_end(),
                next.authority.cert_pem
            ),
        }
    }

    /// What to do with the certificate a Secret holds for `request` at `now` (see
    /// [`Authority::judge`]): during a replacement, one of the CA not issuing yet or any
    /// more is issued again, and `ca.crt` must hold both.
    pub fn judge(&self, held: &Held<'_>, request: &Request, now: SystemTime) -> Verdict {
        let trusted = self.trusted();
        match &self.next {
            None => self.current.judge_among(held, request, now, &trusted, None),
            Some(Next {
                authority,
                phase: Phase::Trusting,
            }) => self.current.judge_among(
                held,
                request,
                now,
                &trusted,
                Some((
                    authority,
                    "its certificate is from the next CA, not trusted by all yet",
                )),
            ),
            Some(Next {
                authority,
                phase: Phase::Switching,
            }) => authority.judge_among(
                held,
                request,
                now,
                &trusted,
                Some((&self.current, "the CA is being replaced")),
            ),
        }
    }

    /// The replacement under way, as the operator's client carries it to [`step`].
    pub fn replacement(&self, overlap: Duration) -> Option<Replacement> {
        let next = self.next.as_ref()?;
        Some(Replacement {
            phase: next.phase,
            next_cert_pem: next.authority.cert_pem.clone(),
            clients_told: next.authority.not_before() + BACKDATE.as_secs() as i64,
            overlap,
        })
    }
}

/// Why a replacement starts now, if one should: the topology asks (`requested`, the value
/// of its `valkey.rs/replace-ca` annotation, differs from `answered`, the value the last
/// replacement or the CA's creation answered), or a third of the CA's life is left.
pub fn due(
    requested: Option<&str>,
    answered: Option<&str>,
    current: &Authority,
    now: SystemTime,
) -> Option<String> {
    if let Some(requested) = requested.filter(|r| !r.is_empty())
        && Some(requested) != answered
    {
        return Some(format!("the topology asks for it ({requested:?})"));
    }
    let life = current.not_after() - current.not_before();
    let left = current.not_after() - unix(now);
    (left < life / 3).then(|| format!("it expires in {} days", left.max(0) / (24 * 3600)))
}

/// A replacement under way, as the CA's Secret said at this reconcile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replacement {
    pub phase: Phase,
    /// The next CA, so a step is written only to the Secret that still holds it.
    pub next_cert_pem: String,
    /// When `<topology>-ca` first held both CAs (Unix seconds): the next CA's making.
    pub clients_told: i64,
    /// How long clients are given to trust the next CA before members serve it.
    pub overlap: Duration,
}

/// A member as [`step`] sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemberCa<'a> {
    pub name: &'a str,
    /// Its Secret holds what this phase issues (true once written at this reconcile).
    pub secret_done: bool,
    /// It served its Secret's certificate at this reconcile's handshake (`None`: not
    /// reached).
    pub serving: Option<bool>,
}

/// What a replacement does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing yet, and why.
    Wait(String),
    /// Every member trusts both CAs and clients have had their overlap: issue from the next.
    Switch,
    /// Every member serves a certificate of the next CA: it becomes the CA.
    Promote,
}

/// The step `replacement` takes at `now`, with `members` (every member of the topology,
/// sentinels too).
pub fn step(replacement: &Replacement, members: &[MemberCa<'_>], now: SystemTime) -> Step {
    let behind: Vec<&str> = members
        .iter()
        .filter(|m| !m.secret_done || m.serving != Some(true))
        .map(|m| m.name)
        .collect();
    let what = match replacement.phase {
        Phase::Trusting => "trust both CAs",
        Phase::Switching => "serve a certificate of the next CA",
    };
    if !behind.is_empty() {
        return Step::Wait(format!(
            "waiting for members to {what}: {}",
            behind.join(", ")
        ));
    }
    if replacement.phase == Phase::Switching {
        return Step::Promote;
    }
    let overlap = i64::try_from(replacement.overlap.as_secs()).unwrap_or(i64::MAX);
    let switch_at = replacement.clients_told.saturating_add(overlap);
    match unix(now) >= switch_at {
        true => Step::Switch,
        // The same words at every look until then: the status is written only on a change.
        false => Step::Wait(
            "every member trusts both CAs; clients have until clientsUntil to trust the next \
             one (ca.crt of the CA Secret) before members serve it"
                .into(),
        ),
    }
}

/// What the topology's status says of `replacement` after `step`: `None` once promoted
/// (the replacement is over); switching once the switch was taken.
pub fn status(replacement: &Replacement, step: &Step) -> Option<CaReplacement> {
    let phase = match step {
        Step::Promote => return None,
        Step::Switch => Phase::Switching,
        Step::Wait(_) => replacement.phase,
    };
    let time = |seconds: i64| {
        let at = k8s_openapi::jiff::Timestamp::from_second(seconds).ok()?;
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at))
    };
    let overlap = i64::try_from(replacement.overlap.as_secs()).unwrap_or(i64::MAX);
    Some(CaReplacement {
        phase,
        started: time(replacement.clients_told)?,
        clients_until: match phase {
            Phase::Trusting => time(replacement.clients_told.saturating_add(overlap)),
            Phase::Switching => None,
        },
        waiting_for: match step {
            Step::Wait(why) => Some(why.clone()),
            _ => None,
        },
    })
}

#[cfg(test)]
mod tests;
