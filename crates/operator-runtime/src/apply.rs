//! Server-side apply with the controller's own field manager.
//!
//! Every controller writes through these helpers. Each field manager owns a disjoint set
//! of fields by design (see docs/architecture.md), so `force` only ever takes fields over
//! from a human's `kubectl edit` or an older version of the same controller, never from a
//! sibling controller; a genuine overlap would show up in `managedFields`.

use std::fmt::Debug;

use kube::api::{Patch, PatchParams};
use kube::{Api, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Applies `object` (a typed object or `serde_json::Value` including apiVersion and kind)
/// as the desired state of the fields `field_manager` owns.
pub async fn apply<K, P>(
    api: &Api<K>,
    name: &str,
    object: &P,
    field_manager: &str,
) -> Result<K, kube::Error>
where
    K: Clone + DeserializeOwned + Debug,
    P: Serialize + Debug,
{
    api.patch(name, &apply_params(field_manager), &Patch::Apply(object))
        .await
}

/// Applies `status` to the status subresource of `name`.
///
/// Wraps it in the `{apiVersion, kind, status}` envelope server-side apply requires, so
/// callers pass only their part of the status.
pub async fn apply_status<K, S>(
    api: &Api<K>,
    name: &str,
    status: &S,
    field_manager: &str,
) -> Result<K, kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
    S: Serialize,
{
    let body = status_patch::<K, S>(status)?;
    api.patch_status(name, &apply_params(field_manager), &Patch::Apply(&body))
        .await
}

/// Whether `live` already holds every field of `desired` with the same value, so applying
/// `desired` would change nothing: the apply can be skipped, and an idle resync costs no
/// write. Maps may hold more than `desired` (defaults, other managers' fields); lists must
/// match element by element; labels must have the same keys (they are copied from an owner, so
/// one removed there must go here too; a label someone else added costs an apply per look).
/// Any other map key dropped from `desired` is not seen, so a caller whose desired maps can
/// shrink compares those itself. A zero value (0, false, "", empty list or map) is held by
/// an absent field: the API server drops Go's `omitempty` zeros (a probe's
/// `initialDelaySeconds: 0`). A value the API server normalises (a quantity, say) just never
/// compares equal, and is applied as before.
pub fn is_applied<D: Serialize, L: Serialize>(desired: &D, live: &L) -> bool {
    first_difference(desired, live).is_none()
}

/// The first field (a JSON pointer) where `live` does not hold `desired`, `None` when it
/// holds it all; see [`is_applied`]. For logs: why an apply was needed.
pub fn first_difference<D: Serialize, L: Serialize>(desired: &D, live: &L) -> Option<String> {
    let (Ok(desired), Ok(live)) = (serde_json::to_value(desired), serde_json::to_value(live))
    else {
        return Some("(not serialisable)".into());
    };
    if !same_label_keys(&live, &desired) {
        return Some("/metadata/labels".into());
    }
    difference(&live, &desired, String::new())
}

/// Labels are copied from the owner, so one removed there must be applied away here.
fn same_label_keys(live: &serde_json::Value, desired: &serde_json::Value) -> bool {
    let keys = |v: &serde_json::Value| {
        v.pointer("/metadata/labels")
            .and_then(|l| l.as_object())
            .map(|l| l.keys().cloned().collect::<Vec<_>>())
            .unwrap_or_default()
    };
    keys(live) == keys(desired)
}

fn difference(
    live: &serde_json::Value,
    desired: &serde_json::Value,
    path: String,
) -> Option<String> {
    use serde_json::Value;
    match (live, desired) {
        (Value::Object(live), Value::Object(desired)) => desired.iter().find_map(|(key, want)| {
            let at = format!("{path}/{key}");
            match live.get(key) {
                Some(have) => difference(have, want, at),
                None if is_zero(want) => None,
                None => Some(at),
            }
        }),
        (Value::Array(live), Value::Array(desired)) if live.len() == desired.len() => live
            .iter()
            .zip(desired)
            .enumerate()
            .find_map(|(i, (l, d))| difference(l, d, format!("{path}/{i}"))),
        (live, desired) if live == desired => None,
        _ => Some(if path.is_empty() { "/".into() } else { path }),
    }
}

fn is_zero(value: &serde_json::Value) -> bool {
    use serde_json::Value;
    match value {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

fn apply_params(field_manager: &str) -> PatchParams {
    PatchParams::apply(field_manager).force()
}

fn status_patch<K, S>(status: &S) -> Result<serde_json::Value, kube::Error>
where
    K: Resource<DynamicType = ()>,
    S: Serialize,
{
    let status = serde_json::to_value(status).map_err(kube::Error::SerdeError)?;
    Ok(serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus};

    #[test]
    fn apply_params_force_with_the_given_manager() {
        let params = apply_params("valkey-operator/node");
        assert_eq!(
            params.field_manager.as_deref(),
            Some("valkey-operator/node")
        );
        assert!(params.force);
    }

    #[test]
    fn applied_means_every_desired_field_is_live() {
        use serde_json::json;
        let desired =
            json!({"metadata": {"labels": {"a": "1"}}, "spec": {"ports": [{"port": 6379}]}});
        // Defaults and others' fields around ours: nothing to apply.
        let live = json!({
            "metadata": {"labels": {"a": "1"}, "annotations": {"x": "y"}, "uid": "u"},
            "spec": {"ports": [{"port": 6379, "protocol": "TCP"}], "type": "ClusterIP"},
        });
        assert!(is_applied(&desired, &live));
        // A changed value, a missing field, a list of another length: apply.
        let changed =
            json!({"metadata": {"labels": {"a": "2"}}, "spec": {"ports": [{"port": 6379}]}});
        assert!(!is_applied(&changed, &live));
        let more = json!({"spec": {"clusterIP": "None"}});
        assert!(!is_applied(&more, &live));
        let two_ports = json!({"spec": {"ports": [{"port": 6379}, {"port": 16379}]}});
        assert!(!is_applied(&two_ports, &live));
        // A label gone from the desired object must be applied away.
        let fewer_labels = json!({"metadata": {"labels": {}}, "spec": {"ports": [{"port": 6379}]}});
        assert!(!is_applied(
            &fewer_labels,
            &json!({"metadata": {"labels": {"a": "1"}}, "spec": {"ports": [{"port": 6379}]}})
        ));
        // An explicit null is held by an absent field.
        let null = json!({"metadata": {"labels": {"a": "1"}}, "spec": {"selector": null}});
        assert!(is_applied(&null, &live));
        // So is a zero the API server dropped (omitempty), but not a non-zero.
        let zero = json!({"metadata": {"labels": {"a": "1"}}, "spec": {"ports": [{"port": 6379, "nodePort": 0}]}});
        assert!(is_applied(&zero, &live));
        let node_port = json!({"metadata": {"labels": {"a": "1"}}, "spec": {"ports": [{"port": 6379, "nodePort": 30000}]}});
        assert_eq!(
            first_difference(&node_port, &live).as_deref(),
            Some("/spec/ports/0/nodePort")
        );
    }

    #[test]
    fn status_patch_has_the_envelope_server_side_apply_needs() {
        let status = DeploymentStatus {
            replicas: Some(3),
            ..Default::default()
        };
        let body = status_patch::<Deployment, _>(&status).unwrap();
        assert_eq!(
            body,
            serde_json::json!({
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "status": { "replicas": 3 },
            })
        );
    }
}
