//! Parser (layer 1): one node's `CLUSTER NODES`, the view of the cluster it answers with, as
//! Valkey 8 prints it. Comparing two views is in [`crate::cluster::agreement`].

use std::collections::{BTreeMap, BTreeSet};

use crd_types::node::Role;

use crate::cluster::slots::{SLOTS, SlotRange, slot_count};

/// `CLUSTER NODES` text that does not have the expected shape.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("malformed CLUSTER NODES line ({reason}): {line:?}")]
    NodeLine { line: String, reason: String },
    #[error("CLUSTER NODES has {0} lines flagged myself, expected exactly one")]
    Myself(usize),
    #[error("CLUSTER NODES lists node {0} twice")]
    DuplicateNode(String),
    #[error("CLUSTER NODES gives slot {slot} to both {first} and {second}")]
    SlotClaimedTwice {
        slot: u16,
        first: String,
        second: String,
    },
}
/// The flags of a `CLUSTER NODES` line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeFlags {
    /// The node that answered.
    pub myself: bool,
    pub primary: bool,
    pub replica: bool,
    /// `fail?`: this node cannot reach it, but the cluster has not agreed it failed.
    pub pfail: bool,
    /// The primaries agreed it failed.
    pub fail: bool,
    /// Being met; its id is provisional until the handshake completes.
    pub handshake: bool,
    /// Its address is unknown, e.g. another node now answers there.
    pub noaddr: bool,
    /// A replica that never takes over its primary automatically.
    pub nofailover: bool,
}

impl NodeFlags {
    fn parse(flags: &str) -> Self {
        let mut parsed = NodeFlags::default();
        for flag in flags.split(',') {
            match flag {
                "myself" => parsed.myself = true,
                // Valkey prints master/slave; accept the newer names should it switch.
                "master" | "primary" => parsed.primary = true,
                "slave" | "replica" => parsed.replica = true,
                "fail?" => parsed.pfail = true,
                "fail" => parsed.fail = true,
                "handshake" => parsed.handshake = true,
                "noaddr" => parsed.noaddr = true,
                "nofailover" => parsed.nofailover = true,
                // "noflags", and flags a later Valkey may add: nothing we act on, so an
                // upgrade must not make every view unreadable.
                _ => {}
            }
        }
        parsed
    }
}

/// One line of `CLUSTER NODES`: a node as the answering node sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterNode {
    /// 40 hex characters.
    pub id: String,
    /// Empty when unknown (`noaddr`). IPv6 addresses come without brackets.
    pub ip: String,
    pub port: u16,
    pub bus_port: u16,
    /// `cluster-announce-hostname`, when set.
    pub hostname: Option<String>,
    pub flags: NodeFlags,
    /// The primary a replica follows.
    pub primary_id: Option<String>,
    pub config_epoch: u64,
    /// The cluster bus link to it is up (always true for myself).
    pub link_connected: bool,
    /// Owned slots, ascending as Valkey prints them.
    pub slots: Vec<SlotRange>,
    /// Slots this node is migrating away, with the target node id (only on the myself line).
    pub migrating: Vec<(u16, String)>,
    /// Slots this node is importing, with the source node id (only on the myself line).
    pub importing: Vec<(u16, String)>,
}

impl ClusterNode {
    /// Parses one line: `<id> <ip:port@cport[,hostname]> <flags> <primary-id|-> <ping-sent>
    /// <pong-recv> <config-epoch> <link-state> <slot>...`.
    pub fn parse(line: &str) -> Result<Self, ParseError> {
        let bad = |reason: String| ParseError::NodeLine {
            line: line.to_string(),
            reason,
        };
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [
            id,
            address,
            flags,
            primary,
            _ping_sent,
            _pong_received,
            epoch,
            link,
            ref slot_entries @ ..,
        ] = fields[..]
        else {
            return Err(bad(format!("{} fields, expected at least 8", fields.len())));
        };
        if !is_node_id(id) {
            return Err(bad(format!("node id {id:?} is not 40 hex characters")));
        }
        let (ip, port, bus_port, hostname) =
            parse_address(address).ok_or_else(|| bad(format!("bad address {address:?}")))?;
        let primary_id = match primary {
            "-" => None,
            id if is_node_id(id) => Some(id.to_string()),
            other => return Err(bad(format!("bad primary id {other:?}"))),
        };
        let config_epoch = epoch
            .parse()
            .map_err(|_| bad(format!("bad config epoch {epoch:?}")))?;
        let link_connected = match link {
            "connected" => true,
            "disconnected" => false,
            other => return Err(bad(format!("bad link state {other:?}"))),
        };

        let mut node = ClusterNode {
            id: id.to_string(),
            ip,
            port,
            bus_port,
            hostname,
            flags: NodeFlags::parse(flags),
            primary_id,
            config_epoch,
            link_connected,
            slots: Vec::new(),
            migrating: Vec::new(),
            importing: Vec::new(),
        };
        for &entry in slot_entries {
            match parse_slot_entry(entry).ok_or_else(|| bad(format!("bad slot {entry:?}")))? {
                SlotEntry::Owned(range) => node.slots.push(range),
                SlotEntry::Migrating(slot, to) => node.migrating.push((slot, to)),
                SlotEntry::Importing(slot, from) => node.importing.push((slot, from)),
            }
        }
        Ok(node)
    }

