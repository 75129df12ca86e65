//! Condition types and helpers.
//!
//! `status.conditions` is a list-map keyed by `type`, so under server-side apply each
//! controller owns only the conditions it writes. A controller therefore builds its own
//! conditions with [`transition`], which keeps `lastTransitionTime` while the status does not
//! change, and applies just those.

pub mod reasons;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

pub use reasons::Reason;

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
    /// node-controller: the claim requests at least the spec's size.
    pub const CLAIM_SIZE: &str = "ClaimSize";
    /// pvc-resizer: the volume has the size the spec and its usage ask for.
    pub const STORAGE_READY: &str = "StorageReady";
    /// topology-controller: the node plays its role in its topology.
    pub const MEMBER_READY: &str = "MemberReady";

    /// Topology (ValkeyCluster / ValkeyReplication) conditions, written by topology-controller.
    pub const READY: &str = "Ready";
    pub const PROGRESSING: &str = "Progressing";
    pub const DEGRADED: &str = "Degraded";
    pub const SLOTS_ASSIGNED: &str = "SlotsAssigned";
    /// With `spec.users`: every data node has exactly the users the spec asks for.
    pub const USERS_READY: &str = "UsersReady";
    /// With `spec.monitoring.podMonitor`: the topology's PodMonitor is applied.
    pub const POD_MONITOR_READY: &str = "PodMonitorReady";
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

/// The desired state of one condition, without the bookkeeping fields. Built from a typed
/// [`Reason`], which names the condition type, so no reason lands under another type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConditionSpec {
    type_: &'static str,
    status: bool,
    reason: &'static str,
    message: String,
}

impl ConditionSpec {
    /// `reason`'s condition type with `status`; `message` is for a person: what is going on
    /// and, when it is bad, what to do.
    pub fn new<R: Reason>(reason: R, status: bool, message: impl Into<String>) -> Self {
        Self {
            type_: R::TYPE,
            status,
            reason: reason.as_str(),
            message: message.into(),
        }
    }

    pub fn type_(&self) -> &'static str {
        self.type_
    }

    pub fn status(&self) -> bool {
        self.status
    }

    pub fn reason(&self) -> &'static str {
        self.reason
    }

    pub fn message(&self) -> &str {
        &self.message
    }
}

/// Builds the condition to write from the current ones: `lastTransitionTime` is kept when the
/// status is unchanged, so re-applying an unchanged condition is a no-op.
pub fn transition(
    current: &[Condition],
    desired: ConditionSpec,
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
    use reasons::{EndpointReady, RollPending, WorkloadReady};

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).unwrap()
    }

    fn ready(status: bool, reason: WorkloadReady) -> ConditionSpec {
        ConditionSpec::new(reason, status, format!("reason {reason}"))
    }

    #[test]
    fn new_condition_starts_its_clock_now() {
        let c = transition(&[], ready(true, WorkloadReady::PodReady), Some(3), at(100));
        assert_eq!(c.status, "True");
        assert_eq!(c.reason, "PodReady");
        assert_eq!(c.observed_generation, Some(3));
        assert_eq!(c.last_transition_time, Time(at(100)));
    }

    #[test]
    fn unchanged_status_keeps_transition_time() {
        let first = transition(&[], ready(true, WorkloadReady::PodReady), Some(1), at(100));
        let again = transition(
            &[first],
            ready(true, WorkloadReady::ContainerWaiting),
            Some(2),
            at(500),
        );
        assert_eq!(again.last_transition_time, Time(at(100)));
        // Reason, message and generation still follow the latest observation.
        assert_eq!(again.reason, "ContainerWaiting");
        assert_eq!(again.observed_generation, Some(2));
    }

    #[test]
    fn changed_status_moves_transition_time() {
        let first = transition(&[], ready(true, WorkloadReady::PodReady), Some(1), at(100));
        let flipped = transition(
            &[first],
            ready(false, WorkloadReady::PodNotReady),
            Some(1),
            at(500),
        );
        assert_eq!(flipped.status, "False");
        assert_eq!(flipped.last_transition_time, Time(at(500)));
    }

    #[test]
    fn other_types_do_not_lend_their_time() {
        let endpoint = transition(
            &[],
            ConditionSpec::new(EndpointReady::ServiceReady, true, ""),
            None,
            at(100),
        );
        let c = transition(
            &[endpoint],
            ready(true, WorkloadReady::PodReady),
            None,
            at(200),
        );
        assert_eq!(c.last_transition_time, Time(at(200)));
    }

    #[test]
    fn upsert_replaces_by_type_and_appends_new_types() {
        let mut list = vec![transition(
            &[],
            ready(false, WorkloadReady::PodMissing),
            None,
            at(1),
        )];
        let now_ready = transition(&list, ready(true, WorkloadReady::PodReady), None, at(2));
        upsert(&mut list, now_ready);
        assert_eq!(list.len(), 1);
        assert!(is_true(&list, types::WORKLOAD_READY));
        let pending = ConditionSpec::new(RollPending::UpToDate, false, "");
        let pending = transition(&list, pending, None, at(3));
        upsert(&mut list, pending);
        assert_eq!(list.len(), 2);
        assert!(!is_true(&list, types::ROLL_PENDING));
        assert!(find(&list, "Missing").is_none());
    }
}
