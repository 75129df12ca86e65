//! The certificates' expiry on /metrics, from the book and the caches.

use kube::core::DeserializeGuard;
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher::Event;
use serde_json::json;
use topology_controller::shared::cert_expiry::Expiry;

use super::*;

/// 2026-12-01T00:00:00Z.
const T: i64 = 1_796_083_200;
const METRIC: &str = "valkey_operator_certificate_not_after_timestamp_seconds";

fn cluster(name: &str, tls: serde_json::Value) -> ValkeyCluster {
    serde_json::from_value(json!({
        "apiVersion": "valkey.rs/v1alpha1", "kind": "ValkeyCluster",
        "metadata": {"name": name, "namespace": "apps"},
        "spec": {"shards": 3, "tls": tls},
    }))
    .unwrap()
}

fn group(name: &str, tls: serde_json::Value) -> ValkeyReplication {
    serde_json::from_value(json!({
        "apiVersion": "valkey.rs/v1alpha1", "kind": "ValkeyReplication",
        "metadata": {"name": name, "namespace": "apps"},
        "spec": {"replicas": 2, "sentinel": {"replicas": 3, "quorum": 2}, "tls": tls},
    }))
    .unwrap()
}

fn cached<K: kube::Resource<DynamicType = ()> + Clone>(
    writer: &mut Writer<Guarded<K>>,
    event: fn(Guarded<K>) -> Event<Guarded<K>>,
    object: K,
) {
    writer.apply_watcher_event(&event(DeserializeGuard(Ok(object))));
}

fn expiry(not_after: i64, managed: bool) -> Option<Expiry> {
    Some(Expiry { not_after, managed })
}

/// The certificate series of /metrics, sorted.
fn series(metrics: &operator_runtime::Metrics) -> Vec<String> {
    let text = metrics.encode().unwrap();
    let mut lines: Vec<String> = text
        .lines()
        .filter(|l| l.starts_with(&format!("{METRIC}{{")))
        .map(str::to_string)
        .collect();
    lines.sort();
    lines
}

#[test]
fn a_tls_topologys_certificates_show_until_it_is_forgotten_or_gone() {
    let (clusters, mut cluster_writer) = reflector::store::<Guarded<ValkeyCluster>>();
    let (groups, mut group_writer) = reflector::store::<Guarded<ValkeyReplication>>();
    let issued = cluster("cache", json!({}));
    cached(&mut cluster_writer, Event::Apply, issued.clone());
    cached(
        &mut cluster_writer,
        Event::Apply,
        cluster("plain", json!(null)),
    );
    let supplied = group("sessions", json!({"secretName": "sessions-tls"}));
    cached(&mut group_writer, Event::Apply, supplied);
    let book = ExpiryBook::default();
    book.record("apps", "ValkeyCluster", "cache", expiry(T, true));
    book.record(
        "apps",
        "ValkeyReplication",
        "sessions",
        expiry(T + 60, false),
    );
    // A record the cache contradicts: a topology without TLS.
    book.record("apps", "ValkeyCluster", "plain", expiry(T, true));
    let metrics = operator_runtime::Metrics::new().unwrap();
    register(&metrics, clusters, groups, book.clone()).unwrap();

    let help = format!("# HELP {METRIC} When the first of the certificates");
    assert!(metrics.encode().unwrap().contains(&help));
    assert_eq!(
        series(&metrics),
        [
            format!(
                r#"{METRIC}{{kind="ValkeyCluster",managed="true",name="cache",namespace="apps"}} {T}"#
            ),
            format!(
                r#"{METRIC}{{kind="ValkeyReplication",managed="false",name="sessions",namespace="apps"}} {}"#,
                T + 60
            ),
        ]
    );

    // The pipeline's forget path, for a deleted group.
    book.forget("apps", "ValkeyReplication", "sessions");
    assert_eq!(series(&metrics).len(), 1);
    assert!(series(&metrics)[0].contains(r#"name="cache""#));

    // Gone from the cache before its reconcile forgets it.
    cached(&mut cluster_writer, Event::Delete, issued);
    assert_eq!(series(&metrics), Vec::<String>::new());
}

#[test]
fn a_record_of_the_other_tls_is_not_shown() {
    let (clusters, mut writer) = reflector::store::<Guarded<ValkeyCluster>>();
    let (groups, _) = reflector::store::<Guarded<ValkeyReplication>>();
    cached(
        &mut writer,
        Event::Apply,
        cluster("cache", json!({"secretName": "t"})),
    );
    let book = ExpiryBook::default();
    let metrics = operator_runtime::Metrics::new().unwrap();
    register(&metrics, clusters, groups, book.clone()).unwrap();
    // Recorded while the operator issued them; the cached spec now names a Secret.
    book.record("apps", "ValkeyCluster", "cache", expiry(T, true));
    assert_eq!(series(&metrics), Vec::<String>::new());
    book.record("apps", "ValkeyCluster", "cache", expiry(T, false));
    assert_eq!(series(&metrics).len(), 1);
    // TLS that cannot be used drops the record.
    book.record("apps", "ValkeyCluster", "cache", None);
    assert_eq!(series(&metrics), Vec::<String>::new());
}
