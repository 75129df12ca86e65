//! What every topology's status says alike, read the same way for both kinds.

use crd_types::cluster::Phase;
use crd_types::rotation::{CaReplacement, PasswordRotation};
use crd_types::{ValkeyClusterStatus, ValkeyReplicationStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

/// The fields topology-controller writes alike on a ValkeyCluster and a ValkeyReplication.
pub trait TopologyStatus: Default {
    fn phase(&self) -> Option<Phase>;
    fn observed_generation(&self) -> Option<i64>;
    fn conditions(&self) -> &[Condition];
    fn ca_replacement(&self) -> Option<&CaReplacement>;
    /// The Valkey versions its members run.
    fn versions(&self) -> &[String];
    fn password_rotations(&self) -> &[PasswordRotation];
}

macro_rules! topology_status {
    ($status:ty) => {
        impl TopologyStatus for $status {
            fn phase(&self) -> Option<Phase> {
                self.phase
            }

            fn observed_generation(&self) -> Option<i64> {
                self.observed_generation
            }

            fn conditions(&self) -> &[Condition] {
                &self.conditions
            }

            fn ca_replacement(&self) -> Option<&CaReplacement> {
                self.ca_replacement.as_ref()
            }

            fn versions(&self) -> &[String] {
                &self.versions
            }

            fn password_rotations(&self) -> &[PasswordRotation] {
                &self.password_rotations
            }
        }
    };
}

topology_status!(ValkeyClusterStatus);
topology_status!(ValkeyReplicationStatus);
