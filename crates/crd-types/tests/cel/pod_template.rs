//! `pod` on all three kinds: each rule once accepting and once refusing, with its message, on
//! a ValkeyNode (whose spec holds the template's fields flattened: `spec.pod`) and inside a
//! ValkeyCluster's and a ValkeyReplication's `spec.template`.

use super::*;

/// The violations of one kind's rules.
type Check = fn(&Value) -> Vec<String>;

/// `pod` as a ValkeyNode, a ValkeyCluster and a ValkeyReplication carry it, and as a
/// ValkeyReplication's `sentinel.pod`.
fn on_every_kind(pod: &Value) -> [(Value, Check); 4] {
    [
        (node(json!({"pod": pod})), |o| {
            violations::<ValkeyNode>(o, None)
        }),
        (
            cluster(json!({"shards": 3, "template": {"pod": pod}})),
            |o| violations::<ValkeyCluster>(o, None),
        ),
        (
            replication(json!({"replicas": 3, "template": {"pod": pod}})),
            |o| violations::<ValkeyReplication>(o, None),
        ),
        (
            replication(json!({"replicas": 3, "sentinel": {"pod": pod}})),
            |o| violations::<ValkeyReplication>(o, None),
        ),
    ]
}

#[track_caller]
fn accepted_everywhere(pod: Value) {
    for (object, check) in on_every_kind(&pod) {
        let found = check(&object);
        assert!(found.is_empty(), "{}: {found:?}", object["kind"]);
    }
}

#[track_caller]
fn refused_everywhere(pod: Value, message_part: &str) {
    for (object, check) in on_every_kind(&pod) {
        let found = check(&object);
        assert!(
            found.iter().any(|m| m.contains(message_part)),
            "{}: expected {message_part:?}, got {found:?}",
            object["kind"]
        );
    }
}

fn sidecar(name: &str) -> Value {
    json!({"name": name, "image": "valkey/valkey:8.1", "command": ["sleep", "3600"]})
}

#[test]
fn every_knob_at_once_is_accepted() {
    accepted_everywhere(json!({
        "labels": {"team": "payments", "sidecar.istio.io/inject": "false"},
        "annotations": {"backup.velero.io/backup-volumes": "data"},
        "imagePullSecrets": [{"name": "registry"}],
        "serviceAccountName": "valkey",
        "automountServiceAccountToken": true,
        "terminationGracePeriodSeconds": 600,
        "securityContext": {"runAsUser": 1000680000, "runAsGroup": 0, "fsGroup": 1000680000},
        "env": [{"name": "TZ", "value": "UTC"}],
        "volumes": [{"name": "scratch", "emptyDir": {}}],
        "volumeMounts": [{"name": "scratch", "mountPath": "/mnt/scratch"}],
        "sidecars": [sidecar("logs")],
        "initContainers": [sidecar("prepare")],
    }));
    accepted_everywhere(json!({}));
}

#[test]
fn the_operators_label_and_annotation_keys_are_refused() {
    for key in [
        "app.kubernetes.io/name",
        "app.kubernetes.io/managed-by",
        "valkey.rs/node",
        "valkey.rs/cluster",
        "valkey.rs/replication",
        "valkey.rs/role",
    ] {
        refused_everywhere(
            json!({"labels": {key: "x"}}),
            "pod.labels: app.kubernetes.io/*, valkey.rs/* keys are the operator's",
        );
    }
    for key in [
        "valkey.rs/revision",
        "valkey.rs/tls-auto-reload-seconds",
        "valkey.rs/operator-password-file",
    ] {
        refused_everywhere(
            json!({"annotations": {key: "x"}}),
            "pod.annotations: valkey.rs/* keys are the operator's",
        );
    }
    // Near misses are the user's.
    accepted_everywhere(json!({
        "labels": {"valkey.rs.example.com/x": "y", "kubernetes.io/x": "y"},
        "annotations": {"app.kubernetes.io/x": "y"},
    }));
}

#[test]
fn the_grace_period_is_bounded() {
    for seconds in [10, 60, 86400] {
        accepted_everywhere(json!({"terminationGracePeriodSeconds": seconds}));
    }
    for seconds in [0, 9, 86401] {
        refused_everywhere(
            json!({"terminationGracePeriodSeconds": seconds}),
            "pod.terminationGracePeriodSeconds is 10 to 86400: on stop Valkey writes its final save",
        );
    }
}

