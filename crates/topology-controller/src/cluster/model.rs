//! Model (layer 2): what the planner and status reason about. The spec, read once into a
//! [`Shape`], and each member as observed: its position, address, revisions and what its
//! Valkey answered ([`Member`]). Built by the binary from the API server and Valkey.

use crd_types::ValkeyCluster;
use crd_types::config::{MAX_CONFIG_DIRECTIVES, ValkeyConfig};
use crd_types::live_config::Version;
use crd_types::names;
use crd_types::node::Role;
use kube::ResourceExt;

use crate::cluster::cluster_nodes::ClusterView;
use crate::cluster::slot_jobs::SlotJob;
use crate::shared::acl::{AclUser, ReplicationPassword};
use crate::shared::info::ReplicationInfo;
use crate::shared::member_facts::{Address, LiveConfig, Revisions, SwitchoverRequest};

/// Where a member sits in its cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position {
    pub shard: u32,
    pub member: u32,
}

/// What the spec asks for, read once from the ValkeyCluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shape {
    pub cluster: String,
    pub shards: u32,
    pub replicas_per_shard: u32,
    pub switchover: Option<SwitchoverRequest>,
    /// The config members get ([`member_config`]): its live directives are set on running
    /// members.
    pub config: ValkeyConfig,
    /// The template's image: no member rolls onto it while its version is refused
    /// ([`crate::shared::target`]).
    pub image: String,
    /// Slots move with Valkey's atomic slot migration where both ends run 9.0+, unless the
    /// cluster's [`SLOT_MIGRATION_ANNOTATION`] says `classic`.
    pub atomic_migration: bool,
    /// The `replication` user's password, once the operator password is read (see
    /// [`crate::shared::acl`]); `None` leaves the members' users alone.
    pub replication_password: Option<ReplicationPassword>,
}

/// Annotation on a ValkeyCluster choosing how slots move: `classic` keeps the
/// IMPORTING/MIGRATING path on every version (to compare, or to step around a 9.x defect).
pub const SLOT_MIGRATION_ANNOTATION: &str = "valkey.rs/slot-migration";

impl Shape {
    pub fn of(cluster: &ValkeyCluster) -> Shape {
        let name = cluster.name_any();
        let spec = &cluster.spec;
        Shape {
            switchover: spec.switchover.as_ref().map(|s| SwitchoverRequest {
                id: s.id.clone(),
                target: names::cluster_member_name(&name, count(s.shard), count(s.member)),
            }),
            config: member_config(&spec.common.template.config),
            image: spec.common.template.image.clone(),
            atomic_migration: cluster
                .annotations()
                .get(SLOT_MIGRATION_ANNOTATION)
                .is_none_or(|how| how != "classic"),
            shards: count(spec.shards),
            replicas_per_shard: count(spec.replicas_per_shard),
            cluster: name,
            replication_password: None,
        }
    }

    /// Whether the spec wants a member at `at`.
    pub fn wants(&self, at: Position) -> bool {
        at.shard < self.shards && at.member <= self.replicas_per_shard
    }

    /// How many members the spec wants.
    pub fn member_count(&self) -> usize {
        (self.shards * (1 + self.replicas_per_shard)) as usize
    }

    /// Every position the spec asks for, shard-major.
    pub fn positions(&self) -> Vec<Position> {
        let members = 1 + self.replicas_per_shard;
        (0..self.shards)
            .flat_map(|shard| (0..members).map(move |member| Position { shard, member }))
            .collect()
    }
}

/// What every member runs unless the template's config sets it (or is full: a member must
/// stay within the directive limit). All are live directives: adding them rolls nothing.
/// - Replica migration off: Valkey's own moves a replica to another shard's orphaned
///   primary; the planner, which places every replica by its position, would move it back,
///   a full sync each way.
/// - [`NODE_TIMEOUT_MS`] rather than Valkey's 15 s, and [`BUSY_REPLY_MS`] below it.
const MEMBER_DEFAULTS: [(&str, &str); 3] = [
    ("cluster-allow-replica-migration", "no"),
    ("cluster-node-timeout", NODE_TIMEOUT_MS),
    ("busy-reply-threshold", BUSY_REPLY_MS),
];

