//! Model: a ValkeyReplication's spec read once into a [`Group`], and its members as
//! observed: data nodes ([`DataNode`]) and sentinels ([`Sentinel`]), each with what
//! Kubernetes says ([`Facts`]) and what its Valkey answered.

use crd_types::ValkeyReplication;
use crd_types::config::ValkeyConfig;
use crd_types::names;
use crd_types::node::Role;
use kube::ResourceExt;

use crate::shared::acl::{AclUser, ReplicationPassword};
use crate::shared::info::ReplicationInfo;
use crate::shared::member_facts::{LiveConfig, Revisions, SwitchoverRequest};
use crate::shared::roll::RollMember;

/// Where a member sits in its group: data node `i` (`<name>-<i>`) or sentinel `j`
/// (`<name>-sentinel-<j>`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum At {
    Data(u32),
    Sentinel(u32),
}

/// What sentinels are told about the group (`SENTINEL MONITOR` / `SET`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SentinelOptions {
    pub quorum: u32,
    pub down_after_ms: u64,
    pub failover_timeout_ms: u64,
    pub parallel_syncs: u32,
}

impl SentinelOptions {
    /// The `SENTINEL SET` options (all but the quorum, which MONITOR carries) as name and
    /// value, in the names `SENTINEL MASTER` prints them under.
    pub fn settings(&self) -> Vec<(String, String)> {
        vec![
            (
                "down-after-milliseconds".into(),
                self.down_after_ms.to_string(),
            ),
            (
                "failover-timeout".into(),
                self.failover_timeout_ms.to_string(),
            ),
            ("parallel-syncs".into(), self.parallel_syncs.to_string()),
        ]
    }

    /// The options in which `seen` differs from these, quorum included, to `SENTINEL SET`.
    pub fn differing(&self, seen: &SentinelOptions) -> Vec<(String, String)> {
        let mut out = Vec::new();
        if seen.quorum != self.quorum {
            out.push(("quorum".to_string(), self.quorum.to_string()));
        }
        let theirs = seen.settings();
        out.extend(
            self.settings()
                .into_iter()
                .zip(theirs)
                .filter(|(mine, theirs)| mine != theirs)
                .map(|(mine, _)| mine),
        );
        out
    }
}

/// What the spec asks for, read once from the ValkeyReplication.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    /// The ValkeyReplication's name, also the name sentinels know the primary by.
    pub name: String,
    pub data_nodes: u32,
    pub sentinels: u32,
    pub options: SentinelOptions,
    pub switchover: Option<SwitchoverRequest>,
    /// Every replica's `replica-priority` (the template's, else Valkey's 100); a switchover
    /// target gets [`SWITCHOVER_PRIORITY`] for the time it takes.
    pub replica_priority: u32,
    /// The data nodes' `repl-ping-replica-period` in seconds (the template's, else Valkey's
    /// 10), restored on a primary after a hand-over quietened it.
    pub ping_period: u32,
    /// The config data nodes get ([`data_config`]): its live directives are set on them.
    pub config: ValkeyConfig,
    /// The data nodes' image: none rolls onto it while its version is refused
    /// ([`crate::shared::target`]).
    pub image: String,
    /// The `replication` user's password, once the operator password is read (see
    /// [`crate::shared::acl`]); `None` leaves the data nodes' users alone.
    pub replication_password: Option<ReplicationPassword>,
}

/// The `replica-priority` of a switchover's target: lower wins Sentinel's choice.
pub const SWITCHOVER_PRIORITY: u32 = 1;
/// Valkey's own `replica-priority`.
pub const DEFAULT_PRIORITY: u32 = 100;
/// Valkey's own `repl-ping-replica-period`.
pub const DEFAULT_PING_PERIOD: u32 = 10;

/// A number the template's config sets, under any spelling of its name's case.
fn template_number(replication: &ValkeyReplication, directive: &str) -> Option<u32> {
    replication
        .spec
        .common
        .template
        .config
        .0
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(directive))
        .and_then(|(_, v)| v.trim().parse().ok())
}

