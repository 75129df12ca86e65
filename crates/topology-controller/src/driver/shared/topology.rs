//! What a topology kind tells the stages every kind shares ([`crate::driver::shared::stages`]):
//! its name and member label, the parts of its spec every kind has (auth, users, TLS), its
//! status's common fields. A third kind implements this and reuses every shared stage.

use std::fmt::Debug;

use crd_types::cluster::{Phase, SwitchoverStatus};
use crd_types::monitoring::MonitoringSpec;
use crd_types::names::{annotations, labels};
use crd_types::node::StorageHeadroom;
use crd_types::rotation::{CaReplacement, PasswordRotation};
use crd_types::template::{Auth, TopologyTls};
use crd_types::users::User;
use crd_types::{ValkeyCluster, ValkeyClusterStatus, ValkeyReplication, ValkeyReplicationStatus};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::serde::Serialize;
use k8s_openapi::serde::de::DeserializeOwned;
use kube::{Resource, ResourceExt};

/// A topology kind: ValkeyCluster, ValkeyReplication.
pub trait Topology:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + Debug
    + DeserializeOwned
    + Serialize
    + Send
    + Sync
    + 'static
{
    type Status: TopologyStatus + Clone + Default + Debug + PartialEq + Serialize + Send + Sync;
    /// Its kind, as errors name it.
    const KIND: &'static str;
    /// The label its members, Secrets and owned objects carry with its name.
    const MEMBER_LABEL: &'static str;
    /// Its members talk over the cluster bus (which always asks for client certificates).
    const BUS: bool;

    fn auth(&self) -> Option<&Auth>;
    fn users(&self) -> Option<&[User]>;
    fn tls(&self) -> Option<&TopologyTls>;
    fn monitoring(&self) -> Option<&MonitoringSpec>;
    fn status(&self) -> Option<&Self::Status>;

    /// The rotations its status records.
    fn recorded_rotations(&self) -> &[PasswordRotation] {
        self.status()
            .map(|s| s.common().password_rotations)
            .unwrap_or_default()
    }

    /// The id of the switchover its status says is finished.
    fn recorded_switchover(&self) -> Option<&str> {
        let recorded = self.status().and_then(|s| s.common().switchover);
        let finished = recorded.filter(|s| s.outcome.is_finished());
        finished.map(|s| s.id.as_str())
    }

    /// Its conditions as written.
    fn conditions(&self) -> &[Condition] {
        self.status()
            .map(|s| s.common().conditions)
            .unwrap_or_default()
    }

    /// The `valkey.rs/paused` annotation is set to anything but `false`.
    fn paused(&self) -> bool {
        self.annotations()
            .get(annotations::PAUSED)
            .is_some_and(|v| v != "false")
    }

    /// It watches Secrets nothing watches for it (users' passwords, a TLS Secret), so it is
    /// looked at more often.
    fn looks_at_secrets(&self) -> bool {
        self.users().is_some() || self.tls().is_some()
    }
}

/// The fields every topology status has.
pub struct Common<'a> {
    pub password_rotations: &'a [PasswordRotation],
    pub switchover: Option<&'a SwitchoverStatus>,
    pub conditions: &'a [Condition],
}

/// A topology's status, as the shared stages read and write it.
pub trait TopologyStatus {
    fn common(&self) -> Common<'_>;
    fn set_phase(&mut self, phase: Phase);
    fn set_observed_generation(&mut self, generation: Option<i64>);
    fn conditions_mut(&mut self) -> &mut Vec<Condition>;
    /// The rotations under way and the CA replacement's state.
    fn set_credentials(&mut self, rotations: Vec<PasswordRotation>, ca: Option<CaReplacement>);
    /// The member with the least free space, and the Valkey versions members run.
    fn set_members(&mut self, storage: Option<StorageHeadroom>, versions: Vec<String>);
}

macro_rules! topology_status {
    ($status:ty) => {
        impl TopologyStatus for $status {
            fn common(&self) -> Common<'_> {
                Common {
                    password_rotations: &self.password_rotations,
                    switchover: self.switchover.as_ref(),
                    conditions: &self.conditions,
                }
            }

            fn set_phase(&mut self, phase: Phase) {
                self.phase = Some(phase);
            }

            fn set_observed_generation(&mut self, generation: Option<i64>) {
                self.observed_generation = generation;
            }

            fn conditions_mut(&mut self) -> &mut Vec<Condition> {
                &mut self.conditions
            }

            fn set_credentials(
                &mut self,
                rotations: Vec<PasswordRotation>,
                ca: Option<CaReplacement>,
            ) {
                self.password_rotations = rotations;
                self.ca_replacement = ca;
            }

            fn set_members(&mut self, storage: Option<StorageHeadroom>, versions: Vec<String>) {
                self.storage = storage;
                self.versions = versions;
            }
        }
    };
}

topology_status!(ValkeyClusterStatus);
topology_status!(ValkeyReplicationStatus);

impl Topology for ValkeyCluster {
    type Status = ValkeyClusterStatus;
    const KIND: &'static str = "ValkeyCluster";
    const MEMBER_LABEL: &'static str = labels::CLUSTER;
    const BUS: bool = true;

    fn auth(&self) -> Option<&Auth> {
        self.spec.common.auth.as_ref()
    }

    fn users(&self) -> Option<&[User]> {
        self.spec.common.users.as_deref()
    }

    fn tls(&self) -> Option<&TopologyTls> {
        self.spec.common.tls.as_ref()
    }

    fn monitoring(&self) -> Option<&MonitoringSpec> {
        self.spec.common.monitoring.as_ref()
    }

    fn status(&self) -> Option<&ValkeyClusterStatus> {
        self.status.as_ref()
    }
}

impl Topology for ValkeyReplication {
    type Status = ValkeyReplicationStatus;
    const KIND: &'static str = "ValkeyReplication";
    const MEMBER_LABEL: &'static str = labels::REPLICATION;
    const BUS: bool = false;

    fn auth(&self) -> Option<&Auth> {
        self.spec.common.auth.as_ref()
    }

    fn users(&self) -> Option<&[User]> {
        self.spec.common.users.as_deref()
    }

    fn tls(&self) -> Option<&TopologyTls> {
        self.spec.common.tls.as_ref()
    }

    fn monitoring(&self) -> Option<&MonitoringSpec> {
        self.spec.common.monitoring.as_ref()
    }

    fn status(&self) -> Option<&ValkeyReplicationStatus> {
        self.status.as_ref()
    }
}
