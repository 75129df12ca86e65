//! ValkeyNode: names, enums, immutable fields, config, persistence, autoResize and the
//! exporter.

use super::*;

fn with_persistence(persistence: Value) -> Value {
    node(json!({"workloadType": "StatefulSet", "persistence": persistence}))
}

#[test]
fn a_full_valid_node_is_accepted_on_create_and_on_a_no_op_update() {
    let n = node(json!({
        "mode": "Cluster",
        "image": "valkey/valkey:8.1",
        "imagePullPolicy": "IfNotPresent",
        "workloadType": "Deployment",
        "announce": "PodIP",
        "config": {"maxmemory": "1gb", "maxmemory-policy": "allkeys-lru"},
        "persistence": {
            "size": "10Gi",
            "storageClassName": "fast",
            "reclaimPolicy": "Delete",
            "autoResize": {"usedPercentThreshold": 85, "increase": "5Gi", "limit": "100Gi"}
        },
        "exporter": {"image": "oliver006/redis_exporter:v1.86.0", "port": 9121},
        "rolloutPolicy": "Gated",
        "allowedRevision": "abc"
    }));
    accepted::<ValkeyNode>(&n, None);
    accepted::<ValkeyNode>(&n, Some(&n));
}

#[test]
fn node_names_must_fit_their_objects() {
    accepted::<ValkeyNode>(&node_named(&"a".repeat(52), json!({})), None);
    rejected::<ValkeyNode>(&node_named(&"a".repeat(53), json!({})), None, "at most 52");
    rejected::<ValkeyNode>(
        &node_named("9lives", json!({})),
        None,
        "start with a letter",
    );
    rejected::<ValkeyNode>(
        &node_named("cache.eu", json!({})),
        None,
        "start with a letter",
    );
}

#[test]
fn unknown_enum_values_are_rejected_with_the_allowed_ones() {
    let cases = [
        (
            "mode",
            "Replica",
            "mode must be Standalone, Cluster or Sentinel",
        ),
        (
            "workloadType",
            "DaemonSet",
            "workloadType must be StatefulSet or Deployment",
        ),
        ("announce", "NodeIP", "announce must be Service or PodIP"),
        (
            "rolloutPolicy",
            "Later",
            "rolloutPolicy must be Immediate or Gated",
        ),
        (
            "imagePullPolicy",
            "Sometimes",
            "imagePullPolicy must be Always",
        ),
    ];
    for (field, value, message) in cases {
        rejected::<ValkeyNode>(&node(json!({ field: value })), None, message);
    }
    rejected::<ValkeyNode>(
        &with_persistence(json!({"size": "1Gi", "reclaimPolicy": "Keep"})),
        None,
        "reclaimPolicy must be Retain or Delete",
    );
}

#[test]
fn workload_type_is_immutable() {
    let old = node(json!({"workloadType": "StatefulSet"}));
    accepted::<ValkeyNode>(&old, Some(&old));
    rejected::<ValkeyNode>(
        &node(json!({"workloadType": "Deployment"})),
        Some(&old),
        "workloadType is immutable",
    );
}

#[test]
fn mode_is_immutable() {
    let old = node(json!({"mode": "Standalone"}));
    rejected::<ValkeyNode>(
        &node(json!({"mode": "Cluster"})),
        Some(&old),
        "mode is immutable",
    );
}

#[test]
fn empty_image_is_rejected() {
    rejected::<ValkeyNode>(&node(json!({"image": ""})), None, "image must name");
}

#[test]
fn operator_owned_directives_are_rejected() {
    accepted::<ValkeyNode>(&node(json!({"config": {"maxmemory": "100mb"}})), None);
    for directive in [
        "port",
        "cluster-enabled",
        "dir",
        "requirepass",
        "replicaof",
        "bind",
        "enable-debug-command",
        "enable-module-command",
    ] {
        rejected::<ValkeyNode>(
            &node(json!({"config": {"maxmemory": "100mb", directive: "x"}})),
            None,
            "config sets a directive the operator manages",
        );
    }
}

#[test]
fn persistence_size_must_be_a_positive_quantity() {
    accepted::<ValkeyNode>(&with_persistence(json!({"size": "512Mi"})), None);
    rejected::<ValkeyNode>(
        &with_persistence(json!({"size": "ten gigs"})),
        None,
        "persistence.size must be a Kubernetes quantity",
    );
    rejected::<ValkeyNode>(
        &with_persistence(json!({"size": "0"})),
        None,
        "persistence.size must be larger than zero",
    );
}

#[test]
fn persistence_size_only_grows() {
    let old = with_persistence(json!({"size": "10Gi"}));
    accepted::<ValkeyNode>(&with_persistence(json!({"size": "20Gi"})), Some(&old));
    // Same size in another unit is not a shrink.
    accepted::<ValkeyNode>(&with_persistence(json!({"size": "10240Mi"})), Some(&old));
    rejected::<ValkeyNode>(
        &with_persistence(json!({"size": "5Gi"})),
        Some(&old),
        "persistence.size cannot shrink",
    );
}

#[test]
fn storage_class_is_immutable() {
    let old = with_persistence(json!({"size": "1Gi", "storageClassName": "fast"}));
    accepted::<ValkeyNode>(&old, Some(&old));
    rejected::<ValkeyNode>(
        &with_persistence(json!({"size": "1Gi", "storageClassName": "slow"})),
        Some(&old),
        "storageClassName is immutable",
    );
    rejected::<ValkeyNode>(
        &with_persistence(json!({"size": "1Gi"})),
        Some(&old),
        "storageClassName is immutable",
    );
}

