//! `status.workload` and the conditions node-controller owns (WorkloadReady, RollPending,
//! ConfigValid), built from the live workload and pod.

use crd_types::ValkeyNodeStatus;
use crd_types::conditions::reasons::{ClaimSize, ConfigValid, RollPending, WorkloadReady};
use crd_types::conditions::{ConditionSpec, find, transition};
use crd_types::node::WorkloadStatus;
use crd_types::template::Persistence;
use k8s_openapi::api::core::v1::{ContainerStatus, PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::config::ConfigError;
use crate::meta::REVISION_ANNOTATION;
use crate::pvc;
use crate::revision::RollDecision;
use crate::workload::{VALKEY_CONTAINER, Workload};

/// The pod that is the node right now, among the pods selected by `valkey.rs/node`: one not
/// being deleted if any (a Deployment's replacement while the old pod terminates), the newest
/// first; a terminating one only when nothing else exists.
pub fn current_pod(pods: &[Pod]) -> Option<&Pod> {
    let key = |p: &&Pod| {
        (
            p.metadata.deletion_timestamp.is_none(),
            p.metadata.creation_timestamp.clone(),
            p.name_any(),
        )
    };
    pods.iter().max_by_key(key)
}

fn valkey_status(pod: &Pod) -> Option<&ContainerStatus> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == VALKEY_CONTAINER)
}

/// The container the node's start waits on: an init container that waits for its own reason
/// (a missing Secret, a crash loop; the later ones wait `PodInitializing` behind it), else the
/// valkey container. While an init container waits, valkey only says `PodInitializing`.
fn waiting_container(pod: &Pod) -> Option<&ContainerStatus> {
    let status = pod.status.as_ref()?;
    let blocking_init = status.init_container_statuses.iter().flatten().find(|c| {
        c.state
            .as_ref()
            .and_then(|s| s.waiting.as_ref())
            .is_some_and(|w| w.reason.as_deref() != Some("PodInitializing"))
    });
    blocking_init.or_else(|| valkey_status(pod))
}

/// Whether the valkey container passes its readiness probe. The pod's Ready condition is not
/// used: a sidecar (the exporter) must not make the node look down.
pub fn is_ready(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none() && valkey_status(pod).is_some_and(|c| c.ready)
}

/// Why the valkey container waits, when it is a reason only a change by the user ends: the
/// kubelet keeps retrying, and each try fails the same way. `CreateContainerConfigError` is
/// a missing Secret (or key) of `spec.auth`: nothing else the pod references can be missing.
const USER_FIXABLE_WAITS: &[&str] = &["CreateContainerConfigError"];

/// The current pod's valkey container (or an init container before it) cannot be created
/// because of its configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "container {container} of pod {pod} cannot start: {reason}: {message}; create what      it names (a Secret of spec.auth, or its key) and the pod starts by itself"
)]
pub struct BlockedContainer {
    pub pod: String,
    /// `valkey`, or the init container that waits (`exporter-auth`, `sentinel-config`).
    pub container: String,
    /// The waiting reason, e.g. `CreateContainerConfigError`.
    pub reason: String,
    /// The kubelet's message, e.g. `secret "cache-auth" not found`.
    pub message: String,
}

/// Whether `pod`'s valkey container waits for the user (see [`USER_FIXABLE_WAITS`]); never
/// for a pod being deleted, whose replacement is what counts.
pub fn blocked_container(pod: &Pod) -> Option<BlockedContainer> {
    if pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let container = waiting_container(pod)?;
    let waiting = container.state.as_ref()?.waiting.as_ref()?;
    let reason = waiting.reason.as_deref()?;
    USER_FIXABLE_WAITS
        .contains(&reason)
        .then(|| BlockedContainer {
            pod: pod.name_any(),
            container: container.name.clone(),
            reason: reason.to_string(),
            message: waiting.message.clone().unwrap_or_default(),
        })
}

