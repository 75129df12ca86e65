//! A ValkeyCluster's own stages of the reconcile every kind runs
//! ([`crate::driver::shared::pipeline`]): its Secrets, members, one disruption budget per
//! shard and its NetworkPolicy (`read_passwords`, `apply_members`, `apply_owned`, called by
//! the shared `prepare`), `observe` (every member asked, the pods of silent ones read), `credentials` (all members are data nodes), `decide` (the
//! slot-aware planner, pure) and `carry_out`.
//!
//! The next reconcile starts from what Valkey and the API server say; the one thing kept in
//! memory is how often each step was taken on an unchanged cluster (the planner's progress
//! check, [`topology_controller::cluster::plan::progress`]), which a restart forgets
//! harmlessly.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use crd_types::cluster::{Phase, ValkeyClusterStatus};
use crd_types::conditions::reasons::Waiting;
use crd_types::conditions::{self};
use crd_types::names;
use crd_types::template::SecretKeyRef;
use crd_types::{ValkeyCluster, ValkeyNode};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use topology_controller::cluster::events::step_event;
use topology_controller::cluster::execute::{Done, execute};
use topology_controller::cluster::member_status::member_status;
use topology_controller::cluster::members;
use topology_controller::cluster::model::Shape;
use topology_controller::cluster::plan::progress::{Attempts, Seen as Unchanged};
use topology_controller::cluster::plan::{self, Circumstances, Step};
use topology_controller::cluster::status::{self, Inputs};
use topology_controller::cluster::survey::{self, switchover_outcome};
use topology_controller::shared::connections::Connections;
use topology_controller::shared::disruption;
use topology_controller::shared::network;
use topology_controller::shared::tls::Client;

use crate::driver::cluster::moved::MovedCounters;

use crate::driver::cluster::connect::{self, Observed};
use crate::driver::shared::credentials::{self, DataNode, Members, Reached};
use crate::driver::shared::error::Error;
use crate::driver::shared::member_nodes::MemberNodes;
use crate::driver::shared::member_tls::TlsUnusable;
use crate::driver::shared::pipeline::{self, Grounds, Kind, Prepared};
use crate::driver::shared::secrets::{self, Passwords};
use crate::driver::shared::stages::{self, Apis, Common, Credentials, Live};
use crate::driver::shared::valkey::Conn;

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
    pub common: Common,
    /// Whether a primary whose server Kubernetes shows not running is replaced at once
    /// (`CLUSTER FAILOVER FORCE`, the planner's gone rule) rather than by Valkey's own
    /// election after cluster-node-timeout.
    pub forced_failover: bool,
    /// The steps taken lately per cluster, for the planner's progress check
    /// ([`topology_controller::cluster::plan::progress`]).
    pub attempts: Mutex<HashMap<(String, String), Attempts>>,
    /// Slots and keys each cluster's steps moved, for /metrics.
    pub moved: MovedCounters,
}

type Ctx = pipeline::Ctx<ValkeyCluster>;

/// Where a member's clients connect.
const CLIENT_PORT: u16 = names::ports::VALKEY as u16;

type Seen = pipeline::Seen<ValkeyCluster>;

/// Stage 5's output: the step, and the status that says it.
pub struct Decided {
    step: Step,
    shape: Shape,
    planned: ValkeyClusterStatus,
    /// Members' views or shard ids differ: only gossip is awaited.
    gossip: bool,
}

impl Kind for ValkeyCluster {
    type Shared = Shared;
    type Passwords = Passwords;
    type Observed = Observed;
    type Decided = Decided;

    fn common(shared: &Shared) -> &Common {
        &shared.common
    }

    fn forget(shared: &Shared, namespace: &str, name: &str) {
        let key = (namespace.to_string(), name.to_string());
        shared.attempts.lock().unwrap().remove(&key);
        shared.moved.forget(namespace, name);
    }

    async fn read_passwords(apis: &Apis<Self>, live: &Live<Self>) -> Result<Passwords, Error> {
        let members_exist = !live.owned.is_empty();
        let (secrets, cluster) = (&apis.secrets, &live.topology);
        secrets::prepare(secrets, cluster, members_exist, apis.field_manager).await
    }

