//! TLS from the Secret `spec.tls` names (cert-manager layout): the directives a node renders
//! and the flags every `valkey-cli` in its pod takes. See docs/tls-design.md for what was
//! measured on the Valkey builds we ship.
//!
//! A TLS node serves TLS only (`port 0`) on the port a plain-text node uses, so Services,
//! NetworkPolicies and the TCP probes do not change. A data node asked to
//! (`tls.plainTextClients`) also serves clients in plain text on port 6380. Replication, the
//! cluster bus and Sentinel's links use TLS too: a TLS and a plain-text member cannot talk
//! to each other, which is why `spec.tls` is set at creation only (but for that port).
//! Every member presents `tls.crt` as its client certificate as well (Valkey's default
//! without `tls-client-cert-file`): the cluster bus always asks for one, whatever
//! `tls-auth-clients` says.
//!
//! Without `spec.tls` nothing here adds a byte: existing nodes do not roll.

use crd_types::names::ports;
use crd_types::node::Mode;
use crd_types::template::{TLS_CA_KEY, TLS_CERT_KEY, TLS_DIR, TLS_KEY_KEY, Tls, TlsAuthClients};

/// The server certificate, also presented as the client certificate.
pub fn cert_file() -> String {
    format!("{TLS_DIR}/{TLS_CERT_KEY}")
}

/// The certificate's private key.
pub fn key_file() -> String {
    format!("{TLS_DIR}/{TLS_KEY_KEY}")
}

/// The CA that peers' and clients' certificates must chain to.
pub fn ca_file() -> String {
    format!("{TLS_DIR}/{TLS_CA_KEY}")
}

/// The node's TLS directives, after the ports and announce addresses: the files, whether
/// clients must show a certificate (always rendered: Valkey's default is `yes`), and TLS
/// for replication (a sentinel's links to data nodes and to other sentinels too) and, in
/// Cluster mode, the bus.
pub(super) fn directives(tls: &Tls, mode: Mode) -> Vec<(&'static str, String)> {
    let mut lines = vec![
        ("tls-cert-file", cert_file()),
        ("tls-key-file", key_file()),
        ("tls-ca-cert-file", ca_file()),
        ("tls-auth-clients", tls.auth_clients.directive().to_string()),
        ("tls-replication", "yes".to_string()),
    ];
    if mode == Mode::Cluster {
        lines.push(("tls-cluster", "yes".to_string()));
    }
    lines
}

/// The directive announcing a cluster member's client port. With `tls-cluster yes` the
/// port in CLUSTER NODES (and `tls-port` in CLUSTER SHARDS) is `cluster-announce-tls-port`;
/// `cluster-announce-port` would be announced as a plain-text `port` nobody listens on
/// (measured on 8.0.1 and 9.1.2), so a TLS member leaves it at its default, `port`'s 0,
/// which CLUSTER SHARDS then leaves out.
pub(super) fn cluster_announce_port_directive(tls: Option<&Tls>) -> &'static str {
    match tls {
        Some(_) => "cluster-announce-tls-port",
        None => "cluster-announce-port",
    }
}

/// `port` and, with TLS, `tls-port` for a node serving on `port`; with `plain_beside`
/// (see [`crd_types::ValkeyNodeSpec::serves_plain_text_beside_tls`]) plain text on
/// [`ports::VALKEY_PLAIN`] as well. A cluster member then announces that one as its `port`
/// (its default), and a cluster sends each client to the port of the client's own kind.
pub(super) fn listen(
    tls: Option<&Tls>,
    port: i32,
    plain_beside: bool,
) -> Vec<(&'static str, String)> {
    match tls {
        Some(_) => {
            let plain = if plain_beside { ports::VALKEY_PLAIN } else { 0 };
            vec![("port", plain.to_string()), ("tls-port", port.to_string())]
        }
        None => vec![("port", port.to_string())],
    }
}

/// valkey-cli's flags for a TLS node: the CA and, always, the client certificate, so it
/// works with `tls-auth-clients yes` and against the other members (sentinels included).
/// valkey-cli checks the chain only, not the names, so dialling an IP address works.
pub fn cli_flags() -> String {
    format!(
        "--tls --cacert {} --cert {} --key {}",
        ca_file(),
        cert_file(),
        key_file()
    )
}

/// `script` with [`cli_flags`] after every `valkey-cli` it runs, for a node with `tls`;
/// unchanged (not a byte added) without. The pod builder passes every shell line of the
/// containers that can run valkey-cli through this (see
/// [`crate::workload::pod::pod_template`]), so no call site can miss the flags.
pub fn cli_over_tls(script: &str, tls: Option<&Tls>) -> String {
    match tls {
        Some(_) => script.replace(CLI, &format!("{CLI}{} ", cli_flags())),
        None => script.to_string(),
    }
}

