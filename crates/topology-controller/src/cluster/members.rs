//! Object builders (layer 3): the ValkeyNodes a ValkeyCluster is made of,
//! `shards x (1 + replicasPerShard)` members named `<cluster>-<shard>-<member>`, each stamped
//! from the cluster's template, and their positions read back from their labels.

use std::collections::BTreeMap;

use crd_types::names::{self, labels};
use crd_types::node::{Mode, NodeCluster};
use crd_types::template::Scheduling;
use crd_types::{ValkeyCluster, ValkeyNode};
use k8s_openapi::api::core::v1::{Pod, TopologySpreadConstraint};
use kube::ResourceExt;

use crate::cluster::model::{Member, Position, Shape, member_config};

use crate::shared::members::{MemberOf, announced_address, member_node, revisions, spread_softly};

/// The member's position, read from its labels (`None` for a node that is not a member).
pub fn position_of(node: &ValkeyNode) -> Option<Position> {
    let l = node.labels();
    Some(Position {
        shard: l.get(labels::SHARD)?.parse().ok()?,
        member: l.get(labels::MEMBER)?.parse().ok()?,
    })
}

/// A member ValkeyNode as the planner sees it before asking its Valkey: its position, the
/// address it announces, its readiness and revisions (`None` for a node that is not a
/// member).
pub fn observed(node: &ValkeyNode) -> Option<Member> {
    let workload = node.status.as_ref().and_then(|s| s.workload.as_ref());
    Some(Member {
        name: node.name_any(),
        at: position_of(node)?,
        address: announced_address(node),
        ready: workload.is_some_and(|w| w.ready),
        revisions: revisions(node),
        reply: None,
        gone: None,
    })
}

/// Why the pod's valkey container is known not to run: the kubelet reports it waiting to
/// start again after it terminated (a crash loop), in a pod that is not being deleted. It
/// says nothing of a running container, of a pod being deleted (its preStop hook may be
/// handing the primary role over) or of a missing pod (a pod force-deleted from a lost
/// Node may still run there): a primary that may still serve is never replaced.
pub fn server_gone(pod: &Pod) -> Option<String> {
    if pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let container = pod
        .status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == names::VALKEY_CONTAINER)?;
    let waiting = container.state.as_ref()?.waiting.as_ref()?;
    let exited = container.last_state.as_ref()?.terminated.as_ref()?;
    Some(format!(
        "its pod {} reports the valkey container {} after it exited with code {}",
        pod.name_any(),
        waiting.reason.as_deref().unwrap_or("waiting"),
        exited.exit_code
    ))
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

/// The addresses members announce, by position, read from their ValkeyNodes: what a
/// memory-only member is told of its shard ([`ShardPeers::of`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShardPeers(BTreeMap<Position, String>);

impl ShardPeers {
    pub fn from_nodes(nodes: &[ValkeyNode]) -> Self {
        Self(
            nodes
                .iter()
                .filter_map(|n| Some((position_of(n)?, announced_address(n)?.ip)))
                .collect(),
        )
    }

    /// The context of the member at `at` of a memory-only cluster: the other wanted
    /// members of its shard that have an address; `None` for any other cluster, so its
    /// members' specs never change with an address.
    pub fn of(&self, cluster: &ValkeyCluster, at: Position) -> Option<NodeCluster> {
        if !cluster.spec.common.template.is_memory_only() {
            return None;
        }
        let shape = Shape::of(cluster);
        let shard_peers = self
            .0
            .iter()
            .filter(|(p, _)| p.shard == at.shard && **p != at && shape.wants(**p))
            .map(|(_, ip)| ip.clone())
            .collect();
        Some(NodeCluster { shard_peers })
    }
}

/// The member at `at`, told `peers` when the cluster is memory-only. `allowed_revision` is
/// the roll gate's current value (see [`crate::cluster::plan::roll`]): it must be sent on
/// every apply, or the field would be dropped.
pub fn member(
    cluster: &ValkeyCluster,
    at: Position,
    allowed_revision: Option<String>,
    peers: &ShardPeers,
) -> ValkeyNode {
    let cluster_name = cluster.name_any();
    let mut template = cluster.spec.common.template.clone();
    template.config = member_config(&cluster.spec.common.template.config);
    let scheduling = template.scheduling.get_or_insert_with(Scheduling::default);
    spread_shard(
        &mut scheduling.topology_spread_constraints,
        &cluster_name,
        at,
    );
    let member = MemberOf {
        name: names::cluster_member_name(&cluster_name, at.shard, at.member),
        mode: Mode::Cluster,
        template,
        auth: crate::shared::auth::member_auth(cluster),
        labels: member_labels(&cluster_name, at),
        data: true,
        replication: None,
        cluster: peers.of(cluster, at),
    };
    member_node(cluster, &cluster.spec.common, member, allowed_revision)
}

