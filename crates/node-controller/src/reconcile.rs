//! One reconcile of a ValkeyNode: fetch what it owns, build the desired objects with the pure
//! builders of this crate, apply them with server-side apply (through the roll gate), publish
//! Events, apply this controller's part of the status.

use std::sync::Arc;

use crd_types::ValkeyNode;
use crd_types::conditions::{self, types};
use crd_types::names::{self, labels};
use crd_types::template::WorkloadType;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kube::api::ListParams;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Api, Resource, ResourceExt};
use node_controller::config::{self, ConfigError, Rendered};
use node_controller::revision::{self, Live, RollDecision};
use node_controller::status::{self, LiveWorkload, Observed};
use node_controller::workload::{self, Workload};
use node_controller::{configmap, pvc};
use operator_runtime::controller::{self, ReconcileContext};

use crate::error::{Error, Op};

/// Event reasons.
pub const WORKLOAD_CREATED: &str = "WorkloadCreated";
pub const ROLLING: &str = "Rolling";
pub const ROLL_HELD: &str = "RollHeld";
pub const CONFIG_INVALID: &str = "ConfigInvalid";
pub const CLAIM_NOT_BOUND: &str = status::REASON_CLAIM_NOT_BOUND;

/// What every reconcile shares.
pub struct State {
    /// Publishes Events (events.k8s.io/v1) on ValkeyNodes as `node-controller`.
    pub recorder: Recorder,
}

/// The live workload of either kind, owned.
enum LiveObject {
    StatefulSet(StatefulSet),
    Deployment(Deployment),
}

impl LiveObject {
    fn as_live(&self) -> LiveWorkload<'_> {
        match self {
            LiveObject::StatefulSet(s) => LiveWorkload::StatefulSet(s),
            LiveObject::Deployment(d) => LiveWorkload::Deployment(d),
        }
    }

    fn object_ref(&self) -> ObjectReference {
        match self {
            LiveObject::StatefulSet(s) => s.object_ref(&()),
            LiveObject::Deployment(d) => d.object_ref(&()),
        }
    }
}

