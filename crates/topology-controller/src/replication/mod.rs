//! ValkeyReplication: a primary, its replicas and the sentinels that watch them, built from
//! ValkeyNodes on per-node Services. Sentinel elects primaries; this library decides the
//! operator's part (attaching replicas, configuring sentinels), reads status, and carries
//! out steps over the [`crate::shared::commands::Server`] and [`crate::shared::commands::SentinelNode`] seams. It shares the cluster's layers that
//! know no slots: the roll ([`crate::shared::roll`]), the password guard
//! ([`crate::shared::guard`]), the Secrets ([`crate::shared::auth`]) and the INFO parser.
//!
//! - [`model`]: the spec read once into a `Group`; data nodes and sentinels as observed;
//! - [`members`]: the member ValkeyNodes; [`services`]: the client Services and the pods'
//!   role label;
//! - [`observe`]: asking a data node and a sentinel;
//! - [`survey`]: who is primary, and what keeps the group from being healthy;
//! - [`plan`]: the next step;
//! - [`status`], [`events`]: what status and Events say;
//! - [`execute`]: carrying out a step.

pub mod events;
pub mod execute;
#[cfg(test)]
pub mod fake;
pub mod members;
pub mod model;
pub mod observe;
pub mod plan;
pub mod services;
#[cfg(test)]
pub mod sim;
pub mod status;
pub mod survey;

/// The client port of every data node: what sentinels and replicas are told.
pub const PORT: u16 = crd_types::names::ports::VALKEY as u16;
/// The port of every sentinel.
pub const SENTINEL_PORT: u16 = crd_types::names::ports::SENTINEL as u16;
