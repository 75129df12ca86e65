//! One reconcile of a ValkeyCluster, as stages:
//!
//! 1. fetch: the cluster and the ValkeyNodes labelled as its members;
//! 2. apply: the password Secrets ([`crate::driver::shared::secrets`]) and the members the spec asks for;
//! 3. observe: ask every member's Valkey what it sees ([`crate::driver::cluster::connect`]);
//! 4. decide (pure, `plan::decide`) and report (pure, `status`): the one next step, and the
//!    status that says so, written before the step runs (a migration can take a while);
//! 5. execute the step (`execute`, over the connections and [`crate::driver::shared::objects`]);
//! 6. publish its Event.
//!
//! The connections opened in 3 are closed in one place, whatever happens after. The next
//! reconcile starts from what Valkey and the API server say; the one thing kept in memory is
//! how often each step was taken on an unchanged cluster (the planner's progress check,
//! [`topology_controller::cluster::plan::progress`]), which a restart forgets harmlessly.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crd_types::cluster::{Phase, ValkeyClusterStatus};
use crd_types::conditions::reasons::Waiting;
use crd_types::conditions::{self, ConditionSpec};
use crd_types::names::{self, labels};
use crd_types::rotation::CaReplacement;
use crd_types::rotation::PasswordRotation;
use crd_types::{ValkeyCluster, ValkeyNode, ValkeyNodeStatus};
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use operator_runtime::controller::ReconcileContext;
use operator_runtime::{ApiResultExt, Context, ObjectName, Op, apply};
use topology_controller::cluster::events::{ClusterEvent, step_event};
use topology_controller::cluster::execute::{Done, execute};
use topology_controller::cluster::member_status::member_status;
use topology_controller::cluster::members;
use topology_controller::cluster::model::Shape;
use topology_controller::cluster::plan::progress::{Attempts, Seen};
use topology_controller::cluster::plan::{self, Circumstances, Step};
use topology_controller::cluster::status::{self, Inputs};
use topology_controller::cluster::survey::{self, switchover_outcome};
use topology_controller::shared::acl::ReplicationPassword;
use topology_controller::shared::auth;
use topology_controller::shared::connections::Connections;
use topology_controller::shared::default_password;
use topology_controller::shared::disruption;
use topology_controller::shared::member_status::{member_status_changed, versions_in_play};
use topology_controller::shared::network;
use topology_controller::shared::operator_password;
use topology_controller::shared::users::{self, Checks, Member};

use crate::driver::cluster::connect::{self, Observed};
use crate::driver::cluster::members::ClusterMembers;
use crate::driver::shared::error::Error;
use crate::driver::shared::objects::{self, fetch_with_members};
use crate::driver::shared::password_look::PasswordLook;
use crate::driver::shared::pulse::Pulse;
use crate::driver::shared::secrets::{self, Passwords};
use crate::driver::shared::valkey::{Conn, DataLoginOf, OperatorConn};
use crate::driver::shared::{acl_users, member_tls, operator_rotation, password_rotation};

/// How soon to look again after a step was carried out, and while waiting (2 s: formation
/// waits on replication and gossip, and each wait shows in time to Ready).
const AFTER_STEP: Duration = Duration::from_secs(1);
const WHILE_WAITING: Duration = Duration::from_secs(2);
/// While only gossip is awaited (members that do not know each other yet, views or shard
/// ids that differ): it settles within a few seconds and changes none of the vitals the
/// pulse wakes on, so the look is what notices it.
const WHILE_GOSSIP_SETTLES: Duration = Duration::from_millis(500);

/// What every ValkeyCluster reconcile shares.
pub struct Shared {
    /// Wakes the reconciles on changes inside Valkey (a failover changes no Kubernetes
    /// object); the watches bring Kubernetes changes.
    pub pulse: Pulse,
    /// Wakes the reconciles when a default password Secret changes.
    pub password_look: PasswordLook,
    /// Between two looks at a Ready cluster with nothing to do: only a backstop.
    pub idle_look: Duration,
    /// Whether a primary whose server Kubernetes shows not running is replaced at once
    /// (`CLUSTER FAILOVER FORCE`, [`crate::plan`]'s gone rule) rather than by Valkey's own
    /// election after cluster-node-timeout.
    pub forced_failover: bool,
    /// The namespace topology-controller runs in (its pods may reach the members).
    pub operator_namespace: String,
    /// `spec.users` rule checks made so far (see [`topology_controller::shared::users::Checks`]).
    pub user_checks: Checks,
    /// The steps taken lately per cluster, for the planner's progress check
    /// ([`topology_controller::cluster::plan::progress`]).
    pub attempts: Mutex<HashMap<(String, String), Attempts>>,
}

