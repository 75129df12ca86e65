//! ValkeyReplication: its shape, the sentinel timings and minReplicasToWrite.

use super::*;

#[test]
fn a_valid_replication_is_accepted() {
    let r = replication(json!({
        "replicas": 3,
        "sentinel": {
            "replicas": 3,
            "quorum": 2,
            "downAfterMilliseconds": 5000,
            "failoverTimeout": 60000,
            "parallelSyncs": 1,
            "passwordSecretRef": {"name": "sentinel-pass"}
        },
        "switchover": {"id": "x", "member": 2},
        "minReplicasToWrite": 2,
        "minReplicasMaxLag": 5
    }));
    accepted::<ValkeyReplication>(&r, None);
    accepted::<ValkeyReplication>(&r, Some(&r));
}

#[test]
fn replication_shape_is_checked() {
    rejected::<ValkeyReplication>(&replication(json!({"replicas": 0})), None, "at least 1");
    rejected::<ValkeyReplication>(&replication(json!({"replicas": -1})), None, "at least 1");
    rejected::<ValkeyReplication>(
        &replication(json!({"replicas": 33})),
        None,
        "replicas must be at most 32",
    );
    rejected::<ValkeyReplication>(
        &replication(json!({"replicas": 2, "sentinel": {"replicas": 3, "quorum": 4}})),
        None,
        "sentinel.quorum cannot exceed sentinel.replicas",
    );
    rejected::<ValkeyReplication>(
        &replication(json!({"replicas": 2, "sentinel": {"replicas": 3, "quorum": 0}})),
        None,
        "sentinel.quorum must be at least 1",
    );
    rejected::<ValkeyReplication>(
        &replication(json!({"replicas": 2, "sentinel": {"replicas": 0, "quorum": 1}})),
        None,
        "sentinel.replicas must be at least 1",
    );
    rejected::<ValkeyReplication>(
        &replication(json!({"replicas": 2, "switchover": {"id": "x", "member": 2}})),
        None,
        "switchover.member must name an existing data node",
    );
}

#[test]
fn sentinel_timings_are_checked() {
    let sentinel = |field: &str, value: i64| {
        replication(json!({"replicas": 2, "sentinel": {"replicas": 3, "quorum": 2, field: value}}))
    };
    for (field, low, ok, message) in [
        (
            "downAfterMilliseconds",
            99,
            100,
            "sentinel.downAfterMilliseconds must be at least 100",
        ),
        (
            "failoverTimeout",
            999,
            1000,
            "sentinel.failoverTimeout must be at least 1000",
        ),
        (
            "parallelSyncs",
            0,
            1,
            "sentinel.parallelSyncs must be at least 1",
        ),
    ] {
        rejected::<ValkeyReplication>(&sentinel(field, low), None, message);
        accepted::<ValkeyReplication>(&sentinel(field, ok), None);
    }
}

#[test]
fn min_replicas_to_write_fits_the_replicas() {
    let r = |to_write: i64, lag: i64| {
        replication(
            json!({"replicas": 3, "minReplicasToWrite": to_write, "minReplicasMaxLag": lag}),
        )
    };
    accepted::<ValkeyReplication>(&r(0, 1), None);
    accepted::<ValkeyReplication>(&r(2, 10), None);
    rejected::<ValkeyReplication>(&r(3, 10), None, "minReplicasToWrite must be below replicas");
    rejected::<ValkeyReplication>(&r(-1, 10), None, "minReplicasToWrite cannot be negative");
    rejected::<ValkeyReplication>(
        &r(1, 0),
        None,
        "minReplicasMaxLag must be at least 1 second",
    );
}
