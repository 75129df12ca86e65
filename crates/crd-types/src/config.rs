//! `config`: the user's valkey.conf directives, and the ones the operator owns.

use std::collections::BTreeMap;

use kube::core::{Rule, validate};
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};

/// Server directives node-controller renders unless the user sets them: an append-only
/// file, so a process crash or restart loses at most the last second of acknowledged writes
/// rather than everything since the last snapshot; and a full sync that starts at once
/// instead of waiting 5 s for more replicas to share it (Valkey's default): a topology
/// attaches a shard's replicas together, and a replica resyncing alone waits for nothing.
/// And a SIGTERM that always stops the server: by default Valkey refuses to stop while it
/// writes its first append-only file (a replica right after a full sync, as a primary that
/// handed over in its preStop hook may be) or when the final save fails, and then forgets
/// the signal, so it runs on until the kubelet's SIGKILL at the end of the grace period,
/// which loses more (no final fsync). `force` still waits for lagging replicas and fsyncs
/// the AOF; a replica's data comes from its primary, so a dropped first AOF costs a full
/// sync after its restart. (Live, so adding it rolls no topology member.)
/// A live directive among them goes back to this value, not Valkey's, when the spec drops it.
pub const SERVER_DEFAULTS: &[(&str, &str)] = &[
    ("appendonly", "yes"),
    ("appendfsync", "everysec"),
    ("repl-diskless-sync-delay", "0"),
    ("shutdown-on-sigterm", "force"),
];

/// Directives the operator renders itself: networking and announce addresses, cluster and
/// replication wiring, auth, TLS files and process management. Letting a user set them would
/// break what the controllers rely on, so admission refuses them. `DEBUG` and `MODULE` stay
/// at Valkey's default, off: with either, any client allowed the command could crash the
/// server or load code into it. (Not rendered: an added line would roll every member.)
pub const OPERATOR_OWNED_DIRECTIVES: &[&str] = &[
    "aclfile",
    "announce-ip",
    "announce-port",
    "bind",
    "cluster-announce-bus-port",
    "cluster-announce-ip",
    "cluster-announce-port",
    "cluster-announce-tls-port",
    "cluster-config-file",
    "cluster-enabled",
    "cluster-port",
    "daemonize",
    "dir",
    "enable-debug-command",
    "enable-module-command",
    "include",
    "logfile",
    "masterauth",
    "masteruser",
    "pidfile",
    "port",
    "primaryauth",
    "primaryuser",
    "proc-title-template",
    "protected-mode",
    "replica-announce-ip",
    "replica-announce-port",
    "replicaof",
    "requirepass",
    "set-proc-title",
    "slave-announce-ip",
    "slave-announce-port",
    "slaveof",
    "supervised",
    "tls-auth-clients",
    "tls-ca-cert-dir",
    "tls-ca-cert-file",
    "tls-cert-file",
    "tls-client-cert-file",
    "tls-client-key-file",
    "tls-client-key-file-pass",
    "tls-cluster",
    "tls-key-file",
    "tls-key-file-pass",
    "tls-port",
    "tls-replication",
    "unixsocket",
    "user",
];

/// valkey.conf directives as `name: value`, e.g. `maxmemory: 2gb`. Rendered before the
/// operator-owned directives.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(transparent)]
pub struct ValkeyConfig(pub BTreeMap<String, String>);

impl ValkeyConfig {
    /// Operator-owned directives present in this config (for objects admitted before a rule
    /// existed; the node-controller turns them into a condition and an Event).
    pub fn owned_directives(&self) -> Vec<&str> {
        self.0
            .keys()
            .map(String::as_str)
            .filter(|k| OPERATOR_OWNED_DIRECTIVES.contains(&k.to_ascii_lowercase().as_str()))
            .collect()
    }
}

/// Most directives a `config` map may hold; bounds the CEL cost of its rules.
pub const MAX_CONFIG_DIRECTIVES: u64 = 128;

/// The CEL rule attached to every `config` map. Each term is a constant-cost key lookup, so
/// the rule stays far inside the API server's cost budget. Keys differing only in case are
/// caught by the node-controller (see [`ValkeyConfig::owned_directives`]).
pub fn owned_directives_rule() -> Rule {
    let rule = OPERATOR_OWNED_DIRECTIVES
        .iter()
        .map(|d| format!("!('{d}' in self)"))
        .collect::<Vec<_>>()
        .join(" && ");
    Rule::new(rule).message(
        "config sets a directive the operator manages (networking such as port or bind, \
         announce addresses, cluster or replication wiring, auth, TLS files or paths such as \
         dir): remove it and use the matching spec field instead",
    )
}

impl JsonSchema for ValkeyConfig {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ValkeyConfig".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let mut schema = <BTreeMap<String, String>>::json_schema(generator);
        schema.insert(
            "description".into(),
            "valkey.conf directives as name: value (for example maxmemory: 2gb), rendered \
             before the directives the operator owns"
                .into(),
        );
        schema.insert("maxProperties".into(), MAX_CONFIG_DIRECTIVES.into());
        validate(&mut schema, owned_directives_rule()).expect("a map schema accepts rules");
        schema
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_directives_are_sorted_and_unique() {
        let mut sorted = OPERATOR_OWNED_DIRECTIVES.to_vec();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted, OPERATOR_OWNED_DIRECTIVES);
    }

    #[test]
    fn owned_directives_are_found_in_any_case() {
        let config = ValkeyConfig(BTreeMap::from([
            ("maxmemory".to_string(), "1gb".to_string()),
            ("Port".to_string(), "7000".to_string()),
            ("cluster-enabled".to_string(), "yes".to_string()),
        ]));
        assert_eq!(config.owned_directives(), vec!["Port", "cluster-enabled"]);
    }

    #[test]
    fn schema_carries_the_rule_for_every_owned_directive() {
        let schema = schemars::SchemaGenerator::default().into_root_schema_for::<ValkeyConfig>();
        let rules = schema
            .get("x-kubernetes-validations")
            .and_then(|v| v.as_array())
            .expect("rules present");
        assert_eq!(rules.len(), 1);
        let rule = rules[0]["rule"].as_str().unwrap();
        for directive in OPERATOR_OWNED_DIRECTIVES {
            assert!(
                rule.contains(&format!("!('{directive}' in self)")),
                "{directive}"
            );
        }
        assert_eq!(
            schema.get("maxProperties"),
            Some(&MAX_CONFIG_DIRECTIVES.into())
        );
    }
}
