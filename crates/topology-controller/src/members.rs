//! Object builders (layer 3): the ValkeyNodes a ValkeyCluster is made of,
//! `shards x (1 + replicasPerShard)` members named `<cluster>-<shard>-<member>`, each stamped
//! from the cluster's template, and their positions read back from their labels.

use std::collections::BTreeMap;

use crd_types::config::MAX_CONFIG_DIRECTIVES;
use crd_types::names::{self, labels};
use crd_types::node::{Mode, RolloutPolicy};
use crd_types::template::Scheduling;
use crd_types::{ValkeyCluster, ValkeyNode, ValkeyNodeSpec};
use k8s_openapi::api::core::v1::TopologySpreadConstraint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::{Resource, ResourceExt};

use crate::model::Position;

/// Valkey's own replica migration moves a replica to another shard's orphaned primary; the
/// planner, which places every replica by its position, would move it back, a full sync each
/// way. So it is off unless the user's config says otherwise.
const REPLICA_MIGRATION: (&str, &str) = ("cluster-allow-replica-migration", "no");

/// Spread over Kubernetes nodes, and over zones when the nodes carry one.
const SPREAD_KEYS: [&str; 2] = ["kubernetes.io/hostname", "topology.kubernetes.io/zone"];

/// The member's position, read from its labels (`None` for a node that is not a member).
pub fn position_of(node: &ValkeyNode) -> Option<Position> {
    let l = node.labels();
    Some(Position {
        shard: l.get(labels::SHARD)?.parse().ok()?,
        member: l.get(labels::MEMBER)?.parse().ok()?,
    })
}

/// Labels of a member; the shard and member labels are how the controller finds positions
/// again, and the pods inherit them for spreading.
pub fn member_labels(cluster: &str, at: Position) -> BTreeMap<String, String> {
    BTreeMap::from([
        (labels::CLUSTER.to_string(), cluster.to_string()),
        (labels::SHARD.to_string(), at.shard.to_string()),
        (labels::MEMBER.to_string(), at.member.to_string()),
        (labels::PART_OF.to_string(), cluster.to_string()),
        (
            labels::MANAGED_BY.to_string(),
            labels::MANAGED_BY_VALUE.to_string(),
        ),
    ])
}

/// The member at `at`. `allowed_revision` is the roll gate's current value (see
/// [`crate::plan::roll`]): it must be sent on every apply, or the field would be dropped.
pub fn member(
    cluster: &ValkeyCluster,
    at: Position,
    allowed_revision: Option<String>,
) -> ValkeyNode {
    let cluster_name = cluster.name_any();
    let mut template = cluster.spec.template.clone();
    let (directive, value) = REPLICA_MIGRATION;
    let config = &mut template.config.0;
    // Not when the user's config is full: a member must stay within the directive limit.
    if !config.keys().any(|k| k.eq_ignore_ascii_case(directive))
        && (config.len() as u64) < MAX_CONFIG_DIRECTIVES
    {
        config.insert(directive.to_string(), value.to_string());
    }
    let scheduling = template.scheduling.get_or_insert_with(Scheduling::default);
    spread_shard(
        &mut scheduling.topology_spread_constraints,
        &cluster_name,
        at,
    );
    ValkeyNode {
        metadata: ObjectMeta {
            name: Some(names::cluster_member_name(
                &cluster_name,
                at.shard,
                at.member,
            )),
            namespace: cluster.namespace(),
            labels: Some(member_labels(&cluster_name, at)),
            owner_references: cluster.controller_owner_ref(&()).map(|o| vec![o]),
            ..Default::default()
        },
        spec: ValkeyNodeSpec {
            mode: Mode::Cluster,
            template,
            auth: Some(crate::auth::member_auth(cluster)),
            tls: cluster.spec.tls.clone(),
            rollout_policy: RolloutPolicy::Gated,
            allowed_revision,
        },
        status: None,
    }
}

