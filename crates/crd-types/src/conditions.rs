//! Condition types and helpers.
//!
//! `status.conditions` is a list-map keyed by `type`, so under server-side apply each
//! controller owns only the conditions it writes. A controller therefore builds its own
//! conditions with [`transition`], which keeps `lastTransitionTime` while the status does not
//! change, and applies just those.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// Condition types, grouped by the controller that writes them.
pub mod types {
    /// node-controller: the pod runs and passes its readiness probe.
    pub const WORKLOAD_READY: &str = "WorkloadReady";
    /// node-controller: a template change waits for the parent's roll gate.
    pub const ROLL_PENDING: &str = "RollPending";
    /// node-controller: the spec can be rendered (no operator-owned directive, class exists...).
    pub const CONFIG_VALID: &str = "ConfigValid";
    /// service-controller: the node's Service exists and has a ClusterIP.
    pub const ENDPOINT_READY: &str = "EndpointReady";
    /// pvc-resizer: the volume has the requested size.
    pub const STORAGE_READY: &str = "StorageReady";
    /// topology-controller: the node plays its role in its topology.
    pub const MEMBER_READY: &str = "MemberReady";

    /// Topology (ValkeyCluster / ValkeyReplication) conditions, written by topology-controller.
    pub const READY: &str = "Ready";
    pub const PROGRESSING: &str = "Progressing";
    pub const DEGRADED: &str = "Degraded";
    pub const SLOTS_ASSIGNED: &str = "SlotsAssigned";
}

pub const TRUE: &str = "True";
pub const FALSE: &str = "False";
pub const UNKNOWN: &str = "Unknown";

/// The condition of `type_` in `conditions`, if present.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the condition of `type_` is present with status "True".
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    find(conditions, type_).is_some_and(|c| c.status == TRUE)
}

/// The desired state of one condition, without the bookkeeping fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired<'a> {
    pub type_: &'a str,
    pub status: bool,
    /// CamelCase, machine readable.
    pub reason: &'a str,
    /// For a person: what is going on and, when it is bad, what to do.
    pub message: String,
}

/// Builds the condition to write from the current ones: `lastTransitionTime` is kept when the
/// status is unchanged, so re-applying an unchanged condition is a no-op.
pub fn transition(
    current: &[Condition],
    desired: Desired<'_>,
    observed_generation: Option<i64>,
    now: Timestamp,
) -> Condition {
    let status = if desired.status { TRUE } else { FALSE };
    let last_transition_time = match find(current, desired.type_) {
        Some(existing) if existing.status == status => existing.last_transition_time.clone(),
        _ => Time(now),
    };
    Condition {
        type_: desired.type_.to_string(),
        status: status.to_string(),
        reason: desired.reason.to_string(),
        message: desired.message,
        observed_generation,
        last_transition_time,
    }
}

/// Inserts or replaces `condition` (by type) in `conditions`, keeping the list order stable.
pub fn upsert(conditions: &mut Vec<Condition>, condition: Condition) {
    match conditions.iter_mut().find(|c| c.type_ == condition.type_) {
        Some(slot) => *slot = condition,
        None => conditions.push(condition),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).unwrap()
    }

    fn ready(status: bool, reason: &'static str) -> Desired<'static> {
        Desired {
            type_: types::WORKLOAD_READY,
            status,
            reason,
            message: format!("reason {reason}"),
        }
    }

    #[test]
    fn new_condition_starts_its_clock_now() {
        let c = transition(&[], ready(true, "PodReady"), Some(3), at(100));
        assert_eq!(c.status, "True");
        assert_eq!(c.reason, "PodReady");
        assert_eq!(c.observed_generation, Some(3));
        assert_eq!(c.last_transition_time, Time(at(100)));
    }

    #[test]
    fn unchanged_status_keeps_transition_time() {
        let first = transition(&[], ready(true, "PodReady"), Some(1), at(100));
        let again = transition(&[first], ready(true, "StillReady"), Some(2), at(500));
        assert_eq!(again.last_transition_time, Time(at(100)));
        // Reason, message and generation still follow the latest observation.
        assert_eq!(again.reason, "StillReady");
        assert_eq!(again.observed_generation, Some(2));
    }

    #[test]
    fn changed_status_moves_transition_time() {
        let first = transition(&[], ready(true, "PodReady"), Some(1), at(100));
        let flipped = transition(&[first], ready(false, "PodNotReady"), Some(1), at(500));
        assert_eq!(flipped.status, "False");
        assert_eq!(flipped.last_transition_time, Time(at(500)));
    }

    #[test]
    fn other_types_do_not_lend_their_time() {
        let endpoint = transition(
            &[],
            Desired {
                type_: types::ENDPOINT_READY,
                status: true,
                reason: "ServiceReady",
                message: String::new(),
            },
            None,
            at(100),
        );
        let c = transition(&[endpoint], ready(true, "PodReady"), None, at(200));
        assert_eq!(c.last_transition_time, Time(at(200)));
    }

    #[test]
    fn upsert_replaces_by_type_and_appends_new_types() {
        let mut list = vec![transition(&[], ready(false, "Starting"), None, at(1))];
        let now_ready = transition(&list, ready(true, "PodReady"), None, at(2));
        upsert(&mut list, now_ready);
        assert_eq!(list.len(), 1);
        assert!(is_true(&list, types::WORKLOAD_READY));
        let pending = Desired {
            type_: types::ROLL_PENDING,
            status: false,
            reason: "UpToDate",
            message: String::new(),
        };
        let pending = transition(&list, pending, None, at(3));
        upsert(&mut list, pending);
        assert_eq!(list.len(), 2);
        assert!(!is_true(&list, types::ROLL_PENDING));
        assert!(find(&list, "Missing").is_none());
    }
}