/// How long members miss a peer before they flag it failing. A frozen or cut-off primary
/// is failed over by Valkey only after that, and its shard takes no write meanwhile: for
/// 19-20 s at Valkey's 15 s, 5.7-6.9 s at 4 s, 4.7-5.1 s at 3 s. Load that is no fault (a
/// writer, a scale-out, a primary stopped for 1 s of every 2, a 30 s BGSAVE) made no member
/// flag a peer even at 3 s (docs/benchmarks.md, `bench-cluster node-timeout`). Kubernetes
/// knows later (a frozen pod's readiness probe fails after 10-15 s), so the operator adds
/// no failover of its own here.
const NODE_TIMEOUT_MS: &str = "3000";

/// How long a script (or a module command) runs before other clients get BUSY. Until then
/// the server answers nobody, its peers included; after it, it serves the cluster bus
/// between script steps. Valkey's 5 s is above [`NODE_TIMEOUT_MS`]: an 8 s script had its
/// primary flagged `fail` after 3.5 s; at 2 s it never was (measured on 8.0).
const BUSY_REPLY_MS: &str = "2000";

/// The config every member gets: the template's, with [`MEMBER_DEFAULTS`] where it says
/// nothing.
pub fn member_config(template: &ValkeyConfig) -> ValkeyConfig {
    let mut config = template.clone();
    for (directive, value) in MEMBER_DEFAULTS {
        if !config.0.keys().any(|k| k.eq_ignore_ascii_case(directive))
            && (config.0.len() as u64) < MAX_CONFIG_DIRECTIVES
        {
            config.0.insert(directive.to_string(), value.to_string());
        }
    }
    config
}

/// A count or index from the spec. The API refuses negative ones (CEL); one written before
/// that rule counts as 0.
fn count(value: i32) -> u32 {
    u32::try_from(value).unwrap_or(0)
}

/// What Valkey said when asked.
#[derive(Clone, Debug)]
pub struct Reply {
    pub view: ClusterView,
    pub replication: ReplicationInfo,
    /// `CLUSTER SHARDS` as node ids grouped by shard id; `None` when not asked.
    pub shard_groups: Option<Vec<Vec<String>>>,
    /// `CLUSTER INFO` says `cluster_state:ok`; `None` when not asked.
    pub cluster_state_ok: Option<bool>,
    /// Its live directives; `None` when not asked or its version is unknown.
    pub live_config: Option<LiveConfig>,
    /// Its atomic slot migration jobs (`CLUSTER GETSLOTMIGRATIONS`); `None` before 9.0.
    pub slot_jobs: Option<Vec<SlotJob>>,
    /// Its `replication` ACL user (`Some(None)`: it has none); `None` when not read.
    pub replication_user: Option<Option<AclUser>>,
}

/// One existing member ValkeyNode and what it reports.
#[derive(Clone, Debug)]
pub struct Member {
    pub name: String,
    pub at: Position,
    /// Published by service-controller; `None` until then.
    pub address: Option<Address>,
    /// The pod passes its readiness probe.
    pub ready: bool,
    pub revisions: Revisions,
    /// `None` when the member could not be asked.
    pub reply: Option<Reply>,
    /// Why Kubernetes knows its server is not running, when it does (see
    /// [`crate::cluster::members::server_gone`]): only then may its replica take over without waiting
    /// for Valkey to declare it failed.
    pub gone: Option<String>,
}

impl Member {
    /// Its Valkey node id, as it says itself.
    pub fn id(&self) -> Option<&str> {
        Some(self.reply.as_ref()?.view.myself().id.as_str())
    }

