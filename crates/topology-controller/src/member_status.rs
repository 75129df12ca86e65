//! Status (layer 5): each member's `status.valkey`, from what its Valkey answered. Knows
//! nothing of slots, so a ValkeyReplication's members can share it.

use crd_types::node::ValkeyStatus;

use crate::model::Member;

/// `status.valkey` of a member that answered; `version` from INFO server.
pub fn member_status(member: &Member, version: Option<&str>) -> Option<ValkeyStatus> {
    let reply = member.reply.as_ref()?;
    Some(ValkeyStatus {
        node_id: member.id().map(str::to_string),
        role: Some(reply.replication.role),
        primary_node_id: member.primary_id().map(str::to_string),
        replication_offset: Some(member.offset()),
        link_up: reply.replication.primary.as_ref().map(|l| l.link_up),
        version: version.map(str::to_string),
    })
}

/// Whether `new` says something `old` did not, ignoring the replication offset: it moves
/// with every write, and writing it on every poll would cost an API request per member each
/// time. The offset is refreshed whenever anything else changes.
pub fn member_status_changed(old: Option<&ValkeyStatus>, new: &ValkeyStatus) -> bool {
    let Some(old) = old else { return true };
    let strip = |s: &ValkeyStatus| ValkeyStatus {
        replication_offset: None,
        ..s.clone()
    };
    strip(old) != strip(new)
}

/// The distinct Valkey versions members run (as INFO server names them), oldest first: one
/// while all agree, several during an upgrade.
pub fn versions_in_play<'a>(versions: impl IntoIterator<Item = Option<&'a str>>) -> Vec<String> {
    let mut seen: Vec<&str> = versions.into_iter().flatten().collect();
    let key = |v: &&str| -> Vec<u64> {
        v.split(['.', '-'])
            .map(|p| p.parse().unwrap_or(0))
            .collect()
    };
    seen.sort_by_key(key);
    seen.dedup();
    seen.into_iter().map(str::to_string).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_in_play_are_distinct_and_oldest_first() {
        let v = versions_in_play([
            Some("9.1.2"),
            None,
            Some("8.0.1"),
            Some("8.10.0"),
            Some("8.0.1"),
        ]);
        assert_eq!(v, ["8.0.1", "8.10.0", "9.1.2"]);
        assert!(versions_in_play([None]).is_empty());
    }
    use crate::sim::*;

    #[test]
    fn the_offset_alone_does_not_rewrite_member_status() {
        let old = ValkeyStatus {
            node_id: Some("a".into()),
            replication_offset: Some(1),
            ..Default::default()
        };
        let moved = ValkeyStatus {
            replication_offset: Some(99),
            ..old.clone()
        };
        assert!(!member_status_changed(Some(&old), &moved));
        let promoted = ValkeyStatus {
            role: Some(crd_types::node::Role::Primary),
            ..moved
        };
        assert!(member_status_changed(Some(&old), &promoted));
        assert!(member_status_changed(None, &promoted));
    }

    #[test]
    fn a_replica_reports_its_primary_and_offset() {
        let mut sims = formed(1, 1);
        sims[1].offset = 42;
        let m = members(&sims);
        let status = member_status(&m[1], Some("8.0.1")).unwrap();
        assert_eq!(status.node_id, Some(id(0, 1)));
        assert_eq!(status.role, Some(crd_types::node::Role::Replica));
        assert_eq!(status.primary_node_id, Some(id(0, 0)));
        assert_eq!(status.replication_offset, Some(42));
        assert_eq!(status.link_up, Some(true));
        assert_eq!(status.version.as_deref(), Some("8.0.1"));
        sims[1].id = None;
        assert_eq!(member_status(&members(&sims)[1], None), None);
    }
}