impl Group {
    pub fn of(replication: &ValkeyReplication) -> Group {
        let name = replication.name_any();
        let spec = &replication.spec;
        let sentinel = &spec.sentinel;
        Group {
            switchover: spec.switchover.as_ref().map(|s| SwitchoverRequest {
                id: s.id.clone(),
                target: names::replication_member_name(&name, count(s.member)),
            }),
            data_nodes: count(spec.replicas),
            sentinels: count(sentinel.replicas),
            options: SentinelOptions {
                quorum: count(sentinel.quorum),
                down_after_ms: u64::try_from(sentinel.down_after_milliseconds).unwrap_or(0),
                failover_timeout_ms: u64::try_from(sentinel.failover_timeout).unwrap_or(0),
                parallel_syncs: count(sentinel.parallel_syncs),
            },
            replica_priority: template_number(replication, "replica-priority")
                .unwrap_or(DEFAULT_PRIORITY),
            ping_period: template_number(replication, "repl-ping-replica-period")
                .filter(|&p| p > 0)
                .unwrap_or(DEFAULT_PING_PERIOD),
            config: data_config(replication),
            image: spec.common.template.image.clone(),
            name,
            replication_password: None,
        }
    }

    /// Whether the spec wants a member at `at`.
    pub fn wants(&self, at: At) -> bool {
        match at {
            At::Data(i) => i < self.data_nodes,
            At::Sentinel(j) => j < self.sentinels,
        }
    }

    /// Every member position the spec asks for: data nodes, then sentinels.
    pub fn positions(&self) -> Vec<At> {
        (0..self.data_nodes)
            .map(At::Data)
            .chain((0..self.sentinels).map(At::Sentinel))
            .collect()
    }

    /// The ValkeyNode name of the member at `at`.
    pub fn member_name(&self, at: At) -> String {
        match at {
            At::Data(i) => names::replication_member_name(&self.name, i),
            At::Sentinel(j) => names::sentinel_member_name(&self.name, j),
        }
    }
}

/// Directives the spec's `minReplicasToWrite` / `minReplicasMaxLag` own on data nodes.
pub(crate) const MIN_REPLICAS_TO_WRITE: &str = "min-replicas-to-write";
pub(crate) const MIN_REPLICAS_MAX_LAG: &str = "min-replicas-max-lag";

/// The config every data node gets: the template's, with `min-replicas-to-write` and
/// `min-replicas-max-lag` from the spec (any spelling of them in the template gives way).
pub fn data_config(replication: &ValkeyReplication) -> ValkeyConfig {
    let spec = &replication.spec;
    let mut config = spec.common.template.config.clone();
    config.0.retain(|k, _| {
        !k.eq_ignore_ascii_case(MIN_REPLICAS_TO_WRITE)
            && !k.eq_ignore_ascii_case(MIN_REPLICAS_MAX_LAG)
    });
    config.0.insert(
        MIN_REPLICAS_TO_WRITE.to_string(),
        spec.min_replicas_to_write().to_string(),
    );
    config.0.insert(
        MIN_REPLICAS_MAX_LAG.to_string(),
        spec.min_replicas_max_lag().to_string(),
    );
    config
}

/// A count or index from the spec; negative ones (refused at admission) count as 0.
fn count(value: i32) -> u32 {
    u32::try_from(value).unwrap_or(0)
}

/// What Kubernetes says of one member ValkeyNode.
#[derive(Clone, Debug, PartialEq)]
pub struct Facts {
    pub name: String,
    pub at: At,
    /// The address it announces (its Service's ClusterIP, or its pod IP); `None` until known.
    pub address: Option<String>,
    /// The pod passes its readiness probe.
    pub ready: bool,
    pub revisions: Revisions,
    /// The current pod's name, for its role label.
    pub pod: Option<String>,
    /// Its spec says the sentinels monitor the group (`spec.replication.monitored`): what
    /// its scripts follow after a restart. The group is not Ready before every member is told.
    pub told_monitored: bool,
}

/// What a data node's Valkey said.
#[derive(Clone, Debug, PartialEq)]
pub struct DataAnswer {
    pub replication: ReplicationInfo,
    /// `run_id` of INFO server: a new one after every restart.
    pub run_id: Option<String>,
    pub version: Option<String>,
    /// `slave_priority` (a replica's `replica-priority`).
    pub priority: Option<u32>,
    /// Its live directives; `None` when its version is unknown.
    pub live_config: Option<LiveConfig>,
    /// Its `replication` ACL user (`Some(None)`: it has none); `None` when not read.
    pub replication_user: Option<Option<AclUser>>,
}

