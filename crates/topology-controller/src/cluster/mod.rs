//! ValkeyCluster: sharded cluster mode. Slots, their planning and migration, CLUSTER NODES.

pub mod agreement;
pub mod atomic;
pub mod cluster_nodes;
pub mod events;
pub mod execute;
#[cfg(test)]
pub mod fake;
#[cfg(test)]
mod fixtures;
pub mod member_status;
pub mod members;
pub mod migrate;
pub mod model;
pub mod observe;
pub mod plan;
#[cfg(test)]
pub(crate) mod sim;
pub mod slot_jobs;
pub mod slots;
pub mod status;
pub mod survey;
