//! The node's claim as the decision needs it, and the claim pvc-resizer applies to grow it.
//!
//! pvc-resizer owns `spec.resources.requests.storage` of every ValkeyNode claim after its
//! creation: it applies a new size with force, taking the field over from node-controller
//! (which created the claim at the spec's size and from then on only echoes the live size,
//! so the two never fight). The same apply stamps [`LAST_RESIZE`] on the claim, so a
//! restarted pvc-resizer finds its cooldown with the size it belongs to.

use std::collections::BTreeMap;

use crd_types::names::annotations::{CAPACITY_BEFORE_RESIZE, LAST_RESIZE};
use crd_types::quantity;
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimSpec, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;

/// What the claim says about its size.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClaimState {
    /// `spec.resources.requests.storage`, in bytes.
    pub requested: Option<u128>,
    /// `status.capacity.storage`, in bytes.
    pub capacity: Option<u128>,
    pub bound: bool,
    /// The storage driver is growing the volume (condition `Resizing`).
    pub resizing: bool,
    /// The volume grew and the kubelet still has to grow the file system.
    pub file_system_resize_pending: bool,
    /// `ControllerResizeError` or `NodeResizeError`: the driver's message.
    pub resize_error: Option<String>,
    /// When pvc-resizer last asked for more ([`LAST_RESIZE`]).
    pub last_resize: Option<Timestamp>,
    /// The file system capacity the kubelet reported then ([`CAPACITY_BEFORE_RESIZE`]).
    pub capacity_before_resize: Option<u64>,
    /// `spec.storageClassName`.
    pub storage_class: Option<String>,
}

impl ClaimState {
    pub fn of(claim: &PersistentVolumeClaim) -> Self {
        let bytes = |q: Option<&Quantity>| {
            q.and_then(|q| quantity::parse(&q.0).ok())
                .map(|a| a.whole_units())
        };
        let spec = claim.spec.as_ref();
        let status = claim.status.as_ref();
        let annotation = |key: &str| claim.metadata.annotations.as_ref()?.get(key);
        let requested = bytes(
            spec.and_then(|s| s.resources.as_ref())
                .and_then(|r| r.requests.as_ref())
                .and_then(|r| r.get("storage")),
        );
        let capacity = bytes(
            status
                .and_then(|s| s.capacity.as_ref())
                .and_then(|c| c.get("storage")),
        );
        let conditions = status
            .and_then(|s| s.conditions.as_deref())
            .unwrap_or_default();
        let is_true = |type_: &str| {
            conditions
                .iter()
                .any(|c| c.type_ == type_ && c.status == "True")
        };
        let resize_error = conditions
            .iter()
            .find(|c| {
                matches!(
                    c.type_.as_str(),
                    "ControllerResizeError" | "NodeResizeError"
                ) && c.status == "True"
            })
            .map(|c| {
                let message = c.message.as_deref().unwrap_or("no message");
                format!("{}: {message}", c.type_)
            });
        Self {
            requested,
            capacity,
            bound: status.and_then(|s| s.phase.as_deref()) == Some("Bound"),
            resizing: is_true("Resizing"),
            file_system_resize_pending: is_true("FileSystemResizePending"),
            resize_error,
            last_resize: annotation(LAST_RESIZE).and_then(|t| t.parse().ok()),
            capacity_before_resize: annotation(CAPACITY_BEFORE_RESIZE).and_then(|b| b.parse().ok()),
            storage_class: spec.and_then(|s| s.storage_class_name.clone()),
        }
    }

    /// A larger size is requested than the volume has: a growth is in flight.
    pub fn in_flight(&self) -> bool {
        self.resizing
            || self.file_system_resize_pending
            || matches!((self.requested, self.capacity), (Some(r), Some(c)) if r > c)
    }
}

/// The claim to apply to grow `namespace/name` to `bytes`: only the fields pvc-resizer
/// owns (the size, [`LAST_RESIZE`] and, when usage is known, [`CAPACITY_BEFORE_RESIZE`]).
pub fn grown(
    namespace: &str,
    name: &str,
    bytes: u128,
    capacity_before: Option<u64>,
    now: Timestamp,
) -> PersistentVolumeClaim {
    let mut annotations = BTreeMap::from([(LAST_RESIZE.to_string(), now.to_string())]);
    if let Some(capacity) = capacity_before {
        annotations.insert(CAPACITY_BEFORE_RESIZE.into(), capacity.to_string());
    }
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            annotations: Some(annotations),
            ..Default::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".into(),
                    Quantity(quantity::format_bytes(bytes)),
                )])),
                ..Default::default()
            }),
            ..Default::default()
        }),
        status: None,
    }
}

