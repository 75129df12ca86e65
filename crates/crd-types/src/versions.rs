//! Valkey versions: the one an image runs (by its tag), whether a version can take over the
//! data files another wrote, and the config directives each version knows.
//!
//! Everything here is measured on real servers (`valkey-config/`, see its README): a version
//! that was not measured is not judged, so an unknown directive or data format never blocks
//! it; it only loses the early refusal.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::LazyLock;

use crate::config::ValkeyConfig;

/// A Valkey version as `major.minor` (patch releases change neither the config table nor
/// the data format).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
}

impl Version {
    pub const fn new(major: u32, minor: u32) -> Self {
        Self { major, minor }
    }

    /// Reads `8.1.1`, `9.0.0-rc1` or `8.0`: the first two numbers.
    pub fn parse(text: &str) -> Option<Self> {
        let mut parts = text.trim().split(['.', '-']);
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        Some(Self { major, minor })
    }

    /// The version an image's tag names: `valkey/valkey:8.1`, `valkey/valkey:8.1.1-alpine`,
    /// `host:5000/valkey/valkey:9.1@sha256:…`. `None` when the tag names no version
    /// (`latest`, `unstable`, `8-alpine`, a digest alone): the running servers will say.
    pub fn of_image(image: &str) -> Option<Self> {
        let without_digest = image.split('@').next()?;
        let last_component = without_digest.rsplit('/').next()?;
        let (_, tag) = last_component.split_once(':')?;
        Self::parse(tag)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// The oldest Valkey version the operator supports.
pub const OLDEST_SUPPORTED: Version = Version::new(8, 0);

/// The RDB format each version writes, from the version that introduced it on, as the
/// first bytes of a saved `dump.rdb` say (`REDIS0011`, `VALKEY080`). A server loads files
/// of its own format or older and refuses newer ones, so a version may take over the data of
/// another only if its format is not older. Measured: `valkey-config/rdb-formats.tsv`.
pub const RDB_FORMATS: &[(Version, u32)] = &[(Version::new(8, 0), 11), (Version::new(9, 0), 80)];

/// The RDB format `version` writes; `None` below the oldest known.
pub fn rdb_format(version: Version) -> Option<u32> {
    RDB_FORMATS
        .iter()
        .rev()
        .find(|(since, _)| *since <= version)
        .map(|(_, format)| *format)
}

/// Why members running `running` must not be restarted on `target`, if they must not: it
/// cannot read the data files (RDB, also what a full sync sends) one of them writes. A tag
/// below the oldest known format is not judged: custom images often number their own tags.
pub fn refuse_target(target: Version, running: &[Version]) -> Option<String> {
    let target_format = rdb_format(target)?;
    let newest = running
        .iter()
        .filter(|v| rdb_format(**v).is_some_and(|f| f > target_format))
        .max()?;
    Some(format!(
        "Valkey {target} cannot read the data files of Valkey {newest} (RDB format {} is newer \
         than its {target_format}): a member restarted on it would not load its data, and \
         replicas could not sync from a {newest} primary",
        rdb_format(*newest).unwrap_or_default()
    ))
}

/// A measured version's directive names, as its `CONFIG GET *` lists them plus those it
/// accepts only in a config file.
struct Known {
    version: Version,
    names: BTreeSet<&'static str>,
}

fn names(lists: &[&'static str]) -> BTreeSet<&'static str> {
    lists
        .iter()
        .flat_map(|list| list.lines())
        .map(|line| line.split('\t').next().unwrap_or(line).trim())
        .filter(|name| !name.is_empty())
        .collect()
}

static KNOWN: LazyLock<Vec<Known>> = LazyLock::new(|| {
    vec![
        Known {
            version: Version::new(8, 0),
            names: names(&[
                include_str!("../valkey-config/config-get-8.0.1.txt"),
                include_str!("../valkey-config/startup-accepted-8.0.1.txt"),
            ]),
        },
        Known {
            version: Version::new(8, 1),
            names: names(&[
                include_str!("../valkey-config/config-get-8.1.1.txt"),
                include_str!("../valkey-config/startup-accepted-8.1.1.txt"),
            ]),
        },
        Known {
            version: Version::new(9, 1),
            names: names(&[
                include_str!("../valkey-config/config-get-9.1.2.txt"),
                include_str!("../valkey-config/startup-accepted-9.1.2.txt"),
            ]),
        },
    ]
});

/// Whether a server of `version` starts with `name` in its config file; `None` for a version
/// that was not measured.
pub fn knows_directive(version: Version, name: &str) -> Option<bool> {
    let known = KNOWN.iter().find(|k| k.version == version)?;
    Some(known.names.contains(name.to_ascii_lowercase().as_str()))
}

/// The directives of a server `config` that a `version` server would refuse to start with
/// (sorted, as spelled); `None` for a version that was not measured.
pub fn unknown_directives(config: &ValkeyConfig, version: Version) -> Option<Vec<String>> {
    let known = KNOWN.iter().find(|k| k.version == version)?;
    Some(
        config
            .0
            .keys()
            .filter(|name| !known.names.contains(name.to_ascii_lowercase().as_str()))
            .cloned()
            .collect(),
    )
}

/// A person's sentence for `unknown` directives refused on `version` (from `image`).
pub fn describe_unknown(unknown: &[String], version: Version, image: &str) -> String {
    let them = if unknown.len() == 1 { "it" } else { "them" };
    format!(
        "{image} runs Valkey {version}, which does not know {}: a server would refuse to \
         start with {them}; remove {them} or pick an image whose version has {them}",
        unknown.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_from_image_tags() {
        let v = Version::of_image;
        assert_eq!(v("valkey/valkey:8.1"), Some(Version::new(8, 1)));
        assert_eq!(v("valkey/valkey:8.0.1-bookworm"), Some(Version::new(8, 0)));
        assert_eq!(
            v("docker.io/valkey/valkey:9.1.2-alpine"),
            Some(Version::new(9, 1))
        );
        assert_eq!(
            v("localhost:5000/valkey/valkey:9.1@sha256:0123abcd"),
            Some(Version::new(9, 1))
        );
        assert_eq!(v("localhost:5000/valkey/valkey"), None);
        assert_eq!(v("localhost:5000/valkey/valkey@sha256:0123abcd"), None);
        assert_eq!(v("valkey/valkey:latest"), None);
        assert_eq!(v("valkey/valkey:8-alpine"), None);
        assert_eq!(v("valkey/valkey:unstable"), None);
    }

    #[test]
    fn formats_by_version() {
        assert_eq!(rdb_format(Version::new(7, 2)), None);
        assert_eq!(rdb_format(Version::new(8, 0)), Some(11));
        assert_eq!(rdb_format(Version::new(8, 1)), Some(11));
        assert_eq!(rdb_format(Version::new(9, 1)), Some(80));
        assert_eq!(rdb_format(Version::new(10, 0)), Some(80));
    }

    #[test]
    fn downgrades_past_a_format_and_unsupported_versions_are_refused() {
        let v = Version::new;
        // Upgrades, and moves within one format, go on.
        assert_eq!(refuse_target(v(8, 1), &[v(8, 0), v(8, 1)]), None);
        assert_eq!(refuse_target(v(9, 1), &[v(8, 0)]), None);
        assert_eq!(refuse_target(v(8, 0), &[v(8, 1)]), None);
        assert_eq!(refuse_target(v(9, 0), &[v(9, 1)]), None);
        assert_eq!(refuse_target(v(8, 0), &[]), None);
        let why = refuse_target(v(8, 1), &[v(8, 1), v(9, 1), v(9, 0)]).unwrap();
        assert!(why.starts_with("Valkey 8.1 cannot read the data files of Valkey 9.1"));
        assert!(why.contains("RDB format 80 is newer than its 11"), "{why}");
        // A tag below every known format (a custom image's own numbering) is not judged.
        assert_eq!(refuse_target(v(1, 4), &[v(9, 1)]), None);
    }

    #[test]
    fn directives_known_per_measured_version() {
        let config = |names: &[&str]| {
            ValkeyConfig(
                names
                    .iter()
                    .map(|n| (n.to_string(), "1".to_string()))
                    .collect(),
            )
        };
        let v80 = Version::new(8, 0);
        let v81 = Version::new(8, 1);
        let v91 = Version::new(9, 1);
        let asked = config(&[
            "maxmemory",
            "commandlog-slow-execution-max-len",
            "cluster-databases",
        ]);
        assert_eq!(
            unknown_directives(&asked, v80).unwrap(),
            ["cluster-databases", "commandlog-slow-execution-max-len"]
        );
        assert_eq!(
            unknown_directives(&asked, v81).unwrap(),
            ["cluster-databases"]
        );
        assert!(unknown_directives(&asked, v91).unwrap().is_empty());
        // Not measured: not judged.
        assert_eq!(unknown_directives(&asked, Version::new(9, 0)), None);
        // Case does not matter to Valkey; file-only and deprecated names still start.
        let file_only = config(&["MaxMemory", "rename-command", "include", "dynamic-hz"]);
        for v in [v80, v81, v91] {
            assert!(unknown_directives(&file_only, v).unwrap().is_empty(), "{v}");
        }
        assert_eq!(knows_directive(v81, "maxmemry"), Some(false));
        assert_eq!(
            unknown_directives(&config(&["maxmemry"]), v91).unwrap(),
            ["maxmemry"]
        );
        let why = describe_unknown(&["cluster-databases".into()], v81, "valkey/valkey:8.1");
        assert_eq!(
            why,
            "valkey/valkey:8.1 runs Valkey 8.1, which does not know cluster-databases: a server \
             would refuse to start with it; remove it or pick an image whose version has it"
        );
    }
}
