//! Directives Valkey changes at runtime with `CONFIG SET`, per version.
//!
//! A change to only these reaches the running members of a topology without a restart:
//! topology-controller sets them on every member, and node-controller keeps them out of the
//! pod's revision (they go to a file under a fixed key that the server includes at start, so
//! a restart agrees). Every other directive still rolls the members one at a time.
//!
//! The table is conservative: a directive is listed only when `CONFIG SET` accepts it on
//! every version given, and only with a value kind whose form `CONFIG GET` reports can be
//! predicted ([`canonical`]), so the controller can tell "already applied" from "to apply".
//! A directive left out is not lost: it takes the restart path.

use std::collections::BTreeMap;
use std::fmt;

pub use crate::versions::{OLDEST_SUPPORTED, Version};

/// How Valkey reads a directive's value, and so how `CONFIG GET` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A decimal integer.
    Integer,
    /// Bytes, with the units of valkey.conf (`1k` = 1000, `1kb` = 1024, up to `gb`).
    Memory,
    /// `yes` or `no`.
    Bool,
    /// One word out of a fixed set, reported in lower case.
    Enum,
    /// Words out of this set, reported in lower case and in its order (`default`, Valkey's
    /// name for none, only alone).
    Flags(&'static [&'static str]),
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Kind::Integer => f.write_str("an integer"),
            Kind::Memory => f.write_str("a size in bytes (units k, kb, m, mb, g, gb)"),
            Kind::Bool => f.write_str("yes or no"),
            Kind::Enum => f.write_str("a single word"),
            Kind::Flags(words) => write!(f, "one or more of {}", words.join(", ")),
        }
    }
}

/// One directive that can change at runtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveDirective {
    pub name: &'static str,
    pub kind: Kind,
    /// The first version whose `CONFIG SET` accepts it.
    pub since: Version,
    /// What a server runs when the config does not name it (the same on every supported
    /// version), in `CONFIG GET`'s form: a directive removed from the spec goes back to it,
    /// unless node-controller renders its own default ([`crate::config::SERVER_DEFAULTS`]).
    /// `None`: never reset (Valkey lowers `maxclients` to what the open-file limit allows).
    pub default: Option<&'static str>,
}

impl LiveDirective {
    /// What a member rendered by node-controller runs when the spec does not name it:
    /// node-controller's own default ([`crate::config::SERVER_DEFAULTS`]), else Valkey's.
    pub fn operator_default(&self) -> Option<&'static str> {
        crate::config::SERVER_DEFAULTS
            .iter()
            .find(|(name, _)| *name == self.name)
            .map(|(_, value)| *value)
            .or(self.default)
    }
}

const fn live(name: &'static str, kind: Kind, default: Option<&'static str>) -> LiveDirective {
    LiveDirective {
        name,
        kind,
        since: OLDEST_SUPPORTED,
        default,
    }
}

const fn live_since(
    name: &'static str,
    kind: Kind,
    default: Option<&'static str>,
    since: Version,
) -> LiveDirective {
    LiveDirective {
        name,
        kind,
        since,
        default,
    }
}

