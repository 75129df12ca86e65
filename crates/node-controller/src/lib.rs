//! node-controller's building blocks: pure functions from a ValkeyNode (and the live objects
//! it owns) to the objects and status to apply. No API calls here, so every decision is
//! unit-tested from fixtures.
//!
//! A reconcile is four stages; the binary does the I/O around the two pure ones here:
//! fetch ([`live::Live`]) -> [`plan::plan`] -> apply ([`report::Applied`]) ->
//! [`report::report`] -> publish. The builders behind the plan: [`config`], [`configmap`],
//! [`pvc`], [`workload`], [`revision`] (the roll gate); behind the report: [`status`] and
//! [`events`].

pub mod config;
pub mod configmap;
pub mod events;
pub mod live;
pub mod meta;
pub mod plan;
pub mod pvc;
pub mod report;
pub mod revision;
pub mod status;
#[cfg(test)]
mod test_support;
pub mod workload;
