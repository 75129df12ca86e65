//! The stages every topology kind's reconcile shares, written once over [`Topology`]: the
//! API handles, fetching the topology with its members, applying members and owned objects,
//! reading its TLS, the `spec.users` and certificate passes, writing status, and the pause.
//! The reconcile every kind runs (`driver::shared::pipeline`) and each kind's own stages
//! (its `Kind`) call them.

use std::time::Duration;

use crd_types::cluster::Phase;
use crd_types::conditions::reasons::{TopologyReady, Waiting};
use crd_types::conditions::{self, ConditionSpec, types};
use crd_types::node::ValkeyStatus;
use crd_types::rotation::{CaReplacement, PasswordRotation};
use crd_types::{ValkeyNode, ValkeyNodeStatus};
use k8s_openapi::api::core::v1::{Pod, Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::Timestamp;
use kube::{Api, ResourceExt};
use operator_runtime::{ApiResultExt, Context, ObjectName, Op, apply};
use topology_controller::shared::auth;
use topology_controller::shared::cert_expiry::ExpiryBook;
use topology_controller::shared::connections::Connections;
use topology_controller::shared::events::TopologyEvent;
use topology_controller::shared::member_status::{member_status_changed, versions_in_play};
use topology_controller::shared::members::needs_apply;
use topology_controller::shared::storage::headroom;
use topology_controller::shared::tls::Client;
use topology_controller::shared::users::{self, Checks};
use topology_controller::shared::{default_password, operator_password};
use topology_controller::shared::{disruption, network};

use crate::driver::shared::error::Error;
use crate::driver::shared::member_tls::TlsUnusable;
use crate::driver::shared::objects::{apply_owned, fetch_with_members};
use crate::driver::shared::password_look::PasswordLook;
use crate::driver::shared::pulse::Pulse;
use crate::driver::shared::secrets::Passwords;
use crate::driver::shared::topology::{Topology, TopologyStatus};
use crate::driver::shared::valkey::{Conn, Login, OperatorConn};
use crate::driver::shared::{acl_users, member_tls, operator_rotation, password_rotation};

/// The API handles of one namespace, and the field manager every write uses.
pub struct Apis<T> {
    pub namespace: String,
    pub topologies: Api<T>,
    pub nodes: Api<ValkeyNode>,
    pub secrets: Api<Secret>,
    pub services: Api<Service>,
    pub pods: Api<Pod>,
    pub budgets: Api<PodDisruptionBudget>,
    pub policies: Api<NetworkPolicy>,
    pub field_manager: &'static str,
}

impl<T: Topology> Apis<T> {
    pub fn of(ctx: &Context, topology: &T) -> Result<Self, Error> {
        let namespace = topology.namespace().ok_or_else(|| Error::Invalid {
            kind: T::KIND,
            name: topology.name_any(),
            field: "metadata.namespace",
        })?;
        let client = ctx.client.clone();
        Ok(Apis {
            topologies: Api::namespaced(client.clone(), &namespace),
            nodes: Api::namespaced(client.clone(), &namespace),
            secrets: Api::namespaced(client.clone(), &namespace),
            services: Api::namespaced(client.clone(), &namespace),
            pods: Api::namespaced(client.clone(), &namespace),
            budgets: Api::namespaced(client.clone(), &namespace),
            policies: Api::namespaced(client, &namespace),
            namespace,
            field_manager: ctx.field_manager,
        })
    }
}

/// What the API server holds: the topology, its members, and ValkeyNodes with a member's
/// label it does not own (never taken over).
pub struct Live<T> {
    pub topology: T,
    pub owned: Vec<ValkeyNode>,
    pub foreign: Vec<ValkeyNode>,
}

impl<T: Topology> Live<T> {
    /// The first ValkeyNode with a member's name that the topology does not own.
    pub fn foreign_member(&self) -> Option<String> {
        self.foreign.first().map(ResourceExt::name_any)
    }
}

/// Stage 2's output for any kind: the topology with its Secrets read (`P`: the kind's
/// passwords), its members and objects applied, and how the operator logs in.
pub struct Prepared<T, P> {
    pub live: Live<T>,
    pub passwords: P,
    pub login: Option<Login>,
    /// The members as they are after applying.
    pub nodes: Vec<ValkeyNode>,
    pub policy_refused: bool,
    /// `PodMonitorReady`, with `spec.monitoring.podMonitor` (or one left to delete).
    pub pod_monitor: Option<ConditionSpec>,
}

/// Stage 3's output: what the members answered (`O`, the kind's observation), and the open
/// connections, closed in one place at the end of the reconcile.
pub struct Seen<T, P, O> {
    pub prepared: Prepared<T, P>,
    pub observed: O,
    pub connections: Connections<Conn>,
}

/// What every kind's reconciles share, besides the kind's own.
pub struct Common {
    /// Wakes the reconciles on changes inside Valkey (a failover changes no Kubernetes
    /// object); the watches bring Kubernetes changes.
    pub pulse: Pulse,
    /// Wakes the reconciles when a default password Secret changes.
    pub password_look: PasswordLook,
    /// Between two looks at a Ready topology with nothing to do: only a backstop.
    pub idle_look: Duration,
    /// The namespace topology-controller runs in (its pods may reach the members).
    pub operator_namespace: String,
    /// `spec.users` rule checks made so far (see [`topology_controller::shared::users::Checks`]).
    pub user_checks: Checks,
    /// When each TLS topology's certificates expire, for /metrics; one book for both kinds.
    pub certificates: ExpiryBook,
}

impl Common {
    /// A topology of `kind` that is gone: nothing follows it any more.
    pub fn forget(&self, kind: &'static str, namespace: &str, name: &str) {
        self.pulse.forget(namespace, name);
        self.password_look.forget(namespace, name);
        self.certificates.forget(namespace, kind, name);
    }
}

/// The topology as it is now (the cache may lag behind the status written a moment ago) and
/// its members; `None` when it is gone or going.
pub async fn fetch<T: Topology>(apis: &Apis<T>, name: &str) -> Result<Option<Live<T>>, Error> {
    let fetched = fetch_with_members(
        &apis.topologies,
        &apis.nodes,
        &apis.namespace,
        name,
        T::MEMBER_LABEL,
    )
    .await?;
    Ok(fetched.map(|(topology, owned, foreign)| Live {
        topology,
        owned,
        foreign,
    }))
}

/// The client side of the topology's TLS (see [`member_tls::read`]): `None` without
/// `spec.tls`, else the client or why it cannot be had (kept as
/// [`Passwords::tls_problem`] for the guard). When its certificates expire goes to
/// `certificates` (dropped without TLS, or while it cannot be used).
pub async fn read_tls<T: Topology>(
    ctx: &Context,
    apis: &Apis<T>,
    live: &Live<T>,
    certificates: &ExpiryBook,
) -> Result<Option<Result<Client, TlsUnusable>>, Error> {
    let reading = member_tls::Reading {
        topology: &live.topology,
        spec: live.topology.tls(),
        label_key: T::MEMBER_LABEL,
        members: &live.owned,
        bus: T::BUS,
    };
    let reasons = (
        TopologyEvent::CertificateIssued,
        TopologyEvent::CertificateRefused,
    );
    let read = member_tls::read(ctx, &apis.secrets, apis.field_manager, reading, reasons).await?;
    let expiry = read.as_ref().and_then(|r| r.expiry);
    let name = live.topology.name_any();
    certificates.record(&apis.namespace, T::KIND, &name, expiry);
    Ok(read.map(|r| r.client))
}

/// Creates the members `wanted` names at their places (built by `build` from the place and
/// the roll gate they have) and
/// updates the changed ones; the members as they are afterwards (leaving ones included: the
/// planner removes them). Held back entirely while the operator's CA cannot issue the first
/// members their certificates ([`member_tls::holds_new_members`]).
pub async fn apply_members<T: Topology, At>(
    apis: &Apis<T>,
    live: &Live<T>,
    tls: Option<&Result<Client, TlsUnusable>>,
    wanted: impl IntoIterator<Item = (String, At)>,
    build: impl Fn(At, Option<String>) -> ValkeyNode,
) -> Result<Vec<ValkeyNode>, Error> {
    if member_tls::holds_new_members(live.topology.tls(), tls, &live.owned) {
        return Ok(Vec::new());
    }
    let mut owned = live.owned.clone();
    for (member_name, at) in wanted {
        if live.foreign.iter().any(|n| n.name_any() == member_name) {
            continue; // reported by the planner, never taken over
        }
        let existing = owned.iter().position(|n| n.name_any() == member_name);
        let allowed = existing.and_then(|i| owned[i].spec.allowed_revision.clone());
        let built = build(at, allowed);
        if existing.is_some_and(|i| !needs_apply(&built, &owned[i])) {
            continue;
        }
        let applied = apply::apply(&apis.nodes, &member_name, &built, apis.field_manager)
            .await
            .on(
                Op::Apply,
                ObjectName::new::<ValkeyNode>(&apis.namespace, &member_name),
            )?;
        match existing {
            Some(i) => owned[i] = applied,
            None => owned.push(applied),
        }
    }
    Ok(owned)
}

/// The topology's disruption budgets, `wanted`; the listed ones no longer wanted go.
pub async fn apply_budgets<T: Topology>(
    apis: &Apis<T>,
    topology: &T,
    wanted: &[PodDisruptionBudget],
) -> Result<(), Error> {
    let selector = disruption::budgets_selector(T::MEMBER_LABEL, &topology.name_any());
    apply_owned(
        &apis.budgets,
        &apis.namespace,
        &selector,
        wanted,
        apis.field_manager,
    )
    .await?;
    Ok(())
}

/// The topology's NetworkPolicy (`wanted`: none when the spec turns it off); whether it was
/// refused. Reported (log and Event), not
/// fatal: failovers, rolls and the role labels must not wait on a policy.
pub async fn apply_policy<T: Topology>(
    ctx: &Context,
    apis: &Apis<T>,
    topology: &T,
    wanted: Vec<NetworkPolicy>,
) -> bool {
    let name = topology.name_any();
    let selector = network::policies_selector(T::MEMBER_LABEL, &name);
    let applied = apply_owned(
        &apis.policies,
        &apis.namespace,
        &selector,
        &wanted,
        apis.field_manager,
    )
    .await;
    let Err(e) = applied else { return false };
    let note = operator_runtime::error_chain(&e);
    tracing::warn!(kind = T::KIND, %name, error = %note, "network policy not applied");
    let reason = TopologyEvent::NetworkPolicyRefused;
    ctx.events.publish(topology, reason, note, None).await;
    true
}

/// With `spec.users`, the `UsersReady` condition after a pass over the users of `members`
/// (data nodes: sentinels have none of them).
pub async fn users_pass<T: Topology>(
    ctx: &Context,
    apis: &Apis<T>,
    checks: &Checks,
    topology: &T,
    members: &[users::Member<'_, Conn>],
) -> Option<ConditionSpec> {
    let users = topology.users()?;
    let pass = acl_users::Pass {
        secrets: &apis.secrets,
        label_key: T::MEMBER_LABEL,
        checks,
        current: topology.conditions(),
        field_manager: apis.field_manager,
    };
    let reasons = (TopologyEvent::UsersApplied, TopologyEvent::UsersRefused);
    Some(pass.run(ctx, topology, users, members, reasons).await)
}

/// With TLS: members that serve a renewed Secret's files load them (`reloadable`: those that
/// can, live), every member (`reloadable` and `others`) is checked against the CA, and a
/// CA replacement moves on; its state for status.
pub async fn certificates_pass<T: Topology>(
    ctx: &Context,
    apis: &Apis<T>,
    live: &Live<T>,
    login: &Login,
    connections: &Connections<Conn>,
    reloadable: Vec<member_tls::Member<'_>>,
    others: Vec<member_tls::Member<'_>>,
) -> Option<CaReplacement> {
    let topology = &live.topology;
    let reasons = (
        TopologyEvent::CertificateReloaded,
        TopologyEvent::CertificateRefused,
    );
    member_tls::reload(ctx, topology, login, &reloadable, connections, reasons).await;
    let everyone: Vec<member_tls::Member<'_>> = reloadable.into_iter().chain(others).collect();
    let refused = TopologyEvent::CertificateRefused;
    member_tls::report_untrusted(ctx, topology, login, &everyone, refused).await;
    member_tls::advance_ca(
        ctx,
        &apis.secrets,
        apis.field_manager,
        topology,
        login,
        &member_tls::dialled(&live.owned, &everyone),
        (TopologyEvent::CertificateIssued, refused),
    )
    .await
}

/// The default password's pass over the data nodes (`data`) and the operator password's over
/// `operator` (every member), at once: each is bounded, and both run before the step. What
/// each records, in that order.
pub async fn password_passes<T: Topology>(
    ctx: &Context,
    apis: &Apis<T>,
    topology: &T,
    passwords: &Passwords,
    data: &[default_password::Member<'_, Conn>],
    operator: &[operator_password::Member<'_, OperatorConn<'_>>],
    nodes: &[ValkeyNode],
) -> (Vec<PasswordRotation>, Vec<PasswordRotation>) {
    let (default_secret, operator_secret) =
        auth::topology_secrets(&topology.name_any(), topology.auth());
    let default = password_rotation::Password {
        version: passwords.default_version.as_deref(),
        reference: &default_secret.reference,
        value: &passwords.default,
    };
    futures::join!(
        password_rotation::run(ctx, topology, password_rotation::DATA_NODES, default, data),
        operator_rotation::run(
            ctx,
            operator_rotation::Apis {
                secrets: &apis.secrets,
                pods: &apis.pods,
                label_key: T::MEMBER_LABEL,
                field_manager: apis.field_manager,
            },
            topology,
            password_rotation::Password {
                version: passwords.operator_version.as_deref(),
                reference: &operator_secret.reference,
                value: &passwords.operator,
            },
            passwords.operator_applied.as_ref(),
            operator,
            nodes,
        )
    )
}

/// The longest a topology with nothing to do waits for its next look: `idle`, less while its
/// NetworkPolicy or PodMonitor is `refused`, while it looks at Secrets nothing watches, or
/// while a previous password waits only for time to go.
pub fn idle_look<T: Topology>(
    idle: Duration,
    topology: &T,
    refused: bool,
    rotations: &[PasswordRotation],
) -> Duration {
    let look = network::idle_look(idle, refused);
    let look = users::idle_look(look, topology.looks_at_secrets());
    look.min(password_rotation::next_look(rotations).unwrap_or(Duration::MAX))
}

/// Sets, on a status a kind's report built, what every kind reports the same way: the
/// member with the least free space, the `versions` its members run, the `UsersReady` and
/// `PodMonitorReady` conditions, the rotations under way and the CA replacement.
pub fn finish_status<'a, T: Topology, P>(
    status: &mut T::Status,
    prepared: &Prepared<T, P>,
    versions: impl IntoIterator<Item = Option<&'a str>>,
    credentials: &Credentials,
    now: Timestamp,
) {
    let live = &prepared.live;
    let topology = &live.topology;
    let generation = topology.meta().generation;
    let current = topology.status().map(|s| s.common().conditions);
    let current = current.unwrap_or_default();
    for spec in [&credentials.users, &prepared.pod_monitor]
        .into_iter()
        .flatten()
    {
        let condition = conditions::transition(current, spec.clone(), generation, now);
        conditions::upsert(status.conditions_mut(), condition);
    }
    status.set_credentials(credentials.rotations.clone(), credentials.ca.clone());
    status.set_members(headroom(&live.owned), versions_in_play(versions));
}

/// What the passes over the credentials found, for status: `spec.users`' condition, the
/// password rotations under way, the CA replacement.
#[derive(Default)]
pub struct Credentials {
    pub users: Option<ConditionSpec>,
    pub rotations: Vec<PasswordRotation>,
    pub ca: Option<CaReplacement>,
}

/// Each member's `status.valkey`, where it changed beyond the replication offset.
pub async fn write_member_statuses<T: Topology>(
    apis: &Apis<T>,
    nodes: &[ValkeyNode],
    statuses: Vec<(&str, Option<ValkeyStatus>)>,
) -> Result<(), Error> {
    for (name, valkey) in statuses {
        let Some(valkey) = valkey else { continue };
        let node = nodes.iter().find(|n| n.name_any() == name);
        let live = node
            .and_then(|n| n.status.as_ref())
            .and_then(|s| s.valkey.as_ref());
        if !member_status_changed(live, &valkey) {
            continue;
        }
        let body = ValkeyNodeStatus {
            valkey: Some(valkey),
            ..Default::default()
        };
        apply::apply_status(&apis.nodes, name, &body, apis.field_manager)
            .await
            .on(
                Op::ApplyStatus,
                ObjectName::new::<ValkeyNode>(&apis.namespace, name),
            )?;
    }
    Ok(())
}

/// The topology's status, when `changed` says it differs from what is written.
pub async fn write_status<T: Topology>(
    apis: &Apis<T>,
    topology: &T,
    status: &T::Status,
    changed: impl Fn(Option<&T::Status>, &T::Status) -> bool,
) -> Result<(), Error> {
    if !changed(topology.status(), status) {
        return Ok(());
    }
    let name = topology.name_any();
    apply::apply_status(&apis.topologies, &name, status, apis.field_manager)
        .await
        .on(
            Op::ApplyStatus,
            ObjectName::new::<T>(&apis.namespace, &name),
        )?;
    Ok(())
}

/// A paused topology (`valkey.rs/paused`): no member, Secret or object is applied, nobody is
/// asked anything and no step is taken. Status says `Paused`: the phase, `Progressing` False
/// with reason `Paused`, and `Ready` kept at the truth it had with reason `Paused`; the rest of
/// it stays as last written. The annotation's removal is a watched change.
pub async fn report_paused<T: Topology>(apis: &Apis<T>, topology: &T) -> Result<(), Error> {
    let status = paused_status(topology, Timestamp::now());
    write_status(apis, topology, &status, |old, new| old != Some(new)).await
}

/// The status of a paused topology (see [`report_paused`]).
pub fn paused_status<T: Topology>(topology: &T, now: Timestamp) -> T::Status {
    let mut status = topology.status().cloned().unwrap_or_default();
    let generation = topology.meta().generation;
    let current = status.common().conditions.to_vec();
    let was_ready = conditions::is_true(&current, types::READY);
    let message = "the valkey.rs/paused annotation is set: no step is taken until it is removed";
    for spec in [
        ConditionSpec::new(TopologyReady::Paused, was_ready, message),
        ConditionSpec::new(Waiting::Paused, false, message),
    ] {
        let condition = conditions::transition(&current, spec, generation, now);
        conditions::upsert(status.conditions_mut(), condition);
    }
    status.set_phase(Phase::Paused);
    status.set_observed_generation(generation);
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use crd_types::ValkeyCluster;
    use crd_types::ValkeyClusterStatus;
    use crd_types::names::annotations;

    fn cluster(status: Option<ValkeyClusterStatus>) -> ValkeyCluster {
        let mut cluster: ValkeyCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "valkey.rs/v1alpha1",
            "kind": "ValkeyCluster",
            "metadata": {"name": "c", "namespace": "ns", "generation": 7,
                         "annotations": {(annotations::PAUSED): "true"}},
            "spec": {"shards": 3},
        }))
        .unwrap();
        cluster.status = status;
        cluster
    }

    fn condition<'a>(status: &'a ValkeyClusterStatus, type_: &str) -> &'a str {
        let c = conditions::find(&status.conditions, type_).unwrap();
        assert_eq!(c.reason, "Paused", "{type_}");
        &c.status
    }

    #[test]
    fn a_paused_topology_says_paused_and_keeps_what_it_last_saw() {
        let now = Timestamp::now();
        let ready = conditions::transition(
            &[],
            ConditionSpec::new(TopologyReady::ClusterReady, true, "ready"),
            Some(6),
            now,
        );
        let before = ValkeyClusterStatus {
            phase: Some(Phase::Ready),
            ready_shards: 3,
            conditions: vec![ready],
            ..Default::default()
        };
        let c = cluster(Some(before));
        assert!(c.paused());
        let paused = paused_status(&c, now);
        assert_eq!(paused.phase, Some(Phase::Paused));
        assert_eq!(paused.observed_generation, Some(7));
        assert_eq!(paused.ready_shards, 3, "the rest of status is kept");
        assert_eq!(condition(&paused, types::READY), conditions::TRUE);
        assert_eq!(condition(&paused, types::PROGRESSING), conditions::FALSE);
        // Written again unchanged: nothing to write.
        let again = cluster(Some(paused.clone()));
        assert_eq!(paused_status(&again, Timestamp::now()), paused);
    }

    #[test]
    fn only_false_or_no_annotation_leaves_a_topology_running() {
        let mut c = cluster(None);
        for (value, paused) in [("true", true), ("", true), ("yes", true), ("false", false)] {
            c.annotations_mut()
                .insert(annotations::PAUSED.into(), value.into());
            assert_eq!(c.paused(), paused, "{value:?}");
        }
        c.annotations_mut().remove(annotations::PAUSED);
        assert!(!c.paused());
    }

    #[test]
    fn a_topology_paused_before_it_was_ready_is_not_ready() {
        let paused = paused_status(&cluster(None), Timestamp::now());
        assert_eq!(paused.phase, Some(Phase::Paused));
        assert_eq!(condition(&paused, types::READY), conditions::FALSE);
    }

    #[test]
    fn the_idle_look_is_the_shortest_of_what_waits_on_it() {
        const IDLE: Duration = Duration::from_secs(300);
        let mut c = cluster(None);
        assert_eq!(idle_look(IDLE, &c, false, &[]), IDLE);
        assert_eq!(idle_look(IDLE, &c, true, &[]), network::REFUSED_POLICY_LOOK);
        c.spec.common.users = Some(Vec::new());
        assert_eq!(idle_look(IDLE, &c, true, &[]), users::USERS_LOOK);
    }
}
