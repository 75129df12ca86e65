//! ValkeyCluster: its shape, switchover, the template inside it and its NetworkPolicy.

use super::*;

#[test]
fn a_valid_cluster_is_accepted() {
    let c = cluster(json!({
        "shards": 3,
        "replicasPerShard": 1,
        "template": {"image": "valkey/valkey:8.1", "persistence": {"size": "1Gi"}},
        "switchover": {"id": "1", "shard": 2, "member": 1}
    }));
    accepted::<ValkeyCluster>(&c, None);
    accepted::<ValkeyCluster>(&c, Some(&c));
}

#[test]
fn cluster_shape_is_checked() {
    rejected::<ValkeyCluster>(
        &cluster(json!({"shards": 0})),
        None,
        "shards must be at least 1",
    );
    rejected::<ValkeyCluster>(
        &cluster(json!({"shards": 501})),
        None,
        "shards must be at most 500",
    );
    rejected::<ValkeyCluster>(
        &cluster(json!({"shards": 3, "replicasPerShard": -1})),
        None,
        "replicasPerShard cannot be negative",
    );
    rejected::<ValkeyCluster>(
        &cluster(json!({"shards": 3, "replicasPerShard": 6})),
        None,
        "replicasPerShard must be at most 5",
    );
    accepted::<ValkeyCluster>(&cluster(json!({"shards": 1, "replicasPerShard": 0})), None);
}

#[test]
fn cluster_names_leave_room_for_members() {
    let mut c = cluster(json!({"shards": 1}));
    c["metadata"]["name"] = json!("a".repeat(41));
    rejected::<ValkeyCluster>(&c, None, "at most 40 characters");
    c["metadata"]["name"] = json!("Orders");
    rejected::<ValkeyCluster>(&c, None, "start with a letter");
}

#[test]
fn switchover_must_name_an_existing_member() {
    let base = json!({"shards": 3, "replicasPerShard": 1});
    let with = |s: Value| {
        let mut spec = base.clone();
        spec["switchover"] = s;
        cluster(spec)
    };
    rejected::<ValkeyCluster>(
        &with(json!({"id": "a", "shard": 3, "member": 0})),
        None,
        "switchover.shard must name an existing shard",
    );
    rejected::<ValkeyCluster>(
        &with(json!({"id": "a", "shard": 0, "member": 2})),
        None,
        "switchover.member must name an existing member",
    );
    rejected::<ValkeyCluster>(
        &with(json!({"id": "a", "shard": -1, "member": 0})),
        None,
        "switchover.shard cannot be negative",
    );
    rejected::<ValkeyCluster>(
        &with(json!({"id": "a", "shard": 0, "member": -1})),
        None,
        "switchover.member cannot be negative",
    );
    rejected::<ValkeyCluster>(
        &with(json!({"id": "", "shard": 0, "member": 1})),
        None,
        "switchover.id must not be empty",
    );
}

#[test]
fn template_rules_apply_inside_a_cluster() {
    let old = cluster(
        json!({"shards": 3, "template": {"workloadType": "StatefulSet", "persistence": {"size": "10Gi"}}}),
    );
    rejected::<ValkeyCluster>(
        &cluster(
            json!({"shards": 3, "template": {"workloadType": "Deployment", "persistence": {"size": "10Gi"}}}),
        ),
        Some(&old),
        "workloadType is immutable",
    );
    rejected::<ValkeyCluster>(
        &cluster(json!({"shards": 3, "template": {"persistence": {"size": "1Gi"}}})),
        Some(&old),
        "persistence.size cannot shrink",
    );
    rejected::<ValkeyCluster>(
        &cluster(json!({"shards": 3, "template": {"config": {"cluster-enabled": "no"}}})),
        None,
        "config sets a directive the operator manages",
    );
}

#[test]
fn network_policy_peers_are_shaped_as_the_api_server_wants() {
    let with = |policy: Value| cluster(json!({"shards": 3, "networkPolicy": policy}));
    accepted::<ValkeyCluster>(
        &with(json!({"clients": [
            {"podSelector": {"matchLabels": {"app": "web"}}},
            {"namespaceSelector": {}, "podSelector": {}},
            {"ipBlock": {"cidr": "10.0.0.0/8"}},
        ]})),
        None,
    );
    accepted::<ValkeyCluster>(&with(json!({"clients": []})), None);
    rejected::<ValkeyCluster>(
        &with(json!({"clients": [{"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}}]})),
        None,
        "networkPolicy.clients: each peer is an ipBlock alone",
    );
    rejected::<ValkeyCluster>(
        &with(json!({"metrics": [{}]})),
        None,
        "networkPolicy.metrics: each peer is an ipBlock alone",
    );
}
