//! The live-directive table against what real servers said (valkey-config/).

use std::collections::BTreeMap;

use crd_types::live_config::{LIVE_DIRECTIVES, OLDEST_SUPPORTED, Version, canonical};

const VERSIONS: &[&str] = &["8.0.1", "8.1.1", "9.1.2"];

fn table(file: &str) -> BTreeMap<String, String> {
    // Run time, not env!: a target directory shared by two checkouts keeps the first one's.
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo test");
    let path = format!("{dir}/valkey-config/{file}");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .lines()
        .map(|line| {
            let (name, value) = line.split_once('\t').unwrap_or((line, ""));
            (name.to_string(), value.to_string())
        })
        .collect()
}

#[test]
fn every_live_directive_is_accepted_by_config_set_where_the_table_says() {
    for version in VERSIONS {
        let v = Version::parse(version).unwrap();
        let set = table(&format!("config-set-same-value-{version}.tsv"));
        for d in LIVE_DIRECTIVES {
            let answer = set.get(d.name).map(String::as_str);
            match d.since <= v {
                true => assert_eq!(answer, Some("ok"), "{} on {version}", d.name),
                false => assert_ne!(answer, Some("ok"), "{} on {version}", d.name),
            }
        }
    }
}

#[test]
fn defaults_are_what_each_version_runs_and_config_get_forms_are_fixed_points() {
    for version in VERSIONS {
        let v = Version::parse(version).unwrap();
        let get = table(&format!("config-get-{version}.txt"));
        for d in LIVE_DIRECTIVES.iter().filter(|d| d.since <= v) {
            let reported = &get[d.name];
            if let Some(default) = d.default {
                assert_eq!(default, reported, "default of {} on {version}", d.name);
            }
            // What CONFIG GET reports reads back as itself, so "applied" is a string compare.
            assert_eq!(
                canonical(d.kind, reported).as_deref(),
                Some(reported.as_str()),
                "{} on {version}",
                d.name
            );
        }
    }
}

#[test]
fn the_oldest_fixture_is_the_oldest_supported_version() {
    assert_eq!(Version::parse(VERSIONS[0]).unwrap(), OLDEST_SUPPORTED);
}
