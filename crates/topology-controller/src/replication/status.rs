//! The ValkeyReplication's status: phase, current primary, counts, each member as Valkey
//! reports it, and the conditions Ready, Progressing and Degraded, from the [`Health`]
//! survey and the step. Each data node's own `status.valkey` is [`valkey_status`].

use crd_types::ValkeyReplicationStatus;
use crd_types::cluster::{ConfigPaths, Phase, SwitchoverOutcome, SwitchoverStatus};
use crd_types::conditions::ConditionSpec;
use crd_types::conditions::reasons::{Degraded, TopologyReady};
use crd_types::node::{Role, ValkeyStatus};
use crd_types::replication::ReplicationMemberStatus;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::replication::model::{DataNode, Group, Members, Sentinel};
use crate::replication::plan::Step;
use crate::replication::survey::Health;
use crate::shared::conditions::{PhaseFacts, not_ready, progressing, topology_phase, transitioned};
use crate::shared::guard::PlannedStep;
use crate::shared::roll::FailoverReason;

/// Everything the status is computed from.
pub struct Inputs<'a> {
    pub group: &'a Group,
    pub members: &'a Members,
    pub health: &'a Health,
    pub step: &'a Step,
    /// What went wrong executing the step, if anything.
    pub step_error: Option<&'a str>,
    pub current: Option<&'a ValkeyReplicationStatus>,
    pub generation: Option<i64>,
    pub now: Timestamp,
}

/// The group's status.
pub fn replication_status(i: Inputs) -> ValkeyReplicationStatus {
    let ready = is_ready(&i);
    let phase = phase(&i, ready);
    let current = i.current.map(|c| c.conditions.as_slice()).unwrap_or(&[]);
    let conditions = [
        ready_condition(&i, ready, phase),
        progressing(i.step, i.step_error, phase),
        degraded(&i, ready),
    ];
    ValkeyReplicationStatus {
        phase: Some(phase),
        // While nobody can be named, the last known primary stays.
        current_primary: i
            .health
            .primary
            .clone()
            .ok()
            .or_else(|| i.current.and_then(|c| c.current_primary.clone())),
        ready_replicas: i.health.ready_data as i32,
        ready_sentinels: i.health.ready_sentinels as i32,
        switchover: switchover_status(&i),
        members: member_statuses(i.members, i.health),
        config: ConfigPaths::of(&i.group.config),
        observed_generation: i.generation,
        conditions: transitioned(current, conditions, i.generation, i.now),
        // The members' storage and versions, the rotations and the CA replacement: the
        // caller's, from what it read and its passes over the credentials.
        ..Default::default()
    }
}

/// Idle, the primary serving, every wanted member there, ready, linked and monitoring,
/// every sentinel's view exact, nobody leaving, every member told the group is monitored.
fn is_ready(i: &Inputs) -> bool {
    let h = i.health;
    i.step.keeps_ready()
        && i.step_error.is_none()
        && h.primary.is_ok()
        && h.ready_data == i.group.data_nodes as usize
        && h.ready_sentinels == i.group.sentinels as usize
        && h.unwell.is_empty()
        && h.unlinked.is_none()
        && h.sentinel_view.is_none()
        && h.leaving.is_empty()
        && h.untold.is_empty()
}

/// Past Creating once Ready was reached.
fn ever_formed(i: &Inputs) -> bool {
    i.current
        .and_then(|c| c.phase)
        .is_some_and(|p| p != Phase::Creating)
}

/// Creating until the first Ready; then Scaling while members come or go, Updating while
/// they roll, Degraded for anything else that keeps the group from Ready.
fn phase(i: &Inputs, ready: bool) -> Phase {
    let wanted = i.group.positions().len();
    let there = i
        .members
        .data
        .iter()
        .map(|d| d.facts.at)
        .chain(i.members.sentinels.iter().map(|s| s.facts.at))
        .filter(|at| i.group.wants(*at))
        .count();
    let facts = PhaseFacts {
        ready,
        formed: ever_formed(i),
        reshaping: !i.health.leaving.is_empty() || there < wanted,
        rolling: i.health.rolling,
    };
    topology_phase(i.step, facts)
}

