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
/// match element by element. A map key dropped from `desired` is not seen, so a caller whose
/// desired maps can shrink compares those itself. A value the API server normalises (a
/// quantity, say) just never compares equal, and is applied as before.
pub fn is_applied<D: Serialize, L: Serialize>(desired: &D, live: &L) -> bool {
    match (serde_json::to_value(desired), serde_json::to_value(live)) {
        (Ok(desired), Ok(live)) => holds(&live, &desired),
        _ => false,
    }
}

fn holds(live: &serde_json::Value, desired: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (live, desired) {
        (Value::Object(live), Value::Object(desired)) => {
            desired.iter().all(|(key, want)| match live.get(key) {
                Some(have) => holds(have, want),
                None => want.is_null(),
            })
        }
        (Value::Array(live), Value::Array(desired)) => {
            live.len() == desired.len() && live.iter().zip(desired).all(|(l, d)| holds(l, d))
        }
        (live, desired) => live == desired,
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
            "metadata": {"labels": {"a": "1", "b": "2"}, "uid": "u"},
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
        // An explicit null is held by an absent field.
        assert!(is_applied(&json!({"spec": {"selector": null}}), &live));
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
