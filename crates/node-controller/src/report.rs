//! The report stage of a reconcile: from what was live and what was applied to the status to
//! write and the Events to publish, with no I/O.
//!
//! The status is this controller's part only (`status.workload` and its three conditions,
//! see [`crate::status`]) and is `None` when the node already says it all. Events say what
//! was done (a workload created or rolled) and what newly blocks the node (an invalid
//! config, a held roll, a claim on a StorageClass that does not exist), the latter once per
//! change of their condition, so a resync does not repeat them. A valkey container that
//! cannot start until the user creates what it references is reported as
//! [`Report::blocked`]: the binary fails the reconcile with it after publishing, so the
//! runtime tells it as a Warning and retries with a growing delay.

use crd_types::ValkeyNodeStatus;
use crd_types::conditions::reasons::WorkloadReady;
use crd_types::conditions::{self, TRUE, types};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kube::Resource;

use crate::events::{NodeEvent, NodeEventReason};
use crate::live::Live;
use crate::plan::{Decision, WorkloadChange};
use crate::status::{self, BlockedContainer, Observed};
use crate::workload::Workload;

/// The workload as the API server returned it from the apply, and why it was applied.
#[derive(Debug, Clone, PartialEq)]
pub struct AppliedWorkload {
    pub workload: Workload,
    pub change: WorkloadChange,
}

/// What the apply stage did: the plan's decision and the objects it wrote, as returned by
/// the API server (`None`: not applied, the live one stands).
#[derive(Debug, Clone, PartialEq)]
pub struct Applied {
    pub decision: Decision,
    pub claim: Option<PersistentVolumeClaim>,
    pub workload: Option<AppliedWorkload>,
}

impl Applied {
    /// The workload as it stands now: the applied one, else the live one.
    fn workload<'a>(&'a self, live: &'a Live) -> Option<&'a Workload> {
        self.workload
            .as_ref()
            .map(|a| &a.workload)
            .or(live.workload.as_ref())
    }

    /// The claim as it stands now: the applied one, else the live one.
    fn claim<'a>(&'a self, live: &'a Live) -> Option<&'a PersistentVolumeClaim> {
        self.claim.as_ref().or(live.claim.as_ref())
    }
}

/// What to write and to tell.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// The status to apply; `None` when the node's status already says it.
    pub status: Option<ValkeyNodeStatus>,
    /// Published before the status, so a failed publish is retried: the next reconcile still
    /// sees the old condition.
    pub events: Vec<NodeEvent>,
    /// The current pod's valkey container waits for the user; see
    /// [`status::blocked_container`].
    pub blocked: Option<BlockedContainer>,
}

/// The report of one reconcile of `live.node`.
pub fn report(live: &Live, applied: &Applied, now: Timestamp) -> Report {
    let node = &live.node;
    let decision = &applied.decision;
    let workload = applied.workload(live);
    let claim = applied.claim(live);
    let pod = live.current_pod();
    let generation = node.metadata.generation;
    let workload_status = status::workload_status(
        workload,
        pod,
        decision.desired_revision.as_deref(),
        generation,
    );
    let observed = Observed {
        config: decision.config.as_ref().map(|_| ()),
        waiting_for_endpoint: decision.waiting_for_endpoint,
        workload_exists: workload.is_some(),
        pod,
        claim,
        storage_class_missing: live.storage_class_missing,
        persistence: node.spec.template.persistence.as_ref(),
        roll: decision.roll.as_ref(),
        workload: &workload_status,
    };
    let current = node.status.as_ref();
    let desired = status::desired(current, workload_status.clone(), &observed, generation, now);

    let mut events: Vec<NodeEvent> = applied_event(applied).into_iter().collect();
    let current_conditions = current.map(|s| s.conditions.as_slice()).unwrap_or_default();
    events.extend(transition_events(
        current_conditions,
        &desired.conditions,
        decision,
        workload,
        claim,
        live.storage_class_missing,
    ));
    Report {
        status: status::needs_update(current, &desired).then_some(desired),
        events,
        blocked: pod.and_then(status::blocked_container),
    }
}

/// The Event for a workload this reconcile created or rolled.
fn applied_event(applied: &Applied) -> Option<NodeEvent> {
    let AppliedWorkload { workload, change } = applied.workload.as_ref()?;
    let (kind, name) = (workload.kind(), workload.name());
    let revision = applied
        .decision
        .desired_revision
        .as_deref()
        .unwrap_or("unknown");
    let related = Some(workload.object_ref());
    match change {
        WorkloadChange::Create => Some(NodeEvent::new(
            NodeEventReason::WorkloadCreated,
            format!("{kind} {name} created at revision {revision}"),
            related,
        )),
        WorkloadChange::Roll { from } => Some(NodeEvent::new(
            NodeEventReason::Rolling,
            format!(
                "{kind} {name} rolls from revision {} to {revision}; the pod restarts",
                from.as_deref().unwrap_or("unknown")
            ),
            related,
        )),
        WorkloadChange::Repair { .. } => None,
    }
}

