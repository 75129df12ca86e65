//! Evaluates every CEL rule of the CRDs client-side (kube's `cel` feature), as the API server
//! would at admission: each rule once accepting and once rejecting, with its message.

use kube::CustomResourceExt;
use kube::core::cel::Validator;
use serde_json::{Value, json};

use crd_types::{ValkeyCluster, ValkeyNode, ValkeyReplication};

fn schema<K: CustomResourceExt>() -> Value {
    let crd = K::crd();
    let schema = crd.spec.versions[0].schema.as_ref().unwrap();
    serde_json::to_value(schema.open_api_v3_schema.as_ref().unwrap()).unwrap()
}

/// The messages of every rule the object breaks (on update when `old` is given).
fn violations<K: CustomResourceExt>(object: &Value, old: Option<&Value>) -> Vec<String> {
    match Validator::new().validate(&schema::<K>(), object, old) {
        Ok(()) => vec![],
        Err(errors) => errors.into_vec().into_iter().map(|e| e.message).collect(),
    }
}

#[track_caller]
fn accepted<K: CustomResourceExt>(object: &Value, old: Option<&Value>) {
    let found = violations::<K>(object, old);
    assert!(found.is_empty(), "expected no violation, got {found:?}");
}

#[track_caller]
fn rejected<K: CustomResourceExt>(object: &Value, old: Option<&Value>, message_part: &str) {
    let found = violations::<K>(object, old);
    assert!(
        found.iter().any(|m| m.contains(message_part)),
        "expected a violation containing {message_part:?}, got {found:?}"
    );
}

fn node(spec: Value) -> Value {
    node_named("cache", spec)
}

fn node_named(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "valkey.rs/v1alpha1",
        "kind": "ValkeyNode",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    })
}

fn with_persistence(persistence: Value) -> Value {
    node(json!({"workloadType": "StatefulSet", "persistence": persistence}))
}

// ---- ValkeyNode -------------------------------------------------------------------------

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
        "exporter": {"image": "oliver006/redis_exporter:v1.74.0", "port": 9121},
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
fn auth_secret_refs_are_checked() {
    let with_auth = |auth: Value| node(json!({"auth": auth}));
    accepted::<ValkeyNode>(
        &with_auth(json!({
            "passwordSecretRef": {"name": "cache-auth"},
            "operatorSecretRef": {"name": "cache-operator", "key": "pass.word_1"}
        })),
        None,
    );
    rejected::<ValkeyNode>(
        &with_auth(json!({"passwordSecretRef": {"name": ""}})),
        None,
        "a Secret name is a DNS subdomain",
    );
    rejected::<ValkeyNode>(
        &with_auth(json!({"operatorSecretRef": {"name": "Cache_Auth"}})),
        None,
        "a Secret name is a DNS subdomain",
    );
    rejected::<ValkeyNode>(
        &with_auth(json!({"passwordSecretRef": {"name": "a..b"}})),
        None,
        "a Secret name is a DNS subdomain",
    );
    rejected::<ValkeyNode>(
        &with_auth(json!({"passwordSecretRef": {"name": "a", "key": "pass word"}})),
        None,
        "a Secret key is letters, digits",
    );
    rejected::<ValkeyCluster>(
        &cluster(json!({
            "shards": 3,
            "template": {},
            "auth": {"passwordSecretRef": {"name": "a", "key": ""}}
        })),
        None,
        "a Secret key is letters, digits",
    );
}

#[test]
fn the_operator_secret_of_a_cluster_may_change_but_not_go() {
    let with = |auth: Value| cluster(json!({"shards": 3, "template": {}, "auth": auth}));
    let none = cluster(json!({"shards": 3, "template": {}}));
    let named = with(json!({"operatorSecretRef": {"name": "op", "key": "password"}}));
    let other = with(json!({"operatorSecretRef": {"name": "op2", "key": "password"}}));
    let message = "auth.operatorSecretRef cannot be removed once set";
    accepted::<ValkeyCluster>(&named, None);
    accepted::<ValkeyCluster>(&named, Some(&named));
    // Another Secret, or one named instead of the generated one: a rotation.
    accepted::<ValkeyCluster>(&other, Some(&named));
    accepted::<ValkeyCluster>(&named, Some(&none));
    rejected::<ValkeyCluster>(&none, Some(&named), message);
    let other_auth = with(json!({"passwordSecretRef": {"name": "app", "key": "password"}}));
    rejected::<ValkeyCluster>(&other_auth, Some(&named), message);
    // The default user's Secret may change (it rolls the members).
    let password = with(json!({"passwordSecretRef": {"name": "app", "key": "password"}}));
    accepted::<ValkeyCluster>(&password, Some(&none));
    let replication = |auth: Value| {
        json!({
            "apiVersion": "valkey.rs/v1alpha1",
            "kind": "ValkeyReplication",
            "metadata": {"name": "cache", "namespace": "default"},
            "spec": {"replicas": 2, "sentinel": {"replicas": 3, "quorum": 2}, "template": {}, "auth": auth},
        })
    };
    let a = replication(json!({"operatorSecretRef": {"name": "a", "key": "password"}}));
    let b = replication(json!({"operatorSecretRef": {"name": "b", "key": "password"}}));
    accepted::<ValkeyReplication>(&a, Some(&a));
    accepted::<ValkeyReplication>(&b, Some(&a));
    rejected::<ValkeyReplication>(&replication(json!({})), Some(&a), message);
}

