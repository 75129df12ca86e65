//! What Valkey says about itself, parsed: `CLUSTER NODES` (one node's view of the cluster),
//! `INFO replication` and the version in `INFO server`. Formats as Valkey 8 prints them.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crd_types::node::Role;

use crate::slots::{SLOTS, SlotRange, slot_count};

/// Text Valkey returned that does not have the expected shape.
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
    #[error("malformed INFO line ({reason}): {line:?}")]
    InfoLine { line: String, reason: String },
    #[error("INFO has no {0} field")]
    MissingInfoField(&'static str),
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

    /// Each slot-owning node's slots, the input of [`crate::slots::plan_rebalance`].
    pub fn ownership(&self) -> BTreeMap<String, Vec<SlotRange>> {
        self.nodes
            .iter()
            .filter(|node| !node.slots.is_empty())
            .map(|node| (node.id.clone(), node.slots.clone()))
            .collect()
    }

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
        self.nodes
            .iter()
            .filter(|node| !node.flags.handshake)
            .map(|node| node.id.as_str())
            .collect()
    }

    fn owner_table(&self) -> Vec<Option<&str>> {
        let mut owners = vec![None; usize::from(SLOTS)];
        for node in &self.nodes {
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

/// `INFO replication`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicationInfo {
    /// `role`: master is [`Role::Primary`], slave [`Role::Replica`].
    pub role: Role,
    /// `connected_slaves`.
    pub connected_replicas: u32,
    /// The `slaveN` lines.
    pub replicas: Vec<ConnectedReplica>,
    /// `master_repl_offset`: this node's replication offset.
    pub repl_offset: i64,
    /// The `master_*` and `slave_repl_offset` fields; `Some` on a replica.
    pub primary: Option<PrimaryLink>,
}

/// A `slaveN:ip=...,port=...,state=...,offset=...,lag=...` line of a primary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectedReplica {
    pub ip: String,
    pub port: u16,
    /// `online` once in sync; `wait_bgsave`, `send_bulk`... before.
    pub state: String,
    pub offset: i64,
    /// Seconds since the replica last acknowledged.
    pub lag: i64,
}

/// A replica's link to its primary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrimaryLink {
    /// `master_host`.
    pub host: String,
    /// `master_port`.
    pub port: u16,
    /// `master_link_status:up`.
    pub link_up: bool,
    /// `master_sync_in_progress:1`: a full sync is running.
    pub sync_in_progress: bool,
    /// `slave_repl_offset`: how far this replica has applied the stream.
    pub repl_offset: i64,
}

impl ReplicationInfo {
    /// Parses the `INFO replication` reply (`\r\n` or `\n` line ends; other sections are
    /// fine too).
    pub fn parse(text: &str) -> Result<Self, ParseError> {
        let fields = InfoFields::parse(text)?;
        let role = match fields.required("role")? {
            "master" | "primary" => Role::Primary,
            "slave" | "replica" => Role::Replica,
            other => return Err(info_error("role", other, "expected master or slave")),
        };
        let primary = match role {
            Role::Replica => Some(PrimaryLink {
                host: fields.required("master_host")?.to_string(),
                port: fields.number("master_port")?,
                link_up: fields.required("master_link_status")? == "up",
                sync_in_progress: fields.number::<u8>("master_sync_in_progress")? != 0,
                repl_offset: fields.number("slave_repl_offset")?,
            }),
            _ => None,
        };
        let mut numbered: Vec<(u32, &str, &str)> = fields
            .0
            .iter()
            .filter_map(|(&key, &value)| Some((replica_index(key)?, key, value)))
            .collect();
        // slave10 sorts before slave2 as text.
        numbered.sort_unstable_by_key(|&(index, _, _)| index);
        let replicas = numbered
            .into_iter()
            .map(|(_, key, value)| parse_connected_replica(key, value))
            .collect::<Result<_, _>>()?;
        Ok(ReplicationInfo {
            role,
            connected_replicas: fields.number("connected_slaves")?,
            replicas,
            repl_offset: fields.number("master_repl_offset")?,
            primary,
        })
    }
}

