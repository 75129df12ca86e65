//! Valkey's own view of the cluster: `CLUSTER NODES` parsed, slots per primary, open slots,
//! and whether every member sees the shape asked for.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Result;

use super::status::parse_range;
use super::{Access, MemberAddr, Progress, SLOTS, count_slots};

/// One line of `CLUSTER NODES`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterNode {
    pub id: String,
    /// The announced IP (empty for a node without address).
    pub ip: String,
    pub flags: Vec<String>,
    /// The primary's id, for a replica.
    pub primary_id: Option<String>,
    /// The cluster bus link is connected.
    pub connected: bool,
    /// Owned slot ranges ("0-5460", "5461").
    pub slots: Vec<String>,
    /// Migrating or importing slots (`[5461->-<id>]`, `[5461-<-<id>]`).
    pub open_slots: Vec<String>,
}

impl ClusterNode {
    pub fn has_flag(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }
    pub fn is_primary(&self) -> bool {
        self.has_flag("master")
    }
    pub fn is_replica(&self) -> bool {
        self.has_flag("slave")
    }
    /// Flagged `fail` or `fail?`.
    pub fn failing(&self) -> bool {
        self.has_flag("fail") || self.has_flag("fail?")
    }
    pub fn is_myself(&self) -> bool {
        self.has_flag("myself")
    }
    pub fn slot_count(&self) -> u32 {
        count_slots(&self.slots)
    }
    pub fn owns(&self, slot: u16) -> bool {
        self.slots
            .iter()
            .filter_map(|r| parse_range(r))
            .any(|(a, b)| (a..=b).contains(&slot))
    }
}

/// Parses `CLUSTER NODES` output; lines that do not parse are skipped.
pub fn parse_cluster_nodes(text: &str) -> Vec<ClusterNode> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 8 || fields[0].len() != 40 {
                return None;
            }
            let address = fields[1].split('@').next().unwrap_or_default();
            let ip = address
                .rsplit_once(':')
                .map(|(ip, _)| ip)
                .unwrap_or_default();
            let (open_slots, slots): (Vec<String>, Vec<String>) = fields[8..]
                .iter()
                .map(|s| s.to_string())
                .partition(|s| s.starts_with('['));
            Some(ClusterNode {
                id: fields[0].to_string(),
                ip: ip.to_string(),
                flags: fields[2].split(',').map(str::to_string).collect(),
                primary_id: (fields[3] != "-").then(|| fields[3].to_string()),
                connected: fields[7] == "connected",
                slots,
                open_slots,
            })
        })
        .collect()
}

/// Slots per primary that owns any, by node id.
pub fn slots_by_primary(view: &[ClusterNode]) -> BTreeMap<String, u32> {
    view.iter()
        .filter(|n| n.is_primary() && n.slot_count() > 0)
        .map(|n| (n.id.clone(), n.slot_count()))
        .collect()
}

/// Open slots in any member's view, as `<member>: [<slot>->-<id>]`.
pub fn open_slots(views: &BTreeMap<String, Vec<ClusterNode>>) -> Vec<String> {
    views
        .iter()
        .flat_map(|(member, view)| {
            view.iter()
                .flat_map(|n| n.open_slots.iter())
                .map(move |s| format!("{member}: {s}"))
        })
        .collect()
}

