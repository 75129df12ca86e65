//! The report stage: from what was read, decided and applied to `status.storage`, the
//! StorageReady condition and the Events, with no I/O.
//!
//! The status is written only when it changes; usage counts as changed when its whole
//! percentage does, so a volume that fills slowly costs a write per percent, not one per
//! stats read. Events tell what was done (a growth asked for, a growth finished) and what
//! newly blocks growth (the limit, the StorageClass, a quota, the driver, unreadable stats),
//! once per change of StorageReady's reason.

use crd_types::ValkeyNodeStatus;
use crd_types::conditions::reasons::StorageReady;
use crd_types::conditions::{self, ConditionSpec, types};
use crd_types::node::{LastResize, ResizeResult, StorageState, StorageStatus};
use crd_types::quantity::format_bytes;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::decide::{Cause, Decision, Usage};
use crate::events::{ResizerEvent, ResizerEventReason};
use crate::live::Live;
use crate::stats::VolumeUsage;

/// What the apply stage did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// Nothing was applied (the decision held).
    Nothing,
    /// The claim now requests `to`.
    Grown { from: u128, to: u128, cause: Cause },
    /// The API server refused `to`.
    Refused {
        to: u128,
        result: ResizeResult,
        message: String,
    },
}

/// What to write and to tell.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// `None` when the node's status already says it.
    pub status: Option<ValkeyNodeStatus>,
    /// Published before the status, so a failed publish is retried.
    pub events: Vec<ResizerEvent>,
}

/// The report of one reconcile; an empty one for a node without persistence.
pub fn report(live: &Live, decision: &Decision, applied: &Applied, now: Timestamp) -> Report {
    if live.node.spec.template.persistence.is_none() {
        return Report {
            status: None,
            events: Vec::new(),
        };
    }
    let current = live.node.status.as_ref();
    let current_storage = current.and_then(|s| s.storage.as_ref());
    let (reason, message) = condition(decision, applied);
    let claim = live.claim.as_ref();
    let requested = match applied {
        Applied::Grown { to, .. } => Some(*to),
        _ => claim.and_then(|c| c.requested),
    };
    let usage = match &live.usage {
        Usage::Known(u) => Some(*u),
        _ => None,
    };
    let last_resize = match applied {
        Applied::Nothing => current_storage.and_then(|s| s.last_resize.clone()),
        Applied::Grown { to, .. } => Some(attempt(now, *to, ResizeResult::Requested)),
        Applied::Refused { to, result, .. } => Some(attempt(now, *to, *result)),
    };
    let generation = live.node.metadata.generation;
    let storage = StorageStatus {
        claim_name: Some(live.claim_name.clone()),
        requested: requested.map(format_bytes),
        capacity: claim.and_then(|c| c.capacity).map(format_bytes),
        used_bytes: usage.map(|u| clamp(u.used_bytes)),
        available_bytes: usage.map(|u| clamp(u.available_bytes)),
        state: Some(state_of(reason)),
        last_resize,
        observed_generation: generation,
    };
    let current_conditions = current.map(|s| s.conditions.as_slice()).unwrap_or_default();
    let ready = conditions::transition(
        current_conditions,
        ConditionSpec::new(reason, reason == StorageReady::VolumeReady, message.clone()),
        generation,
        now,
    );
    let changed = conditions::find(current_conditions, types::STORAGE_READY) != Some(&ready);
    let status =
        (changed || storage_changed(current_storage, &storage)).then(|| ValkeyNodeStatus {
            storage: Some(storage),
            conditions: vec![ready],
            ..Default::default()
        });
    let previous =
        conditions::find(current_conditions, types::STORAGE_READY).map(|c| c.reason.as_str());
    Report {
        status,
        events: events(live, applied, previous, reason, &message),
    }
}

fn attempt(now: Timestamp, to: u128, result: ResizeResult) -> LastResize {
    LastResize {
        time: Time(now),
        size: format_bytes(to),
        result,
    }
}

fn clamp(bytes: u64) -> i64 {
    i64::try_from(bytes).unwrap_or(i64::MAX)
}

