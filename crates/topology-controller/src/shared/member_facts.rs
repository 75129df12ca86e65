//! What every topology kind knows of a member besides its role: where its Valkey is reached,
//! its template revisions, the live directives it runs, and a requested switchover to it.

use std::collections::BTreeMap;

use crd_types::live_config::Version;

/// `spec.switchover`: the member that is to become its shard's primary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SwitchoverRequest {
    /// Identifies the request; each id is done once.
    pub id: String,
    /// The member's name.
    pub target: String,
}

/// Where a member's Valkey is reached and what it announces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Address {
    pub ip: String,
    pub port: u16,
    pub bus_port: u16,
}

/// Template revisions of a member, from its ValkeyNode.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Revisions {
    /// The revision its current spec renders to (`status.workload.desiredRevision`).
    pub desired: Option<String>,
    /// The revision its pod runs (`status.workload.revision`).
    pub running: Option<String>,
    /// The roll gate (`spec.allowedRevision`).
    pub allowed: Option<String>,
    /// node-controller has rendered the current spec (its observedGeneration is the node's
    /// generation), so `desired` is up to date.
    pub observed: bool,
}

/// The live directives a member runs, as `CONFIG GET` reports them, and its version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveConfig {
    pub version: Version,
    pub values: BTreeMap<String, String>,
}
