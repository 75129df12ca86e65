//! topology-controller's building blocks: what it decides, with no I/O. What talks to Valkey
//! is generic over the role-sized seams of [`shared::commands`] (fred implements them in the
//! binary), so every decision and every command sequence is unit-tested, from fixtures and
//! against in-memory fakes.
//!
//! - [`shared`]: what every topology kind uses: members' facts, connections, the roll and the
//!   password guard, live directives and the target version, passwords, users, TLS and the CA,
//!   NetworkPolicy, disruption budgets, member status;
//! - [`cluster`]: ValkeyCluster's own: CLUSTER NODES, slots and their migration, its planner,
//!   survey, status and executor;
//! - [`replication`]: ValkeyReplication's own: Sentinel, its planner, survey, status and
//!   executor.
//!
//! Within each, modules are in layers, each using only those below: parsers, model, object
//! builders, planner, reports, and talking to members. The binary's half (the API server,
//! connections) sits in `src/driver/` in the same three folders.

pub mod cluster;
pub mod replication;
pub mod shared;