    /// Primary or replica, by its flags; `None` while the handshake is still under way.
    pub fn role(&self) -> Option<Role> {
        if self.flags.primary {
            Some(Role::Primary)
        } else if self.flags.replica {
            Some(Role::Replica)
        } else {
            None
        }
    }

    /// Reachable and a full member: connected, not suspected or failed, handshake done,
    /// address known.
    pub fn is_healthy(&self) -> bool {
        let f = self.flags;
        self.link_connected && !(f.pfail || f.fail || f.handshake || f.noaddr)
    }

    /// A primary serving nothing: never given slots, or it gave them all away.
    pub fn is_empty_primary(&self) -> bool {
        self.flags.primary && self.slots.is_empty()
    }

    fn owns(&self, slot: u16) -> bool {
        self.slots
            .iter()
            .any(|&(first, last)| (first..=last).contains(&slot))
    }
}

fn is_node_id(id: &str) -> bool {
    id.len() == 40 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

/// `ip:port@cport[,hostname]`; the ip may be empty and may be IPv6 (`::1:6379@16379`).
fn parse_address(address: &str) -> Option<(String, u16, u16, Option<String>)> {
    let mut parts = address.split(',');
    let endpoint = parts.next()?;
    // Anything after the hostname (nodes.conf's aux fields) is not ours to read.
    let hostname = parts.next().filter(|h| !h.is_empty()).map(str::to_string);
    let (ip_port, bus_port) = endpoint.split_once('@')?;
    let (ip, port) = ip_port.rsplit_once(':')?;
    Some((
        ip.to_string(),
        port.parse().ok()?,
        bus_port.parse().ok()?,
        hostname,
    ))
}

enum SlotEntry {
    Owned(SlotRange),
    Migrating(u16, String),
    Importing(u16, String),
}

/// `123`, `0-5460`, `[123->-<node-id>]` (migrating) or `[123-<-<node-id>]` (importing).
fn parse_slot_entry(entry: &str) -> Option<SlotEntry> {
    let slot = |s: &str| s.parse::<u16>().ok().filter(|&n| n < SLOTS);
    if let Some(open) = entry.strip_prefix('[').and_then(|e| e.strip_suffix(']')) {
        let (n, node, migrating) = match open.split_once("->-") {
            Some((n, to)) => (n, to, true),
            None => open.split_once("-<-").map(|(n, from)| (n, from, false))?,
        };
        if !is_node_id(node) {
            return None;
        }
        let (slot, node) = (slot(n)?, node.to_string());
        return Some(if migrating {
            SlotEntry::Migrating(slot, node)
        } else {
            SlotEntry::Importing(slot, node)
        });
    }
    let (first, last) = match entry.split_once('-') {
        Some((first, last)) => (slot(first)?, slot(last)?),
        None => (slot(entry)?, slot(entry)?),
    };
    (first <= last).then_some(SlotEntry::Owned((first, last)))
}

/// One node's `CLUSTER NODES`: every node it knows, sorted by id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterView {
    nodes: Vec<ClusterNode>,
    myself: usize,
}

impl ClusterView {
    /// Parses the whole reply; blank lines are skipped. Refuses a view without exactly one
    /// myself line, with a node listed twice or with a slot given to two nodes, so the
    /// lookups below have a single answer.
    pub fn parse(text: &str) -> Result<Self, ParseError> {
        let mut nodes = text
            .lines()
            .filter(|line| !line.trim().is_empty())
            .map(ClusterNode::parse)
            .collect::<Result<Vec<_>, _>>()?;
        nodes.sort_by(|a, b| a.id.cmp(&b.id));
        if let Some(pair) = nodes.windows(2).find(|pair| pair[0].id == pair[1].id) {
            return Err(ParseError::DuplicateNode(pair[0].id.clone()));
        }
        let mut claimed: Vec<Option<&str>> = vec![None; usize::from(SLOTS)];
        for node in &nodes {
            for &(first, last) in &node.slots {
                for slot in first..=last {
                    if let Some(first) = claimed[usize::from(slot)].replace(&node.id) {
                        return Err(ParseError::SlotClaimedTwice {
                            slot,
                            first: first.to_string(),
                            second: node.id.clone(),
                        });
                    }
                }
            }
        }
        let myself: Vec<usize> = (0..nodes.len())
            .filter(|&i| nodes[i].flags.myself)
            .collect();
        match myself[..] {
            [myself] => Ok(ClusterView { nodes, myself }),
            _ => Err(ParseError::Myself(myself.len())),
        }
    }