/// The API handles of one namespace, and the field manager every write uses.
struct Apis {
    namespace: String,
    clusters: Api<ValkeyCluster>,
    nodes: Api<ValkeyNode>,
    secrets: Api<Secret>,
    budgets: Api<PodDisruptionBudget>,
    policies: Api<NetworkPolicy>,
    pods: Api<Pod>,
    field_manager: &'static str,
}

/// What the API server holds: the cluster, its members, and ValkeyNodes with a member's
/// label it does not own (never taken over).
struct Live {
    cluster: ValkeyCluster,
    owned: Vec<ValkeyNode>,
    foreign: Vec<ValkeyNode>,
}

pub async fn reconcile(
    cached: Arc<ValkeyCluster>,
    ctx: Arc<ReconcileContext<Shared>>,
) -> Result<Action, Error> {
    let apis = apis(&ctx.runtime, &cached)?;
    let name = cached.name_any();
    let Some(live) = fetch(&apis, &name).await? else {
        ctx.data.pulse.forget(&apis.namespace, &name);
        ctx.data.password_look.forget(&apis.namespace, &name);
        let key = (apis.namespace.clone(), name.clone());
        ctx.data.attempts.lock().unwrap().remove(&key);
        return Ok(Action::await_change());
    };
    // Passwords before members, so a member's pod finds its Secrets when it starts.
    let mut passwords = secrets::prepare(
        &apis.secrets,
        &live.cluster,
        !live.owned.is_empty(),
        apis.field_manager,
    )
    .await?;
    ctx.data
        .password_look
        .follow(&apis.secrets, &apis.namespace, &name, {
            let (default_secret, operator_secret) = auth::cluster_secrets(&live.cluster);
            vec![
                (default_secret.reference, passwords.default.as_deref().ok()),
                (
                    operator_secret.reference,
                    passwords.operator.as_deref().ok(),
                ),
            ]
        });
    let reading = member_tls::Reading {
        topology: &live.cluster,
        spec: live.cluster.spec.tls.as_ref(),
        label_key: labels::CLUSTER,
        members: &live.owned,
        bus: true,
    };
    let reasons = (
        ClusterEvent::CertificateIssued,
        ClusterEvent::CertificateRefused,
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
        live.cluster.spec.tls.as_ref(),
        tls.as_ref(),
        &live.owned,
    ) {
        true => Vec::new(),
        false => apply_members(&apis, &live).await?,
    };
    apply_budgets(&apis, &live.cluster, &nodes).await?;
    let policy = objects::apply_owned(
        &apis.policies,
        &apis.namespace,
        &network::policies_selector(labels::CLUSTER, &name),
        &network::cluster_policy(&live.cluster, &ctx.data.operator_namespace),
        apis.field_manager,
    )
    .await;
    let policy_refused = policy.is_err();
    if let Err(e) = policy {
        // Reported, not fatal: failovers and rolls must not wait on a policy.
        let note = operator_runtime::error_chain(&e);
        tracing::warn!(cluster = %name, error = %note, "network policy not applied");
        let reason = ClusterEvent::NetworkPolicyRefused;
        ctx.runtime
            .events
            .publish(&live.cluster, reason, note, None)
            .await;
    }
    let login = member_tls::login(
        &passwords.operator,
        passwords.operator_applied.as_ref(),
        tls,
    );
    let (mut observed, connections) = connect::observe(nodes, login.as_ref()).await;
    if let Some(login) = &login {
        let addresses = observed
            .members
            .iter()
            .filter_map(|m| m.address.as_ref().map(|a| (a.ip.clone(), a.port)))
            .collect();
        ctx.data
            .pulse
            .follow(&apis.namespace, &name, addresses, login);
    }
    if ctx.data.forced_failover {
        mark_gone_servers(&apis, &mut observed).await;
    }
    let users = users(&ctx, &apis, &live.cluster, &observed, &connections).await;
    let rotations = passwords_pass(
        &ctx,
        &apis,
        &live.cluster,
        &passwords,
        &observed,
        &connections,
    )
    .await;
    let mut ca_replacement = None;
    if let Some(login) = &login {
        let members: Vec<member_tls::Member<'_>> = observed
            .members
            .iter()
            .filter_map(|m| {
                let address = m.address.as_ref()?;
                Some(member_tls::Member {
                    name: &m.name,
                    ip: &address.ip,
                    port: address.port,
                })
            })
            .collect();
        let reasons = (
            ClusterEvent::CertificateReloaded,
            ClusterEvent::CertificateRefused,
        );
        member_tls::reload(
            &ctx.runtime,
            &live.cluster,
            login,
            &members,
            &connections,
            reasons,
        )
        .await;
        let refused = ClusterEvent::CertificateRefused;
        member_tls::report_untrusted(&ctx.runtime, &live.cluster, login, &members, refused).await;
        ca_replacement = member_tls::advance_ca(
            &ctx.runtime,
            &apis.secrets,
            apis.field_manager,
            &live.cluster,
            login,
            &member_tls::dialled(&live.owned, &members),
            (ClusterEvent::CertificateIssued, refused),
        )
        .await;
    }
    let outcome = act(
        &ctx.runtime,
        &ctx.data.attempts,
        topology_controller::shared::users::idle_look(
            network::idle_look(ctx.data.idle_look, policy_refused),
            live.cluster.spec.users.is_some() || live.cluster.spec.tls.is_some(),
        )
        .min(password_rotation::next_look(&rotations).unwrap_or(Duration::MAX)),
        &apis,
        &live,
        &passwords,
        &observed,
        &connections,
        users.as_ref(),
        &rotations,
        ca_replacement,
    )
    .await;
    connections.close().await;
    outcome
}

