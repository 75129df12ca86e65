//! One reconcile of a ValkeyCluster: fetch the cluster and its member ValkeyNodes, apply the
//! members the spec asks for, ask every member's Valkey what it sees, let the planner pick
//! the one next step, carry it out, and write status. Nothing is remembered between
//! reconciles: the next one starts from what Valkey and the API server say.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crd_types::cluster::Phase;
use crd_types::conditions::reasons::Waiting;
use crd_types::names::{self, labels, ports};
use crd_types::template::{Announce, OPERATOR_USER};
use crd_types::{ValkeyCluster, ValkeyNode, ValkeyNodeStatus};
use futures::future::join_all;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ListParams};
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use operator_runtime::controller::ReconcileContext;
use operator_runtime::{ApiError, ApiResultExt, ObjectName, Op, apply};
use topology_controller::cluster_nodes::ClusterView;
use topology_controller::events::step_event;
use topology_controller::info::{ReplicationInfo, cluster_state_ok, server_version};
use topology_controller::member_status::{member_status, member_status_changed};
use topology_controller::members;
use topology_controller::model::{Address, Member, Position, Reply, Revisions, Shape};
use topology_controller::plan::guard::guard_step;
use topology_controller::plan::{self, Step};
use topology_controller::slots::Move;
use topology_controller::status::{self, Inputs};
use topology_controller::survey::{self, switchover_outcome};

use crate::error::Error;
use crate::migrate::{self, End};
use crate::secrets;
use crate::valkey::{Conn, Login, SlotState};

/// How soon to look again after a step was carried out, while waiting (2 s: formation waits on
/// replication and gossip, and each wait shows in time to Ready), and when idle. Idle
/// still polls: a failover inside Valkey changes no Kubernetes object.
const AFTER_STEP: Duration = Duration::from_secs(1);
const WHILE_WAITING: Duration = Duration::from_secs(2);
const WHEN_IDLE: Duration = Duration::from_secs(30);
/// How long a failover may take before it is reported as not done.
const FAILOVER_WAIT: Duration = Duration::from_secs(20);

/// A member ValkeyNode with what its Valkey answered.
struct Asked {
    member: Member,
    node: ValkeyNode,
    conn: Option<Conn>,
    version: Option<String>,
    /// The member answered but refused the operator's login.
    login_refused: bool,
}

