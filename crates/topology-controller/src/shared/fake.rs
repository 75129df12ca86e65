//! What the in-memory fakes of both topologies share: the version they report and their live
//! directives.

use std::collections::BTreeMap;

use crd_types::live_config::{Version, live_on};

use crate::shared::member_facts::Revisions;

/// What a server of `version` reports for its live directives when the spec names none:
/// each one's default (node-controller's where it renders one), and `maxclients` at
/// Valkey's 10000. Shared by the fakes and tests.
pub fn live_defaults(version: Version) -> BTreeMap<String, String> {
    live_on(version)
        .map(|d| {
            let value = d.operator_default().unwrap_or("10000");
            (d.name.to_string(), value.to_string())
        })
        .collect()
}

/// `CONFIG GET names` against `config`: the pairs it knows, in the order asked.
pub fn config_reply(config: &BTreeMap<String, String>, names: &[String]) -> Vec<(String, String)> {
    names
        .iter()
        .filter_map(|n| Some((n.clone(), config.get(n)?.clone())))
        .collect()
}

/// The version every fake node reports.
pub const FAKE_VERSION: Version = Version::new(8, 0);

/// A member at rest on revision `r1`: it runs what its spec renders to, and no roll is
/// allowed.
pub fn settled_revisions() -> Revisions {
    Revisions {
        desired: Some("r1".into()),
        running: Some("r1".into()),
        allowed: None,
        observed: true,
    }
}
