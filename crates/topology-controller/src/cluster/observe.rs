//! Asking members (layer 6): what one member's Valkey says about the cluster, over the
//! [`ClusterNode`] seam, and the connections of one reconcile, closed together in one place.

use crate::cluster::cluster_nodes::ClusterView;
use crate::shared::commands::{ClusterNode, ValkeyError};
use crate::shared::connections::{live_config, unreadable};
use crate::shared::info::{ReplicationInfo, cluster_state_ok, server_version};
use crd_types::template::REPLICATION_USER;

use crate::cluster::model::Reply;

use crate::cluster::slot_jobs::{self, SlotJob};

/// One member's answer: its view, its replication and its version.
#[derive(Clone, Debug)]
pub struct Answer {
    pub reply: Reply,
    /// From INFO server; `None` when it cannot be read.
    pub version: Option<String>,
}

/// Asks one member: CLUSTER NODES, INFO replication and server (one round trip), CLUSTER
/// SHARDS (older servers lack it; then shard ids are not checked), CLUSTER INFO, CONFIG
/// GET of the live directives, its `replication` user, and on 9.0+ its atomic slot migration
/// jobs.
pub async fn ask<V: ClusterNode>(conn: &V) -> Result<Answer, ValkeyError> {
    let view = ClusterView::parse(&conn.cluster_nodes().await?).map_err(unreadable)?;
    // Both sections in one reply: the parsers skip what is not theirs.
    let info = conn.info(&["replication", "server"]).await?;
    let replication = ReplicationInfo::parse(&info).map_err(unreadable)?;
    let version = server_version(&info).ok();
    let shard_groups = conn.cluster_shards().await.ok();
    let state_ok = cluster_state_ok(&conn.cluster_info().await?).map_err(unreadable)?;
    let live_config = live_config(conn, version.as_deref()).await?;
    // Not knowing it is no reason to call the member silent either.
    let replication_user = conn.acl_user(REPLICATION_USER).await.ok();
    let slot_jobs = match live_config.as_ref().map(|c| c.version) {
        // Not knowing them is no reason to call the member silent.
        Some(v) if v >= slot_jobs::SINCE => conn
            .slot_migrations()
            .await
            .ok()
            .map(|jobs| jobs.iter().filter_map(SlotJob::parse).collect()),
        _ => None,
    };
    Ok(Answer {
        reply: Reply {
            view,
            replication,
            shard_groups,
            cluster_state_ok: Some(state_ok),
            live_config,
            slot_jobs,
            replication_user,
        },
        version,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::fake::FakeCluster;
    use crate::shared::commands::StepError;
    use crate::shared::connections::{Connections, vitals};
    use crd_types::live_config::Version;

    #[tokio::test]
    async fn a_member_answers_with_its_view_replication_and_version() {
        let (cluster, ids) = FakeCluster::formed(2, 1);
        let answer = ask(&cluster.conn(&ids[1])).await.unwrap();
        assert_eq!(answer.reply.view.myself().id, ids[1]);
        assert_eq!(answer.reply.replication.replicas.len(), 1);
        assert_eq!(answer.reply.cluster_state_ok, Some(true));
        assert_eq!(answer.reply.shard_groups.as_ref().map(Vec::len), Some(2));
        assert_eq!(answer.version.as_deref(), Some("8.0.1"));
        let live = answer.reply.live_config.unwrap();
        assert_eq!(live.version, Version::new(8, 0));
        assert_eq!(live.values["maxmemory"], "0");
        assert!(
            !live.values.contains_key("io-threads"),
            "live only from 9.1"
        );
    }

    #[tokio::test]
    async fn vitals_change_when_a_replica_is_promoted() {
        let (cluster, ids) = FakeCluster::formed(2, 1);
        let nodes = cluster.conn(&ids[0]).cluster_nodes().await.unwrap();
        let view = ClusterView::parse(&nodes).unwrap();
        let replica = view.replicas_of(&ids[0]).next().unwrap().id.clone();
        let before = vitals(&cluster.conn(&replica), true).await.unwrap();
        let cluster_vitals = before.cluster.clone().unwrap();
        assert!(cluster_vitals.state_ok);
        assert_eq!((cluster_vitals.known_nodes, cluster_vitals.size), (4, 2));
        assert_eq!(before.role, crd_types::node::Role::Replica);
        assert_eq!(before, vitals(&cluster.conn(&replica), true).await.unwrap());
        cluster.conn(&replica).failover().await.unwrap();
        let after = vitals(&cluster.conn(&replica), true).await.unwrap();
        assert_eq!(after.role, crd_types::node::Role::Primary);
        assert_ne!(before, after);
    }

    #[tokio::test]
    async fn connections_are_closed_together() {
        let (cluster, ids) = FakeCluster::formed(2, 0);
        let mut conns = Connections::default();
        conns.insert("a", cluster.conn(&ids[0]));
        conns.insert("b", cluster.conn(&ids[1]));
        assert_eq!(cluster.open_connections(), 2);
        assert!(matches!(conns.get("c"), Err(StepError::NotAnswering(m)) if m == "c"));
        conns.close().await;
        assert_eq!(cluster.open_connections(), 0);
    }
}