#[test]
fn the_identity_is_not_root_and_any_part_may_be_left_to_the_platform() {
    for identity in [
        json!({}),
        json!({"runAsUser": 1}),
        json!({"runAsUser": 1000680000, "fsGroup": 1000680000}),
        json!({"runAsUser": 2147483647, "runAsGroup": 0, "fsGroup": 2147483647}),
    ] {
        accepted_everywhere(json!({"securityContext": identity}));
    }
    for (identity, message) in [
        (
            json!({"runAsUser": 0}),
            "pod.securityContext.runAsUser is 1 to 2147483647: the pods run as non-root, so not 0",
        ),
        (
            json!({"runAsUser": 2147483648_i64}),
            "pod.securityContext.runAsUser is 1 to 2147483647",
        ),
        (
            json!({"runAsGroup": -1}),
            "pod.securityContext.runAsGroup is 0 to 2147483647",
        ),
        (
            json!({"fsGroup": 0}),
            "pod.securityContext.fsGroup is 1 to 2147483647",
        ),
    ] {
        refused_everywhere(json!({"securityContext": identity}), message);
    }
}

#[test]
fn the_operators_env_names_are_refused() {
    for name in [
        "POD_IP",
        "POD_NAME",
        "POD_NAMESPACE",
        "REDISCLI_AUTH",
        "VALKEY_OPERATOR_PASSWORD",
        "VALKEY_OPERATOR_ANYTHING",
    ] {
        refused_everywhere(
            json!({"env": [{"name": name, "value": "x"}]}),
            "pod.env: POD_IP, POD_NAME, POD_NAMESPACE, REDISCLI_AUTH",
        );
    }
    accepted_everywhere(json!({"env": [{"name": "POD_IP_EXTRA", "value": "x"}]}));
}

#[test]
fn the_operators_volume_names_and_host_paths_are_refused() {
    // The list node-controller's tests check against the volumes it renders.
    for name in crd_types::pod_template::OPERATOR_VOLUMES {
        refused_everywhere(
            json!({"volumes": [{"name": name, "emptyDir": {}}]}),
            "are the operator's own volume names",
        );
    }
    refused_everywhere(
        json!({"volumes": [{"name": "host", "hostPath": {"path": "/var"}}]}),
        "hostPath and the other node-bound sources are refused",
    );
    accepted_everywhere(json!({"volumes": [
        {"name": "a", "configMap": {"name": "x"}},
        {"name": "b", "secret": {"secretName": "x"}},
        {"name": "c", "persistentVolumeClaim": {"claimName": "x"}},
        {"name": "d", "projected": {"sources": []}},
        {"name": "e", "downwardAPI": {}},
    ]}));
}

#[test]
fn a_mount_at_or_under_the_operators_paths_is_refused() {
    for path in [
        "/data",
        "/data/backup",
        "/etc/valkey",
        "/etc/valkey/",
        "/tmp",
        "/tmp/x",
        "/etc/valkey-users",
        "/etc/valkey-tls/x",
        "/etc/valkey-operator",
        "/run/valkey-exporter",
    ] {
        refused_everywhere(
            json!({"volumeMounts": [{"name": "x", "mountPath": path}]}),
            "pod.volumeMounts: /data, /etc/valkey, /tmp",
        );
    }
    for path in ["/mnt/x", "/etc/valkey-extra", "/database", "/tmpx"] {
        accepted_everywhere(json!({
            "volumes": [{"name": "x", "emptyDir": {}}],
            "volumeMounts": [{"name": "x", "mountPath": path}],
        }));
    }
}

#[test]
fn the_operators_container_names_are_refused() {
    for name in ["valkey", "exporter", "sentinel-config", "exporter-auth"] {
        refused_everywhere(
            json!({"sidecars": [sidecar(name)]}),
            "pod.sidecars: valkey, exporter, sentinel-config and exporter-auth are the operator's own container names",
        );
        refused_everywhere(
            json!({"initContainers": [sidecar(name)]}),
            "pod.initContainers: valkey, exporter, sentinel-config and exporter-auth are the operator's own container names",
        );
    }
}

#[test]
fn containers_stay_restricted() {
    let with = |security: Value| {
        let mut c = sidecar("side");
        c["securityContext"] = security;
        c
    };
    for bad in [
        json!({"privileged": true}),
        json!({"allowPrivilegeEscalation": true}),
        json!({"runAsNonRoot": false}),
        json!({"runAsUser": 0}),
        json!({"capabilities": {"add": ["NET_ADMIN"]}}),
        json!({"capabilities": {"add": ["NET_BIND_SERVICE", "SYS_ADMIN"]}}),
        json!({"seccompProfile": {"type": "Unconfined"}}),
    ] {
        refused_everywhere(
            json!({"sidecars": [with(bad.clone())]}),
            "pod.sidecars: a container must stay within the restricted Pod Security Standard",
        );
        refused_everywhere(
            json!({"initContainers": [with(bad)]}),
            "pod.initContainers: a container must stay within the restricted Pod Security Standard",
        );
    }
    let good = json!({
        "privileged": false,
        "allowPrivilegeEscalation": false,
        "runAsNonRoot": true,
        "runAsUser": 1000,
        "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    });
    accepted_everywhere(json!({
        "sidecars": [with(good.clone())],
        "initContainers": [with(good)],
    }));
}
