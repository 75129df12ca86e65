//! Events (layer 5): what topology-controller publishes on a ValkeyCluster, one per step
//! carried out, none for waiting or idle (the Progressing condition says those).

use crd_types::conditions::reasons::Waiting;

use crate::cluster::plan::{MarkerHeal, Step};

operator_runtime::event_reasons! {
    /// Event reasons on a ValkeyCluster.
    pub enum ClusterEvent {
        /// Members were introduced with `CLUSTER MEET`.
        MembersMet: Normal,
        /// A dead identity was forgotten on every member.
        NodeForgotten: Normal,
        /// Slots were given to primaries (`ADDSLOTSRANGE`).
        SlotsAssigned: Normal,
        /// A slot left open by an interrupted move was finished or cleared, or a replica's
        /// stale marker cleared through its primary with `SETSLOT STABLE`.
        SlotRepaired: Normal,
        /// A replica's stale slot marker survived the first method, so a stronger one runs
        /// (re-opening the slot on its primary, then a reset and full sync of the replica);
        /// the note names the marker, the slot's owner and the method.
        StaleMarkerEscalated: Warning,
        /// A step was taken again and again and changed nothing the members show, so it is
        /// held back until something changes; the note says which.
        NoProgress: Warning,
        /// A member was made a replica of its shard's primary.
        ReplicaAttached: Normal,
        /// Slots are moving between primaries.
        SlotsMigrating: Normal,
        /// Members the spec no longer wants were deleted.
        MembersRemoved: Normal,
        /// A replica took over its shard (`CLUSTER FAILOVER`).
        Failover: Normal,
        /// A member's roll gate was opened.
        Rolling: Normal,
        /// Live directives were set on running members (CONFIG SET, no restart).
        ConfigSetLive: Normal,
        /// The `replication` ACL user was created live on members whose running config
        /// predates it (no restart), so replicas can log in as it.
        ReplicationUserCreated: Normal,
        /// The spec's image or config is not rolled out: its Valkey version could not take
        /// over the members' data, or does not know a directive. The note says how to go on.
        UpdateRefused: Warning,
        /// A step failed; the note says what.
        StepFailed: Warning,
    }
}

