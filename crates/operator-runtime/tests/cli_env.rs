//! The environment variables behind `CommonArgs`.
//!
//! A separate test binary (its own process) with a single test, because setting
//! environment variables while other threads may read them is unsound.

use std::net::SocketAddr;

use clap::Parser;
use operator_runtime::scope::Scope;
use operator_runtime::{CommonArgs, LogFormat};

#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
}

fn parse(args: &[&str]) -> CommonArgs {
    Cli::try_parse_from(std::iter::once("test").chain(args.iter().copied()))
        .unwrap()
        .common
}

fn set(vars: &[(&str, &str)]) {
    for (key, value) in vars {
        // SAFETY: this process runs only this one test, on one thread.
        unsafe { std::env::set_var(key, value) };
    }
}

#[test]
fn environment_variables_set_every_flag_and_flags_win() {
    set(&[
        ("LOG_FORMAT", "json"),
        ("HTTP_ADDR", "127.0.0.1:9443"),
        ("LEADER_ELECT", "true"),
        ("POD_NAMESPACE", "ops"),
        ("WATCH_NAMESPACES", "team-a,team-b"),
    ]);
    let from_env = parse(&[]);
    assert_eq!(from_env.log_format, LogFormat::Json);
    assert_eq!(
        from_env.http_addr,
        "127.0.0.1:9443".parse::<SocketAddr>().unwrap()
    );
    assert!(from_env.leader_elect);
    assert_eq!(from_env.lease_namespace, "ops");
    assert_eq!(
        from_env.scope(),
        Scope::Namespaces(vec!["team-a".into(), "team-b".into()])
    );

    let flags_win = parse(&["--log-format", "text", "--watch-namespaces", "team-c"]);
    assert_eq!(flags_win.log_format, LogFormat::Text);
    assert_eq!(flags_win.scope(), Scope::Namespaces(vec!["team-c".into()]));

    // Manifests commonly render booleans as "false" and unset namespaces as "".
    set(&[
        ("LEADER_ELECT", "false"),
        ("WATCH_NAMESPACES", ""),
        ("WATCH_NAMESPACE", ""),
    ]);
    let off = parse(&[]);
    assert!(!off.leader_elect);
    assert_eq!(off.scope(), Scope::All);
}