#[test]
fn the_password_overlap_is_bounded_and_only_for_topologies() {
    let with = |auth: Value| cluster(json!({"shards": 3, "template": {}, "auth": auth}));
    accepted::<ValkeyCluster>(&with(json!({"passwordOverlapSeconds": 0})), None);
    accepted::<ValkeyCluster>(&with(json!({"passwordOverlapSeconds": 604800})), None);
    for bad in [-1, 604801] {
        rejected::<ValkeyCluster>(
            &with(json!({"passwordOverlapSeconds": bad})),
            None,
            "auth.passwordOverlapSeconds is 0 to 604800",
        );
    }
    // A ValkeyNode made by hand has no operator to rotate its password.
    accepted::<ValkeyNode>(
        &node(json!({"auth": {"passwordSecretRef": {"name": "a", "key": "password"}}})),
        None,
    );
    rejected::<ValkeyNode>(
        &node(json!({"auth": {"passwordOverlapSeconds": 60}})),
        None,
        "a ValkeyNode made by hand takes a changed password when it restarts",
    );
}

#[test]
fn tls_is_set_at_creation_and_checked() {
    let tls = |t: Value| node(json!({"tls": t}));
    let a = tls(json!({"secretName": "cache-tls"}));
    accepted::<ValkeyNode>(&a, None);
    accepted::<ValkeyNode>(
        &tls(json!({"secretName": "c", "authClients": "Required"})),
        None,
    );
    rejected::<ValkeyNode>(
        &tls(json!({"secretName": "c", "authClients": "yes"})),
        None,
        "tls.authClients must be Never, Optional or Required",
    );
    rejected::<ValkeyNode>(
        &tls(json!({"secretName": "Cache_TLS"})),
        None,
        "tls.secretName is a Secret name",
    );
    accepted::<ValkeyNode>(&a, Some(&a));
    let renamed = tls(json!({"secretName": "other-tls"}));
    rejected::<ValkeyNode>(&renamed, Some(&a), "tls cannot be changed after creation");
    let plain = node(json!({}));
    rejected::<ValkeyNode>(&plain, Some(&a), "tls cannot be added or removed");
    rejected::<ValkeyNode>(&a, Some(&plain), "tls cannot be added or removed");
    let null = tls(Value::Null);
    rejected::<ValkeyNode>(&null, Some(&a), "tls cannot be added or removed");
    let c = cluster(json!({"shards": 3, "template": {}, "tls": {"secretName": "t"}}));
    accepted::<ValkeyCluster>(&c, None);
    let plain_cluster = cluster(json!({"shards": 3, "template": {}}));
    rejected::<ValkeyCluster>(&plain_cluster, Some(&c), "tls cannot be added or removed");
    // Without a Secret: the operator issues the certificates, which cannot change later.
    let issued = cluster(json!({"shards": 3, "template": {}, "tls": {}}));
    accepted::<ValkeyCluster>(&issued, None);
    accepted::<ValkeyCluster>(&issued, Some(&issued));
    rejected::<ValkeyCluster>(&c, Some(&issued), "tls cannot be changed after creation");
    rejected::<ValkeyCluster>(&issued, Some(&c), "tls cannot be changed after creation");
    rejected::<ValkeyCluster>(
        &cluster(json!({"shards": 3, "template": {}, "tls": {"secretName": "T"}})),
        None,
        "tls.secretName is a Secret name",
    );
    // The plain-text client port may come and go; the rest stays.
    let both = tls(json!({"secretName": "cache-tls", "plainTextClients": true}));
    accepted::<ValkeyNode>(&both, Some(&a));
    accepted::<ValkeyNode>(&a, Some(&both));
    let both_renamed = tls(json!({"secretName": "other-tls", "plainTextClients": true}));
    rejected::<ValkeyNode>(
        &both_renamed,
        Some(&a),
        "tls cannot be changed after creation (but for plainTextClients)",
    );
    let issued_both =
        cluster(json!({"shards": 3, "template": {}, "tls": {"plainTextClients": true}}));
    accepted::<ValkeyCluster>(&issued_both, Some(&issued));
    accepted::<ValkeyCluster>(&issued, Some(&issued_both));
    // So may the CA replacement's overlap.
    let overlap = cluster(json!({"shards": 3, "template": {}, "tls": {"caOverlapSeconds": 60}}));
    accepted::<ValkeyCluster>(&overlap, Some(&issued));
    accepted::<ValkeyCluster>(&issued, Some(&overlap));
    let strict = cluster(
        json!({"shards": 3, "template": {}, "tls": {"authClients": "Required", "plainTextClients": true}}),
    );
    rejected::<ValkeyCluster>(
        &strict,
        Some(&issued),
        "tls cannot be changed after creation",
    );
    let group = |t: Value| replication(json!({"template": {}, "tls": t}));
    accepted::<ValkeyReplication>(
        &group(json!({"secretName": "t", "plainTextClients": true})),
        Some(&group(json!({"secretName": "t"}))),
    );
    rejected::<ValkeyReplication>(
        &group(json!({"secretName": "u"})),
        Some(&group(json!({"secretName": "t"}))),
        "tls cannot be changed after creation",
    );
    rejected::<ValkeyNode>(
        &node(json!({"config": {"tls-replication": "no"}})),
        None,
        "config sets a directive the operator manages",
    );
}

