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

/// The program a failed start says it could not find: the runtime's `exec: "sh":
/// executable file not found in $PATH`, or a shell's `sh: 1: awk: not found` (dash),
/// `sh: awk: not found` (busybox), `awk: command not found` (bash). `None` otherwise.
pub fn missing_program(message: &str) -> Option<String> {
    let plain = |name: &str| {
        let name = name.trim().trim_matches('"');
        (!name.is_empty() && !name.contains(char::is_whitespace)).then(|| name.to_string())
    };
    for line in message.lines() {
        if let Some(at) = line.find("executable file not found") {
            let before = line[..at].trim_end().trim_end_matches(':');
            if let Some(name) = before.rsplit(':').next().and_then(plain) {
                return Some(name);
            }
        }
        for marker in [": not found", ": command not found"] {
            if let Some(rest) = line.trim_end().strip_suffix(marker)
                && let Some(name) = rest.rsplit(": ").next().and_then(plain)
            {
                return Some(name);
            }
        }
    }
    None
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
        let last = c
            .last_state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .and_then(|t| Some((t.exit_code, t.message.as_deref()?.trim())))
            .filter(|(_, message)| !message.is_empty());
        let last_exit = last
            .map(|(code, message)| format!("; last exit {code}: {message}"))
            .unwrap_or_default();
        if let Some(tool) = last.and_then(|(_, message)| missing_program(message)) {
            return not_ready(
                WorkloadReady::ImageIncomplete,
                format!(
                    "container {} of pod {}: its image {} has no `{tool}`, which the operator's \
                     scripts run (docs/images.md lists what an image must hold): use an image \
                     that has it{last_exit}",
                    c.name,
                    pod.name_any(),
                    c.image
                ),
            );
        }
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
mod tests;