    pub fn nodes(&self) -> &[ClusterNode] {
        &self.nodes
    }

    /// The node that produced this view.
    pub fn myself(&self) -> &ClusterNode {
        &self.nodes[self.myself]
    }

    pub fn by_id(&self, id: &str) -> Option<&ClusterNode> {
        self.nodes
            .binary_search_by(|node| node.id.as_str().cmp(id))
            .ok()
            .map(|i| &self.nodes[i])
    }

    /// Nodes flagged primary, failed ones included.
    pub fn primaries(&self) -> impl Iterator<Item = &ClusterNode> {
        self.nodes.iter().filter(|node| node.flags.primary)
    }

    /// Nodes flagged replica that follow `primary_id`, failed ones included.
    pub fn replicas_of<'a>(&'a self, primary_id: &'a str) -> impl Iterator<Item = &'a ClusterNode> {
        self.nodes.iter().filter(move |node| {
            node.flags.replica && node.primary_id.as_deref() == Some(primary_id)
        })
    }

    /// The node serving `slot`, if any.
    pub fn slot_owner(&self, slot: u16) -> Option<&ClusterNode> {
        self.nodes.iter().find(|node| node.owns(slot))
    }

    /// Slots some node owns (16384 when the cluster is complete).
    pub fn assigned_slot_count(&self) -> usize {
        self.nodes.iter().map(|node| slot_count(&node.slots)).sum()
    }

    /// Slots left migrating or importing, ascending: a resharding is under way or was
    /// interrupted and must be finished (or undone) before the next one.
    pub fn open_slots(&self) -> Vec<u16> {
        let open: BTreeSet<u16> = self
            .nodes
            .iter()
            .flat_map(|node| node.migrating.iter().chain(&node.importing))
            .map(|&(slot, _)| slot)
            .collect();
        open.into_iter().collect()
    }

