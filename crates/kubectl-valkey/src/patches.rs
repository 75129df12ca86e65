//! The merge patches the commands send: only spec fields and annotations the operator
//! already reads (docs/replication.md, docs/cluster.md, docs/ca-replacement.md, README).

use anyhow::{Result, bail};
use crd_types::names::annotations;
use serde_json::{Value, json};

use crate::topology::Kind;

/// Pauses a topology: `valkey.rs/paused: "true"`.
pub fn pause() -> Value {
    json!({"metadata": {"annotations": {(annotations::PAUSED): "true"}}})
}

/// Resumes it: the annotation removed.
pub fn resume() -> Value {
    json!({"metadata": {"annotations": {(annotations::PAUSED): null}}})
}

/// Whether the annotations hold a pause (any value but `false`).
pub fn is_paused(annotations: &std::collections::BTreeMap<String, String>) -> bool {
    annotations
        .get(annotations::PAUSED)
        .is_some_and(|v| v != "false")
}

/// Asks for a new CA: `valkey.rs/replace-ca` given `value`, which must differ from the one
/// it holds.
pub fn replace_ca(value: &str) -> Value {
    json!({"metadata": {"annotations": {(annotations::REPLACE_CA): value}}})
}

/// A value for `valkey.rs/replace-ca` that differs from `current`: the time, and a counter
/// if the same second was used already.
pub fn new_replace_ca_value(current: Option<&str>, unix_seconds: u64) -> String {
    let base = format!("kubectl-valkey-{unix_seconds}");
    if current != Some(base.as_str()) {
        return base;
    }
    format!("{base}-2")
}

/// Where a switchover's target sits: a cluster's shard and member index, or a
/// replication's data node index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    Cluster { shard: i32, member: i32 },
    Replication { member: i32 },
}

/// The switchover target named `member` of topology `topology`, from the member names
/// crd-types gives (`<cluster>-<shard>-<member>`, `<replication>-<index>`).
pub fn switchover_target(kind: Kind, topology: &str, member: &str) -> Result<Target> {
    let Some(suffix) = member
        .strip_prefix(topology)
        .and_then(|s| s.strip_prefix('-'))
    else {
        bail!("{member:?} is not a member of {topology:?}: its members are named {topology}-...");
    };
    let number = |s: &str| s.parse::<i32>().ok().filter(|n| *n >= 0);
    match kind {
        Kind::Cluster => {
            let parts: Vec<&str> = suffix.split('-').collect();
            match parts.as_slice() {
                [shard, index] => match (number(shard), number(index)) {
                    (Some(shard), Some(member)) => Ok(Target::Cluster { shard, member }),
                    _ => bail!(
                        "{member:?} is not a cluster member name ({topology}-<shard>-<member>)"
                    ),
                },
                _ => bail!("{member:?} is not a cluster member name ({topology}-<shard>-<member>)"),
            }
        }
        Kind::Replication => match number(suffix) {
            Some(index) => Ok(Target::Replication { member: index }),
            None if suffix.starts_with("sentinel-") => {
                bail!(
                    "{member:?} is a sentinel: only a data node ({topology}-<index>) can become the primary"
                )
            }
            None => bail!("{member:?} is not a data node name ({topology}-<index>)"),
        },
    }
}

/// The patch that asks for the switchover, request `id`.
pub fn switchover(target: Target, id: &str) -> Value {
    match target {
        Target::Cluster { shard, member } => {
            json!({"spec": {"switchover": {"id": id, "shard": shard, "member": member}}})
        }
        Target::Replication { member } => {
            json!({"spec": {"switchover": {"id": id, "member": member}}})
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn pause_and_resume_set_and_remove_the_annotation() {
        assert_eq!(
            pause(),
            json!({"metadata": {"annotations": {"valkey.rs/paused": "true"}}})
        );
        assert_eq!(
            resume(),
            json!({"metadata": {"annotations": {"valkey.rs/paused": null}}})
        );
        let with = |v: &str| BTreeMap::from([(annotations::PAUSED.to_string(), v.to_string())]);
        assert!(is_paused(&with("true")));
        assert!(is_paused(&with("")));
        assert!(!is_paused(&with("false")));
        assert!(!is_paused(&BTreeMap::new()));
    }

    #[test]
    fn replace_ca_always_gives_a_new_value() {
        assert_eq!(new_replace_ca_value(None, 5), "kubectl-valkey-5");
        assert_eq!(new_replace_ca_value(Some("x"), 5), "kubectl-valkey-5");
        assert_eq!(
            new_replace_ca_value(Some("kubectl-valkey-5"), 5),
            "kubectl-valkey-5-2"
        );
        assert_eq!(
            replace_ca("v"),
            json!({"metadata": {"annotations": {"valkey.rs/replace-ca": "v"}}})
        );
    }

    #[test]
    fn cluster_members_name_their_shard_and_index() {
        assert_eq!(
            switchover_target(Kind::Cluster, "orders", "orders-2-1").unwrap(),
            Target::Cluster {
                shard: 2,
                member: 1
            }
        );
        // A cluster whose own name has dashes.
        assert_eq!(
            switchover_target(Kind::Cluster, "my-orders", "my-orders-0-3").unwrap(),
            Target::Cluster {
                shard: 0,
                member: 3
            }
        );
        for wrong in ["other-0-1", "orders-1", "orders-a-1", "orders-0-1-2"] {
            assert!(
                switchover_target(Kind::Cluster, "orders", wrong).is_err(),
                "{wrong}"
            );
        }
    }

    #[test]
    fn replication_targets_are_data_nodes() {
        assert_eq!(
            switchover_target(Kind::Replication, "sessions", "sessions-2").unwrap(),
            Target::Replication { member: 2 }
        );
        let sentinel = switchover_target(Kind::Replication, "sessions", "sessions-sentinel-0")
            .unwrap_err()
            .to_string();
        assert!(sentinel.contains("is a sentinel"), "{sentinel}");
        assert!(switchover_target(Kind::Replication, "sessions", "sessions").is_err());
    }

    #[test]
    fn switchover_patches_name_the_request() {
        assert_eq!(
            switchover(
                Target::Cluster {
                    shard: 1,
                    member: 0
                },
                "r1"
            ),
            json!({"spec": {"switchover": {"id": "r1", "shard": 1, "member": 0}}})
        );
        assert_eq!(
            switchover(Target::Replication { member: 2 }, "r2"),
            json!({"spec": {"switchover": {"id": "r2", "member": 2}}})
        );
    }
}
