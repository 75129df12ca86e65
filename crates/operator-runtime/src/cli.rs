//! Command-line flags every controller binary shares.

use std::net::SocketAddr;

use clap::{Args, ValueEnum};

use crate::scope::Scope;

/// Flags shared by every controller; `#[command(flatten)]` this into the binary's `Parser`.
///
/// Each flag can also be set from the environment so the Deployment manifests only need
/// `env:` entries (POD_NAMESPACE and POD_NAME come from the downward API).
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct CommonArgs {
    /// Log line format. The level comes from RUST_LOG (default: info).
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Address of the HTTP server for /healthz, /readyz and /metrics. An IPv6 address may
    /// come without brackets (`$(POD_IP):8080` in a manifest, whatever the pod's family).
    #[arg(long, env = "HTTP_ADDR", default_value = "0.0.0.0:8080", value_parser = parse_listen_addr)]
    pub http_addr: SocketAddr,

    /// Run only while holding a coordination.k8s.io Lease named after the controller.
    #[arg(long, env = "LEADER_ELECT")]
    pub leader_elect: bool,

    /// Namespace of the leader-election Lease (normally the pod's own namespace).
    #[arg(long, env = "POD_NAMESPACE", default_value = "valkey-operator-system")]
    pub lease_namespace: String,

    /// Seconds to wait at start for required CRDs that are not served yet, before exiting
    /// with code 3: an install applies the CRDs together with the controllers (Helm does),
    /// and a CRD is served a moment after it is created.
    #[arg(long, env = "CRD_WAIT_SECONDS", default_value_t = 30)]
    pub crd_wait_seconds: u64,

    /// Watch only these namespaces (comma-separated); unset or empty watches all.
    #[arg(long, env = "WATCH_NAMESPACES")]
    pub watch_namespaces: Option<String>,

    /// One namespace to watch, as releases before WATCH_NAMESPACES took it; added to
    /// `--watch-namespaces`.
    #[arg(long, env = "WATCH_NAMESPACE")]
    pub watch_namespace: Option<String>,
}

impl CommonArgs {
    /// The namespaces to restrict watches to, treating empty values as "all namespaces"
    /// (an empty value is the usual way manifests say "cluster-wide").
    pub fn scope(&self) -> Scope {
        let listed = [&self.watch_namespaces, &self.watch_namespace]
            .into_iter()
            .flatten()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(",");
        Scope::parse(&listed)
    }
}

/// `ip:port`, `[ipv6]:port`, or `ipv6:port` without brackets (the port follows the last colon).
fn parse_listen_addr(s: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = s.parse() {
        return Ok(addr);
    }
    let bad = || format!("{s:?} is not an address:port");
    let (ip, port) = s.rsplit_once(':').ok_or_else(bad)?;
    Ok(SocketAddr::new(
        ip.parse().map_err(|_| bad())?,
        port.parse().map_err(|_| bad())?,
    ))
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines, for terminals.
    #[default]
    Text,
    /// One JSON object per line, for log pipelines.
    Json,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        common: CommonArgs,
    }

    fn parse(args: &[&str]) -> Result<CommonArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("test").chain(args.iter().copied())).map(|c| c.common)
    }

    // The environment variables behind these flags are covered in tests/cli_env.rs, which runs
    // in its own process so that setting them cannot race with other tests.
    #[test]
    fn defaults() {
        let args = parse(&[]).unwrap();
        assert_eq!(args.log_format, LogFormat::Text);
        assert_eq!(args.http_addr, "0.0.0.0:8080".parse().unwrap());
        assert!(!args.leader_elect);
        assert_eq!(args.lease_namespace, "valkey-operator-system");
        assert_eq!(args.scope(), Scope::All);
    }

    #[test]
    fn flags_override_defaults() {
        let args = parse(&[
            "--log-format",
            "json",
            "--http-addr",
            "127.0.0.1:9090",
            "--leader-elect",
            "--lease-namespace",
            "ops",
            "--watch-namespaces",
            "team-b,team-a",
        ])
        .unwrap();
        assert_eq!(args.log_format, LogFormat::Json);
        assert_eq!(args.http_addr, "127.0.0.1:9090".parse().unwrap());
        assert!(args.leader_elect);
        assert_eq!(args.lease_namespace, "ops");
        assert_eq!(
            args.scope(),
            Scope::Namespaces(vec!["team-a".into(), "team-b".into()])
        );
    }

    #[test]
    fn empty_watch_namespaces_mean_all_namespaces() {
        let args = parse(&["--watch-namespaces", "", "--watch-namespace", ""]).unwrap();
        assert_eq!(args.scope(), Scope::All);
    }

    #[test]
    fn the_single_namespace_of_older_manifests_joins_the_list() {
        let args = parse(&["--watch-namespace", "team-c"]).unwrap();
        assert_eq!(args.scope(), Scope::Namespaces(vec!["team-c".into()]));
        let args = parse(&[
            "--watch-namespace",
            "team-c",
            "--watch-namespaces",
            "team-a",
        ])
        .unwrap();
        assert_eq!(
            args.scope(),
            Scope::Namespaces(vec!["team-a".into(), "team-c".into()])
        );
    }

    #[test]
    fn rejects_invalid_values() {
        assert!(parse(&["--log-format", "yaml"]).is_err());
        assert!(parse(&["--http-addr", "not-an-address"]).is_err());
        assert!(parse(&["--http-addr", "10.0.0.1"]).is_err());
        assert!(parse(&["--http-addr", ":8080"]).is_err());
    }

    #[test]
    fn listen_addresses_of_either_family() {
        let addr = |s: &str| parse(&["--http-addr", s]).unwrap().http_addr;
        assert_eq!(addr("10.1.2.3:8080"), "10.1.2.3:8080".parse().unwrap());
        assert_eq!(addr("[fd00::5]:8080"), "[fd00::5]:8080".parse().unwrap());
        assert_eq!(addr("fd00::5:8080"), "[fd00::5]:8080".parse().unwrap());
    }
}