pub async fn reconcile(
    cached: Arc<ValkeyCluster>,
    ctx: Arc<ReconcileContext<()>>,
) -> Result<Action, Error> {
    let name = cached.name_any();
    let ns = cached.namespace().ok_or_else(|| Error::Invalid {
        kind: "ValkeyCluster",
        name: name.clone(),
        field: "metadata.namespace",
    })?;
    let client = ctx.runtime.client.clone();
    let manager = ctx.runtime.field_manager;
    let clusters: Api<ValkeyCluster> = Api::namespaced(client.clone(), &ns);
    let nodes: Api<ValkeyNode> = Api::namespaced(client.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(client, &ns);

    // --- Fetch.
    let Some(cluster) = clusters
        .get_opt(&name)
        .await
        .on(Op::Read, ObjectName::new::<ValkeyCluster>(&ns, &name))?
    else {
        return Ok(Action::await_change());
    };
    if cluster.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let uid = cluster.uid().unwrap_or_default();
    let listed = nodes
        .list(&ListParams::default().labels(&format!("{}={name}", labels::CLUSTER)))
        .await
        .on(Op::List, ObjectName::new::<ValkeyNode>(&ns, &name))?
        .items;
    let (mut owned, foreign): (Vec<ValkeyNode>, Vec<ValkeyNode>) = listed
        .into_iter()
        .partition(|n| n.owner_references().iter().any(|o| o.uid == uid));

    // --- Passwords before members, so a member's pod finds its Secrets when it starts.
    let passwords = secrets::prepare(&secrets, &cluster, !owned.is_empty()).await?;
    let login = passwords.operator.as_ref().ok().map(|password| Login {
        user: OPERATOR_USER.to_string(),
        password: password.clone(),
    });

    // --- Members the spec asks for: create the missing, update the changed.
    let shape = Shape::of(&cluster);
    for at in shape.positions() {
        let member_name = names::cluster_member_name(&name, at.shard, at.member);
        if foreign.iter().any(|n| n.name_any() == member_name) {
            continue; // reported below, never taken over
        }
        let live = owned.iter().position(|n| n.name_any() == member_name);
        let allowed = live.and_then(|i| owned[i].spec.allowed_revision.clone());
        let built = members::member(&cluster, at, allowed);
        if live.is_some_and(|i| !needs_apply(&built, &owned[i])) {
            continue;
        }
        let applied = apply::apply(&nodes, &member_name, &built, manager)
            .await
            .on(Op::Apply, ObjectName::new::<ValkeyNode>(&ns, &member_name))?;
        match live {
            Some(i) => owned[i] = applied,
            None => owned.push(applied),
        }
    }

    // --- Ask every member's Valkey.
    let mut asked: Vec<Asked> = join_all(owned.into_iter().filter_map(|node| {
        let at = members::position_of(&node)?;
        Some(ask(node, at, login.as_ref()))
    }))
    .await;
    asked.sort_by_key(|a| a.member.at);
    let members: Vec<Member> = asked.iter().map(|a| a.member.clone()).collect();

    // --- Decide and act.
    let recorded = cluster
        .status
        .as_ref()
        .and_then(|s| s.switchover.as_ref())
        .filter(|s| s.outcome.is_finished())
        .map(|s| s.id.as_str());
    let mut step = plan::next_step(&shape, &members, recorded);
    if let Some(n) = foreign.first() {
        step = Step::wait(
            Waiting::ForeignMember,
            format!(
                "ValkeyNode {} exists but does not belong to this cluster; rename or delete it",
                n.name_any()
            ),
        );
    }
    let refused: Vec<&str> = asked
        .iter()
        .filter(|a| a.login_refused)
        .map(|a| a.member.name.as_str())
        .collect();
    let step = guard_step(
        step,
        passwords.operator.as_ref().err().map(String::as_str),
        passwords.default_problem.as_deref(),
        &refused,
    );
    let survey = survey::survey(&shape, &members);

    // --- Status first, so it says what is about to happen (a migration can take a while):
    // each member's status.valkey, then the cluster's.
    for a in &asked {
        let Some(valkey) = member_status(&a.member, a.version.as_deref()) else {
            continue;
        };
        let live = a.node.status.as_ref().and_then(|s| s.valkey.as_ref());
        if member_status_changed(live, &valkey) {
            let body = ValkeyNodeStatus {
                valkey: Some(valkey),
                ..Default::default()
            };
            apply::apply_status(&nodes, &a.member.name, &body, manager)
                .await
                .on(
                    Op::ApplyStatus,
                    ObjectName::new::<ValkeyNode>(&ns, &a.member.name),
                )?;
        }
    }
    let cluster_status = |step_error: Option<&str>| {
        status::cluster_status(Inputs {
            shape: &shape,
            members: &members,
            survey: &survey,
            step: &step,
            step_error,
            switchover: switchover_outcome(&shape, &members),
            current: cluster.status.as_ref(),
            generation: cluster.metadata.generation,
            now: Timestamp::now(),
        })
    };
    let planned = cluster_status(None);
    if cluster.status.as_ref() != Some(&planned) {
        apply::apply_status(&clusters, &name, &planned, manager)
            .await
            .on(
                Op::ApplyStatus,
                ObjectName::new::<ValkeyCluster>(&ns, &name),
            )?;
    }

    // --- Act.
    let outcome = execute(&step, &asked, &cluster, &nodes, manager).await;
    let step_error = outcome.err();
    if let Some(e) = &step_error {
        tracing::warn!(cluster = %name, step = %step, error = %e, "step failed");
        let failed = cluster_status(Some(e));
        apply::apply_status(&clusters, &name, &failed, manager)
            .await
            .on(
                Op::ApplyStatus,
                ObjectName::new::<ValkeyCluster>(&ns, &name),
            )?;
    }
    if let Some((reason, note)) = step_event(&step, step_error.as_deref()) {
        ctx.runtime
            .events
            .publish(&cluster, reason, note, None)
            .await?;
    }
    for a in asked {
        if let Some(conn) = a.conn {
            conn.close().await;
        }
    }
    let ready = planned.phase == Some(Phase::Ready);
    Ok(Action::requeue(match (&step, &step_error) {
        (_, Some(_)) | (Step::Wait { .. }, _) => WHILE_WAITING,
        // Idle but not ready: a replica is still syncing, say; look again soon.
        (Step::Idle, _) if !ready => WHILE_WAITING,
        (Step::Idle, _) => WHEN_IDLE,
        _ => AFTER_STEP,
    }))
}

/// Whether the live member differs from what would be applied: spec, our labels, owner.
/// Compared as JSON so an unchanged member costs no API request.
fn needs_apply(built: &ValkeyNode, live: &ValkeyNode) -> bool {
    let spec = |n: &ValkeyNode| serde_json::to_value(&n.spec).ok();
    let labels_kept = built
        .labels()
        .iter()
        .all(|(k, v)| live.labels().get(k) == Some(v));
    spec(built) != spec(live) || !labels_kept || live.owner_references().is_empty()
}

/// Where the member's Valkey is reached: the address it announces.
fn address(node: &ValkeyNode) -> Option<Address> {
    let status = node.status.as_ref()?;
    let ip = match node.spec.template.announce {
        Announce::Service => status.endpoint.as_ref()?.cluster_ip.clone(),
        Announce::PodIP => status.workload.as_ref()?.pod_ip.clone(),
    }?;
    if ip.is_empty() || ip == "None" {
        return None;
    }
    Some(Address {
        ip,
        port: ports::VALKEY as u16,
        bus_port: ports::CLUSTER_BUS as u16,
    })
}

async fn ask(node: ValkeyNode, at: Position, login: Option<&Login>) -> Asked {
    let workload = node.status.as_ref().and_then(|s| s.workload.as_ref());
    let mut member = Member {
        name: node.name_any(),
        at,
        address: address(&node),
        ready: workload.is_some_and(|w| w.ready),
        revisions: Revisions {
            desired: workload.and_then(|w| w.desired_revision.clone()),
            running: workload.and_then(|w| w.revision.clone()),
            allowed: node.spec.allowed_revision.clone(),
            observed: workload.and_then(|w| w.observed_generation) == node.metadata.generation,
        },
        reply: None,
    };
    let mut asked = Asked {
        member: member.clone(),
        node,
        conn: None,
        version: None,
        login_refused: false,
    };
    let (Some(address), Some(login)) = (&member.address, login) else {
        return asked;
    };
    let conn = match Conn::connect(&address.ip, address.port, login).await {
        Ok(conn) => conn,
        Err(e) if is_login_refused(&e) => {
            tracing::warn!(member = %member.name, error = %e, "member refuses the operator's login");
            asked.login_refused = true;
            return asked;
        }
        Err(e) => {
            tracing::debug!(member = %member.name, error = %e, "member does not answer");
            return asked;
        }
    };
    let answered = async {
        let view = ClusterView::parse(&conn.cluster_nodes().await?).map_err(to_fred)?;
        // Both sections in one reply: the parsers skip what is not theirs.
        let info = conn.info(&["replication", "server"]).await?;
        let replication = ReplicationInfo::parse(&info).map_err(to_fred)?;
        let version = server_version(&info).ok();
        // Older servers lack CLUSTER SHARDS; then shard ids are not checked.
        let shard_groups = conn.cluster_shards().await.ok();
        let cluster_state_ok = cluster_state_ok(&conn.cluster_info().await?).map_err(to_fred)?;
        Ok::<_, fred::error::Error>((
            Reply {
                view,
                replication,
                shard_groups,
                cluster_state_ok: Some(cluster_state_ok),
            },
            version,
        ))
    }
    .await;
    match answered {
        Ok((reply, version)) => {
            member.reply = Some(reply);
            asked.member = member;
            asked.version = version;
            asked.conn = Some(conn);
        }
        Err(e) => {
            tracing::debug!(member = %member.name, error = %e, "member answered badly");
            conn.close().await;
        }
    }
    asked
}

/// A wrong password or unknown user, as opposed to a member that does not answer.
fn is_login_refused(e: &fred::error::Error) -> bool {
    *e.kind() == fred::error::ErrorKind::Auth
        || ["WRONGPASS", "NOAUTH"]
            .iter()
            .any(|code| e.details().contains(code))
}

fn to_fred(e: impl std::fmt::Display) -> fred::error::Error {
    fred::error::Error::new(fred::error::ErrorKind::Parse, e.to_string())
}

/// Carries out `step`. Errors are messages for status: the next reconcile looks again.
async fn execute(
    step: &Step,
    asked: &[Asked],
    cluster: &ValkeyCluster,
    nodes: &Api<ValkeyNode>,
    manager: &str,
) -> Result<(), String> {
    let ns = cluster.namespace().unwrap_or_default();
    let conn = |name: &str| {
        asked
            .iter()
            .find(|a| a.member.name == name)
            .and_then(|a| a.conn.as_ref())
            .ok_or_else(|| format!("{name} does not answer"))
    };
    let fail = |what: String| move |e: fred::error::Error| format!("{what}: {e}");
    match step {
        Step::Wait { .. } | Step::Idle => Ok(()),
        Step::Meet { via, targets } => {
            let from = conn(via)?;
            for t in targets {
                from.meet(&t.ip, t.port, t.bus_port)
                    .await
                    .map_err(fail(format!("MEET {}:{} via {via}", t.ip, t.port)))?;
            }
            Ok(())
        }
        Step::Forget { node_id, on } => {
            // All together, inside the 60 s ban that keeps gossip from bringing it back.
            let results = join_all(on.iter().map(|m| async move {
                conn(m)?
                    .forget(node_id)
                    .await
                    .map_err(fail(format!("FORGET on {m}")))
            }))
            .await;
            results.into_iter().collect()
        }
        Step::AddSlots(assign) => {
            for (member, ranges) in assign {
                conn(member)?
                    .add_slots_ranges(ranges)
                    .await
                    .map_err(fail(format!("ADDSLOTSRANGE on {member}")))?;
            }
            Ok(())
        }
        Step::FixOpenSlot {
            slot,
            source,
            target,
        } => {
            let moves = [Move {
                slots: (*slot, *slot),
                from: source.clone(),
                to: target.clone(),
            }];
            migrate::migrate(&moves, &ends(asked)).await.map(drop)
        }
        Step::Stabilize { slot, on } => {
            for m in on {
                conn(m)?
                    .set_slot(*slot, SlotState::Stable)
                    .await
                    .map_err(fail(format!("SETSLOT {slot} STABLE on {m}")))?;
            }
            Ok(())
        }
        Step::Replicate { member, primary_id } => conn(member)?
            .replicate(primary_id)
            .await
            .map_err(fail(format!("REPLICATE on {member}"))),
        Step::Migrate(moves) => migrate::migrate(moves, &ends(asked)).await.map(drop),
        Step::Remove(names) => {
            for n in names {
                nodes
                    .delete(n, &DeleteParams::default())
                    .await
                    .on(Op::Delete, ObjectName::new::<ValkeyNode>(&ns, n))
                    .map_err(api_message)?;
            }
            Ok(())
        }
        Step::Failover { member, .. } => {
            let c = conn(member)?;
            c.failover()
                .await
                .map_err(fail(format!("CLUSTER FAILOVER on {member}")))?;
            let started = Instant::now();
            while started.elapsed() < FAILOVER_WAIT {
                if c.role().await.is_ok_and(|r| r == "master") {
                    return Ok(());
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(format!(
                "{member} did not become primary within {}s",
                FAILOVER_WAIT.as_secs()
            ))
        }
        Step::AllowRoll { member, revision } => {
            let a = asked
                .iter()
                .find(|a| &a.member.name == member)
                .ok_or_else(|| format!("{member} is gone"))?;
            let built = members::member(cluster, a.member.at, Some(revision.clone()));
            apply::apply(nodes, member, &built, manager)
                .await
                .map(drop)
                .on(Op::Apply, ObjectName::new::<ValkeyNode>(&ns, member))
                .map_err(|e| format!("opening the roll gate of {member}: {}", api_message(e)))?;
            Ok(())
        }
    }
}

/// The members that answered, as migration ends.
fn ends(asked: &[Asked]) -> Vec<End<'_>> {
    asked
        .iter()
        .filter_map(|a| {
            Some(End {
                name: &a.member.name,
                conn: a.conn.as_ref()?,
                id: a.member.id()?,
                address: a.member.address.as_ref()?,
                primary: a.member.reply.as_ref()?.view.myself().flags.primary,
            })
        })
        .collect()
}

/// An API error as a status message: what failed where, and why.
fn api_message(e: ApiError) -> String {
    format!("{e}: {}", e.source)
}