pub async fn reconcile(
    cached: Arc<ValkeyNode>,
    ctx: Arc<ReconcileContext<State>>,
) -> Result<Action, Error> {
    let name = cached.name_any();
    let namespace = cached.namespace().ok_or_else(|| Error::MissingField {
        node: name.clone(),
        field: "metadata.namespace",
    })?;
    let ns = namespace.as_str();
    let client = ctx.runtime.client.clone();
    let field_manager = ctx.runtime.field_manager;
    let nodes: Api<ValkeyNode> = Api::namespaced(client.clone(), ns);
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), ns);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(client, ns);

    // --- Fetch. The node is read again: the cache may lag behind the status this controller
    // (or service-controller, with the ClusterIP) applied a moment ago.
    let Some(node) =
        nodes
            .get_opt(&name)
            .await
            .map_err(Error::api(Op::ReadNode, "ValkeyNode", ns, &name))?
    else {
        return Ok(Action::await_change());
    };
    // Deleting the node deletes what it owns through owner references; nothing to do.
    if node.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let cm_name = names::config_map_name(&name);
    let live_cm = config_maps.get_opt(&cm_name).await.map_err(Error::api(
        Op::ReadConfigMap,
        "ConfigMap",
        ns,
        &cm_name,
    ))?;
    let claim_name = names::pvc_name(&name);
    let mut live_claim = match node.spec.template.persistence {
        Some(_) => claims.get_opt(&claim_name).await.map_err(Error::api(
            Op::ReadClaim,
            "PersistentVolumeClaim",
            ns,
            &claim_name,
        ))?,
        None => None,
    };
    let workload_name = names::workload_name(&name);
    let mut live_workload = match node.spec.template.workload_type {
        WorkloadType::StatefulSet => statefulsets
            .get_opt(&workload_name)
            .await
            .map_err(Error::api(
                Op::ReadWorkload,
                "StatefulSet",
                ns,
                &workload_name,
            ))?
            .map(LiveObject::StatefulSet),
        WorkloadType::Deployment => deployments
            .get_opt(&workload_name)
            .await
            .map_err(Error::api(
                Op::ReadWorkload,
                "Deployment",
                ns,
                &workload_name,
            ))?
            .map(LiveObject::Deployment),
    };
    let node_pods = pods
        .list(&ListParams::default().labels(&format!("{}={name}", labels::NODE)))
        .await
        .map_err(Error::api(Op::ListPods, "ValkeyNode", ns, &name))?
        .items;
    let pod = status::current_pod(&node_pods);

    // --- Build.
    let rendered = config::render(&node.spec, config::cluster_ip(&node));
    let (config_check, waiting_for_endpoint, rendered) = match &rendered {
        Err(error) => (Err(error), false, None),
        Ok(Rendered::WaitingForEndpoint) => (Ok(()), true, None),
        Ok(Rendered::Config(c)) => (Ok(()), false, Some(c)),
    };
    let desired = rendered.map(|c| (c, workload::desired(&node, c)));
    let live_revision = live_workload
        .as_ref()
        .and_then(|w| w.as_live().template())
        .and_then(revision::template_revision)
        .map(str::to_owned);
    let roll = desired.as_ref().map(|(_, d)| {
        let live = match &live_workload {
            None => Live::Missing,
            Some(_) => Live::At(live_revision.as_deref()),
        };
        revision::decide(
            live,
            &d.revision,
            node.spec.rollout_policy,
            node.spec.allowed_revision.as_deref(),
        )
    });

    // --- Apply. Nothing is touched while the config is invalid or the announce address is
    // unknown: a running pod keeps running what it runs.
    let mut events: Vec<(EventType, &'static str, String, Option<ObjectReference>)> = Vec::new();
    if let (Some((rendered, desired)), Some(roll)) = (&desired, &roll) {
        // Keep every config key a live template or pod still mounts (a held template, a
        // terminating pod), so no restart can find its config gone.
        let mut keep = Vec::new();
        if let Some(spec) = live_workload
            .as_ref()
            .and_then(|w| w.as_live().template())
            .and_then(|t| t.spec.as_ref())
        {
            keep.extend(configmap::referenced_keys(spec));
        }
        for p in node_pods.iter().filter_map(|p| p.spec.as_ref()) {
            keep.extend(configmap::referenced_keys(p));
        }
        keep.sort();
        keep.dedup();
        // Each apply is skipped when the live object already says it all: an idle resync
        // then costs reads only.
        let cm = configmap::config_map(&node, rendered, live_cm.as_ref(), &keep);
        if !live_cm
            .as_ref()
            .is_some_and(|live| configmap::is_current(&cm, live))
        {
            operator_runtime::apply(&config_maps, &cm_name, &cm, field_manager)
                .await
                .map_err(Error::api(Op::ApplyConfigMap, "ConfigMap", ns, &cm_name))?;
        }

        if let Some(claim) = pvc::pvc(&node, live_claim.as_ref()).filter(|claim| {
            !live_claim
                .as_ref()
                .is_some_and(|live| operator_runtime::is_applied(claim, live))
        }) {
            let applied = operator_runtime::apply(&claims, &claim_name, &claim, field_manager)
                .await
                .map_err(Error::api(
                    Op::ApplyClaim,
                    "PersistentVolumeClaim",
                    ns,
                    &claim_name,
                ))?;
            live_claim = Some(applied);
        }

        // Where the live workload departs from the desired one (None: it holds it all).
        let workload_difference =
            live_workload
                .as_ref()
                .map(|live| match (live, &desired.workload) {
                    (LiveObject::StatefulSet(l), Workload::StatefulSet(d)) => {
                        operator_runtime::first_difference(d, l)
                    }
                    (LiveObject::Deployment(l), Workload::Deployment(d)) => {
                        operator_runtime::first_difference(d, l)
                    }
                    _ => Some("kind".into()),
                });
        let workload_current = matches!(workload_difference, Some(None));
        if let (Some(Some(at)), Some(live)) = (&workload_difference, live_revision.as_deref())
            && live == desired.revision
        {
            // Same revision yet different: drift (someone edited it) or a value the API
            // server rewrites, which would cost an apply on every look.
            tracing::info!(node = %name, namespace = ns, field = %at, "workload differs from its spec; applying");
        }
        match roll {
            RollDecision::ApplyNow if workload_current => {}
            RollDecision::ApplyNow => {
                let applied = match &desired.workload {
                    Workload::StatefulSet(s) => {
                        operator_runtime::apply(&statefulsets, &workload_name, s, field_manager)
                            .await
                            .map(LiveObject::StatefulSet)
                    }
                    Workload::Deployment(d) => {
                        operator_runtime::apply(&deployments, &workload_name, d, field_manager)
                            .await
                            .map(LiveObject::Deployment)
                    }
                }
                .map_err(Error::api(
                    Op::ApplyWorkload,
                    desired.workload.kind(),
                    ns,
                    &workload_name,
                ))?;
                let kind = desired.workload.kind();
                match (&live_workload, live_revision.as_deref()) {
                    (None, _) => {
                        tracing::info!(node = %name, namespace = ns, kind, revision = %desired.revision, "created workload");
                        events.push((
                            EventType::Normal,
                            WORKLOAD_CREATED,
                            format!(
                                "{kind} {workload_name} created at revision {}",
                                desired.revision
                            ),
                            Some(applied.object_ref()),
                        ));
                    }
                    (Some(_), current) if current != Some(desired.revision.as_str()) => {
                        tracing::info!(node = %name, namespace = ns, kind, from = current.unwrap_or("unknown"), to = %desired.revision, "rolling");
                        events.push((
                            EventType::Normal,
                            ROLLING,
                            format!(
                                "{kind} {workload_name} rolls from revision {} to {}; the pod restarts",
                                current.unwrap_or("unknown"),
                                desired.revision
                            ),
                            Some(applied.object_ref()),
                        ));
                    }
                    _ => {}
                }
                live_workload = Some(applied);
            }
            RollDecision::HoldAt { .. } => {
                // The workload is not applied: its template stays at the live revision.
            }
        }
    }

    // --- Status. An unbound claim naming a StorageClass that does not exist is a mistake to
    // report loudly; any other unbound claim is most likely being provisioned.
    let storage_class_missing = match live_claim
        .as_ref()
        .filter(|c| status::claim_not_bound(c, false).is_some())
    {
        Some(claim) => match claim
            .spec
            .as_ref()
            .and_then(|s| s.storage_class_name.as_deref())
        {
            Some(class) => Api::<StorageClass>::all(ctx.runtime.client.clone())
                .get_opt(class)
                .await
                .map_err(Error::api(Op::ReadStorageClass, "StorageClass", "", class))?
                .is_none(),
            None => false,
        },
        None => false,
    };
    let desired_revision = desired.as_ref().map(|(_, d)| d.revision.as_str());
    let generation = node.metadata.generation;
    let workload_status = status::workload_status(
        live_workload.as_ref().map(LiveObject::as_live),
        pod,
        desired_revision,
        generation,
    );
    let observed = Observed {
        config: config_check,
        waiting_for_endpoint,
        workload_exists: live_workload.is_some(),
        pod,
        claim: live_claim.as_ref(),
        storage_class_missing,
        roll: roll.as_ref(),
        workload: &workload_status,
    };
    let current = node.status.as_ref();
    let desired_status = status::desired(
        current,
        workload_status.clone(),
        &observed,
        generation,
        Timestamp::now(),
    );
    let current_conditions = current.map(|s| s.conditions.as_slice()).unwrap_or_default();
    transition_events(
        current_conditions,
        &desired_status.conditions,
        config_check,
        live_workload.as_ref(),
        live_claim.as_ref(),
        storage_class_missing,
        &mut events,
    );

    // Published before the status records the change, so a failed publish is retried: the
    // next reconcile still sees the old condition.
    for (type_, reason, note, related) in events {
        publish(&ctx.data.recorder, &node, type_, reason, note, related).await?;
    }
    if status::needs_update(current, &desired_status) {
        operator_runtime::apply_status(&nodes, &name, &desired_status, field_manager)
            .await
            .map_err(Error::api(Op::ApplyStatus, "ValkeyNode", ns, &name))?;
    }
    Ok(controller::resync())
}

