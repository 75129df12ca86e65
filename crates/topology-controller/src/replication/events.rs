//! Events on a ValkeyReplication: one per step carried out, and one per primary change
//! observed (a Sentinel failover, or a hand-over). None for waiting or idle: the Progressing
//! condition says those.

use crate::replication::plan::Step;

operator_runtime::event_reasons! {
    /// Event reasons on a ValkeyReplication.
    pub enum ReplicationEvent {
        /// A data node was made a replica of the primary (`REPLICAOF`).
        ReplicaAttached: Normal,
        /// A data node serving as primary that the sentinels do not name was made a replica
        /// of the primary, and its clients disconnected.
        PrimaryDemoted: Normal,
        /// A sentinel was told to monitor the primary (`SENTINEL MONITOR`).
        SentinelMonitoring: Normal,
        /// A sentinel's options were set to the spec's (`SENTINEL SET`).
        SentinelConfigured: Normal,
        /// The primary moved to another data node.
        PrimaryChanged: Normal,
        /// Members the spec no longer wants were deleted.
        MembersRemoved: Normal,
        /// A sentinel forgot the members that are gone (`SENTINEL RESET`).
        SentinelReset: Normal,
        /// A replica's `replica-priority` was set (a switchover's target, or back after one).
        ReplicaPrioritySet: Normal,
        /// The primary was handed over with writes paused (a switchover, or before it
        /// restarts or is removed).
        HandedOver: Normal,
        /// A member's roll gate was opened.
        Rolling: Normal,
        /// Live directives were set on running data nodes (CONFIG SET, no restart).
        ConfigSetLive: Normal,
        /// The `replication` ACL user was created live on members whose running config
        /// predates it (no restart), so replicas can log in as it.
        ReplicationUserCreated: Normal,
        /// The spec's image or config is not rolled out: its Valkey version could not take
        /// over the members' data, or does not know a directive. The note says how to go on.
        UpdateRefused: Warning,
        /// A step failed; the note says what.
        StepFailed: Warning,
        /// A sentinel serving an older certificate was evicted so that it starts with the
        /// renewed one (Sentinel reads its TLS files only at start); the note says which.
        SentinelRestarted: Normal,
    }
}

/// One Event: its reason, its note, and the member it concerns (its related object: Events
/// that differ only in their note are folded into one series, so naming the member keeps,
/// say, hand-overs of different primaries apart).
pub type GroupEvent = (ReplicationEvent, String, Option<String>);

/// The member a step concerns.
fn concerned(step: &Step) -> Option<String> {
    match step {
        Step::ReplicaOf { member, .. }
        | Step::SetPriority { member, .. }
        | Step::AllowRoll { member, .. } => Some(member.clone()),
        Step::Monitor { sentinel, .. }
        | Step::Remonitor { sentinel, .. }
        | Step::Configure { sentinel, .. }
        | Step::Reset { sentinel } => Some(sentinel.clone()),
        Step::HandOver { primary, .. } => Some(primary.clone()),
        Step::Remove(_)
        | Step::SetConfig(_)
        | Step::CreateReplicationUser { .. }
        | Step::Wait { .. }
        | Step::Idle => None,
    }
}

/// The Event for `step` (carried out, or failed with `error`). `None` for a step that does
/// nothing.
pub fn step_event(step: &Step, error: Option<&str>) -> Option<GroupEvent> {
    let reason = match step {
        Step::Wait { reason, .. } if reason.is_refusal() => ReplicationEvent::UpdateRefused,
        Step::Wait { .. } | Step::Idle => return None,
        _ if error.is_some() => ReplicationEvent::StepFailed,
        Step::ReplicaOf { demote: true, .. } => ReplicationEvent::PrimaryDemoted,
        Step::ReplicaOf { .. } => ReplicationEvent::ReplicaAttached,
        Step::Monitor { .. } | Step::Remonitor { .. } => ReplicationEvent::SentinelMonitoring,
        Step::Configure { .. } => ReplicationEvent::SentinelConfigured,
        Step::Remove(_) => ReplicationEvent::MembersRemoved,
        Step::Reset { .. } => ReplicationEvent::SentinelReset,
        Step::SetPriority { .. } => ReplicationEvent::ReplicaPrioritySet,
        Step::HandOver { .. } => ReplicationEvent::HandedOver,
        Step::AllowRoll { .. } => ReplicationEvent::Rolling,
        Step::SetConfig(_) => ReplicationEvent::ConfigSetLive,
        Step::CreateReplicationUser { .. } => ReplicationEvent::ReplicationUserCreated,
    };
    let note = match (step, error) {
        (_, Some(e)) => format!("{step}: {e}"),
        (Step::Wait { message, .. }, None) => message.clone(),
        (_, None) => step.to_string(),
    };
    Some((reason, note, concerned(step)))
}

/// The Event for a primary that moved from `before` (the status' current primary) to
/// `now` (concerning `now`); `None` when it did not, or before the first primary is known.
pub fn primary_changed(before: Option<&str>, now: Option<&str>) -> Option<GroupEvent> {
    match (before, now) {
        (Some(before), Some(now)) if before != now => Some((
            ReplicationEvent::PrimaryChanged,
            format!("primary moved from {before} to {now}"),
            Some(now.to_string()),
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crd_types::conditions::reasons::Waiting;
    use operator_runtime::EventReason;

    #[test]
    fn steps_have_their_reasons_and_waits_none() {
        assert_eq!(step_event(&Step::wait(Waiting::Forming, "x"), None), None);
        assert_eq!(step_event(&Step::Idle, Some("boom")), None);
        let demote = Step::ReplicaOf {
            member: "g-0".into(),
            primary: "g-2".into(),
            ip: "10.0.0.2".into(),
            demote: true,
        };
        let (reason, note, member) = step_event(&demote, None).unwrap();
        assert_eq!(reason, ReplicationEvent::PrimaryDemoted);
        assert_eq!(note, "g-0 stops serving as primary and replicates g-2");
        assert_eq!(member.as_deref(), Some("g-0"));
        let (reason, note, _) = step_event(&demote, Some("REPLICAOF on g-0: timeout")).unwrap();
        assert!(reason.is_warning());
        assert!(note.ends_with(": REPLICAOF on g-0: timeout"), "{note}");
    }

    #[test]
    fn a_moved_primary_is_told_once_known() {
        assert_eq!(primary_changed(None, Some("g-0")), None);
        assert_eq!(primary_changed(Some("g-0"), Some("g-0")), None);
        assert_eq!(primary_changed(Some("g-0"), None), None);
        let (reason, note, member) = primary_changed(Some("g-0"), Some("g-2")).unwrap();
        assert_eq!(reason, ReplicationEvent::PrimaryChanged);
        assert_eq!(note, "primary moved from g-0 to g-2");
        assert_eq!(member.as_deref(), Some("g-2"));
    }
}