/// Every directive applied live, sorted by name.
pub const LIVE_DIRECTIVES: &[LiveDirective] = &[
    live("active-expire-effort", Kind::Integer, Some("1")),
    live("busy-reply-threshold", Kind::Integer, Some("5000")),
    live("cluster-allow-reads-when-down", Kind::Bool, Some("no")),
    live("cluster-allow-replica-migration", Kind::Bool, Some("yes")),
    live("cluster-migration-barrier", Kind::Integer, Some("1")),
    live("cluster-node-timeout", Kind::Integer, Some("15000")),
    live("cluster-replica-validity-factor", Kind::Integer, Some("10")),
    live("cluster-require-full-coverage", Kind::Bool, Some("yes")),
    live("hash-max-listpack-entries", Kind::Integer, Some("512")),
    live("hz", Kind::Integer, Some("10")),
    // Read only at start before 9.x (measured: 8.0.1 and 8.1.1 refuse it, 9.1.2 takes it).
    live_since("io-threads", Kind::Integer, Some("1"), Version::new(9, 1)),
    live("latency-monitor-threshold", Kind::Integer, Some("0")),
    live("lazyfree-lazy-eviction", Kind::Bool, Some("yes")),
    live("lazyfree-lazy-expire", Kind::Bool, Some("yes")),
    live("lazyfree-lazy-server-del", Kind::Bool, Some("yes")),
    live("lazyfree-lazy-user-del", Kind::Bool, Some("yes")),
    live("lazyfree-lazy-user-flush", Kind::Bool, Some("yes")),
    live("lfu-decay-time", Kind::Integer, Some("1")),
    live("lfu-log-factor", Kind::Integer, Some("10")),
    live("loglevel", Kind::Enum, Some("notice")),
    live("maxclients", Kind::Integer, None),
    live("maxmemory", Kind::Memory, Some("0")),
    live("maxmemory-eviction-tenacity", Kind::Integer, Some("10")),
    live("maxmemory-policy", Kind::Enum, Some("noeviction")),
    live("maxmemory-samples", Kind::Integer, Some("5")),
    live("min-replicas-max-lag", Kind::Integer, Some("10")),
    live("min-replicas-to-write", Kind::Integer, Some("0")),
    live("proto-max-bulk-len", Kind::Memory, Some("536870912")),
    live("repl-backlog-size", Kind::Memory, Some("10485760")),
    live("repl-diskless-sync", Kind::Bool, Some("yes")),
    live("repl-diskless-sync-delay", Kind::Integer, Some("5")),
    live("repl-timeout", Kind::Integer, Some("60")),
    live("replica-lazy-flush", Kind::Bool, Some("yes")),
    live("set-max-intset-entries", Kind::Integer, Some("512")),
    live(
        "shutdown-on-sigterm",
        Kind::Flags(SHUTDOWN_FLAGS),
        Some("default"),
    ),
    live("slowlog-log-slower-than", Kind::Integer, Some("10000")),
    live("slowlog-max-len", Kind::Integer, Some("128")),
    live("tcp-keepalive", Kind::Integer, Some("300")),
    live("timeout", Kind::Integer, Some("0")),
    live("zset-max-listpack-entries", Kind::Integer, Some("128")),
];

/// The table entry for `name` (any case), whatever the version.
pub fn find(name: &str) -> Option<&'static LiveDirective> {
    let name = name.to_ascii_lowercase();
    LIVE_DIRECTIVES.iter().find(|d| d.name == name)
}

/// The directives that change live on a server of `version`.
pub fn live_on(version: Version) -> impl Iterator<Item = &'static LiveDirective> {
    LIVE_DIRECTIVES.iter().filter(move |d| d.since <= version)
}

/// Whether `name` changes live on a server of `version`.
pub fn is_live(name: &str, version: Version) -> bool {
    find(name).is_some_and(|d| d.since <= version)
}

/// Whether `name` changes live on every supported version: what node-controller, which
/// does not know the version a pod will run, may keep out of the revision.
pub fn is_live_everywhere(name: &str) -> bool {
    is_live(name, OLDEST_SUPPORTED)
}

/// What every live directive should read on a member running `version`, in `CONFIG GET`'s
/// form: the config's value, else the default (directives without one are left alone when
/// the config does not name them). Fails with `(name, why)` for values Valkey would refuse.
pub fn desired(
    config: &crate::config::ValkeyConfig,
    version: Version,
) -> Result<BTreeMap<&'static str, String>, Vec<(String, String)>> {
    let mut values = BTreeMap::new();
    let mut problems = Vec::new();
    for d in live_on(version) {
        let given = config
            .0
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(d.name));
        match given {
            Some((name, value)) => match canonical(d.kind, value) {
                Some(v) => {
                    values.insert(d.name, v);
                }
                None => problems.push((name.clone(), format!("{value:?} is not {}", d.kind))),
            },
            None => {
                if let Some(default) = d.operator_default() {
                    values.insert(d.name, default.to_string());
                }
            }
        }
    }
    match problems.is_empty() {
        true => Ok(values),
        false => Err(problems),
    }
}

