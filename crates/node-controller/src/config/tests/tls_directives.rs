//! `spec.tls`: TLS only on the same ports, its files and the plain-text port beside it.

use super::*;
use crd_types::template::TlsAuthClients;

fn with_tls(mut s: ValkeyNodeSpec, auth_clients: TlsAuthClients) -> ValkeyNodeSpec {
    s.tls = Some(Tls {
        secret_name: "orders-tls".into(),
        auth_clients,
        plain_text_clients: false,
    });
    s
}

const TLS_FILES: [&str; 3] = [
    "tls-cert-file /etc/valkey-tls/tls.crt",
    "tls-key-file /etc/valkey-tls/tls.key",
    "tls-ca-cert-file /etc/valkey-tls/ca.crt",
];

#[test]
fn standalone_with_tls_serves_tls_only_on_the_same_port() {
    let s = with_tls(
        spec(Mode::Standalone, Announce::Service, &[]),
        TlsAuthClients::Never,
    );
    let c = config(render(&s, Some("10.96.0.7")));
    assert!(c.args.is_empty());
    let mut expected = vec![
        "appendonly yes",
        "appendfsync everysec",
        "repl-diskless-sync-delay 0",
        "shutdown-on-sigterm force",
        "port 0",
        "tls-port 6379",
        "dir /data",
        "protected-mode no",
        // The TLS port is 6379, so the announced port stays right.
        "replica-announce-port 6379",
        "replica-announce-ip 10.96.0.7",
    ];
    expected.extend(TLS_FILES);
    expected.extend(["tls-auth-clients no", "tls-replication yes"]);
    assert_eq!(lines(&c.text), expected);
}

#[test]
fn a_cluster_member_with_tls_announces_its_tls_port() {
    let s = with_tls(
        spec(Mode::Cluster, Announce::Service, &[]),
        TlsAuthClients::Optional,
    );
    let c = config(render(&s, Some("10.96.0.8")));
    let mut expected = vec![
        "appendonly yes",
        "appendfsync everysec",
        "repl-diskless-sync-delay 0",
        "shutdown-on-sigterm force",
        "port 0",
        "tls-port 6379",
        "dir /data",
        "protected-mode no",
        "cluster-enabled yes",
        "cluster-config-file /data/nodes.conf",
        "cluster-port 16379",
        "cluster-announce-bus-port 16379",
        // CLUSTER NODES shows this one with tls-cluster; cluster-announce-port would
        // announce a plain-text port nobody listens on.
        "cluster-announce-tls-port 6379",
        "cluster-announce-ip 10.96.0.8",
    ];
    expected.extend(TLS_FILES);
    expected.extend([
        "tls-auth-clients optional",
        "tls-replication yes",
        "tls-cluster yes",
    ]);
    assert_eq!(lines(&c.text), expected);
    assert!(!c.text.contains("cluster-announce-port"), "{}", c.text);
}

#[test]
fn plain_text_clients_open_port_6380_on_data_nodes_only() {
    let plain_beside = |mode| {
        let mut s = with_tls(spec(mode, Announce::Service, &[]), TlsAuthClients::Never);
        s.tls.as_mut().unwrap().plain_text_clients = true;
        lines(&config(render(&s, Some("10.96.0.8"))).text)
            .into_iter()
            .filter(|l| l.contains("port"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    // A cluster member announces 6380 as its plain-text `port` by default, 6379 as TLS.
    assert_eq!(
        plain_beside(Mode::Cluster),
        [
            "port 6380",
            "tls-port 6379",
            "cluster-port 16379",
            "cluster-announce-bus-port 16379",
            "cluster-announce-tls-port 6379",
        ]
    );
    assert_eq!(
        plain_beside(Mode::Standalone),
        ["port 6380", "tls-port 6379", "replica-announce-port 6379"]
    );
    // Sentinels name the TLS port and serve TLS alone.
    assert_eq!(
        plain_beside(Mode::Sentinel),
        ["port 0", "tls-port 26379", "sentinel announce-port 26379"]
    );
}

#[test]
fn a_sentinel_with_tls_uses_it_to_data_nodes_and_sentinels() {
    let s = with_tls(
        spec(Mode::Sentinel, Announce::Service, &[]),
        TlsAuthClients::Required,
    );
    let c = config(render(&s, Some("10.96.0.10")));
    let mut expected = vec![
        "port 0",
        "tls-port 26379",
        "dir /data",
        "protected-mode no",
        "sentinel announce-port 26379",
        "sentinel announce-ip 10.96.0.10",
    ];
    expected.extend(TLS_FILES);
    expected.extend(["tls-auth-clients yes", "tls-replication yes"]);
    assert_eq!(lines(&c.text), expected);
    assert!(c.text.contains("sentinel monitor"), "still leaves its note");
}

#[test]
fn tls_auth_clients_is_always_rendered() {
    // Valkey's own default is yes: leaving the line out would not mean No.
    for (auth_clients, line) in [
        (TlsAuthClients::Never, "tls-auth-clients no"),
        (TlsAuthClients::Optional, "tls-auth-clients optional"),
        (TlsAuthClients::Required, "tls-auth-clients yes"),
    ] {
        for mode in [Mode::Standalone, Mode::Cluster, Mode::Sentinel] {
            let s = with_tls(spec(mode, Announce::PodIP, &[]), auth_clients);
            let text = config(render(&s, None)).text;
            assert!(lines(&text).contains(&line), "{mode:?}: {text}");
        }
    }
}

#[test]
fn tls_keeps_the_arguments_and_includes() {
    for (mode, args) in [
        (Mode::Standalone, vec!["--replica-announce-ip", "$(POD_IP)"]),
        (Mode::Cluster, vec!["--cluster-announce-ip", "$(POD_IP)"]),
        (
            Mode::Sentinel,
            vec!["--sentinel", "announce-ip", "$(POD_IP)"],
        ),
    ] {
        let s = with_tls(spec(mode, Announce::PodIP, &[]), TlsAuthClients::Never);
        assert_eq!(config(render(&s, None)).args, args);
    }
    let mut s = with_tls(with_auth(Mode::Cluster, true, true), TlsAuthClients::Never);
    s.users_secret_name = Some("orders-users".into());
    let text = config(render(&s, Some("10.96.0.7"))).text;
    let l = lines(&text);
    assert_eq!(
        l[l.len() - 2..],
        [
            "include /tmp/valkey-auth.conf",
            "include /tmp/valkey-users.conf"
        ]
    );
    assert!(l.contains(&"tls-cluster yes"));
}

#[test]
fn without_tls_no_tls_line_is_rendered() {
    for mode in [Mode::Standalone, Mode::Cluster, Mode::Sentinel] {
        let text = config(render(
            &spec(mode, Announce::Service, &[]),
            Some("10.96.0.7"),
        ))
        .text;
        assert!(!text.contains("tls"), "{text}");
        assert!(!text.contains("port 0"), "{text}");
    }
}
