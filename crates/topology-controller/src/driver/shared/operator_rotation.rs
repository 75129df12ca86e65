//! The operator password of one topology, rotated live on all its members (see
//! [`topology_controller::shared::operator_password`]): a pass per reconcile until members are
//! settled on the Secret's password, as `<name>-operator-applied` keeps it
//! ([`AppliedOperator`]). Recorded in `status.passwordRotations` (`user: operator`) and told
//! in Events; nothing fails the reconcile.

use std::fmt::Debug;
use std::future::Future;
use std::time::Duration;

use crd_types::names::annotations;
use crd_types::node::ValkeyNode;
use crd_types::rotation::{PasswordRotation, RotatedPassword};
use crd_types::template::{Auth, SecretKeyRef};
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{Api, Resource, ResourceExt};
use operator_runtime::{Context, EventReason};
use topology_controller::shared::auth::AppliedOperator;
use topology_controller::shared::default_password;
use topology_controller::shared::events::TopologyEvent;
use topology_controller::shared::operator_password::{self, Facts, Member, Outcome, OutgoingLogin};
use topology_controller::shared::users::AclMember;

use crate::driver::shared::error::Error;
use crate::driver::shared::password_rotation::Password;
use crate::driver::shared::secret_store::SecretStore;
use crate::driver::shared::secrets;
use crate::driver::shared::topology::Topology;

/// The longest a pass may take: it runs before the topology's step.
const PASS_LIMIT: Duration = Duration::from_secs(15);

/// The Events a pass publishes.
pub struct Reasons<R> {
    pub added: R,
    pub switched: R,
    pub dropped: R,
    pub refused: R,
}

/// Where a pass reads pods and keeps the applied password: the API server's `Api`s, or a
/// test's fakes.
pub struct Apis<'a, S = Api<Secret>, P = Api<Pod>> {
    pub secrets: &'a S,
    pub pods: &'a P,
    pub label_key: &'a str,
    pub field_manager: &'a str,
}

/// The pods a pass reads (the seam [`SecretStore`] is for Secrets).
pub trait PodReader: Sync {
    /// The pod `name`, or `None` when there is none.
    fn get_opt(&self, name: &str) -> impl Future<Output = Result<Option<Pod>, kube::Error>> + Send;
}

impl PodReader for Api<Pod> {
    async fn get_opt(&self, name: &str) -> Result<Option<Pod>, kube::Error> {
        Api::get_opt(self, name).await
    }
}

/// Where a pass tells what it did: the topology's Events, or a test's list.
trait Tell<R>: Sync {
    fn tell(&self, reason: R, note: String) -> impl Future<Output = ()> + Send;
}

/// The Events of `topology`, published as the controller of `ctx`.
struct Events<'a, K> {
    ctx: &'a Context,
    topology: &'a K,
}

impl<R, K> Tell<R> for Events<'_, K>
where
    R: EventReason + Send,
    K: Resource<DynamicType = ()> + Sync,
{
    async fn tell(&self, reason: R, note: String) {
        self.ctx
            .events
            .publish(self.topology, reason, note, None)
            .await;
    }
}

/// What a pass works from, as [`run`] is given it.
struct Pass<'a, 'm, V> {
    auth: Option<&'a Auth>,
    password: Password<'a>,
    applied: Option<&'a AppliedOperator>,
    recorded: &'a [PasswordRotation],
    members: &'a [Member<'m, V>],
    nodes: &'a [ValkeyNode],
}

