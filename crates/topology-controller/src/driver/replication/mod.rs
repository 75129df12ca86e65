//! A ValkeyReplication's own stages of the reconcile every kind runs
//! ([`crate::driver::shared::pipeline`]): `prepare` (its Secrets, the sentinels' too, TLS,
//! members, client Services, budgets, NetworkPolicy), `observe` (every data node and
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

use crd_types::ValkeyReplication;
use crd_types::ValkeyReplicationStatus;
use crd_types::cluster::Phase;
use crd_types::names::{annotations, labels};
use crd_types::rotation::PasswordRotation;
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
use topology_controller::shared::acl::ReplicationPassword;
use topology_controller::shared::auth;
use topology_controller::shared::default_password::{self, Sentinel};
use topology_controller::shared::disruption;
use topology_controller::shared::guard::Holds;
use topology_controller::shared::network;
use topology_controller::shared::tls;

use crate::driver::shared::credentials::{self, DataNode, Members, Reached};
use crate::driver::shared::error::Error;
use crate::driver::shared::member_nodes::MemberNodes;
use crate::driver::shared::pipeline::{self, Kind};
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
    sentinel: Result<String, String>,
    sentinel_version: Option<String>,
    /// Why a password the members need to start cannot be read (the data nodes' default
    /// user's, or the sentinels'), if one cannot.
    start_problem: Option<String>,
}

impl AsRef<secrets::Passwords> for Passwords {
    fn as_ref(&self) -> &secrets::Passwords {
        &self.data
    }
}

type Prepared = stages::Prepared<ValkeyReplication, Passwords>;
type Seen = stages::Seen<ValkeyReplication, Passwords, Observed>;

/// Stage 5's output: the step, the group as the planner read it, and the status that says it.
pub struct Decided {
    step: Step,
    group: Group,
    health: Health,
    planned: ValkeyReplicationStatus,
    /// When to look again while idle and Ready.
    idle: Duration,
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

    /// Passwords before members, so a member's pod finds its Secrets when it starts; members
    /// only once their certificates can be issued; then the Services, budgets and policy.
    async fn prepare(ctx: &Ctx, apis: &Apis<Self>, live: Live<Self>) -> Result<Prepared, Error> {
        let vkr = &live.topology;
        let name = vkr.name_any();
        let mut passwords = passwords(apis, &live).await?;
        let (default_secret, operator_secret) =
            auth::topology_secrets(&name, vkr.spec.common.auth.as_ref());
        let followed = vec![
            (
                default_secret.reference,
                passwords.data.default.as_deref().ok(),
            ),
            (
                operator_secret.reference,
                passwords.data.operator.as_deref().ok(),
            ),
            (
                auth::sentinel_secret(vkr).reference,
                passwords.sentinel.as_deref().ok(),
            ),
        ];
        ctx.data
            .common
            .password_look
            .follow(&apis.secrets, &apis.namespace, &name, followed);
        let tls = stages::read_tls(&ctx.runtime, apis, &live).await?;
        passwords.data.tls_problem = tls.as_ref().and_then(|t| t.as_ref().err().cloned());
        let group = Group::of(vkr);
        let context = members::context(vkr, &live.owned);
        let wanted = group
            .positions()
            .into_iter()
            .map(|at| (group.member_name(at), at));
        let build = |at, allowed| members::member(vkr, at, allowed, &context);
        let nodes = stages::apply_members(apis, &live, tls.as_ref(), wanted, build).await?;
        objects::apply_services(&apis.services, vkr, &apis.namespace, apis.field_manager).await?;
        stages::apply_budgets(apis, vkr, &disruption::replication_budgets(vkr)).await?;
        let policy = network::replication_policy(vkr, &ctx.data.common.operator_namespace);
        let policy_refused = stages::apply_policy(&ctx.runtime, apis, vkr, policy).await;
        let login = member_tls::login(
            &passwords.data.operator,
            passwords.data.operator_applied.as_ref(),
            tls,
        );
        Ok(Prepared {
            live,
            passwords,
            login,
            nodes,
            policy_refused,
        })
    }

    /// Asks every data node and sentinel; the sentinels' announcements and the pulse follow them.
    async fn observe(ctx: &Ctx, apis: &Apis<Self>, prepared: Prepared) -> Seen {
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
            let data = observed
                .members
                .data
                .iter()
                .filter_map(|d| d.facts.address.clone().map(|ip| (ip, PORT)))
                .collect();
            ctx.data
                .common
                .pulse
                .follow(&apis.namespace, &name, data, login);
        }
        Seen {
            prepared,
            observed,
            connections,
        }
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
    fn decide(ctx: &Ctx, _: &Apis<Self>, seen: &Seen, credentials: &Credentials) -> Decided {
        let shared = &ctx.data;
        let Prepared {
            live, passwords, ..
        } = &seen.prepared;
        let vkr = &live.topology;
        let group = Group {
            replication_password: passwords.data.operator.as_deref().ok().map(|p| {
                let previous = passwords
                    .data
                    .operator_applied
                    .as_ref()
                    .map(|a| a.fallbacks(p));
                ReplicationPassword::rotating_from(p, &previous.unwrap_or_default())
            }),
            ..Group::of(vkr)
        };
        let members = &seen.observed.members;
        let recorded = recorded_primary(vkr);
        let recorded_switchover = vkr
            .status
            .as_ref()
            .and_then(|s| s.switchover.as_ref())
            .filter(|s| s.outcome.is_finished())
            .map(|s| s.id.as_str());
        let refused: Vec<&str> = seen
            .observed
            .login_refused
            .iter()
            .map(String::as_str)
            .collect();
        let foreign = live.foreign_member();
        let step = plan::decide(
            &group,
            members,
            &Circumstances {
                recorded_primary: recorded,
                recorded_switchover,
                holds: Holds {
                    foreign_member: foreign.as_deref(),
                    operator_password_problem: passwords
                        .data
                        .operator
                        .as_ref()
                        .err()
                        .map(String::as_str),
                    tls_problem: passwords.data.tls_problem.as_deref(),
                    default_password_problem: passwords.start_problem.as_deref(),
                    login_refused: &refused,
                },
            },
        );
        let health = Health::of(&group, members, recorded);
        let planned = report(seen, credentials, &group, &health, &step, None);
        let idle = stages::idle_look(
            shared.common.idle_look,
            vkr,
            seen.prepared.policy_refused,
            &credentials.rotations,
        );
        Decided {
            step,
            group,
            health,
            planned,
            idle,
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
    ) -> Result<Action, Error> {
        let (vkr, observed) = (&seen.prepared.live.topology, &seen.observed);
        let login = seen.prepared.login.as_ref();
        let members = &observed.members;
        let Decided {
            step,
            group,
            health,
            planned,
            idle,
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
    let problems: Vec<String> = [default.clone().err(), sentinel.clone().err()]
        .into_iter()
        .flatten()
        .collect();
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
        start_problem: (!problems.is_empty()).then(|| problems.join("; ")),
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
    stages::finish_status(&mut status, live, versions, credentials, now);
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
