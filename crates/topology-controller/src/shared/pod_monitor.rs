//! Object builder (layer 3): a topology's own PodMonitor (`spec.monitoring.podMonitor`),
//! `<topology>-exporters`, over the exporter sidecars of its members, and the
//! `PodMonitorReady` condition that says what became of it.

use crd_types::conditions::ConditionSpec;
use crd_types::conditions::reasons::PodMonitorReady;
use crd_types::monitoring::{
    MonitoringSpec, POD_MONITOR_GROUP, POD_MONITOR_KIND, POD_MONITOR_PLURAL, POD_MONITOR_VERSION,
    PodMonitorSpec,
};
use crd_types::names::{labels, ports};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ObjectMeta};
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::shared::owned;

/// Marks the PodMonitors topology-controller makes.
pub const POD_MONITOR_LABEL: &str = "valkey.rs/pod-monitor";

/// The PodMonitor's API, for a dynamic client.
pub fn api_resource() -> ApiResource {
    let gvk = GroupVersionKind::gvk(POD_MONITOR_GROUP, POD_MONITOR_VERSION, POD_MONITOR_KIND);
    ApiResource::from_gvk_with_plural(&gvk, POD_MONITOR_PLURAL)
}

/// The name of `topology`'s PodMonitor.
pub fn name(topology: &str) -> String {
    format!("{topology}-exporters")
}

/// The PodMonitor the spec asks for, if it asks for one.
pub fn wanted(monitoring: Option<&MonitoringSpec>) -> Option<&PodMonitorSpec> {
    monitoring?.pod_monitor.as_ref().filter(|p| p.enabled)
}

/// The PodMonitor of `parent` (its members carry `parent_label=<parent>`): every member's
/// `metrics` port, each series labelled `topology=<parent>` as the alert rules expect. The
/// spec's labels go on the object; ours win.
pub fn pod_monitor<K: Resource<DynamicType = ()>>(
    parent: &K,
    parent_label: &str,
    spec: &PodMonitorSpec,
) -> DynamicObject {
    let topology = parent.name_any();
    let ours = owned::metadata(parent, name(&topology), parent_label, POD_MONITOR_LABEL);
    let mut all_labels = spec.labels.clone();
    all_labels.extend(ours.labels.clone().unwrap_or_default());
    let mut endpoint = json!({
        "port": ports::METRICS_NAME,
        "path": "/metrics",
        "relabelings": [{"action": "replace", "targetLabel": "topology", "replacement": topology}],
    });
    if let Some(interval) = &spec.interval {
        endpoint["interval"] = json!(interval);
    }
    let mut object = DynamicObject::new(&name(&topology), &api_resource());
    object.metadata = ObjectMeta {
        labels: Some(all_labels),
        ..ours
    };
    object.data = json!({"spec": {
        "selector": {"matchLabels": {
            parent_label: topology,
            labels::MANAGED_BY: labels::MANAGED_BY_VALUE,
        }},
        "podMetricsEndpoints": [endpoint],
    }});
    object
}

/// What became of the PodMonitor at this pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Applied,
    /// The API server has no PodMonitor resource.
    CrdMissing,
    /// An object of that name that is not the topology's.
    Taken,
    /// The API server refused it; its words.
    Refused(String),
}

/// The `PodMonitorReady` condition for `outcome` on the PodMonitor `name`.
pub fn condition(name: &str, outcome: &Outcome) -> ConditionSpec {
    match outcome {
        Outcome::Applied => ConditionSpec::new(
            PodMonitorReady::PodMonitorApplied,
            true,
            format!("PodMonitor {name} scrapes the exporters of every member"),
        ),
        Outcome::CrdMissing => ConditionSpec::new(
            PodMonitorReady::CrdMissing,
            false,
            format!(
                "the {POD_MONITOR_PLURAL}.{POD_MONITOR_GROUP} CRD is not installed: install prometheus-operator's CRDs, or turn spec.monitoring.podMonitor off"
            ),
        ),
        Outcome::Taken => ConditionSpec::new(
            PodMonitorReady::PodMonitorRefused,
            false,
            format!(
                "a PodMonitor {name} exists and is not this topology's: the operator leaves it alone; delete or rename it"
            ),
        ),
        Outcome::Refused(why) => ConditionSpec::new(
            PodMonitorReady::PodMonitorRefused,
            false,
            format!("PodMonitor {name} not applied: {why}"),
        ),
    }
}

