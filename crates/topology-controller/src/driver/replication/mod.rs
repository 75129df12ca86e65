//! One reconcile of a ValkeyReplication, as stages:
//!
//! 1. fetch: the group and the ValkeyNodes labelled as its members;
//! 2. apply: the password Secrets and the members the spec asks for;
//! 3. observe: ask every data node and sentinel what it knows ([`connect`]);
//! 4. decide (pure, `replication::plan::decide`) and report (pure,
//!    `replication::status`), written before the step runs;
//! 5. execute the step (`replication::execute`);
//! 6. publish its Event, and one when the primary moved.
//!
//! Nothing is remembered between reconciles but what status says.

mod connect;
mod objects;
mod watch;

pub use watch::SwitchWatch;

use std::sync::Arc;
use std::time::Duration;

use crd_types::cluster::Phase;
use crd_types::conditions::ConditionSpec;
use crd_types::names::{annotations, labels};
use crd_types::rotation::CaReplacement;
use crd_types::rotation::PasswordRotation;
use crd_types::{ValkeyNode, ValkeyNodeStatus, ValkeyReplication, ValkeyReplicationStatus};
use k8s_openapi::api::core::v1::{ObjectReference, Pod, Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use operator_runtime::controller::ReconcileContext;
use operator_runtime::{ApiResultExt, Context, ObjectName, Op, apply};
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
use topology_controller::shared::auth::{self, AppliedOperator};
use topology_controller::shared::connections::Connections;
use topology_controller::shared::default_password::{self, Sentinel};
use topology_controller::shared::disruption;
use topology_controller::shared::member_status::{member_status_changed, versions_in_play};
use topology_controller::shared::network;
use topology_controller::shared::operator_password;
use topology_controller::shared::tls;
use topology_controller::shared::users::{self, Checks, Member};

use crate::driver::shared::error::Error;
use crate::driver::shared::objects::fetch_with_members;
use crate::driver::shared::password_look::PasswordLook;
use crate::driver::shared::pulse::Pulse;
use crate::driver::shared::secrets;
use crate::driver::shared::valkey::{Conn, DataLoginOf, Login, OperatorConn, SentinelLoginOf};
use crate::driver::shared::{acl_users, member_tls, operator_rotation, password_rotation};
use connect::Observed;

/// How soon to look again: after a step, and while waiting or not ready. When Ready, the
/// idle look of [`Shared`] is only a backstop.
const AFTER_STEP: Duration = Duration::from_secs(1);
const WHILE_WAITING: Duration = Duration::from_secs(2);

/// What every ValkeyReplication reconcile shares: what wakes it on changes inside Valkey,
/// which change no Kubernetes object (the watches bring those).
pub struct Shared {
    /// The sentinels' `+switch-master` announcements.
    pub switches: SwitchWatch,
    /// The data nodes' vitals, every second: a frozen primary, a replica losing its link.
    pub pulse: Pulse,
    /// Wakes the reconciles when a default password Secret changes.
    pub password_look: PasswordLook,
    /// Between two looks at a Ready group with nothing to do.
    pub idle_look: Duration,
    /// The namespace topology-controller runs in (its pods may reach the members).
    pub operator_namespace: String,
    /// `spec.users` rule checks made so far (see [`topology_controller::shared::users::Checks`]).
    pub user_checks: Checks,
}

/// The API handles of one namespace, and the field manager every write uses.
struct Apis {
    namespace: String,
    groups: Api<ValkeyReplication>,
    nodes: Api<ValkeyNode>,
    secrets: Api<Secret>,
    services: Api<Service>,
    pods: Api<Pod>,
    budgets: Api<PodDisruptionBudget>,
    policies: Api<NetworkPolicy>,
    field_manager: &'static str,
}

/// What the API server holds: the group, its members, and ValkeyNodes with a member's
/// label it does not own (never taken over).
struct Live {
    group: ValkeyReplication,
    owned: Vec<ValkeyNode>,
    foreign: Vec<ValkeyNode>,
}

/// What is known of the group's passwords.
struct Passwords {
    /// The operator password, or why it cannot be read, its Secret's
    /// `<name>/<resourceVersion>`, and the one members were last brought to.
    operator: Result<String, String>,
    operator_version: Option<String>,
    operator_applied: Option<AppliedOperator>,
    /// The data nodes' default user's password, or why it cannot be read, and its Secret's
    /// `<name>/<resourceVersion>`.
    default: Result<String, String>,
    default_version: Option<String>,
    /// The sentinels' default user's password, or why it cannot be read, and its Secret's.
    sentinel: Result<String, String>,
    sentinel_version: Option<String>,
    /// Why a password the members need to start cannot be read (the data nodes' default
    /// user's, or the sentinels'), if one cannot.
    start_problem: Option<String>,
    /// Why the TLS Secret cannot be used, if it cannot.
    tls_problem: Option<String>,
}

pub async fn reconcile(
    cached: Arc<ValkeyReplication>,
    ctx: Arc<ReconcileContext<Shared>>,
) -> Result<Action, Error> {
    let apis = apis(&ctx.runtime, &cached)?;
    let name = cached.name_any();
    let Some(live) = fetch(&apis, &name).await? else {
        ctx.data.switches.forget(&apis.namespace, &name);
        ctx.data.pulse.forget(&apis.namespace, &name);
        ctx.data.password_look.forget(&apis.namespace, &name);
        return Ok(Action::await_change());
    };
    // Passwords before members, so a member's pod finds its Secrets when it starts.
    let mut passwords = passwords(&apis, &live).await?;
    let (default_secret, operator_secret) =
        auth::topology_secrets(&name, live.group.spec.auth.as_ref());
    ctx.data.password_look.follow(
        &apis.secrets,
        &apis.namespace,
        &name,
        vec![
            (default_secret.reference, passwords.default.as_deref().ok()),
            (
                operator_secret.reference,
                passwords.operator.as_deref().ok(),
            ),
            (
                auth::sentinel_secret(&live.group).reference,
                passwords.sentinel.as_deref().ok(),
            ),
        ],
    );
    let reading = member_tls::Reading {
        topology: &live.group,
        spec: live.group.spec.tls.as_ref(),
        label_key: labels::REPLICATION,
        members: &live.owned,
        bus: false,
    };
    let reasons = (
        ReplicationEvent::CertificateIssued,
        ReplicationEvent::CertificateRefused,
    );
    let tls = member_tls::read(
        &ctx.runtime,
        &apis.secrets,
        apis.field_manager,
        reading,
        reasons,
    )
    .await?;
    passwords.tls_problem = tls.as_ref().and_then(|t| t.as_ref().err().cloned());
    let nodes = match member_tls::holds_new_members(
        live.group.spec.tls.as_ref(),
        tls.as_ref(),
        &live.owned,
    ) {
        true => Vec::new(),
        false => apply_members(&apis, &live).await?,
    };
    objects::apply_services(
        &apis.services,
        &live.group,
        &apis.namespace,
        apis.field_manager,
    )
    .await?;
    crate::driver::shared::objects::apply_owned(
        &apis.budgets,
        &apis.namespace,
        &disruption::budgets_selector(labels::REPLICATION, &name),
        &disruption::replication_budgets(&live.group),
        apis.field_manager,
    )
    .await?;
    let policy = crate::driver::shared::objects::apply_owned(
        &apis.policies,
        &apis.namespace,
        &network::policies_selector(labels::REPLICATION, &name),
        &network::replication_policy(&live.group, &ctx.data.operator_namespace),
        apis.field_manager,
    )
    .await;
    let policy_refused = policy.is_err();
    if let Err(e) = policy {
        // Reported, not fatal: the role labels must follow a failover whatever happens here.
        let note = operator_runtime::error_chain(&e);
        tracing::warn!(group = %name, error = %note, "network policy not applied");
        let reason = ReplicationEvent::NetworkPolicyRefused;
        ctx.runtime
            .events
            .publish(&live.group, reason, note, None)
            .await;
    }
    let login = member_tls::login(
        &passwords.operator,
        passwords.operator_applied.as_ref(),
        tls,
    );
    let (observed, connections) = connect::observe(&name, nodes, login.as_ref()).await;
    if let Some(login) = &login {
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
        ctx.data.pulse.follow(&apis.namespace, &name, data, login);
    }
    let users = users(&ctx, &apis, &live.group, &observed, &connections).await;
    let rotations = passwords_pass(
        &ctx,
        &apis,
        &live.group,
        &passwords,
        &observed,
        &connections,
    )
    .await;
    let mut ca_replacement = None;
    if let Some(login) = &login {
        // Data nodes only: Sentinel has no CONFIG SET, and 8.x reads TLS files only at start.
        let members: Vec<member_tls::Member<'_>> = observed
            .members
            .data
            .iter()
            .filter_map(|d| {
                Some(member_tls::Member {
                    name: &d.facts.name,
                    ip: d.facts.address.as_deref()?,
                    port: PORT,
                })
            })
            .collect();
        let reasons = (
            ReplicationEvent::CertificateReloaded,
            ReplicationEvent::CertificateRefused,
        );
        member_tls::reload(
            &ctx.runtime,
            &live.group,
            login,
            &members,
            &connections,
            reasons,
        )
        .await;
        let sentinels: Vec<member_tls::Member<'_>> = observed
            .members
            .sentinels
            .iter()
            .filter_map(|s| {
                Some(member_tls::Member {
                    name: &s.facts.name,
                    ip: s.facts.address.as_deref()?,
                    port: SENTINEL_PORT,
                })
            })
            .collect();
        let everyone: Vec<member_tls::Member<'_>> = members.into_iter().chain(sentinels).collect();
        let refused = ReplicationEvent::CertificateRefused;
        member_tls::report_untrusted(&ctx.runtime, &live.group, login, &everyone, refused).await;
        ca_replacement = member_tls::advance_ca(
            &ctx.runtime,
            &apis.secrets,
            apis.field_manager,
            &live.group,
            login,
            &member_tls::dialled(&live.owned, &everyone),
            (ReplicationEvent::CertificateIssued, refused),
        )
        .await;
    }
    let outcome = act(
        &ctx,
        &apis,
        &live,
        &passwords,
        login.as_ref(),
        &observed,
        &connections,
        users.as_ref(),
        &rotations,
        ca_replacement,
    )
    .await;
    connections.close().await;
    let looks_at_secrets = live.group.spec.users.is_some() || live.group.spec.tls.is_some();
    let rotation_look = password_rotation::next_look(&rotations).unwrap_or(Duration::MAX);
    outcome.map(|look| {
        let look = network::idle_look(look, policy_refused).min(rotation_look);
        Action::requeue(topology_controller::shared::users::idle_look(
            look,
            looks_at_secrets,
        ))
    })
}

fn apis(ctx: &Context, group: &ValkeyReplication) -> Result<Apis, Error> {
    let namespace = group.namespace().ok_or_else(|| Error::Invalid {
        kind: "ValkeyReplication",
        name: group.name_any(),
        field: "metadata.namespace",
    })?;
    let client = ctx.client.clone();
    Ok(Apis {
        groups: Api::namespaced(client.clone(), &namespace),
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

/// The group as it is now (the cache may lag behind the status written a moment ago) and
/// its members; `None` when it is gone or going.
async fn fetch(apis: &Apis, name: &str) -> Result<Option<Live>, Error> {
    let fetched = fetch_with_members(
        &apis.groups,
        &apis.nodes,
        &apis.namespace,
        name,
        labels::REPLICATION,
    )
    .await?;
    Ok(fetched.map(|(group, owned, foreign)| Live {
        group,
        owned,
        foreign,
    }))
}

/// Creates the missing generated Secrets and reads the passwords.
async fn passwords(apis: &Apis, live: &Live) -> Result<Passwords, Error> {
    let group = &live.group;
    let exist = !live.owned.is_empty();
    let (default, operator) = auth::topology_secrets(&group.name_any(), group.spec.auth.as_ref());
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
        operator,
        operator_version,
        operator_applied,
        default,
        default_version,
        sentinel,
        sentinel_version,
        start_problem: (!problems.is_empty()).then(|| problems.join("; ")),
        tls_problem: None,
    })
}

/// Creates the members the spec asks for and updates the changed ones; the members as they
/// are afterwards (leaving ones included: the planner removes them).
async fn apply_members(apis: &Apis, live: &Live) -> Result<Vec<ValkeyNode>, Error> {
    let group = Group::of(&live.group);
    let context = members::context(&live.group, &live.owned);
    let mut owned = live.owned.clone();
    for at in group.positions() {
        let member_name = group.member_name(at);
        if live.foreign.iter().any(|n| n.name_any() == member_name) {
            continue; // reported by the planner, never taken over
        }
        let existing = owned.iter().position(|n| n.name_any() == member_name);
        let allowed = existing.and_then(|i| owned[i].spec.allowed_revision.clone());
        let built = members::member(&live.group, at, allowed, &context);
        if existing
            .is_some_and(|i| !topology_controller::shared::members::needs_apply(&built, &owned[i]))
        {
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

/// With `spec.users`, the `UsersReady` condition after a pass over the users (data nodes
/// only: sentinels have none of them).
async fn users(
    ctx: &ReconcileContext<Shared>,
    apis: &Apis,
    group: &ValkeyReplication,
    observed: &Observed,
    connections: &Connections<Conn>,
) -> Option<ConditionSpec> {
    let users = group.spec.users.as_deref()?;
    let data = &observed.members.data;
    let builds: Vec<Option<String>> = data
        .iter()
        .map(|d| {
            let version = d.answer.as_ref()?.version.as_deref()?;
            let node = observed.nodes.iter().find(|n| n.name_any() == d.name())?;
            Some(users::build(version, node))
        })
        .collect();
    let members: Vec<Member<'_, Conn>> = data
        .iter()
        .zip(&builds)
        .map(|(d, build)| Member {
            name: d.name(),
            version: build.as_deref(),
            conn: connections.find(d.name()),
        })
        .collect();
    let current = group.status.as_ref().map(|s| s.conditions.as_slice());
    let pass = acl_users::Pass {
        secrets: &apis.secrets,
        label_key: labels::REPLICATION,
        checks: &ctx.data.user_checks,
        current: current.unwrap_or_default(),
        field_manager: apis.field_manager,
    };
    let reasons = (
        ReplicationEvent::UsersApplied,
        ReplicationEvent::UsersRefused,
    );
    Some(
        pass.run(&ctx.runtime, group, users, &members, reasons)
            .await,
    )
}

/// The rotations under way after a pass over the data nodes (the default password), one
/// over the sentinels (their own password) and one over both (the operator password).
async fn passwords_pass(
    ctx: &ReconcileContext<Shared>,
    apis: &Apis,
    group: &ValkeyReplication,
    passwords: &Passwords,
    observed: &Observed,
    connections: &Connections<Conn>,
) -> Vec<PasswordRotation> {
    let data: Vec<default_password::Member<'_, Conn>> = observed
        .members
        .data
        .iter()
        .map(|d| default_password::Member {
            name: d.name(),
            conn: connections.find(d.name()),
        })
        .collect();
    let sentinel_conns: Vec<(&str, Option<Sentinel<'_, Conn>>)> = observed
        .members
        .sentinels
        .iter()
        .map(|s| (s.name(), connections.find(s.name()).map(Sentinel)))
        .collect();
    let sentinels: Vec<default_password::Member<'_, Sentinel<'_, Conn>>> = sentinel_conns
        .iter()
        .map(|(name, conn)| default_password::Member {
            name,
            conn: conn.as_ref(),
        })
        .collect();
    let recorded = group
        .status
        .as_ref()
        .map(|s| s.password_rotations.as_slice())
        .unwrap_or_default();
    let reasons = || password_rotation::Reasons {
        added: ReplicationEvent::DefaultPasswordAdded,
        dropped: ReplicationEvent::PreviousPasswordDropped,
        refused: ReplicationEvent::DefaultPasswordRefused,
    };
    let auth = group.spec.auth.as_ref();
    let (default_secret, operator_secret) = auth::topology_secrets(&group.name_any(), auth);
    let default_ref = default_secret.reference;
    let sentinel_ref = auth::sentinel_secret(group).reference;
    let group_name = group.name_any();
    let operator_conns: Vec<(&str, operator_password::Kind, Option<OperatorConn<'_>>)> = observed
        .members
        .data
        .iter()
        .map(|d| {
            let conn = connections
                .find(d.name())
                .map(|c| OperatorConn::Data(DataLoginOf(c)));
            (d.name(), operator_password::Kind::DataNode, conn)
        })
        .chain(observed.members.sentinels.iter().map(|s| {
            let conn = connections.find(s.name()).map(|conn| {
                OperatorConn::Sentinel(SentinelLoginOf {
                    conn,
                    group: &group_name,
                })
            });
            (s.name(), operator_password::Kind::Sentinel, conn)
        }))
        .collect();
    let operator_members: Vec<operator_password::Member<'_, OperatorConn<'_>>> = operator_conns
        .iter()
        .map(|(name, kind, conn)| operator_password::Member {
            name,
            kind: *kind,
            conn: conn.as_ref(),
        })
        .collect();
    // At once: each pass is bounded, and all run before the step.
    let (mut rotations, on_sentinels, operator) = futures::join!(
        password_rotation::run(
            &ctx.runtime,
            group,
            auth,
            password_rotation::DATA_NODES,
            password_rotation::Password {
                version: passwords.default_version.as_deref(),
                reference: &default_ref,
                value: &passwords.default,
            },
            recorded,
            &data,
            reasons(),
        ),
        password_rotation::run(
            &ctx.runtime,
            group,
            auth,
            password_rotation::SENTINELS,
            password_rotation::Password {
                version: passwords.sentinel_version.as_deref(),
                reference: &sentinel_ref,
                value: &passwords.sentinel,
            },
            recorded,
            &sentinels,
            reasons(),
        ),
        operator_rotation::run(
            &ctx.runtime,
            operator_rotation::Apis {
                secrets: &apis.secrets,
                pods: &apis.pods,
                label_key: labels::REPLICATION,
                field_manager: apis.field_manager,
            },
            group,
            auth,
            password_rotation::Password {
                version: passwords.operator_version.as_deref(),
                reference: &operator_secret.reference,
                value: &passwords.operator,
            },
            passwords.operator_applied.as_ref(),
            recorded,
            &operator_members,
            &observed.nodes,
            operator_rotation::Reasons {
                added: ReplicationEvent::OperatorPasswordAdded,
                switched: ReplicationEvent::OperatorLoginsSwitched,
                dropped: ReplicationEvent::PreviousPasswordDropped,
                refused: ReplicationEvent::OperatorPasswordRefused,
            },
        )
    );
    rotations.extend(on_sentinels);
    rotations.extend(operator);
    rotations
}

/// Decides, reports, executes and publishes; returns when to look next.
#[allow(clippy::too_many_arguments)]
async fn act(
    ctx: &ReconcileContext<Shared>,
    apis: &Apis,
    live: &Live,
    passwords: &Passwords,
    login: Option<&Login>,
    observed: &Observed,
    connections: &Connections<Conn>,
    users: Option<&ConditionSpec>,
    rotations: &[PasswordRotation],
    ca_replacement: Option<CaReplacement>,
) -> Result<Duration, Error> {
    let vkr = &live.group;
    let group = Group {
        replication_password: passwords.operator.as_deref().ok().map(|p| {
            let previous = passwords.operator_applied.as_ref().map(|a| a.fallbacks(p));
            ReplicationPassword::rotating_from(p, &previous.unwrap_or_default())
        }),
        ..Group::of(vkr)
    };
    let members = &observed.members;
    let recorded = vkr
        .status
        .as_ref()
        .and_then(|s| s.current_primary.as_deref());
    let recorded_switchover = vkr
        .status
        .as_ref()
        .and_then(|s| s.switchover.as_ref())
        .filter(|s| s.outcome.is_finished())
        .map(|s| s.id.as_str());
    let refused: Vec<&str> = observed.login_refused.iter().map(String::as_str).collect();
    let foreign = live.foreign.first().map(ResourceExt::name_any);
    let step = plan::decide(
        &group,
        members,
        &Circumstances {
            recorded_primary: recorded,
            recorded_switchover,
            foreign_member: foreign.as_deref(),
            operator_password_problem: passwords.operator.as_ref().err().map(String::as_str),
            tls_problem: passwords.tls_problem.as_deref(),
            default_password_problem: passwords.start_problem.as_deref(),
            login_refused: &refused,
        },
    );
    let health = Health::of(&group, members, recorded);
    let report = |step_error: Option<&str>| {
        let now = Timestamp::now();
        let mut status = ValkeyReplicationStatus {
            storage: topology_controller::shared::storage::headroom(&live.owned),
            versions: versions_in_play(
                members
                    .data
                    .iter()
                    .filter_map(|d| d.answer.as_ref().map(|a| a.version.as_deref()))
                    .chain(
                        members
                            .sentinels
                            .iter()
                            .filter_map(|s| s.answer.as_ref().map(|a| a.version.as_deref())),
                    ),
            ),
            ..status::replication_status(Inputs {
                group: &group,
                members,
                health: &health,
                step: &step,
                step_error,
                current: vkr.status.as_ref(),
                generation: vkr.metadata.generation,
                now,
            })
        };
        let current = vkr.status.as_ref().map(|s| s.conditions.as_slice());
        let generation = vkr.metadata.generation;
        acl_users::report(&mut status.conditions, current, users, generation, now);
        status.password_rotations = rotations.to_vec();
        status.ca_replacement = ca_replacement.clone();
        status
    };

    // The read-write and read-only Services follow the roles before anything else.
    let primary = survey::primary(&group, members, recorded)
        .ok()
        .filter(|_| health.primary.is_ok());
    // Without a login nothing was asked: every role would look unknown, and the Services
    // would lose every endpoint. The labels stay as the last look left them.
    if login.is_some() {
        objects::label_pods(
            &apis.pods,
            vkr,
            members,
            primary,
            &apis.namespace,
            apis.field_manager,
        )
        .await?;
    }
    // Status first, so it says what is about to happen.
    write_member_statuses(apis, observed).await?;
    let planned = report(None);
    write_status(apis, vkr, &planned).await?;
    if let Some((reason, note, member)) =
        primary_changed(recorded, planned.current_primary.as_deref())
    {
        let related = related(observed, member.as_deref());
        ctx.runtime.events.publish(vkr, reason, note, related).await;
    }

    let context = members::context(vkr, &observed.nodes);
    let objects = objects::GroupMembers {
        group: vkr,
        context: &context,
        api: &apis.nodes,
        namespace: &apis.namespace,
        field_manager: apis.field_manager,
    };
    let done = match login {
        Some(login) => {
            let data_login = DataLogin {
                user: &login.user,
                password: &login.password,
            };
            execute(&step, &group, members, connections, &objects, &data_login).await
        }
        // Without the operator's password the guard only ever lets waits through.
        None => Ok(()),
    };
    let step_error = done.as_ref().err().map(ToString::to_string);
    if let Err(e) = &done {
        tracing::warn!(replication = %vkr.name_any(), step = %step, error = %e, "step failed");
        write_status(apis, vkr, &report(step_error.as_deref())).await?;
    }
    if let Some((reason, note, member)) = step_event(&step, step_error.as_deref()) {
        let related = related(observed, member.as_deref());
        ctx.runtime.events.publish(vkr, reason, note, related).await;
    }
    let ready = planned.phase == Some(Phase::Ready);
    if let (Some(login), Step::Idle, true) = (login, &step, ready) {
        restart_stale_sentinel(ctx, apis, vkr, login, observed, &health).await;
    }
    Ok(next_look(
        &step,
        step_error.is_some(),
        ready,
        ctx.data.idle_look,
    ))
}

/// With TLS, restarts a sentinel still serving an older certificate, when the group is at
/// rest at this reconcile (see [`tls::sentinel_to_restart`]).
async fn restart_stale_sentinel(
    ctx: &ReconcileContext<Shared>,
    apis: &Apis,
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

/// Each member's `status.valkey`, where it changed beyond the replication offset.
async fn write_member_statuses(apis: &Apis, observed: &Observed) -> Result<(), Error> {
    let members = &observed.members;
    let statuses = members
        .data
        .iter()
        .map(|d| (d.name(), valkey_status(d, members)))
        .chain(
            members
                .sentinels
                .iter()
                .map(|s| (s.name(), sentinel_valkey_status(s))),
        );
    for (name, valkey) in statuses {
        let Some(valkey) = valkey else { continue };
        let node = observed.nodes.iter().find(|n| n.name_any() == name);
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

/// The group's status, when it differs from what is written.
async fn write_status(
    apis: &Apis,
    group: &ValkeyReplication,
    status: &ValkeyReplicationStatus,
) -> Result<(), Error> {
    if !status::status_changed(group.status.as_ref(), status) {
        return Ok(());
    }
    let name = group.name_any();
    apply::apply_status(&apis.groups, &name, status, apis.field_manager)
        .await
        .on(
            Op::ApplyStatus,
            ObjectName::new::<ValkeyReplication>(&apis.namespace, &name),
        )?;
    Ok(())
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
