//! `monitoring.podMonitor` on both topology kinds: it needs an exporter to scrape, and its
//! labels and interval are checked.

use super::*;

fn with_monitor(exporter: bool, pod_monitor: Value) -> Value {
    let mut spec = json!({"shards": 3, "monitoring": {"podMonitor": pod_monitor}});
    if exporter {
        spec["template"] = json!({"exporter": {}});
    }
    spec
}

#[test]
fn a_pod_monitor_needs_an_exporter_on_both_kinds() {
    let monitor = json!({"labels": {"release": "kube-prometheus-stack"}, "interval": "30s"});
    accepted::<ValkeyCluster>(&cluster(with_monitor(true, monitor.clone())), None);
    let refused = "monitoring.podMonitor scrapes the exporter sidecars: set template.exporter";
    rejected::<ValkeyCluster>(
        &cluster(with_monitor(false, monitor.clone())),
        None,
        refused,
    );
    rejected::<ValkeyCluster>(&cluster(with_monitor(false, json!({}))), None, refused);
    let mut spec = with_monitor(false, monitor);
    spec.as_object_mut().unwrap().remove("shards");
    spec["replicas"] = json!(2);
    rejected::<ValkeyReplication>(&replication(spec.clone()), None, refused);
    spec["template"] = json!({"exporter": {}});
    accepted::<ValkeyReplication>(&replication(spec), None);
    // Turned off, nothing is scraped and nothing is needed.
    accepted::<ValkeyCluster>(
        &cluster(with_monitor(false, json!({"enabled": false}))),
        None,
    );
}

#[test]
fn a_pod_monitors_interval_and_labels_are_checked() {
    for interval in ["15s", "1m", "1m30s", "500ms"] {
        let spec = with_monitor(true, json!({"interval": interval}));
        accepted::<ValkeyCluster>(&cluster(spec), None);
    }
    for interval in ["30", "thirty seconds", "1.5m", ""] {
        let spec = with_monitor(true, json!({"interval": interval}));
        rejected::<ValkeyCluster>(&cluster(spec), None, "a duration such as 30s");
    }
    let labels: serde_json::Map<String, Value> =
        (0..17).map(|i| (format!("l{i}"), json!("v"))).collect();
    let spec = with_monitor(true, json!({"labels": labels}));
    rejected::<ValkeyCluster>(&cluster(spec), None, "at most 16 labels");
}
