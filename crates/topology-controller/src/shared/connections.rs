//! A reconcile's connections to its members, closed together in one place, and the small
//! questions every topology asks a member: its vital signs (for the pulse) and its live
//! directives.

use futures::future::join_all;

use crd_types::live_config::{Version, live_on};

use crate::shared::commands::{ClusterNode, ErrorKind, Server, StepError, ValkeyError};
use crate::shared::member_facts::LiveConfig;
use crate::shared::vitals::Vitals;

/// A member's [`Vitals`]: CLUSTER INFO (a cluster member's only) and INFO replication, small
/// replies.
pub async fn vitals<V: ClusterNode>(conn: &V, cluster_member: bool) -> Result<Vitals, ValkeyError> {
    let cluster_info = match cluster_member {
        true => Some(conn.cluster_info().await?),
        false => None,
    };
    let replication = conn.info(&["replication"]).await?;
    Vitals::parse(cluster_info.as_deref(), &replication).map_err(unreadable)
}

/// `CONFIG GET` of every directive that is live on `version` (INFO server's), in one round
/// trip; `None`, asking nothing, when the version is unknown. Shared by both topologies.
pub async fn live_config<V: Server>(
    conn: &V,
    version: Option<&str>,
) -> Result<Option<LiveConfig>, ValkeyError> {
    let Some(version) = version.and_then(Version::parse) else {
        return Ok(None);
    };
    let names: Vec<&str> = live_on(version).map(|d| d.name).collect();
    let values = conn.config_get(&names).await?.into_iter().collect();
    Ok(Some(LiveConfig { version, values }))
}

/// The connections of one reconcile, by member name. [`Connections::close`] is the one place
/// they are closed, whatever the reconcile did with them.
pub struct Connections<V> {
    by_member: Vec<(String, V)>,
}

impl<V> Default for Connections<V> {
    fn default() -> Self {
        Self {
            by_member: Vec::new(),
        }
    }
}

impl<V: Server> Connections<V> {
    pub fn insert(&mut self, member: impl Into<String>, conn: V) {
        self.by_member.push((member.into(), conn));
    }

    /// The connection to `member`, or why the step cannot use it.
    pub fn get(&self, member: &str) -> Result<&V, StepError> {
        self.find(member)
            .ok_or_else(|| StepError::NotAnswering(member.to_string()))
    }

    pub fn find(&self, member: &str) -> Option<&V> {
        self.by_member
            .iter()
            .find(|(name, _)| name == member)
            .map(|(_, conn)| conn)
    }

    pub fn len(&self) -> usize {
        self.by_member.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_member.is_empty()
    }

    /// Closes every connection, all at once.
    pub async fn close(self) {
        join_all(self.by_member.into_iter().map(|(_, conn)| conn.close())).await;
    }
}

/// A reply that does not parse, as a protocol error.
pub fn unreadable(e: impl std::fmt::Display) -> ValkeyError {
    ValkeyError::new(ErrorKind::Protocol, e.to_string())
}
