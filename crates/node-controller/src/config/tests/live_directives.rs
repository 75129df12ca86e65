//! Live directives: which go to live.conf (set with CONFIG SET by topology-controller) and
//! which stay in the revisioned file.

use super::*;

#[test]
fn a_gated_data_node_renders_live_directives_apart() {
    let mut s = spec(
        Mode::Cluster,
        Announce::PodIP,
        &[
            ("maxmemory", "1gb"),
            ("databases", "4"),
            ("io-threads", "2"),
        ],
    );
    s.rollout_policy = RolloutPolicy::Gated;
    let c = config(render(&s, None));
    let text = lines(&c.text);
    // Restart-only here, and io-threads is live only from 9.1 (the version is unknown).
    assert!(text.contains(&"databases 4"), "{text:?}");
    assert!(text.contains(&"io-threads 2"), "{text:?}");
    assert!(!c.text.contains("maxmemory"), "{}", c.text);
    assert!(text.contains(&"include /etc/valkey/live.conf"), "{text:?}");
    // The rendered default of a live directive is live too: adding one (the SIGTERM
    // default, say) to running members rolls none of them.
    assert!(!c.text.contains("shutdown-on-sigterm"), "{}", c.text);
    assert_eq!(
        lines(c.live.as_deref().unwrap()),
        [
            "repl-diskless-sync-delay 0",
            "shutdown-on-sigterm force",
            "maxmemory 1gb"
        ]
    );

    // A new live value changes only the live file, so the revision stays.
    let mut changed = s.clone();
    changed
        .template
        .config
        .0
        .insert("maxmemory".into(), "2gb".into());
    let c2 = config(render(&changed, None));
    assert_eq!(c2.text, c.text);
    assert_eq!(
        lines(c2.live.as_deref().unwrap()),
        [
            "repl-diskless-sync-delay 0",
            "shutdown-on-sigterm force",
            "maxmemory 2gb"
        ]
    );
    // So does naming a live default.
    changed
        .template
        .config
        .0
        .insert("repl-diskless-sync-delay".into(), "3".into());
    let c3 = config(render(&changed, None));
    assert_eq!(c3.text, c.text);
    assert_eq!(
        lines(c3.live.as_deref().unwrap()),
        [
            "shutdown-on-sigterm force",
            "maxmemory 2gb",
            "repl-diskless-sync-delay 3"
        ]
    );

    // Without live directives in the spec the file is still there (with the live
    // defaults), so adding one later restarts nothing either.
    let mut none = s.clone();
    none.template.config.0.remove("maxmemory");
    let c4 = config(render(&none, None));
    assert_eq!(c4.text, c.text);
    assert_eq!(
        lines(c4.live.as_deref().unwrap()),
        ["repl-diskless-sync-delay 0", "shutdown-on-sigterm force"]
    );
}

#[test]
fn live_directives_stay_inline_where_nobody_sets_them_live() {
    // A hand-made node (Immediate) and a sentinel: no parent runs CONFIG SET on them.
    let s = spec(Mode::Standalone, Announce::PodIP, &[("maxmemory", "1gb")]);
    let c = config(render(&s, None));
    assert!(lines(&c.text).contains(&"maxmemory 1gb"));
    assert_eq!(c.live, None);
    assert!(!c.text.contains("live.conf"));
    let mut sentinel = spec(Mode::Sentinel, Announce::PodIP, &[]);
    sentinel.rollout_policy = RolloutPolicy::Gated;
    assert_eq!(config(render(&sentinel, None)).live, None);
    // Gated but no topology's member: nobody to set them.
    let mut gated = spec(Mode::Standalone, Announce::PodIP, &[("maxmemory", "1gb")]);
    gated.rollout_policy = RolloutPolicy::Gated;
    assert_eq!(config(render(&gated, None)).live, None);
    // A ValkeyReplication's data node is one.
    gated.replication = Some(crd_types::node::NodeReplication {
        primary_name: "cache".into(),
        ..Default::default()
    });
    let c = config(render(&gated, None));
    assert_eq!(
        lines(c.live.as_deref().unwrap()),
        [
            "repl-diskless-sync-delay 0",
            "shutdown-on-sigterm force",
            "maxmemory 1gb"
        ]
    );
}

#[test]
fn live_directive_values_are_checked_by_kind() {
    let s = spec(
        Mode::Standalone,
        Announce::PodIP,
        &[("maxmemory", "lots"), ("timeout", "30")],
    );
    match render(&s, None) {
        Err(ConfigError::InvalidDirectives(problems)) => {
            assert_eq!(problems.len(), 1, "{problems:?}");
            assert_eq!(problems[0].0, "maxmemory");
            assert!(problems[0].1.contains("size in bytes"), "{}", problems[0].1);
        }
        other => panic!("{other:?}"),
    }
}
