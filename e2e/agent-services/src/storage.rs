//! Directory-backed dynamic provisioner, playing the roles of an external
//! provisioner + external-resizer + kubelet volume expansion for the local
//! cluster. kube-controller-manager's PV controller still does the binding:
//! we create PVs pre-bound (claimRef) to their claim and let it finish.
//!
//! Two StorageClasses share the provisioner: `local-dir` (the default) backs each
//! PV with a plain directory, which never fills; `local-sized` mounts a tmpfs of
//! the claim's size on it, so a volume really fills up (ENOSPC) and `df` and the
//! kubelet stats show its capacity. Growing a `local-sized` volume remounts the
//! tmpfs with the new size (online, what a CSI driver's node expansion does),
//! then records the size on the PV and the claim. A tmpfs lives as long as its
//! mount: the data survives pod and agent restarts, not the local cluster (its
//! teardown unmounts every mount under the run directory). The provisioner also
//! serves any other class naming it (tests make one without expansion).
//!
//! Crash-safety: the PV name is derived from the claim UID (`pvc-<uid>`), so
//! re-running after a crash finds the existing PV (409) instead of creating
//! a duplicate. The directory is created before the PV; a crash in between
//! leaves an empty directory only if the claim is deleted meanwhile.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{
    HostPathVolumeSource, ObjectReference, PersistentVolume, PersistentVolumeClaim,
    PersistentVolumeSpec,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, Client, Resource};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::Error;
/// A storage quantity in bytes, rounded up.
fn parse_quantity(q: &str) -> Option<u128> {
    crate::quantity::whole_units(q).ok()
}

pub const STORAGE_CLASS: &str = "local-dir";
/// Size-limited, growable volumes (a tmpfs per PV).
pub const SIZED_STORAGE_CLASS: &str = "local-sized";
pub const PROVISIONER: &str = "local.valkey-operator.dev/dir";
/// The StorageClass parameter (and PV annotation) choosing the backing: `tmpfs` or a
/// plain directory.
pub const MEDIUM: &str = "medium";
const MEDIUM_ANNOTATION: &str = "local.valkey-operator.dev/medium";

const PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
const DEFAULT_CLASS: &str = "storageclass.kubernetes.io/is-default-class";
const FIELD_MANAGER: &str = "agent-services-provisioner";
/// Conditions the external-resizer/kubelet set while a resize is pending;
/// all are cleared once the new size is in effect.
const RESIZE_CONDITIONS: &[&str] = &[
    "Resizing",
    "FileSystemResizePending",
    "ControllerResizeError",
    "NodeResizeError",
];

/// Ensure the `local-dir` StorageClass, then provision, expand and reclaim
/// volumes under `volumes_dir` until `shutdown` resolves.
pub async fn run_provisioner(
    client: Client,
    volumes_dir: PathBuf,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    // Absolute, so PV hostPaths are usable and the reclaim safety check
    // compares like with like.
    let volumes_dir = std::path::absolute(&volumes_dir)?;
    tokio::fs::create_dir_all(&volumes_dir).await?;
    tokio::pin!(shutdown);

    // The API server may still be starting; keep trying until it answers.
    loop {
        tokio::select! {
            _ = shutdown.as_mut() => return Ok(()),
            r = ensure_storage_class(&client) => match r {
                Ok(()) => break,
                Err(e) => {
                    warn!(error = %e, "ensuring StorageClass {STORAGE_CLASS} failed; retrying");
                    tokio::select! {
                        _ = shutdown.as_mut() => return Ok(()),
                        _ = tokio::time::sleep(Duration::from_secs(2)) => {}
                    }
                }
            },
        }
    }
    info!(dir = %volumes_dir.display(), "provisioner running");

    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: PROVISIONER.into(),
            instance: Some(FIELD_MANAGER.into()),
        },
    );
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        volumes_dir,
        recorder,
    });
    let stop = CancellationToken::new();
    let claims = Controller::new(
        Api::<PersistentVolumeClaim>::all(client.clone()),
        watcher::Config::default(),
    )
    // PV changes (binding, capacity) re-trigger their claim.
    .watches(
        Api::<PersistentVolume>::all(client.clone()),
        watcher::Config::default(),
        |pv| {
            let r = pv.spec?.claim_ref?;
            Some(ObjectRef::new(&r.name?).within(&r.namespace?))
        },
    )
    .graceful_shutdown_on(stop.clone().cancelled_owned())
    .run(reconcile_claim, error_policy, ctx.clone())
    .for_each(|r| async move {
        if let Err(e) = r {
            debug!(error = %e, "claim controller");
        }
    });
    let volumes = Controller::new(
        Api::<PersistentVolume>::all(client),
        watcher::Config::default(),
    )
    .graceful_shutdown_on(stop.clone().cancelled_owned())
    .run(reconcile_volume, error_policy, ctx)
    .for_each(|r| async move {
        if let Err(e) = r {
            debug!(error = %e, "volume controller");
        }
    });
    let stopper = async {
        shutdown.as_mut().await;
        stop.cancel();
    };
    tokio::join!(stopper, claims, volumes);
    Ok(())
}