/// `status.workload` from the live workload and current pod.
///
/// `restarts` counts the valkey container only: it is what tells whether the data process
/// restarted. `revision` is the pod's own annotation (copied from the template it was made
/// from), not the workload's, so it stays at the old revision until the new pod exists.
pub fn workload_status(
    live: Option<&Workload>,
    pod: Option<&Pod>,
    desired_revision: Option<&str>,
    observed_generation: Option<i64>,
) -> WorkloadStatus {
    let pod_status = pod.and_then(|p| p.status.as_ref());
    WorkloadStatus {
        kind: live.map(Workload::workload_type),
        name: live.map(|w| w.name()),
        pod_name: pod.map(|p| p.name_any()),
        pod_ip: pod_status.and_then(|s| s.pod_ip.clone()),
        node_name: pod
            .and_then(|p| p.spec.as_ref())
            .and_then(|s| s.node_name.clone()),
        ready: pod.is_some_and(is_ready),
        revision: pod.and_then(|p| p.annotations().get(REVISION_ANNOTATION).cloned()),
        desired_revision: desired_revision.map(str::to_string),
        restarts: pod.and_then(valkey_status).map_or(0, |c| c.restart_count),
        observed_generation,
    }
}

/// What the reconcile saw, for the conditions.
#[derive(Debug, Clone, Copy)]
pub struct Observed<'a> {
    /// The config check: `Err` when the spec's config cannot be rendered.
    pub config: Result<(), &'a ConfigError>,
    /// `announce: Service` and no ClusterIP yet.
    pub waiting_for_endpoint: bool,
    /// Whether the workload exists.
    pub workload_exists: bool,
    /// The current pod.
    pub pod: Option<&'a Pod>,
    /// The node's PVC as it exists (None without persistence or before it is created).
    pub claim: Option<&'a PersistentVolumeClaim>,
    /// The claim names a StorageClass that does not exist.
    pub storage_class_missing: bool,
    /// `spec.persistence`: ClaimSize compares the claim with its size.
    pub persistence: Option<&'a Persistence>,
    /// The roll gate's decision; `None` when there is no desired template (config invalid or
    /// waiting for the endpoint).
    pub roll: Option<&'a RollDecision>,
    /// The status built by [`workload_status`].
    pub workload: &'a WorkloadStatus,
}

/// The conditions node-controller owns (ClaimSize only once a claim exists), with `lastTransitionTime` kept while a status
/// does not change.
pub fn conditions(
    current: &[Condition],
    observed: &Observed<'_>,
    generation: Option<i64>,
    now: Timestamp,
) -> Vec<Condition> {
    [
        Some(config_valid(observed)),
        Some(workload_ready(observed)),
        Some(roll_pending(observed)),
        claim_size(observed),
    ]
    .into_iter()
    .flatten()
    .map(|d| transition(current, d, generation, now))
    .collect()
}

/// Whether the claim requests the spec's size; only once the claim exists. node-controller
/// never grows a claim (pvc-resizer does), so this is what tells a spec growth that nobody
/// carries out.
fn claim_size(o: &Observed<'_>) -> Option<ConditionSpec> {
    let persistence = o.persistence?;
    o.claim?;
    Some(match pvc::smaller_than_spec(persistence, o.claim) {
        Some((requested, spec)) => ConditionSpec::new(
            ClaimSize::SmallerThanSpec,
            false,
            format!(
                "the claim requests {requested} and persistence.size asks for {spec}: pvc-resizer \
                 grows it (without pvc-resizer deployed, volumes never grow: grow the claim by \
                 hand)"
            ),
        ),
        None => ConditionSpec::new(
            ClaimSize::MatchesSpec,
            true,
            "the claim requests at least persistence.size",
        ),
    })
}

fn config_valid(o: &Observed<'_>) -> ConditionSpec {
    match o.config {
        Ok(()) => ConditionSpec::new(
            ConfigValid::Valid,
            true,
            "the spec renders to a valid config",
        ),
        Err(e) => ConditionSpec::new(e.reason(), false, e.to_string()),
    }
}

