//! A topology found by name: a ValkeyCluster or a ValkeyReplication, and what the commands
//! read of either.

use anyhow::{Result, bail};
use crd_types::cluster::{Phase, SwitchoverStatus};
use crd_types::names::labels;
use crd_types::rotation::{CaReplacement, PasswordRotation};
use crd_types::topology::TopologySpec;
use crd_types::{ValkeyCluster, ValkeyReplication};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::ResourceExt;

/// Which kind a name is (also `--kind`'s values).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// ValkeyCluster (vkc).
    Cluster,
    /// ValkeyReplication (vkr).
    Replication,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Cluster => "ValkeyCluster",
            Kind::Replication => "ValkeyReplication",
        }
    }

    /// The label a member ValkeyNode carries, naming its topology.
    pub fn member_label(self) -> &'static str {
        match self {
            Kind::Cluster => labels::CLUSTER,
            Kind::Replication => labels::REPLICATION,
        }
    }
}

/// The kind `name` is, from which kinds have an object of that name, and `--kind`.
pub fn choose_kind(
    name: &str,
    asked: Option<Kind>,
    cluster: bool,
    replication: bool,
) -> Result<Kind> {
    match (asked, cluster, replication) {
        (Some(Kind::Cluster), true, _) => Ok(Kind::Cluster),
        (Some(Kind::Replication), _, true) => Ok(Kind::Replication),
        (Some(Kind::Cluster), false, _) => bail!("valkeycluster {name:?} not found"),
        (Some(Kind::Replication), _, false) => bail!("valkeyreplication {name:?} not found"),
        (None, true, false) => Ok(Kind::Cluster),
        (None, false, true) => Ok(Kind::Replication),
        (None, true, true) => bail!(
            "both a valkeycluster and a valkeyreplication are named {name:?}: choose one with --kind cluster or --kind replication"
        ),
        (None, false, false) => {
            bail!("no valkeycluster or valkeyreplication named {name:?}")
        }
    }
}

/// The topology as read.
#[derive(Clone, Debug)]
pub enum Topology {
    Cluster(Box<ValkeyCluster>),
    Replication(Box<ValkeyReplication>),
}

impl Topology {
    pub fn kind(&self) -> Kind {
        match self {
            Topology::Cluster(_) => Kind::Cluster,
            Topology::Replication(_) => Kind::Replication,
        }
    }

    pub fn name(&self) -> String {
        match self {
            Topology::Cluster(c) => c.name_any(),
            Topology::Replication(r) => r.name_any(),
        }
    }

    pub fn common(&self) -> &TopologySpec {
        match self {
            Topology::Cluster(c) => &c.spec.common,
            Topology::Replication(r) => &r.spec.common,
        }
    }

    pub fn annotations(&self) -> std::collections::BTreeMap<String, String> {
        match self {
            Topology::Cluster(c) => c.annotations().clone(),
            Topology::Replication(r) => r.annotations().clone(),
        }
    }

    pub fn phase(&self) -> Option<Phase> {
        match self {
            Topology::Cluster(c) => c.status.as_ref()?.phase,
            Topology::Replication(r) => r.status.as_ref()?.phase,
        }
    }

    pub fn conditions(&self) -> Vec<Condition> {
        match self {
            Topology::Cluster(c) => c.status.clone().unwrap_or_default().conditions,
            Topology::Replication(r) => r.status.clone().unwrap_or_default().conditions,
        }
    }

    pub fn switchover(&self) -> Option<SwitchoverStatus> {
        match self {
            Topology::Cluster(c) => c.status.as_ref()?.switchover.clone(),
            Topology::Replication(r) => r.status.as_ref()?.switchover.clone(),
        }
    }

    pub fn ca_replacement(&self) -> Option<CaReplacement> {
        match self {
            Topology::Cluster(c) => c.status.as_ref()?.ca_replacement.clone(),
            Topology::Replication(r) => r.status.as_ref()?.ca_replacement.clone(),
        }
    }

    pub fn password_rotations(&self) -> Vec<PasswordRotation> {
        match self {
            Topology::Cluster(c) => c.status.clone().unwrap_or_default().password_rotations,
            Topology::Replication(r) => r.status.clone().unwrap_or_default().password_rotations,
        }
    }

    pub fn storage(&self) -> Option<crd_types::node::StorageHeadroom> {
        match self {
            Topology::Cluster(c) => c.status.as_ref()?.storage.clone(),
            Topology::Replication(r) => r.status.as_ref()?.storage.clone(),
        }
    }

    /// The primary's name: a replication's `status.currentPrimary`; a cluster's per shard.
    pub fn current_primary(&self) -> Option<String> {
        match self {
            Topology::Cluster(_) => None,
            Topology::Replication(r) => r.status.as_ref()?.current_primary.clone(),
        }
    }

    /// The topology as YAML, without managedFields (noise in a report).
    pub fn to_yaml(&self) -> Result<String> {
        let mut value = match self {
            Topology::Cluster(c) => serde_json::to_value(c)?,
            Topology::Replication(r) => serde_json::to_value(r)?,
        };
        strip_managed_fields(&mut value);
        Ok(serde_yaml::to_string(&value)?)
    }
}

/// Drops `metadata.managedFields` from an object's JSON.
pub fn strip_managed_fields(value: &mut serde_json::Value) {
    if let Some(meta) = value
        .get_mut("metadata")
        .and_then(serde_json::Value::as_object_mut)
    {
        meta.remove("managedFields");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kind_is_the_one_that_exists() {
        assert_eq!(choose_kind("a", None, true, false).unwrap(), Kind::Cluster);
        assert_eq!(
            choose_kind("a", None, false, true).unwrap(),
            Kind::Replication
        );
        let both = choose_kind("a", None, true, true).unwrap_err().to_string();
        assert!(both.contains("--kind"), "{both}");
        let neither = choose_kind("a", None, false, false)
            .unwrap_err()
            .to_string();
        assert!(
            neither.contains("no valkeycluster or valkeyreplication"),
            "{neither}"
        );
    }

    #[test]
    fn kind_chooses_between_two_of_the_same_name() {
        assert_eq!(
            choose_kind("a", Some(Kind::Replication), true, true).unwrap(),
            Kind::Replication
        );
        assert_eq!(
            choose_kind("a", Some(Kind::Cluster), true, true).unwrap(),
            Kind::Cluster
        );
        let missing = choose_kind("a", Some(Kind::Cluster), false, true)
            .unwrap_err()
            .to_string();
        assert_eq!(missing, "valkeycluster \"a\" not found");
    }

    #[test]
    fn managed_fields_are_dropped() {
        let mut value = serde_json::json!({"metadata": {"name": "a", "managedFields": [{}]}});
        strip_managed_fields(&mut value);
        assert_eq!(value, serde_json::json!({"metadata": {"name": "a"}}));
    }
}
