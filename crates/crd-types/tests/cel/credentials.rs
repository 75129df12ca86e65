//! Passwords, users and TLS, on nodes and in topologies.

use super::*;

#[test]
fn auth_secret_refs_are_checked() {
    let with_auth = |auth: Value| node(json!({"auth": auth}));
    accepted::<ValkeyNode>(
        &with_auth(json!({
            "passwordSecretRef": {"name": "cache-auth"},
            "operatorSecretRef": {"name": "cache-operator", "key": "pass.word_1"}
        })),
        None,
    );
    rejected::<ValkeyNode>(
        &with_auth(json!({"passwordSecretRef": {"name": ""}})),
        None,
        "a Secret name is a DNS subdomain",
    );
    rejected::<ValkeyNode>(
        &with_auth(json!({"operatorSecretRef": {"name": "Cache_Auth"}})),
        None,
        "a Secret name is a DNS subdomain",
    );
    rejected::<ValkeyNode>(
        &with_auth(json!({"passwordSecretRef": {"name": "a..b"}})),
        None,
        "a Secret name is a DNS subdomain",
    );
    rejected::<ValkeyNode>(
        &with_auth(json!({"passwordSecretRef": {"name": "a", "key": "pass word"}})),
        None,
        "a Secret key is letters, digits",
    );
    rejected::<ValkeyCluster>(
        &cluster(json!({
            "shards": 3,
            "template": {},
            "auth": {"passwordSecretRef": {"name": "a", "key": ""}}
        })),
        None,
        "a Secret key is letters, digits",
    );
}

#[test]
fn the_operator_secret_of_a_cluster_may_change_but_not_go() {
    let with = |auth: Value| cluster(json!({"shards": 3, "template": {}, "auth": auth}));
    let none = cluster(json!({"shards": 3, "template": {}}));
    let named = with(json!({"operatorSecretRef": {"name": "op", "key": "password"}}));
    let other = with(json!({"operatorSecretRef": {"name": "op2", "key": "password"}}));
    let message = "auth.operatorSecretRef cannot be removed once set";
    accepted::<ValkeyCluster>(&named, None);
    accepted::<ValkeyCluster>(&named, Some(&named));
    // Another Secret, or one named instead of the generated one: a rotation.
    accepted::<ValkeyCluster>(&other, Some(&named));
    accepted::<ValkeyCluster>(&named, Some(&none));
    rejected::<ValkeyCluster>(&none, Some(&named), message);
    let other_auth = with(json!({"passwordSecretRef": {"name": "app", "key": "password"}}));
    rejected::<ValkeyCluster>(&other_auth, Some(&named), message);
    // The default user's Secret may change (it rolls the members).
    let password = with(json!({"passwordSecretRef": {"name": "app", "key": "password"}}));
    accepted::<ValkeyCluster>(&password, Some(&none));
    let replication = |auth: Value| {
        json!({
            "apiVersion": "valkey.rs/v1alpha1",
            "kind": "ValkeyReplication",
            "metadata": {"name": "cache", "namespace": "default"},
            "spec": {"replicas": 2, "sentinel": {"replicas": 3, "quorum": 2}, "template": {}, "auth": auth},
        })
    };
    let a = replication(json!({"operatorSecretRef": {"name": "a", "key": "password"}}));
    let b = replication(json!({"operatorSecretRef": {"name": "b", "key": "password"}}));
    accepted::<ValkeyReplication>(&a, Some(&a));
    accepted::<ValkeyReplication>(&b, Some(&a));
    rejected::<ValkeyReplication>(&replication(json!({})), Some(&a), message);
}

