//! The decision: from the spec, `autoResize`, the claim, the volume's usage and the
//! StorageClass to the one thing to do now, grow the claim to a size or hold with a typed
//! reason. Pure, so every rule is a table row in the tests below.
//!
//! Rules, in order:
//! 1. nothing grows before the claim is Bound, and at most one growth is in flight per claim
//!    (the driver's error, the file system growth, a request above the capacity);
//! 2. the spec's size is honoured whenever it is above the claim's request (no cooldown,
//!    no limit: a person asked for it);
//! 3. with `autoResize`, usage at or above the threshold asks for one step
//!    ([`Policy::grown`]), never beyond the limit and not within the cooldown of the last
//!    growth; usage read before the last growth reached the file system (the kubelet still
//!    reports the capacity it had then) is not used;
//! 4. a growth the StorageClass cannot do is not tried; one the API server refused is tried
//!    again only after [`RETRY_REFUSED`] (or for another size);
//! 5. nothing ever shrinks: every size asked for is above the claim's request.

use std::time::Duration;

use crd_types::conditions::reasons::StorageReady;
use crd_types::node::{LastResize, ResizeResult};
use crd_types::quantity::{self, format_bytes};
use crd_types::template::AutoResize;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::claim::ClaimState;
use crate::policy::Policy;
use crate::stats::VolumeUsage;

/// How long a size the API server refused (a ResourceQuota, say) waits before it is asked
/// for again: the refusal is a status, not a loop.
pub const RETRY_REFUSED: Duration = Duration::from_secs(300);

/// The volume's usage as far as pvc-resizer knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Usage {
    /// Not read: autoResize is off, or the pod's Node was not asked yet.
    Unread,
    Known(VolumeUsage),
    /// The pod's Node did not answer; why.
    Unreadable(String),
}

/// Everything the decision is made from.
#[derive(Debug, Clone)]
pub struct Inputs<'a> {
    /// `persistence.size`.
    pub spec_size: &'a str,
    pub auto_resize: Option<&'a AutoResize>,
    /// `None` before node-controller created it.
    pub claim: Option<&'a ClaimState>,
    pub usage: &'a Usage,
    /// The StorageClass's `allowVolumeExpansion`; `None` when not looked up (see
    /// [`class_to_check`]) or the claim names no class.
    pub expandable: Option<bool>,
    /// The last growth asked for (`status.storage.lastResize`).
    pub last_resize: Option<&'a LastResize>,
    pub now: Timestamp,
}

/// Why the claim grows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// `persistence.size` is above the claim's request.
    Spec,
    /// Usage reached the threshold.
    Usage { used_percent: u8, threshold: u8 },
}

/// What to do now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Apply the claim at `to` bytes (it requests `from`); `capacity_before` is the file
    /// system capacity the kubelet reports now, when known.
    Grow {
        from: u128,
        to: u128,
        cause: Cause,
        capacity_before: Option<u64>,
    },
    /// Nothing to apply; the reason and message go into StorageReady. `retry_at`: when the
    /// hold ends by itself (a cooldown, a refusal's wait).
    Hold {
        reason: StorageReady,
        message: String,
        retry_at: Option<Timestamp>,
    },
}

fn hold(reason: StorageReady, message: impl Into<String>) -> Decision {
    Decision::Hold {
        reason,
        message: message.into(),
        retry_at: None,
    }
}

