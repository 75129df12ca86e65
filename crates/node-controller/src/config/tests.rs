use super::*;
use std::collections::BTreeMap;

use crd_types::config::ValkeyConfig;
use crd_types::template::{Auth, SecretKeyRef};

mod live_directives;
mod tls_directives;

fn spec(mode: Mode, announce: Announce, config: &[(&str, &str)]) -> ValkeyNodeSpec {
    let mut spec = ValkeyNodeSpec {
        mode,
        ..Default::default()
    };
    spec.template.announce = announce;
    spec.template.config = ValkeyConfig(
        config
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>(),
    );
    spec
}

fn config(r: Result<Rendered, ConfigError>) -> RenderedConfig {
    match r.expect("renders") {
        Rendered::Config(c) => c,
        Rendered::WaitingForEndpoint => panic!("waiting for endpoint"),
    }
}

/// The directive lines, comments and blank lines dropped.
fn lines(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

#[test]
fn directives_the_image_version_does_not_know_are_refused() {
    let mut s = spec(
        Mode::Cluster,
        Announce::PodIP,
        &[("maxmemory", "1gb"), ("cluster-databases", "4")],
    );
    s.template.image = "valkey/valkey:8.1".into();
    let err = render(&s, None).unwrap_err();
    assert_eq!(err.reason(), ConfigValid::UnknownDirective);
    assert!(
        err.to_string().starts_with(
            "valkey/valkey:8.1 runs Valkey 8.1, which does not know cluster-databases"
        ),
        "{err}"
    );
    // The version that has it renders it; a tag naming no version is not judged.
    for image in ["valkey/valkey:9.1.2", "valkey/valkey:latest"] {
        s.template.image = image.into();
        let c = config(render(&s, None));
        assert!(lines(&c.text).contains(&"cluster-databases 4"), "{image}");
    }
    // A typo is refused on every measured version.
    s.template.image = "valkey/valkey:9.1".into();
    s.template.config.0.insert("maxmemroy".into(), "1gb".into());
    assert!(
        render(&s, None)
            .unwrap_err()
            .to_string()
            .contains("not know maxmemroy")
    );
}

#[test]
fn standalone_with_service_announce() {
    let s = spec(
        Mode::Standalone,
        Announce::Service,
        &[("maxmemory", "1gb"), ("appendonly", "yes")],
    );
    let c = config(render(&s, Some("10.96.0.7")));
    assert_eq!(c.file_name, "valkey.conf");
    assert!(c.args.is_empty());
    assert_eq!(
        lines(&c.text),
        [
            // The user set appendonly, so only the other defaults are rendered.
            "appendfsync everysec",
            "repl-diskless-sync-delay 0",
            "shutdown-on-sigterm force",
            "appendonly yes",
            "maxmemory 1gb",
            "port 6379",
            "dir /data",
            "protected-mode no",
            "replica-announce-port 6379",
            "replica-announce-ip 10.96.0.7",
        ]
    );
}

fn with_auth(mode: Mode, password: bool, operator: bool) -> ValkeyNodeSpec {
    let secret = |name: &str| SecretKeyRef {
        name: name.into(),
        key: "password".into(),
    };
    let mut s = spec(mode, Announce::Service, &[]);
    s.auth = Some(Auth {
        password_secret_ref: password.then(|| secret("app")),
        operator_secret_ref: operator.then(|| secret("op")),
        ..Default::default()
    });
    s
}

#[test]
fn data_node_passwords_are_in_neither_the_configmap_nor_the_arguments() {
    for (password, operator) in [(true, true), (true, false), (false, true)] {
        let c = config(render(
            &with_auth(Mode::Cluster, password, operator),
            Some("10.96.0.7"),
        ));
        assert!(c.args.is_empty(), "{:?}", c.args);
        assert!(!c.text.contains("pass"), "{}", c.text);
        assert!(lines(&c.text).contains(&"include /tmp/valkey-auth.conf"));
    }
    let c = config(render(
        &spec(Mode::Cluster, Announce::Service, &[]),
        Some("10.96.0.7"),
    ));
    assert!(!c.text.contains("include"), "no passwords, no include");
}

#[test]
fn the_users_file_is_included_only_by_data_nodes_naming_a_users_secret() {
    let includes = |s: &ValkeyNodeSpec| {
        let c = config(render(s, Some("10.96.0.7")));
        lines(&c.text)
            .into_iter()
            .filter(|l| l.starts_with("include "))
            .map(String::from)
            .collect::<Vec<_>>()
    };
    for mode in [Mode::Standalone, Mode::Cluster] {
        let mut s = spec(mode, Announce::Service, &[]);
        assert_eq!(includes(&s), Vec::<String>::new());
        s.users_secret_name = Some("orders-users".into());
        // Without passwords too: there is no auth file, but there are users.
        assert_eq!(includes(&s), ["include /tmp/valkey-users.conf"]);
        let mut s = with_auth(mode, true, true);
        s.users_secret_name = Some("orders-users".into());
        assert_eq!(
            includes(&s),
            [
                "include /tmp/valkey-auth.conf",
                "include /tmp/valkey-users.conf"
            ]
        );
    }
    let mut sentinel = with_auth(Mode::Sentinel, true, true);
    sentinel.users_secret_name = Some("orders-users".into());
    assert_eq!(includes(&sentinel), Vec::<String>::new());
}

#[test]
fn sentinels_get_no_password_from_their_config_or_arguments() {
    let c = config(render(
        &with_auth(Mode::Sentinel, true, true),
        Some("10.96.0.7"),
    ));
    // Their start-up shell writes them into the config copy (see sentinel_auth_script).
    assert!(c.args.is_empty(), "{:?}", c.args);
    assert!(!c.text.contains("pass"), "{}", c.text);
    assert!(!c.text.contains("include"), "{}", c.text);
}

#[test]
fn pod_ip_announce_with_passwords() {
    let mut s = with_auth(Mode::Cluster, true, false);
    s.template.announce = Announce::PodIP;
    let c = config(render(&s, None));
    assert_eq!(c.args, ["--cluster-announce-ip", "$(POD_IP)"]);
    assert!(lines(&c.text).contains(&"include /tmp/valkey-auth.conf"));
}

#[test]
fn durability_defaults_yield_to_the_user() {
    let defaults = config(render(
        &spec(Mode::Cluster, Announce::Service, &[]),
        Some("10.96.0.8"),
    ));
    assert!(lines(&defaults.text).starts_with(&["appendonly yes", "appendfsync everysec"]));
    let user = spec(Mode::Standalone, Announce::Service, &[("appendonly", "no")]);
    let user_text = config(render(&user, Some("10.96.0.8"))).text;
    let rendered: Vec<&str> = lines(&user_text)
        .into_iter()
        .filter(|l| l.starts_with("appendonly"))
        .collect();
    assert_eq!(rendered, ["appendonly no"]);
    let sentinel = config(render(
        &spec(Mode::Sentinel, Announce::Service, &[]),
        Some("10.96.0.8"),
    ));
    assert!(!sentinel.text.contains("appendonly"));
    // A SIGTERM stops a data node even while it writes its first AOF (see SERVER_DEFAULTS).
    assert!(lines(&defaults.text).contains(&"shutdown-on-sigterm force"));
    assert!(lines(&user_text).contains(&"shutdown-on-sigterm force"));
    assert!(!sentinel.text.contains("shutdown-on-sigterm"));
}

#[test]
fn cluster_with_service_announce() {
    let s = spec(Mode::Cluster, Announce::Service, &[]);
    let c = config(render(&s, Some("10.96.0.8")));
    assert_eq!(
        lines(&c.text),
        [
            "appendonly yes",
            "appendfsync everysec",
            "repl-diskless-sync-delay 0",
            "shutdown-on-sigterm force",
            "port 6379",
            "dir /data",
            "protected-mode no",
            "cluster-enabled yes",
            "cluster-config-file /data/nodes.conf",
            "cluster-port 16379",
            "cluster-announce-bus-port 16379",
            "cluster-announce-port 6379",
            "cluster-announce-ip 10.96.0.8",
        ]
    );
    assert!(!c.text.contains("# User directives"));
}

#[test]
fn pod_ip_announce_goes_to_the_command_line() {
    let c = config(render(&spec(Mode::Cluster, Announce::PodIP, &[]), None));
    assert_eq!(c.args, ["--cluster-announce-ip", "$(POD_IP)"]);
    assert!(!c.text.contains("announce-ip"));
    assert!(c.text.contains("cluster-announce-port 6379\n"));

    let c = config(render(&spec(Mode::Standalone, Announce::PodIP, &[]), None));
    assert_eq!(c.args, ["--replica-announce-ip", "$(POD_IP)"]);

    let c = config(render(&spec(Mode::Sentinel, Announce::PodIP, &[]), None));
    assert_eq!(c.args, ["--sentinel", "announce-ip", "$(POD_IP)"]);
}

#[test]
fn pod_ip_announce_ignores_a_published_cluster_ip() {
    let c = config(render(
        &spec(Mode::Standalone, Announce::PodIP, &[]),
        Some("10.96.0.9"),
    ));
    assert!(!c.text.contains("10.96.0.9"));
}

#[test]
fn service_announce_without_cluster_ip_waits() {
    for mode in [Mode::Standalone, Mode::Cluster, Mode::Sentinel] {
        assert_eq!(
            render(&spec(mode, Announce::Service, &[]), None),
            Ok(Rendered::WaitingForEndpoint)
        );
    }
}

#[test]
fn cluster_ip_is_read_from_the_endpoint_status() {
    use crd_types::node::{EndpointStatus, ValkeyNodeStatus};
    let mut node = ValkeyNode::new("a", ValkeyNodeSpec::default());
    assert_eq!(cluster_ip(&node), None);
    node.status = Some(ValkeyNodeStatus {
        endpoint: Some(EndpointStatus {
            cluster_ip: Some("None".into()),
            ..Default::default()
        }),
        ..Default::default()
    });
    assert_eq!(cluster_ip(&node), None, "a headless Service has no address");
    node.status
        .as_mut()
        .unwrap()
        .endpoint
        .as_mut()
        .unwrap()
        .cluster_ip = Some("10.0.0.1".into());
    assert_eq!(cluster_ip(&node), Some("10.0.0.1"));
}

#[test]
fn sentinel_config() {
    let s = spec(
        Mode::Sentinel,
        Announce::Service,
        &[("sentinel resolve-hostnames", "yes")],
    );
    let c = config(render(&s, Some("10.96.0.10")));
    assert_eq!(c.file_name, "sentinel.conf");
    assert_eq!(
        lines(&c.text),
        [
            "sentinel resolve-hostnames yes",
            "port 26379",
            "dir /data",
            "protected-mode no",
            "sentinel announce-port 26379",
            "sentinel announce-ip 10.96.0.10",
        ]
    );
    assert!(c.text.contains("sentinel monitor"), "leaves a note");
}

#[test]
fn owned_directives_are_refused_in_any_case() {
    let s = spec(
        Mode::Standalone,
        Announce::Service,
        &[("Port", "7000"), ("maxmemory", "1gb"), ("DIR", "/tmp")],
    );
    let err = render(&s, Some("10.0.0.1")).unwrap_err();
    assert_eq!(
        err,
        ConfigError::OwnedDirectives(vec!["DIR".into(), "Port".into()])
    );
    assert_eq!(err.reason(), ConfigValid::OwnedDirective);
    assert!(err.to_string().contains("DIR, Port"), "{err}");
}

#[test]
fn owned_directives_are_refused_before_waiting_for_the_endpoint() {
    let s = spec(
        Mode::Cluster,
        Announce::Service,
        &[("cluster-enabled", "no")],
    );
    assert!(matches!(
        render(&s, None),
        Err(ConfigError::OwnedDirectives(_))
    ));
}

#[test]
fn sentinel_state_directives_are_owned() {
    let s = spec(
        Mode::Sentinel,
        Announce::PodIP,
        &[
            ("sentinel monitor", "m 1.2.3.4 6379 2"),
            ("SENTINEL myid", "x"),
        ],
    );
    assert_eq!(
        render(&s, None).unwrap_err(),
        ConfigError::OwnedDirectives(vec!["SENTINEL myid".into(), "sentinel monitor".into()])
    );
}

#[test]
fn invalid_names_and_values_are_refused() {
    let s = spec(
        Mode::Standalone,
        Announce::PodIP,
        &[
            ("max memory", "1gb"),
            ("bad\nname", "x"),
            ("maxmemory-policy", "\"allkeys-lru"),
            ("timeout", "'0'x"),
            ("Hz", "10"),
            ("hz", "20"),
        ],
    );
    let err = render(&s, None).unwrap_err();
    assert_eq!(err.reason(), ConfigValid::InvalidDirective);
    let ConfigError::InvalidDirectives(problems) = err else {
        unreachable!()
    };
    let names: Vec<&str> = problems.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "bad\nname",
            "hz",
            "max memory",
            "maxmemory-policy",
            "timeout"
        ]
    );
}