#[test]
fn the_password_overlap_is_bounded_and_only_for_topologies() {
    let with = |auth: Value| cluster(json!({"shards": 3, "template": {}, "auth": auth}));
    accepted::<ValkeyCluster>(&with(json!({"passwordOverlapSeconds": 0})), None);
    accepted::<ValkeyCluster>(&with(json!({"passwordOverlapSeconds": 604800})), None);
    for bad in [-1, 604801] {
        rejected::<ValkeyCluster>(
            &with(json!({"passwordOverlapSeconds": bad})),
            None,
            "auth.passwordOverlapSeconds is 0 to 604800",
        );
    }
    // A ValkeyNode made by hand has no operator to rotate its password.
    accepted::<ValkeyNode>(
        &node(json!({"auth": {"passwordSecretRef": {"name": "a", "key": "password"}}})),
        None,
    );
    rejected::<ValkeyNode>(
        &node(json!({"auth": {"passwordOverlapSeconds": 60}})),
        None,
        "a ValkeyNode made by hand takes a changed password when it restarts",
    );
}

#[test]
fn tls_is_set_at_creation_and_checked() {
    let tls = |t: Value| node(json!({"tls": t}));
    let a = tls(json!({"secretName": "cache-tls"}));
    accepted::<ValkeyNode>(&a, None);
    accepted::<ValkeyNode>(
        &tls(json!({"secretName": "c", "authClients": "Required"})),
        None,
    );
    rejected::<ValkeyNode>(
        &tls(json!({"secretName": "c", "authClients": "yes"})),
        None,
        "tls.authClients must be Never, Optional or Required",
    );
    rejected::<ValkeyNode>(
        &tls(json!({"secretName": "Cache_TLS"})),
        None,
        "tls.secretName is a Secret name",
    );
    accepted::<ValkeyNode>(&a, Some(&a));
    let renamed = tls(json!({"secretName": "other-tls"}));
    rejected::<ValkeyNode>(&renamed, Some(&a), "tls cannot be changed after creation");
    let plain = node(json!({}));
    rejected::<ValkeyNode>(&plain, Some(&a), "tls cannot be added or removed");
    rejected::<ValkeyNode>(&a, Some(&plain), "tls cannot be added or removed");
    let null = tls(Value::Null);
    rejected::<ValkeyNode>(&null, Some(&a), "tls cannot be added or removed");
    let c = cluster(json!({"shards": 3, "template": {}, "tls": {"secretName": "t"}}));
    accepted::<ValkeyCluster>(&c, None);
    let plain_cluster = cluster(json!({"shards": 3, "template": {}}));
    rejected::<ValkeyCluster>(&plain_cluster, Some(&c), "tls cannot be added or removed");
    // Without a Secret: the operator issues the certificates, which cannot change later.
    let issued = cluster(json!({"shards": 3, "template": {}, "tls": {}}));
    accepted::<ValkeyCluster>(&issued, None);
    accepted::<ValkeyCluster>(&issued, Some(&issued));
    rejected::<ValkeyCluster>(&c, Some(&issued), "tls cannot be changed after creation");
    rejected::<ValkeyCluster>(&issued, Some(&c), "tls cannot be changed after creation");
    rejected::<ValkeyCluster>(
        &cluster(json!({"shards": 3, "template": {}, "tls": {"secretName": "T"}})),
        None,
        "tls.secretName is a Secret name",
    );
    // The plain-text client port may come and go; the rest stays.
    let both = tls(json!({"secretName": "cache-tls", "plainTextClients": true}));
    accepted::<ValkeyNode>(&both, Some(&a));
    accepted::<ValkeyNode>(&a, Some(&both));
    let both_renamed = tls(json!({"secretName": "other-tls", "plainTextClients": true}));
    rejected::<ValkeyNode>(
        &both_renamed,
        Some(&a),
        "tls cannot be changed after creation (but for plainTextClients)",
    );
    let issued_both =
        cluster(json!({"shards": 3, "template": {}, "tls": {"plainTextClients": true}}));
    accepted::<ValkeyCluster>(&issued_both, Some(&issued));
    accepted::<ValkeyCluster>(&issued, Some(&issued_both));
    // So may the CA replacement's overlap.
    let overlap = cluster(json!({"shards": 3, "template": {}, "tls": {"caOverlapSeconds": 60}}));
    accepted::<ValkeyCluster>(&overlap, Some(&issued));
    accepted::<ValkeyCluster>(&issued, Some(&overlap));
    let strict = cluster(
        json!({"shards": 3, "template": {}, "tls": {"authClients": "Required", "plainTextClients": true}}),
    );
    rejected::<ValkeyCluster>(
        &strict,
        Some(&issued),
        "tls cannot be changed after creation",
    );
    let group = |t: Value| replication(json!({"template": {}, "tls": t}));
    accepted::<ValkeyReplication>(
        &group(json!({"secretName": "t", "plainTextClients": true})),
        Some(&group(json!({"secretName": "t"}))),
    );
    rejected::<ValkeyReplication>(
        &group(json!({"secretName": "u"})),
        Some(&group(json!({"secretName": "t"}))),
        "tls cannot be changed after creation",
    );
    rejected::<ValkeyNode>(
        &node(json!({"config": {"tls-replication": "no"}})),
        None,
        "config sets a directive the operator manages",
    );
}

