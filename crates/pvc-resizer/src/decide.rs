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
    let (claim, requested) = match settled_claim(i.claim) {
        Ok(settled) => settled,
        Err(hold) => return hold,
    };

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
        return grow(i, claim, requested, to, cause);
    }
    nothing_to_grow(i, claim, requested, by_usage, policy)
}

/// The claim and its request when it may grow: Bound, with no growth in flight (rule 1).
/// Otherwise the hold that says what it waits for.
fn settled_claim(claim: Option<&ClaimState>) -> Result<(&ClaimState, u128), Decision> {
    let Some(claim) = claim else {
        return Err(hold(
            StorageReady::ClaimMissing,
            "node-controller has not created the claim yet",
        ));
    };
    if !claim.bound {
        return Err(hold(
            StorageReady::ClaimNotBound,
            "the claim is not Bound yet",
        ));
    }
    let Some(requested) = claim.requested else {
        return Err(hold(
            StorageReady::ClaimNotBound,
            "the claim requests no storage",
        ));
    };
    let capacity = capacity(claim);
    if let Some(error) = &claim.resize_error {
        return Err(hold(
            StorageReady::ResizeFailed,
            format!("growing to {} failed: {error}", format_bytes(requested)),
        ));
    }
    if claim.file_system_resize_pending {
        return Err(hold(
            StorageReady::FileSystemResizePending,
            format!(
                "the volume has {capacity}; the kubelet grows the file system (online, or when \
                 the pod restarts)"
            ),
        ));
    }
    if claim.in_flight() {
        return Err(hold(
            StorageReady::Resizing,
            format!(
                "the claim requests {}, the volume has {capacity}; the storage driver grows it",
                format_bytes(requested)
            ),
        ));
    }
    Ok((claim, requested))
}

/// The claim's capacity as the messages show it.
fn capacity(claim: &ClaimState) -> String {
    claim
        .capacity
        .map_or_else(|| "unknown".into(), format_bytes)
}

/// Grows the claim from `requested` to `to`, unless its StorageClass cannot or the API
/// server refused that size recently (rule 4).
fn grow(i: &Inputs, claim: &ClaimState, requested: u128, to: u128, cause: Cause) -> Decision {
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
    Decision::Grow {
        from: requested,
        to,
        cause,
        capacity_before: match i.usage {
            Usage::Known(u) => Some(u.capacity_bytes),
            _ => None,
        },
    }
}

/// The hold when neither the spec nor usage asks for a growth: why usage does not (a stale
/// reading, the limit, the cooldown), else what is wrong with `autoResize` or the reading,
/// else a ready volume.
fn nothing_to_grow(
    i: &Inputs,
    claim: &ClaimState,
    requested: u128,
    by_usage: UsageStep,
    policy: Option<Result<Policy, String>>,
) -> Decision {
    let capacity = capacity(claim);
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
mod tests;