fn workload_ready(o: &Observed<'_>) -> ConditionSpec {
    let not_ready =
        |reason: WorkloadReady, message: String| ConditionSpec::new(reason, false, message);
    if !o.workload_exists {
        return match (o.config, o.waiting_for_endpoint) {
            (Err(_), _) => not_ready(
                WorkloadReady::ConfigInvalid,
                "no workload: the config is invalid, see ConfigValid".into(),
            ),
            (Ok(()), true) => not_ready(
                WorkloadReady::WaitingForEndpoint,
                "no workload yet: announce is Service and the node's Service has no ClusterIP \
                 yet (status.endpoint.clusterIP, written by service-controller)"
                    .into(),
            ),
            (Ok(()), false) => not_ready(
                WorkloadReady::WorkloadMissing,
                "the workload is being created".into(),
            ),
        };
    }
    let Some(pod) = o.pod else {
        return not_ready(
            WorkloadReady::PodMissing,
            "the workload has no pod yet".into(),
        );
    };
    if pod.metadata.deletion_timestamp.is_some() {
        return not_ready(
            WorkloadReady::PodTerminating,
            format!("pod {} is terminating", pod.name_any()),
        );
    }
    if o.workload.ready {
        return ConditionSpec::new(
            WorkloadReady::PodReady,
            true,
            format!("pod {} answers PING", pod.name_any()),
        );
    }
    // A claim that is not bound keeps the pod unschedulable; say so rather than "pending".
    if let Some(message) = o
        .claim
        .and_then(|c| claim_not_bound(c, o.storage_class_missing))
    {
        return not_ready(WorkloadReady::ClaimNotBound, message);
    }
    let container = waiting_container(pod);
    let waiting = container
        .and_then(|c| c.state.as_ref())
        .and_then(|s| s.waiting.as_ref());
    if let (Some(w), Some(c)) = (waiting, container) {
        // A crash loop's own message is only the back-off; why it exited is in the last
        // termination (its message, or its last log lines with FallbackToLogsOnError).
        let last_exit = c
            .last_state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .and_then(|t| {
                let message = t.message.as_deref()?.trim();
                (!message.is_empty()).then(|| format!("; last exit {}: {message}", t.exit_code))
            })
            .unwrap_or_default();
        return not_ready(
            WorkloadReady::ContainerWaiting,
            format!(
                "container {} of pod {} is waiting: {} {}",
                c.name,
                pod.name_any(),
                w.reason.as_deref().unwrap_or("unknown"),
                w.message.as_deref().unwrap_or("")
            )
            .trim_end()
            .to_string()
                + &last_exit,
        );
    }
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if phase == Some("Pending") {
        return not_ready(
            WorkloadReady::PodPending,
            format!("pod {} is pending", pod.name_any()),
        );
    }
    not_ready(
        WorkloadReady::PodNotReady,
        format!(
            "pod {} does not answer PING with PONG yet (starting or loading its data)",
            pod.name_any()
        ),
    )
}

/// Why `claim` keeps the pod from starting, or `None` once it is bound.
pub fn claim_not_bound(claim: &PersistentVolumeClaim, class_missing: bool) -> Option<String> {
    let phase = claim
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending");
    if phase == "Bound" {
        return None;
    }
    let class = claim
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.as_deref())
        .map_or_else(
            || "the cluster's default StorageClass".to_string(),
            |c| format!("StorageClass {c:?}"),
        );
    let why = if class_missing {
        format!("{class} does not exist; create it or recreate the node with an existing class")
    } else {
        format!("waiting for a volume from {class}")
    };
    Some(format!(
        "PersistentVolumeClaim {} is {phase}, not Bound: {why}; the pod cannot start until it binds",
        claim.name_any()
    ))
}