/// The outcome of the current switchover request; a finished one is kept as it was.
/// Succeeded once the target is the primary; Failed when it is no data node of the group.
fn switchover_status(i: &Inputs) -> Option<SwitchoverStatus> {
    let request = i.group.switchover.as_ref()?;
    if let Some(done) = i.current.and_then(|c| c.switchover.as_ref())
        && done.id == request.id
        && done.outcome.is_finished()
    {
        return Some(done.clone());
    }
    let finished = |outcome, message: String| SwitchoverStatus {
        id: request.id.clone(),
        outcome,
        message,
        finished_at: Some(Time(i.now)),
    };
    let target = &request.target;
    if i.members.data_node(target).is_none() {
        return Some(finished(
            SwitchoverOutcome::Failed,
            format!("{target} is no data node of the group"),
        ));
    }
    if i.health.primary.as_deref() == Ok(target.as_str()) {
        return Some(finished(
            SwitchoverOutcome::Succeeded,
            format!("{target} is the primary"),
        ));
    }
    let message = match i.step {
        Step::HandOver {
            reason: FailoverReason::Switchover,
            ..
        } => format!("{target} is taking over"),
        Step::Wait { message, .. } => format!("waiting: {message}"),
        _ => format!("waiting for {target} to be an in-sync replica the sentinels prefer"),
    };
    Some(SwitchoverStatus {
        id: request.id.clone(),
        outcome: SwitchoverOutcome::Pending,
        message,
        finished_at: None,
    })
}

fn ready_condition(i: &Inputs, ready: bool, phase: Phase) -> ConditionSpec {
    let h = i.health;
    if ready {
        let primary = h.primary.as_deref().unwrap_or_default();
        let message = format!(
            "{primary} is primary with {} replicas linked; {} sentinels monitor it",
            h.ready_data.saturating_sub(1),
            h.ready_sentinels
        );
        return ConditionSpec::new(TopologyReady::ReplicationReady, true, message);
    }
    not_ready(i.step, i.step_error, phase, || unwell_message(h))
}

fn degraded(i: &Inputs, ready: bool) -> ConditionSpec {
    let h = i.health;
    let reason = if !ever_formed(i) || ready {
        Degraded::Healthy
    } else if !h.unwell.is_empty() {
        Degraded::MembersNotReady
    } else if h.primary.is_err() {
        Degraded::NoPrimary
    } else if h.unlinked.is_some() {
        Degraded::ReplicasNotLinked
    } else if h.sentinel_view.is_some() {
        Degraded::SentinelsNotMonitoring
    } else {
        Degraded::Healthy
    };
    ConditionSpec::new(reason, reason != Degraded::Healthy, unwell_message(h))
}

/// The first thing that keeps the group from Ready, in words.
fn unwell_message(h: &Health) -> String {
    if !h.unwell.is_empty() {
        format!("not ready: {}", h.unwell.join(", "))
    } else if let Err(why) = &h.primary {
        format!("no primary: {why}")
    } else if let Some(r) = &h.unlinked {
        format!("{r} is not linked to the primary")
    } else if let Some(s) = &h.sentinel_view {
        s.clone()
    } else if !h.leaving.is_empty() {
        format!("leaving: {}", h.leaving.join(", "))
    } else if !h.untold.is_empty() {
        format!(
            "not yet told that sentinels monitor the group: {}",
            h.untold.join(", ")
        )
    } else {
        format!(
            "{} data nodes and {} sentinels play their part",
            h.ready_data, h.ready_sentinels
        )
    }
}