async fn ensure_storage_class(client: &Client) -> Result<(), Error> {
    let dir = json!({
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": STORAGE_CLASS,
            "annotations": { DEFAULT_CLASS: "true" },
        },
        "provisioner": PROVISIONER,
        "allowVolumeExpansion": true,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "Immediate",
    });
    let sized = json!({
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": { "name": SIZED_STORAGE_CLASS },
        "provisioner": PROVISIONER,
        "parameters": { MEDIUM: "tmpfs" },
        "allowVolumeExpansion": true,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "Immediate",
    });
    let classes = Api::<StorageClass>::all(client.clone());
    for (name, class) in [(STORAGE_CLASS, dir), (SIZED_STORAGE_CLASS, sized)] {
        classes
            .patch(
                name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&class),
            )
            .await?;
    }
    Ok(())
}

/// Whether PVs of `class` are size-limited tmpfs mounts.
fn is_tmpfs(class: &StorageClass) -> bool {
    class
        .parameters
        .as_ref()
        .and_then(|p| p.get(MEDIUM))
        .is_some_and(|m| m == "tmpfs")
}

/// `size=` for a tmpfs of `bytes`: whole pages, at least one.
pub(crate) fn tmpfs_size(bytes: u128) -> u128 {
    const PAGE: u128 = 4096;
    bytes.div_ceil(PAGE).max(1) * PAGE
}

/// Mounts (or, `remount`, resizes) the tmpfs of a PV at `dir`.
fn mount_tmpfs(dir: &Path, bytes: u128, remount: bool) -> std::io::Result<()> {
    use nix::mount::{MsFlags, mount};
    let options = format!("size={},mode=0777", tmpfs_size(bytes));
    let flags = if remount {
        MsFlags::MS_REMOUNT
    } else {
        MsFlags::empty()
    };
    mount(
        Some("tmpfs"),
        dir,
        Some("tmpfs"),
        flags | MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(options.as_str()),
    )
    .map_err(std::io::Error::from)
}

/// Whether `dir` is a mount point of its own (its device differs from its parent's).
pub(crate) fn is_mount_point(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let (Ok(me), Some(Ok(parent))) = (std::fs::metadata(dir), dir.parent().map(std::fs::metadata))
    else {
        return false;
    };
    me.dev() != parent.dev()
}

fn is_tmpfs_pv(pv: &PersistentVolume) -> bool {
    pv.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(MEDIUM_ANNOTATION))
        .is_some_and(|m| m == "tmpfs")
}

struct Ctx {
    client: Client,
    volumes_dir: PathBuf,
    recorder: Recorder,
}

impl Ctx {
    /// Best effort, like the events of the components we stand in for.
    async fn event(&self, pvc: &PersistentVolumeClaim, reason: &str, note: String) {
        let ev = Event {
            type_: EventType::Normal,
            reason: reason.into(),
            note: Some(note),
            action: reason.into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&ev, &pvc.object_ref(&())).await {
            debug!(error = %e, "publishing event failed");
        }
    }
}

