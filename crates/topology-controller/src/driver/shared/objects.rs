//! The Kubernetes half of a topology: fetching it with its member ValkeyNodes, and the
//! objects it owns besides (PodDisruptionBudgets, its NetworkPolicy).

use std::fmt::Debug;

use crd_types::ValkeyNode;
use k8s_openapi::serde::Serialize;
use k8s_openapi::serde::de::DeserializeOwned;
use kube::api::{DeleteParams, ListParams};
use kube::{Api, Resource, ResourceExt};
use operator_runtime::{ApiError, ApiResultExt, ObjectName, Op, apply};
use topology_controller::shared::disruption;
use topology_controller::shared::owned;

/// A topology as it is now (the cache may lag behind the status written a moment ago) and
/// the ValkeyNodes labelled `<label>=<name>`, split into those it owns and the others;
/// `None` when it is gone or going.
pub async fn fetch_with_members<K>(
    parents: &Api<K>,
    nodes: &Api<ValkeyNode>,
    namespace: &str,
    name: &str,
    label: &str,
) -> Result<Option<(K, Vec<ValkeyNode>, Vec<ValkeyNode>)>, ApiError>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    let Some(parent) = parents
        .get_opt(name)
        .await
        .on(Op::Read, ObjectName::new::<K>(namespace, name))?
    else {
        return Ok(None);
    };
    if parent.meta().deletion_timestamp.is_some() {
        return Ok(None);
    }
    let uid = parent.uid().unwrap_or_default();
    let (owned, foreign) = nodes
        .list(&ListParams::default().labels(&format!("{label}={name}")))
        .await
        .on(Op::List, ObjectName::new::<ValkeyNode>(namespace, name))?
        .items
        .into_iter()
        .partition(|n| n.owner_references().iter().any(|o| o.uid == uid));
    Ok(Some((parent, owned, foreign)))
}

/// Applies the objects a topology owns of one kind (its disruption budgets, its network
/// policy) where the live ones (those listed by `selector`, see
/// [`disruption::budgets_selector`]) do not hold them, and deletes the listed ones no longer
/// wanted. One list per look when nothing changed. An object of a wanted name that another
/// owner (or nobody) controls is never taken over: the error says so (409).
pub async fn apply_owned<K>(
    api: &Api<K>,
    namespace: &str,
    selector: &str,
    wanted: &[K],
    field_manager: &str,
) -> Result<(), ApiError>
where
    K: Resource<DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned,
{
    let live = api
        .list(&ListParams::default().labels(selector))
        .await
        .on(Op::List, ObjectName::new::<K>(namespace, selector))?
        .items;
    let mut conflict = None;
    for object in wanted {
        let name = object.name_any();
        let current = match live.iter().find(|l| l.name_any() == name) {
            Some(listed) => Some(listed.clone()),
            // Not listed by our labels: look by name before creating.
            None => api
                .get_opt(&name)
                .await
                .on(Op::Read, ObjectName::new::<K>(namespace, &name))?,
        };
        if let Some(current) = current {
            if !owned::same_owner(&current, object) {
                // The others still get applied; the refusal is reported at the end.
                conflict.get_or_insert_with(|| not_ours::<K>(namespace, &name, object));
                continue;
            }
            if apply::is_applied(object, &current) {
                continue;
            }
        }
        apply::apply(api, &name, object, field_manager)
            .await
            .on(Op::Apply, ObjectName::new::<K>(namespace, &name))?;
    }
    for stale in disruption::stale(&live, wanted) {
        api.delete(&stale, &DeleteParams::default())
            .await
            .map(drop)
            .or_else(|e| match e {
                kube::Error::Api(s) if s.code == 404 => Ok(()),
                e => Err(e),
            })
            .on(Op::Delete, ObjectName::new::<K>(namespace, &stale))?;
    }
    conflict.map_or(Ok(()), Err)
}

/// The refusal to apply over `name`, which exists with another controller (or none).
fn not_ours<K>(namespace: &str, name: &str, wanted: &K) -> ApiError
where
    K: Resource<DynamicType = ()>,
{
    let owner = wanted
        .owner_references()
        .first()
        .map(|o| format!("{} {}", o.kind, o.name))
        .unwrap_or_default();
    let message = format!(
        "{} {namespace}/{name} exists and is not {owner}'s: left alone (rename or delete it)",
        K::kind(&())
    );
    let status = kube::core::Status::failure(&message, "AlreadyExists").with_code(409);
    Err::<(), _>(kube::Error::Api(Box::new(status)))
        .on(Op::Apply, ObjectName::new::<K>(namespace, name))
        .unwrap_err()
}
