//! The valkey.rs/v1alpha1 API shared by every valkey-operator controller.
//!
//! - [`ValkeyNode`]: one Valkey server or sentinel process in one pod.
//! - [`ValkeyCluster`]: a sharded cluster-mode topology built from ValkeyNodes.
//! - [`ValkeyReplication`]: a primary with replicas watched by Sentinel, built from ValkeyNodes.
//!
//! Status is split into parts, each written by exactly one controller under its own
//! server-side-apply field manager (see [`FieldManager`] and docs/architecture.md).

pub mod cluster;
pub mod conditions;
pub mod config;
pub mod crds;
pub mod live_config;
pub mod monitoring;
pub mod names;
pub mod network;
pub mod node;
pub mod pod_template;
pub mod quantity;
pub mod replication;
pub mod rotation;
pub mod template;
pub mod topology;
pub mod users;
pub mod versions;

pub use cluster::{ValkeyCluster, ValkeyClusterSpec, ValkeyClusterStatus};
pub use names::FieldManager;
pub use node::{ValkeyNode, ValkeyNodeSpec, ValkeyNodeStatus};
pub use replication::{ValkeyReplication, ValkeyReplicationSpec, ValkeyReplicationStatus};

/// The API group of every valkey-operator custom resource.
pub const GROUP: &str = "valkey.rs";
/// The only served (and stored) API version.
pub const VERSION: &str = "v1alpha1";