fn error_policy<K>(_obj: Arc<K>, err: &Error, _ctx: Arc<Ctx>) -> Action {
    warn!(error = %err, "provisioner reconcile failed; retrying");
    Action::requeue(Duration::from_secs(5))
}

fn is_conflict(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

fn ours(meta: &ObjectMeta) -> bool {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(PROVISIONED_BY))
        .is_some_and(|p| p == PROVISIONER)
}

/// Whether `pvc` asks for `class`. An explicit `""` means "no class" in
/// Kubernetes (static binding only), so only an *unset* class falls back to
/// the default class (the DefaultStorageClass admission plugin or the PV
/// controller's retroactive defaulting normally fills it in anyway).
pub(crate) fn wants_class(pvc: &PersistentVolumeClaim, class: &StorageClass) -> bool {
    let name = class.metadata.name.as_deref().unwrap_or_default();
    match pvc
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.as_deref())
    {
        Some(c) => c == name,
        None => class
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(DEFAULT_CLASS))
            .is_some_and(|v| v == "true"),
    }
}

fn storage_of(map: Option<&BTreeMap<String, Quantity>>) -> Option<&Quantity> {
    map?.get("storage")
}

/// The PV to provision for `pvc`, pre-bound to it.
pub(crate) fn pv_for_claim(
    pvc: &PersistentVolumeClaim,
    class: &StorageClass,
    volumes_dir: &Path,
) -> Result<PersistentVolume, String> {
    let meta = &pvc.metadata;
    let (Some(ns), Some(name), Some(uid)) = (&meta.namespace, &meta.name, &meta.uid) else {
        return Err("claim lacks namespace/name/uid".into());
    };
    let spec = pvc.spec.as_ref().ok_or("claim has no spec")?;
    if spec.volume_mode.as_deref() == Some("Block") {
        return Err(format!("{ns}/{name}: Block volumes are not supported"));
    }
    let size = storage_of(spec.resources.as_ref().and_then(|r| r.requests.as_ref()))
        .ok_or_else(|| format!("{ns}/{name}: no storage request"))?;
    if parse_quantity(&size.0).is_none() {
        return Err(format!(
            "{ns}/{name}: unparsable storage request {:?}",
            size.0
        ));
    }
    let pv_name = format!("pvc-{uid}");
    let path = volumes_dir.join(&pv_name);
    let access_modes = spec
        .access_modes
        .clone()
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| vec!["ReadWriteOnce".into()]);
    Ok(PersistentVolume {
        metadata: ObjectMeta {
            name: Some(pv_name),
            annotations: Some(
                [(PROVISIONED_BY, PROVISIONER)]
                    .into_iter()
                    .chain(is_tmpfs(class).then_some((MEDIUM_ANNOTATION, "tmpfs")))
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        },
        spec: Some(PersistentVolumeSpec {
            access_modes: Some(access_modes),
            capacity: Some(BTreeMap::from([("storage".into(), size.clone())])),
            claim_ref: Some(ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("PersistentVolumeClaim".into()),
                namespace: Some(ns.clone()),
                name: Some(name.clone()),
                uid: Some(uid.clone()),
                ..Default::default()
            }),
            host_path: Some(HostPathVolumeSource {
                path: path.to_string_lossy().into_owned(),
                type_: Some("DirectoryOrCreate".into()),
            }),
            persistent_volume_reclaim_policy: Some(
                class
                    .reclaim_policy
                    .clone()
                    .unwrap_or_else(|| "Delete".into()),
            ),
            storage_class_name: class.metadata.name.clone(),
            volume_mode: Some("Filesystem".into()),
            mount_options: class.mount_options.clone(),
            ..Default::default()
        }),
        status: None,
    })
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ExpansionPlan {
    /// The size to record on the PVC status (and the PV, if `patch_pv`).
    pub size: Quantity,
    pub patch_pv: bool,
}