/// A data node and, when it answered, what it said.
#[derive(Clone, Debug, PartialEq)]
pub struct DataNode {
    pub facts: Facts,
    pub answer: Option<DataAnswer>,
}

impl DataNode {
    pub fn name(&self) -> &str {
        &self.facts.name
    }

    pub fn address(&self) -> Option<&str> {
        self.facts.address.as_deref()
    }

    /// Its role by INFO replication.
    pub fn role(&self) -> Option<Role> {
        Some(self.answer.as_ref()?.replication.role)
    }

    /// It says it is a primary.
    pub fn is_primary(&self) -> bool {
        self.role() == Some(Role::Primary)
    }

    /// The primary address a replica follows (`master_host`, `master_port`).
    pub fn follows(&self) -> Option<(&str, u16)> {
        let link = self.answer.as_ref()?.replication.primary.as_ref()?;
        Some((link.host.as_str(), link.port))
    }

    /// A replica of `primary` whose link is up and not resyncing.
    pub fn in_sync_with(&self, primary: &DataNode) -> bool {
        let Some(link) = self
            .answer
            .as_ref()
            .and_then(|a| a.replication.primary.as_ref())
        else {
            return false;
        };
        primary.address() == Some(link.host.as_str())
            && link.port == crate::replication::PORT
            && link.link_up
            && !link.sync_in_progress
    }

    /// Its replication offset (a replica's applied offset, a primary's own); 0 unknown.
    pub fn offset(&self) -> i64 {
        self.answer
            .as_ref()
            .map_or(0, |a| match &a.replication.primary {
                Some(link) => link.repl_offset,
                None => a.replication.repl_offset,
            })
    }
}

/// One entry of a sentinel's replica or sentinel list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    pub ip: String,
    pub port: u16,
    /// Sentinel's flags for it (`slave`, `s_down`, `disconnected`...).
    pub flags: Vec<String>,
    /// A replica's priority as the sentinel last read it.
    pub priority: Option<u32>,
}

impl Peer {
    /// The sentinel counts it down or cannot reach it.
    pub fn is_down(&self) -> bool {
        self.flags
            .iter()
            .any(|f| matches!(f.as_str(), "s_down" | "o_down" | "disconnected"))
    }
}

/// What a sentinel knows of the group it monitors.
#[derive(Clone, Debug, PartialEq)]
pub struct Monitored {
    /// Where it sends clients (GET-MASTER-ADDR-BY-NAME).
    pub primary: (String, u16),
    /// Its flags for the primary (`master`, `s_down`, `o_down`, `failover_in_progress`...).
    pub flags: Vec<String>,
    /// The options it runs with.
    pub options: SentinelOptions,
    pub replicas: Vec<Peer>,
    /// The other sentinels it knows.
    pub sentinels: Vec<Peer>,
}

impl Monitored {
    /// A failover is under way.
    pub fn failing_over(&self) -> bool {
        self.flags.iter().any(|f| f.starts_with("failover"))
    }
}

/// What a sentinel said.
#[derive(Clone, Debug, PartialEq)]
pub struct SentinelAnswer {
    pub version: Option<String>,
    pub run_id: Option<String>,
    /// `None`: it does not monitor the group.
    pub monitored: Option<Monitored>,
}

/// A sentinel and, when it answered, what it said.
#[derive(Clone, Debug, PartialEq)]
pub struct Sentinel {
    pub facts: Facts,
    pub answer: Option<SentinelAnswer>,
}

impl Sentinel {
    pub fn name(&self) -> &str {
        &self.facts.name
    }

    /// What it knows of the group, when it answered and monitors it.
    pub fn monitored(&self) -> Option<&Monitored> {
        self.answer.as_ref()?.monitored.as_ref()
    }
}

/// The members of a group, in position order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Members {
    pub data: Vec<DataNode>,
    pub sentinels: Vec<Sentinel>,
}

impl Members {
    pub fn data_node(&self, name: &str) -> Option<&DataNode> {
        self.data.iter().find(|d| d.name() == name)
    }

