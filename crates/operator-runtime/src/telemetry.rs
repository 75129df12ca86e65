//! Logging set-up: one global tracing subscriber, filtered by RUST_LOG.

use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::{FromEnvError, LevelFilter};

use crate::cli::LogFormat;

/// Why logging could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("invalid RUST_LOG: {0}")]
    InvalidFilter(#[from] FromEnvError),
    #[error("cannot install the log subscriber: {0}")]
    AlreadyInstalled(#[from] tracing_subscriber::util::TryInitError),
}

/// Installs the global subscriber writing `format` lines to stdout.
///
/// The level comes from RUST_LOG and defaults to `info`. An invalid RUST_LOG is an error
/// rather than silently ignored, so a typo does not hide the logs someone asked for.
/// Fatal errors are additionally written to stderr by [`crate::run`], so stdout carries
/// only log lines.
pub fn init(format: LogFormat) -> Result<(), TelemetryError> {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;

    let filter = env_filter()?;
    let registry = tracing_subscriber::registry().with(filter);
    match format {
        LogFormat::Text => registry
            // Colour only on a terminal: log files and `kubectl logs` get plain text.
            .with(
                tracing_subscriber::fmt::layer()
                    .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
                    .with_writer(std::io::stdout),
            )
            .try_init()?,
        LogFormat::Json => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .flatten_event(true)
                    .with_current_span(true)
                    .with_span_list(false)
                    .with_writer(std::io::stdout),
            )
            .try_init()?,
    }
    Ok(())
}

fn env_filter() -> Result<EnvFilter, FromEnvError> {
    EnvFilter::builder()
        .with_default_directive(LevelFilter::INFO.into())
        .from_env()
}
