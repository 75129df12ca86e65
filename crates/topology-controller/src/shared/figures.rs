//! What topology-controller's /metrics says of each topology, read from its spec and
//! status at scrape time: a fixed set of series per topology (labels `namespace`, `kind`,
//! `name`, and the few listed in [`SERIES`]), so the count grows with topologies only, and
//! a deleted topology's series go with it.
//!
//! One series is not in the spec or status: when the certificates a TLS topology's members
//! serve expire ([`certificate_figure`]), recorded by its reconciles as they read the TLS
//! Secrets ([`crate::shared::cert_expiry`]); it goes once the topology is gone or its TLS
//! cannot be used.

use crd_types::cluster::Phase;
use crd_types::names::annotations;
use crd_types::node::{Role, StorageHeadroom};
use crd_types::rotation::{CaReplacement, CaReplacementPhase, PasswordRotation};
use crd_types::{ValkeyCluster, ValkeyReplication};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::shared::cert_expiry::Expiry;

/// One series of one topology: its metric, the values of that metric's own labels (in
/// [`SERIES`]' order), and its value.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    pub metric: &'static str,
    pub labels: Vec<String>,
    pub value: f64,
}

/// Every metric: name, help, and its labels besides `namespace`, `kind` and `name`.
pub const SERIES: &[(&str, &str, &[&str])] = &[
    (
        "valkey_operator_topology_ready",
        "1 while the topology's Ready condition is True.",
        &[],
    ),
    (
        "valkey_operator_topology_last_ready_timestamp_seconds",
        "When the topology was last Ready (Unix seconds): the scrape's time while it is, \
         else when it stopped being Ready. time() minus it: seconds without Ready.",
        &[],
    ),
    (
        "valkey_operator_topology_phase",
        "1 for the topology's current phase (Creating, Ready, Scaling, Updating: a roll, \
         Degraded, Failed, Paused).",
        &["phase"],
    ),
    (
        "valkey_operator_topology_paused",
        "1 while the valkey.rs/paused annotation stops every step.",
        &[],
    ),
    (
        "valkey_operator_topology_spec_observed",
        "1 when the status reflects the spec's current generation.",
        &[],
    ),
    (
        "valkey_operator_topology_members_desired",
        "Members the spec asks for, per role (data: primaries and replicas; sentinel).",
        &["role"],
    ),
    (
        "valkey_operator_topology_members",
        "Members in the status, per role.",
        &["role"],
    ),
    (
        "valkey_operator_topology_members_ready",
        "Members whose pod is ready, per role.",
        &["role"],
    ),
    (
        "valkey_operator_topology_shards",
        "Shards the spec asks for (a ValkeyReplication is one).",
        &[],
    ),
    (
        "valkey_operator_topology_shards_ready",
        "Shards serving: a ValkeyCluster's ready shards; a ValkeyReplication's, 1 while \
         its primary is ready.",
        &[],
    ),
    (
        "valkey_operator_topology_primaries",
        "Members that say they are a primary (more than one per shard: a split).",
        &[],
    ),
    (
        "valkey_operator_topology_replicas_linked",
        "A ValkeyReplication's replicas whose link to the primary is up.",
        &[],
    ),
    (
        "valkey_operator_topology_password_rotation_progress",
        "While a password rotation lasts, the share of members that take the new password \
         (0 to 1), per user.",
        &["user"],
    ),
    (
        "valkey_operator_topology_ca_replacement",
        "1 while the operator's CA is replaced, with its phase (Trusting, Switching).",
        &["phase"],
    ),
    (
        "valkey_operator_topology_volume_min_available_bytes",
        "Free bytes on the fullest member's volume (members with autoResize).",
        &[],
    ),
    (
        "valkey_operator_topology_volume_max_used_percent",
        "Used share of the fullest member's volume, in percent.",
        &[],
    ),
    (
        CERTIFICATE_NOT_AFTER,
        "When the first of the certificates the topology's members serve expires (Unix \
         seconds), the operator's CA included when it keeps one, as its last reconcile read \
         them. managed=\"true\": the operator issued them and renews each 30 days before \
         it expires; \"false\": the Secret the user names, which the operator cannot renew.",
        &["managed"],
    ),
];

/// The certificates' expiry, in [`SERIES`].
pub const CERTIFICATE_NOT_AFTER: &str = "valkey_operator_certificate_not_after_timestamp_seconds";

/// A TLS topology's certificate figure, from what its reconcile recorded.
pub fn certificate_figure(expiry: &Expiry) -> Figure {
    Figure {
        metric: CERTIFICATE_NOT_AFTER,
        labels: vec![expiry.managed.to_string()],
        value: expiry.not_after as f64,
    }
}

/// The [`Common`] parts of either kind's status (the fields have the same names).
macro_rules! common_of {
    ($status:expr) => {
        Common {
            conditions: &$status.conditions,
            phase: $status.phase,
            observed_generation: $status.observed_generation,
            storage: $status.storage.as_ref(),
            rotations: &$status.password_rotations,
            ca_replacement: $status.ca_replacement.as_ref(),
        }
    };
}

/// A ValkeyCluster's figures at `now`.
pub fn cluster_figures(cluster: &ValkeyCluster, now: Timestamp) -> Vec<Figure> {
    let spec = &cluster.spec;
    let status = cluster.status.clone().unwrap_or_default();
    let members: Vec<_> = status.shards.iter().flat_map(|s| &s.members).collect();
    let common = common_of!(status);
    let mut figures = common.figures(cluster, now);
    let data_desired = spec.shards * (1 + spec.replicas_per_shard);
    figures.extend(members_by_role(
        "data",
        data_desired,
        members.len(),
        members.iter().filter(|m| m.ready).count(),
    ));
    figures.push(plain(
        "valkey_operator_topology_shards",
        f64::from(spec.shards),
    ));
    figures.push(plain(
        "valkey_operator_topology_shards_ready",
        f64::from(status.ready_shards),
    ));
    let primaries = members
        .iter()
        .filter(|m| m.role == Some(Role::Primary))
        .count();
    figures.push(plain(
        "valkey_operator_topology_primaries",
        primaries as f64,
    ));
    figures
}

