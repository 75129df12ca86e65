//! Parser (layer 1): whether two members see the same cluster, membership and slot owners,
//! compared the way `valkey-cli --cluster check` does.

use std::collections::BTreeSet;
use std::fmt;

use crate::cluster::cluster_nodes::ClusterView;
use crate::cluster::slots::SLOTS;

impl ClusterView {
    /// True when every one of `others` (typically one view per member) agrees with this one
    /// on membership and on who owns each slot, what `valkey-cli --cluster check` calls
    /// "all nodes agree about slots configuration", the point at which a next step is safe.
    pub fn is_consistent_with(&self, others: &[ClusterView]) -> bool {
        others
            .iter()
            .all(|other| self.disagreement_with(other).is_none())
    }

    /// The first way `other` sees the cluster differently: a node only one of them knows
    /// (nodes in handshake do not count, their ids are provisional), else the lowest slot
    /// they give to different owners.
    pub fn disagreement_with(&self, other: &ClusterView) -> Option<Disagreement> {
        let (mine, theirs) = (self.members(), other.members());
        let membership =
            |known: &ClusterView, unknown: &ClusterView, node: &str| Disagreement::Membership {
                node: node.to_string(),
                known_to: known.myself().id.clone(),
                unknown_to: unknown.myself().id.clone(),
            };
        if let Some(node) = mine.difference(&theirs).next() {
            return Some(membership(self, other, node));
        }
        if let Some(node) = theirs.difference(&mine).next() {
            return Some(membership(other, self, node));
        }
        let (my_owners, their_owners) = (self.owner_table(), other.owner_table());
        let slot = (0..SLOTS)
            .find(|&slot| my_owners[usize::from(slot)] != their_owners[usize::from(slot)])?;
        let owner = |table: &[Option<&str>]| table[usize::from(slot)].map(str::to_string);
        Some(Disagreement::SlotOwner {
            slot,
            view: self.myself().id.clone(),
            owner: owner(&my_owners),
            other_view: other.myself().id.clone(),
            other_owner: owner(&their_owners),
        })
    }

    fn members(&self) -> BTreeSet<&str> {
        self.nodes()
            .iter()
            .filter(|node| !node.flags.handshake)
            .map(|node| node.id.as_str())
            .collect()
    }

    fn owner_table(&self) -> Vec<Option<&str>> {
        let mut owners = vec![None; usize::from(SLOTS)];
        for node in self.nodes() {
            for &(first, last) in &node.slots {
                owners[usize::from(first)..=usize::from(last)].fill(Some(node.id.as_str()));
            }
        }
        owners
    }
}

/// How two nodes' views of the cluster differ; node ids throughout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Disagreement {
    /// `known_to` lists `node`, `unknown_to` does not.
    Membership {
        node: String,
        known_to: String,
        unknown_to: String,
    },
    /// `view` says `owner` serves `slot`, `other_view` says `other_owner` (None: unassigned).
    SlotOwner {
        slot: u16,
        view: String,
        owner: Option<String>,
        other_view: String,
        other_owner: Option<String>,
    },
}

impl fmt::Display for Disagreement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Disagreement::Membership {
                node,
                known_to,
                unknown_to,
            } => write!(
                f,
                "node {known_to} knows node {node}, node {unknown_to} does not"
            ),
            Disagreement::SlotOwner {
                slot,
                view,
                owner,
                other_view,
                other_owner,
            } => {
                write!(
                    f,
                    "slot {slot}: node {view} says {} owns it, node {other_view} says {}",
                    owner.as_deref().unwrap_or("nobody"),
                    other_owner.as_deref().unwrap_or("nobody"),
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::fixtures::*;
    use crate::cluster::slots;

    #[test]
    fn views_from_every_node_agree_after_a_move() {
        let views: Vec<ClusterView> = [
            MOVED_7101, MOVED_7102, MOVED_7103, MOVED_7104, MOVED_7105, MOVED_7106,
        ]
        .into_iter()
        .map(view)
        .collect();
        for one in &views {
            assert!(
                one.is_consistent_with(&views),
                "{:?}",
                views
                    .iter()
                    .map(|v| one.disagreement_with(v))
                    .collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn handshakes_and_open_slots_are_no_disagreement() {
        // 7101 is still meeting a node 7102 has never heard of; ids in handshake are
        // provisional, so that is not a membership difference.
        assert_eq!(
            view(OPENING_7101).disagreement_with(&view(OPENING_7102)),
            None
        );
    }

    #[test]
    fn a_failed_over_cluster_agrees_once_the_old_primary_rejoins() {
        assert!(view(FAILED_OVER_7102).is_consistent_with(&[view(REJOINED_7101)]));
    }

    #[test]
    fn a_stale_slot_owner_is_a_disagreement() {
        let before = view(HEALTHY_7101);
        let after = view(MOVED_7102);
        let disagreement = before.disagreement_with(&after).unwrap();
        assert_eq!(
            disagreement,
            Disagreement::SlotOwner {
                slot: 100,
                view: N7101.to_string(),
                owner: Some(N7101.to_string()),
                other_view: N7102.to_string(),
                other_owner: Some(N7102.to_string()),
            }
        );
        assert_eq!(
            disagreement.to_string(),
            format!("slot 100: node {N7101} says {N7101} owns it, node {N7102} says {N7102}")
        );
        assert!(!after.is_consistent_with(&[view(MOVED_7103), before]));
    }

    #[test]
    fn an_unassigned_slot_is_a_disagreement() {
        let dropped = MOVED_7103.replace(" 100 5461-10922", " 5461-10922");
        let dropped = view(&dropped);
        assert_eq!(dropped.assigned_slot_count(), 16383);
        assert_eq!(dropped.slot_owner(100), None);
        assert_eq!(slots::unassigned(&dropped.ownership()), [(100, 100)]);
        let disagreement = view(MOVED_7101).disagreement_with(&dropped).unwrap();
        assert!(
            disagreement
                .to_string()
                .ends_with(&format!("node {N7103} says nobody")),
            "{disagreement}"
        );
    }

    #[test]
    fn a_node_forgotten_by_some_is_a_disagreement() {
        // 7101 ran CLUSTER FORGET on 7105's stale entry, 7102 has not yet.
        let forgotten: String = REJOINED_7101
            .lines()
            .filter(|line| !line.starts_with(N7105))
            .map(|line| format!("{line}\n"))
            .collect();
        let forgotten = view(&forgotten);
        let failed_over = view(FAILED_OVER_7102);
        let expected = Disagreement::Membership {
            node: N7105.to_string(),
            known_to: N7102.to_string(),
            unknown_to: N7101.to_string(),
        };
        assert_eq!(
            failed_over.disagreement_with(&forgotten),
            Some(expected.clone())
        );
        assert_eq!(forgotten.disagreement_with(&failed_over), Some(expected));
        assert!(!forgotten.is_consistent_with(&[failed_over]));
    }
}
