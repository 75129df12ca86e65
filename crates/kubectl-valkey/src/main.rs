//! `kubectl valkey`: a kubectl plugin for valkey-operator topologies (docs/kubectl-plugin.md).
//! It changes only what a user could with kubectl: spec.switchover, the valkey.rs/paused and
//! valkey.rs/replace-ca annotations, and password Secrets.

mod archive;
mod cli;
mod commands;
mod kube_api;
mod members;
mod passwords;
mod patches;
mod redact;
mod status_view;
mod table;
mod topology;

use clap::Parser;

use cli::{Cli, Command};
use kube_api::Session;

async fn run(cli: Cli) -> anyhow::Result<()> {
    let session = Session::connect(&cli.global).await?;
    match cli.command {
        Command::Status { name, events } => commands::status::run(&session, &name, events).await,
        Command::Switchover { name, member, wait } => {
            commands::switchover::run(&session, &name, &member, wait).await
        }
        Command::Pause { name } => commands::pause::run(&session, &name, true).await,
        Command::Resume { name } => commands::pause::run(&session, &name, false).await,
        Command::ReplaceCa { name } => commands::replace_ca::run(&session, &name).await,
        Command::RotatePassword { name, which } => {
            commands::rotate::run(&session, &name, &which).await
        }
        Command::Report {
            name,
            output,
            operator_namespace,
            log_lines,
        } => {
            let options = commands::report::Options {
                output,
                operator_namespace,
                log_lines,
            };
            commands::report::run(&session, &name, options).await
        }
    }
}

/// kubectl's form of a failure: `error: ...` on one line, exit code 1.
fn fail(message: &str) -> ! {
    eprintln!("error: {}", message.replace('\n', " "));
    std::process::exit(1);
}

/// An error and its causes on one line, each cause once (kube's errors repeat their
/// sources in their own text).
fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => e.exit(),
        // `kubectl valkey` alone: the help, as kubectl alone prints its own.
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            print!("{}", e.render());
            std::process::exit(0);
        }
        Err(e) => {
            let rendered = e.render().to_string();
            let first = rendered.lines().next().unwrap_or_default();
            fail(first.strip_prefix("error: ").unwrap_or(first));
        }
    };
    if let Err(e) = run(cli).await {
        fail(&one_line(&e));
    }
}
