//! Object builders: the ValkeyNodes of a ValkeyReplication (data nodes `<name>-<i>`, mode
//! Standalone, and sentinels `<name>-sentinel-<j>`, mode Sentinel), and their positions read
//! back from their labels and mode.

use std::collections::BTreeMap;

use crd_types::cluster::Phase;
use crd_types::names::{self, components, labels};
use crd_types::node::{Mode, NodeReplication};
use crd_types::pod_template::PodTemplate;
use crd_types::template::{Auth, Scheduling, ValkeyNodeTemplate};
use crd_types::{ValkeyNode, ValkeyReplication, ValkeyReplicationStatus};
use kube::ResourceExt;

use crate::replication::model::{At, Facts, Group, data_config};
use crate::shared::auth;
use crate::shared::members::{MemberOf, announced_address, member_node, revisions, spread_softly};

/// The member's position, from its labels and mode (`None`: not a member).
pub fn position_of(node: &ValkeyNode) -> Option<At> {
    let index: u32 = node.labels().get(labels::MEMBER)?.parse().ok()?;
    node.labels().get(labels::REPLICATION)?;
    Some(match node.spec.mode {
        Mode::Sentinel => At::Sentinel(index),
        Mode::Standalone => At::Data(index),
        Mode::Cluster => return None,
    })
}

/// What Kubernetes says of a member ValkeyNode (`None` for a node that is no member).
pub fn observed(node: &ValkeyNode) -> Option<Facts> {
    let workload = node.status.as_ref().and_then(|s| s.workload.as_ref());
    Some(Facts {
        name: node.name_any(),
        at: position_of(node)?,
        address: announced_address(node).map(|a| a.ip),
        ready: workload.is_some_and(|w| w.ready),
        revisions: revisions(node),
        pod: workload.and_then(|w| w.pod_name.clone()),
        told_monitored: node.spec.replication.as_ref().is_some_and(|r| r.monitored),
    })
}

/// Labels of a member: how the controller finds it again; pods inherit them.
pub fn member_labels(replication: &str, index: u32) -> BTreeMap<String, String> {
    BTreeMap::from([
        (labels::REPLICATION.to_string(), replication.to_string()),
        (labels::MEMBER.to_string(), index.to_string()),
        (labels::PART_OF.to_string(), replication.to_string()),
        (
            labels::MANAGED_BY.to_string(),
            labels::MANAGED_BY_VALUE.to_string(),
        ),
    ])
}

/// What every member is told of the group (`spec.replication`), from what Kubernetes says:
/// the primary status last recorded (at creation, data node 0) by its announce address,
/// whether sentinels monitor it ([`monitored`]), the wanted sentinels' and
/// data nodes' addresses, and the spec's Sentinel options.
pub fn context(replication: &ValkeyReplication, nodes: &[ValkeyNode]) -> NodeReplication {
    let group = Group::of(replication);
    let status = replication.status.as_ref();
    let address = |name: &str| {
        nodes
            .iter()
            .find(|n| n.name_any() == name)
            .and_then(announced_address)
            .map(|a| a.ip)
    };
    let addresses = |wanted: fn(&At) -> bool| {
        let mut found: Vec<(At, String)> = nodes
            .iter()
            .filter_map(|n| Some((position_of(n)?, announced_address(n)?.ip)))
            .filter(|(at, _)| wanted(at) && group.wants(*at))
            .collect();
        found.sort();
        found.into_iter().map(|(_, ip)| ip).collect()
    };
    let first = group.member_name(At::Data(0));
    let recorded = status.and_then(|s| s.current_primary.as_deref());
    let sentinel = &replication.spec.sentinel;
    NodeReplication {
        primary_name: group.name.clone(),
        primary: address(recorded.unwrap_or(&first)),
        monitored: monitored(&group, status),
        sentinels: addresses(|at| matches!(at, At::Sentinel(_))),
        data_nodes: addresses(|at| matches!(at, At::Data(_))),
        quorum: sentinel.quorum,
        down_after_milliseconds: sentinel.down_after_milliseconds,
        failover_timeout: sentinel.failover_timeout,
        parallel_syncs: sentinel.parallel_syncs,
    }
}