/// The Event for `step` (carried out, or failed with `error`): its reason and note. `None`
/// for a step that does nothing.
pub fn step_event(step: &Step, error: Option<&str>) -> Option<(ClusterEvent, String)> {
    let reason = match step {
        Step::Wait { reason, .. } if reason.is_refusal() => ClusterEvent::UpdateRefused,
        Step::Wait {
            reason: Waiting::NoProgress,
            ..
        } => ClusterEvent::NoProgress,
        // Refreshing views is routine gossip help, not news.
        Step::Wait { .. } | Step::Idle | Step::Refresh(_) => return None,
        _ if error.is_some() => ClusterEvent::StepFailed,
        Step::Meet(_) => ClusterEvent::MembersMet,
        Step::Forget { .. } => ClusterEvent::NodeForgotten,
        Step::AddSlots(_) => ClusterEvent::SlotsAssigned,
        Step::ClearStaleMarker { heal, .. } if *heal != MarkerHeal::Stable => {
            ClusterEvent::StaleMarkerEscalated
        }
        Step::FixOpenSlot { .. } | Step::Stabilize { .. } | Step::ClearStaleMarker { .. } => {
            ClusterEvent::SlotRepaired
        }
        Step::Replicate(_) => ClusterEvent::ReplicaAttached,
        Step::Migrate(_) | Step::MigrateAtomically(_) => ClusterEvent::SlotsMigrating,
        Step::Remove(_) => ClusterEvent::MembersRemoved,
        Step::Failover { .. } => ClusterEvent::Failover,
        Step::AllowRoll { .. } => ClusterEvent::Rolling,
        Step::SetConfig(_) => ClusterEvent::ConfigSetLive,
        Step::CreateReplicationUser { .. } => ClusterEvent::ReplicationUserCreated,
    };
    let note = match (step, error) {
        (_, Some(e)) => format!("{step}: {e}"),
        (Step::Wait { message, .. }, None) => message.clone(),
        (_, None) => step.to_string(),
    };
    Some((reason, note))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::roll::FailoverReason;
    use operator_runtime::EventReason;

    #[test]
    fn an_escalated_heal_and_a_step_held_back_are_warnings() {
        let heal = |heal| Step::ClearStaleMarker {
            slot: 7,
            marker: crate::cluster::plan::MarkerKind::Importing,
            replica: "c-1-1".into(),
            primary: "c-1-0".into(),
            owner_id: "a".repeat(40),
            owner: "c-0-0 of another shard".into(),
            heal,
        };
        let reason = |step: &Step| step_event(step, None).unwrap().0;
        assert_eq!(
            reason(&heal(MarkerHeal::Stable)),
            ClusterEvent::SlotRepaired
        );
        assert_eq!(
            reason(&heal(MarkerHeal::Reopen)),
            ClusterEvent::StaleMarkerEscalated
        );
        assert_eq!(
            reason(&heal(MarkerHeal::Resync)),
            ClusterEvent::StaleMarkerEscalated
        );
        assert!(ClusterEvent::StaleMarkerEscalated.is_warning());
        let held = Step::wait(Waiting::NoProgress, "x was done 5 times");
        let (reason, note) = step_event(&held, None).unwrap();
        assert_eq!(reason, ClusterEvent::NoProgress);
        assert_eq!(note, "x was done 5 times");
    }

    #[test]
    fn waiting_and_idle_publish_nothing() {
        let wait = Step::wait(Waiting::Forming, "forming: 1 of 3 members answer");
        assert_eq!(step_event(&wait, None), None);
        assert_eq!(step_event(&Step::Idle, None), None);
        assert_eq!(step_event(&Step::Idle, Some("boom")), None);
    }

    #[test]
    fn a_refused_update_is_a_warning_saying_how_to_go_on() {
        let refused = Step::wait(
            Waiting::VersionRefused,
            "valkey/valkey:8.0 is not rolled out",
        );
        let (reason, note) = step_event(&refused, None).unwrap();
        assert_eq!(reason, ClusterEvent::UpdateRefused);
        assert!(reason.is_warning());
        assert_eq!(note, "valkey/valkey:8.0 is not rolled out");
    }

    #[test]
    fn each_step_has_its_reason_and_describes_itself() {
        let failover = Step::Failover {
            member: "c-0-1".into(),
            reason: FailoverReason::Roll,
        };
        let (reason, note) = step_event(&failover, None).unwrap();
        assert_eq!(reason, ClusterEvent::Failover);
        assert!(!reason.is_warning());
        assert_eq!(
            note,
            "c-0-1 takes over its shard before its primary restarts"
        );
        let cases = [
            (
                Step::Remove(vec!["c-2-0".into()]),
                ClusterEvent::MembersRemoved,
            ),
            (Step::AddSlots(vec![]), ClusterEvent::SlotsAssigned),
            (
                Step::Stabilize {
                    slot: 7,
                    on: vec!["c-0-0".into()],
                },
                ClusterEvent::SlotRepaired,
            ),
            (
                Step::AllowRoll {
                    member: "c-0-1".into(),
                    revision: "r2".into(),
                },
                ClusterEvent::Rolling,
            ),
        ];
        for (step, expected) in cases {
            assert_eq!(step_event(&step, None).unwrap().0, expected, "{step:?}");
        }
    }

    #[test]
    fn a_failed_step_is_a_warning_naming_the_step_and_the_error() {
        let step = Step::Replicate(vec![("c-0-1".into(), "abc".into())]);
        let (reason, note) = step_event(&step, Some("REPLICATE on c-0-1: timeout")).unwrap();
        assert_eq!(reason, ClusterEvent::StepFailed);
        assert!(reason.is_warning());
        assert_eq!(note, "c-0-1 replicates abc: REPLICATE on c-0-1: timeout");
    }
}