/// The server version from `INFO server`: `valkey_version`, or `redis_version` from a server
/// that predates it (Valkey also reports `redis_version:7.2.4` for client compatibility).
pub fn server_version(info: &str) -> Result<String, ParseError> {
    let fields = InfoFields::parse(info)?;
    fields
        .get("valkey_version")
        .or_else(|| fields.get("redis_version"))
        .map(str::to_string)
        .ok_or(ParseError::MissingInfoField("valkey_version"))
}

/// Whether `CLUSTER INFO` says `cluster_state:ok`: the node serves its slots. A node just
/// given slots, or one rejoining after a partition, still answers CLUSTERDOWN for a moment.
pub fn cluster_state_ok(cluster_info: &str) -> Result<bool, ParseError> {
    InfoFields::parse(cluster_info)?
        .get("cluster_state")
        .map(|state| state == "ok")
        .ok_or(ParseError::MissingInfoField("cluster_state"))
}

/// `key:value` lines of an INFO reply, in key order.
struct InfoFields<'a>(BTreeMap<&'a str, &'a str>);

impl<'a> InfoFields<'a> {
    fn parse(text: &'a str) -> Result<Self, ParseError> {
        let mut fields = BTreeMap::new();
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (key, value) = line.split_once(':').ok_or_else(|| ParseError::InfoLine {
                line: line.to_string(),
                reason: "no ':'".to_string(),
            })?;
            fields.insert(key, value);
        }
        Ok(InfoFields(fields))
    }

    fn get(&self, key: &str) -> Option<&'a str> {
        self.0.get(key).copied()
    }

    fn required(&self, key: &'static str) -> Result<&'a str, ParseError> {
        self.get(key).ok_or(ParseError::MissingInfoField(key))
    }

    fn number<T: std::str::FromStr>(&self, key: &'static str) -> Result<T, ParseError> {
        let value = self.required(key)?;
        value
            .parse()
            .map_err(|_| info_error(key, value, "not a number"))
    }
}

fn info_error(key: &str, value: &str, reason: &str) -> ParseError {
    ParseError::InfoLine {
        line: format!("{key}:{value}"),
        reason: reason.to_string(),
    }
}

/// N of a `slaveN` key.
fn replica_index(key: &str) -> Option<u32> {
    key.strip_prefix("slave")?.parse().ok()
}

