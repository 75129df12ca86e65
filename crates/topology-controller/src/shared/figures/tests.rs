use super::*;
use serde_json::json;

fn now() -> Timestamp {
    "2026-12-06T12:00:00Z".parse().unwrap()
}

fn ready(status: &str, since: &str) -> serde_json::Value {
    json!({"type": "Ready", "status": status, "reason": "R", "message": "",
           "lastTransitionTime": since})
}

/// The value of `metric` with `labels`, if there is such a figure.
fn value(figures: &[Figure], metric: &str, labels: &[&str]) -> Option<f64> {
    figures
        .iter()
        .find(|f| f.metric == metric && f.labels == labels)
        .map(|f| f.value)
}

fn cluster(annotations: serde_json::Value, status: serde_json::Value) -> ValkeyCluster {
    serde_json::from_value(json!({
        "apiVersion": "valkey.rs/v1alpha1", "kind": "ValkeyCluster",
        "metadata": {"name": "cache", "namespace": "apps", "generation": 4,
                     "annotations": annotations},
        "spec": {"shards": 3, "replicasPerShard": 1},
        "status": status,
    }))
    .unwrap()
}

fn shard(index: i32, replica_ready: bool) -> serde_json::Value {
    json!({"index": index, "primary": format!("cache-{index}-0"), "slots": [],
    "members": [
        {"name": format!("cache-{index}-0"), "role": "Primary", "ready": true},
        {"name": format!("cache-{index}-1"), "role": "Replica", "ready": replica_ready},
    ]})
}

#[test]
fn a_ready_cluster_with_one_replica_down() {
    let c = cluster(
        json!({}),
        json!({"phase": "Ready", "readyShards": 3, "slotsAssigned": 16384,
               "observedGeneration": 4,
               "shards": [shard(0, true), shard(1, false), shard(2, true)],
               "conditions": [ready("True", "2026-12-06T11:00:00Z")]}),
    );
    let f = cluster_figures(&c, now());
    let v = |metric: &str, labels: &[&str]| value(&f, metric, labels);
    assert_eq!(v("valkey_operator_topology_ready", &[]), Some(1.0));
    assert_eq!(
        v("valkey_operator_topology_last_ready_timestamp_seconds", &[]),
        Some(now().as_second() as f64),
        "Ready now: the scrape's time"
    );
    assert_eq!(v("valkey_operator_topology_phase", &["Ready"]), Some(1.0));
    assert_eq!(v("valkey_operator_topology_paused", &[]), Some(0.0));
    assert_eq!(v("valkey_operator_topology_spec_observed", &[]), Some(1.0));
    assert_eq!(
        v("valkey_operator_topology_members_desired", &["data"]),
        Some(6.0)
    );
    assert_eq!(v("valkey_operator_topology_members", &["data"]), Some(6.0));
    assert_eq!(
        v("valkey_operator_topology_members_ready", &["data"]),
        Some(5.0)
    );
    assert_eq!(v("valkey_operator_topology_shards", &[]), Some(3.0));
    assert_eq!(v("valkey_operator_topology_shards_ready", &[]), Some(3.0));
    assert_eq!(v("valkey_operator_topology_primaries", &[]), Some(3.0));
    // No sentinels, no rotation, no storage figures for this one.
    assert_eq!(v("valkey_operator_topology_members", &["sentinel"]), None);
    assert!(
        !f.iter()
            .any(|x| x.metric.contains("rotation") || x.metric.contains("volume"))
    );
}

#[test]
fn a_paused_cluster_not_ready_since_a_time_and_behind_its_spec() {
    let c = cluster(
        json!({"valkey.rs/paused": "true"}),
        json!({"phase": "Paused", "observedGeneration": 3,
               "conditions": [ready("False", "2026-12-06T11:30:00Z")]}),
    );
    let f = cluster_figures(&c, now());
    let v = |metric: &str, labels: &[&str]| value(&f, metric, labels);
    assert_eq!(v("valkey_operator_topology_ready", &[]), Some(0.0));
    assert_eq!(
        v("valkey_operator_topology_last_ready_timestamp_seconds", &[]),
        Some(now().as_second() as f64 - 1800.0),
        "not Ready: when it stopped"
    );
    assert_eq!(v("valkey_operator_topology_paused", &[]), Some(1.0));
    assert_eq!(v("valkey_operator_topology_phase", &["Paused"]), Some(1.0));
    assert_eq!(v("valkey_operator_topology_spec_observed", &[]), Some(0.0));
    assert_eq!(v("valkey_operator_topology_members", &["data"]), Some(0.0));
}

#[test]
fn a_new_cluster_without_status_is_not_ready_and_has_no_last_ready() {
    let mut c = cluster(json!({}), json!({}));
    c.status = None;
    let f = cluster_figures(&c, now());
    assert_eq!(value(&f, "valkey_operator_topology_ready", &[]), Some(0.0));
    assert_eq!(
        value(
            &f,
            "valkey_operator_topology_last_ready_timestamp_seconds",
            &[]
        ),
        None
    );
}