#[test]
fn users_are_checked_at_admission() {
    let with = |users: Value| cluster(json!({"shards": 3, "users": users}));
    accepted::<ValkeyCluster>(
        &with(json!([
            {"name": "app", "rules": ["~app:*", "&news.*", "+@read", "-flushall", "%R~cache:*"]},
            {"name": "reporting-2", "passwordSecretRef": {"name": "reporting-pw"}, "passwordOverlapSeconds": 0},
            {"name": "empty"},
        ])),
        None,
    );
    accepted::<ValkeyCluster>(&with(json!([])), None);
    for reserved in ["default", "operator", "replication", "monitoring", "probe"] {
        rejected::<ValkeyCluster>(
            &with(json!([{"name": reserved}])),
            None,
            "the operator keeps those users for itself",
        );
    }
    for bad in ["App", "a b", "_x", "x-", "x_y"] {
        rejected::<ValkeyCluster>(
            &with(json!([{"name": bad}])),
            None,
            "users[].name is lower-case letters",
        );
    }
    rejected::<ValkeyCluster>(
        &with(json!([{"name": "app"}, {"name": "app", "rules": ["+get"]}])),
        None,
        "users: each name may appear only once",
    );
    for owned in [
        "on",
        "OFF",
        "reset",
        "nopass",
        "resetpass",
        ">secret",
        "<old",
        "#abc",
        "!abc",
    ] {
        rejected::<ValkeyCluster>(
            &with(json!([{"name": "app", "rules": [owned]}])),
            None,
            "users[].rules cannot hold on, off, reset, nopass, resetpass or a password",
        );
    }
    for shaped in [
        "",
        "+get ~x",
        "(~x +get)",
        "+get\n",
        "~\"x",
        "~x'",
        "~\u{7f}x",
        "~é",
    ] {
        rejected::<ValkeyCluster>(
            &with(json!([{"name": "app", "rules": [shaped]}])),
            None,
            "users[].rules: each rule is one token",
        );
    }
    rejected::<ValkeyCluster>(
        &with(json!([{"name": "app", "passwordOverlapSeconds": -1}])),
        None,
        "passwordOverlapSeconds is 0 to 604800",
    );
    let group = json!({
        "apiVersion": "valkey.rs/v1alpha1",
        "kind": "ValkeyReplication",
        "metadata": {"name": "sessions", "namespace": "default"},
        "spec": {"users": [{"name": "operator"}]},
    });
    rejected::<ValkeyReplication>(&group, None, "the operator keeps those users for itself");
}

#[test]
fn a_nodes_users_secret_is_a_secret_name() {
    accepted::<ValkeyNode>(&node(json!({"usersSecretName": "orders-users"})), None);
    rejected::<ValkeyNode>(
        &node(json!({"usersSecretName": "Orders users"})),
        None,
        "usersSecretName is a Secret name",
    );
}