/// Adds, per spread key the user did not already constrain, a soft constraint keeping one
/// shard's members apart: losing one Kubernetes node (or zone) then costs a shard at most
/// one member, so a replica is left to take over.
fn spread_shard(constraints: &mut Vec<TopologySpreadConstraint>, cluster: &str, at: Position) {
    for key in SPREAD_KEYS {
        if constraints.iter().any(|c| c.topology_key == key) {
            continue;
        }
        constraints.push(TopologySpreadConstraint {
            topology_key: key.to_string(),
            max_skew: 1,
            when_unsatisfiable: "ScheduleAnyway".to_string(),
            label_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([
                    (labels::CLUSTER.to_string(), cluster.to_string()),
                    (labels::SHARD.to_string(), at.shard.to_string()),
                ])),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crd_types::ValkeyClusterSpec;

    fn cluster(shards: i32, replicas: i32) -> ValkeyCluster {
        let mut c = ValkeyCluster::new(
            "cache",
            ValkeyClusterSpec {
                shards,
                replicas_per_shard: replicas,
                ..Default::default()
            },
        );
        c.metadata.namespace = Some("prod".into());
        c.metadata.uid = Some("uid-cache".into());
        c
    }

    #[test]
    fn member_is_a_gated_cluster_node_owned_by_the_cluster() {
        let c = cluster(3, 1);
        let at = Position {
            shard: 2,
            member: 1,
        };
        let n = member(&c, at, Some("abc".into()));
        assert_eq!(n.name_any(), "cache-2-1");
        assert_eq!(n.namespace().as_deref(), Some("prod"));
        assert_eq!(n.spec.mode, Mode::Cluster);
        assert_eq!(n.spec.rollout_policy, RolloutPolicy::Gated);
        assert_eq!(n.spec.allowed_revision.as_deref(), Some("abc"));
        assert_eq!(position_of(&n), Some(at));
        let owner = &n.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.controller),
            ("ValkeyCluster", Some(true))
        );
        assert_eq!(n.spec.template.image, c.spec.template.image);
    }

    #[test]
    fn members_of_a_shard_spread_softly_by_host_and_zone() {
        let n = member(
            &cluster(3, 1),
            Position {
                shard: 1,
                member: 0,
            },
            None,
        );
        let spread = &n
            .spec
            .template
            .scheduling
            .unwrap()
            .topology_spread_constraints;
        let keys: Vec<&str> = spread.iter().map(|c| c.topology_key.as_str()).collect();
        assert_eq!(keys, SPREAD_KEYS);
        for c in spread {
            assert_eq!(c.when_unsatisfiable, "ScheduleAnyway");
            let selector = c
                .label_selector
                .as_ref()
                .unwrap()
                .match_labels
                .as_ref()
                .unwrap();
            assert_eq!(selector[labels::SHARD], "1");
            assert_eq!(selector[labels::CLUSTER], "cache");
        }
    }

    #[test]
    fn a_users_constraint_on_a_key_wins() {
        let mut c = cluster(1, 1);
        c.spec.template.scheduling = Some(Scheduling {
            topology_spread_constraints: vec![TopologySpreadConstraint {
                topology_key: "kubernetes.io/hostname".into(),
                max_skew: 2,
                when_unsatisfiable: "DoNotSchedule".into(),
                ..Default::default()
            }],
            ..Default::default()
        });
        let n = member(
            &c,
            Position {
                shard: 0,
                member: 0,
            },
            None,
        );
        let spread = n
            .spec
            .template
            .scheduling
            .unwrap()
            .topology_spread_constraints;
        assert_eq!(spread.len(), 2);
        assert_eq!(spread[0].max_skew, 2);
        assert_eq!(spread[1].topology_key, "topology.kubernetes.io/zone");
    }

    #[test]
    fn replica_migration_is_off_unless_the_user_says() {
        let at = Position {
            shard: 0,
            member: 0,
        };
        let n = member(&cluster(1, 1), at, None);
        assert_eq!(
            n.spec.template.config.0["cluster-allow-replica-migration"],
            "no"
        );
        let mut c = cluster(1, 1);
        c.spec
            .template
            .config
            .0
            .insert("Cluster-Allow-Replica-Migration".into(), "yes".into());
        let config = member(&c, at, None).spec.template.config.0;
        assert_eq!(config.len(), 1, "{config:?}");
        assert_eq!(config["Cluster-Allow-Replica-Migration"], "yes");
    }

    #[test]
    fn foreign_nodes_have_no_position() {
        let n = ValkeyNode::new("x", ValkeyNodeSpec::default());
        assert_eq!(position_of(&n), None);
    }
}