/// StorageReady's reason and message.
fn condition(decision: &Decision, applied: &Applied) -> (StorageReady, String) {
    match (applied, decision) {
        (Applied::Grown { from, to, cause }, _) => (
            StorageReady::Resizing,
            format!(
                "asked to grow from {} to {}: {}",
                format_bytes(*from),
                format_bytes(*to),
                cause_text(*cause)
            ),
        ),
        (
            Applied::Refused {
                result, message, ..
            },
            _,
        ) => {
            let reason = match result {
                ResizeResult::QuotaExceeded => StorageReady::QuotaExceeded,
                _ => StorageReady::ResizeRefused,
            };
            (reason, message.clone())
        }
        (
            Applied::Nothing,
            Decision::Hold {
                reason, message, ..
            },
        ) => (*reason, message.clone()),
        // Not applied although decided: the next reconcile does it.
        (Applied::Nothing, Decision::Grow { to, .. }) => (
            StorageReady::Resizing,
            format!("about to grow to {}", format_bytes(*to)),
        ),
    }
}

fn cause_text(cause: Cause) -> String {
    match cause {
        Cause::Spec => "persistence.size asks for it".into(),
        Cause::Usage {
            used_percent,
            threshold,
        } => format!("{used_percent}% used, threshold {threshold}%"),
    }
}

/// The state each reason stands for.
pub fn state_of(reason: StorageReady) -> StorageState {
    match reason {
        StorageReady::VolumeReady | StorageReady::CoolingDown | StorageReady::InvalidAutoResize => {
            StorageState::Bound
        }
        StorageReady::ClaimMissing | StorageReady::ClaimNotBound => StorageState::Pending,
        StorageReady::Resizing => StorageState::Resizing,
        StorageReady::FileSystemResizePending => StorageState::FileSystemResizePending,
        StorageReady::LimitReached => StorageState::LimitReached,
        StorageReady::NotExpandable => StorageState::NotExpandable,
        StorageReady::QuotaExceeded => StorageState::QuotaExceeded,
        StorageReady::UsageUnknown => StorageState::UsageUnknown,
        StorageReady::ResizeRefused | StorageReady::ResizeFailed => StorageState::Failed,
    }
}

/// Whether `desired` says something `current` does not; usage by whole percent.
fn storage_changed(current: Option<&StorageStatus>, desired: &StorageStatus) -> bool {
    let Some(current) = current else {
        return true;
    };
    let percent = |s: &StorageStatus| {
        let (used, available) = (s.used_bytes?, s.available_bytes?);
        let usage = VolumeUsage {
            used_bytes: u64::try_from(used).ok()?,
            capacity_bytes: u64::try_from(used.saturating_add(available)).ok()?,
            available_bytes: u64::try_from(available).ok()?,
        };
        usage.used_percent()
    };
    let without_usage = |s: &StorageStatus| StorageStatus {
        used_bytes: s.used_bytes.map(|_| 0),
        available_bytes: s.available_bytes.map(|_| 0),
        ..s.clone()
    };
    without_usage(current) != without_usage(desired) || percent(current) != percent(desired)
}

