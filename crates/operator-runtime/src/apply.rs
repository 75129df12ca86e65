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
