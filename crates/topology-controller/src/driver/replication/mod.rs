//! A ValkeyReplication's own stages of the reconcile every kind runs
//! ([`crate::driver::shared::pipeline`]): its Secrets (the sentinels' too), members, client
//! Services, budgets and NetworkPolicy (`read_passwords`, `own_secrets`, `apply_members`,
//! `apply_owned`, called by the shared `prepare`), `observe` (every data node and
//! sentinel asked; the sentinels' announcements followed), `credentials` (the sentinels'
//! own password besides), `decide` (pure) and `carry_out` (the role labels follow the
//! primary first; an Event when the primary moved).
//!
//! Nothing is remembered between reconciles but what status says.

mod connect;
mod objects;
mod watch;

pub use watch::SwitchWatch;

use std::time::Duration;

use crd_types::ValkeyNode;
use crd_types::ValkeyReplication;
use crd_types::ValkeyReplicationStatus;
use crd_types::cluster::Phase;
use crd_types::names::{annotations, labels};
use crd_types::rotation::PasswordRotation;
use crd_types::template::SecretKeyRef;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use topology_controller::replication::events::{ReplicationEvent, primary_changed, step_event};
use topology_controller::replication::execute::{DataLogin, execute};
use topology_controller::replication::model::Group;
use topology_controller::replication::plan::{self, Circumstances, Step};
use topology_controller::replication::status::{
    self, Inputs, sentinel_valkey_status, valkey_status,
};
use topology_controller::replication::survey::{self, Health};
use topology_controller::replication::{PORT, SENTINEL_PORT, members};
use topology_controller::shared::auth::{self, PasswordError};
use topology_controller::shared::connections::Connections;
use topology_controller::shared::default_password::{self, Sentinel};
use topology_controller::shared::disruption;
use topology_controller::shared::network;
use topology_controller::shared::tls::{self, Client};

use crate::driver::shared::credentials::{self, DataNode, Members, Reached};
use crate::driver::shared::error::Error;
use crate::driver::shared::member_nodes::MemberNodes;
use crate::driver::shared::member_tls::TlsUnusable;
use crate::driver::shared::pipeline::{self, Grounds, Kind, KindPasswords, Prepared};
use crate::driver::shared::secrets;
use crate::driver::shared::stages::{self, Apis, Common, Credentials, Live};
use crate::driver::shared::valkey::{Conn, Login};
use crate::driver::shared::{member_tls, password_rotation};
use connect::Observed;

/// How soon to look again: after a step, and while waiting or not ready. When Ready, the
/// idle look of [`Shared`] is only a backstop.
const AFTER_STEP: Duration = Duration::from_secs(1);
const WHILE_WAITING: Duration = Duration::from_secs(2);

/// What every ValkeyReplication reconcile shares.
pub struct Shared {
    pub common: Common,
    /// The sentinels' `+switch-master` announcements, which change no Kubernetes object.
    pub switches: SwitchWatch,
}

type Ctx = pipeline::Ctx<ValkeyReplication>;

/// What is known of the group's passwords: the data nodes' and the operator's, as for any
/// topology, and the sentinels' own.
pub struct Passwords {
    data: secrets::Passwords,
    /// The sentinels' default user's password, or why it cannot be read, and its Secret's.
    sentinel: Result<String, PasswordError>,
    sentinel_version: Option<String>,
}

impl AsRef<secrets::Passwords> for Passwords {
    fn as_ref(&self) -> &secrets::Passwords {
        &self.data
    }
}

impl AsMut<secrets::Passwords> for Passwords {
    fn as_mut(&mut self) -> &mut secrets::Passwords {
        &mut self.data
    }
}

/// The data nodes need the default user's password to start, the sentinels their own.
impl KindPasswords for Passwords {
    fn start_problems(&self) -> Vec<&PasswordError> {
        let default = self.data.default.as_ref().err();
        let sentinel = self.sentinel.as_ref().err();
        [default, sentinel].into_iter().flatten().collect()
    }
}

type Seen = pipeline::Seen<ValkeyReplication>;