#[cfg(test)]
pub(crate) mod fixtures {
    use super::*;
    use k8s_openapi::api::core::v1::{PersistentVolumeClaimCondition, PersistentVolumeClaimStatus};

    /// A Bound claim `cache-data` requesting `requested` with `capacity` in its status.
    pub fn bound(requested: &str, capacity: &str) -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some("cache-data".into()),
                namespace: Some("prod".into()),
                ..Default::default()
            },
            spec: Some(PersistentVolumeClaimSpec {
                storage_class_name: Some("fast".into()),
                resources: Some(VolumeResourceRequirements {
                    requests: Some(BTreeMap::from([(
                        "storage".into(),
                        Quantity(requested.into()),
                    )])),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            status: Some(PersistentVolumeClaimStatus {
                phase: Some("Bound".into()),
                capacity: Some(BTreeMap::from([(
                    "storage".into(),
                    Quantity(capacity.into()),
                )])),
                ..Default::default()
            }),
        }
    }

    pub fn with_condition(
        mut claim: PersistentVolumeClaim,
        type_: &str,
        message: &str,
    ) -> PersistentVolumeClaim {
        let status = claim.status.get_or_insert_with(Default::default);
        status
            .conditions
            .get_or_insert_with(Vec::new)
            .push(PersistentVolumeClaimCondition {
                type_: type_.into(),
                status: "True".into(),
                message: Some(message.into()),
                ..Default::default()
            });
        claim
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::*;

    #[test]
    fn reads_sizes_conditions_and_the_last_resize() {
        let mut claim = bound("2Gi", "1024Mi");
        claim.metadata.annotations = Some(BTreeMap::from([
            (LAST_RESIZE.into(), "2025-01-02T03:04:05Z".into()),
            (CAPACITY_BEFORE_RESIZE.into(), "1000".into()),
        ]));
        let state = ClaimState::of(&claim);
        assert_eq!(state.requested, Some(2 << 30));
        assert_eq!(state.capacity, Some(1 << 30));
        assert!(state.bound && state.in_flight());
        assert_eq!(state.storage_class.as_deref(), Some("fast"));
        assert_eq!(
            state.last_resize,
            Some("2025-01-02T03:04:05Z".parse().unwrap())
        );
        assert_eq!(state.capacity_before_resize, Some(1000));

        let done = ClaimState::of(&bound("2Gi", "2048Mi"));
        assert!(!done.in_flight() && done.last_resize.is_none());
        let pending = ClaimState::of(&with_condition(
            bound("2Gi", "2Gi"),
            "FileSystemResizePending",
            "",
        ));
        assert!(pending.file_system_resize_pending && pending.in_flight());
        let failed = ClaimState::of(&with_condition(
            bound("2Gi", "1Gi"),
            "ControllerResizeError",
            "disk busy",
        ));
        assert_eq!(
            failed.resize_error.as_deref(),
            Some("ControllerResizeError: disk busy")
        );
        let mut unbound = bound("1Gi", "1Gi");
        unbound.status = None;
        let state = ClaimState::of(&unbound);
        assert!(!state.bound && state.capacity.is_none() && !state.in_flight());
    }

    #[test]
    fn the_grown_claim_holds_only_pvc_resizers_fields() {
        let now: Timestamp = "2025-01-02T03:04:05Z".parse().unwrap();
        let claim = grown("prod", "cache-data", 3 << 29, Some(1000), now);
        assert_eq!(
            serde_json::to_value(&claim).unwrap(),
            serde_json::json!({
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {
                    "name": "cache-data",
                    "namespace": "prod",
                    "annotations": {
                        "valkey.rs/last-resize-time": "2025-01-02T03:04:05Z",
                        "valkey.rs/capacity-before-resize": "1000",
                    },
                },
                "spec": {"resources": {"requests": {"storage": "1536Mi"}}},
            })
        );
    }
}