/// What to do for a bound claim: grow the PV to the request and publish it
/// on the claim status; or, if the PV already grew (e.g. we crashed between
/// the two writes), just finish the claim status. Never shrinks.
pub(crate) fn expansion_plan(
    pvc: &PersistentVolumeClaim,
    pv: &PersistentVolume,
    allow_expansion: bool,
) -> Option<ExpansionPlan> {
    let status = pvc.status.as_ref()?;
    if !allow_expansion || status.phase.as_deref() != Some("Bound") {
        return None;
    }
    let req_q = storage_of(pvc.spec.as_ref()?.resources.as_ref()?.requests.as_ref())?;
    let pv_q = storage_of(pv.spec.as_ref()?.capacity.as_ref())?;
    let req = parse_quantity(&req_q.0)?;
    let cap = parse_quantity(&pv_q.0)?;
    let shown = storage_of(status.capacity.as_ref())
        .and_then(|q| parse_quantity(&q.0))
        .unwrap_or(0);
    if req > cap {
        Some(ExpansionPlan {
            size: req_q.clone(),
            patch_pv: true,
        })
    } else if req > shown {
        Some(ExpansionPlan {
            size: pv_q.clone(),
            patch_pv: false,
        })
    } else {
        None
    }
}

/// Merge patch for the claim status once the new size is in effect: what
/// external-resizer + kubelet leave behind after an online expansion.
pub(crate) fn resized_status_patch(
    pvc: &PersistentVolumeClaim,
    size: &Quantity,
) -> serde_json::Value {
    let conditions: Vec<_> = pvc
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|c| !RESIZE_CONDITIONS.contains(&c.type_.as_str()))
        .collect();
    json!({
        "status": {
            "capacity": { "storage": size },
            "allocatedResources": { "storage": size },
            "allocatedResourceStatuses": null,
            "conditions": conditions,
        }
    })
}

async fn reconcile_claim(pvc: Arc<PersistentVolumeClaim>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    if pvc.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let classes = Api::<StorageClass>::all(ctx.client.clone());
    let wanted = pvc
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.clone())
        .unwrap_or_else(|| STORAGE_CLASS.to_string());
    let Some(class) = classes.get_opt(&wanted).await? else {
        return Ok(Action::requeue(Duration::from_secs(10)));
    };
    if class.provisioner != PROVISIONER || !wants_class(&pvc, &class) {
        return Ok(Action::await_change());
    }
    let volume = pvc
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .filter(|v| !v.is_empty());
    match volume {
        None => provision(&pvc, &class, &ctx).await,
        Some(pv) => expand(&pvc, pv, &class, &ctx).await,
    }
}

async fn provision(
    pvc: &PersistentVolumeClaim,
    class: &StorageClass,
    ctx: &Ctx,
) -> Result<Action, Error> {
    let phase = pvc.status.as_ref().and_then(|s| s.phase.as_deref());
    if !matches!(phase, None | Some("Pending")) {
        return Ok(Action::await_change());
    }
    let pv = pv_for_claim(pvc, class, &ctx.volumes_dir).map_err(Error::Provision)?;
    let name = pv.metadata.name.clone().unwrap_or_default();
    let dir = ctx.volumes_dir.join(&name);
    tokio::fs::create_dir_all(&dir).await?;
    if is_tmpfs_pv(&pv) && !is_mount_point(&dir) {
        let bytes = storage_of(pv.spec.as_ref().and_then(|s| s.capacity.as_ref()))
            .and_then(|q| parse_quantity(&q.0))
            .unwrap_or(0);
        mount_tmpfs(&dir, bytes, false)?;
    }
    match Api::<PersistentVolume>::all(ctx.client.clone())
        .create(&PostParams::default(), &pv)
        .await
    {
        Ok(_) => {
            info!(pv = %name, claim = %claim_name(pvc), "provisioned");
            let note = format!(
                "Successfully provisioned volume {name} at {}",
                dir.display()
            );
            ctx.event(pvc, "ProvisioningSucceeded", note).await;
        }
        Err(e) if is_conflict(&e, 409) => debug!(pv = %name, "already provisioned"),
        Err(e) => return Err(e.into()),
    }
    // The PV watch re-triggers this claim once the PV controller binds it.
    Ok(Action::await_change())
}