    /// The data node announcing `ip`.
    pub fn data_at(&self, ip: &str) -> Option<&DataNode> {
        self.data.iter().find(|d| d.address() == Some(ip))
    }

    /// Whether some member (data node or sentinel, wanted or leaving) announces `ip`.
    pub fn has_address(&self, ip: &str) -> bool {
        self.data.iter().any(|d| d.address() == Some(ip))
            || self
                .sentinels
                .iter()
                .any(|s| s.facts.address.as_deref() == Some(ip))
    }
}

/// A data node or a sentinel, for the roll (which goes through both kinds).
#[derive(Clone, Copy, Debug)]
pub enum Rolling<'a> {
    Data(&'a DataNode),
    Sentinel(&'a Sentinel),
}

impl Rolling<'_> {
    fn member(&self) -> &dyn RollMember {
        match self {
            Rolling::Data(d) => *d,
            Rolling::Sentinel(s) => *s,
        }
    }
}

impl RollMember for Rolling<'_> {
    fn name(&self) -> &str {
        self.member().name()
    }

    fn ready(&self) -> bool {
        self.member().ready()
    }

    fn revisions(&self) -> &Revisions {
        self.member().revisions()
    }

    fn answers(&self) -> bool {
        self.member().answers()
    }

    fn restarts_freely(&self) -> bool {
        self.member().restarts_freely()
    }

    fn plays_its_part(&self) -> bool {
        self.member().plays_its_part()
    }
}

impl RollMember for DataNode {
    fn name(&self) -> &str {
        &self.facts.name
    }

    fn ready(&self) -> bool {
        self.facts.ready
    }

    fn revisions(&self) -> &Revisions {
        &self.facts.revisions
    }

    fn answers(&self) -> bool {
        self.answer.is_some()
    }

    fn restarts_freely(&self) -> bool {
        self.role() == Some(Role::Replica)
    }

    fn plays_its_part(&self) -> bool {
        let Some(answer) = &self.answer else {
            return false;
        };
        match &answer.replication.primary {
            None => true,
            Some(link) => link.link_up && !link.sync_in_progress,
        }
    }
}

impl RollMember for Sentinel {
    fn name(&self) -> &str {
        &self.facts.name
    }

    fn ready(&self) -> bool {
        self.facts.ready
    }

    fn revisions(&self) -> &Revisions {
        &self.facts.revisions
    }

    fn answers(&self) -> bool {
        self.answer.is_some()
    }

    fn restarts_freely(&self) -> bool {
        true
    }

    fn plays_its_part(&self) -> bool {
        self.monitored().is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crd_types::ValkeyReplicationSpec;
    use crd_types::replication::ReplicationSwitchover;

    #[test]
    fn the_group_reads_the_spec_once() {
        let mut r = ValkeyReplication::new(
            "sessions",
            ValkeyReplicationSpec {
                replicas: 3,
                ..Default::default()
            },
        );
        r.spec.switchover = Some(ReplicationSwitchover {
            id: "s1".into(),
            member: 2,
        });
        let g = Group::of(&r);
        assert_eq!((g.data_nodes, g.sentinels), (3, 3));
        assert_eq!(g.options.quorum, 2);
        assert_eq!(g.options.down_after_ms, 5000);
        assert_eq!(g.switchover.as_ref().unwrap().target, "sessions-2");
        assert_eq!(g.positions().len(), 6);
        assert!(g.wants(At::Sentinel(2)) && !g.wants(At::Data(3)));
        let g = Group::of(&r);
        assert_eq!(g.member_name(At::Sentinel(1)), "sessions-sentinel-1");
    }

    #[test]
    fn only_differing_options_are_set() {
        let want = SentinelOptions {
            quorum: 2,
            down_after_ms: 5000,
            failover_timeout_ms: 60000,
            parallel_syncs: 1,
        };
        assert!(want.differing(&want).is_empty());
        let seen = SentinelOptions {
            quorum: 3,
            down_after_ms: 30000,
            ..want.clone()
        };
        assert_eq!(
            want.differing(&seen),
            [
                ("quorum".to_string(), "2".to_string()),
                ("down-after-milliseconds".into(), "5000".into())
            ]
        );
    }
}