/// Events for conditions that newly say something is blocked: an invalid config, a held
/// roll, a claim that does not bind. Only on a change of status, reason or message, so a
/// resync does not repeat them.
fn transition_events(
    current: &[Condition],
    desired: &[Condition],
    config_check: Result<(), &ConfigError>,
    workload: Option<&LiveObject>,
    claim: Option<&PersistentVolumeClaim>,
    storage_class_missing: bool,
    events: &mut Vec<(EventType, &'static str, String, Option<ObjectReference>)>,
) {
    let changed = |type_: &str| {
        let new = conditions::find(desired, type_);
        let old = conditions::find(current, type_);
        let key = |c: &Condition| (c.status.clone(), c.reason.clone(), c.message.clone());
        new.map(key) != old.map(key)
    };
    let now = |type_: &str| conditions::find(desired, type_);
    if let Err(error) = config_check
        && changed(types::CONFIG_VALID)
    {
        events.push((
            EventType::Warning,
            CONFIG_INVALID,
            format!("{error}; the running pod, if any, is left as it is"),
            None,
        ));
    }
    if let Some(c) = now(types::ROLL_PENDING)
        && c.status == conditions::TRUE
        && changed(types::ROLL_PENDING)
    {
        events.push((
            EventType::Normal,
            ROLL_HELD,
            c.message.clone(),
            workload.map(LiveObject::object_ref),
        ));
    }
    if storage_class_missing
        && let Some(c) = now(types::WORKLOAD_READY)
        && c.reason == status::REASON_CLAIM_NOT_BOUND
        && changed(types::WORKLOAD_READY)
    {
        events.push((
            EventType::Warning,
            CLAIM_NOT_BOUND,
            c.message.clone(),
            claim.map(|c| c.object_ref(&())),
        ));
    }
}

/// Publishes an Event about `node`, with a related object when there is one.
async fn publish(
    recorder: &Recorder,
    node: &ValkeyNode,
    type_: EventType,
    reason: &'static str,
    note: String,
    related: Option<ObjectReference>,
) -> Result<(), Error> {
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: "Reconcile".into(),
        secondary: related,
    };
    recorder
        .publish(&event, &node.object_ref(&()))
        .await
        .map_err(|source| Error::PublishEvent {
            namespace: node.namespace().unwrap_or_default(),
            name: node.name_any(),
            reason,
            source: Box::new(source),
        })
}
