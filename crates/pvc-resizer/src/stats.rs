//! The kubelet's `/stats/summary`, read for what pvc-resizer needs: the usage of each volume
//! that is a claim (`pods[].volume[].pvcRef`). One document per Node covers every claim of
//! every pod on it.

use serde::Deserialize;

/// Usage of one claim's volume as the kubelet measured it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VolumeUsage {
    pub used_bytes: u64,
    pub capacity_bytes: u64,
    pub available_bytes: u64,
}

impl VolumeUsage {
    /// Used space in percent of the capacity, rounded down; `None` for a zero capacity.
    pub fn used_percent(&self) -> Option<u8> {
        (self.capacity_bytes > 0).then(|| {
            let percent = u128::from(self.used_bytes) * 100 / u128::from(self.capacity_bytes);
            percent.min(100) as u8
        })
    }
}

/// One claim's volume in a summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimUsage {
    pub namespace: String,
    pub claim: String,
    pub usage: VolumeUsage,
}

#[derive(Deserialize)]
struct Summary {
    #[serde(default)]
    pods: Vec<PodStats>,
}

#[derive(Deserialize)]
struct PodStats {
    #[serde(default)]
    volume: Vec<VolumeStats>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct VolumeStats {
    pvc_ref: Option<PvcRef>,
    used_bytes: Option<u64>,
    capacity_bytes: Option<u64>,
    available_bytes: Option<u64>,
}

#[derive(Deserialize)]
struct PvcRef {
    name: String,
    namespace: String,
}

/// Every claim volume in a `/stats/summary` document. Volumes without a pvcRef (emptyDir,
/// configMap...) and claims the kubelet has no numbers for yet are left out.
pub fn claim_usage(summary: &[u8]) -> Result<Vec<ClaimUsage>, serde_json::Error> {
    let summary: Summary = serde_json::from_slice(summary)?;
    Ok(summary
        .pods
        .into_iter()
        .flat_map(|p| p.volume)
        .filter_map(|v| {
            let pvc = v.pvc_ref?;
            Some(ClaimUsage {
                namespace: pvc.namespace,
                claim: pvc.name,
                usage: VolumeUsage {
                    used_bytes: v.used_bytes?,
                    capacity_bytes: v.capacity_bytes?,
                    available_bytes: v.available_bytes?,
                },
            })
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Trimmed from a real kubelet's answer.
    const SUMMARY: &str = r#"{
      "node": {"nodeName": "n1", "fs": {"capacityBytes": 100}},
      "pods": [
        {"podRef": {"name": "cache-0", "namespace": "prod", "uid": "u"},
         "volume": [
           {"time": "2025-01-01T00:00:00Z", "name": "data", "usedBytes": 600,
            "capacityBytes": 1000, "availableBytes": 400, "inodesUsed": 3,
            "pvcRef": {"name": "cache-data", "namespace": "prod"}},
           {"name": "config", "usedBytes": 10, "capacityBytes": 99, "availableBytes": 89}
         ]},
        {"podRef": {"name": "other", "namespace": "prod", "uid": "v"}},
        {"podRef": {"name": "new", "namespace": "prod", "uid": "w"},
         "volume": [{"name": "data", "pvcRef": {"name": "new-data", "namespace": "prod"}}]}
      ]
    }"#;

    #[test]
    fn claims_are_found_by_their_pvc_ref() {
        let found = claim_usage(SUMMARY.as_bytes()).unwrap();
        assert_eq!(
            found,
            vec![ClaimUsage {
                namespace: "prod".into(),
                claim: "cache-data".into(),
                usage: VolumeUsage {
                    used_bytes: 600,
                    capacity_bytes: 1000,
                    available_bytes: 400
                },
            }]
        );
        assert_eq!(found[0].usage.used_percent(), Some(60));
        assert!(claim_usage(b"not json").is_err());
        assert_eq!(claim_usage(b"{}").unwrap(), vec![]);
    }

    #[test]
    fn percent_rounds_down_and_tolerates_odd_numbers() {
        let u = |used, capacity| VolumeUsage {
            used_bytes: used,
            capacity_bytes: capacity,
            available_bytes: 0,
        };
        assert_eq!(u(499, 1000).used_percent(), Some(49));
        assert_eq!(u(500, 1000).used_percent(), Some(50));
        assert_eq!(u(2000, 1000).used_percent(), Some(100));
        assert_eq!(u(0, 0).used_percent(), None);
        assert_eq!(u(u64::MAX, u64::MAX).used_percent(), Some(100));
    }
}