/// A ValkeyReplication's figures at `now`.
pub fn replication_figures(group: &ValkeyReplication, now: Timestamp) -> Vec<Figure> {
    let spec = &group.spec;
    let status = group.status.clone().unwrap_or_default();
    let common = common_of!(status);
    let mut figures = common.figures(group, now);
    let (sentinels, data): (Vec<_>, Vec<_>) = status
        .members
        .iter()
        .partition(|m| m.role == Some(Role::Sentinel));
    let ready = |members: &[&crd_types::replication::ReplicationMemberStatus]| {
        members.iter().filter(|m| m.ready).count()
    };
    figures.extend(members_by_role(
        "data",
        spec.replicas,
        data.len(),
        ready(&data),
    ));
    figures.extend(members_by_role(
        "sentinel",
        spec.sentinel.replicas,
        sentinels.len(),
        ready(&sentinels),
    ));
    figures.push(plain("valkey_operator_topology_shards", 1.0));
    let primary_ready = data
        .iter()
        .any(|m| m.role == Some(Role::Primary) && m.ready);
    figures.push(plain(
        "valkey_operator_topology_shards_ready",
        f64::from(u8::from(primary_ready)),
    ));
    let primaries = data
        .iter()
        .filter(|m| m.role == Some(Role::Primary))
        .count();
    figures.push(plain(
        "valkey_operator_topology_primaries",
        primaries as f64,
    ));
    let linked = data
        .iter()
        .filter(|m| m.role == Some(Role::Replica) && m.link_up == Some(true))
        .count();
    figures.push(plain(
        "valkey_operator_topology_replicas_linked",
        linked as f64,
    ));
    figures
}

/// The status parts both kinds share.
struct Common<'a> {
    conditions: &'a [Condition],
    phase: Option<Phase>,
    observed_generation: Option<i64>,
    storage: Option<&'a StorageHeadroom>,
    rotations: &'a [PasswordRotation],
    ca_replacement: Option<&'a CaReplacement>,
}

impl Common<'_> {
    fn figures(&self, topology: &impl ResourceExt, now: Timestamp) -> Vec<Figure> {
        let mut figures = Vec::new();
        let ready = self
            .conditions
            .iter()
            .find(|c| c.type_ == crd_types::conditions::types::READY);
        let is_ready = ready.is_some_and(|c| c.status == "True");
        figures.push(plain(
            "valkey_operator_topology_ready",
            f64::from(u8::from(is_ready)),
        ));
        if let Some(condition) = ready {
            let last = if is_ready {
                now
            } else {
                condition.last_transition_time.0
            };
            figures.push(Figure {
                metric: "valkey_operator_topology_last_ready_timestamp_seconds",
                labels: vec![],
                value: last.as_millisecond() as f64 / 1000.0,
            });
        }
        if let Some(phase) = self.phase {
            figures.push(labelled(
                "valkey_operator_topology_phase",
                phase.as_str(),
                1,
            ));
        }
        let paused = topology.annotations().contains_key(annotations::PAUSED);
        figures.push(plain(
            "valkey_operator_topology_paused",
            f64::from(u8::from(paused)),
        ));
        let observed = self.observed_generation.is_some()
            && self.observed_generation == topology.meta().generation;
        figures.push(plain(
            "valkey_operator_topology_spec_observed",
            f64::from(u8::from(observed)),
        ));
        for rotation in self.rotations {
            let share = if rotation.members > 0 {
                f64::from(rotation.members_with_new) / f64::from(rotation.members)
            } else {
                0.0
            };
            figures.push(Figure {
                metric: "valkey_operator_topology_password_rotation_progress",
                labels: vec![rotation.user.as_str().to_string()],
                value: share,
            });
        }
        if let Some(replacement) = self.ca_replacement {
            let phase = match replacement.phase {
                CaReplacementPhase::Trusting => "Trusting",
                CaReplacementPhase::Switching => "Switching",
            };
            figures.push(labelled(
                "valkey_operator_topology_ca_replacement",
                phase,
                1,
            ));
        }
        if let Some(storage) = self.storage {
            figures.push(Figure {
                metric: "valkey_operator_topology_volume_min_available_bytes",
                labels: vec![],
                value: storage.min_available_bytes as f64,
            });
            if let Some(percent) = storage.used_percent {
                figures.push(Figure {
                    metric: "valkey_operator_topology_volume_max_used_percent",
                    labels: vec![],
                    value: f64::from(percent),
                });
            }
        }
        figures
    }
}

/// Desired, present and ready members of one role.
fn members_by_role(role: &str, desired: i32, present: usize, ready: usize) -> [Figure; 3] {
    [
        labelled(
            "valkey_operator_topology_members_desired",
            role,
            desired.max(0) as usize,
        ),
        labelled("valkey_operator_topology_members", role, present),
        labelled("valkey_operator_topology_members_ready", role, ready),
    ]
}

fn plain(metric: &'static str, value: f64) -> Figure {
    Figure {
        metric,
        labels: vec![],
        value,
    }
}

fn labelled(metric: &'static str, label: &str, value: usize) -> Figure {
    Figure {
        metric,
        labels: vec![label.to_string()],
        value: value as f64,
    }
}

#[cfg(test)]
mod tests;