/// The URL scheme redis_exporter dials a node with (`REDIS_ADDR`, and so the keys of its
/// password file): `rediss` is TLS.
pub fn exporter_scheme(tls: Option<&Tls>) -> &'static str {
    match tls {
        Some(_) => "rediss",
        None => "redis",
    }
}

/// Whether the exporter presents the node's certificate: only when the node asks clients
/// for one (`authClients` Optional or Required). Otherwise it gets neither the certificate nor
/// the key, and dials TLS without checking the server (see the exporter's environment).
pub fn exporter_presents_certificate(tls: Option<&Tls>) -> bool {
    tls.is_some_and(|t| t.auth_clients != TlsAuthClients::Never)
}

/// How often a TLS server that can (Valkey 9.1 and later) looks at its certificate files
/// and reloads them when they changed: the kubelet updates a Secret volume up to about a
/// minute after the Secret, so a renewal is served within seconds of that. A look is a
/// `stat` of three files.
pub const AUTO_RELOAD_SECONDS: u32 = 10;

/// The start shell's lines giving a TLS server `tls-auto-reload-interval` when it has it:
/// 9.1 does; 8.x refuses the directive (and so would not start), 9.0 was not measured, and a
/// server whose version cannot be read gets nothing. An argument, not a config line: a
/// sentinel's config copy is rebuilt from the rendered file at each pod start (which keeps
/// only `sentinel` lines), so a line Sentinel rewrites into it never outlives the image.
/// `$0` is the server program, `$@` its arguments. Data nodes get it too: a ValkeyNode made
/// by hand then reloads a renewed certificate on 9.1 with no operator to tell it.
pub fn auto_reload_script() -> String {
    format!(
        "case \"$(\"$0\" --version 2>/dev/null)\" in *' v=7.'*|*' v=8.'*|*' v=9.0.'*|'') ;; \
         *) set -- \"$@\" --tls-auto-reload-interval {AUTO_RELOAD_SECONDS};; esac"
    )
}

/// How a script runs valkey-cli: the program, then its arguments.
const CLI: &str = "valkey-cli ";

#[cfg(test)]
mod tests {
    use super::*;
    use crd_types::template::TlsAuthClients;

    #[test]
    fn flags_name_the_mounted_files() {
        assert_eq!(
            cli_flags(),
            "--tls --cacert /etc/valkey-tls/ca.crt --cert /etc/valkey-tls/tls.crt \
             --key /etc/valkey-tls/tls.key"
        );
    }

    #[test]
    fn every_valkey_cli_takes_the_flags_and_nothing_else_changes() {
        let script = "a=$(timeout 2 valkey-cli --no-auth-warning -h x ping)\n\
                      valkey-cli -h \"$POD_IP\" -p 6379 ping | grep -q PONG";
        assert_eq!(cli_over_tls(script, None), script);
        let tls = Tls {
            secret_name: "orders-tls".into(),
            auth_clients: TlsAuthClients::Required,
            plain_text_clients: false,
        };
        let over = cli_over_tls(script, Some(&tls));
        assert_eq!(
            over,
            format!(
                "a=$(timeout 2 valkey-cli {f} --no-auth-warning -h x ping)\n\
                 valkey-cli {f} -h \"$POD_IP\" -p 6379 ping | grep -q PONG",
                f = cli_flags()
            )
        );
        assert_eq!(
            cli_over_tls("valkey-server /etc/valkey/valkey.conf", Some(&tls)),
            "valkey-server /etc/valkey/valkey.conf"
        );
    }

    /// The arguments the server gets after [`auto_reload_script`], for a server saying
    /// `version` (`None`: one that prints nothing).
    fn args_after_auto_reload(version: Option<&str>) -> String {
        let dir = tempfile::tempdir().unwrap();
        let server = dir.path().join("valkey-server");
        let says = version
            .map(|v| format!("echo 'Valkey server v={v} sha=00000000:0 bits=64'"))
            .unwrap_or_default();
        crate::test_support::write_executable(&server, &format!("#!/bin/sh\n{says}\n"));
        let script = format!("{}\necho \"$@\"", auto_reload_script());
        let out = std::process::Command::new("sh")
            .args([
                "-c",
                &script,
                server.to_str().unwrap(),
                "/data/sentinel.conf",
            ])
            .arg("--sentinel")
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    #[test]
    fn only_a_server_known_to_reload_gets_the_interval() {
        let with = "/data/sentinel.conf --sentinel --tls-auto-reload-interval 10";
        let without = "/data/sentinel.conf --sentinel";
        for (version, args) in [
            (Some("8.0.1"), without),
            (Some("8.1.1"), without),
            (Some("9.0.0"), without),
            (None, without),
            (Some("9.1.2"), with),
            (Some("10.0.0"), with),
        ] {
            assert_eq!(args_after_auto_reload(version), args, "{version:?}");
        }
    }
}
