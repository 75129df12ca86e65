//! topology-controller's building blocks, in layers; each module uses only those of the
//! layers below it. No I/O here: what talks to Valkey is generic over the role-sized seams
//! of [`commands`] (fred implements them in the binary), so every decision and every command
//! sequence is unit-tested, from fixtures and against the in-memory cluster of `fake`.
//!
//! 1. parsers: [`cluster_nodes`], [`agreement`], [`info`], [`vitals`], [`slots`], [`slot_jobs`],
//!    [`acl`];
//! 2. model: [`model`] (the spec read once into a `Shape`, the members as observed);
//! 3. object builders: [`members`] (the member ValkeyNodes), [`auth`] (the password Secrets);
//! 4. planner: [`plan`] (the next step, its rules, the password guard);
//! 5. reports: [`survey`], [`status`], [`member_status`], [`events`];
//! 6. talking to members over [`commands`]: [`observe`] (asking them), [`migrate`] (moving
//!    slots the classic way), [`atomic`] (moving them atomically on 9.x), [`execute`]
//!    (carrying out a step).
//!
//! [`replication`] is the ValkeyReplication's planner, status and executor, on the layers
//! above that know no slots (`model`'s revisions, `auth`, `plan::roll`, `plan::guard`, `info`).

pub mod acl;
pub mod agreement;
pub mod atomic;
pub mod auth;
pub mod ca_replacement;
pub mod cluster_nodes;
pub mod commands;
pub mod default_password;
pub mod disruption;
pub mod events;
pub mod execute;
#[cfg(test)]
pub mod fake;
#[cfg(test)]
mod fixtures;
pub mod info;
pub mod issuer;
pub mod member_status;
pub mod members;
pub mod migrate;
pub mod model;
pub mod network;
pub mod observe;
pub mod operator_password;
pub mod owned;
pub mod plan;
pub mod replication;
#[cfg(test)]
mod sim;
pub mod slot_jobs;
pub mod slots;
pub mod status;
pub mod storage;
pub mod survey;
pub mod tls;
pub mod users;
pub mod vitals;