    /// Each slot-owning node's slots, the input of [`crate::cluster::slots::plan_rebalance`].
    pub fn ownership(&self) -> BTreeMap<String, Vec<SlotRange>> {
        self.nodes
            .iter()
            .filter(|node| !node.slots.is_empty())
            .map(|node| (node.id.clone(), node.slots.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::fixtures::*;
    use crate::cluster::slots;

    #[test]
    fn reads_every_field_of_a_healthy_cluster() {
        let view = view(HEALTHY_7101);
        assert_eq!(view.nodes().len(), 6);
        assert_eq!(view.myself().id, N7101);
        assert_eq!(
            view.by_id(N7104),
            Some(&ClusterNode {
                id: N7104.to_string(),
                ip: "127.0.0.1".to_string(),
                port: 7104,
                bus_port: 17104,
                hostname: None,
                flags: NodeFlags {
                    replica: true,
                    ..NodeFlags::default()
                },
                primary_id: Some(N7101.to_string()),
                config_epoch: 1,
                link_connected: true,
                slots: vec![],
                migrating: vec![],
                importing: vec![],
            })
        );
        let myself = view.myself();
        assert_eq!(
            (myself.port, myself.bus_port, myself.config_epoch),
            (7101, 17101, 1)
        );
        assert!(myself.flags.myself && myself.flags.primary && !myself.flags.replica);
        assert_eq!(myself.slots, [(0, 5460)]);
        assert_eq!(myself.role(), Some(Role::Primary));
        assert!(view.nodes().iter().all(ClusterNode::is_healthy));

        // Sorted by id, not in Valkey's (hash table) order.
        assert_eq!(ids(view.primaries()), [N7103, N7102, N7101]);
        assert_eq!(ids(view.replicas_of(N7101)), [N7104]);
        assert_eq!(ids(view.replicas_of(N7102)), [N7105]);
        assert_eq!(ids(view.replicas_of(N7104)), Vec::<&str>::new());
        assert_eq!(view.by_id("0".repeat(40).as_str()), None);

        assert_eq!(view.assigned_slot_count(), 16384);
        assert_eq!(view.slot_owner(0).map(|n| n.port), Some(7101));
        assert_eq!(view.slot_owner(5460).map(|n| n.port), Some(7101));
        assert_eq!(view.slot_owner(5461).map(|n| n.port), Some(7102));
        assert_eq!(view.slot_owner(16383).map(|n| n.port), Some(7103));
        assert!(view.open_slots().is_empty());
        assert_eq!(
            view.ownership(),
            BTreeMap::from([
                (N7101.to_string(), vec![(0, 5460)]),
                (N7102.to_string(), vec![(5461, 10922)]),
                (N7103.to_string(), vec![(10923, 16383)]),
            ])
        );
    }

    #[test]
    fn reads_hostnames_and_single_slots() {
        let view = view(MOVED_7101);
        assert_eq!(
            view.myself().hostname.as_deref(),
            Some("vkc-0-0.default.svc")
        );
        assert_eq!(view.myself().ip, "127.0.0.1");
        assert_eq!(view.myself().bus_port, 17101);
        assert_eq!(view.by_id(N7102).unwrap().hostname, None);
        assert_eq!(view.myself().slots, [(0, 99), (101, 5460)]);
        assert_eq!(
            view.by_id(N7102).unwrap().slots,
            [(100, 100), (5461, 10922)]
        );
        assert_eq!(view.by_id(N7102).unwrap().config_epoch, 7);
        assert_eq!(view.slot_owner(100).unwrap().id, N7102);
        assert_eq!(view.slot_owner(101).unwrap().id, N7101);
        assert_eq!(view.assigned_slot_count(), 16384);
        assert!(slots::unassigned(&view.ownership()).is_empty());
    }

    #[test]
    fn reads_open_slots_and_nodes_in_handshake() {
        let migrating = view(OPENING_7101);
        let myself = migrating.myself();
        assert_eq!(myself.slots, [(0, 5460)], "markers are not owned ranges");
        assert_eq!(
            myself.migrating,
            [(100, N7102.to_string()), (101, N7102.to_string())]
        );
        assert!(myself.importing.is_empty());
        assert_eq!(migrating.open_slots(), [100, 101]);
        // Until the migration finishes the slot still belongs to its source.
        assert_eq!(migrating.slot_owner(100).unwrap().id, N7101);

        let met = migrating
            .by_id("e14fa3a0150ea1eae7a68c73c5a9bed2f9015be9")
            .unwrap();
        assert!(met.flags.handshake);
        assert_eq!((met.port, met.bus_port), (7199, 17199));
        assert_eq!(met.role(), None);
        assert!(!met.link_connected && !met.is_healthy());
        assert_eq!(migrating.primaries().count(), 3);

        let importing = view(OPENING_7102);
        assert_eq!(importing.myself().importing, [(100, N7101.to_string())]);
        assert!(importing.myself().migrating.is_empty());
        assert_eq!(importing.open_slots(), [100]);
    }

    #[test]
    fn reads_suspected_and_failed_nodes() {
        let suspecting = view(SUSPECTING_7101);
        let stopped = suspecting.by_id(N7106).unwrap();
        assert!(stopped.flags.pfail && !stopped.flags.fail && stopped.flags.replica);
        assert!(!stopped.link_connected && !stopped.is_healthy());
        assert_eq!(
            suspecting.nodes().iter().filter(|n| n.is_healthy()).count(),
            5
        );

        let failed_over = view(FAILED_OVER_7102);
        let old_primary = failed_over.by_id(N7101).unwrap();
        assert!(old_primary.flags.primary && old_primary.flags.fail);
        assert!(
            old_primary.slots.is_empty(),
            "its slots went to the replica"
        );
        assert_eq!(old_primary.hostname.as_deref(), Some("vkc-0-0.default.svc"));
        assert_eq!(failed_over.slot_owner(0).unwrap().id, N7104);
        assert_eq!(ids(failed_over.primaries()), [N7103, N7102, N7101, N7104]);
        assert_eq!(failed_over.assigned_slot_count(), 16384);

        let replaced = failed_over.by_id(N7105).unwrap();
        assert!(replaced.flags.noaddr && replaced.flags.fail);
        assert_eq!(
            (replaced.ip.as_str(), replaced.port, replaced.bus_port),
            ("", 0, 0)
        );
        assert_eq!(ids(failed_over.replicas_of(N7102)), [N7105]);
        assert!(failed_over.by_id(N7106).unwrap().flags.fail);
    }

    #[test]
    fn reads_a_replica_view() {
        let rejoined = view(REJOINED_7101);
        let myself = rejoined.myself();
        assert_eq!(myself.id, N7101);
        assert!(myself.flags.myself && myself.flags.replica);
        assert_eq!(myself.role(), Some(Role::Replica));
        assert_eq!(myself.primary_id.as_deref(), Some(N7104));
        assert_eq!(ids(rejoined.replicas_of(N7104)), [N7101]);
    }

    #[test]
    fn accepts_ipv6_newer_flag_names_and_blank_lines() {
        let text = "\n\
            aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa 2001:db8::7:6379@16379,vkc-1-0 myself,primary - 0 0 4 connected 0-1 5 16383\r\n\
            bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb ::1:6380@16380 replica,nofailover,someday aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa 0 0 4 connected\n\
            cccccccccccccccccccccccccccccccccccccccc 10.0.0.3:6379@16379 noflags - 0 0 0 connected\n\
            \n";
        let view = view(text);
        let myself = view.myself();
        assert_eq!(
            (myself.ip.as_str(), myself.port, myself.bus_port),
            ("2001:db8::7", 6379, 16379)
        );
        assert_eq!(myself.hostname.as_deref(), Some("vkc-1-0"));
        assert!(myself.flags.primary);
        assert_eq!(myself.slots, [(0, 1), (5, 5), (16383, 16383)]);
        let replica = view.by_id(&"b".repeat(40)).unwrap();
        assert_eq!((replica.ip.as_str(), replica.port), ("::1", 6380));
        assert!(replica.flags.replica && replica.flags.nofailover);
        assert_eq!(
            view.by_id(&"c".repeat(40)).unwrap().flags,
            NodeFlags::default()
        );
    }

    #[test]
    fn malformed_lines_are_refused_with_the_line() {
        let good = "86f261798545f334b6d64fb6b030c18fbb563a41 127.0.0.1:7101@17101 myself,master - 0 0 1 connected 0-5460";
        assert!(ClusterNode::parse(good).is_ok());
        let cases = [
            (
                good.replace(" connected 0-5460", ""),
                "7 fields, expected at least 8",
            ),
            (good.replace("86f26", "xyz26"), "is not 40 hex characters"),
            (
                good.replace("86f261798545f334b6d64fb6b030c18fbb563a41 ", "86f2 "),
                "is not 40 hex characters",
            ),
            (good.replace("@17101", ""), "bad address"),
            (good.replace(":7101@", ":71o1@"), "bad address"),
            (
                good.replace("myself,master -", "myself,master 42"),
                "bad primary id",
            ),
            (
                good.replace(" 1 connected", " one connected"),
                "bad config epoch",
            ),
            (good.replace("connected", "linked"), "bad link state"),
            (good.replace("0-5460", "0-16384"), "bad slot \"0-16384\""),
            (good.replace("0-5460", "5460-0"), "bad slot"),
            (good.replace("0-5460", "five"), "bad slot"),
            (good.replace("0-5460", "[100->-nobody]"), "bad slot"),
            (good.replace("0-5460", "[100-<-]"), "bad slot"),
            (
                good.replace("0-5460", "[100<-86f261798545f334b6d64fb6b030c18fbb563a41]"),
                "bad slot",
            ),
        ];
        for (line, reason) in cases {
            let error = ClusterNode::parse(&line).unwrap_err().to_string();
            assert!(error.contains(reason), "{line}: {error}");
            assert!(
                error.contains(&format!("{line:?}")),
                "{error} does not quote the line"
            );
        }
        // A bad line fails the whole view.
        let broken = HEALTHY_7101.replace("0-5460", "0-5460x");
        assert!(matches!(
            ClusterView::parse(&broken),
            Err(ParseError::NodeLine { .. })
        ));
    }

    #[test]
    fn ambiguous_views_are_refused() {
        assert_eq!(ClusterView::parse(""), Err(ParseError::Myself(0)));
        let no_myself = HEALTHY_7101.replace("myself,", "");
        assert_eq!(ClusterView::parse(&no_myself), Err(ParseError::Myself(0)));
        let two_myself = HEALTHY_7101.replace("7103 master", "7103 myself,master");
        assert_eq!(ClusterView::parse(&two_myself), Err(ParseError::Myself(2)));
        let first_line = HEALTHY_7101.lines().next().unwrap();
        let twice = format!("{HEALTHY_7101}{first_line}\n");
        assert_eq!(
            ClusterView::parse(&twice),
            Err(ParseError::DuplicateNode(N7102.to_string()))
        );
        let overlapping = HEALTHY_7101.replace("10923-16383", "10922-16383");
        assert_eq!(
            ClusterView::parse(&overlapping),
            Err(ParseError::SlotClaimedTwice {
                slot: 10922,
                first: N7103.to_string(),
                second: N7102.to_string(),
            })
        );
    }
}
