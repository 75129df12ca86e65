//! `memoryOnly`, on a ValkeyNode and inside both topologies' templates.

use super::*;

#[test]
fn a_memory_only_node_names_its_scratch_volume() {
    for volume in ["EmptyDir", "Memory"] {
        accepted::<ValkeyNode>(&node(json!({"memoryOnly": {"volume": volume}})), None);
    }
    rejected::<ValkeyNode>(
        &node(json!({"memoryOnly": {"volume": "Tmpfs"}})),
        None,
        "memoryOnly.volume must be EmptyDir (the node's disk) or Memory",
    );
}

#[test]
fn memory_only_excludes_persistence_and_the_durability_directives() {
    let both = json!({"memoryOnly": {"volume": "Memory"}, "persistence": {"size": "1Gi"}});
    rejected::<ValkeyNode>(
        &node(both.clone()),
        None,
        "memoryOnly and persistence exclude each other",
    );
    rejected::<ValkeyCluster>(
        &cluster(json!({"shards": 3, "template": both.clone()})),
        None,
        "memoryOnly and persistence exclude each other",
    );
    rejected::<ValkeyReplication>(
        &replication(json!({"template": both})),
        None,
        "memoryOnly and persistence exclude each other",
    );
    for directive in ["appendonly", "save"] {
        let spec = json!({"memoryOnly": {"volume": "EmptyDir"}, "config": {directive: "yes"}});
        rejected::<ValkeyNode>(
            &node(spec.clone()),
            None,
            "config cannot set appendonly or save with memoryOnly",
        );
        rejected::<ValkeyCluster>(
            &cluster(json!({"shards": 3, "template": spec})),
            None,
            "config cannot set appendonly or save with memoryOnly",
        );
        // Without memoryOnly they are the user's to set.
        accepted::<ValkeyNode>(&node(json!({"config": {directive: "no"}})), None);
    }
    accepted::<ValkeyNode>(
        &node(json!({"memoryOnly": {"volume": "EmptyDir"}, "config": {"maxmemory": "1gb"}})),
        None,
    );
}