/// Whether `live` already is `wanted`: same spec, and every label we set.
pub fn is_applied(live: &DynamicObject, wanted: &DynamicObject) -> bool {
    let labelled = wanted
        .labels()
        .iter()
        .all(|(k, v)| live.labels().get(k) == Some(v));
    labelled && live.data.get("spec") == wanted.data.get("spec")
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crd_types::{ValkeyCluster, ValkeyClusterSpec};

    fn cluster() -> ValkeyCluster {
        let mut c = ValkeyCluster::new("orders", ValkeyClusterSpec::default());
        c.metadata.namespace = Some("shop".into());
        c.metadata.uid = Some("uid-1".into());
        c
    }

    #[test]
    fn the_pod_monitor_selects_the_topologys_members_and_labels_their_series() {
        let spec = PodMonitorSpec {
            labels: BTreeMap::from([
                ("release".to_string(), "kps".to_string()),
                (labels::MANAGED_BY.to_string(), "me".to_string()),
            ]),
            interval: Some("15s".into()),
            ..Default::default()
        };
        let m = pod_monitor(&cluster(), labels::CLUSTER, &spec);
        assert_eq!(m.name_any(), "orders-exporters");
        assert_eq!(m.namespace().as_deref(), Some("shop"));
        let types = m.types.as_ref().unwrap();
        assert_eq!(
            (types.api_version.as_str(), types.kind.as_str()),
            ("monitoring.coreos.com/v1", "PodMonitor")
        );
        assert_eq!(m.labels()["release"], "kps", "the user's label");
        assert_eq!(
            m.labels()[labels::MANAGED_BY],
            "valkey-operator",
            "ours win"
        );
        assert_eq!(m.labels()[POD_MONITOR_LABEL], "true");
        assert_eq!(m.owner_references()[0].uid, "uid-1");
        assert_eq!(
            m.data["spec"]["selector"]["matchLabels"],
            json!({"valkey.rs/cluster": "orders", "app.kubernetes.io/managed-by": "valkey-operator"})
        );
        let endpoint = &m.data["spec"]["podMetricsEndpoints"][0];
        assert_eq!(endpoint["port"], "metrics");
        assert_eq!(endpoint["interval"], "15s");
        assert_eq!(endpoint["relabelings"][0]["replacement"], "orders");
        assert_eq!(endpoint["relabelings"][0]["targetLabel"], "topology");
        let without = pod_monitor(&cluster(), labels::CLUSTER, &PodMonitorSpec::default());
        let endpoint = &without.data["spec"]["podMetricsEndpoints"][0];
        assert!(endpoint.get("interval").is_none(), "the Prometheus's own");
    }

    #[test]
    fn only_an_enabled_pod_monitor_is_wanted() {
        assert!(wanted(None).is_none());
        assert!(wanted(Some(&MonitoringSpec::default())).is_none());
        let mut spec = MonitoringSpec {
            pod_monitor: Some(PodMonitorSpec::default()),
        };
        assert!(wanted(Some(&spec)).is_some());
        spec.pod_monitor.as_mut().unwrap().enabled = false;
        assert!(wanted(Some(&spec)).is_none());
    }

    #[test]
    fn an_applied_monitor_with_labels_added_by_others_needs_no_apply() {
        let spec = PodMonitorSpec::default();
        let wanted = pod_monitor(&cluster(), labels::CLUSTER, &spec);
        let mut live = wanted.clone();
        live.labels_mut()
            .insert("added-by".into(), "someone".into());
        assert!(is_applied(&live, &wanted));
        live.data["spec"]["podMetricsEndpoints"][0]["port"] = json!("other");
        assert!(!is_applied(&live, &wanted));
        let mut unlabelled = wanted.clone();
        unlabelled.labels_mut().remove(POD_MONITOR_LABEL);
        assert!(!is_applied(&unlabelled, &wanted));
    }

    #[test]
    fn each_outcome_says_what_to_do() {
        let ready = |o: &Outcome| condition("orders-exporters", o);
        assert!(ready(&Outcome::Applied).status());
        let missing = ready(&Outcome::CrdMissing);
        assert_eq!(missing.reason(), "CrdMissing");
        assert!(
            missing
                .message()
                .contains("podmonitors.monitoring.coreos.com CRD")
        );
        let taken = ready(&Outcome::Taken);
        assert_eq!(taken.reason(), "PodMonitorRefused");
        assert!(
            taken.message().contains("not this topology's"),
            "{}",
            taken.message()
        );
        let refused = ready(&Outcome::Refused("forbidden".into()));
        assert!(refused.message().ends_with("forbidden"));
    }
}
