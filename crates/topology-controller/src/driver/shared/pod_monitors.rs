//! The topology's own PodMonitor (`spec.monitoring.podMonitor`, built by
//! [`topology_controller::shared::pod_monitor`]): applied when asked for, deleted when no longer
//! asked for, and reported as the `PodMonitorReady` condition. Never an error of the
//! reconcile: without prometheus-operator's CRDs, or without the RBAC rule, the members are
//! looked after all the same.

use crd_types::conditions::{self, ConditionSpec, types};
use kube::api::{DeleteParams, DynamicObject};
use kube::{Api, ResourceExt};
use operator_runtime::{Context, apply};
use topology_controller::shared::events::TopologyEvent;
use topology_controller::shared::owned;
use topology_controller::shared::pod_monitor::{self, Outcome};

use crate::driver::shared::stages::Apis;
use crate::driver::shared::topology::Topology;

/// The `PodMonitorReady` condition to write: `None` once no PodMonitor is asked for and none
/// made before is left. A PodMonitor is deleted only while status still has the condition
/// (one was made), so topologies that never asked for one cost no request.
pub async fn reconcile<T: Topology>(
    ctx: &Context,
    apis: &Apis<T>,
    topology: &T,
) -> Option<ConditionSpec> {
    let name = pod_monitor::name(&topology.name_any());
    let api: Api<DynamicObject> = Api::namespaced_with(
        ctx.client.clone(),
        &apis.namespace,
        &pod_monitor::api_resource(),
    );
    let current = conditions::find(topology.conditions(), types::POD_MONITOR_READY);
    let condition = match pod_monitor::wanted(topology.monitoring()) {
        Some(spec) => {
            let wanted = pod_monitor::pod_monitor(topology, T::MEMBER_LABEL, spec);
            let outcome = apply_one(&api, &wanted, apis.field_manager).await;
            pod_monitor::condition(&name, &outcome)
        }
        None if current.is_some() => match delete_ours(&api, topology, &name).await {
            Ok(()) => return None,
            Err(why) => pod_monitor::condition(&name, &Outcome::Refused(why)),
        },
        None => return None,
    };
    let changed = current.is_none_or(|c| c.reason != condition.reason());
    if !condition.status() && changed {
        let note = condition.message().to_string();
        tracing::warn!(kind = T::KIND, name = %topology.name_any(), %note, "pod monitor not applied");
        let reason = TopologyEvent::PodMonitorNotApplied;
        ctx.events.publish(topology, reason, note, None).await;
    }
    Some(condition)
}

/// Applies `wanted` unless it already is, or an object of its name is somebody else's.
async fn apply_one(api: &Api<DynamicObject>, wanted: &DynamicObject, manager: &str) -> Outcome {
    let name = wanted.name_any();
    match api.get_opt(&name).await {
        Ok(Some(live)) if !owned::same_owner(&live, wanted) => return Outcome::Taken,
        Ok(Some(live)) if pod_monitor::is_applied(&live, wanted) => return Outcome::Applied,
        // Absent, or no such resource: the apply tells which.
        Ok(_) => {}
        Err(e) => return refused(e),
    }
    match apply::apply(api, &name, wanted, manager).await {
        Ok(_) => Outcome::Applied,
        Err(e) => refused(e),
    }
}

/// A 404 where the namespace exists: the API server has no PodMonitor resource.
fn refused(error: kube::Error) -> Outcome {
    match &error {
        kube::Error::Api(response) if response.code == 404 => Outcome::CrdMissing,
        _ => Outcome::Refused(operator_runtime::error_chain(&error)),
    }
}

/// Deletes the topology's PodMonitor if it is there and the topology's; gone already, or no
/// such resource any more, is done too.
async fn delete_ours<T: Topology>(
    api: &Api<DynamicObject>,
    topology: &T,
    name: &str,
) -> Result<(), String> {
    let live = match api.get_opt(name).await {
        Ok(Some(live)) => live,
        Ok(None) => return Ok(()),
        Err(kube::Error::Api(r)) if r.code == 404 => return Ok(()),
        Err(e) => return Err(operator_runtime::error_chain(&e)),
    };
    let uid = topology.meta().uid.as_deref();
    if !live
        .owner_references()
        .iter()
        .any(|o| Some(o.uid.as_str()) == uid)
    {
        return Ok(());
    }
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(r)) if r.code == 404 => Ok(()),
        Err(e) => Err(format!(
            "the spec no longer asks for it, and deleting it failed: {}",
            operator_runtime::error_chain(&e)
        )),
    }
}