/// Each data node, then each sentinel, as it answered.
fn member_statuses(members: &Members, h: &Health) -> Vec<ReplicationMemberStatus> {
    let data = members.data.iter().map(|d| ReplicationMemberStatus {
        name: d.name().to_string(),
        role: d.role(),
        ready: d.facts.ready,
        replication_offset: d.answer.as_ref().map(|_| d.offset()),
        link_up: d
            .answer
            .as_ref()
            .and_then(|a| a.replication.primary.as_ref())
            .map(|l| l.link_up),
    });
    let primary = h.primary.as_ref().ok();
    let sentinels = members.sentinels.iter().map(|s| ReplicationMemberStatus {
        name: s.name().to_string(),
        role: Some(Role::Sentinel),
        ready: s.facts.ready,
        replication_offset: None,
        link_up: s.answer.as_ref().map(|_| {
            primary
                .and_then(|p| members.data_node(p))
                .and_then(DataNode::address)
                .is_some_and(|ip| s.monitored().is_some_and(|m| m.primary.0 == ip))
        }),
    });
    data.chain(sentinels).collect()
}

/// A data node's `status.valkey`: its run id, role, the run id of the primary it follows (as
/// that primary said), offset, link and version.
pub fn valkey_status(node: &DataNode, members: &Members) -> Option<ValkeyStatus> {
    let answer = node.answer.as_ref()?;
    let primary_run_id = node
        .follows()
        .and_then(|(host, _)| members.data_at(host))
        .and_then(|p| p.answer.as_ref()?.run_id.clone());
    Some(ValkeyStatus {
        node_id: answer.run_id.clone(),
        role: Some(answer.replication.role),
        primary_node_id: primary_run_id,
        replication_offset: Some(node.offset()),
        link_up: answer.replication.primary.as_ref().map(|l| l.link_up),
        version: answer.version.clone(),
    })
}

/// A sentinel's `status.valkey`: its run id, role and version.
pub fn sentinel_valkey_status(sentinel: &Sentinel) -> Option<ValkeyStatus> {
    let answer = sentinel.answer.as_ref()?;
    Some(ValkeyStatus {
        node_id: answer.run_id.clone(),
        role: Some(Role::Sentinel),
        version: answer.version.clone(),
        ..Default::default()
    })
}