/// Whether Valkey has the shape asked for, as every member sees it: `shards` primaries with
/// slots, split evenly (each owns 16384 / shards, rounded down or up), each the only primary
/// of its shard's members with `replicas` replicas of it, all of its own shard, linked
/// (`master_link_status:up`), none flagged failing, and no open slot anywhere.
pub fn shape(access: &Access, shards: u32, replicas: u32) -> Result<Progress<()>> {
    let views = access.views()?;
    let open = open_slots(&views);
    if !open.is_empty() {
        return Ok(Err(format!("open slots: {open:?}")));
    }
    let (low, high) = (SLOTS / shards, SLOTS.div_ceil(shards));
    for (viewer, view) in &views {
        let counts = slots_by_primary(view);
        if counts.len() != shards as usize || !counts.values().all(|c| (low..=high).contains(c)) {
            return Ok(Err(format!(
                "{viewer} sees primaries with slots {counts:?}, not {shards} with {low}-{high} each"
            )));
        }
        if let Some(n) = view.iter().find(|n| n.failing()) {
            return Ok(Err(format!(
                "{viewer} flags {} ({}) {:?}",
                n.ip, n.id, n.flags
            )));
        }
        for shard in 0..shards {
            let members: Vec<&MemberAddr> =
                access.members.iter().filter(|m| m.shard == shard).collect();
            if members.len() != 1 + replicas as usize {
                return Ok(Err(format!("shard {shard} has {} members", members.len())));
            }
            let mut lines = Vec::new();
            for m in &members {
                match view.iter().find(|n| n.ip == m.ip) {
                    Some(line) => lines.push((m, line)),
                    None => {
                        return Ok(Err(format!("{viewer} does not list {} ({})", m.name, m.ip)));
                    }
                }
            }
            let primaries: Vec<_> = lines.iter().filter(|(_, n)| n.is_primary()).collect();
            let [(_, primary)] = primaries.as_slice() else {
                return Ok(Err(format!(
                    "{viewer}: shard {shard} has primaries {:?}",
                    primaries.iter().map(|(m, _)| &m.name).collect::<Vec<_>>()
                )));
            };
            if primary.slot_count() == 0 {
                return Ok(Err(format!(
                    "{viewer}: shard {shard}'s primary owns no slot"
                )));
            }
            for (m, line) in lines.iter().filter(|(_, n)| !n.is_primary()) {
                if line.primary_id.as_deref() != Some(primary.id.as_str()) {
                    return Ok(Err(format!(
                        "{viewer}: {} follows {:?}, not its shard's primary {}",
                        m.name, line.primary_id, primary.id
                    )));
                }
            }
        }
    }
    for m in &access.members {
        let role = access.cli(&m.ip, &["ROLE"]);
        if role.starts_with("slave") {
            let info = access.cli(&m.ip, &["INFO", "replication"]);
            if !info.contains("master_link_status:up") {
                return Ok(Err(format!(
                    "{}'s link to its primary is not up: {info}",
                    m.name
                )));
            }
        }
    }
    Ok(Ok(()))
}

/// Slot numbers open (migrating or importing) in any of `views`.
pub fn open_slot_numbers(views: &BTreeMap<String, Vec<ClusterNode>>) -> BTreeSet<u16> {
    views
        .values()
        .flatten()
        .flat_map(|n| n.open_slots.iter())
        .filter_map(|s| s.trim_start_matches('[').split('-').next()?.parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODES: &str = "\
07c37dfeb235213a872192d90877d0cd55635b91 127.100.0.7:6379@16379 slave e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected
67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.100.0.2:6379@16379 master - 0 1426238316232 2 connected 5461-10922 [10923->-292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f]
292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f 127.100.0.3:6379@16379 master - 0 1426238318243 3 connected 10923-16383 [10923-<-67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1]
6ec23923021cf3ffec47632106199cb7f496ce01 127.100.0.5:6379@16379 slave 67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 0 1426238316232 5 disconnected
824fe116063bc5fcf9f4ffd895bc17aee7731ac3 127.100.0.6:6379@16379 master,fail - 1426238317741 1426238316000 6 disconnected
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.100.0.1:6379@16379,host1 myself,master - 0 0 1 connected 0-5460 16000
";

    #[test]
    fn cluster_nodes_lines_parse() {
        let nodes = parse_cluster_nodes(NODES);
        assert_eq!(nodes.len(), 6);
        let me = nodes.iter().find(|n| n.is_myself()).unwrap();
        assert_eq!(me.ip, "127.100.0.1");
        assert!(me.is_primary());
        assert_eq!(me.slots, ["0-5460", "16000"]);
        assert_eq!(me.slot_count(), 5462);
        assert!(me.owns(16000) && me.owns(0) && !me.owns(5461));
        let replica = &nodes[0];
        assert!(replica.is_replica() && replica.connected);
        assert_eq!(
            replica.primary_id.as_deref(),
            Some("e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca")
        );
        assert_eq!(nodes[1].open_slots.len(), 1);
        assert_eq!(nodes[1].slot_count(), 5462);
        assert!(!nodes[3].connected);
        assert!(nodes[4].failing());
        assert_eq!(nodes[4].slot_count(), 0);
        let views = BTreeMap::from([("a".to_string(), nodes.clone())]);
        assert_eq!(open_slots(&views).len(), 2);
        assert_eq!(open_slot_numbers(&views), BTreeSet::from([10923]));
        let by_primary = slots_by_primary(&nodes);
        assert_eq!(by_primary.len(), 3);
        assert_eq!(by_primary.values().sum::<u32>(), 5462 + 5462 + 5461);
        assert!(parse_cluster_nodes("ERR This instance has cluster support disabled").is_empty());
    }
}
