//! The topology's storage headroom: the member with the least free space, from the
//! members' `status.storage` (pvc-resizer writes it; members fill unevenly, and autoResize
//! grows each on its own).

use crd_types::ValkeyNode;
use crd_types::node::StorageHeadroom;
use kube::ResourceExt;

/// The member with the fewest available bytes; `None` while no member reports usage.
pub fn headroom(members: &[ValkeyNode]) -> Option<StorageHeadroom> {
    members
        .iter()
        .filter_map(|m| {
            let storage = m.status.as_ref()?.storage.as_ref()?;
            let (used, available) = (storage.used_bytes?, storage.available_bytes?);
            let total = used.saturating_add(available);
            Some(StorageHeadroom {
                member: m.name_any(),
                min_available_bytes: available,
                used_percent: (total > 0).then(|| (used.saturating_mul(100) / total) as i32),
            })
        })
        .min_by(|a, b| (a.min_available_bytes, &a.member).cmp(&(b.min_available_bytes, &b.member)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crd_types::ValkeyNodeStatus;
    use crd_types::node::StorageStatus;

    fn member(name: &str, usage: Option<(i64, i64)>) -> ValkeyNode {
        let mut n = ValkeyNode::new(name, Default::default());
        n.status = Some(ValkeyNodeStatus {
            storage: Some(StorageStatus {
                used_bytes: usage.map(|u| u.0),
                available_bytes: usage.map(|u| u.1),
                ..Default::default()
            }),
            ..Default::default()
        });
        n
    }

    #[test]
    fn the_fullest_member_by_free_bytes() {
        let members = [
            member("c-0-0", Some((10, 90))),
            member("c-1-0", Some((70, 30))),
            member("c-1-1", None),
            ValkeyNode::new("c-2-0", Default::default()),
        ];
        assert_eq!(
            headroom(&members),
            Some(StorageHeadroom {
                member: "c-1-0".into(),
                min_available_bytes: 30,
                used_percent: Some(70),
            })
        );
        assert_eq!(headroom(&members[2..]), None);
        // A tie goes to the first name, so the status does not flap.
        let tie = [member("b", Some((1, 5))), member("a", Some((2, 5)))];
        assert_eq!(headroom(&tie).unwrap().member, "a");
    }

    #[test]
    fn a_replication_group_counts_its_data_nodes_and_never_its_sentinels() {
        // Sentinels have no volume: pvc-resizer reports no usage for them.
        let sentinel = |name: &str| {
            let mut n = member(name, None);
            n.status.as_mut().unwrap().storage = None;
            n
        };
        let members = [
            member("g-0", Some((40, 60))),
            member("g-1", Some((55, 45))),
            member("g-2", Some((41, 59))),
            sentinel("g-sentinel-0"),
            sentinel("g-sentinel-1"),
            member("g-sentinel-2", None),
        ];
        assert_eq!(
            headroom(&members),
            Some(StorageHeadroom {
                member: "g-1".into(),
                min_available_bytes: 45,
                used_percent: Some(55),
            })
        );
        assert_eq!(headroom(&members[3..]), None);
    }
}