/// Events for conditions that newly say something is blocked: an invalid config, a held
/// roll, a claim that does not bind. Only on a change of status, reason or message.
fn transition_events(
    current: &[Condition],
    desired: &[Condition],
    decision: &Decision,
    workload: Option<&Workload>,
    claim: Option<&PersistentVolumeClaim>,
    storage_class_missing: bool,
) -> Vec<NodeEvent> {
    let changed = |type_: &str| {
        let key = |c: &Condition| (c.status.clone(), c.reason.clone(), c.message.clone());
        conditions::find(desired, type_).map(key) != conditions::find(current, type_).map(key)
    };
    let now = |type_: &str| conditions::find(desired, type_);
    let mut events = Vec::new();
    if let Err(error) = &decision.config
        && changed(types::CONFIG_VALID)
    {
        events.push(NodeEvent::new(
            NodeEventReason::ConfigInvalid,
            format!("{error}; the running pod, if any, is left as it is"),
            None,
        ));
    }
    if let Some(c) = now(types::ROLL_PENDING)
        && c.status == TRUE
        && changed(types::ROLL_PENDING)
    {
        events.push(NodeEvent::new(
            NodeEventReason::RollHeld,
            c.message.clone(),
            workload.map(Workload::object_ref),
        ));
    }
    if let Some(c) = now(types::WORKLOAD_READY)
        && c.reason == WorkloadReady::ImageIncomplete.as_str()
        && changed(types::WORKLOAD_READY)
    {
        events.push(NodeEvent::new(
            NodeEventReason::ImageIncomplete,
            c.message.clone(),
            None,
        ));
    }
    if storage_class_missing
        && let Some(c) = now(types::WORKLOAD_READY)
        && c.reason == WorkloadReady::ClaimNotBound.as_str()
        && changed(types::WORKLOAD_READY)
    {
        events.push(NodeEvent::new(
            NodeEventReason::ClaimNotBound,
            c.message.clone(),
            claim.map(|c| c.object_ref(&())),
        ));
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use crd_types::ValkeyNodeSpec;
    use crd_types::node::{EndpointStatus, RolloutPolicy};
    use crd_types::template::Persistence;
    use k8s_openapi::api::core::v1::{
        ContainerStatus, PersistentVolumeClaimStatus, Pod, PodStatus,
    };

    use crate::meta::fixtures;
    use crate::plan::{self, NodePlan, PlannedWorkload};

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn node(f: impl FnOnce(&mut ValkeyNodeSpec)) -> crd_types::ValkeyNode {
        let mut spec = ValkeyNodeSpec::default();
        f(&mut spec);
        let mut n = fixtures::node("cache", spec);
        n.status = Some(ValkeyNodeStatus {
            endpoint: Some(EndpointStatus {
                cluster_ip: Some("10.96.0.5".into()),
                ..Default::default()
            }),
            ..Default::default()
        });
        n
    }

    fn live(node: crd_types::ValkeyNode) -> Live {
        Live {
            node,
            config_map: None,
            claim: None,
            workload: None,
            pods: Vec::new(),
            storage_class_missing: false,
        }
    }

    /// The apply stage without an API server: every planned object comes back as sent.
    fn apply(plan: NodePlan) -> Applied {
        let NodePlan {
            decision,
            config_map: _,
            claim,
            workload,
        } = plan;
        Applied {
            decision,
            claim,
            workload: workload
                .map(|PlannedWorkload { workload, change }| AppliedWorkload { workload, change }),
        }
    }

    /// One reconcile on `live`; the returned live state is what the next one sees.
    fn reconcile(mut live: Live, now: Timestamp) -> (Live, Report) {
        let applied = apply(plan::plan(&live));
        let report = report(&live, &applied, now);
        if let Some(w) = &applied.workload {
            live.workload = Some(w.workload.clone());
        }
        if let Some(c) = &applied.claim {
            live.claim = Some(c.clone());
        }
        if let Some(s) = &report.status {
            let mut status = live.node.status.clone().unwrap_or_default();
            status.workload = s.workload.clone();
            for c in &s.conditions {
                conditions::upsert(&mut status.conditions, c.clone());
            }
            live.node.status = Some(status);
        }
        (live, report)
    }

    fn reasons(report: &Report) -> Vec<&'static str> {
        use operator_runtime::EventReason;
        report.events.iter().map(|e| e.reason.as_str()).collect()
    }

    fn running_pod(workload: &Workload, ready: bool) -> Pod {
        let template = workload.template().unwrap();
        let mut metadata = template.metadata.clone().unwrap_or_default();
        metadata.name = Some("cache-0".into());
        Pod {
            metadata,
            spec: template.spec.clone(),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                container_statuses: Some(vec![ContainerStatus {
                    name: "valkey".into(),
                    ready,
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn creating_the_workload_is_told_once_and_the_status_follows() {
        let (live, first) = reconcile(live(node(|_| {})), at(10));
        assert_eq!(reasons(&first), ["WorkloadCreated"]);
        let event = &first.events[0];
        assert!(
            event
                .note
                .starts_with("StatefulSet cache created at revision "),
            "{}",
            event.note
        );
        assert_eq!(
            event.related.as_ref().and_then(|r| r.kind.as_deref()),
            Some("StatefulSet")
        );
        let status = first.status.as_ref().unwrap();
        let ready = conditions::find(&status.conditions, types::WORKLOAD_READY).unwrap();
        assert_eq!(ready.reason, "PodMissing");

        // Nothing changed: nothing to write, nothing to tell.
        let (mut live, second) = reconcile(live, at(20));
        assert_eq!(
            second,
            Report {
                status: None,
                events: vec![],
                blocked: None,
            }
        );

        // The pod appears and gets ready: a status write, no Event.
        let pod = running_pod(live.workload.as_ref().unwrap(), true);
        live.pods = vec![pod];
        let (_, third) = reconcile(live, at(30));
        assert!(third.events.is_empty());
        let status = third.status.unwrap();
        assert!(conditions::is_true(
            &status.conditions,
            types::WORKLOAD_READY
        ));
        assert_eq!(
            status.workload.unwrap().pod_name.as_deref(),
            Some("cache-0")
        );
    }

    #[test]
    fn a_roll_is_told_when_applied_and_a_held_one_once() {
        let (mut live, _) = reconcile(live(node(|_| {})), at(10));
        live.node.spec.template.image = "valkey/valkey:8.0".into();
        let (mut live, rolled) = reconcile(live, at(20));
        assert_eq!(reasons(&rolled), ["Rolling"]);
        assert!(
            rolled.events[0].note.contains("; the pod restarts"),
            "{}",
            rolled.events[0].note
        );

        live.node.spec.rollout_policy = RolloutPolicy::Gated;
        live.node.spec.template.image = "valkey/valkey:7.2".into();
        let (live, held) = reconcile(live, at(30));
        assert_eq!(reasons(&held), ["RollHeld"]);
        assert!(held.events[0].note.contains("spec.allowedRevision"));
        assert_eq!(
            held.events[0]
                .related
                .as_ref()
                .and_then(|r| r.name.as_deref()),
            Some("cache")
        );
        let (_, again) = reconcile(live, at(40));
        assert!(again.events.is_empty(), "{:?}", again.events);
    }

    #[test]
    fn an_invalid_config_is_told_once() {
        let invalid = node(|s| {
            s.template.config.0.insert("DIR".into(), "/tmp".into());
        });
        let (live, first) = reconcile(live(invalid), at(10));
        assert_eq!(reasons(&first), ["ConfigInvalid"]);
        assert!(first.events[0].note.contains("DIR"));
        assert!(
            first.events[0]
                .note
                .ends_with("the running pod, if any, is left as it is")
        );
        let status = first.status.unwrap();
        let valid = conditions::find(&status.conditions, types::CONFIG_VALID).unwrap();
        assert_eq!(
            (valid.status.as_str(), valid.reason.as_str()),
            ("False", "OwnedDirective")
        );
        let (_, again) = reconcile(live, at(20));
        assert_eq!(
            again,
            Report {
                status: None,
                events: vec![],
                blocked: None,
            }
        );
    }

    #[test]
    fn a_claim_on_a_missing_class_is_told_once() {
        let with_class = node(|s| {
            s.template.persistence = Some(Persistence {
                size: "1Gi".into(),
                storage_class_name: Some("does-not-exist".into()),
                ..Default::default()
            })
        });
        let mut first = live(with_class);
        first.storage_class_missing = true;
        let (mut live, report) = reconcile(first, at(10));
        // The claim as just created: Pending.
        live.claim.as_mut().unwrap().status = Some(PersistentVolumeClaimStatus {
            phase: Some("Pending".into()),
            ..Default::default()
        });
        assert_eq!(reasons(&report), ["WorkloadCreated"]);

        // The workload's pod exists but cannot be scheduled.
        let mut pod = running_pod(live.workload.as_ref().unwrap(), false);
        pod.status.as_mut().unwrap().phase = Some("Pending".into());
        live.pods = vec![pod];
        let (live, report) = reconcile(live, at(20));
        assert_eq!(reasons(&report), ["ClaimNotBound"]);
        let event = &report.events[0];
        assert!(event.note.contains("does not exist"), "{}", event.note);
        assert_eq!(
            event.related.as_ref().and_then(|r| r.name.as_deref()),
            Some("cache-data")
        );
        let (_, again) = reconcile(live, at(30));
        assert!(again.events.is_empty());
    }

    #[test]
    fn a_container_waiting_for_a_secret_is_blocked_on_every_look() {
        use k8s_openapi::api::core::v1::{ContainerState, ContainerStateWaiting};
        let (mut live, _) = reconcile(live(node(|_| {})), at(10));
        let mut pod = running_pod(live.workload.as_ref().unwrap(), false);
        pod.status
            .as_mut()
            .unwrap()
            .container_statuses
            .as_mut()
            .unwrap()[0]
            .state = Some(ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some("CreateContainerConfigError".into()),
                message: Some("secret \"cache-auth\" not found".into()),
            }),
            ..Default::default()
        });
        live.pods = vec![pod];
        let (live, first) = reconcile(live, at(20));
        assert!(
            first.events.is_empty(),
            "told by the failed reconcile, not twice"
        );
        let status = first.status.unwrap();
        let ready = conditions::find(&status.conditions, types::WORKLOAD_READY).unwrap();
        assert_eq!(ready.reason, "ContainerWaiting");
        assert!(ready.message.contains("secret \"cache-auth\" not found"));
        let blocked = first.blocked.unwrap();
        assert_eq!(
            (blocked.pod.as_str(), blocked.reason.as_str()),
            ("cache-0", "CreateContainerConfigError")
        );
        // Written once; still blocked on the next look, so the retries keep failing.
        let (_, again) = reconcile(live, at(30));
        assert_eq!(again.status, None);
        assert_eq!(again.blocked, Some(blocked));
    }

    #[test]
    fn a_start_that_lacks_a_program_names_it_and_warns_once() {
        use k8s_openapi::api::core::v1::{
            ContainerState, ContainerStateTerminated, ContainerStateWaiting,
        };
        let (mut live, _) = reconcile(live(node(|_| {})), at(10));
        let mut pod = running_pod(live.workload.as_ref().unwrap(), false);
        let container = &mut pod
            .status
            .as_mut()
            .unwrap()
            .container_statuses
            .as_mut()
            .unwrap()[0];
        container.image = "valkey/valkey:8.1-slim".into();
        container.state = Some(ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some("CrashLoopBackOff".into()),
                message: Some("back-off 10s restarting failed container".into()),
            }),
            ..Default::default()
        });
        container.last_state = Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: 127,
                message: Some("sh: 1: awk: not found\n".into()),
                ..Default::default()
            }),
            ..Default::default()
        });
        live.pods = vec![pod];
        let (live, first) = reconcile(live, at(20));
        let status = first.status.unwrap();
        let ready = conditions::find(&status.conditions, types::WORKLOAD_READY).unwrap();
        assert_eq!(ready.reason, "ImageIncomplete");
        assert!(
            ready
                .message
                .contains("its image valkey/valkey:8.1-slim has no `awk`"),
            "{}",
            ready.message
        );
        assert!(
            ready
                .message
                .ends_with("last exit 127: sh: 1: awk: not found")
        );
        assert_eq!(first.events.len(), 1, "{:?}", first.events);
        assert_eq!(first.events[0].reason, NodeEventReason::ImageIncomplete);
        assert_eq!(first.events[0].note, ready.message);
        // The same crash loop again: nothing new to write or tell.
        let (_, again) = reconcile(live, at(30));
        assert!(again.events.is_empty(), "{:?}", again.events);
    }

    #[test]
    fn an_unbound_claim_on_an_existing_class_is_no_warning() {
        let with_class = node(|s| {
            s.template.persistence = Some(Persistence {
                size: "1Gi".into(),
                storage_class_name: Some("slow".into()),
                ..Default::default()
            })
        });
        let (mut live, _) = reconcile(live(with_class), at(10));
        let mut pod = running_pod(live.workload.as_ref().unwrap(), false);
        pod.status.as_mut().unwrap().phase = Some("Pending".into());
        live.pods = vec![pod];
        let (_, report) = reconcile(live, at(20));
        assert!(report.events.is_empty(), "{:?}", report.events);
        let status = report.status.unwrap();
        let ready = conditions::find(&status.conditions, types::WORKLOAD_READY).unwrap();
        assert_eq!(ready.reason, "ClaimNotBound");
        assert!(
            ready.message.contains("waiting for a volume"),
            "{}",
            ready.message
        );
    }
}