/// Brings the operator `password` to `members` of `topology` (data nodes and sentinels,
/// their ValkeyNodes in `nodes`); returns what to record now for it.
pub async fn run<T, V, S, P>(
    ctx: &Context,
    apis: Apis<'_, S, P>,
    topology: &T,
    password: Password<'_>,
    applied: Option<&AppliedOperator>,
    members: &[Member<'_, V>],
    nodes: &[ValkeyNode],
) -> Vec<PasswordRotation>
where
    T: Topology,
    V: AclMember + OutgoingLogin,
    S: SecretStore,
    P: PodReader,
{
    let events = Events { ctx, topology };
    let pass = Pass {
        auth: topology.auth(),
        password,
        applied,
        recorded: topology.recorded_rotations(),
        members,
        nodes,
    };
    let reasons = Reasons {
        added: TopologyEvent::OperatorPasswordAdded,
        switched: TopologyEvent::OperatorLoginsSwitched,
        dropped: TopologyEvent::PreviousPasswordDropped,
        refused: TopologyEvent::OperatorPasswordRefused,
    };
    rotate(&events, &apis, topology, pass, reasons).await
}

/// [`run`], telling what it did to `tell`.
async fn rotate<K, R, V, S, P, T>(
    tell: &T,
    apis: &Apis<'_, S, P>,
    topology: &K,
    pass: Pass<'_, '_, V>,
    reasons: Reasons<R>,
) -> Vec<PasswordRotation>
where
    K: Resource<DynamicType = ()> + Debug,
    R: EventReason,
    V: AclMember + OutgoingLogin,
    S: SecretStore,
    P: PodReader,
    T: Tell<R>,
{
    let name = topology.name_any();
    let kept = || operator_rotations(pass.recorded);
    let (Ok(value), Some(secret_version), Some(applied)) =
        (pass.password.value, pass.password.version, pass.applied)
    else {
        return kept();
    };
    // Settled: no pass (it would read every member for nothing).
    if applied.settled_on(value) {
        return Vec::new();
    }
    if !default_password::startable(value) {
        let note = refused_note(pass.password.reference);
        tell.tell(reasons.refused, note).await;
        return kept();
    }
    let recorded_since = pass
        .recorded
        .iter()
        .find(|r| r.user == RotatedPassword::Operator && r.secret_version == secret_version);
    let now = k8s_openapi::jiff::Timestamp::now();
    // Pods are read only when the previous password could go now.
    let drop_due = recorded_since.is_some_and(|r| now >= r.previous_until.0);
    let held_by_pods = match drop_due {
        true => pods_without_the_file(apis.pods, pass.nodes, &pass.password.reference.name).await,
        false => Vec::new(),
    };
    // Kept before the new password reaches any member: from then on one may hold it alone
    // (restarted), and a later change of the Secret must still log in to it.
    if let Some(toward) = applied.toward(value)
        && let Err(e) = keep(apis, topology, &toward).await
    {
        tracing::warn!(topology = %name, error = %e, "operator password rotation not kept: not started");
        return kept();
    }
    let facts = Facts {
        recorded: recorded_since.map(|r| r.since.0),
        overlap: default_password::overlap(pass.auth),
        drop_allowed: drop_due && held_by_pods.is_empty(),
        now,
    };
    let rotating = operator_password::rotate(value, pass.members, facts);
    let Ok(outcome) = tokio::time::timeout(PASS_LIMIT, rotating).await else {
        tracing::warn!(topology = %name, "operator password pass took over {PASS_LIMIT:?}");
        return kept();
    };
    told(tell, &name, &outcome, reasons).await;
    if outcome.settled {
        // Only now: until every member holds the new password alone, the kept ones are
        // what a member that has not taken it still takes.
        let settled = AppliedOperator {
            password: value.clone(),
            rotating: Vec::new(),
        };
        if let Err(e) = keep(apis, topology, &settled).await {
            tracing::warn!(topology = %name, error = %e, "applied operator password not kept");
            return kept();
        }
    }
    record(&outcome, secret_version, &held_by_pods)
}

/// The operator's rotations among `recorded`: what is recorded again when a pass does not
/// run or does not finish.
fn operator_rotations(recorded: &[PasswordRotation]) -> Vec<PasswordRotation> {
    recorded
        .iter()
        .filter(|r| r.user == RotatedPassword::Operator)
        .cloned()
        .collect()
}

/// Keeps `applied` as the operator passwords members of `topology` hold.
async fn keep<S, P, K>(
    apis: &Apis<'_, S, P>,
    topology: &K,
    applied: &AppliedOperator,
) -> Result<(), Error>
where
    S: SecretStore,
    K: Resource<DynamicType = ()> + Debug,
{
    let (label_key, field_manager) = (apis.label_key, apis.field_manager);
    secrets::keep_applied_operator(apis.secrets, topology, label_key, applied, field_manager).await
}

/// Logs a pass of `topology` and tells its Events.
async fn told<R: EventReason, T: Tell<R>>(
    tell: &T,
    topology: &str,
    outcome: &Outcome,
    reasons: Reasons<R>,
) {
    if !outcome.failed.is_empty() {
        tracing::warn!(%topology, failed = ?outcome.failed, "operator password not changed everywhere");
    }
    tracing::debug!(%topology, ?outcome, "operator password pass");
    for (reason, note) in notes(outcome, reasons) {
        if !reason.is_warning() {
            tracing::info!(%topology, %note, "operator password rotation");
        }
        tell.tell(reason, note).await;
    }
}

/// What to record of a pass's `outcome`, toward the Secret's `secret_version`: the members
/// it did not reach and those whose pods hold the previous password back
/// (`held_by_pods`) hold the rotation back.
fn record(
    outcome: &Outcome,
    secret_version: &str,
    held_by_pods: &[String],
) -> Vec<PasswordRotation> {
    outcome
        .rotation
        .as_ref()
        .map(|r| PasswordRotation {
            user: RotatedPassword::Operator,
            since: Time(r.since),
            previous_until: Time(r.previous_until),
            members_with_new: i32::try_from(r.members_with_new).unwrap_or(i32::MAX),
            members: i32::try_from(r.members).unwrap_or(i32::MAX),
            secret_version: secret_version.to_string(),
            held_back_by: outcome.silent.iter().chain(held_by_pods).cloned().collect(),
        })
        .into_iter()
        .collect()
}

/// Members whose pod's hooks do not read the password from the mounted Secret `secret` (an
/// older operator's template, a pod not rolled yet onto another Secret the spec now names,
/// or a pod that cannot be read): their hooks would hold the previous password once it goes.
async fn pods_without_the_file<P: PodReader>(
    pods: &P,
    nodes: &[ValkeyNode],
    secret: &str,
) -> Vec<String> {
    let mut without = Vec::new();
    for node in nodes {
        let name = node
            .status
            .as_ref()
            .and_then(|s| s.workload.as_ref())
            .and_then(|w| w.pod_name.as_deref());
        let pod = match name {
            Some(name) => pods.get_opt(name).await.unwrap_or_else(|e| {
                tracing::warn!(pod = %name, error = %e, "pod not read");
                None
            }),
            None => None,
        };
        if !pod.as_ref().is_some_and(|p| reads_the_file(p, secret)) {
            without.push(node.name_any());
        }
    }
    without
}

/// Whether `pod`'s hooks read the operator password from a mount of `secret`.
fn reads_the_file(pod: &Pod, secret: &str) -> bool {
    let annotated = pod
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(annotations::OPERATOR_PASSWORD_FILE));
    let mounts = pod
        .spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| v.secret.as_ref()?.secret_name.as_deref())
        .any(|name| name == secret);
    annotated && mounts
}

