//! node-controller's building blocks: pure functions from a ValkeyNode (and the live objects
//! it owns) to the objects and status to apply. No API calls here, so every decision is
//! unit-tested from fixtures.

pub mod config;
pub mod configmap;
pub mod meta;
pub mod pvc;
pub mod revision;
pub mod status;
pub mod workload;