// ---- ValkeyCluster ----------------------------------------------------------------------

fn cluster(spec: Value) -> Value {
    json!({
        "apiVersion": "valkey.rs/v1alpha1",
        "kind": "ValkeyCluster",
        "metadata": {"name": "orders", "namespace": "default"},
        "spec": spec,
    })
}

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

// ---- ValkeyReplication ------------------------------------------------------------------

fn replication(spec: Value) -> Value {
    json!({
        "apiVersion": "valkey.rs/v1alpha1",
        "kind": "ValkeyReplication",
        "metadata": {"name": "sessions", "namespace": "default"},
        "spec": spec,
    })
}

#[test]
fn a_valid_replication_is_accepted() {
    let r = replication(json!({
        "replicas": 3,
        "sentinel": {
            "replicas": 3,
            "quorum": 2,
            "downAfterMilliseconds": 5000,
            "failoverTimeout": 60000,
            "parallelSyncs": 1,
            "passwordSecretRef": {"name": "sentinel-pass"}
        },
        "switchover": {"id": "x", "member": 2},
        "minReplicasToWrite": 2,
        "minReplicasMaxLag": 5
    }));
    accepted::<ValkeyReplication>(&r, None);
    accepted::<ValkeyReplication>(&r, Some(&r));
}

#[test]
fn replication_shape_is_checked() {
    rejected::<ValkeyReplication>(&replication(json!({"replicas": 0})), None, "at least 1");
    rejected::<ValkeyReplication>(&replication(json!({"replicas": -1})), None, "at least 1");
    rejected::<ValkeyReplication>(
        &replication(json!({"replicas": 33})),
        None,
        "replicas must be at most 32",
    );
    rejected::<ValkeyReplication>(
        &replication(json!({"replicas": 2, "sentinel": {"replicas": 3, "quorum": 4}})),
        None,
        "sentinel.quorum cannot exceed sentinel.replicas",
    );
    rejected::<ValkeyReplication>(
        &replication(json!({"replicas": 2, "sentinel": {"replicas": 3, "quorum": 0}})),
        None,
        "sentinel.quorum must be at least 1",
    );
    rejected::<ValkeyReplication>(
        &replication(json!({"replicas": 2, "sentinel": {"replicas": 0, "quorum": 1}})),
        None,
        "sentinel.replicas must be at least 1",
    );
    rejected::<ValkeyReplication>(
        &replication(json!({"replicas": 2, "switchover": {"id": "x", "member": 2}})),
        None,
        "switchover.member must name an existing data node",
    );
}

#[test]
fn sentinel_timings_are_checked() {
    let sentinel = |field: &str, value: i64| {
        replication(json!({"replicas": 2, "sentinel": {"replicas": 3, "quorum": 2, field: value}}))
    };
    for (field, low, ok, message) in [
        (
            "downAfterMilliseconds",
            99,
            100,
            "sentinel.downAfterMilliseconds must be at least 100",
        ),
        (
            "failoverTimeout",
            999,
            1000,
            "sentinel.failoverTimeout must be at least 1000",
        ),
        (
            "parallelSyncs",
            0,
            1,
            "sentinel.parallelSyncs must be at least 1",
        ),
    ] {
        rejected::<ValkeyReplication>(&sentinel(field, low), None, message);
        accepted::<ValkeyReplication>(&sentinel(field, ok), None);
    }
}