    fn own_secrets<'a>(_: &Self, _: &'a Passwords) -> Vec<(SecretKeyRef, Option<&'a str>)> {
        Vec::new()
    }

    async fn apply_members(
        apis: &Apis<Self>,
        live: &Live<Self>,
        tls: Option<&Result<Client, TlsUnusable>>,
    ) -> Result<Vec<ValkeyNode>, Error> {
        let cluster = &live.topology;
        let name = cluster.name_any();
        let wanted = Shape::of(cluster)
            .positions()
            .into_iter()
            .map(|at| (names::cluster_member_name(&name, at.shard, at.member), at));
        let peers = members::ShardPeers::from_nodes(&live.owned);
        let build = |at, allowed| members::member(cluster, at, allowed, &peers);
        stages::apply_members(apis, live, tls, wanted, build).await
    }

    /// One disruption budget per shard, and the policy.
    async fn apply_owned(
        ctx: &Ctx,
        apis: &Apis<Self>,
        cluster: &Self,
        nodes: &[ValkeyNode],
    ) -> Result<bool, Error> {
        let shards = budget_shards(&Shape::of(cluster), nodes);
        stages::apply_budgets(
            apis,
            cluster,
            &disruption::cluster_budgets(cluster, &shards),
        )
        .await?;
        let policy = network::cluster_policy(cluster, &ctx.data.common.operator_namespace);
        Ok(stages::apply_policy(&ctx.runtime, apis, cluster, policy).await)
    }

    /// Asks every member, and reads the pods of silent members.
    async fn observe(
        ctx: &Ctx,
        apis: &Apis<Self>,
        prepared: &Prepared<Self>,
    ) -> (Observed, Connections<Conn>) {
        let nodes = prepared.nodes.clone();
        let (mut observed, connections) = connect::observe(nodes, prepared.login.as_ref()).await;
        if ctx.data.forced_failover {
            mark_gone_servers(apis, &mut observed).await;
        }
        (observed, connections)
    }

    fn data_addresses(observed: &Observed) -> Vec<(String, u16)> {
        observed
            .members
            .iter()
            .filter_map(|m| m.address.as_ref().map(|a| (a.ip.clone(), a.port)))
            .collect()
    }

    fn login_refused(observed: &Observed) -> &[String] {
        &observed.login_refused
    }

    /// The passes over `spec.users`, the passwords and, with TLS, the certificates (a
    /// cluster's members are all data nodes).
    async fn credentials(ctx: &Ctx, apis: &Apis<Self>, seen: &Seen) -> Credentials {
        let observed = &seen.observed;
        let data = observed
            .members
            .iter()
            .zip(&observed.versions)
            .zip(&observed.nodes)
            .map(|((m, version), node)| DataNode {
                at: Reached {
                    name: &m.name,
                    ip: m.address.as_ref().map(|a| a.ip.as_str()),
                    port: m.address.as_ref().map_or(CLIENT_PORT, |a| a.port),
                },
                version: version.as_deref(),
                node: Some(node),
            })
            .collect();
        let members = Members {
            data,
            sentinels: Vec::new(),
            nodes: &observed.nodes,
            connections: &seen.connections,
        };
        let checks = &ctx.data.common.user_checks;
        let none = std::future::ready(Vec::new());
        credentials::passes(&ctx.runtime, apis, checks, &seen.prepared, &members, none).await
    }

    /// The planner's step on what was seen, and the status that says so (pure).
    fn decide(
        ctx: &Ctx,
        apis: &Apis<Self>,
        seen: &Seen,
        credentials: &Credentials,
        grounds: Grounds<'_>,
    ) -> Decided {
        let (cluster, observed) = (&seen.prepared.live.topology, &seen.observed);
        let shape = Shape {
            replication_password: grounds.replication_password,
            ..Shape::of(cluster)
        };
        let key = (apis.namespace.clone(), cluster.name_any());
        let tried = ctx.data.attempts.lock().unwrap().get(&key).cloned();
        let step = plan::decide(
            &shape,
            &observed.members,
            &Circumstances {
                recorded_switchover: grounds.recorded_switchover,
                holds: grounds.holds,
                attempts: tried.as_ref(),
            },
        );
        let survey = survey::survey(&shape, &observed.members);
        let planned = report(seen, credentials, &shape, &survey, &step, None);
        Decided {
            gossip: survey.disagreement.is_some() || survey.unsettled_shard_ids.is_some(),
            step,
            shape,
            planned,
        }
    }

    /// Writes status first (so it says what is about to happen), runs the step, records it for
    /// the progress check, publishes its Event; when to look again.
    async fn carry_out(
        ctx: &Ctx,
        apis: &Apis<Self>,
        seen: &Seen,
        credentials: &Credentials,
        decided: Decided,
        idle: Duration,
    ) -> Result<Action, Error> {
        let cluster = &seen.prepared.live.topology;
        let observed = &seen.observed;
        let Decided {
            step,
            shape,
            planned,
            gossip,
        } = decided;
        match &step {
            Step::Idle => {}
            Step::Wait { .. } => tracing::debug!(cluster = %cluster.name_any(), %step, "waiting"),
            _ => tracing::info!(cluster = %cluster.name_any(), %step, "step"),
        }
        let statuses = observed
            .members
            .iter()
            .zip(&observed.versions)
            .map(|(m, version)| (m.name.as_str(), member_status(m, version.as_deref())))
            .collect();
        stages::write_member_statuses(apis, &observed.nodes, statuses).await?;
        if planned.phase != Some(Phase::Ready) {
            let why = conditions::find(&planned.conditions, conditions::types::READY)
                .map(|c| c.message.as_str());
            tracing::debug!(cluster = %cluster.name_any(), phase = ?planned.phase, why, "not ready");
        }
        let changed =
            |old: Option<&ValkeyClusterStatus>, new: &ValkeyClusterStatus| old != Some(new);
        stages::write_status(apis, cluster, &planned, changed).await?;

        let peers = members::ShardPeers::from_nodes(&observed.nodes);
        let objects = MemberNodes::new(apis, |member: &str, revision| {
            let at = observed.members.iter().find(|m| m.name == member)?.at;
            Some(members::member(cluster, at, Some(revision), &peers))
        });
        let done = execute(&step, &observed.members, &seen.connections, &objects).await;
        let key = (apis.namespace.clone(), cluster.name_any());
        ctx.data
            .attempts
            .lock()
            .unwrap()
            .entry(key)
            .or_default()
            .record(&step, Unchanged::of(&observed.members));
        let step_error = done.as_ref().err().map(ToString::to_string);
        match &done {
            Ok(Done { moved: Some(moved) }) => {
                tracing::info!(cluster = %cluster.name_any(), slots = moved.slots, keys = ?moved.keys, stopped = ?moved.stopped, "moved slots");
                ctx.data
                    .moved
                    .record(&apis.namespace, &cluster.name_any(), moved);
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(cluster = %cluster.name_any(), step = %step, error = %e, "step failed");
                let survey = survey::survey(&shape, &observed.members);
                let failed = report(
                    seen,
                    credentials,
                    &shape,
                    &survey,
                    &step,
                    step_error.as_deref(),
                );
                stages::write_status(apis, cluster, &failed, changed).await?;
            }
        }
        if let Some((reason, note)) = step_event(&step, step_error.as_deref()) {
            ctx.runtime
                .events
                .publish(cluster, reason, note, None)
                .await;
        }
        let ready = planned.phase == Some(Phase::Ready);
        let look = next_look(&step, step_error.is_some(), ready, gossip, idle);
        Ok(Action::requeue(look))
    }
}

