//! Status (layer 5): whether a member's `status.valkey` changed, and the versions a topology
//! runs. Each kind builds `status.valkey` from what its own members answered.

use crd_types::node::ValkeyStatus;

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
}