fn parse_connected_replica(key: &str, value: &str) -> Result<ConnectedReplica, ParseError> {
    let attributes: BTreeMap<&str, &str> = value
        .split(',')
        .filter_map(|attribute| attribute.split_once('='))
        .collect();
    let bad = |reason: &str| info_error(key, value, reason);
    let field = |name: &str| {
        attributes
            .get(name)
            .copied()
            .ok_or_else(|| bad(&format!("no {name}")))
    };
    let number = |name: &str| {
        field(name)?
            .parse()
            .map_err(|_| bad(&format!("bad {name}")))
    };
    Ok(ConnectedReplica {
        ip: field("ip")?.to_string(),
        port: field("port")?.parse().map_err(|_| bad("bad port"))?,
        state: field("state")?.to_string(),
        offset: number("offset")?,
        lag: number("lag")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slots;

    // Node ids of the fixture cluster, by port.
    const N7101: &str = "86f261798545f334b6d64fb6b030c18fbb563a41";
    const N7102: &str = "70b7029533196506e197efe68e2d788999f52769";
    const N7103: &str = "6a478734fee3c2350e99992dd1ed7b51cc067b15";
    const N7104: &str = "c0bf29f0142a7be7629267bacffb99baf2a9d636";
    const N7105: &str = "867bbae3d825c22fd8c4cd80482091b829241158";
    const N7106: &str = "d02f99ceaf6bbdbf02a3f13ddbe8bd5cc8a5feca";

    // Fixtures below were captured from valkey-server 8.0.1: six local nodes, cluster-node-timeout
    // 2000, created with `valkey-cli --cluster create ... --cluster-replicas 1`.

    /// Just after `valkey-cli --cluster create` with 3 primaries (7101-7103) and a replica each
    /// (7104-7106), seen from 7101.
    const HEALTHY_7101: &str = "\
        70b7029533196506e197efe68e2d788999f52769 127.0.0.1:7102@17102 master - 0 1796028047335 2 connected 5461-10922\n\
        86f261798545f334b6d64fb6b030c18fbb563a41 127.0.0.1:7101@17101 myself,master - 0 0 1 connected 0-5460\n\
        6a478734fee3c2350e99992dd1ed7b51cc067b15 127.0.0.1:7103@17103 master - 0 1796028047335 3 connected 10923-16383\n\
        c0bf29f0142a7be7629267bacffb99baf2a9d636 127.0.0.1:7104@17104 slave 86f261798545f334b6d64fb6b030c18fbb563a41 0 1796028048040 1 connected\n\
        d02f99ceaf6bbdbf02a3f13ddbe8bd5cc8a5feca 127.0.0.1:7106@17106 slave 6a478734fee3c2350e99992dd1ed7b51cc067b15 0 1796028048040 3 connected\n\
        867bbae3d825c22fd8c4cd80482091b829241158 127.0.0.1:7105@17105 slave 70b7029533196506e197efe68e2d788999f52769 0 1796028048155 2 connected\n\
    ";

    /// Slot 100 moved from 7101 to 7102 and 7101 announcing a hostname, seen from 7101.
    const MOVED_7101: &str = "\
        70b7029533196506e197efe68e2d788999f52769 127.0.0.1:7102@17102 master - 0 1796028055127 7 connected 100 5461-10922\n\
        86f261798545f334b6d64fb6b030c18fbb563a41 127.0.0.1:7101@17101,vkc-0-0.default.svc myself,master - 0 0 1 connected 0-99 101-5460\n\
        6a478734fee3c2350e99992dd1ed7b51cc067b15 127.0.0.1:7103@17103 master - 0 1796028055027 3 connected 10923-16383\n\
        c0bf29f0142a7be7629267bacffb99baf2a9d636 127.0.0.1:7104@17104 slave 86f261798545f334b6d64fb6b030c18fbb563a41 0 1796028055429 1 connected\n\
        d02f99ceaf6bbdbf02a3f13ddbe8bd5cc8a5feca 127.0.0.1:7106@17106 slave 6a478734fee3c2350e99992dd1ed7b51cc067b15 0 1796028055127 3 connected\n\
        867bbae3d825c22fd8c4cd80482091b829241158 127.0.0.1:7105@17105 slave 70b7029533196506e197efe68e2d788999f52769 0 1796028055027 7 connected\n\
    ";

    /// The same, seen from 7102.
    const MOVED_7102: &str = "\
        86f261798545f334b6d64fb6b030c18fbb563a41 127.0.0.1:7101@17101,vkc-0-0.default.svc master - 0 1796028055429 1 connected 0-99 101-5460\n\
        6a478734fee3c2350e99992dd1ed7b51cc067b15 127.0.0.1:7103@17103 master - 0 1796028055026 3 connected 10923-16383\n\
        d02f99ceaf6bbdbf02a3f13ddbe8bd5cc8a5feca 127.0.0.1:7106@17106 slave 6a478734fee3c2350e99992dd1ed7b51cc067b15 0 1796028055127 3 connected\n\
        c0bf29f0142a7be7629267bacffb99baf2a9d636 127.0.0.1:7104@17104 slave 86f261798545f334b6d64fb6b030c18fbb563a41 0 1796028055026 1 connected\n\
        70b7029533196506e197efe68e2d788999f52769 127.0.0.1:7102@17102 myself,master - 0 0 7 connected 100 5461-10922\n\
        867bbae3d825c22fd8c4cd80482091b829241158 127.0.0.1:7105@17105 slave 70b7029533196506e197efe68e2d788999f52769 0 1796028055000 7 connected\n\
    ";

    /// The same, seen from 7103.
    const MOVED_7103: &str = "\
        c0bf29f0142a7be7629267bacffb99baf2a9d636 127.0.0.1:7104@17104 slave 86f261798545f334b6d64fb6b030c18fbb563a41 0 1796028055113 1 connected\n\
        867bbae3d825c22fd8c4cd80482091b829241158 127.0.0.1:7105@17105 slave 70b7029533196506e197efe68e2d788999f52769 0 1796028055000 7 connected\n\
        70b7029533196506e197efe68e2d788999f52769 127.0.0.1:7102@17102 master - 0 1796028055114 7 connected 100 5461-10922\n\
        d02f99ceaf6bbdbf02a3f13ddbe8bd5cc8a5feca 127.0.0.1:7106@17106 slave 6a478734fee3c2350e99992dd1ed7b51cc067b15 0 1796028055415 3 connected\n\
        6a478734fee3c2350e99992dd1ed7b51cc067b15 127.0.0.1:7103@17103 myself,master - 0 0 3 connected 10923-16383\n\
        86f261798545f334b6d64fb6b030c18fbb563a41 127.0.0.1:7101@17101,vkc-0-0.default.svc master - 0 1796028055114 1 connected 0-99 101-5460\n\
    ";

    /// The same, seen from 7104.
    const MOVED_7104: &str = "\
        c0bf29f0142a7be7629267bacffb99baf2a9d636 127.0.0.1:7104@17104 myself,slave 86f261798545f334b6d64fb6b030c18fbb563a41 0 0 1 connected\n\
        6a478734fee3c2350e99992dd1ed7b51cc067b15 127.0.0.1:7103@17103 master - 0 1796028055027 3 connected 10923-16383\n\
        70b7029533196506e197efe68e2d788999f52769 127.0.0.1:7102@17102 master - 0 1796028055429 7 connected 100 5461-10922\n\
        867bbae3d825c22fd8c4cd80482091b829241158 127.0.0.1:7105@17105 slave 70b7029533196506e197efe68e2d788999f52769 0 1796028055026 7 connected\n\
        d02f99ceaf6bbdbf02a3f13ddbe8bd5cc8a5feca 127.0.0.1:7106@17106 slave 6a478734fee3c2350e99992dd1ed7b51cc067b15 0 1796028055127 3 connected\n\
        86f261798545f334b6d64fb6b030c18fbb563a41 127.0.0.1:7101@17101,vkc-0-0.default.svc master - 0 1796028055027 1 connected 0-99 101-5460\n\
    ";

    /// The same, seen from 7105.
    const MOVED_7105: &str = "\
        d02f99ceaf6bbdbf02a3f13ddbe8bd5cc8a5feca 127.0.0.1:7106@17106 slave 6a478734fee3c2350e99992dd1ed7b51cc067b15 0 1796028055426 3 connected\n\
        c0bf29f0142a7be7629267bacffb99baf2a9d636 127.0.0.1:7104@17104 slave 86f261798545f334b6d64fb6b030c18fbb563a41 0 1796028055124 1 connected\n\
        86f261798545f334b6d64fb6b030c18fbb563a41 127.0.0.1:7101@17101,vkc-0-0.default.svc master - 0 1796028055023 1 connected 0-99 101-5460\n\
        6a478734fee3c2350e99992dd1ed7b51cc067b15 127.0.0.1:7103@17103 master - 0 1796028055023 3 connected 10923-16383\n\
        867bbae3d825c22fd8c4cd80482091b829241158 127.0.0.1:7105@17105 myself,slave 70b7029533196506e197efe68e2d788999f52769 0 0 7 connected\n\
        70b7029533196506e197efe68e2d788999f52769 127.0.0.1:7102@17102 master - 0 1796028055124 7 connected 100 5461-10922\n\
    ";

    /// The same, seen from 7106.
    const MOVED_7106: &str = "\
        867bbae3d825c22fd8c4cd80482091b829241158 127.0.0.1:7105@17105 slave 70b7029533196506e197efe68e2d788999f52769 0 1796028055000 7 connected\n\
        86f261798545f334b6d64fb6b030c18fbb563a41 127.0.0.1:7101@17101,vkc-0-0.default.svc master - 0 1796028055027 1 connected 0-99 101-5460\n\
        70b7029533196506e197efe68e2d788999f52769 127.0.0.1:7102@17102 master - 0 1796028055027 7 connected 100 5461-10922\n\
        d02f99ceaf6bbdbf02a3f13ddbe8bd5cc8a5feca 127.0.0.1:7106@17106 myself,slave 6a478734fee3c2350e99992dd1ed7b51cc067b15 0 0 3 connected\n\
        c0bf29f0142a7be7629267bacffb99baf2a9d636 127.0.0.1:7104@17104 slave 86f261798545f334b6d64fb6b030c18fbb563a41 0 1796028055429 1 connected\n\
        6a478734fee3c2350e99992dd1ed7b51cc067b15 127.0.0.1:7103@17103 master - 0 1796028055027 3 connected 10923-16383\n\
    ";

    /// Slots 100 and 101 being migrated from 7101 to 7102 and a MEET to 127.0.0.1:7199 (nothing
    /// listens there) still in handshake, seen from 7101.
    const OPENING_7101: &str = "\
        70b7029533196506e197efe68e2d788999f52769 127.0.0.1:7102@17102 master - 0 1796028051080 2 connected 5461-10922\n\
        86f261798545f334b6d64fb6b030c18fbb563a41 127.0.0.1:7101@17101,vkc-0-0.default.svc myself,master - 0 0 1 connected 0-5460 [100->-70b7029533196506e197efe68e2d788999f52769] [101->-70b7029533196506e197efe68e2d788999f52769]\n\
        6a478734fee3c2350e99992dd1ed7b51cc067b15 127.0.0.1:7103@17103 master - 0 1796028051383 3 connected 10923-16383\n\
        e14fa3a0150ea1eae7a68c73c5a9bed2f9015be9 127.0.0.1:7199@17199 handshake - 0 0 0 disconnected\n\
        c0bf29f0142a7be7629267bacffb99baf2a9d636 127.0.0.1:7104@17104 slave 86f261798545f334b6d64fb6b030c18fbb563a41 0 1796028051080 1 connected\n\
        d02f99ceaf6bbdbf02a3f13ddbe8bd5cc8a5feca 127.0.0.1:7106@17106 slave 6a478734fee3c2350e99992dd1ed7b51cc067b15 0 1796028051080 3 connected\n\
        867bbae3d825c22fd8c4cd80482091b829241158 127.0.0.1:7105@17105 slave 70b7029533196506e197efe68e2d788999f52769 0 1796028051383 2 connected\n\
    ";

    /// The same, seen from 7102, which imports slot 100.
    const OPENING_7102: &str = "\
        86f261798545f334b6d64fb6b030c18fbb563a41 127.0.0.1:7101@17101,vkc-0-0.default.svc master - 0 1796028051180 1 connected 0-5460\n\
        6a478734fee3c2350e99992dd1ed7b51cc067b15 127.0.0.1:7103@17103 master - 0 1796028051381 3 connected 10923-16383\n\
        d02f99ceaf6bbdbf02a3f13ddbe8bd5cc8a5feca 127.0.0.1:7106@17106 slave 6a478734fee3c2350e99992dd1ed7b51cc067b15 0 1796028051080 3 connected\n\
        c0bf29f0142a7be7629267bacffb99baf2a9d636 127.0.0.1:7104@17104 slave 86f261798545f334b6d64fb6b030c18fbb563a41 0 1796028051381 1 connected\n\
        70b7029533196506e197efe68e2d788999f52769 127.0.0.1:7102@17102 myself,master - 0 0 2 connected 5461-10922 [100-<-86f261798545f334b6d64fb6b030c18fbb563a41]\n\
        867bbae3d825c22fd8c4cd80482091b829241158 127.0.0.1:7105@17105 slave 70b7029533196506e197efe68e2d788999f52769 0 1796028051080 2 connected\n\
    ";

    /// 7106 stopped, seen from 7101 after the node timeout, before the others agreed it failed.
    /// Captured a moment earlier; `fail?` added by hand to 7106's line.
    const SUSPECTING_7101: &str = "\
        70b7029533196506e197efe68e2d788999f52769 127.0.0.1:7102@17102 master - 0 1796028065224 7 connected 100 5461-10922\n\
        86f261798545f334b6d64fb6b030c18fbb563a41 127.0.0.1:7101@17101,vkc-0-0.default.svc myself,master - 0 0 1 connected 0-99 101-5460\n\
        6a478734fee3c2350e99992dd1ed7b51cc067b15 127.0.0.1:7103@17103 master - 0 1796028065525 3 connected 10923-16383\n\
        c0bf29f0142a7be7629267bacffb99baf2a9d636 127.0.0.1:7104@17104 slave 86f261798545f334b6d64fb6b030c18fbb563a41 0 1796028065123 1 connected\n\
        d02f99ceaf6bbdbf02a3f13ddbe8bd5cc8a5feca 127.0.0.1:7106@17106 slave,fail? 6a478734fee3c2350e99992dd1ed7b51cc067b15 1796028065224 1796028064219 3 disconnected\n\
        867bbae3d825c22fd8c4cd80482091b829241158 127.0.0.1:7105@17105 slave 70b7029533196506e197efe68e2d788999f52769 0 1796028065022 7 connected\n\
    ";

    /// 7101 stopped and its replica 7104 took over; 7106 failed too, and 7105 came back with an
    /// empty data directory, so the others see a new id at its address and its old entry loses
    /// the address (`noaddr`). Seen from 7102.
    const FAILED_OVER_7102: &str = "\
        86f261798545f334b6d64fb6b030c18fbb563a41 127.0.0.1:7101@17101,vkc-0-0.default.svc master,fail - 1796028090016 1796028089000 1 disconnected\n\
        6a478734fee3c2350e99992dd1ed7b51cc067b15 127.0.0.1:7103@17103 master - 0 1796028095763 3 connected 10923-16383\n\
        d02f99ceaf6bbdbf02a3f13ddbe8bd5cc8a5feca 127.0.0.1:7106@17106 slave,fail 6a478734fee3c2350e99992dd1ed7b51cc067b15 1796028066204 1796028065187 3 disconnected\n\
        c0bf29f0142a7be7629267bacffb99baf2a9d636 127.0.0.1:7104@17104 master - 0 1796028095764 8 connected 0-99 101-5460\n\
        70b7029533196506e197efe68e2d788999f52769 127.0.0.1:7102@17102 myself,master - 0 0 7 connected 100 5461-10922\n\
        867bbae3d825c22fd8c4cd80482091b829241158 :0@0 slave,fail,noaddr 70b7029533196506e197efe68e2d788999f52769 1796028074055 1796028073000 7 disconnected\n\
    ";

    /// 7101 restarted after that, now a replica of 7104. Seen from 7101.
    const REJOINED_7101: &str = "\
        c0bf29f0142a7be7629267bacffb99baf2a9d636 127.0.0.1:7104@17104 master - 0 1796028103459 8 connected 0-99 101-5460\n\
        70b7029533196506e197efe68e2d788999f52769 127.0.0.1:7102@17102 master - 0 1796028104064 7 connected 100 5461-10922\n\
        867bbae3d825c22fd8c4cd80482091b829241158 :0@0 slave,fail,noaddr 70b7029533196506e197efe68e2d788999f52769 1796028098522 1796028098522 7 disconnected\n\
        d02f99ceaf6bbdbf02a3f13ddbe8bd5cc8a5feca 127.0.0.1:7106@17106 slave,fail 6a478734fee3c2350e99992dd1ed7b51cc067b15 1796028098522 1796028098522 3 disconnected\n\
        86f261798545f334b6d64fb6b030c18fbb563a41 127.0.0.1:7101@17101 myself,slave c0bf29f0142a7be7629267bacffb99baf2a9d636 0 0 8 connected\n\
        6a478734fee3c2350e99992dd1ed7b51cc067b15 127.0.0.1:7103@17103 master - 0 1796028104064 3 connected 10923-16383\n\
    ";

    /// `INFO replication` of 7101, a primary with one replica.
    const INFO_PRIMARY: &str = "\
        # Replication\r\n\
        role:master\r\n\
        connected_slaves:1\r\n\
        slave0:ip=127.0.0.1,port=7104,state=online,offset=0,lag=1,type=replica\r\n\
        replicas_waiting_psync:0\r\n\
        master_failover_state:no-failover\r\n\
        master_replid:136d5a4585a71da00cf81a4d5c6421eb2f525331\r\n\
        master_replid2:0000000000000000000000000000000000000000\r\n\
        master_repl_offset:0\r\n\
        second_repl_offset:-1\r\n\
        repl_backlog_active:1\r\n\
        repl_backlog_size:10485760\r\n\
        repl_backlog_first_byte_offset:1\r\n\
        repl_backlog_histlen:0\r\n\
    ";

    /// `INFO replication` of 7104, its replica.
    const INFO_REPLICA: &str = "\
        # Replication\r\n\
        role:slave\r\n\
        master_host:127.0.0.1\r\n\
        master_port:7101\r\n\
        master_link_status:up\r\n\
        master_last_io_seconds_ago:1\r\n\
        master_sync_in_progress:0\r\n\
        slave_read_repl_offset:0\r\n\
        slave_repl_offset:0\r\n\
        replicas_repl_buffer_size:0\r\n\
        replicas_repl_buffer_peak:0\r\n\
        slave_priority:100\r\n\
        slave_read_only:1\r\n\
        replica_announced:1\r\n\
        connected_slaves:0\r\n\
        replicas_waiting_psync:0\r\n\
        master_failover_state:no-failover\r\n\
        master_replid:136d5a4585a71da00cf81a4d5c6421eb2f525331\r\n\
        master_replid2:0000000000000000000000000000000000000000\r\n\
        master_repl_offset:0\r\n\
        second_repl_offset:-1\r\n\
        repl_backlog_active:1\r\n\
        repl_backlog_size:10485760\r\n\
        repl_backlog_first_byte_offset:1\r\n\
        repl_backlog_histlen:0\r\n\
    ";

    /// `INFO replication` of 7101 just restarted as a replica of 7104, not connected yet.
    const INFO_REPLICA_LINK_DOWN: &str = "\
        # Replication\r\n\
        role:slave\r\n\
        master_host:127.0.0.1\r\n\
        master_port:7104\r\n\
        master_link_status:down\r\n\
        master_last_io_seconds_ago:-1\r\n\
        master_sync_in_progress:0\r\n\
        slave_read_repl_offset:0\r\n\
        slave_repl_offset:0\r\n\
        replicas_repl_buffer_size:0\r\n\
        replicas_repl_buffer_peak:0\r\n\
        master_link_down_since_seconds:-1\r\n\
        slave_priority:100\r\n\
        slave_read_only:1\r\n\
        replica_announced:1\r\n\
        connected_slaves:0\r\n\
        replicas_waiting_psync:0\r\n\
        master_failover_state:no-failover\r\n\
        master_replid:865d2d5a2d64eb0558815fd747904f4acaad3b38\r\n\
        master_replid2:0000000000000000000000000000000000000000\r\n\
        master_repl_offset:0\r\n\
        second_repl_offset:-1\r\n\
        repl_backlog_active:0\r\n\
        repl_backlog_size:10485760\r\n\
        repl_backlog_first_byte_offset:0\r\n\
        repl_backlog_histlen:0\r\n\
    ";

    /// The start of `INFO server` from Valkey 8.0.1.
    const INFO_SERVER: &str = "\
        # Server\r\n\
        redis_version:7.2.4\r\n\
        server_name:valkey\r\n\
        valkey_version:8.0.1\r\n\
        redis_git_sha1:00000000\r\n\
        redis_git_dirty:0\r\n\
        redis_build_id:39f7c371e0a96e3d\r\n\
        server_mode:cluster\r\n\
    ";

    fn view(text: &str) -> ClusterView {
        ClusterView::parse(text).unwrap_or_else(|e| panic!("{e}"))
    }

    fn ids<'a>(nodes: impl Iterator<Item = &'a ClusterNode>) -> Vec<&'a str> {
        nodes.map(|node| node.id.as_str()).collect()
    }

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

    #[test]
    fn reads_a_primarys_replication() {
        let info = ReplicationInfo::parse(INFO_PRIMARY).unwrap();
        assert_eq!(
            info,
            ReplicationInfo {
                role: Role::Primary,
                connected_replicas: 1,
                replicas: vec![ConnectedReplica {
                    ip: "127.0.0.1".to_string(),
                    port: 7104,
                    state: "online".to_string(),
                    offset: 0,
                    lag: 1,
                }],
                repl_offset: 0,
                primary: None,
            }
        );
    }

    #[test]
    fn reads_a_replicas_replication() {
        let info = ReplicationInfo::parse(INFO_REPLICA).unwrap();
        assert_eq!(info.role, Role::Replica);
        assert_eq!((info.connected_replicas, info.replicas.len()), (0, 0));
        assert_eq!(
            info.primary,
            Some(PrimaryLink {
                host: "127.0.0.1".to_string(),
                port: 7101,
                link_up: true,
                sync_in_progress: false,
                repl_offset: 0,
            })
        );

        let down = ReplicationInfo::parse(INFO_REPLICA_LINK_DOWN).unwrap();
        let link = down.primary.unwrap();
        assert_eq!((link.port, link.link_up), (7104, false));

        let syncing = INFO_REPLICA_LINK_DOWN
            .replace("master_sync_in_progress:0", "master_sync_in_progress:1")
            .replace("slave_repl_offset:0", "slave_repl_offset:1234");
        let link = ReplicationInfo::parse(&syncing).unwrap().primary.unwrap();
        assert!(link.sync_in_progress);
        assert_eq!(link.repl_offset, 1234);
    }

    #[test]
    fn reads_replicas_in_order_and_large_offsets() {
        let info = "role:master\nconnected_slaves:3\n\
            slave0:ip=10.0.0.5,port=6379,state=online,offset=9000000000,lag=0\n\
            slave10:ip=10.0.0.7,port=6379,state=send_bulk,offset=0,lag=0\n\
            slave1:ip=10.0.0.6,port=6379,state=wait_bgsave,offset=0,lag=3\n\
            master_repl_offset:9000000123\n";
        let info = ReplicationInfo::parse(info).unwrap();
        assert_eq!(info.repl_offset, 9_000_000_123);
        let states: Vec<(&str, &str, i64)> = info
            .replicas
            .iter()
            .map(|r| (r.ip.as_str(), r.state.as_str(), r.offset))
            .collect();
        assert_eq!(
            states,
            [
                ("10.0.0.5", "online", 9_000_000_000),
                ("10.0.0.6", "wait_bgsave", 0),
                ("10.0.0.7", "send_bulk", 0),
            ]
        );
    }

    #[test]
    fn malformed_replication_info_is_refused() {
        assert_eq!(
            ReplicationInfo::parse("# Replication\r\nconnected_slaves:0\r\n"),
            Err(ParseError::MissingInfoField("role"))
        );
        let no_host = INFO_REPLICA.replace("master_host:127.0.0.1\r\n", "");
        assert_eq!(
            ReplicationInfo::parse(&no_host),
            Err(ParseError::MissingInfoField("master_host"))
        );
        let bad_port = INFO_REPLICA.replace("master_port:7101", "master_port:seventy");
        assert_eq!(
            ReplicationInfo::parse(&bad_port).unwrap_err().to_string(),
            "malformed INFO line (not a number): \"master_port:seventy\""
        );
        let bad_replica = INFO_PRIMARY.replace("port=7104,", "");
        let error = ReplicationInfo::parse(&bad_replica)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("no port") && error.contains("slave0:ip=127.0.0.1,state=online"),
            "{error}"
        );
        let no_colon = format!("{INFO_PRIMARY}garbage\r\n");
        assert!(
            matches!(ReplicationInfo::parse(&no_colon), Err(ParseError::InfoLine { line, .. }) if line == "garbage")
        );
        let sentinel = INFO_PRIMARY.replace("role:master", "role:sentinel");
        assert!(ReplicationInfo::parse(&sentinel).is_err());
    }

    #[test]
    fn reads_the_cluster_state() {
        let info = "cluster_enabled:1\r\ncluster_state:ok\r\ncluster_slots_assigned:16384\r\n";
        assert_eq!(cluster_state_ok(info), Ok(true));
        assert_eq!(cluster_state_ok("cluster_state:fail\r\n"), Ok(false));
        assert_eq!(
            cluster_state_ok("cluster_enabled:1\r\n"),
            Err(ParseError::MissingInfoField("cluster_state"))
        );
    }

    #[test]
    fn reads_the_server_version() {
        assert_eq!(server_version(INFO_SERVER).unwrap(), "8.0.1");
        assert_eq!(
            server_version("# Server\r\nredis_version:7.2.4\r\n").unwrap(),
            "7.2.4"
        );
        assert_eq!(
            server_version("# Server\r\nos:Linux\r\n"),
            Err(ParseError::MissingInfoField("valkey_version"))
        );
    }
}