/// Whether `new` says something `old` did not, ignoring the data nodes' replication
/// offsets: they move with every write, and a status written for them alone would wake the
/// group's own reconcile (a watch event) after every pass under a writer, about ten a
/// second. The offsets are refreshed whenever anything else changes (as each member's
/// `status.valkey` is, see [`crate::shared::member_status::member_status_changed`]).
pub fn status_changed(
    old: Option<&ValkeyReplicationStatus>,
    new: &ValkeyReplicationStatus,
) -> bool {
    let Some(old) = old else { return true };
    let strip = |s: &ValkeyReplicationStatus| ValkeyReplicationStatus {
        members: s
            .members
            .iter()
            .map(|m| ReplicationMemberStatus {
                replication_offset: None,
                ..m.clone()
            })
            .collect(),
        ..s.clone()
    };
    strip(old) != strip(new)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication::plan::next_step;
    use crate::replication::sim::*;
    use crd_types::conditions;
    use crd_types::conditions::types;

    fn status_of(
        g: &Group,
        m: &Members,
        current: Option<&ValkeyReplicationStatus>,
    ) -> ValkeyReplicationStatus {
        let health = Health::of(g, m, current.and_then(|c| c.current_primary.as_deref()));
        let step = next_step(g, m, None, None);
        replication_status(Inputs {
            group: g,
            members: m,
            health: &health,
            step: &step,
            step_error: None,
            current,
            generation: Some(2),
            now: Timestamp::UNIX_EPOCH,
        })
    }

    fn condition<'a>(s: &'a ValkeyReplicationStatus, type_: &str) -> (&'a str, &'a str) {
        let c = conditions::find(&s.conditions, type_).unwrap();
        (c.status.as_str(), c.reason.as_str())
    }

    #[test]
    fn a_formed_group_is_ready_and_says_who_is_primary() {
        let (g, m) = (group(3, 3), formed(3, 3));
        let s = status_of(&g, &m, None);
        assert_eq!(s.phase, Some(Phase::Ready));
        assert_eq!(s.current_primary.as_deref(), Some("g-0"));
        assert_eq!((s.ready_replicas, s.ready_sentinels), (3, 3));
        assert_eq!(condition(&s, types::READY), ("True", "ReplicationReady"));
        assert_eq!(condition(&s, types::PROGRESSING), ("False", "Idle"));
        assert_eq!(condition(&s, types::DEGRADED), ("False", "Healthy"));
        assert_eq!(s.members.len(), 6);
        assert_eq!(s.members[1].role, Some(Role::Replica));
        assert_eq!(s.members[1].link_up, Some(true));
        assert_eq!(s.members[3].role, Some(Role::Sentinel));
        assert_eq!(s.members[3].link_up, Some(true), "monitors the primary");
    }

    #[test]
    fn a_live_directive_step_keeps_a_ready_group_ready() {
        let (g, m) = (group(3, 3), formed(3, 3));
        let health = Health::of(&g, &m, None);
        let status_during = |step: &Step| {
            replication_status(Inputs {
                group: &g,
                members: &m,
                health: &health,
                step,
                step_error: None,
                current: None,
                generation: Some(2),
                now: Timestamp::UNIX_EPOCH,
            })
        };
        let set = Step::SetConfig(vec![("g-1".into(), vec![("maxmemory".into(), "1".into())])]);
        let s = status_during(&set);
        assert_eq!(condition(&s, types::READY), ("True", "ReplicationReady"));
        assert_eq!(condition(&s, types::PROGRESSING), ("True", "Updating"));
        let roll = Step::AllowRoll {
            member: "g-1".into(),
            revision: "r2".into(),
        };
        assert_eq!(condition(&status_during(&roll), types::READY).0, "False");
    }

    #[test]
    fn not_ready_while_a_sentinel_would_elect_no_replica() {
        // Just formed: one sentinel's copy of every replica's priority is still the 0 they
        // started with. SENTINEL FAILOVER would answer NOGOODSLAVE through it.
        let g = group(3, 3);
        let mut m = formed(3, 3);
        for r in &mut monitored_mut(&mut m, 1).replicas {
            r.priority = Some(0);
        }
        let s = status_of(&g, &m, None);
        assert_eq!(condition(&s, types::READY).0, "False");
        let ready = conditions::find(&s.conditions, types::READY).unwrap();
        assert!(
            ready
                .message
                .contains("g-sentinel-1 would elect no replica yet"),
            "{}",
            ready.message
        );
        // One electable replica is enough: Sentinel elects among those it can.
        monitored_mut(&mut m, 1).replicas[0].priority = Some(100);
        assert_eq!(condition(&status_of(&g, &m, None), types::READY).0, "True");
        // A group whose replicas are never to be elected (replica-priority 0) is not held
        // back by it.
        let mut never = group(3, 3);
        never.replica_priority = 0;
        monitored_mut(&mut m, 1).replicas[0].priority = Some(0);
        let view = crate::replication::survey::view_problem(&g, &m, &m.data[0], &m.sentinels[1]);
        assert!(view.is_some_and(|v| v.contains("would elect no replica")));
        let view =
            crate::replication::survey::view_problem(&never, &m, &m.data[0], &m.sentinels[1]);
        assert_eq!(view, None);
    }

    #[test]
    fn creating_until_ready_then_degraded_when_a_sentinel_misses_a_replica() {
        let g = group(3, 3);
        let s = status_of(&g, &formed_unmonitored(3, 3), None);
        assert_eq!(s.phase, Some(Phase::Creating));
        assert_eq!(condition(&s, types::PROGRESSING), ("True", "Creating"));
        let ready = status_of(&g, &formed(3, 3), None);
        let mut m = formed(3, 3);
        m.sentinels[1]
            .answer
            .as_mut()
            .unwrap()
            .monitored
            .as_mut()
            .unwrap()
            .replicas
            .pop();
        let s = status_of(&g, &m, Some(&ready));
        assert_eq!(s.phase, Some(Phase::Degraded));
        assert_eq!(
            condition(&s, types::DEGRADED),
            ("True", "SentinelsNotMonitoring")
        );
        let message = &conditions::find(&s.conditions, types::DEGRADED)
            .unwrap()
            .message;
        assert!(
            message.contains("g-sentinel-1 knows the replicas"),
            "{message}"
        );
    }

    #[test]
    fn a_formed_group_is_not_ready_before_every_member_is_told_it_is_monitored() {
        let g = group(2, 3);
        let mut m = formed(2, 3);
        m.data[1].facts.told_monitored = false;
        m.sentinels[2].facts.told_monitored = false;
        let s = status_of(&g, &m, None);
        assert_eq!(s.phase, Some(Phase::Creating));
        let ready = conditions::find(&s.conditions, types::READY).unwrap();
        assert_eq!(ready.status, "False");
        assert_eq!(
            ready.message,
            "not yet told that sentinels monitor the group: g-1, g-sentinel-2"
        );
        let sentinel = s.members.iter().find(|m| m.name == "g-sentinel-2").unwrap();
        assert_eq!(sentinel.link_up, Some(true), "what tells them: {s:?}");
    }

    #[test]
    fn an_unknown_primary_keeps_the_last_one_and_says_why() {
        let g = group(3, 2);
        let ready = status_of(&g, &formed(3, 2), None);
        let mut m = formed(3, 2);
        m.sentinels[1]
            .answer
            .as_mut()
            .unwrap()
            .monitored
            .as_mut()
            .unwrap()
            .primary
            .0 = ip(1);
        let s = status_of(&g, &m, Some(&ready));
        assert_eq!(s.current_primary.as_deref(), Some("g-0"));
        assert_eq!(condition(&s, types::DEGRADED), ("True", "NoPrimary"));
        assert_eq!(condition(&s, types::PROGRESSING), ("False", "NoPrimary"));
    }

    #[test]
    fn a_replicas_valkey_status_names_its_primarys_run_id() {
        let m = formed(2, 1);
        let status = valkey_status(&m.data[1], &m).unwrap();
        assert_eq!(status.role, Some(Role::Replica));
        assert_eq!(status.node_id.as_deref(), Some("run-1"));
        assert_eq!(status.primary_node_id.as_deref(), Some("run-0"));
        assert_eq!(status.link_up, Some(true));
        let s = sentinel_valkey_status(&m.sentinels[0]).unwrap();
        assert_eq!(s.role, Some(Role::Sentinel));
    }

    #[test]
    fn a_switchover_succeeds_once_its_target_is_primary_and_fails_for_a_stranger() {
        let mut g = group(3, 3);
        g.switchover = Some(crate::shared::member_facts::SwitchoverRequest {
            id: "s1".into(),
            target: "g-2".into(),
        });
        let mut m = formed(3, 3);
        let pending = status_of(&g, &m, None).switchover.unwrap();
        assert_eq!(pending.outcome, SwitchoverOutcome::Pending);
        promote(&mut m, 2);
        let done = status_of(&g, &m, None).switchover.unwrap();
        assert_eq!(done.outcome, SwitchoverOutcome::Succeeded);
        g.switchover.as_mut().unwrap().target = "g-7".into();
        g.switchover.as_mut().unwrap().id = "s2".into();
        let failed = status_of(&g, &m, None).switchover.unwrap();
        assert_eq!(failed.outcome, SwitchoverOutcome::Failed);
        assert!(
            failed.message.contains("g-7 is no data node"),
            "{}",
            failed.message
        );
    }
}

#[cfg(test)]
mod status_changed_tests {
    use super::*;

    #[test]
    fn offsets_alone_are_no_change() {
        let member = |offset| ReplicationMemberStatus {
            name: "g-0".into(),
            replication_offset: Some(offset),
            ..Default::default()
        };
        let status = |offset, ready| ValkeyReplicationStatus {
            ready_replicas: ready,
            members: vec![member(offset)],
            ..Default::default()
        };
        assert!(!status_changed(Some(&status(1, 1)), &status(99, 1)));
        assert!(status_changed(Some(&status(1, 1)), &status(99, 2)));
        assert!(status_changed(None, &status(1, 1)));
    }
}