    /// The node id of the primary it follows, as it says itself.
    pub fn primary_id(&self) -> Option<&str> {
        self.reply.as_ref()?.view.myself().primary_id.as_deref()
    }

    /// The replicas its view files under another shard id than their primary's, as
    /// (replica id, primary id); empty when its `CLUSTER SHARDS` was not read.
    pub fn replicas_filed_apart(&self) -> Vec<(String, String)> {
        let Some(reply) = self.reply.as_ref() else {
            return Vec::new();
        };
        let Some(groups) = reply.shard_groups.as_ref() else {
            return Vec::new();
        };
        let group_of = |id: &str| groups.iter().position(|g| g.iter().any(|n| n == id));
        reply
            .view
            .nodes()
            .iter()
            .filter_map(|n| {
                let primary = n.primary_id.as_deref().filter(|_| n.flags.replica)?;
                let (mine, theirs) = (group_of(&n.id)?, group_of(primary)?);
                (mine != theirs).then(|| (n.id.clone(), primary.to_string()))
            })
            .collect()
    }

    /// The Valkey version it runs (`INFO server`); `None` when unknown.
    pub fn version(&self) -> Option<Version> {
        Some(self.reply.as_ref()?.live_config.as_ref()?.version)
    }

    /// Its role by `INFO replication`.
    pub fn role(&self) -> Option<Role> {
        Some(self.reply.as_ref()?.replication.role)
    }

    /// A replica whose link to its primary is up and not resyncing.
    pub fn is_synced_replica(&self) -> bool {
        self.reply.as_ref().is_some_and(|r| {
            r.replication.role == Role::Replica
                && r.replication
                    .primary
                    .as_ref()
                    .is_some_and(|p| p.link_up && !p.sync_in_progress)
        })
    }

    /// Its replication offset: how far a replica has applied its primary's stream, or a
    /// primary's own; 0 when it did not answer.
    pub fn offset(&self) -> i64 {
        self.reply
            .as_ref()
            .map_or(0, |r| match &r.replication.primary {
                Some(link) => link.repl_offset,
                None => r.replication.repl_offset,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crd_types::ValkeyClusterSpec;
    use crd_types::cluster::ClusterSwitchover;

    fn cluster(shards: i32, replicas: i32) -> ValkeyCluster {
        ValkeyCluster::new(
            "cache",
            ValkeyClusterSpec {
                shards,
                replicas_per_shard: replicas,
                ..Default::default()
            },
        )
    }

    #[test]
    fn positions_cover_every_shard_and_member() {
        let p = Shape::of(&cluster(3, 1)).positions();
        assert_eq!(p.len(), 6);
        assert_eq!(
            p[0],
            Position {
                shard: 0,
                member: 0
            }
        );
        assert_eq!(
            p[5],
            Position {
                shard: 2,
                member: 1
            }
        );
        assert_eq!(Shape::of(&cluster(2, 0)).positions().len(), 2);
    }

    #[test]
    fn the_shape_reads_the_spec_once() {
        let mut c = cluster(3, 2);
        c.spec.switchover = Some(ClusterSwitchover {
            id: "s1".into(),
            shard: 1,
            member: 2,
        });
        let shape = Shape::of(&c);
        assert_eq!((shape.shards, shape.replicas_per_shard), (3, 2));
        assert_eq!(shape.member_count(), 9);
        assert_eq!(
            shape.switchover,
            Some(SwitchoverRequest {
                id: "s1".into(),
                target: "cache-1-2".into()
            })
        );
        assert!(shape.wants(Position {
            shard: 2,
            member: 2
        }));
        assert!(!shape.wants(Position {
            shard: 3,
            member: 0
        }));
        // Negative counts (refused at admission) read as none.
        let none = Shape::of(&cluster(-1, -1));
        assert_eq!((none.shards, none.replicas_per_shard), (0, 0));
        assert!(none.positions().is_empty());
    }
}