/// Adds, per spread key the user did not already constrain, a soft constraint keeping one
/// shard's members apart: losing one Kubernetes node (or zone) then costs a shard at most
/// one member, so a replica is left to take over.
fn spread_shard(constraints: &mut Vec<TopologySpreadConstraint>, cluster: &str, at: Position) {
    let selector = BTreeMap::from([
        (labels::CLUSTER.to_string(), cluster.to_string()),
        (labels::SHARD.to_string(), at.shard.to_string()),
    ]);
    spread_softly(constraints, &selector);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::members::{SPREAD_KEYS, needs_apply, spread_of};
    use crd_types::ValkeyClusterSpec;
    use crd_types::ValkeyNodeSpec;
    use crd_types::node::RolloutPolicy;
    use crd_types::template::Announce;

    fn pod_with(valkey: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "cache-0-0-0"},
            "status": {"phase": "Running", "containerStatuses": [valkey]},
        }))
        .unwrap()
    }

    #[test]
    fn a_container_waiting_after_it_exited_is_a_gone_server() {
        let crash_loop = serde_json::json!({
            "name": "valkey", "image": "v", "imageID": "", "ready": false, "restartCount": 1,
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"exitCode": 137}},
        });
        let why = server_gone(&pod_with(crash_loop.clone())).unwrap();
        assert!(
            why.contains("CrashLoopBackOff") && why.contains("137"),
            "{why}"
        );

        // Being deleted: its preStop hook may be handing over; not ours to judge.
        let mut deleting = pod_with(crash_loop.clone());
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        assert_eq!(server_gone(&deleting), None);

        // Running, or waiting for its first start (it never served): nothing known.
        let running = serde_json::json!({
            "name": "valkey", "image": "v", "imageID": "", "ready": true, "restartCount": 1,
            "state": {"running": {}}, "lastState": {"terminated": {"exitCode": 137}},
        });
        assert_eq!(server_gone(&pod_with(running)), None);
        let first = serde_json::json!({
            "name": "valkey", "image": "v", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": "ContainerCreating"}},
        });
        assert_eq!(server_gone(&pod_with(first)), None);
        let other = serde_json::json!({
            "name": "exporter", "image": "v", "imageID": "", "ready": false, "restartCount": 1,
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"exitCode": 1}},
        });
        assert_eq!(server_gone(&pod_with(other)), None);
    }

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
        let n = member(&c, at, Some("abc".into()), &ShardPeers::default());
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
        assert_eq!(n.spec.template.image, c.spec.common.template.image);
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
            &ShardPeers::default(),
        );
        let spread = spread_of(&n);
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
        c.spec.common.template.scheduling = Some(Scheduling {
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
            &ShardPeers::default(),
        );
        let spread = spread_of(&n);
        assert_eq!(spread.len(), 2);
        assert_eq!(spread[0].max_skew, 2);
        assert_eq!(spread[1].topology_key, "topology.kubernetes.io/zone");
    }

    #[test]
    fn member_defaults_apply_unless_the_user_says() {
        let at = Position {
            shard: 0,
            member: 0,
        };
        let n = member(&cluster(1, 1), at, None, &ShardPeers::default());
        let config = &n.spec.template.config.0;
        assert_eq!(config["cluster-allow-replica-migration"], "no");
        assert_eq!(config["cluster-node-timeout"], "3000");
        assert_eq!(config["busy-reply-threshold"], "2000");
        let mut c = cluster(1, 1);
        let template = &mut c.spec.common.template.config.0;
        template.insert("Cluster-Allow-Replica-Migration".into(), "yes".into());
        template.insert("CLUSTER-NODE-TIMEOUT".into(), "15000".into());
        template.insert("busy-reply-threshold".into(), "5000".into());
        let config = member(&c, at, None, &ShardPeers::default())
            .spec
            .template
            .config
            .0;
        assert_eq!(config.len(), 3, "{config:?}");
        assert_eq!(config["Cluster-Allow-Replica-Migration"], "yes");
        assert_eq!(config["CLUSTER-NODE-TIMEOUT"], "15000");
    }

    #[test]
    fn a_full_template_gets_no_default() {
        let mut c = cluster(1, 0);
        let template = &mut c.spec.common.template.config.0;
        for i in 0..crd_types::config::MAX_CONFIG_DIRECTIVES {
            template.insert(format!("d{i:03}"), "x".into());
        }
        let at = Position {
            shard: 0,
            member: 0,
        };
        let config = member(&c, at, None, &ShardPeers::default())
            .spec
            .template
            .config
            .0;
        assert_eq!(
            config.len() as u64,
            crd_types::config::MAX_CONFIG_DIRECTIVES
        );
        assert!(!config.contains_key("cluster-node-timeout"));
    }

    #[test]
    fn foreign_nodes_have_no_position() {
        let n = ValkeyNode::new("x", ValkeyNodeSpec::default());
        assert_eq!(position_of(&n), None);
    }

    #[test]
    fn an_unchanged_member_needs_no_apply_and_a_removed_directive_does() {
        let mut c = cluster(1, 0);
        c.spec
            .common
            .template
            .config
            .0
            .insert("maxmemory".into(), "1gb".into());
        let at = Position {
            shard: 0,
            member: 0,
        };
        let live = member(&c, at, None, &ShardPeers::default());
        assert!(!needs_apply(
            &member(&c, at, None, &ShardPeers::default()),
            &live
        ));
        c.spec.common.template.config.0.remove("maxmemory");
        assert!(needs_apply(
            &member(&c, at, None, &ShardPeers::default()),
            &live
        ));
        let mut unowned = live.clone();
        unowned.metadata.owner_references = None;
        assert!(needs_apply(&live, &unowned));
    }

    #[test]
    fn a_member_is_reached_at_the_address_it_announces() {
        use crd_types::ValkeyNodeStatus;
        use crd_types::node::{EndpointStatus, WorkloadStatus};

        let c = cluster(1, 0);
        let at = Position {
            shard: 0,
            member: 0,
        };
        let mut node = member(&c, at, Some("r1".into()), &ShardPeers::default());
        node.metadata.generation = Some(2);
        assert_eq!(observed(&node).unwrap().address, None, "no Service IP yet");
        node.status = Some(ValkeyNodeStatus {
            endpoint: Some(EndpointStatus {
                cluster_ip: Some("10.96.0.7".into()),
                ..Default::default()
            }),
            workload: Some(WorkloadStatus {
                ready: true,
                pod_ip: Some("10.1.0.3".into()),
                revision: Some("r1".into()),
                desired_revision: Some("r2".into()),
                observed_generation: Some(2),
                ..Default::default()
            }),
            ..Default::default()
        });
        let m = observed(&node).unwrap();
        assert_eq!(m.address.as_ref().map(|a| a.ip.as_str()), Some("10.96.0.7"));
        assert_eq!(m.at, at);
        assert!(m.ready && m.revisions.observed);
        assert_eq!(m.revisions.allowed.as_deref(), Some("r1"));
        node.spec.template.announce = Announce::PodIP;
        assert_eq!(observed(&node).unwrap().address.unwrap().ip, "10.1.0.3");
    }

    #[test]
    fn a_memory_only_member_is_told_its_shards_other_wanted_members() {
        use crd_types::ValkeyNodeStatus;
        use crd_types::node::EndpointStatus;
        use crd_types::template::{MemoryOnly, ScratchVolume};

        let mut c = cluster(2, 2);
        let none = ShardPeers::default();
        let mut nodes = vec![];
        for shard in 0..2 {
            for m in 0..4 {
                let at = Position { shard, member: m };
                let mut node = member(&c, at, None, &none);
                node.status = Some(ValkeyNodeStatus {
                    endpoint: Some(EndpointStatus {
                        cluster_ip: Some(format!("10.96.{shard}.{m}")),
                        ..Default::default()
                    }),
                    ..Default::default()
                });
                nodes.push(node);
            }
        }
        let peers = ShardPeers::from_nodes(&nodes);
        let at = Position {
            shard: 1,
            member: 0,
        };
        assert_eq!(peers.of(&c, at), None, "a cluster with a dataset on disk");
        assert_eq!(member(&c, at, None, &peers).spec.cluster, None);

        c.spec.common.template.memory_only = Some(MemoryOnly {
            volume: ScratchVolume::Memory,
        });
        // Member 3 of each shard is not wanted (2 replicas): it is leaving.
        let told = member(&c, at, None, &peers).spec.cluster.unwrap();
        assert_eq!(told.shard_peers, ["10.96.1.1", "10.96.1.2"]);
    }
}