/// A budget per shard the spec asks for or that still has members (a leaving shard keeps
/// its budget until its members are gone).
fn budget_shards(shape: &Shape, members: &[ValkeyNode]) -> BTreeSet<u32> {
    let mut shards: BTreeSet<u32> = (0..shape.shards).collect();
    shards.extend(
        members
            .iter()
            .filter_map(|n| Some(members::position_of(n)?.shard)),
    );
    shards
}

/// For each member that did not answer, what its pod says of its server
/// ([`members::server_gone`]), read fresh: a status written earlier may be stale. Costs a
/// read only while a member does not answer; a pod that cannot be read says nothing.
async fn mark_gone_servers(apis: &Apis<ValkeyCluster>, observed: &mut Observed) {
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

/// The cluster's status for `step` (and how it failed, if it did).
fn report(
    seen: &Seen,
    credentials: &Credentials,
    shape: &Shape,
    survey: &survey::Survey,
    step: &Step,
    step_error: Option<&str>,
) -> ValkeyClusterStatus {
    let (live, observed) = (&seen.prepared.live, &seen.observed);
    let cluster = &live.topology;
    let now = Timestamp::now();
    let mut status = status::cluster_status(Inputs {
        shape,
        members: &observed.members,
        survey,
        step,
        step_error,
        switchover: switchover_outcome(shape, &observed.members),
        current: cluster.status.as_ref(),
        generation: cluster.metadata.generation,
        now,
    });
    let versions = observed.versions.iter().map(Option::as_deref);
    stages::finish_status(&mut status, &seen.prepared, versions, credentials, now);
    status
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
