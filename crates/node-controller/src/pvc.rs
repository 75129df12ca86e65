//! The operator-created PVC behind /data.
//!
//! Created by node-controller rather than through a StatefulSet volumeClaimTemplate, so the
//! same claim works for a Deployment, survives a workload re-creation, and its size can grow
//! (templates are immutable).
//!
//! Field ownership: node-controller creates the claim at the spec's size and never changes
//! the size afterwards: on an existing claim it applies the live request again
//! ([`storage_request`]), so it never fights pvc-resizer, which owns the size from then on
//! (it applies a new size with force and takes the field over). Without pvc-resizer a larger
//! spec is not applied; the ClaimSize condition says so ([`crate::status`]).

use std::cmp::Ordering;
use std::collections::BTreeMap;

use crd_types::ValkeyNode;
use crd_types::names;
use crd_types::template::{Persistence, ReclaimPolicy};
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimSpec, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

use crate::meta;
use crd_types::quantity;

/// The PVC to apply for `node`, or `None` without `persistence` (then /data is an emptyDir).
///
/// `live` is the claim as it exists, so a larger live request is kept ([`storage_request`]).
pub fn pvc(
    node: &ValkeyNode,
    live: Option<&PersistentVolumeClaim>,
) -> Option<PersistentVolumeClaim> {
    let persistence = node.spec.template.persistence.as_ref()?;
    let name = node.name_any();
    // Retain: no owner reference, or the garbage collector would delete the claim (and with
    // it the data) together with the ValkeyNode. Delete: owned, so it goes once the node is
    // gone; the pvc-protection finalizer holds it until the pod has stopped using it.
    let owner_references = match persistence.reclaim_policy {
        ReclaimPolicy::Delete => meta::owner_reference(node).map(|o| vec![o]),
        ReclaimPolicy::Retain => None,
    };
    Some(PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(names::pvc_name(&name)),
            namespace: node.namespace(),
            labels: Some(meta::labels(node)),
            owner_references,
            ..Default::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(access_modes(persistence, live)),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_string(),
                    storage_request(persistence, live),
                )])),
                ..Default::default()
            }),
            storage_class_name: persistence.storage_class_name.clone(),
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// The claim's access modes: the spec's, except that an existing claim keeps its own (they are
/// immutable, and a claim made before `accessMode` existed is ReadWriteOnce).
fn access_modes(persistence: &Persistence, live: Option<&PersistentVolumeClaim>) -> Vec<String> {
    live.and_then(|claim| claim.spec.as_ref()?.access_modes.clone())
        .filter(|modes| !modes.is_empty())
        .unwrap_or_else(|| vec![persistence.access_mode.as_str().to_string()])
}

/// The storage request to apply: the spec's size for a new claim, the live request for an
/// existing one (echoed, so server-side apply neither drops nor changes it). Growing it is
/// pvc-resizer's.
pub fn storage_request(
    persistence: &Persistence,
    live: Option<&PersistentVolumeClaim>,
) -> Quantity {
    live_request(live)
        .cloned()
        .unwrap_or_else(|| Quantity(persistence.size.clone()))
}

/// Whether the live claim requests less than `persistence.size`: `Some((requested, spec))`
/// then. `None` without a claim, when it is large enough, or when a side does not parse.
pub fn smaller_than_spec(
    persistence: &Persistence,
    live: Option<&PersistentVolumeClaim>,
) -> Option<(String, String)> {
    let requested = live_request(live)?;
    let smaller = quantity::compare(&requested.0, &persistence.size) == Ok(Ordering::Less);
    smaller.then(|| (requested.0.clone(), persistence.size.clone()))
}

/// The StorageClass to look up before reporting that the claim does not bind: the class the
/// claim names (or will name, before it exists) while it is not Bound. `None` without
/// persistence, once Bound, or with the cluster's default class. A claim on a class that does
/// not exist is a mistake to report loudly; any other unbound claim is most likely being
/// provisioned.
pub fn class_to_check<'a>(
    node: &'a ValkeyNode,
    live: Option<&'a PersistentVolumeClaim>,
) -> Option<&'a str> {
    let persistence = node.spec.template.persistence.as_ref()?;
    match live {
        None => persistence.storage_class_name.as_deref(),
        Some(claim) => {
            let bound = claim.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
            if bound {
                return None;
            }
            claim.spec.as_ref()?.storage_class_name.as_deref()
        }
    }
}