fn refused_note(reference: &SecretKeyRef) -> String {
    format!(
        "the operator password in Secret {} key {} is '-' or has a line break, which a \
         member refuses at start: it is not rotated in",
        reference.name, reference.key
    )
}

/// The Events of a pass, with their notes.
fn notes<R>(outcome: &Outcome, reasons: Reasons<R>) -> Vec<(R, String)> {
    let mut notes = Vec::new();
    if !outcome.new_added.is_empty() {
        let until = outcome
            .rotation
            .as_ref()
            .map(|r| format!(" until {} at the earliest", r.previous_until))
            .unwrap_or_default();
        notes.push((
            reasons.added,
            format!(
                "the new operator password works on {}; the previous one still does{until}",
                outcome.new_added.join(", ")
            ),
        ));
    }
    if !outcome.switched.is_empty() {
        notes.push((
            reasons.switched,
            format!(
                "{} log in to the other members with the new operator password",
                outcome.switched.join(", ")
            ),
        ));
    }
    if !outcome.previous_dropped.is_empty() {
        notes.push((
            reasons.dropped,
            format!(
                "only the new operator password works on {} now",
                outcome.previous_dropped.join(", ")
            ),
        ));
    }
    if !outcome.failed.is_empty() {
        let failed: Vec<String> = outcome
            .failed
            .iter()
            .map(|(member, answer)| format!("{member}: {answer}"))
            .collect();
        notes.push((
            reasons.refused,
            format!(
                "the operator password could not be changed on {}",
                failed.join("; ")
            ),
        ));
    }
    notes
}

#[cfg(test)]
mod tests;