/// Stage 5's output: the step, the group as the planner read it, and the status that says it.
pub struct Decided {
    step: Step,
    group: Group,
    health: Health,
    planned: ValkeyReplicationStatus,
}

impl Kind for ValkeyReplication {
    type Shared = Shared;
    type Passwords = Passwords;
    type Observed = Observed;
    type Decided = Decided;

    fn common(shared: &Shared) -> &Common {
        &shared.common
    }

    fn forget(shared: &Shared, namespace: &str, name: &str) {
        shared.switches.forget(namespace, name);
    }

    async fn read_passwords(apis: &Apis<Self>, live: &Live<Self>) -> Result<Passwords, Error> {
        passwords(apis, live).await
    }

    /// The sentinels' own password.
    fn own_secrets<'a>(
        vkr: &Self,
        passwords: &'a Passwords,
    ) -> Vec<(SecretKeyRef, Option<&'a str>)> {
        let sentinel = auth::sentinel_secret(vkr).reference;
        vec![(sentinel, passwords.sentinel.as_deref().ok())]
    }

    async fn apply_members(
        apis: &Apis<Self>,
        live: &Live<Self>,
        tls: Option<&Result<Client, TlsUnusable>>,
    ) -> Result<Vec<ValkeyNode>, Error> {
        let vkr = &live.topology;
        let group = Group::of(vkr);
        let context = members::context(vkr, &live.owned);
        let wanted = group
            .positions()
            .into_iter()
            .map(|at| (group.member_name(at), at));
        let build = |at, allowed| members::member(vkr, at, allowed, &context);
        stages::apply_members(apis, live, tls, wanted, build).await
    }

    /// The client Services, the budgets and the policy.
    async fn apply_owned(
        ctx: &Ctx,
        apis: &Apis<Self>,
        vkr: &Self,
        _: &[ValkeyNode],
    ) -> Result<bool, Error> {
        objects::apply_services(&apis.services, vkr, &apis.namespace, apis.field_manager).await?;
        stages::apply_budgets(apis, vkr, &disruption::replication_budgets(vkr)).await?;
        let policy = network::replication_policy(vkr, &ctx.data.common.operator_namespace);
        Ok(stages::apply_policy(&ctx.runtime, apis, vkr, policy).await)
    }

    /// Asks every data node and sentinel; the sentinels' announcements follow them.
    async fn observe(
        ctx: &Ctx,
        apis: &Apis<Self>,
        prepared: &Prepared<Self>,
    ) -> (Observed, Connections<Conn>) {
        let name = prepared.live.topology.name_any();
        let nodes = prepared.nodes.clone();
        let (observed, connections) = connect::observe(&name, nodes, prepared.login.as_ref()).await;
        if let Some(login) = &prepared.login {
            let sentinels = observed
                .members
                .sentinels
                .iter()
                .filter_map(|s| s.facts.address.clone())
                .collect();
            ctx.data
                .switches
                .follow(&apis.namespace, &name, sentinels, login);
        }
        (observed, connections)
    }

    fn data_addresses(observed: &Observed) -> Vec<(String, u16)> {
        let data = observed.members.data.iter();
        data.filter_map(|d| d.facts.address.clone().map(|ip| (ip, PORT)))
            .collect()
    }

    fn login_refused(observed: &Observed) -> &[String] {
        &observed.login_refused
    }

    /// The passes over `spec.users` (data nodes only: sentinels have none of them), the
    /// passwords (the sentinels' own too) and, with TLS, the certificates (reloaded on data
    /// nodes only: Sentinel has no CONFIG SET, and 8.x reads TLS files only at start).
    async fn credentials(ctx: &Ctx, apis: &Apis<Self>, seen: &Seen) -> Credentials {
        let observed = &seen.observed;
        let node = |name: &str| observed.nodes.iter().find(|n| n.name_any() == name);
        let data = observed
            .members
            .data
            .iter()
            .map(|d| DataNode {
                at: Reached {
                    name: d.name(),
                    ip: d.facts.address.as_deref(),
                    port: PORT,
                },
                version: d.answer.as_ref().and_then(|a| a.version.as_deref()),
                node: node(d.name()),
            })
            .collect();
        let sentinels = observed
            .members
            .sentinels
            .iter()
            .map(|s| Reached {
                name: s.name(),
                ip: s.facts.address.as_deref(),
                port: SENTINEL_PORT,
            })
            .collect();
        let members = Members {
            data,
            sentinels,
            nodes: &observed.nodes,
            connections: &seen.connections,
        };
        let checks = &ctx.data.common.user_checks;
        let on_sentinels = sentinels_pass(ctx, seen);
        credentials::passes(
            &ctx.runtime,
            apis,
            checks,
            &seen.prepared,
            &members,
            on_sentinels,
        )
        .await
    }

    /// The planner's step on what was seen, and the status that says so (pure).
    fn decide(
        _: &Ctx,
        _: &Apis<Self>,
        seen: &Seen,
        credentials: &Credentials,
        grounds: Grounds<'_>,
    ) -> Decided {
        let vkr = &seen.prepared.live.topology;
        let group = Group {
            replication_password: grounds.replication_password,
            ..Group::of(vkr)
        };
        let members = &seen.observed.members;
        let recorded = recorded_primary(vkr);
        let step = plan::decide(
            &group,
            members,
            &Circumstances {
                recorded_primary: recorded,
                recorded_switchover: grounds.recorded_switchover,
                holds: grounds.holds,
            },
        );
        let health = Health::of(&group, members, recorded);
        let planned = report(seen, credentials, &group, &health, &step, None);
        Decided {
            step,
            group,
            health,
            planned,
        }
    }

    /// The read-write and read-only Services follow the roles before anything else; status is
    /// written next (so it says what is about to happen), then the step runs and its Events go
    /// out; when to look again.
    async fn carry_out(
        ctx: &Ctx,
        apis: &Apis<Self>,
        seen: &Seen,
        credentials: &Credentials,
        decided: Decided,
        idle: Duration,
    ) -> Result<Action, Error> {
        let (vkr, observed) = (&seen.prepared.live.topology, &seen.observed);
        let login = seen.prepared.login.as_ref();
        let members = &observed.members;
        let Decided {
            step,
            group,
            health,
            planned,
        } = decided;
        let recorded = recorded_primary(vkr);
        label_roles(apis, seen, &group, &health).await?;
        let statuses = members
            .data
            .iter()
            .map(|d| (d.name(), valkey_status(d, members)))
            .chain(
                members
                    .sentinels
                    .iter()
                    .map(|s| (s.name(), sentinel_valkey_status(s))),
            )
            .collect();
        stages::write_member_statuses(apis, &observed.nodes, statuses).await?;
        stages::write_status(apis, vkr, &planned, status::status_changed).await?;
        if let Some((reason, note, member)) =
            primary_changed(recorded, planned.current_primary.as_deref())
        {
            let related = related(observed, member.as_deref());
            ctx.runtime.events.publish(vkr, reason, note, related).await;
        }

        let context = members::context(vkr, &observed.nodes);
        let objects = MemberNodes::new(apis, |member: &str, revision| {
            let at = group
                .positions()
                .into_iter()
                .find(|at| group.member_name(*at) == member)?;
            Some(members::member(vkr, at, Some(revision), &context))
        });
        let done = match login {
            Some(login) => {
                let data_login = DataLogin {
                    user: &login.user,
                    password: &login.password,
                };
                execute(
                    &step,
                    &group,
                    members,
                    &seen.connections,
                    &objects,
                    &data_login,
                )
                .await
            }
            // Without the operator's password the guard only ever lets waits through.
            None => Ok(()),
        };
        let step_error = done.as_ref().err().map(ToString::to_string);
        if let Err(e) = &done {
            tracing::warn!(replication = %vkr.name_any(), step = %step, error = %e, "step failed");
            let failed = report(
                seen,
                credentials,
                &group,
                &health,
                &step,
                step_error.as_deref(),
            );
            stages::write_status(apis, vkr, &failed, status::status_changed).await?;
        }
        if let Some((reason, note, member)) = step_event(&step, step_error.as_deref()) {
            let related = related(observed, member.as_deref());
            ctx.runtime.events.publish(vkr, reason, note, related).await;
        }
        let ready = planned.phase == Some(Phase::Ready);
        if let (Some(login), Step::Idle, true) = (login, &step, ready) {
            restart_stale_sentinel(ctx, apis, vkr, login, observed, &health).await;
        }
        let look = next_look(&step, step_error.is_some(), ready, idle);
        Ok(Action::requeue(look))
    }
}

