use super::*;
use crate::cluster::cluster_nodes::ClusterView;
use crate::shared::commands::{ClusterNode, Server};
use crate::shared::info::ReplicationInfo;

#[tokio::test]
async fn it_speaks_the_formats_the_parsers_read() {
    let (cluster, primaries) = FakeCluster::formed(3, 1);
    let conn = cluster.conn(&primaries[0]);
    let view = ClusterView::parse(&conn.cluster_nodes().await.unwrap()).unwrap();
    assert_eq!(view.nodes().len(), 6);
    assert_eq!(view.assigned_slot_count(), 16384);
    assert_eq!(view.myself().id, primaries[0]);
    let info = ReplicationInfo::parse(&conn.info(&["replication"]).await.unwrap()).unwrap();
    assert_eq!(info.replicas.len(), 1);
    assert_eq!(info.replicas[0].state, "online");
    conn.close().await;
    assert_eq!(cluster.open_connections(), 0);
}

#[tokio::test]
async fn setslot_reaches_only_online_replicas() {
    let (cluster, primaries) = FakeCluster::formed(2, 1);
    let (a, b) = (&primaries[0], &primaries[1]);
    let replica_of_b = node_id(110);
    cluster.begin_full_sync(&replica_of_b);
    let slot = cluster.slots_of(a)[0];
    let target = cluster.conn(b);
    target
        .set_slot(slot, SlotState::Importing(a))
        .await
        .unwrap();
    // The replica is syncing: it did not get the marker now...
    assert!(cluster.markers(&replica_of_b).0.is_empty());
    // ...but its snapshot, taken when the sync began, had none either; a new sync would.
    cluster.finish_full_sync(&replica_of_b);
    cluster.begin_full_sync(&replica_of_b);
    target.set_slot(slot, SlotState::Node(b)).await.unwrap();
    cluster.finish_full_sync(&replica_of_b);
    // Loaded after the move finished: the stale marker of valkey-io/valkey#998.
    assert_eq!(cluster.markers(&replica_of_b).0.get(&slot), Some(a));
    // A replica refuses SETSLOT from a client.
    let err = cluster
        .conn(&replica_of_b)
        .set_slot(slot, SlotState::Stable)
        .await
        .unwrap_err();
    assert!(err.says("only with masters"), "{err}");
    // Re-sent on its primary while it is online, NODE clears it.
    target.set_slot(slot, SlotState::Node(b)).await.unwrap();
    assert!(cluster.markers(&replica_of_b).0.is_empty());
}