/// The decision for one ValkeyNode's claim.
pub fn decide(i: &Inputs) -> Decision {
    let Some(claim) = i.claim else {
        return hold(
            StorageReady::ClaimMissing,
            "node-controller has not created the claim yet",
        );
    };
    if !claim.bound {
        return hold(StorageReady::ClaimNotBound, "the claim is not Bound yet");
    }
    let Some(requested) = claim.requested else {
        return hold(StorageReady::ClaimNotBound, "the claim requests no storage");
    };
    let capacity = claim
        .capacity
        .map_or_else(|| "unknown".into(), format_bytes);
    if let Some(error) = &claim.resize_error {
        return hold(
            StorageReady::ResizeFailed,
            format!("growing to {} failed: {error}", format_bytes(requested)),
        );
    }
    if claim.file_system_resize_pending {
        return hold(
            StorageReady::FileSystemResizePending,
            format!(
                "the volume has {capacity}; the kubelet grows the file system (online, or when \
                 the pod restarts)"
            ),
        );
    }
    if claim.in_flight() {
        return hold(
            StorageReady::Resizing,
            format!(
                "the claim requests {}, the volume has {capacity}; the storage driver grows it",
                format_bytes(requested)
            ),
        );
    }

    let spec = quantity::parse(i.spec_size).map_or(0, |a| a.whole_units());
    let spec_target = (spec > requested).then_some(spec);
    let policy = i.auto_resize.map(Policy::parse);
    let by_usage = match (&policy, i.usage) {
        (Some(Ok(policy)), Usage::Known(usage)) => usage_step(policy, usage, requested, claim, i),
        _ => UsageStep::Enough,
    };
    let usage_target = match by_usage {
        UsageStep::Grow(to, _) => Some(to),
        _ => None,
    };

    if let Some(to) = spec_target.max(usage_target) {
        let cause = match by_usage {
            UsageStep::Grow(size, cause) if Some(size) == Some(to) && spec_target < Some(to) => {
                cause
            }
            _ => Cause::Spec,
        };
        if i.expandable == Some(false) {
            return hold(
                StorageReady::NotExpandable,
                format!(
                    "the claim must grow from {} to {} and its StorageClass {} does not allow \
                     volume expansion (allowVolumeExpansion)",
                    format_bytes(requested),
                    format_bytes(to),
                    claim.storage_class.as_deref().unwrap_or("")
                ),
            );
        }
        if let Some(refused) = refused_recently(i.last_resize, to, i.now) {
            return refused;
        }
        return Decision::Grow {
            from: requested,
            to,
            cause,
            capacity_before: match i.usage {
                Usage::Known(u) => Some(u.capacity_bytes),
                _ => None,
            },
        };
    }
    match (by_usage, policy) {
        (UsageStep::Stale(reported), _) => hold(
            StorageReady::Resizing,
            format!(
                "the claim has {capacity}; waiting for the kubelet to report the grown file \
                 system (it reports {})",
                format_bytes(u128::from(reported))
            ),
        ),
        (UsageStep::AtLimit(percent, threshold), _) => hold(
            StorageReady::LimitReached,
            format!(
                "{percent}% used (threshold {threshold}%) and the claim requests its limit {}: \
                 raise autoResize.limit or free space",
                format_bytes(requested)
            ),
        ),
        (UsageStep::CoolingDown(until, percent), _) => Decision::Hold {
            reason: StorageReady::CoolingDown,
            message: format!("{percent}% used; the next growth may happen from {until}"),
            retry_at: Some(until),
        },
        (_, Some(Err(error))) => hold(StorageReady::InvalidAutoResize, error),
        (_, Some(Ok(_))) if matches!(i.usage, Usage::Unreadable(_)) => {
            let Usage::Unreadable(why) = i.usage else {
                unreachable!()
            };
            hold(StorageReady::UsageUnknown, why.clone())
        }
        (_, Some(Ok(policy))) => hold(
            StorageReady::VolumeReady,
            format!(
                "bound at {capacity}; grows when {}% is used",
                policy.threshold_percent
            ),
        ),
        (_, None) => hold(StorageReady::VolumeReady, format!("bound at {capacity}")),
    }
}

/// What usage asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum UsageStep {
    /// Below the threshold (or unknown).
    Enough,
    Grow(u128, Cause),
    /// Above the threshold at the limit: used percent, threshold.
    AtLimit(u8, u8),
    /// Above the threshold within the cooldown: until when, used percent.
    CoolingDown(Timestamp, u8),
    /// The reading predates the last growth: the kubelet reports this capacity, no more than
    /// before it.
    Stale(u64),
}

fn usage_step(
    policy: &Policy,
    usage: &VolumeUsage,
    requested: u128,
    claim: &ClaimState,
    i: &Inputs,
) -> UsageStep {
    if claim
        .capacity_before_resize
        .is_some_and(|before| usage.capacity_bytes <= before)
    {
        return UsageStep::Stale(usage.capacity_bytes);
    }
    let Some(percent) = usage.used_percent() else {
        return UsageStep::Enough;
    };
    let threshold = policy.threshold_percent;
    if percent < threshold {
        return UsageStep::Enough;
    }
    if requested >= policy.limit {
        return UsageStep::AtLimit(percent, threshold);
    }
    if let Some(last) = claim.last_resize {
        let until = last.saturating_add(signed(policy.cooldown));
        if let Ok(until) = until
            && i.now < until
        {
            return UsageStep::CoolingDown(until, percent);
        }
    }
    // Below the limit, a step always adds at least a MiB (rounded up).
    UsageStep::Grow(
        policy.grown(requested),
        Cause::Usage {
            used_percent: percent,
            threshold,
        },
    )
}