async fn expand(
    pvc: &PersistentVolumeClaim,
    pv_name: &str,
    class: &StorageClass,
    ctx: &Ctx,
) -> Result<Action, Error> {
    let pvs = Api::<PersistentVolume>::all(ctx.client.clone());
    let Some(pv) = pvs.get_opt(pv_name).await? else {
        return Ok(Action::await_change());
    };
    if !ours(&pv.metadata) {
        return Ok(Action::await_change());
    }
    let Some(plan) = expansion_plan(pvc, &pv, class.allow_volume_expansion.unwrap_or(false)) else {
        return Ok(Action::await_change());
    };
    // The file system first (a CSI node expansion, online), then the PV: the claim
    // status must never claim more than the volume has.
    if plan.patch_pv && is_tmpfs_pv(&pv) {
        let dir = ctx.volumes_dir.join(pv_name);
        let bytes = parse_quantity(&plan.size.0).unwrap_or(0);
        mount_tmpfs(&dir, bytes, true)?;
    }
    if plan.patch_pv {
        let patch = json!({ "spec": { "capacity": { "storage": plan.size } } });
        pvs.patch(pv_name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    let ns = pvc.metadata.namespace.as_deref().unwrap_or_default();
    Api::<PersistentVolumeClaim>::namespaced(ctx.client.clone(), ns)
        .patch_status(
            pvc.metadata.name.as_deref().unwrap_or_default(),
            &PatchParams::default(),
            &Patch::Merge(&resized_status_patch(pvc, &plan.size)),
        )
        .await?;
    info!(claim = %claim_name(pvc), size = %plan.size.0, "expanded");
    let note = format!("resize volume {pv_name} to {} succeeded", plan.size.0);
    ctx.event(pvc, "VolumeResizeSuccessful", note).await;
    Ok(Action::await_change())
}

fn claim_name(pvc: &PersistentVolumeClaim) -> String {
    format!(
        "{}/{}",
        pvc.metadata.namespace.as_deref().unwrap_or_default(),
        pvc.metadata.name.as_deref().unwrap_or_default()
    )
}

/// The directory of one of our PVs, only if it is exactly
/// `<volumes_dir>/<pv name>`: never delete anything else.
pub(crate) fn owned_dir(pv: &PersistentVolume, volumes_dir: &Path) -> Option<PathBuf> {
    let name = pv.metadata.name.as_deref()?;
    let path = PathBuf::from(&pv.spec.as_ref()?.host_path.as_ref()?.path);
    (path == volumes_dir.join(name) && !name.is_empty() && !name.contains('/') && name != "..")
        .then_some(path)
}

async fn reconcile_volume(pv: Arc<PersistentVolume>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    if !ours(&pv.metadata) {
        return Ok(Action::await_change());
    }
    let phase = pv.status.as_ref().and_then(|s| s.phase.as_deref());
    let policy = pv
        .spec
        .as_ref()
        .and_then(|s| s.persistent_volume_reclaim_policy.as_deref());
    // Retain (and Recycle) leave both the PV and the data alone.
    if phase != Some("Released") || policy != Some("Delete") {
        return Ok(Action::await_change());
    }
    let name = pv.metadata.name.clone().unwrap_or_default();
    let Some(dir) = owned_dir(&pv, &ctx.volumes_dir) else {
        warn!(pv = %name, "hostPath is outside the volumes dir; not deleting");
        return Ok(Action::await_change());
    };
    if is_mount_point(&dir) {
        nix::mount::umount2(&dir, nix::mount::MntFlags::MNT_DETACH)
            .map_err(std::io::Error::from)?;
    }
    match tokio::fs::remove_dir_all(&dir).await {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e.into()),
    }
    match Api::<PersistentVolume>::all(ctx.client.clone())
        .delete(&name, &DeleteParams::default())
        .await
    {
        Ok(_) => info!(pv = %name, "reclaimed (deleted)"),
        Err(e) if is_conflict(&e, 404) => {}
        Err(e) => return Err(e.into()),
    }
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        PersistentVolumeClaimCondition, PersistentVolumeClaimSpec, PersistentVolumeClaimStatus,
        VolumeResourceRequirements,
    };

    fn class(default: bool) -> StorageClass {
        StorageClass {
            metadata: ObjectMeta {
                name: Some(STORAGE_CLASS.into()),
                annotations: default
                    .then(|| BTreeMap::from([(DEFAULT_CLASS.into(), "true".into())])),
                ..Default::default()
            },
            provisioner: PROVISIONER.into(),
            reclaim_policy: Some("Retain".into()),
            allow_volume_expansion: Some(true),
            ..Default::default()
        }
    }

    fn claim(class: Option<&str>, request: &str) -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            metadata: ObjectMeta {
                namespace: Some("ns".into()),
                name: Some("data-v-0".into()),
                uid: Some("1234-abcd".into()),
                ..Default::default()
            },
            spec: Some(PersistentVolumeClaimSpec {
                storage_class_name: class.map(Into::into),
                access_modes: Some(vec!["ReadWriteOnce".into()]),
                resources: Some(VolumeResourceRequirements {
                    requests: Some(BTreeMap::from([(
                        "storage".into(),
                        Quantity(request.into()),
                    )])),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            status: Some(PersistentVolumeClaimStatus {
                phase: Some("Pending".into()),
                ..Default::default()
            }),
        }
    }

    fn bound(mut pvc: PersistentVolumeClaim, shown: &str) -> PersistentVolumeClaim {
        pvc.spec.as_mut().unwrap().volume_name = Some("pvc-1234-abcd".into());
        pvc.status = Some(PersistentVolumeClaimStatus {
            phase: Some("Bound".into()),
            capacity: Some(BTreeMap::from([("storage".into(), Quantity(shown.into()))])),
            conditions: Some(vec![
                PersistentVolumeClaimCondition {
                    type_: "FileSystemResizePending".into(),
                    status: "True".into(),
                    ..Default::default()
                },
                PersistentVolumeClaimCondition {
                    type_: "ModifyingVolume".into(),
                    status: "True".into(),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        });
        pvc
    }

    #[test]
    fn builds_prebound_pv() {
        let pv = pv_for_claim(
            &claim(Some(STORAGE_CLASS), "1Gi"),
            &class(true),
            Path::new("/vols"),
        )
        .unwrap();
        let v = serde_json::to_value(&pv).unwrap();
        assert_eq!(
            v,
            json!({
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {
                    "name": "pvc-1234-abcd",
                    "annotations": { PROVISIONED_BY: PROVISIONER },
                },
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "capacity": { "storage": "1Gi" },
                    "claimRef": {
                        "apiVersion": "v1",
                        "kind": "PersistentVolumeClaim",
                        "namespace": "ns",
                        "name": "data-v-0",
                        "uid": "1234-abcd",
                    },
                    "hostPath": { "path": "/vols/pvc-1234-abcd", "type": "DirectoryOrCreate" },
                    "persistentVolumeReclaimPolicy": "Retain",
                    "storageClassName": STORAGE_CLASS,
                    "volumeMode": "Filesystem",
                },
            })
        );
        assert_eq!(
            owned_dir(&pv, Path::new("/vols")),
            Some(PathBuf::from("/vols/pvc-1234-abcd"))
        );
        assert_eq!(owned_dir(&pv, Path::new("/other")), None);

        let mut block = claim(Some(STORAGE_CLASS), "1Gi");
        block.spec.as_mut().unwrap().volume_mode = Some("Block".into());
        assert!(pv_for_claim(&block, &class(true), Path::new("/vols")).is_err());
        let mut no_req = claim(Some(STORAGE_CLASS), "1Gi");
        no_req.spec.as_mut().unwrap().resources = None;
        assert!(pv_for_claim(&no_req, &class(true), Path::new("/vols")).is_err());
    }

    #[test]
    fn sized_classes_mark_their_volumes() {
        let mut sized = class(false);
        sized.metadata.name = Some(SIZED_STORAGE_CLASS.into());
        sized.parameters = Some(BTreeMap::from([(MEDIUM.into(), "tmpfs".into())]));
        let pv = pv_for_claim(
            &claim(Some(SIZED_STORAGE_CLASS), "16Mi"),
            &sized,
            Path::new("/v"),
        )
        .unwrap();
        assert!(is_tmpfs_pv(&pv));
        let plain = pv_for_claim(
            &claim(Some(STORAGE_CLASS), "16Mi"),
            &class(true),
            Path::new("/v"),
        )
        .unwrap();
        assert!(!is_tmpfs_pv(&plain));
        assert_eq!(tmpfs_size(16 << 20), 16 << 20);
        assert_eq!(tmpfs_size(1), 4096);
        assert_eq!(tmpfs_size(0), 4096);
        assert!(!is_mount_point(Path::new("/nonexistent/x")));
    }

    #[test]
    fn class_selection() {
        assert!(wants_class(
            &claim(Some(STORAGE_CLASS), "1Gi"),
            &class(false)
        ));
        assert!(!wants_class(&claim(Some("other"), "1Gi"), &class(true)));
        assert!(wants_class(&claim(None, "1Gi"), &class(true)));
        assert!(!wants_class(&claim(None, "1Gi"), &class(false)));
        // "" explicitly opts out of dynamic provisioning.
        assert!(!wants_class(&claim(Some(""), "1Gi"), &class(true)));
    }

    fn pv_with(capacity: &str) -> PersistentVolume {
        let mut pv = pv_for_claim(
            &claim(Some(STORAGE_CLASS), capacity),
            &class(true),
            Path::new("/v"),
        )
        .unwrap();
        pv.spec.as_mut().unwrap().capacity = Some(BTreeMap::from([(
            "storage".into(),
            Quantity(capacity.into()),
        )]));
        pv
    }

    #[test]
    fn expansion_decisions() {
        let grow = bound(claim(Some(STORAGE_CLASS), "2Gi"), "1Gi");
        assert_eq!(
            expansion_plan(&grow, &pv_with("1Gi"), true),
            Some(ExpansionPlan {
                size: Quantity("2Gi".into()),
                patch_pv: true
            })
        );
        assert_eq!(
            expansion_plan(&grow, &pv_with("1Gi"), false),
            None,
            "class forbids"
        );
        // PV already grown, status lagging (crash between writes).
        assert_eq!(
            expansion_plan(&grow, &pv_with("2048Mi"), true),
            Some(ExpansionPlan {
                size: Quantity("2048Mi".into()),
                patch_pv: false
            })
        );
        // Equal sizes in different units: nothing to do.
        let same = bound(claim(Some(STORAGE_CLASS), "1024Mi"), "1Gi");
        assert_eq!(expansion_plan(&same, &pv_with("1Gi"), true), None);
        // Never shrink.
        let smaller = bound(claim(Some(STORAGE_CLASS), "1Gi"), "2Gi");
        assert_eq!(expansion_plan(&smaller, &pv_with("2Gi"), true), None);
        // Not bound yet.
        assert_eq!(
            expansion_plan(&claim(Some(STORAGE_CLASS), "2Gi"), &pv_with("1Gi"), true),
            None
        );
    }

    #[test]
    fn status_patch_clears_resize_conditions() {
        let pvc = bound(claim(Some(STORAGE_CLASS), "2Gi"), "1Gi");
        let p = resized_status_patch(&pvc, &Quantity("2Gi".into()));
        assert_eq!(p["status"]["capacity"]["storage"], "2Gi");
        assert_eq!(p["status"]["allocatedResources"]["storage"], "2Gi");
        assert!(p["status"]["allocatedResourceStatuses"].is_null());
        let types: Vec<_> = p["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["ModifyingVolume"]);
    }
}
