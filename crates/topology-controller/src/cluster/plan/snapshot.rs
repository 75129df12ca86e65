//! Planner (layer 4): the members read as one cluster, through the view of the member that
//! knows the most. The planner's rules and the status survey both read it.

use crate::cluster::cluster_nodes::{ClusterNode, ClusterView};
use crate::cluster::model::{Member, Shape};

/// The cluster as the planner sees it: members, and the view it trusts.
pub(crate) struct Snapshot<'a> {
    pub shape: &'a Shape,
    pub members: &'a [Member],
    /// The member that knows the most (see [`anchor`]).
    pub anchor: &'a Member,
    /// The anchor's view.
    pub view: &'a ClusterView,
}

impl<'a> Snapshot<'a> {
    /// `None` while no member answers.
    pub fn new(shape: &'a Shape, members: &'a [Member]) -> Option<Self> {
        let anchor = anchor(shape, members)?;
        Some(Snapshot {
            shape,
            members,
            anchor,
            view: &anchor.reply.as_ref()?.view,
        })
    }

    pub fn reachable(&self) -> impl Iterator<Item = &'a Member> + use<'a> {
        self.members.iter().filter(|m| m.reply.is_some())
    }

    /// The member whose Valkey identity is `id`: its own answer, or for a member that does
    /// not answer, the node the anchor sees at its address.
    pub fn member_with_id(&self, id: &str) -> Option<&'a Member> {
        self.members.iter().find(|m| match m.id() {
            Some(own) => own == id,
            None => self.node_of(m).is_some_and(|n| n.id == id),
        })
    }

    /// The anchor's entry for `member`: by id when it answers, else by address.
    pub fn node_of(&self, member: &Member) -> Option<&'a ClusterNode> {
        match member.id() {
            Some(id) => self.view.by_id(id),
            None => {
                let address = member.address.as_ref()?;
                self.view
                    .nodes()
                    .iter()
                    .find(|n| n.ip == address.ip && n.port == address.port && !n.flags.handshake)
            }
        }
    }

    pub fn shard_members(&self, shard: u32) -> impl Iterator<Item = &'a Member> + use<'a> {
        self.members.iter().filter(move |m| m.at.shard == shard)
    }

    /// The member serving `shard`'s slots: the one primary of the shard holding slots (even
    /// a failing one: Valkey promotes its replica by itself), else member 0 while it is an
    /// empty primary (a shard being formed or added), unless a member of the shard follows
    /// a slot holder that is no member (see [`Self::old_identity_follower`]). `Err` when
    /// two members hold slots.
    pub fn shard_primary(&self, shard: u32) -> Result<Option<&'a Member>, SlotsHeldTwice> {
        let holding: Vec<&Member> = self
            .shard_members(shard)
            .filter(|m| {
                self.node_of(m)
                    .is_some_and(|n| n.flags.primary && !n.slots.is_empty())
            })
            .collect();
        match holding.as_slice() {
            [one] => Ok(Some(one)),
            [] if self.old_identity_follower(shard).is_some() => Ok(None),
            [] => Ok(self.shard_members(shard).find(|m| {
                m.at.member == 0 && self.node_of(m).is_some_and(ClusterNode::is_empty_primary)
            })),
            many => Err(SlotsHeldTwice {
                shard,
                members: many.iter().map(|m| m.name.clone()).collect(),
            }),
        }
    }
}

impl<'a> Snapshot<'a> {
    /// A member of `shard` that follows a primary holding slots that is no member: the old
    /// identity of a member that came back with an empty data directory (a new node id)
    /// before Valkey failed the old one over. That replica holds the shard's data; it must
    /// never be attached to an empty primary, which would wipe it with a full sync.
    pub fn old_identity_follower(&self, shard: u32) -> Option<(&'a Member, &'a ClusterNode)> {
        self.shard_members(shard).find_map(|m| {
            let me = m.reply.as_ref()?.view.myself();
            let primary = self.view.by_id(me.primary_id.as_deref()?)?;
            let holds = primary.flags.primary && !primary.slots.is_empty();
            (me.flags.replica && holds && self.member_with_id(&primary.id).is_none())
                .then_some((m, primary))
        })
    }
}

/// Two or more members of one shard hold slots: the operator cannot tell which serves it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "shard {shard} has {} members holding slots ({}); resolve by hand",
    members.len(),
    members.join(", ")
)]
pub(crate) struct SlotsHeldTwice {
    pub shard: u32,
    pub members: Vec<String>,
}

/// The member whose view to trust: one that answers, holding the most assigned slots, then
/// knowing the most nodes; wanted members before leaving ones, then by name.
fn anchor<'a>(shape: &Shape, members: &'a [Member]) -> Option<&'a Member> {
    members
        .iter()
        .filter(|m| m.reply.is_some())
        .min_by_key(|m| {
            let view = &m.reply.as_ref().unwrap().view;
            (
                std::cmp::Reverse(view.assigned_slot_count()),
                std::cmp::Reverse(view.nodes().len()),
                !shape.wants(m.at),
                m.name.clone(),
            )
        })
}