/// The sentinels monitor the group: it was Ready once, or the last status saw every wanted
/// sentinel ready and monitoring the primary. Told during creation, so the first Ready is
/// never followed by a change to every member's spec (which made Ready flap False).
fn monitored(group: &Group, status: Option<&ValkeyReplicationStatus>) -> bool {
    let Some(status) = status else { return false };
    if status.phase.is_some_and(|p| p != Phase::Creating) {
        return true;
    }
    let sentinels: Vec<String> = (0..group.sentinels)
        .map(|j| group.member_name(At::Sentinel(j)))
        .collect();
    !sentinels.is_empty()
        && sentinels.iter().all(|name| {
            status
                .members
                .iter()
                .any(|m| &m.name == name && m.ready && m.link_up == Some(true))
        })
}

/// The member at `at`, told `context` (see [`context`]). `allowed_revision` is its roll
/// gate's current value: it must be sent on every apply, or the field would be dropped.
pub fn member(
    replication: &ValkeyReplication,
    at: At,
    allowed_revision: Option<String>,
    context: &NodeReplication,
) -> ValkeyNode {
    let name = replication.name_any();
    let spec = &replication.spec;
    let (mode, index, template, auth) = match at {
        At::Data(i) => (
            Mode::Standalone,
            i,
            data_template(replication),
            auth::topology_member_auth(&name, spec.common.auth.as_ref()),
        ),
        At::Sentinel(j) => (
            Mode::Sentinel,
            j,
            sentinel_template(replication),
            Auth {
                password_secret_ref: Some(auth::sentinel_secret(replication).reference),
                operator_secret_ref: auth::topology_member_auth(&name, spec.common.auth.as_ref())
                    .operator_secret_ref,
                ..Default::default()
            },
        ),
    };
    let member = MemberOf {
        name: match at {
            At::Data(i) => names::replication_member_name(&name, i),
            At::Sentinel(j) => names::sentinel_member_name(&name, j),
        },
        mode,
        template,
        auth,
        labels: member_labels(&name, index),
        data: matches!(at, At::Data(_)),
        replication: Some(context.clone()),
        cluster: None,
    };
    member_node(replication, &spec.common, member, allowed_revision)
}

/// A data node's pod: the spec's template with `min-replicas-to-write` and
/// `min-replicas-max-lag` from the spec (any spelling of them in `template.config` gives
/// way), spread softly from the other data nodes.
fn data_template(replication: &ValkeyReplication) -> ValkeyNodeTemplate {
    let spec = &replication.spec;
    let mut template = spec.common.template.clone();
    template.config = data_config(replication);
    spread(&mut template, replication, components::SERVER);
    template
}

/// A sentinel's pod: the template's image (or `sentinel.image`), announce, workload type,
/// placement and exporter (which then reports what the sentinel monitors, logged in as its
/// read-only monitoring user), the sentinel's resources, no volume (its state is small and
/// found again from its peers), no user config, and `sentinel.pod` (else the platform's
/// part of `template.pod`, see [`sentinel_pod`]).
fn sentinel_template(replication: &ValkeyReplication) -> ValkeyNodeTemplate {
    let spec = &replication.spec;
    let t = &spec.common.template;
    let mut template = ValkeyNodeTemplate {
        image: spec
            .sentinel
            .image
            .clone()
            .unwrap_or_else(|| t.image.clone()),
        image_pull_policy: t.image_pull_policy.clone(),
        workload_type: t.workload_type,
        announce: t.announce,
        resources: spec.sentinel.resources.clone(),
        scheduling: t.scheduling.clone(),
        exporter: t.exporter.clone(),
        pod: spec
            .sentinel
            .pod
            .clone()
            .or_else(|| t.pod.as_ref().map(sentinel_pod)),
        ..Default::default()
    };
    spread(&mut template, replication, components::SENTINEL);
    template
}