#[test]
fn min_replicas_to_write_fits_the_replicas() {
    let r = |to_write: i64, lag: i64| {
        replication(
            json!({"replicas": 3, "minReplicasToWrite": to_write, "minReplicasMaxLag": lag}),
        )
    };
    accepted::<ValkeyReplication>(&r(0, 1), None);
    accepted::<ValkeyReplication>(&r(2, 10), None);
    rejected::<ValkeyReplication>(&r(3, 10), None, "minReplicasToWrite must be below replicas");
    rejected::<ValkeyReplication>(&r(-1, 10), None, "minReplicasToWrite cannot be negative");
    rejected::<ValkeyReplication>(
        &r(1, 0),
        None,
        "minReplicasMaxLag must be at least 1 second",
    );
}

// ---- Samples ----------------------------------------------------------------------------

/// Every sample in deploy/samples deserializes into its type and passes admission.
#[test]
fn samples_are_admitted() {
    // Run time, not env!: a target directory shared by two checkouts keeps the first one's.
    let crate_dir = std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo test");
    let dir = std::path::Path::new(&crate_dir).join("../../deploy/samples");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().unwrap() == "kustomization.yaml" {
            continue;
        }
        let object: Value = serde_yaml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let found = match object["kind"].as_str().unwrap() {
            "ValkeyNode" => {
                serde_json::from_value::<ValkeyNode>(object.clone()).unwrap();
                violations::<ValkeyNode>(&object, None)
            }
            "ValkeyCluster" => {
                serde_json::from_value::<ValkeyCluster>(object.clone()).unwrap();
                violations::<ValkeyCluster>(&object, None)
            }
            "ValkeyReplication" => {
                serde_json::from_value::<ValkeyReplication>(object.clone()).unwrap();
                violations::<ValkeyReplication>(&object, None)
            }
            other => panic!("{}: unexpected kind {other}", path.display()),
        };
        assert!(found.is_empty(), "{}: {found:?}", path.display());
        checked += 1;
    }
    assert!(
        checked >= 3,
        "expected the three samples, checked {checked}"
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

#[test]
fn users_are_checked_at_admission() {
    let with = |users: Value| cluster(json!({"shards": 3, "users": users}));
    accepted::<ValkeyCluster>(
        &with(json!([
            {"name": "app", "rules": ["~app:*", "&news.*", "+@read", "-flushall", "%R~cache:*"]},
            {"name": "reporting-2", "passwordSecretRef": {"name": "reporting-pw"}, "passwordOverlapSeconds": 0},
            {"name": "empty"},
        ])),
        None,
    );
    accepted::<ValkeyCluster>(&with(json!([])), None);
    for reserved in ["default", "operator", "replication", "monitoring", "probe"] {
        rejected::<ValkeyCluster>(
            &with(json!([{"name": reserved}])),
            None,
            "the operator keeps those users for itself",
        );
    }
    for bad in ["App", "a b", "_x", "x-", "x_y"] {
        rejected::<ValkeyCluster>(
            &with(json!([{"name": bad}])),
            None,
            "users[].name is lower-case letters",
        );
    }
    rejected::<ValkeyCluster>(
        &with(json!([{"name": "app"}, {"name": "app", "rules": ["+get"]}])),
        None,
        "users: each name may appear only once",
    );
    for owned in [
        "on",
        "OFF",
        "reset",
        "nopass",
        "resetpass",
        ">secret",
        "<old",
        "#abc",
        "!abc",
    ] {
        rejected::<ValkeyCluster>(
            &with(json!([{"name": "app", "rules": [owned]}])),
            None,
            "users[].rules cannot hold on, off, reset, nopass, resetpass or a password",
        );
    }
    for shaped in [
        "",
        "+get ~x",
        "(~x +get)",
        "+get\n",
        "~\"x",
        "~x'",
        "~\u{7f}x",
        "~é",
    ] {
        rejected::<ValkeyCluster>(
            &with(json!([{"name": "app", "rules": [shaped]}])),
            None,
            "users[].rules: each rule is one token",
        );
    }
    rejected::<ValkeyCluster>(
        &with(json!([{"name": "app", "passwordOverlapSeconds": -1}])),
        None,
        "passwordOverlapSeconds is 0 to 604800",
    );
    let group = json!({
        "apiVersion": "valkey.rs/v1alpha1",
        "kind": "ValkeyReplication",
        "metadata": {"name": "sessions", "namespace": "default"},
        "spec": {"users": [{"name": "operator"}]},
    });
    rejected::<ValkeyReplication>(&group, None, "the operator keeps those users for itself");
}

#[test]
fn a_nodes_users_secret_is_a_secret_name() {
    accepted::<ValkeyNode>(&node(json!({"usersSecretName": "orders-users"})), None);
    rejected::<ValkeyNode>(
        &node(json!({"usersSecretName": "Orders users"})),
        None,
        "usersSecretName is a Secret name",
    );
}