/// How `CONFIG GET` reports `value` once set, or `None` when Valkey would refuse it.
pub fn canonical(kind: Kind, value: &str) -> Option<String> {
    let v = value.trim();
    match kind {
        Kind::Integer => v.parse::<i64>().ok().map(|n| n.to_string()),
        Kind::Memory => memory_bytes(v).map(|n| n.to_string()),
        Kind::Bool => match v.to_ascii_lowercase().as_str() {
            "yes" => Some("yes".into()),
            "no" => Some("no".into()),
            _ => None,
        },
        Kind::Enum => {
            (!v.is_empty() && !v.contains(char::is_whitespace)).then(|| v.to_ascii_lowercase())
        }
        Kind::Flags(words) => {
            let given: Vec<String> = v.split_whitespace().map(str::to_ascii_lowercase).collect();
            if given.is_empty() || given.iter().any(|w| !words.contains(&w.as_str())) {
                return None;
            }
            // Valkey refuses to save and not save at once.
            if given.iter().any(|w| w == "save") && given.iter().any(|w| w == "nosave") {
                return None;
            }
            let set: Vec<&str> = words
                .iter()
                .filter(|w| **w != "default" && given.iter().any(|g| g == *w))
                .copied()
                .collect();
            Some(match set.is_empty() {
                true => "default".to_string(),
                false => set.join(" "),
            })
        }
    }
}

/// `shutdown-on-sigterm`'s flags, in the order `CONFIG GET` reports them (measured on 8.0.1).
const SHUTDOWN_FLAGS: &[&str] = &["default", "save", "nosave", "now", "force"];