fn apis(ctx: &Context, cluster: &ValkeyCluster) -> Result<Apis, Error> {
    let namespace = cluster.namespace().ok_or_else(|| Error::Invalid {
        kind: "ValkeyCluster",
        name: cluster.name_any(),
        field: "metadata.namespace",
    })?;
    let client = ctx.client.clone();
    Ok(Apis {
        clusters: Api::namespaced(client.clone(), &namespace),
        nodes: Api::namespaced(client.clone(), &namespace),
        secrets: Api::namespaced(client.clone(), &namespace),
        budgets: Api::namespaced(client.clone(), &namespace),
        policies: Api::namespaced(client.clone(), &namespace),
        pods: Api::namespaced(client, &namespace),
        namespace,
        field_manager: ctx.field_manager,
    })
}

/// The cluster as it is now (the cache may lag behind the status written a moment ago) and
/// its members; `None` when it is gone or going.
async fn fetch(apis: &Apis, name: &str) -> Result<Option<Live>, Error> {
    let fetched = fetch_with_members(
        &apis.clusters,
        &apis.nodes,
        &apis.namespace,
        name,
        labels::CLUSTER,
    )
    .await?;
    Ok(fetched.map(|(cluster, owned, foreign)| Live {
        cluster,
        owned,
        foreign,
    }))
}