fn live_request(live: Option<&PersistentVolumeClaim>) -> Option<&Quantity> {
    live?
        .spec
        .as_ref()?
        .resources
        .as_ref()?
        .requests
        .as_ref()?
        .get("storage")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::fixtures;
    use crd_types::ValkeyNodeSpec;
    use crd_types::names::labels;

    fn node(size: &str, reclaim: ReclaimPolicy, class: Option<&str>) -> ValkeyNode {
        let mut spec = ValkeyNodeSpec::default();
        spec.template.persistence = Some(Persistence {
            size: size.into(),
            storage_class_name: class.map(str::to_string),
            reclaim_policy: reclaim,
            ..Default::default()
        });
        fixtures::node("cache", spec)
    }

    fn live(request: &str) -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            spec: Some(PersistentVolumeClaimSpec {
                resources: Some(VolumeResourceRequirements {
                    requests: Some(BTreeMap::from([(
                        "storage".to_string(),
                        Quantity(request.into()),
                    )])),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn request(p: &PersistentVolumeClaim) -> &str {
        &p.spec
            .as_ref()
            .unwrap()
            .resources
            .as_ref()
            .unwrap()
            .requests
            .as_ref()
            .unwrap()["storage"]
            .0
    }

    #[test]
    fn no_persistence_no_claim() {
        assert!(pvc(&fixtures::node("a", ValkeyNodeSpec::default()), None).is_none());
    }

    #[test]
    fn claim_from_spec() {
        let p = pvc(&node("10Gi", ReclaimPolicy::Retain, Some("fast")), None).unwrap();
        assert_eq!(p.metadata.name.as_deref(), Some("cache-data"));
        assert_eq!(p.metadata.namespace.as_deref(), Some("prod"));
        assert_eq!(p.labels()[labels::NODE], "cache");
        let spec = p.spec.as_ref().unwrap();
        assert_eq!(
            spec.access_modes.as_deref(),
            Some(&["ReadWriteOncePod".to_string()][..])
        );
        assert_eq!(spec.storage_class_name.as_deref(), Some("fast"));
        assert_eq!(request(&p), "10Gi");
    }

    #[test]
    fn an_existing_claim_keeps_its_access_modes() {
        let n = node("1Gi", ReclaimPolicy::Retain, None);
        let mut existing = live("1Gi");
        existing.spec.as_mut().unwrap().access_modes = Some(vec!["ReadWriteOnce".into()]);
        let p = pvc(&n, Some(&existing)).unwrap();
        assert_eq!(
            p.spec.unwrap().access_modes,
            Some(vec!["ReadWriteOnce".to_string()])
        );
        // Without live modes (or without a claim), the spec's mode.
        let p = pvc(&n, Some(&live("1Gi"))).unwrap();
        assert_eq!(
            p.spec.unwrap().access_modes,
            Some(vec!["ReadWriteOncePod".to_string()])
        );
    }

    #[test]
    fn default_class_is_left_to_the_cluster() {
        let p = pvc(&node("1Gi", ReclaimPolicy::Retain, None), None).unwrap();
        assert_eq!(p.spec.unwrap().storage_class_name, None);
    }

    #[test]
    fn retain_is_not_owned_delete_is() {
        let p = pvc(&node("1Gi", ReclaimPolicy::Retain, None), None).unwrap();
        assert_eq!(p.metadata.owner_references, None);
        let p = pvc(&node("1Gi", ReclaimPolicy::Delete, None), None).unwrap();
        let owners = p.metadata.owner_references.unwrap();
        assert_eq!(owners.len(), 1);
        assert_eq!(owners[0].uid, "uid-cache");
    }

    #[test]
    fn an_existing_claim_keeps_its_size() {
        let n = node("10Gi", ReclaimPolicy::Retain, None);
        // Grown by pvc-resizer beyond the spec: echoed.
        assert_eq!(request(&pvc(&n, Some(&live("12Gi"))).unwrap()), "12Gi");
        // The spec grew: still the live size; growing is pvc-resizer's.
        assert_eq!(request(&pvc(&n, Some(&live("8Gi"))).unwrap()), "8Gi");
        // Another spelling stays the live one, so the apply changes nothing.
        assert_eq!(
            request(&pvc(&n, Some(&live("10240Mi"))).unwrap()),
            "10240Mi"
        );
        // A live claim without requests (never stored by the API server): the spec.
        let empty = PersistentVolumeClaim::default();
        assert_eq!(request(&pvc(&n, Some(&empty)).unwrap()), "10Gi");
    }

    #[test]
    fn a_claim_below_the_spec_is_told() {
        let n = node("10Gi", ReclaimPolicy::Retain, None);
        let p = n.spec.template.persistence.as_ref().unwrap();
        assert_eq!(
            smaller_than_spec(p, Some(&live("8Gi"))),
            Some(("8Gi".into(), "10Gi".into()))
        );
        assert_eq!(smaller_than_spec(p, Some(&live("10240Mi"))), None);
        assert_eq!(smaller_than_spec(p, Some(&live("12Gi"))), None);
        assert_eq!(smaller_than_spec(p, Some(&live("lots"))), None);
        assert_eq!(smaller_than_spec(p, None), None);
    }

    #[test]
    fn only_the_class_of_an_unbound_claim_is_checked() {
        use k8s_openapi::api::core::v1::PersistentVolumeClaimStatus;
        let n = node("1Gi", ReclaimPolicy::Retain, Some("fast"));
        // Before the claim exists: the class it will have.
        assert_eq!(class_to_check(&n, None), Some("fast"));
        let mut claim = pvc(&n, None).unwrap();
        claim.status = Some(PersistentVolumeClaimStatus {
            phase: Some("Pending".into()),
            ..Default::default()
        });
        assert_eq!(class_to_check(&n, Some(&claim)), Some("fast"));
        claim.status.as_mut().unwrap().phase = Some("Bound".into());
        assert_eq!(class_to_check(&n, Some(&claim)), None);
        // The default class, or no persistence: nothing to look up.
        let default_class = node("1Gi", ReclaimPolicy::Retain, None);
        assert_eq!(class_to_check(&default_class, None), None);
        let ephemeral = fixtures::node("a", ValkeyNodeSpec::default());
        assert_eq!(class_to_check(&ephemeral, None), None);
    }

    #[test]
    fn same_spec_same_object() {
        let n = node("5Gi", ReclaimPolicy::Delete, Some("ssd"));
        assert_eq!(pvc(&n, None), pvc(&n.clone(), None));
    }
}