/// valkey.conf's memory units: a plain number is bytes; k/m/g are powers of 1000, kb/mb/gb
/// powers of 1024, in any case.
fn memory_bytes(v: &str) -> Option<u64> {
    let lower = v.to_ascii_lowercase();
    let split = lower
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(lower.len());
    let (digits, unit) = lower.split_at(split);
    let n: u64 = digits.parse().ok()?;
    let factor: u64 = match unit {
        "" | "b" => 1,
        "k" => 1_000,
        "kb" => 1 << 10,
        "m" => 1_000_000,
        "mb" => 1 << 20,
        "g" => 1_000_000_000,
        "gb" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(factor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directive_the_spec_does_not_name_goes_to_the_rendered_default_first() {
        let desired = desired(&Default::default(), Version::new(8, 0)).unwrap();
        assert_eq!(desired["repl-diskless-sync-delay"], "0");
        assert_eq!(desired["repl-timeout"], "60");
    }

    #[test]
    fn versions_read_the_first_two_numbers() {
        assert_eq!(Version::parse("8.1.1"), Some(Version::new(8, 1)));
        assert_eq!(Version::parse("9.0.0-rc1"), Some(Version::new(9, 0)));
        assert_eq!(Version::parse("8.0"), Some(Version::new(8, 0)));
        assert_eq!(Version::parse("eight"), None);
        assert!(Version::new(8, 1) < Version::new(9, 0));
        assert_eq!(Version::new(9, 1).to_string(), "9.1");
    }

    #[test]
    fn the_table_is_sorted_and_has_no_duplicates() {
        let names: Vec<&str> = LIVE_DIRECTIVES.iter().map(|d| d.name).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(names, sorted);
    }

    #[test]
    fn no_operator_owned_directive_is_live() {
        for d in LIVE_DIRECTIVES {
            assert!(
                !crate::config::OPERATOR_OWNED_DIRECTIVES.contains(&d.name),
                "{}",
                d.name
            );
        }
    }

    #[test]
    fn live_by_version() {
        assert!(is_live("maxmemory", Version::new(8, 0)));
        assert!(is_live("MaxMemory", Version::new(9, 1)));
        assert!(is_live_everywhere("maxmemory-policy"));
        // Read only at start on every version.
        assert!(!is_live_everywhere("databases"));
        assert!(!is_live("databases", Version::new(9, 1)));
        // Durability settings take the restart path (see node-controller's defaults).
        assert!(!is_live_everywhere("appendonly"));
        // Unknown to the table: the restart path.
        assert!(!is_live_everywhere("no-such-directive"));
    }

    #[test]
    fn desired_values_come_from_the_config_else_the_default() {
        let config = crate::config::ValkeyConfig(
            [
                ("MaxMemory".to_string(), "1gb".to_string()),
                ("databases".to_string(), "4".to_string()),
            ]
            .into(),
        );
        let on_8 = desired(&config, Version::new(8, 0)).unwrap();
        assert_eq!(on_8["maxmemory"], "1073741824");
        assert_eq!(on_8["maxmemory-policy"], "noeviction");
        assert!(!on_8.contains_key("databases"), "not live");
        assert!(!on_8.contains_key("maxclients"), "no default to go back to");
        assert!(!on_8.contains_key("io-threads"), "not live before 9.1");
        assert_eq!(
            desired(&config, Version::new(9, 1)).unwrap()["io-threads"],
            "1"
        );
        let bad = crate::config::ValkeyConfig([("timeout".to_string(), "soon".to_string())].into());
        let problems = desired(&bad, Version::new(8, 0)).unwrap_err();
        assert_eq!(problems[0].0, "timeout");
        assert!(problems[0].1.contains("an integer"), "{}", problems[0].1);
    }

    #[test]
    fn canonical_forms_match_config_get() {
        assert_eq!(
            canonical(Kind::Memory, "2gb").as_deref(),
            Some("2147483648")
        );
        assert_eq!(
            canonical(Kind::Memory, "100MB").as_deref(),
            Some("104857600")
        );
        assert_eq!(canonical(Kind::Memory, "1k").as_deref(), Some("1000"));
        assert_eq!(canonical(Kind::Memory, "5").as_deref(), Some("5"));
        assert_eq!(canonical(Kind::Memory, "1tb"), None);
        assert_eq!(canonical(Kind::Memory, "-1"), None);
        assert_eq!(canonical(Kind::Integer, " 300 ").as_deref(), Some("300"));
        assert_eq!(canonical(Kind::Integer, "-1").as_deref(), Some("-1"));
        assert_eq!(canonical(Kind::Integer, "1e3"), None);
        assert_eq!(canonical(Kind::Bool, "YES").as_deref(), Some("yes"));
        assert_eq!(canonical(Kind::Bool, "true"), None);
        assert_eq!(
            canonical(Kind::Enum, "allkeys-LRU").as_deref(),
            Some("allkeys-lru")
        );
        assert_eq!(canonical(Kind::Enum, "two words"), None);
        // As 8.0.1 answered CONFIG GET after each CONFIG SET.
        let flags = Kind::Flags(SHUTDOWN_FLAGS);
        assert_eq!(canonical(flags, "FORCE").as_deref(), Some("force"));
        assert_eq!(canonical(flags, "force now").as_deref(), Some("now force"));
        assert_eq!(
            canonical(flags, "nosave force").as_deref(),
            Some("nosave force")
        );
        assert_eq!(canonical(flags, "default").as_deref(), Some("default"));
        assert_eq!(canonical(flags, "default now").as_deref(), Some("now"));
        assert_eq!(canonical(flags, "soon"), None);
        assert_eq!(canonical(flags, "save nosave"), None);
        assert_eq!(canonical(flags, " "), None);
        assert!(flags.to_string().contains("nosave"));
    }

    #[test]
    fn sigterm_always_stops_a_topology_member_without_a_restart() {
        // Live, so adding the operator's default to running members rolls none of them.
        let sigterm = find("shutdown-on-sigterm").unwrap();
        assert_eq!(sigterm.operator_default(), Some("force"));
        let none = crate::config::ValkeyConfig::default();
        for version in [Version::new(8, 0), Version::new(9, 1)] {
            assert_eq!(
                desired(&none, version).unwrap()["shutdown-on-sigterm"],
                "force"
            );
        }
    }
}