#[test]
fn values_are_split_like_valkey_conf_and_requoted() {
    let s = spec(
        Mode::Standalone,
        Announce::PodIP,
        &[
            ("client-output-buffer-limit", "normal 0 0 0"),
            ("save", ""),
            ("rename-command", "FLUSHALL \"\""),
            ("notify-keyspace-events", "'KEA'"),
            ("syslog-ident", "\"my \\\"valkey\\\"\""),
        ],
    );
    let c = config(render(&s, None));
    let l = lines(&c.text);
    // After the four defaults.
    assert_eq!(
        &l[4..9],
        [
            "client-output-buffer-limit normal 0 0 0",
            "notify-keyspace-events KEA",
            "rename-command FLUSHALL \"\"",
            "save \"\"",
            "syslog-ident \"my \\\"valkey\\\"\"",
        ]
    );
}

#[test]
fn a_newline_in_a_value_cannot_inject_a_directive() {
    let s = spec(
        Mode::Standalone,
        Announce::PodIP,
        &[("save", "1gb\nport 7000")],
    );
    let c = config(render(&s, None));
    // Same line: Valkey refuses the extra arguments instead of changing the port.
    assert!(c.text.contains("save 1gb port 7000\n"));
    let s = spec(
        Mode::Standalone,
        Announce::PodIP,
        &[("save", "\"1gb\nport 7000\"")],
    );
    let c = config(render(&s, None));
    assert!(c.text.contains("save \"1gb\\nport 7000\"\n"));
    assert_eq!(
        lines(&c.text)
            .iter()
            .filter(|l| l.starts_with("port"))
            .count(),
        1
    );
}