/// Creates the missing generated Secrets and reads the passwords.
async fn passwords(
    apis: &Apis<ValkeyReplication>,
    live: &Live<ValkeyReplication>,
) -> Result<Passwords, Error> {
    let group = &live.topology;
    let exist = !live.owned.is_empty();
    let (default, operator) =
        auth::topology_secrets(&group.name_any(), group.spec.common.auth.as_ref());
    let sentinel = auth::sentinel_secret(group);
    let read = |wanted| {
        secrets::read_with_version(&apis.secrets, group, labels::REPLICATION, wanted, exist)
    };
    let (operator, operator_version) = read(&operator).await?;
    let operator_applied = secrets::applied_operator(
        &apis.secrets,
        group,
        labels::REPLICATION,
        &operator,
        apis.field_manager,
    )
    .await?;
    let (default, default_version) = read(&default).await?;
    let (sentinel, sentinel_version) = read(&sentinel).await?;
    Ok(Passwords {
        data: secrets::Passwords {
            operator,
            operator_version,
            operator_applied,
            default,
            default_version,
            tls_problem: None,
        },
        sentinel,
        sentinel_version,
    })
}

/// The sentinels' own default password, on the sentinels.
async fn sentinels_pass(ctx: &Ctx, seen: &Seen) -> Vec<PasswordRotation> {
    let (group, passwords) = (&seen.prepared.live.topology, &seen.prepared.passwords);
    let sentinel_conns: Vec<(&str, Option<Sentinel<'_, Conn>>)> = seen
        .observed
        .members
        .sentinels
        .iter()
        .map(|s| (s.name(), seen.connections.find(s.name()).map(Sentinel)))
        .collect();
    let sentinels: Vec<default_password::Member<'_, Sentinel<'_, Conn>>> = sentinel_conns
        .iter()
        .map(|(name, conn)| default_password::Member {
            name,
            conn: conn.as_ref(),
        })
        .collect();
    let reference = auth::sentinel_secret(group).reference;
    let password = password_rotation::Password {
        version: passwords.sentinel_version.as_deref(),
        reference: &reference,
        value: &passwords.sentinel,
    };
    let whose = password_rotation::SENTINELS;
    password_rotation::run(&ctx.runtime, group, whose, password, &sentinels).await
}

/// The primary status names.
fn recorded_primary(vkr: &ValkeyReplication) -> Option<&str> {
    vkr.status
        .as_ref()
        .and_then(|s| s.current_primary.as_deref())
}

/// The group's status for `step` (and how it failed, if it did).
fn report(
    seen: &Seen,
    credentials: &Credentials,
    group: &Group,
    health: &Health,
    step: &Step,
    step_error: Option<&str>,
) -> ValkeyReplicationStatus {
    let (live, members) = (&seen.prepared.live, &seen.observed.members);
    let vkr = &live.topology;
    let now = Timestamp::now();
    let data_versions = members
        .data
        .iter()
        .filter_map(|d| d.answer.as_ref().map(|a| a.version.as_deref()));
    let sentinel_versions = members
        .sentinels
        .iter()
        .filter_map(|s| s.answer.as_ref().map(|a| a.version.as_deref()));
    let mut status = status::replication_status(Inputs {
        group,
        members,
        health,
        step,
        step_error,
        current: vkr.status.as_ref(),
        generation: vkr.metadata.generation,
        now,
    });
    let versions = data_versions.chain(sentinel_versions);
    stages::finish_status(&mut status, &seen.prepared, versions, credentials, now);
    status
}

/// The data pods' role labels follow the primary the group has, so the read-write and
/// read-only Services do. Without a login nothing was asked: every role would look unknown,
/// and the Services would lose every endpoint, so the labels stay as the last look left them.
async fn label_roles(
    apis: &Apis<ValkeyReplication>,
    seen: &Seen,
    group: &Group,
    health: &Health,
) -> Result<(), Error> {
    if seen.prepared.login.is_none() {
        return Ok(());
    }
    let vkr = &seen.prepared.live.topology;
    let members = &seen.observed.members;
    let primary = survey::primary(group, members, recorded_primary(vkr))
        .ok()
        .filter(|_| health.primary.is_ok());
    objects::label_pods(
        &apis.pods,
        vkr,
        members,
        primary,
        &apis.namespace,
        apis.field_manager,
    )
    .await
}

/// With TLS, restarts a sentinel still serving an older certificate, when the group is at
/// rest at this reconcile (see [`tls::sentinel_to_restart`]).
async fn restart_stale_sentinel(
    ctx: &Ctx,
    apis: &Apis<ValkeyReplication>,
    vkr: &ValkeyReplication,
    login: &Login,
    observed: &Observed,
    health: &Health,
) {
    let members = &observed.members;
    let at_rest = health.unwell.is_empty()
        && health.unlinked.is_none()
        && health.sentinel_view.is_none()
        && health.leaving.is_empty()
        && !health.rolling;
    let Some(client) = login.tls.as_ref().filter(|_| at_rest) else {
        return;
    };
    // Pods are read only for stale sentinels that could reload by themselves.
    let stale = tls::stale(
        client,
        members
            .sentinels
            .iter()
            .filter_map(|s| Some((s.name(), s.facts.address.as_deref()?))),
    );
    let mut sentinels: Vec<member_tls::SentinelPod<'_>> = Vec::new();
    for s in &members.sentinels {
        let version = s.answer.as_ref().and_then(|a| a.version.as_deref());
        let pod = s.facts.pod.as_deref();
        let worth_a_look = tls::can_reload(version) && stale.contains(&s.name());
        let reloads_itself = match pod.filter(|_| worth_a_look) {
            Some(pod) => {
                let annotation = member_tls::pod_annotation(
                    &apis.pods,
                    pod,
                    annotations::TLS_AUTO_RELOAD_SECONDS,
                )
                .await;
                tls::reloads_itself(version, annotation.as_deref())
            }
            None => false,
        };
        sentinels.push(member_tls::SentinelPod {
            state: tls::SentinelState {
                name: &s.facts.name,
                address: s.facts.address.as_deref(),
                monitoring: s.facts.ready && s.monitored().is_some(),
                failing_over: s.monitored().is_some_and(|m| m.failing_over()),
                reloads_itself,
            },
            pod,
            node: related(observed, Some(&s.facts.name)),
        });
    }
    let data: Vec<(&str, &str)> = members
        .data
        .iter()
        .filter_map(|d| Some((d.facts.name.as_str(), d.facts.address.as_deref()?)))
        .collect();
    let states: Vec<tls::SentinelState<'_>> = sentinels.iter().map(|s| s.state).collect();
    let now = Timestamp::now().as_second();
    let Some(name) = tls::sentinel_to_restart(client, &states, &data, at_rest, now) else {
        return;
    };
    let Some(sentinel) = sentinels.iter().find(|s| s.state.name == name) else {
        return;
    };
    let reason = ReplicationEvent::SentinelRestarted;
    member_tls::evict_sentinel(&ctx.runtime, vkr, sentinel, &apis.pods, reason).await;
}

/// The ValkeyNode `member`, as an Event's related object.
fn related(observed: &Observed, member: Option<&str>) -> Option<ObjectReference> {
    let member = member?;
    let node = observed.nodes.iter().find(|n| n.name_any() == member)?;
    Some(node.object_ref(&()))
}

/// When to look again: soon after a step, a little later while waiting or not ready, and at
/// the idle poll once Ready.
fn next_look(step: &Step, failed: bool, ready: bool, idle_look: Duration) -> Duration {
    match step {
        _ if failed => WHILE_WAITING,
        Step::Wait { .. } => WHILE_WAITING,
        Step::Idle if !ready => WHILE_WAITING,
        Step::Idle => idle_look,
        _ => AFTER_STEP,
    }
}