#[test]
fn access_mode_is_an_enum_and_immutable() {
    let old = with_persistence(json!({"size": "1Gi", "accessMode": "ReadWriteOncePod"}));
    accepted::<ValkeyNode>(&old, Some(&old));
    accepted::<ValkeyNode>(
        &with_persistence(json!({"size": "1Gi", "accessMode": "ReadWriteOnce"})),
        None,
    );
    rejected::<ValkeyNode>(
        &with_persistence(json!({"size": "1Gi", "accessMode": "ReadWriteMany"})),
        None,
        "persistence.accessMode must be ReadWriteOncePod or ReadWriteOnce",
    );
    rejected::<ValkeyNode>(
        &with_persistence(json!({"size": "1Gi", "accessMode": "ReadWriteOnce"})),
        Some(&old),
        "persistence.accessMode is immutable",
    );
}

#[test]
fn persistence_cannot_be_added_or_removed() {
    let without = node(json!({"workloadType": "StatefulSet"}));
    let with = with_persistence(json!({"size": "1Gi"}));
    rejected::<ValkeyNode>(
        &with,
        Some(&without),
        "persistence cannot be added or removed",
    );
    rejected::<ValkeyNode>(
        &without,
        Some(&with),
        "persistence cannot be added or removed",
    );
}

#[test]
fn auto_resize_is_checked() {
    let ok = json!({"size": "10Gi", "autoResize": {"usedPercentThreshold": 80, "increase": "20%", "limit": "50Gi"}});
    accepted::<ValkeyNode>(&with_persistence(ok), None);
    let every_field = json!({"size": "10Gi", "autoResize": {
        "usedPercentThreshold": 50, "increase": "100%", "limit": "40Gi",
        "minIncrease": "512Mi", "cooldownSeconds": 0
    }});
    accepted::<ValkeyNode>(&with_persistence(every_field), None);
    let a_day = json!({"size": "10Gi", "autoResize": {"limit": "40Gi", "minIncrease": "1G", "cooldownSeconds": 86400}});
    accepted::<ValkeyNode>(&with_persistence(a_day), None);
    let cases = [
        (
            json!({"usedPercentThreshold": 0, "limit": "50Gi"}),
            "usedPercentThreshold must be between 1 and 99",
        ),
        (
            json!({"usedPercentThreshold": 100, "limit": "50Gi"}),
            "usedPercentThreshold must be between 1 and 99",
        ),
        (
            json!({"increase": "lots", "limit": "50Gi"}),
            "autoResize.increase must be a quantity",
        ),
        (
            json!({"increase": "0%", "limit": "50Gi"}),
            "autoResize.increase must be a quantity",
        ),
        (
            json!({"limit": "huge"}),
            "autoResize.limit must be a Kubernetes quantity",
        ),
        (
            json!({"limit": "5Gi"}),
            "autoResize.limit must be at least persistence.size",
        ),
        (
            json!({"limit": "50Gi", "minIncrease": "a bit"}),
            "autoResize.minIncrease must be a Kubernetes quantity",
        ),
        (
            json!({"limit": "50Gi", "minIncrease": "0"}),
            "autoResize.minIncrease must be larger than zero",
        ),
        (
            json!({"limit": "50Gi", "cooldownSeconds": -1}),
            "autoResize.cooldownSeconds must be between 0 and 86400",
        ),
        (
            json!({"limit": "50Gi", "cooldownSeconds": 86401}),
            "autoResize.cooldownSeconds must be between 0 and 86400",
        ),
    ];
    for (auto_resize, message) in cases {
        rejected::<ValkeyNode>(
            &with_persistence(json!({"size": "10Gi", "autoResize": auto_resize})),
            None,
            message,
        );
    }
}

#[test]
fn exporter_is_checked() {
    rejected::<ValkeyNode>(
        &node(json!({"exporter": {"image": ""}})),
        None,
        "exporter.image",
    );
    rejected::<ValkeyNode>(
        &node(json!({"exporter": {"image": "e", "port": 70000}})),
        None,
        "exporter.port must be between 1 and 65535",
    );
}

#[test]
fn an_exporter_that_cannot_turn_off_scrape_is_refused_by_its_tag() {
    let exporter = |image: &str| node(json!({"exporter": {"image": image}}));
    for old in [
        "oliver006/redis_exporter:v1.74.0",
        "oliver006/redis_exporter:v1.82.9",
        "oliver006/redis_exporter:v1.8.0",
        "oliver006/redis_exporter:v0.34.1",
        "oliver006/redis_exporter:v1.50.0-alpine",
        "mirror.local:5000/monitoring/redis-exporter:1.62.0",
        "mirror.local:5000/oliver006/redis_exporter:v1.80.0@sha256:0123abcd",
    ] {
        rejected::<ValkeyNode>(&exporter(old), None, "before v1.83.0");
    }
    for fine in [
        "oliver006/redis_exporter:v1.83.0",
        "oliver006/redis_exporter:v1.86.0-alpine",
        "oliver006/redis_exporter:v1.100.0",
        "oliver006/redis_exporter:v2.0.0",
        "oliver006/redis_exporter:latest",
        "oliver006/redis_exporter@sha256:0123abcd",
        "mirror.local:5000/oliver006/redis_exporter:v1.86.0",
        // Not named like an exporter: its tags are its own.
        "example.com/metrics/sidecar:1.2.3",
    ] {
        accepted::<ValkeyNode>(&exporter(fine), None);
    }
}