/// Creates the members the spec asks for and updates the changed ones; the members as they
/// are afterwards (leaving ones included: the planner removes them).
async fn apply_members(apis: &Apis, live: &Live) -> Result<Vec<ValkeyNode>, Error> {
    let name = live.cluster.name_any();
    let mut owned = live.owned.clone();
    for at in Shape::of(&live.cluster).positions() {
        let member_name = names::cluster_member_name(&name, at.shard, at.member);
        if live.foreign.iter().any(|n| n.name_any() == member_name) {
            continue; // reported by the planner, never taken over
        }
        let existing = owned.iter().position(|n| n.name_any() == member_name);
        let allowed = existing.and_then(|i| owned[i].spec.allowed_revision.clone());
        let built = members::member(&live.cluster, at, allowed);
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

/// For each member that did not answer, what its pod says of its server
/// ([`members::server_gone`]), read fresh: a status written earlier may be stale. Costs a
/// read only while a member does not answer; a pod that cannot be read says nothing.
async fn mark_gone_servers(apis: &Apis, observed: &mut Observed) {
    for (node, member) in observed.nodes.iter().zip(observed.members.iter_mut()) {
        if member.reply.is_some() {
            continue;
        }
        let Some(pod) = node
            .status
            .as_ref()
            .and_then(|s| s.workload.as_ref())
            .and_then(|w| w.pod_name.clone())
        else {
            continue;
        };
        match apis.pods.get_opt(&pod).await {
            Ok(found) => member.gone = found.as_ref().and_then(members::server_gone),
            Err(error) => {
                tracing::debug!(member = %member.name, %error, "cannot read the member's pod")
            }
        }
    }
}

/// A budget per shard the spec asks for or that still has members (a leaving shard keeps
/// its budget until its members are gone).
async fn apply_budgets(
    apis: &Apis,
    cluster: &ValkeyCluster,
    members: &[ValkeyNode],
) -> Result<(), Error> {
    let mut shards: BTreeSet<u32> = (0..Shape::of(cluster).shards).collect();
    shards.extend(
        members
            .iter()
            .filter_map(|n| Some(members::position_of(n)?.shard)),
    );
    let wanted = disruption::cluster_budgets(cluster, &shards);
    let selector = disruption::budgets_selector(labels::CLUSTER, &cluster.name_any());
    objects::apply_owned(
        &apis.budgets,
        &apis.namespace,
        &selector,
        &wanted,
        apis.field_manager,
    )
    .await?;
    Ok(())
}

/// With `spec.users`, the `UsersReady` condition after a pass over the users.
async fn users(
    ctx: &ReconcileContext<Shared>,
    apis: &Apis,
    cluster: &ValkeyCluster,
    observed: &Observed,
    connections: &Connections<Conn>,
) -> Option<ConditionSpec> {
    let users = cluster.spec.users.as_deref()?;
    let builds: Vec<Option<String>> = observed
        .nodes
        .iter()
        .zip(&observed.versions)
        .map(|(node, version)| Some(users::build(version.as_deref()?, node)))
        .collect();
    let members: Vec<Member<'_, Conn>> = observed
        .members
        .iter()
        .zip(&builds)
        .map(|(m, build)| Member {
            name: &m.name,
            version: build.as_deref(),
            conn: connections.find(&m.name),
        })
        .collect();
    let current = cluster.status.as_ref().map(|s| s.conditions.as_slice());
    let pass = acl_users::Pass {
        secrets: &apis.secrets,
        label_key: labels::CLUSTER,
        checks: &ctx.data.user_checks,
        current: current.unwrap_or_default(),
        field_manager: apis.field_manager,
    };
    let reasons = (ClusterEvent::UsersApplied, ClusterEvent::UsersRefused);
    Some(
        pass.run(&ctx.runtime, cluster, users, &members, reasons)
            .await,
    )
}

/// The rotations under way after a pass over the data nodes (a cluster's members are all
/// data nodes) for the default password, and one for the operator password.
async fn passwords_pass(
    ctx: &ReconcileContext<Shared>,
    apis: &Apis,
    cluster: &ValkeyCluster,
    passwords: &Passwords,
    observed: &Observed,
    connections: &Connections<Conn>,
) -> Vec<PasswordRotation> {
    let members: Vec<default_password::Member<'_, Conn>> = observed
        .members
        .iter()
        .map(|m| default_password::Member {
            name: &m.name,
            conn: connections.find(&m.name),
        })
        .collect();
    let operator_conns: Vec<(&str, Option<OperatorConn<'_>>)> = observed
        .members
        .iter()
        .map(|m| {
            let conn = connections
                .find(&m.name)
                .map(|c| OperatorConn::Data(DataLoginOf(c)));
            (m.name.as_str(), conn)
        })
        .collect();
    let operator_members: Vec<operator_password::Member<'_, OperatorConn<'_>>> = operator_conns
        .iter()
        .map(|(name, conn)| operator_password::Member {
            name,
            kind: operator_password::Kind::DataNode,
            conn: conn.as_ref(),
        })
        .collect();
    let recorded = cluster
        .status
        .as_ref()
        .map(|s| s.password_rotations.as_slice())
        .unwrap_or_default();
    let reasons = password_rotation::Reasons {
        added: ClusterEvent::DefaultPasswordAdded,
        dropped: ClusterEvent::PreviousPasswordDropped,
        refused: ClusterEvent::DefaultPasswordRefused,
    };
    let (default_secret, operator_secret) = auth::cluster_secrets(cluster);
    let auth = cluster.spec.auth.as_ref();
    // At once: each pass is bounded, and both run before the step.
    let (mut rotations, operator) = futures::join!(
        password_rotation::run(
            &ctx.runtime,
            cluster,
            auth,
            password_rotation::DATA_NODES,
            password_rotation::Password {
                version: passwords.default_version.as_deref(),
                reference: &default_secret.reference,
                value: &passwords.default,
            },
            recorded,
            &members,
            reasons,
        ),
        operator_rotation::run(
            &ctx.runtime,
            operator_rotation::Apis {
                secrets: &apis.secrets,
                pods: &apis.pods,
                label_key: labels::CLUSTER,
                field_manager: apis.field_manager,
            },
            cluster,
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
                added: ClusterEvent::OperatorPasswordAdded,
                switched: ClusterEvent::OperatorLoginsSwitched,
                dropped: ClusterEvent::PreviousPasswordDropped,
                refused: ClusterEvent::OperatorPasswordRefused,
            },
        )
    );
    rotations.extend(operator);
    rotations
}

/// Decides, reports, executes and publishes.
#[allow(clippy::too_many_arguments)]
async fn act(
    ctx: &Context,
    attempts: &Mutex<HashMap<(String, String), Attempts>>,
    idle: Duration,
    apis: &Apis,
    live: &Live,
    passwords: &Passwords,
    observed: &Observed,
    connections: &Connections<Conn>,
    users: Option<&ConditionSpec>,
    rotations: &[PasswordRotation],
    ca_replacement: Option<CaReplacement>,
) -> Result<Action, Error> {
    let cluster = &live.cluster;
    let shape = Shape {
        replication_password: passwords.operator.as_deref().ok().map(|p| {
            let previous = passwords.operator_applied.as_ref().map(|a| a.fallbacks(p));
            ReplicationPassword::rotating_from(p, &previous.unwrap_or_default())
        }),
        ..Shape::of(cluster)
    };
    let refused: Vec<&str> = observed.login_refused.iter().map(String::as_str).collect();
    let foreign = live.foreign.first().map(ResourceExt::name_any);
    let key = (apis.namespace.clone(), cluster.name_any());
    let tried = attempts.lock().unwrap().get(&key).cloned();
    let step = plan::decide(
        &shape,
        &observed.members,
        &Circumstances {
            recorded_switchover: cluster
                .status
                .as_ref()
                .and_then(|s| s.switchover.as_ref())
                .filter(|s| s.outcome.is_finished())
                .map(|s| s.id.as_str()),
            foreign_member: foreign.as_deref(),
            operator_password_problem: passwords.operator.as_ref().err().map(String::as_str),
            tls_problem: passwords.tls_problem.as_deref(),
            default_password_problem: passwords.default.as_ref().err().map(String::as_str),
            login_refused: &refused,
            attempts: tried.as_ref(),
        },
    );
    let survey = survey::survey(&shape, &observed.members);
    let report = |step_error: Option<&str>| {
        let now = Timestamp::now();
        let mut status = ValkeyClusterStatus {
            storage: topology_controller::shared::storage::headroom(&live.owned),
            versions: versions_in_play(observed.versions.iter().map(Option::as_deref)),
            ..status::cluster_status(Inputs {
                shape: &shape,
                members: &observed.members,
                survey: &survey,
                step: &step,
                step_error,
                switchover: switchover_outcome(&shape, &observed.members),
                current: cluster.status.as_ref(),
                generation: cluster.metadata.generation,
                now,
            })
        };
        let current = cluster.status.as_ref().map(|s| s.conditions.as_slice());
        let generation = cluster.metadata.generation;
        acl_users::report(&mut status.conditions, current, users, generation, now);
        status.password_rotations = rotations.to_vec();
        status.ca_replacement = ca_replacement.clone();
        status
    };

    match &step {
        Step::Idle => {}
        Step::Wait { .. } => tracing::debug!(cluster = %cluster.name_any(), %step, "waiting"),
        _ => tracing::info!(cluster = %cluster.name_any(), %step, "step"),
    }
    // Status first, so it says what is about to happen.
    write_member_statuses(apis, observed).await?;
    let planned = report(None);
    if planned.phase != Some(Phase::Ready) {
        let why = planned
            .conditions
            .iter()
            .find(|c| c.type_ == conditions::types::READY)
            .map(|c| c.message.as_str());
        tracing::debug!(cluster = %cluster.name_any(), phase = ?planned.phase, why, "not ready");
    }
    write_cluster_status(apis, cluster, &planned).await?;

    let objects = ClusterMembers {
        cluster,
        members: &observed.members,
        api: &apis.nodes,
        namespace: &apis.namespace,
        field_manager: apis.field_manager,
    };
    let done = execute(&step, &observed.members, connections, &objects).await;
    attempts
        .lock()
        .unwrap()
        .entry(key)
        .or_default()
        .record(&step, Seen::of(&observed.members));
    let step_error = done.as_ref().err().map(ToString::to_string);
    match &done {
        Ok(Done { moved: Some(moved) }) => {
            tracing::info!(cluster = %cluster.name_any(), slots = moved.slots, stopped = ?moved.stopped, "moved slots");
        }
        Ok(_) => {}
        Err(e) => {
            tracing::warn!(cluster = %cluster.name_any(), step = %step, error = %e, "step failed");
            write_cluster_status(apis, cluster, &report(step_error.as_deref())).await?;
        }
    }
    if let Some((reason, note)) = step_event(&step, step_error.as_deref()) {
        ctx.events.publish(cluster, reason, note, None).await;
    }
    let ready = planned.phase == Some(Phase::Ready);
    let gossip = survey.disagreement.is_some() || survey.unsettled_shard_ids.is_some();
    Ok(Action::requeue(next_look(
        &step,
        step_error.is_some(),
        ready,
        gossip,
        idle,
    )))
}

/// Each member's `status.valkey`, where it changed beyond the replication offset.
async fn write_member_statuses(apis: &Apis, observed: &Observed) -> Result<(), Error> {
    let answered = observed
        .nodes
        .iter()
        .zip(&observed.members)
        .zip(&observed.versions);
    for ((node, member), version) in answered {
        let Some(valkey) = member_status(member, version.as_deref()) else {
            continue;
        };
        let live = node.status.as_ref().and_then(|s| s.valkey.as_ref());
        if !member_status_changed(live, &valkey) {
            continue;
        }
        let body = ValkeyNodeStatus {
            valkey: Some(valkey),
            ..Default::default()
        };
        apply::apply_status(&apis.nodes, &member.name, &body, apis.field_manager)
            .await
            .on(
                Op::ApplyStatus,
                ObjectName::new::<ValkeyNode>(&apis.namespace, &member.name),
            )?;
    }
    Ok(())
}

/// The cluster's status, when it differs from what is written.
async fn write_cluster_status(
    apis: &Apis,
    cluster: &ValkeyCluster,
    status: &ValkeyClusterStatus,
) -> Result<(), Error> {
    if cluster.status.as_ref() == Some(status) {
        return Ok(());
    }
    let name = cluster.name_any();
    apply::apply_status(&apis.clusters, &name, status, apis.field_manager)
        .await
        .on(
            Op::ApplyStatus,
            ObjectName::new::<ValkeyCluster>(&apis.namespace, &name),
        )?;
    Ok(())
}

/// When to look again: soon after a step (its effect shows in Valkey), sooner still while
/// only gossip is awaited (`gossip`: views or shard ids that differ), a little later while
/// waiting or not ready yet, and at the idle poll once Ready.
fn next_look(step: &Step, failed: bool, ready: bool, gossip: bool, idle: Duration) -> Duration {
    match step {
        _ if failed => WHILE_WAITING,
        Step::Wait {
            reason: Waiting::MembersDisagree,
            ..
        } => WHILE_GOSSIP_SETTLES,
        Step::Wait { .. } => WHILE_WAITING,
        Step::Refresh(_) => WHILE_GOSSIP_SETTLES,
        Step::Idle if !ready && gossip => WHILE_GOSSIP_SETTLES,
        // Idle but not ready: a replica is still syncing, say; look again soon.
        Step::Idle if !ready => WHILE_WAITING,
        Step::Idle => idle,
        _ => AFTER_STEP,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_look_follows_what_happened() {
        const IDLE: Duration = Duration::from_secs(300);
        let wait = Step::wait(Waiting::Forming, "forming");
        let remove = Step::Remove(vec!["c-0-1".into()]);
        let gossip = Step::wait(Waiting::MembersDisagree, "c-1-1 does not know c-1-0 yet");
        assert_eq!(next_look(&remove, false, false, false, IDLE), AFTER_STEP);
        assert_eq!(next_look(&remove, true, true, false, IDLE), WHILE_WAITING);
        assert_eq!(next_look(&wait, false, true, false, IDLE), WHILE_WAITING);
        assert_eq!(
            next_look(&gossip, false, false, false, IDLE),
            WHILE_GOSSIP_SETTLES
        );
        assert_eq!(
            next_look(&Step::Idle, false, false, false, IDLE),
            WHILE_WAITING
        );
        assert_eq!(
            next_look(&Step::Idle, false, false, true, IDLE),
            WHILE_GOSSIP_SETTLES
        );
        assert_eq!(next_look(&Step::Idle, false, true, false, IDLE), IDLE);
    }
}
