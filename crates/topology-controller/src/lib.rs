//! topology-controller's building blocks, in layers; each module uses only those of the
//! layers below it. No I/O here, so every decision is unit-tested from fixtures.
//!
//! 1. parsers: [`cluster_nodes`], [`agreement`], [`info`], [`slots`];
//! 2. model: [`model`] (the spec read once into a `Shape`, the members as observed);
//! 3. object builders: [`members`] (the member ValkeyNodes), [`auth`] (the password Secrets);
//! 4. planner: [`plan`] (the next step, its rules, the password guard);
//! 5. reports: [`survey`], [`status`], [`member_status`], [`events`].

pub mod agreement;
pub mod auth;
pub mod cluster_nodes;
pub mod events;
#[cfg(test)]
mod fixtures;
pub mod info;
pub mod member_status;
pub mod members;
pub mod model;
pub mod plan;
#[cfg(test)]
mod sim;
pub mod slots;
pub mod status;
pub mod survey;