/// What the sentinels take of the data nodes' `template.pod`: what the platform asks of
/// every pod (labels, annotations, pull secrets, service account, identity, grace period),
/// not the data nodes' env, volumes and containers.
fn sentinel_pod(pod: &PodTemplate) -> PodTemplate {
    PodTemplate {
        security_context: pod.security_context.clone(),
        labels: pod.labels.clone(),
        annotations: pod.annotations.clone(),
        image_pull_secrets: pod.image_pull_secrets.clone(),
        service_account_name: pod.service_account_name.clone(),
        automount_service_account_token: pod.automount_service_account_token,
        termination_grace_period_seconds: pod.termination_grace_period_seconds,
        ..Default::default()
    }
}

/// Soft spread over hosts and zones among the group's members of one component.
fn spread(template: &mut ValkeyNodeTemplate, replication: &ValkeyReplication, component: &str) {
    let selector = BTreeMap::from([
        (labels::REPLICATION.to_string(), replication.name_any()),
        (labels::COMPONENT.to_string(), component.to_string()),
    ]);
    let scheduling = template.scheduling.get_or_insert_with(Scheduling::default);
    spread_softly(&mut scheduling.topology_spread_constraints, &selector);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication::model::{MIN_REPLICAS_MAX_LAG, MIN_REPLICAS_TO_WRITE};
    use crate::shared::members::spread_of;
    use crd_types::ValkeyReplicationSpec;
    use crd_types::node::RolloutPolicy;
    use crd_types::template::SecretKeyRef;

    fn replication(replicas: i32) -> ValkeyReplication {
        let mut r = ValkeyReplication::new(
            "sessions",
            ValkeyReplicationSpec {
                replicas,
                ..Default::default()
            },
        );
        r.metadata.namespace = Some("prod".into());
        r.metadata.uid = Some("uid-sessions".into());
        r
    }

    #[test]
    fn data_nodes_are_gated_standalone_servers_owned_by_the_group() {
        let r = replication(3);
        let n = member(&r, At::Data(2), Some("abc".into()), &Default::default());
        assert_eq!(n.name_any(), "sessions-2");
        assert_eq!(n.spec.mode, Mode::Standalone);
        assert_eq!(n.spec.rollout_policy, RolloutPolicy::Gated);
        assert_eq!(n.spec.allowed_revision.as_deref(), Some("abc"));
        assert_eq!(position_of(&n), Some(At::Data(2)));
        let owner = &n.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(owner.kind, "ValkeyReplication");
        let auth = n.spec.auth.unwrap();
        assert_eq!(auth.password_secret_ref.unwrap().name, "sessions-auth");
        assert_eq!(auth.operator_secret_ref.unwrap().name, "sessions-operator");
        let config = &n.spec.template.config.0;
        assert_eq!(config[MIN_REPLICAS_TO_WRITE], "1");
        assert_eq!(config[MIN_REPLICAS_MAX_LAG], "10");
    }

    #[test]
    fn a_lone_primary_needs_no_replica_to_write_and_the_spec_wins_over_the_config() {
        let r = replication(1);
        let n = member(&r, At::Data(0), None, &Default::default());
        assert_eq!(n.spec.template.config.0[MIN_REPLICAS_TO_WRITE], "0");
        let mut r = replication(3);
        r.spec.min_replicas_to_write = Some(2);
        r.spec.min_replicas_max_lag = Some(4);
        r.spec
            .common
            .template
            .config
            .0
            .insert("Min-Replicas-To-Write".into(), "0".into());
        let config = member(&r, At::Data(0), None, &Default::default())
            .spec
            .template
            .config
            .0;
        assert_eq!(config.len(), 2, "{config:?}");
        assert_eq!(config[MIN_REPLICAS_TO_WRITE], "2");
        assert_eq!(config[MIN_REPLICAS_MAX_LAG], "4");
    }

    #[test]
    fn sentinels_have_their_own_password_and_no_volume() {
        let mut r = replication(3);
        r.spec.common.template.persistence = Some(Default::default());
        r.spec
            .common
            .template
            .config
            .0
            .insert("maxmemory".into(), "1gb".into());
        r.spec.sentinel.image = Some("valkey/valkey:8.0".into());
        let n = member(&r, At::Sentinel(1), None, &Default::default());
        assert_eq!(n.name_any(), "sessions-sentinel-1");
        assert_eq!(n.spec.mode, Mode::Sentinel);
        assert_eq!(position_of(&n), Some(At::Sentinel(1)));
        assert_eq!(n.spec.template.image, "valkey/valkey:8.0");
        assert!(n.spec.template.persistence.is_none());
        assert!(n.spec.template.config.is_empty());
        let auth = n.spec.auth.unwrap();
        assert_eq!(
            auth.password_secret_ref.unwrap().name,
            "sessions-sentinel-auth"
        );
        assert_eq!(auth.operator_secret_ref.unwrap().name, "sessions-operator");
        r.spec.sentinel.password_secret_ref = Some(SecretKeyRef {
            name: "mine".into(),
            key: "k".into(),
        });
        let auth = member(&r, At::Sentinel(0), None, &Default::default())
            .spec
            .auth
            .unwrap();
        assert_eq!(auth.password_secret_ref.unwrap().name, "mine");
    }

    #[test]
    fn sentinels_run_the_templates_exporter() {
        let mut r = replication(3);
        let n = member(&r, At::Sentinel(0), None, &Default::default());
        assert!(n.spec.template.exporter.is_none());
        r.spec.common.template.exporter = Some(crd_types::template::Exporter {
            image: "oliver006/redis_exporter:v1.86.0".into(),
            port: 9121,
            resources: None,
        });
        let n = member(&r, At::Sentinel(0), None, &Default::default());
        assert_eq!(n.spec.template.exporter, r.spec.common.template.exporter);
    }

    #[test]
    fn sentinels_take_the_platforms_pod_knobs_and_not_the_data_nodes_containers() {
        use k8s_openapi::api::core::v1::{Container, EnvVar, LocalObjectReference};
        let mut r = replication(2);
        let pod = PodTemplate {
            labels: [("team".to_string(), "payments".to_string())].into(),
            annotations: [("mesh/inject".to_string(), "false".to_string())].into(),
            image_pull_secrets: vec![LocalObjectReference {
                name: "registry".into(),
            }],
            service_account_name: Some("valkey".into()),
            termination_grace_period_seconds: Some(300),
            security_context: Some(crd_types::pod_template::PodIdentity {
                run_as_user: Some(1000680000),
                run_as_group: None,
                fs_group: Some(1000680000),
            }),
            env: vec![EnvVar {
                name: "TZ".into(),
                ..Default::default()
            }],
            sidecars: vec![Container {
                name: "backup".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        r.spec.common.template.pod = Some(pod.clone());
        let data = member(&r, At::Data(0), None, &Default::default());
        assert_eq!(data.spec.template.pod.as_ref(), Some(&pod));
        let sentinel = member(&r, At::Sentinel(0), None, &Default::default());
        let taken = sentinel.spec.template.pod.unwrap();
        assert_eq!(
            (taken.labels, taken.annotations, taken.image_pull_secrets),
            (
                pod.labels.clone(),
                pod.annotations.clone(),
                pod.image_pull_secrets.clone()
            )
        );
        assert_eq!(taken.service_account_name.as_deref(), Some("valkey"));
        assert_eq!(taken.termination_grace_period_seconds, Some(300));
        assert_eq!(taken.security_context, pod.security_context);
        assert!(taken.env.is_empty() && taken.sidecars.is_empty());

        // Their own template, when given, is theirs alone; the data nodes keep theirs.
        let own = PodTemplate {
            labels: [("team".to_string(), "quorum".to_string())].into(),
            env: vec![EnvVar {
                name: "SENTINEL_ZONE".into(),
                ..Default::default()
            }],
            sidecars: vec![Container {
                name: "watcher".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        r.spec.sentinel.pod = Some(own.clone());
        let sentinel = member(&r, At::Sentinel(0), None, &Default::default());
        assert_eq!(sentinel.spec.template.pod.as_ref(), Some(&own));
        let data = member(&r, At::Data(0), None, &Default::default());
        assert_eq!(data.spec.template.pod.as_ref(), Some(&pod));
    }

    #[test]
    fn members_spread_among_their_own_kind() {
        let r = replication(3);
        for (at, component) in [(At::Data(0), "server"), (At::Sentinel(0), "sentinel")] {
            let n = member(&r, at, None, &Default::default());
            let spread = spread_of(&n);
            assert_eq!(spread.len(), 2);
            let selector = spread[0]
                .label_selector
                .as_ref()
                .unwrap()
                .match_labels
                .clone()
                .unwrap();
            assert_eq!(selector[labels::COMPONENT], component);
            assert_eq!(selector[labels::REPLICATION], "sessions");
        }
    }

    #[test]
    fn the_context_names_the_recorded_primary_and_the_wanted_members() {
        use crd_types::node::Role;
        use crd_types::node::{EndpointStatus, ValkeyNodeStatus};
        use crd_types::replication::{ReplicationMemberStatus, ValkeyReplicationStatus};
        let mut r = replication(2);
        r.spec.sentinel.replicas = 1;
        let mut nodes: Vec<ValkeyNode> = [At::Data(0), At::Data(1), At::Data(2), At::Sentinel(0)]
            .into_iter()
            .enumerate()
            .map(|(k, at)| {
                let mut n = member(&r, at, None, &Default::default());
                n.status = Some(ValkeyNodeStatus {
                    endpoint: Some(EndpointStatus {
                        cluster_ip: Some(format!("10.96.0.{k}")),
                        ..Default::default()
                    }),
                    ..Default::default()
                });
                n
            })
            .collect();
        let c = context(&r, &nodes);
        assert_eq!(
            c.primary.as_deref(),
            Some("10.96.0.0"),
            "data node 0 at creation"
        );
        assert!(!c.monitored);
        let sentinel_seen = |ready, link_up| ReplicationMemberStatus {
            name: "sessions-sentinel-0".into(),
            role: Some(Role::Sentinel),
            ready,
            link_up,
            ..Default::default()
        };
        for (seen, monitored) in [
            (sentinel_seen(true, Some(false)), false),
            (sentinel_seen(false, Some(true)), false),
            (sentinel_seen(true, Some(true)), true),
        ] {
            r.status = Some(ValkeyReplicationStatus {
                phase: Some(Phase::Creating),
                members: vec![seen.clone()],
                ..Default::default()
            });
            let told = context(&r, &nodes).monitored;
            assert_eq!(told, monitored, "creating, the sentinel seen as {seen:?}");
        }
        r.status = None;
        assert_eq!(
            c.data_nodes,
            ["10.96.0.0", "10.96.0.1"],
            "data node 2 is not wanted"
        );
        assert_eq!(c.sentinels, ["10.96.0.3"]);
        assert_eq!((c.quorum, c.down_after_milliseconds), (2, 5000));
        r.status = Some(ValkeyReplicationStatus {
            phase: Some(Phase::Degraded),
            current_primary: Some("sessions-1".into()),
            ..Default::default()
        });
        nodes.truncate(2);
        let c = context(&r, &nodes);
        assert_eq!(c.primary.as_deref(), Some("10.96.0.1"));
        assert!(c.monitored && c.sentinels.is_empty());
        let n = member(&r, At::Data(0), None, &c);
        assert_eq!(n.spec.replication, Some(c));
    }

    #[test]
    fn cluster_and_foreign_nodes_have_no_position() {
        let mut n = member(&replication(1), At::Data(0), None, &Default::default());
        n.spec.mode = Mode::Cluster;
        assert_eq!(position_of(&n), None);
        assert_eq!(position_of(&ValkeyNode::new("x", Default::default())), None);
    }
}