/// A hold when `to` was refused less than [`RETRY_REFUSED`] ago.
fn refused_recently(last: Option<&LastResize>, to: u128, now: Timestamp) -> Option<Decision> {
    let last = last?;
    let reason = match last.result {
        ResizeResult::Requested => return None,
        ResizeResult::QuotaExceeded => StorageReady::QuotaExceeded,
        ResizeResult::Refused => StorageReady::ResizeRefused,
    };
    let same_size = quantity::parse(&last.size).is_ok_and(|a| a.whole_units() == to);
    let retry_at = last.time.0.saturating_add(signed(RETRY_REFUSED)).ok()?;
    (same_size && now < retry_at).then(|| Decision::Hold {
        reason,
        message: format!(
            "growing to {} was refused at {}; asked again from {retry_at}",
            format_bytes(to),
            last.time.0
        ),
        retry_at: Some(retry_at),
    })
}

fn signed(d: Duration) -> SignedDuration {
    SignedDuration::try_from(d).unwrap_or(SignedDuration::MAX)
}

/// The StorageClass to read before applying: the claim's, when the decision without it
/// would grow the claim. Reading it only then keeps an idle reconcile at two reads.
pub fn class_to_check<'a>(i: &Inputs<'a>) -> Option<&'a str> {
    let claim = i.claim?;
    let without_class = Inputs {
        expandable: None,
        ..i.clone()
    };
    matches!(decide(&without_class), Decision::Grow { .. })
        .then_some(claim.storage_class.as_deref())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    const MI: u128 = 1 << 20;
    const GI: u128 = 1 << 30;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + second).unwrap()
    }

    fn auto(threshold: i32, increase: &str, min: &str, limit: &str, cooldown: i32) -> AutoResize {
        AutoResize {
            used_percent_threshold: threshold,
            increase: increase.into(),
            limit: limit.into(),
            min_increase: min.into(),
            cooldown_seconds: cooldown,
        }
    }

    fn claim(requested: u128, capacity: u128) -> ClaimState {
        ClaimState {
            requested: Some(requested),
            capacity: Some(capacity),
            bound: true,
            storage_class: Some("fast".into()),
            ..Default::default()
        }
    }

    fn used(used: u64, capacity: u64) -> Usage {
        Usage::Known(VolumeUsage {
            used_bytes: used,
            capacity_bytes: capacity,
            available_bytes: capacity.saturating_sub(used),
        })
    }

    /// One row: the decision for these inputs at `at(0)`.
    fn row(
        spec: &str,
        auto_resize: Option<AutoResize>,
        claim: Option<ClaimState>,
        usage: Usage,
        expandable: Option<bool>,
    ) -> Decision {
        decide(&Inputs {
            spec_size: spec,
            auto_resize: auto_resize.as_ref(),
            claim: claim.as_ref(),
            usage: &usage,
            expandable,
            last_resize: None,
            now: at(0),
        })
    }

    fn reason(d: &Decision) -> Option<StorageReady> {
        match d {
            Decision::Hold { reason, .. } => Some(*reason),
            Decision::Grow { .. } => None,
        }
    }

    fn grows_to(d: &Decision) -> Option<u128> {
        match d {
            Decision::Grow { to, .. } => Some(*to),
            Decision::Hold { .. } => None,
        }
    }

    #[test]
    fn the_decision_table() {
        let half = || Some(auto(50, "100%", "1Mi", "64Mi", 0));
        let tiny = || Some(auto(80, "20%", "1Gi", "10Gi", 300));
        let cases: Vec<(&str, Decision, Option<u128>, Option<StorageReady>)> = vec![
            // No claim yet, not bound.
            (
                "no claim",
                row("16Mi", half(), None, Usage::Unread, None),
                None,
                Some(StorageReady::ClaimMissing),
            ),
            (
                "unbound",
                row(
                    "16Mi",
                    half(),
                    Some(ClaimState {
                        bound: false,
                        ..claim(16 * MI, 16 * MI)
                    }),
                    Usage::Unread,
                    None,
                ),
                None,
                Some(StorageReady::ClaimNotBound),
            ),
            // Idle, with and without autoResize.
            (
                "idle",
                row(
                    "16Mi",
                    None,
                    Some(claim(16 * MI, 16 * MI)),
                    Usage::Unread,
                    None,
                ),
                None,
                Some(StorageReady::VolumeReady),
            ),
            (
                "below threshold",
                row(
                    "16Mi",
                    half(),
                    Some(claim(16 * MI, 16 * MI)),
                    used(7 << 20, 16 << 20),
                    None,
                ),
                None,
                Some(StorageReady::VolumeReady),
            ),
            // The threshold is inclusive: 50 % of the kubelet's capacity.
            (
                "at threshold",
                row(
                    "16Mi",
                    half(),
                    Some(claim(16 * MI, 16 * MI)),
                    used(8 << 20, 16 << 20),
                    None,
                ),
                Some(32 * MI),
                None,
            ),
            // The second step, then the limit (4x).
            (
                "second step",
                row(
                    "16Mi",
                    half(),
                    Some(claim(32 * MI, 32 * MI)),
                    used(20 << 20, 32 << 20),
                    None,
                ),
                Some(64 * MI),
                None,
            ),
            (
                "at limit",
                row(
                    "16Mi",
                    half(),
                    Some(claim(64 * MI, 64 * MI)),
                    used(40 << 20, 64 << 20),
                    None,
                ),
                None,
                Some(StorageReady::LimitReached),
            ),
            (
                "at limit, below threshold",
                row(
                    "16Mi",
                    half(),
                    Some(claim(64 * MI, 64 * MI)),
                    used(10 << 20, 64 << 20),
                    None,
                ),
                None,
                Some(StorageReady::VolumeReady),
            ),
            // 20 % of 1Gi is 205Mi; the minimum step makes it 1Gi.
            (
                "minimum step",
                row(
                    "1Gi",
                    tiny(),
                    Some(claim(GI, GI)),
                    used(900 << 20, 1 << 30),
                    None,
                ),
                Some(2 * GI),
                None,
            ),
            // A step above the limit stops at the limit.
            (
                "capped",
                row(
                    "1Gi",
                    Some(auto(80, "20%", "1Gi", "1536Mi", 0)),
                    Some(claim(GI, GI)),
                    used(900 << 20, 1 << 30),
                    None,
                ),
                Some(1536 * MI),
                None,
            ),
            // A reading from before the last growth reached the file system is not used.
            (
                "stale reading",
                row(
                    "16Mi",
                    half(),
                    Some(ClaimState {
                        capacity_before_resize: Some(16 << 20),
                        ..claim(32 * MI, 32 * MI)
                    }),
                    used(9 << 20, 16 << 20),
                    None,
                ),
                None,
                Some(StorageReady::Resizing),
            ),
            (
                "fresh reading",
                row(
                    "16Mi",
                    half(),
                    Some(ClaimState {
                        capacity_before_resize: Some(16 << 20),
                        ..claim(32 * MI, 32 * MI)
                    }),
                    used(9 << 20, 32 << 20),
                    None,
                ),
                None,
                Some(StorageReady::VolumeReady),
            ),
            // The spec: grows past the threshold logic, without autoResize, beyond the limit.
            (
                "spec grows",
                row("2Gi", None, Some(claim(GI, GI)), Usage::Unread, None),
                Some(2 * GI),
                None,
            ),
            (
                "spec in other units",
                row(
                    "2048Mi",
                    None,
                    Some(claim(2 * GI, 2 * GI)),
                    Usage::Unread,
                    None,
                ),
                None,
                Some(StorageReady::VolumeReady),
            ),
            (
                "spec beyond limit",
                row(
                    "128Mi",
                    half(),
                    Some(claim(64 * MI, 64 * MI)),
                    used(1, 64 << 20),
                    None,
                ),
                Some(128 * MI),
                None,
            ),
            // Spec and usage both ask: the larger wins.
            (
                "spec and usage",
                row(
                    "20Mi",
                    half(),
                    Some(claim(16 * MI, 16 * MI)),
                    used(15 << 20, 16 << 20),
                    None,
                ),
                Some(32 * MI),
                None,
            ),
            (
                "spec larger than usage step",
                row(
                    "48Mi",
                    half(),
                    Some(claim(16 * MI, 16 * MI)),
                    used(15 << 20, 16 << 20),
                    None,
                ),
                Some(48 * MI),
                None,
            ),
            // Never shrinks: a claim above the spec stays.
            (
                "never shrinks",
                row(
                    "16Mi",
                    None,
                    Some(claim(32 * MI, 32 * MI)),
                    Usage::Unread,
                    None,
                ),
                None,
                Some(StorageReady::VolumeReady),
            ),
            // One growth in flight at a time.
            (
                "in flight",
                row(
                    "32Mi",
                    half(),
                    Some(claim(32 * MI, 16 * MI)),
                    used(15 << 20, 16 << 20),
                    None,
                ),
                None,
                Some(StorageReady::Resizing),
            ),
            (
                "resizing condition",
                row(
                    "32Mi",
                    half(),
                    Some(ClaimState {
                        resizing: true,
                        ..claim(32 * MI, 32 * MI)
                    }),
                    used(1, 32 << 20),
                    None,
                ),
                None,
                Some(StorageReady::Resizing),
            ),
            (
                "fs pending",
                row(
                    "32Mi",
                    half(),
                    Some(ClaimState {
                        file_system_resize_pending: true,
                        ..claim(32 * MI, 32 * MI)
                    }),
                    used(30 << 20, 32 << 20),
                    None,
                ),
                None,
                Some(StorageReady::FileSystemResizePending),
            ),
            (
                "driver error",
                row(
                    "32Mi",
                    half(),
                    Some(ClaimState {
                        resize_error: Some("NodeResizeError: x".into()),
                        ..claim(32 * MI, 16 * MI)
                    }),
                    Usage::Unread,
                    None,
                ),
                None,
                Some(StorageReady::ResizeFailed),
            ),
            // The StorageClass.
            (
                "not expandable",
                row("2Gi", None, Some(claim(GI, GI)), Usage::Unread, Some(false)),
                None,
                Some(StorageReady::NotExpandable),
            ),
            (
                "not expandable, nothing to do",
                row("1Gi", None, Some(claim(GI, GI)), Usage::Unread, Some(false)),
                None,
                Some(StorageReady::VolumeReady),
            ),
            (
                "expandable",
                row("2Gi", None, Some(claim(GI, GI)), Usage::Unread, Some(true)),
                Some(2 * GI),
                None,
            ),
            // Usage cannot be read.
            (
                "stats unreadable",
                row(
                    "16Mi",
                    half(),
                    Some(claim(16 * MI, 16 * MI)),
                    Usage::Unreadable("connection refused".into()),
                    None,
                ),
                None,
                Some(StorageReady::UsageUnknown),
            ),
            (
                "stats unreadable, spec grows",
                row(
                    "32Mi",
                    half(),
                    Some(claim(16 * MI, 16 * MI)),
                    Usage::Unreadable("x".into()),
                    None,
                ),
                Some(32 * MI),
                None,
            ),
            (
                "zero capacity",
                row(
                    "16Mi",
                    half(),
                    Some(claim(16 * MI, 16 * MI)),
                    used(5, 0),
                    None,
                ),
                None,
                Some(StorageReady::VolumeReady),
            ),
            // autoResize pvc-resizer cannot use.
            (
                "invalid",
                row(
                    "16Mi",
                    Some(auto(50, "lots", "1Mi", "64Mi", 0)),
                    Some(claim(16 * MI, 16 * MI)),
                    used(15 << 20, 16 << 20),
                    None,
                ),
                None,
                Some(StorageReady::InvalidAutoResize),
            ),
            // A zero increase with a one-byte minimum still moves a whole MiB.
            (
                "smallest step",
                row(
                    "16Mi",
                    Some(auto(50, "0", "1", "64Mi", 0)),
                    Some(claim(16 * MI, 16 * MI)),
                    used(15 << 20, 16 << 20),
                    None,
                ),
                Some(17 * MI),
                None,
            ),
        ];
        for (name, decision, to, held) in cases {
            assert_eq!(grows_to(&decision), to, "{name}: {decision:?}");
            assert_eq!(reason(&decision), held, "{name}: {decision:?}");
            if let Decision::Grow { from, to, .. } = decision {
                assert!(to > from, "{name}: never shrinks");
            }
        }
    }

    #[test]
    fn the_cause_names_what_asked() {
        let half = auto(50, "100%", "1Mi", "64Mi", 0);
        let d = row(
            "16Mi",
            Some(half.clone()),
            Some(claim(16 * MI, 16 * MI)),
            used(12 << 20, 16 << 20),
            None,
        );
        assert_eq!(
            d,
            Decision::Grow {
                from: 16 * MI,
                to: 32 * MI,
                cause: Cause::Usage {
                    used_percent: 75,
                    threshold: 50
                },
                capacity_before: Some(16 << 20),
            }
        );
        let d = row(
            "48Mi",
            Some(half),
            Some(claim(16 * MI, 16 * MI)),
            used(12 << 20, 16 << 20),
            None,
        );
        assert!(matches!(
            d,
            Decision::Grow {
                cause: Cause::Spec,
                ..
            }
        ));
    }

    #[test]
    fn the_cooldown_counts_from_the_last_growth() {
        let policy = auto(50, "100%", "1Mi", "64Mi", 60);
        let usage = used(20 << 20, 32 << 20);
        let decide_at = |last: Option<Timestamp>, now: Timestamp| {
            let c = ClaimState {
                last_resize: last,
                ..claim(32 * MI, 32 * MI)
            };
            decide(&Inputs {
                spec_size: "16Mi",
                auto_resize: Some(&policy),
                claim: Some(&c),
                usage: &usage,
                expandable: Some(true),
                last_resize: None,
                now,
            })
        };
        assert_eq!(
            reason(&decide_at(Some(at(0)), at(59))),
            Some(StorageReady::CoolingDown)
        );
        assert_eq!(grows_to(&decide_at(Some(at(0)), at(60))), Some(64 * MI));
        assert_eq!(grows_to(&decide_at(None, at(1))), Some(64 * MI));
        // The spec is not held by the cooldown.
        let c = ClaimState {
            last_resize: Some(at(0)),
            ..claim(32 * MI, 32 * MI)
        };
        let spec = decide(&Inputs {
            spec_size: "40Mi",
            auto_resize: Some(&policy),
            claim: Some(&c),
            usage: &usage,
            expandable: None,
            last_resize: None,
            now: at(1),
        });
        assert_eq!(grows_to(&spec), Some(40 * MI));
    }

    #[test]
    fn a_refused_size_waits_before_it_is_asked_again() {
        let c = claim(GI, GI);
        let refused = |result, size: &str, when| LastResize {
            time: Time(when),
            size: size.into(),
            result,
        };
        let decide_with = |last: &LastResize, now| {
            decide(&Inputs {
                spec_size: "2Gi",
                auto_resize: None,
                claim: Some(&c),
                usage: &Usage::Unread,
                expandable: Some(true),
                last_resize: Some(last),
                now,
            })
        };
        let quota = refused(ResizeResult::QuotaExceeded, "2048Mi", at(0));
        assert_eq!(
            reason(&decide_with(&quota, at(299))),
            Some(StorageReady::QuotaExceeded)
        );
        assert_eq!(grows_to(&decide_with(&quota, at(300))), Some(2 * GI));
        let other = refused(ResizeResult::Refused, "2Gi", at(0));
        assert_eq!(
            reason(&decide_with(&other, at(10))),
            Some(StorageReady::ResizeRefused)
        );
        // Another size (the spec changed again) is asked for at once.
        let smaller = refused(ResizeResult::QuotaExceeded, "1536Mi", at(0));
        assert_eq!(grows_to(&decide_with(&smaller, at(1))), Some(2 * GI));
        // A granted request is no refusal.
        let granted = refused(ResizeResult::Requested, "2Gi", at(0));
        assert_eq!(grows_to(&decide_with(&granted, at(1))), Some(2 * GI));
    }

    #[test]
    fn the_class_is_read_only_before_a_growth() {
        let half = auto(50, "100%", "1Mi", "64Mi", 0);
        let idle = claim(16 * MI, 16 * MI);
        let inputs = |usage: &'static Usage| Inputs {
            spec_size: "16Mi",
            auto_resize: Some(&half),
            claim: Some(&idle),
            usage,
            expandable: None,
            last_resize: None,
            now: at(0),
        };
        static LOW: Usage = Usage::Unread;
        assert_eq!(class_to_check(&inputs(&LOW)), None);
        let high = Box::leak(Box::new(used(12 << 20, 16 << 20)));
        assert_eq!(class_to_check(&inputs(high)), Some("fast"));
    }
}