fn events(
    live: &Live,
    applied: &Applied,
    previous: Option<&str>,
    reason: StorageReady,
    message: &str,
) -> Vec<ResizerEvent> {
    let mut events = Vec::new();
    let claim = &live.claim_name;
    if let Applied::Grown { from, to, cause } = applied {
        events.push(ResizerEvent {
            reason: ResizerEventReason::Resized,
            note: format!(
                "claim {claim} grows from {} to {}: {}",
                format_bytes(*from),
                format_bytes(*to),
                cause_text(*cause)
            ),
        });
    }
    if previous == Some(reason.as_str()) {
        return events;
    }
    let in_flight = [
        StorageReady::Resizing.as_str(),
        StorageReady::FileSystemResizePending.as_str(),
    ];
    if previous.is_some_and(|p| in_flight.contains(&p))
        && !in_flight.contains(&reason.as_str())
        && let Some(capacity) = live.claim.as_ref().and_then(|c| c.capacity)
    {
        events.push(ResizerEvent {
            reason: ResizerEventReason::ResizeCompleted,
            note: format!("claim {claim} has {}", format_bytes(capacity)),
        });
    }
    let warning = match reason {
        StorageReady::LimitReached => Some(ResizerEventReason::LimitReached),
        StorageReady::NotExpandable => Some(ResizerEventReason::NotExpandable),
        StorageReady::QuotaExceeded => Some(ResizerEventReason::QuotaExceeded),
        StorageReady::ResizeRefused => Some(ResizerEventReason::ResizeRefused),
        StorageReady::ResizeFailed => Some(ResizerEventReason::ResizeFailed),
        StorageReady::UsageUnknown => Some(ResizerEventReason::UsageUnknown),
        _ => None,
    };
    if let Some(warning) = warning {
        events.push(ResizerEvent {
            reason: warning,
            note: format!("claim {claim}: {message}"),
        });
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::claim::ClaimState;
    use crate::decide::{Inputs, decide};
    use crd_types::template::{AutoResize, Persistence};
    use crd_types::{ValkeyNode, ValkeyNodeSpec};

    const MI: u128 = 1 << 20;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + second).unwrap()
    }

    fn node() -> ValkeyNode {
        let mut spec = ValkeyNodeSpec::default();
        spec.template.persistence = Some(Persistence {
            size: "16Mi".into(),
            auto_resize: Some(AutoResize {
                used_percent_threshold: 50,
                increase: "100%".into(),
                limit: "64Mi".into(),
                min_increase: "1Mi".into(),
                cooldown_seconds: 0,
            }),
            ..Default::default()
        });
        let mut n = ValkeyNode::new("cache", spec);
        n.metadata.namespace = Some("prod".into());
        n.metadata.generation = Some(3);
        n
    }

    fn live(requested: u128, capacity: u128, used: u64) -> Live {
        Live {
            node: node(),
            claim_name: "cache-data".into(),
            claim: Some(ClaimState {
                requested: Some(requested),
                capacity: Some(capacity),
                bound: true,
                ..Default::default()
            }),
            usage: Usage::Known(VolumeUsage {
                used_bytes: used,
                capacity_bytes: capacity as u64,
                available_bytes: capacity as u64 - used,
            }),
            expandable: Some(true),
        }
    }

    /// One reconcile as the binary runs it, with every apply succeeding.
    fn reconcile(live: &Live, now: Timestamp) -> (Report, Applied) {
        let decision = decide(&live.inputs(now).unwrap());
        let applied = match decision {
            Decision::Grow {
                from, to, cause, ..
            } => Applied::Grown { from, to, cause },
            Decision::Hold { .. } => Applied::Nothing,
        };
        (report(live, &decision, &applied, now), applied)
    }

    /// `live` with the report's status written.
    fn written(mut live: Live, report: &Report) -> Live {
        if let Some(status) = &report.status {
            live.node.status = Some(status.clone());
        }
        live
    }

    fn ready(r: &Report) -> (String, String) {
        let s = r.status.as_ref().unwrap();
        let c = conditions::find(&s.conditions, types::STORAGE_READY).unwrap();
        (c.status.clone(), c.reason.clone())
    }

    fn reasons(r: &Report) -> Vec<&'static str> {
        use operator_runtime::EventReason;
        r.events.iter().map(|e| e.reason.as_str()).collect()
    }

    #[test]
    fn a_volume_fills_grows_and_reaches_its_limit() {
        // Idle at 16Mi, 25 % used.
        let (r, _) = reconcile(&live(16 * MI, 16 * MI, 4 << 20), at(0));
        assert_eq!(ready(&r), ("True".into(), "VolumeReady".into()));
        let storage = r.status.as_ref().unwrap().storage.clone().unwrap();
        assert_eq!(storage.state, Some(StorageState::Bound));
        assert_eq!(storage.requested.as_deref(), Some("16Mi"));
        assert_eq!(storage.used_bytes, Some(4 << 20));
        assert_eq!(storage.observed_generation, Some(3));
        assert!(r.events.is_empty());
        let l = written(live(16 * MI, 16 * MI, 4 << 20), &r);

        // Usage moves within the same percent: no write.
        let mut same = l.clone();
        same.usage = live(16 * MI, 16 * MI, (4 << 20) + 1000).usage;
        assert_eq!(reconcile(&same, at(1)).0.status, None);

        // Over the threshold: grow, tell it.
        let mut full = l.clone();
        full.usage = live(16 * MI, 16 * MI, 9 << 20).usage;
        let (r, applied) = reconcile(&full, at(2));
        assert_eq!(
            applied,
            Applied::Grown {
                from: 16 * MI,
                to: 32 * MI,
                cause: Cause::Usage {
                    used_percent: 56,
                    threshold: 50
                }
            }
        );
        assert_eq!(ready(&r), ("False".into(), "Resizing".into()));
        let storage = r.status.as_ref().unwrap().storage.clone().unwrap();
        assert_eq!(storage.requested.as_deref(), Some("32Mi"));
        assert_eq!(storage.state, Some(StorageState::Resizing));
        assert_eq!(
            storage.last_resize.as_ref().unwrap().result,
            ResizeResult::Requested
        );
        assert_eq!(reasons(&r), ["Resized"]);
        assert!(
            r.events[0]
                .note
                .contains("from 16Mi to 32Mi: 56% used, threshold 50%"),
            "{}",
            r.events[0].note
        );
        let l = written(full, &r);

        // In flight: Resizing, no Event again.
        let mut growing = l.clone();
        growing.claim = Some(ClaimState {
            requested: Some(32 * MI),
            ..l.claim.clone().unwrap()
        });
        let (r, applied) = reconcile(&growing, at(3));
        assert_eq!(applied, Applied::Nothing);
        assert!(r.events.is_empty());
        let l = written(growing, &r);

        // Done: ResizeCompleted once.
        let mut grown = live(32 * MI, 32 * MI, 9 << 20);
        grown.node.status = l.node.status.clone();
        let (r, _) = reconcile(&grown, at(4));
        assert_eq!(ready(&r), ("True".into(), "VolumeReady".into()));
        assert_eq!(reasons(&r), ["ResizeCompleted"]);
        let l = written(grown, &r);

        // At the limit and full: LimitReached once, then quiet.
        let mut at_limit = l.clone();
        at_limit.claim = live(64 * MI, 64 * MI, 0).claim;
        at_limit.usage = live(64 * MI, 64 * MI, 40 << 20).usage;
        let (r, applied) = reconcile(&at_limit, at(5));
        assert_eq!(applied, Applied::Nothing);
        assert_eq!(ready(&r), ("False".into(), "LimitReached".into()));
        assert_eq!(
            r.status.as_ref().unwrap().storage.as_ref().unwrap().state,
            Some(StorageState::LimitReached)
        );
        assert_eq!(reasons(&r), ["LimitReached"]);
        let l = written(at_limit, &r);
        let (again, _) = reconcile(&l, at(6));
        assert!(again.events.is_empty() && again.status.is_none());
    }

    #[test]
    fn a_refusal_is_recorded_and_told_once() {
        let l = live(16 * MI, 16 * MI, 9 << 20);
        let decision = decide(&l.inputs(at(0)).unwrap());
        let applied = Applied::Refused {
            to: 32 * MI,
            result: ResizeResult::QuotaExceeded,
            message: "exceeded quota: storage".into(),
        };
        let r = report(&l, &decision, &applied, at(0));
        assert_eq!(ready(&r), ("False".into(), "QuotaExceeded".into()));
        let storage = r.status.as_ref().unwrap().storage.clone().unwrap();
        assert_eq!(storage.state, Some(StorageState::QuotaExceeded));
        assert_eq!(storage.requested.as_deref(), Some("16Mi"));
        assert_eq!(storage.last_resize.as_ref().unwrap().size, "32Mi");
        assert_eq!(reasons(&r), ["QuotaExceeded"]);
        // The next look holds (retry later) without a new Event.
        let l = written(l, &r);
        let (again, applied) = reconcile(&l, at(10));
        assert_eq!(applied, Applied::Nothing);
        assert!(again.events.is_empty(), "{:?}", again.events);
    }

    #[test]
    fn only_pvc_resizers_fields_are_written() {
        let (r, _) = reconcile(&live(16 * MI, 16 * MI, 0), at(0));
        let json = serde_json::to_value(r.status.unwrap()).unwrap();
        let keys: Vec<&String> = json.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["conditions", "storage"]);
        assert_eq!(json["conditions"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn no_persistence_no_report() {
        let mut l = live(0, 0, 0);
        l.node.spec.template.persistence = None;
        let r = report(
            &l,
            &Decision::Hold {
                reason: StorageReady::VolumeReady,
                message: String::new(),
                retry_at: None,
            },
            &Applied::Nothing,
            at(0),
        );
        assert_eq!(
            r,
            Report {
                status: None,
                events: vec![]
            }
        );
    }

    #[test]
    fn every_reason_has_a_state() {
        for reason in StorageReady::ALL {
            let _ = state_of(*reason);
        }
        assert_eq!(state_of(StorageReady::ResizeRefused), StorageState::Failed);
    }

    #[test]
    fn the_inputs_come_from_the_node() {
        let l = live(16 * MI, 16 * MI, 0);
        let i: Inputs = l.inputs(at(0)).unwrap();
        assert_eq!(i.spec_size, "16Mi");
        assert!(i.auto_resize.is_some() && i.last_resize.is_none());
    }
}
