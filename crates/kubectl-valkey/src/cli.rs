//! The command line, as kubectl plugins write it: `kubectl valkey <command> <name> [flags]`,
//! global flags like kubectl's own, an Examples section per command.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::passwords::Which;
use crate::topology::Kind;

#[derive(Parser, Debug)]
#[command(
    name = "kubectl valkey",
    bin_name = "kubectl valkey",
    version,
    about = "Inspect and operate valkey-operator topologies (ValkeyCluster, ValkeyReplication).",
    after_help = "Examples:\n  \
        # Members, shards, conditions and recent events of a topology\n  \
        kubectl valkey status orders\n\n  \
        # Make a replica its shard's primary, and wait for the outcome\n  \
        kubectl valkey switchover orders orders-1-1\n\n  \
        # Collect a bug report, passwords redacted\n  \
        kubectl valkey report orders -o orders-report.tar.gz"
)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// The flags every command takes, as kubectl names them.
#[derive(Args, Debug, Clone, Default)]
pub struct Global {
    /// If present, the namespace scope for this request (default: the context's).
    #[arg(short = 'n', long, global = true)]
    pub namespace: Option<String>,
    /// Path to the kubeconfig file to use (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long, global = true, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The name of the kubeconfig context to use.
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// Which kind the name is, when both a ValkeyCluster and a ValkeyReplication have it.
    #[arg(long, global = true, value_enum)]
    pub kind: Option<Kind>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Show a topology's members, shards, conditions, certificates, volumes and events.
    #[command(after_help = "Examples:\n  \
        kubectl valkey status orders\n  \
        kubectl valkey status sessions -n prod --kind replication")]
    Status {
        /// The ValkeyCluster or ValkeyReplication.
        name: String,
        /// How many of the latest Events to show.
        #[arg(long, default_value_t = 10)]
        events: usize,
    },
    /// Make a member its shard's (or the group's) primary through spec.switchover.
    #[command(after_help = "Examples:\n  \
        # Member 1 of shard 2 of the cluster orders becomes that shard's primary\n  \
        kubectl valkey switchover orders orders-2-1\n\n  \
        # Data node 2 of the replication sessions becomes the primary; do not wait\n  \
        kubectl valkey switchover sessions sessions-2 --wait=false")]
    Switchover {
        /// The ValkeyCluster or ValkeyReplication.
        name: String,
        /// The member (ValkeyNode) to promote, as `status` lists it.
        member: String,
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Hold the operator off a topology (the valkey.rs/paused annotation).
    #[command(after_help = "Examples:\n  kubectl valkey pause orders")]
    Pause {
        /// The ValkeyCluster or ValkeyReplication.
        name: String,
    },
    /// Let the operator act on a paused topology again.
    #[command(after_help = "Examples:\n  kubectl valkey resume orders")]
    Resume {
        /// The ValkeyCluster or ValkeyReplication.
        name: String,
    },
    /// Replace the CA the operator keeps for a topology (the valkey.rs/replace-ca annotation).
    #[command(after_help = "Examples:\n  kubectl valkey replace-ca orders")]
    ReplaceCa {
        /// The ValkeyCluster or ValkeyReplication.
        name: String,
    },
    /// Write a new random password into the Secret the topology reads it from.
    #[command(after_help = "Examples:\n  \
        # The default user's password\n  \
        kubectl valkey rotate-password orders\n\n  \
        # The sentinels' own password of a replication\n  \
        kubectl valkey rotate-password sessions --which sentinel\n\n  \
        # The password of user app of spec.users\n  \
        kubectl valkey rotate-password orders --which user:app")]
    RotatePassword {
        /// The ValkeyCluster or ValkeyReplication.
        name: String,
        /// Whose password: default, sentinel, operator or user:<name>.
        #[arg(long, default_value = "default", value_parser = Which::parse)]
        which: Which,
    },
    /// Collect a tarball for a bug report: objects, events, controller logs and what each
    /// member says, every password redacted.
    #[command(after_help = "Examples:\n  \
        kubectl valkey report orders\n  \
        kubectl valkey report orders -o /tmp/orders.tar.gz --operator-namespace valkey-operator")]
    Report {
        /// The ValkeyCluster or ValkeyReplication.
        name: String,
        /// The file to write (default: <name>-report.tar.gz).
        #[arg(short = 'o', long, value_name = "FILE")]
        output: Option<PathBuf>,
        /// The namespace the controllers run in.
        #[arg(long, default_value = "valkey-operator-system")]
        operator_namespace: String,
        /// Lines of each controller container's log to keep.
        #[arg(long, default_value_t = 5000)]
        log_lines: i64,
    },
}

/// `--wait` and `--timeout`, as `kubectl wait`/`rollout status` take them.
#[derive(Args, Debug, Clone, Copy)]
pub struct WaitArgs {
    /// Wait for the outcome.
    #[arg(
        long,
        default_value_t = true,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true",
        require_equals = true,
        value_name = "BOOL"
    )]
    pub wait: bool,
    /// How long to wait, e.g. 90s, 5m.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub timeout: Duration,
}

/// `30s`, `5m`, `1h` or plain seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => text.split_at(i),
        None => (text, "s"),
    };
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration such as 30s, 5m or 1h"))?;
    let seconds = match unit {
        "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        _ => return Err(format!("{text:?}: the unit is s, m or h")),
    };
    Ok(Duration::from_secs(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn durations_read_like_kubectls() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("12"), Ok(Duration::from_secs(12)));
        assert!(parse_duration("5d").is_err());
        assert!(parse_duration("m").is_err());
    }

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn flags_are_kebab_case_and_global() {
        let cli = Cli::try_parse_from([
            "kubectl-valkey",
            "report",
            "orders",
            "-n",
            "prod",
            "--operator-namespace",
            "ops",
            "-o",
            "x.tar.gz",
        ])
        .unwrap();
        assert_eq!(cli.global.namespace.as_deref(), Some("prod"));
        match cli.command {
            Command::Report {
                operator_namespace,
                output,
                ..
            } => {
                assert_eq!(operator_namespace, "ops");
                assert_eq!(output.unwrap(), PathBuf::from("x.tar.gz"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn switchover_waits_unless_told_not_to() {
        let parse = |extra: &[&str]| {
            let mut args = vec!["kubectl-valkey", "switchover", "orders", "orders-0-1"];
            args.extend_from_slice(extra);
            match Cli::try_parse_from(args).unwrap().command {
                Command::Switchover { wait, .. } => wait,
                other => panic!("{other:?}"),
            }
        };
        let default = parse(&[]);
        assert!(default.wait);
        assert_eq!(default.timeout, Duration::from_secs(300));
        assert!(parse(&["--wait"]).wait);
        let no_wait = parse(&["--wait=false", "--timeout", "30s"]);
        assert!(!no_wait.wait);
        assert_eq!(no_wait.timeout, Duration::from_secs(30));
    }

    #[test]
    fn help_has_usage_and_examples() {
        let mut cmd = Cli::command();
        let help = cmd.render_long_help().to_string();
        assert!(help.contains("Usage:"), "{help}");
        assert!(help.contains("Examples:"), "{help}");
        for sub in [
            "status",
            "switchover",
            "pause",
            "resume",
            "replace-ca",
            "rotate-password",
            "report",
        ] {
            let help = cmd
                .find_subcommand_mut(sub)
                .unwrap()
                .render_long_help()
                .to_string();
            assert!(help.contains("Examples:"), "{sub}: {help}");
        }
    }
}