#[test]
fn rendering_is_deterministic() {
    let s = spec(Mode::Cluster, Announce::Service, &[("b", "2"), ("a", "1")]);
    assert_eq!(
        render(&s, Some("10.0.0.1")),
        render(&s.clone(), Some("10.0.0.1"))
    );
}

#[test]
fn a_memory_only_node_writes_no_append_only_file_and_no_rdb() {
    use crd_types::node::NodeCluster;
    use crd_types::template::{MemoryOnly, ScratchVolume};

    let memory_only = |mut s: ValkeyNodeSpec| {
        s.template.memory_only = Some(MemoryOnly {
            volume: ScratchVolume::EmptyDir,
        });
        s
    };
    let mut member = memory_only(spec(Mode::Cluster, Announce::Service, &[]));
    member.cluster = Some(NodeCluster {
        shard_peers: vec!["10.96.0.9".into()],
    });
    let c = config(render(&member, Some("10.96.0.8")));
    let text = lines(&c.text);
    let of = |name: &str| -> Vec<&str> {
        text.iter()
            .copied()
            .filter(|l| l.split(' ').next() == Some(name))
            .collect()
    };
    assert_eq!(of("appendonly"), ["appendonly no"]);
    assert_eq!(of("save"), ["save \"\""]);
    assert_eq!(of("repl-diskless-load"), ["repl-diskless-load on-empty-db"]);
    let context = c.cluster.expect("a memory-only member's cluster context");
    assert!(
        context.contains("self 10.96.0.8\npeer 10.96.0.9\n"),
        "{context}"
    );

    // Not told any peer yet, the context is there all the same: the template never changes
    // when it is told. Any other node has none.
    member.cluster = None;
    assert!(config(render(&member, Some("10.96.0.8"))).cluster.is_some());
    let plain = spec(Mode::Cluster, Announce::Service, &[]);
    assert_eq!(config(render(&plain, Some("10.96.0.8"))).cluster, None);

    // The user's own durability directives are the operator's here, in any spelling.
    let user = memory_only(spec(
        Mode::Standalone,
        Announce::Service,
        &[
            ("APPENDONLY", "yes"),
            ("save", "60 1"),
            ("repl-diskless-load", "swapdb"),
        ],
    ));
    let err = render(&user, Some("10.96.0.8")).unwrap_err();
    assert_eq!(
        err,
        ConfigError::OwnedDirectives(vec!["APPENDONLY".into(), "save".into()])
    );
    let user = memory_only(spec(
        Mode::Standalone,
        Announce::Service,
        &[("repl-diskless-load", "swapdb")],
    ));
    let text = config(render(&user, Some("10.96.0.8"))).text;
    assert!(
        lines(&text).contains(&"repl-diskless-load swapdb"),
        "{text}"
    );
    assert!(!text.contains("on-empty-db"), "{text}");
}
