//! topology-controller's building blocks: parsers for what Valkey reports, slot planning, the
//! member ValkeyNodes and the step planner. No I/O here, so every decision is unit-tested
//! from fixtures.

pub mod agreement;
pub mod auth;
pub mod cluster_nodes;
pub mod events;
#[cfg(test)]
mod fixtures;
pub mod info;
pub mod members;
pub mod model;
pub mod plan;
pub mod slots;
pub mod status;