#[test]
fn a_group_rotating_a_password_and_replacing_its_ca() {
    let g: ValkeyReplication = serde_json::from_value(json!({
        "apiVersion": "valkey.rs/v1alpha1", "kind": "ValkeyReplication",
        "metadata": {"name": "sessions", "namespace": "apps", "generation": 2},
        "spec": {"replicas": 3, "sentinel": {"replicas": 3, "quorum": 2}},
        "status": {
            "phase": "Degraded", "currentPrimary": "sessions-0", "observedGeneration": 2,
            "members": [
                {"name": "sessions-0", "role": "Primary", "ready": true},
                {"name": "sessions-1", "role": "Replica", "ready": true, "linkUp": true},
                {"name": "sessions-2", "role": "Replica", "ready": false, "linkUp": false},
                {"name": "sessions-sentinel-0", "role": "Sentinel", "ready": true},
                {"name": "sessions-sentinel-1", "role": "Sentinel", "ready": true},
                {"name": "sessions-sentinel-2", "role": "Sentinel", "ready": false},
            ],
            "passwordRotations": [{
                "user": "default", "since": "2026-12-06T11:59:00Z",
                "previousUntil": "2026-12-06T12:09:00Z", "membersWithNew": 1, "members": 4,
                "secretVersion": "sessions-password/7"
            }],
            "caReplacement": {"phase": "Trusting", "started": "2026-12-06T11:50:00Z"},
            "storage": {"member": "sessions-2", "minAvailableBytes": 1048576, "usedPercent": 97},
            "conditions": [ready("False", "2026-12-06T11:59:30Z")]
        }
    }))
    .unwrap();
    let f = replication_figures(&g, now());
    let v = |metric: &str, labels: &[&str]| value(&f, metric, labels);
    for (role, desired, present, ready) in [("data", 3.0, 3.0, 2.0), ("sentinel", 3.0, 3.0, 2.0)] {
        assert_eq!(
            v("valkey_operator_topology_members_desired", &[role]),
            Some(desired)
        );
        assert_eq!(
            v("valkey_operator_topology_members", &[role]),
            Some(present)
        );
        assert_eq!(
            v("valkey_operator_topology_members_ready", &[role]),
            Some(ready)
        );
    }
    assert_eq!(v("valkey_operator_topology_shards", &[]), Some(1.0));
    assert_eq!(v("valkey_operator_topology_shards_ready", &[]), Some(1.0));
    assert_eq!(v("valkey_operator_topology_primaries", &[]), Some(1.0));
    assert_eq!(
        v("valkey_operator_topology_replicas_linked", &[]),
        Some(1.0)
    );
    assert_eq!(
        v(
            "valkey_operator_topology_password_rotation_progress",
            &["default"]
        ),
        Some(0.25)
    );
    assert_eq!(
        v("valkey_operator_topology_ca_replacement", &["Trusting"]),
        Some(1.0)
    );
    assert_eq!(
        v("valkey_operator_topology_volume_min_available_bytes", &[]),
        Some(1048576.0)
    );
    assert_eq!(
        v("valkey_operator_topology_volume_max_used_percent", &[]),
        Some(97.0)
    );
    assert_eq!(
        v("valkey_operator_topology_phase", &["Degraded"]),
        Some(1.0)
    );
}

#[test]
fn a_group_whose_primary_is_down_has_no_ready_shard() {
    let g: ValkeyReplication = serde_json::from_value(json!({
        "apiVersion": "valkey.rs/v1alpha1", "kind": "ValkeyReplication",
        "metadata": {"name": "sessions", "namespace": "apps"},
        "spec": {"replicas": 2, "sentinel": {"replicas": 3, "quorum": 2}},
        "status": {"members": [
            {"name": "sessions-0", "role": "Primary", "ready": false},
            {"name": "sessions-1", "role": "Replica", "ready": true, "linkUp": false},
        ]}
    }))
    .unwrap();
    let f = replication_figures(&g, now());
    assert_eq!(
        value(&f, "valkey_operator_topology_shards_ready", &[]),
        Some(0.0)
    );
    assert_eq!(
        value(&f, "valkey_operator_topology_replicas_linked", &[]),
        Some(0.0)
    );
}

/// Every figure names a metric of [`SERIES`] with as many label values as it has labels, so
/// the collector can always place it.
#[test]
fn every_figure_fits_its_series() {
    let c = cluster(
        json!({"valkey.rs/paused": "true"}),
        json!({"phase": "Ready", "shards": [shard(0, true)],
               "storage": {"member": "cache-0-1", "minAvailableBytes": 1, "usedPercent": 1},
               "passwordRotations": [{
                   "user": "operator", "since": "2026-12-06T11:59:00Z",
                   "previousUntil": "2026-12-06T12:09:00Z", "membersWithNew": 0,
                   "members": 0, "secretVersion": "x/1"}],
               "caReplacement": {"phase": "Switching", "started": "2026-12-06T11:50:00Z"},
               "conditions": [ready("True", "2026-12-06T11:00:00Z")]}),
    );
    let mut figures = cluster_figures(&c, now());
    figures.push(certificate_figure(&Expiry {
        not_after: 0,
        managed: true,
    }));
    let mut metrics: Vec<&str> = figures.iter().map(|f| f.metric).collect();
    for figure in &figures {
        let (_, _, labels) = SERIES
            .iter()
            .find(|(name, _, _)| *name == figure.metric)
            .unwrap_or_else(|| panic!("{} is not in SERIES", figure.metric));
        assert_eq!(labels.len(), figure.labels.len(), "{figure:?}");
    }
    metrics.sort();
    metrics.dedup();
    // All but the ValkeyReplication-only one.
    assert_eq!(metrics.len(), SERIES.len() - 1, "{metrics:?}");
}

#[test]
fn a_certificate_figure_says_when_and_whether_the_operator_renews() {
    let at = now().as_second();
    for (managed, label) in [(true, "true"), (false, "false")] {
        let figure = certificate_figure(&Expiry {
            not_after: at,
            managed,
        });
        assert_eq!(
            figure,
            Figure {
                metric: "valkey_operator_certificate_not_after_timestamp_seconds",
                labels: vec![label.to_string()],
                value: at as f64,
            }
        );
    }
    // Its help says the operator renews 30 days before the end.
    let thirty_days = std::time::Duration::from_secs(30 * 24 * 3600);
    assert_eq!(crate::shared::issuer::RENEW_BEFORE, thirty_days);
}