/// The status node-controller applies: `workload` and its three conditions, nothing else.
pub fn desired(
    current: Option<&ValkeyNodeStatus>,
    workload: WorkloadStatus,
    observed: &Observed<'_>,
    generation: Option<i64>,
    now: Timestamp,
) -> ValkeyNodeStatus {
    let current = current.map(|s| s.conditions.as_slice()).unwrap_or_default();
    ValkeyNodeStatus {
        workload: Some(workload),
        conditions: conditions(current, observed, generation, now),
        ..Default::default()
    }
}

/// Whether `desired` differs from what the node's status already says.
pub fn needs_update(current: Option<&ValkeyNodeStatus>, desired: &ValkeyNodeStatus) -> bool {
    let live_workload = current.and_then(|s| s.workload.as_ref());
    if live_workload != desired.workload.as_ref() {
        return true;
    }
    let live = current.map(|s| s.conditions.as_slice()).unwrap_or_default();
    desired
        .conditions
        .iter()
        .any(|c| find(live, &c.type_) != Some(c))
}

fn roll_pending(o: &Observed<'_>) -> ConditionSpec {
    let up_to_date =
        |reason: RollPending, message: String| ConditionSpec::new(reason, false, message);
    match o.roll {
        None => up_to_date(
            RollPending::NoDesiredRevision,
            "no template to roll to".into(),
        ),
        Some(RollDecision::HoldAt {
            reason, message, ..
        }) => ConditionSpec::new(*reason, true, message.clone()),
        Some(RollDecision::ApplyNow) => {
            let w = o.workload;
            if w.revision.is_some() && w.revision == w.desired_revision {
                up_to_date(
                    RollPending::UpToDate,
                    format!(
                        "the pod runs revision {}",
                        w.revision.as_deref().unwrap_or_default()
                    ),
                )
            } else {
                up_to_date(
                    RollPending::Rolling,
                    format!(
                        "revision {} is applied; the pod is being replaced",
                        w.desired_revision.as_deref().unwrap_or("unknown")
                    ),
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use crd_types::conditions::{TRUE, find, types};
    use crd_types::template::WorkloadType;
    use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateTerminated, ContainerStateWaiting, PodSpec, PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn pod(name: &str, created: i64, ready: bool) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                creation_timestamp: Some(Time(at(created))),
                annotations: Some(BTreeMap::from([(
                    REVISION_ANNOTATION.to_string(),
                    "rev1".to_string(),
                )])),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: Some("worker-1".into()),
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                pod_ip: Some("10.1.0.4".into()),
                container_statuses: Some(vec![
                    ContainerStatus {
                        name: "valkey".into(),
                        ready,
                        restart_count: 2,
                        ..Default::default()
                    },
                    ContainerStatus {
                        name: "exporter".into(),
                        ready: false,
                        restart_count: 7,
                        ..Default::default()
                    },
                ]),
                ..Default::default()
            }),
        }
    }

    fn sts(name: &str) -> StatefulSet {
        StatefulSet {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn status_from_statefulset_and_pod() {
        let s = sts("cache");
        let p = pod("cache-0", 1, true);
        let w = workload_status(
            Some(&Workload::StatefulSet(s)),
            Some(&p),
            Some("rev2"),
            Some(4),
        );
        assert_eq!(
            w,
            WorkloadStatus {
                kind: Some(WorkloadType::StatefulSet),
                name: Some("cache".into()),
                pod_name: Some("cache-0".into()),
                pod_ip: Some("10.1.0.4".into()),
                node_name: Some("worker-1".into()),
                ready: true,
                revision: Some("rev1".into()),
                desired_revision: Some("rev2".into()),
                restarts: 2,
                observed_generation: Some(4),
            }
        );
    }

    #[test]
    fn status_without_workload_or_pod() {
        let w = workload_status(None, None, None, Some(1));
        assert_eq!(
            w,
            WorkloadStatus {
                observed_generation: Some(1),
                ..Default::default()
            }
        );
        let d = Deployment {
            metadata: ObjectMeta {
                name: Some("cache".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let w = workload_status(Some(&Workload::Deployment(d)), None, Some("r"), None);
        assert_eq!(w.kind, Some(WorkloadType::Deployment));
        assert_eq!(w.pod_name, None);
        assert!(!w.ready);
    }

    #[test]
    fn readiness_is_the_valkey_containers() {
        // The exporter is not ready in the fixture; the node still is.
        assert!(is_ready(&pod("a", 1, true)));
        assert!(!is_ready(&pod("a", 1, false)));
        let mut terminating = pod("a", 1, true);
        terminating.metadata.deletion_timestamp = Some(Time(at(5)));
        assert!(!is_ready(&terminating));
    }

    #[test]
    fn current_pod_prefers_live_and_new() {
        let mut old = pod("cache-abc", 1, true);
        old.metadata.deletion_timestamp = Some(Time(at(9)));
        let new = pod("cache-def", 5, false);
        let older_live = pod("cache-ghi", 2, true);
        let pods = vec![old.clone(), new.clone(), older_live];
        assert_eq!(current_pod(&pods).unwrap().name_any(), "cache-def");
        assert_eq!(
            current_pod(std::slice::from_ref(&old)).unwrap().name_any(),
            "cache-abc"
        );
        assert!(current_pod(&[]).is_none());
    }

    fn observed<'a>(
        w: &'a WorkloadStatus,
        pod: Option<&'a Pod>,
        roll: Option<&'a RollDecision>,
    ) -> Observed<'a> {
        Observed {
            config: Ok(()),
            waiting_for_endpoint: false,
            workload_exists: true,
            pod,
            claim: None,
            storage_class_missing: false,
            persistence: None,
            roll,
            workload: w,
        }
    }

    fn get<'a>(c: &'a [Condition], t: &str) -> &'a Condition {
        find(c, t).unwrap()
    }

    #[test]
    fn all_good() {
        let p = pod("cache-0", 1, true);
        let mut w = workload_status(None, Some(&p), Some("rev1"), Some(1));
        w.kind = Some(WorkloadType::StatefulSet);
        let roll = RollDecision::ApplyNow;
        let c = conditions(&[], &observed(&w, Some(&p), Some(&roll)), Some(1), at(10));
        assert_eq!(c.len(), 3);
        assert_eq!(get(&c, types::CONFIG_VALID).status, TRUE);
        assert_eq!(get(&c, types::WORKLOAD_READY).reason, "PodReady");
        let rp = get(&c, types::ROLL_PENDING);
        assert_eq!(
            (rp.status.as_str(), rp.reason.as_str()),
            ("False", "UpToDate")
        );
        // Re-observing the same keeps the clocks.
        let again = conditions(&c, &observed(&w, Some(&p), Some(&roll)), Some(2), at(99));
        assert!(again.iter().all(|x| x.last_transition_time == Time(at(10))));
    }

    #[test]
    fn claim_size_tells_a_spec_growth_nobody_carried_out() {
        use k8s_openapi::api::core::v1::{PersistentVolumeClaimSpec, VolumeResourceRequirements};
        use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
        use std::collections::BTreeMap;
        let p = pod("cache-0", 1, true);
        let w = workload_status(None, Some(&p), Some("rev1"), Some(1));
        let roll = RollDecision::ApplyNow;
        let persistence = Persistence {
            size: "2Gi".into(),
            ..Default::default()
        };
        let claim = |size: &str| PersistentVolumeClaim {
            spec: Some(PersistentVolumeClaimSpec {
                resources: Some(VolumeResourceRequirements {
                    requests: Some(BTreeMap::from([("storage".into(), Quantity(size.into()))])),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let small = claim("1Gi");
        let o = Observed {
            claim: Some(&small),
            persistence: Some(&persistence),
            ..observed(&w, Some(&p), Some(&roll))
        };
        let c = conditions(&[], &o, Some(1), at(10));
        let size = get(&c, types::CLAIM_SIZE);
        assert_eq!(
            (size.status.as_str(), size.reason.as_str()),
            ("False", "SmallerThanSpec")
        );
        assert!(size.message.contains("requests 1Gi") && size.message.contains("pvc-resizer"));
        let big = claim("2048Mi");
        let o = Observed {
            claim: Some(&big),
            persistence: Some(&persistence),
            ..observed(&w, Some(&p), Some(&roll))
        };
        let size = get(&conditions(&[], &o, Some(1), at(10)), types::CLAIM_SIZE).clone();
        assert_eq!(
            (size.status.as_str(), size.reason.as_str()),
            ("True", "MatchesSpec")
        );
        // No claim yet: no condition.
        let o = Observed {
            persistence: Some(&persistence),
            ..observed(&w, Some(&p), Some(&roll))
        };
        assert!(find(&conditions(&[], &o, Some(1), at(10)), types::CLAIM_SIZE).is_none());
    }

    #[test]
    fn invalid_config() {
        let w = WorkloadStatus::default();
        let err = ConfigError::OwnedDirectives(vec!["port".into()]);
        let o = Observed {
            config: Err(&err),
            workload_exists: false,
            ..observed(&w, None, None)
        };
        let c = conditions(&[], &o, None, at(1));
        let cv = get(&c, types::CONFIG_VALID);
        assert_eq!(
            (cv.status.as_str(), cv.reason.as_str()),
            ("False", "OwnedDirective")
        );
        assert!(cv.message.contains("port"));
        assert_eq!(get(&c, types::WORKLOAD_READY).reason, "ConfigInvalid");
        assert_eq!(get(&c, types::ROLL_PENDING).reason, "NoDesiredRevision");
    }

    #[test]
    fn waiting_for_endpoint() {
        let w = WorkloadStatus::default();
        let o = Observed {
            waiting_for_endpoint: true,
            workload_exists: false,
            ..observed(&w, None, None)
        };
        let c = conditions(&[], &o, None, at(1));
        assert_eq!(get(&c, types::CONFIG_VALID).status, TRUE);
        assert_eq!(get(&c, types::WORKLOAD_READY).reason, "WaitingForEndpoint");
    }

    #[test]
    fn workload_ready_reasons() {
        let w = WorkloadStatus::default();
        let reason = |o: Observed<'_>| {
            let c = conditions(&[], &o, None, at(1));
            get(&c, types::WORKLOAD_READY).reason.clone()
        };
        assert_eq!(
            reason(Observed {
                workload_exists: false,
                ..observed(&w, None, None)
            }),
            "WorkloadMissing"
        );
        assert_eq!(reason(observed(&w, None, None)), "PodMissing");

        let loading = pod("cache-0", 1, false);
        assert_eq!(reason(observed(&w, Some(&loading), None)), "PodNotReady");

        let mut crashing = pod("cache-0", 1, false);
        crashing
            .status
            .as_mut()
            .unwrap()
            .container_statuses
            .as_mut()
            .unwrap()[0]
            .state = Some(ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some("CrashLoopBackOff".into()),
                message: None,
            }),
            ..Default::default()
        });
        let c = conditions(&[], &observed(&w, Some(&crashing), None), None, at(1));
        let wr = get(&c, types::WORKLOAD_READY);
        assert_eq!(wr.reason, "ContainerWaiting");
        assert!(wr.message.ends_with("CrashLoopBackOff"), "{}", wr.message);
        let status = &mut crashing
            .status
            .as_mut()
            .unwrap()
            .container_statuses
            .as_mut()
            .unwrap()[0];
        status.last_state = Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: 1,
                message: Some("the password from auth.passwordSecretRef is empty\n".into()),
                ..Default::default()
            }),
            ..Default::default()
        });
        let c = conditions(&[], &observed(&w, Some(&crashing), None), None, at(1));
        let wr = get(&c, types::WORKLOAD_READY);
        assert!(
            wr.message.ends_with(
                "CrashLoopBackOff; last exit 1: the password from auth.passwordSecretRef is empty"
            ),
            "{}",
            wr.message
        );

        let mut pending = pod("cache-0", 1, false);
        pending.status.as_mut().unwrap().phase = Some("Pending".into());
        pending.status.as_mut().unwrap().container_statuses = None;
        assert_eq!(reason(observed(&w, Some(&pending), None)), "PodPending");

        let mut terminating = pod("cache-0", 1, true);
        terminating.metadata.deletion_timestamp = Some(Time(at(3)));
        assert_eq!(
            reason(observed(&w, Some(&terminating), None)),
            "PodTerminating"
        );
    }

    #[test]
    fn only_a_container_waiting_for_the_user_is_blocked() {
        let waiting = |reason: &str, message: &str| {
            let mut p = pod("cache-0", 1, false);
            p.status
                .as_mut()
                .unwrap()
                .container_statuses
                .as_mut()
                .unwrap()[0]
                .state = Some(ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some(reason.into()),
                    message: Some(message.into()),
                }),
                ..Default::default()
            });
            p
        };
        let missing = waiting(
            "CreateContainerConfigError",
            "secret \"cache-auth\" not found",
        );
        let blocked = blocked_container(&missing).unwrap();
        assert_eq!(
            blocked,
            BlockedContainer {
                pod: "cache-0".into(),
                container: "valkey".into(),
                reason: "CreateContainerConfigError".into(),
                message: "secret \"cache-auth\" not found".into(),
            }
        );
        assert!(
            blocked.to_string().contains(
                "cannot start: CreateContainerConfigError: secret \"cache-auth\" not found;"
            ),
            "{blocked}"
        );
        // These end by themselves (or are the server's own failure, with its own back-off).
        for passing in ["ContainerCreating", "CrashLoopBackOff", "ErrImagePull"] {
            assert_eq!(blocked_container(&waiting(passing, "")), None, "{passing}");
        }
        assert_eq!(blocked_container(&pod("cache-0", 1, true)), None);
        let mut leaving = missing;
        leaving.metadata.deletion_timestamp = Some(Time(at(5)));
        assert_eq!(blocked_container(&leaving), None);

        // An init container that needs the Secret first (exporter-auth): valkey only waits
        // behind it, so the init container is the one reported.
        let mut behind = waiting("PodInitializing", "");
        let mut init = behind
            .status
            .as_ref()
            .unwrap()
            .container_statuses
            .as_ref()
            .unwrap()[0]
            .clone();
        init.name = "exporter-auth".into();
        init.state = Some(ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some("CreateContainerConfigError".into()),
                message: Some("secret \"cache-operator\" not found".into()),
            }),
            ..Default::default()
        });
        behind.status.as_mut().unwrap().init_container_statuses = Some(vec![init]);
        let blocked = blocked_container(&behind).unwrap();
        assert_eq!(blocked.container, "exporter-auth");
        assert!(
            blocked
                .to_string()
                .starts_with("container exporter-auth of pod cache-0 cannot start"),
            "{blocked}"
        );
    }

    #[test]
    fn an_unbound_claim_is_named_as_the_reason() {
        use k8s_openapi::api::core::v1::{PersistentVolumeClaimSpec, PersistentVolumeClaimStatus};
        let w = WorkloadStatus::default();
        let mut pending = pod("cache-0", 1, false);
        pending.status.as_mut().unwrap().phase = Some("Pending".into());
        let mut claim = PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some("cache-data".into()),
                ..Default::default()
            },
            spec: Some(PersistentVolumeClaimSpec {
                storage_class_name: Some("does-not-exist".into()),
                ..Default::default()
            }),
            status: Some(PersistentVolumeClaimStatus {
                phase: Some("Pending".into()),
                ..Default::default()
            }),
        };
        let o = Observed {
            claim: Some(&claim),
            storage_class_missing: true,
            persistence: None,
            ..observed(&w, Some(&pending), None)
        };
        let c = conditions(&[], &o, None, at(1));
        let wr = get(&c, types::WORKLOAD_READY);
        assert_eq!(
            (wr.status.as_str(), wr.reason.as_str()),
            ("False", WorkloadReady::ClaimNotBound.as_str())
        );
        assert!(wr.message.contains("cache-data"), "{}", wr.message);
        assert!(
            wr.message
                .contains("StorageClass \"does-not-exist\" does not exist"),
            "{}",
            wr.message
        );
        let o = Observed {
            claim: Some(&claim),
            ..observed(&w, Some(&pending), None)
        };
        let c = conditions(&[], &o, None, at(1));
        assert!(
            get(&c, types::WORKLOAD_READY)
                .message
                .contains("waiting for a volume")
        );

        claim.status.as_mut().unwrap().phase = Some("Bound".into());
        let o = Observed {
            claim: Some(&claim),
            ..observed(&w, Some(&pending), None)
        };
        let c = conditions(&[], &o, None, at(1));
        assert_eq!(get(&c, types::WORKLOAD_READY).reason, "PodPending");
    }

    #[test]
    fn desired_status_is_applied_only_when_it_changes() {
        let p = pod("cache-0", 1, true);
        let w = workload_status(None, Some(&p), Some("rev1"), Some(1));
        let roll = RollDecision::ApplyNow;
        let first = desired(
            None,
            w.clone(),
            &observed(&w, Some(&p), Some(&roll)),
            Some(1),
            at(10),
        );
        let json = serde_json::to_value(&first).unwrap();
        let keys: Vec<&String> = json.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            ["conditions", "workload"],
            "only node-controller's fields"
        );
        assert!(needs_update(None, &first));
        // Another controller's condition and endpoint next to ours do not count.
        let mut live = first.clone();
        live.conditions.push(Condition {
            type_: types::ENDPOINT_READY.into(),
            status: TRUE.into(),
            reason: "ServiceReady".into(),
            message: String::new(),
            observed_generation: None,
            last_transition_time: Time(at(1)),
        });
        live.endpoint = Some(Default::default());
        let again = desired(
            Some(&live),
            w.clone(),
            &observed(&w, Some(&p), Some(&roll)),
            Some(1),
            at(50),
        );
        assert!(!needs_update(Some(&live), &again));
        // The pod going unready is an update.
        let unready = pod("cache-0", 1, false);
        let w2 = workload_status(None, Some(&unready), Some("rev1"), Some(1));
        let changed = desired(
            Some(&live),
            w2.clone(),
            &observed(&w2, Some(&unready), Some(&roll)),
            Some(1),
            at(60),
        );
        assert!(needs_update(Some(&live), &changed));
    }

    #[test]
    fn roll_pending_follows_the_gate() {
        let p = pod("cache-0", 1, true);
        let w = workload_status(None, Some(&p), Some("rev2"), None);
        let hold = crate::revision::decide(
            crate::revision::Live::At(Some("rev1")),
            "rev2",
            crd_types::node::RolloutPolicy::Gated,
            None,
        );
        let c = conditions(&[], &observed(&w, Some(&p), Some(&hold)), None, at(1));
        let rp = get(&c, types::ROLL_PENDING);
        assert_eq!(rp.status, TRUE);
        assert_eq!(rp.reason, RollPending::WaitingForAllowedRevision.as_str());
        assert!(rp.message.contains("rev2"));

        let now = RollDecision::ApplyNow;
        let c2 = conditions(&c, &observed(&w, Some(&p), Some(&now)), None, at(5));
        let rp = get(&c2, types::ROLL_PENDING);
        assert_eq!(
            (rp.status.as_str(), rp.reason.as_str()),
            ("False", "Rolling")
        );
        assert_eq!(rp.last_transition_time, Time(at(5)));
    }
}
