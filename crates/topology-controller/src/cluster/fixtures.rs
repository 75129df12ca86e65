//! Test support (layer 1): `CLUSTER NODES` replies captured from valkey-server 8.0.1, kept as
//! text in `tests/fixtures/`: six local nodes, cluster-node-timeout 2000, created with
//! `valkey-cli --cluster create ... --cluster-replicas 1`.

use crate::cluster::cluster_nodes::{ClusterNode, ClusterView};

// Node ids of the fixture cluster, by port.
pub const N7101: &str = "86f261798545f334b6d64fb6b030c18fbb563a41";
pub const N7102: &str = "70b7029533196506e197efe68e2d788999f52769";
pub const N7103: &str = "6a478734fee3c2350e99992dd1ed7b51cc067b15";
pub const N7104: &str = "c0bf29f0142a7be7629267bacffb99baf2a9d636";
pub const N7105: &str = "867bbae3d825c22fd8c4cd80482091b829241158";
pub const N7106: &str = "d02f99ceaf6bbdbf02a3f13ddbe8bd5cc8a5feca";

macro_rules! fixture {
    ($file:literal) => {
        include_str!(concat!("../../tests/fixtures/", $file, ".txt"))
    };
}

/// Just after `valkey-cli --cluster create` with 3 primaries (7101-7103) and a replica each
/// (7104-7106), seen from 7101.
pub const HEALTHY_7101: &str = fixture!("healthy_7101");

/// Slot 100 moved from 7101 to 7102 and 7101 announcing a hostname, seen from 7101.
pub const MOVED_7101: &str = fixture!("moved_7101");
/// The same, seen from 7102.
pub const MOVED_7102: &str = fixture!("moved_7102");
/// The same, seen from 7103.
pub const MOVED_7103: &str = fixture!("moved_7103");
/// The same, seen from 7104.
pub const MOVED_7104: &str = fixture!("moved_7104");
/// The same, seen from 7105.
pub const MOVED_7105: &str = fixture!("moved_7105");
/// The same, seen from 7106.
pub const MOVED_7106: &str = fixture!("moved_7106");

/// Slots 100 and 101 being migrated from 7101 to 7102 and a MEET to 127.0.0.1:7199 (nothing
/// listens there) still in handshake, seen from 7101.
pub const OPENING_7101: &str = fixture!("opening_7101");
/// The same, seen from 7102, which imports slot 100.
pub const OPENING_7102: &str = fixture!("opening_7102");

/// 7106 stopped, seen from 7101 after the node timeout, before the others agreed it failed.
/// Captured a moment earlier; `fail?` added by hand to 7106's line.
pub const SUSPECTING_7101: &str = fixture!("suspecting_7101");

/// 7101 stopped and its replica 7104 took over; 7106 failed too, and 7105 came back with an
/// empty data directory, so the others see a new id at its address and its old entry loses
/// the address (`noaddr`). Seen from 7102.
pub const FAILED_OVER_7102: &str = fixture!("failed_over_7102");

/// 7101 restarted after that, now a replica of 7104. Seen from 7101.
pub const REJOINED_7101: &str = fixture!("rejoined_7101");

pub fn view(text: &str) -> ClusterView {
    ClusterView::parse(text).unwrap_or_else(|e| panic!("{e}"))
}

pub fn ids<'a>(nodes: impl Iterator<Item = &'a ClusterNode>) -> Vec<&'a str> {
    nodes.map(|node| node.id.as_str()).collect()
}
