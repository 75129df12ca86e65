//! Live directives (see [`crd_types::live_config`]): the members whose running values differ
//! from what the spec asks, and what to set on each. Compared in `CONFIG GET`'s form, so a
//! member already at the asked value is left alone and a value set by hand is put back.
//!
//! A member whose version is unknown is skipped until it is known. A spec value of the wrong
//! kind sets nothing here: node-controller refuses to render it (ConfigValid=False on the
//! member), so no pod ever starts with it either.

use crd_types::config::ValkeyConfig;
use crd_types::live_config;

use crate::shared::member_facts::LiveConfig;

/// What to set, per member: each `(member, what it runs)` compared with `config`; members
/// already as asked are left out. Shared by both topologies.
pub fn live_changes<'a>(
    config: &ValkeyConfig,
    members: impl IntoIterator<Item = (&'a str, Option<&'a LiveConfig>)>,
) -> Vec<(String, Vec<(String, String)>)> {
    members
        .into_iter()
        .filter_map(|(member, running)| {
            let running = running?;
            let desired = live_config::desired(config, running.version).ok()?;
            let differ: Vec<(String, String)> = desired
                .into_iter()
                // A directive it did not report is one it does not know: nothing to set.
                .filter(|(name, value)| running.values.get(*name).is_some_and(|v| v != value))
                .map(|(name, value)| (name.to_string(), value))
                .collect();
            (!differ.is_empty()).then(|| (member.to_string(), differ))
        })
        .collect()
}

/// A person's description of a set of live changes, for Progressing and Events.
pub fn describe(changes: &[(String, Vec<(String, String)>)]) -> String {
    let mut names: Vec<&str> = changes
        .iter()
        .flat_map(|(_, pairs)| pairs.iter().map(|(n, _)| n.as_str()))
        .collect();
    names.sort_unstable();
    names.dedup();
    let members: Vec<&str> = changes.iter().map(|(m, _)| m.as_str()).collect();
    format!(
        "setting {} live (CONFIG SET, no restart) on {}",
        names.join(", "),
        members.join(", ")
    )
}
