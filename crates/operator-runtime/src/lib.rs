//! Process plumbing shared by the valkey-operator controller binaries (node-controller,
//! service-controller, topology-controller, pvc-resizer). No reconcile logic lives here.
//!
//! A binary parses its flags (flattening [`CommonArgs`]) and hands its controller to
//! [`run`], which:
//!
//! 1. sets up logging ([`telemetry::init`]; RUST_LOG, text or JSON on stdout);
//! 2. builds a Kubernetes client from KUBECONFIG or the in-cluster service account;
//! 3. runs the [`preflight`] checks: API server reachable, required CRDs served (each
//!    try bounded by [`preflight::PREFLIGHT_TIMEOUT`]; missing CRDs are waited for up to
//!    `--crd-wait-seconds`, as an install may apply them together with the controllers);
//! 4. serves `/healthz`, `/readyz` and `/metrics` on `--http-addr`;
//! 5. with `--leader-elect`, waits until it holds the Lease `<lease-namespace>/<name>`;
//! 6. runs the controller until it ends, SIGTERM/SIGINT arrives, or leadership is lost;
//! 7. returns the process exit code.
//!
//! | exit code | meaning |
//! | --- | --- |
//! | 0 | clean shutdown after SIGTERM/SIGINT |
//! | 1 ([`EXIT_RUNTIME_FAILURE`]) | the controller failed or stopped on its own, or leadership was lost |
//! | 2 ([`EXIT_CONFIG`]) | bad configuration or the API server is unreachable (no kubeconfig, timeout, RBAC, `--http-addr` in use) |
//! | 3 ([`EXIT_CRDS_MISSING`]) | a required CRD is not installed |
//!
//! Every failure prints exactly one line, `error: <controller>: <what and how to fix it>`,
//! to stderr, whatever the log format; log events go to stdout. With `--log-format json`
//! the same message is also logged as a JSON error event for log pipelines.
//!
//! Inside the controller:
//! - [`controller::run`] drives a kube-runtime `Controller` with graceful shutdown on
//!   `ctx.shutdown`, the reconcile metrics, and for a failed reconcile a log line, a Warning
//!   Event and a retry whose delay grows per object (the reconcile error type implements
//!   [`ErrorKind`], the metrics label). It watches through [`controller::Guarded`], so an
//!   object that does not deserialize fails alone. [`controller::run_watching`] builds the
//!   `Controller` for one namespaced resource and waits for its first list; use
//!   [`controller::run`] directly when one binary runs several controllers;
//! - [`controller::ready_when`] turns `/readyz` to 200 once the watches have listed;
//! - [`Context::scope`] is the namespaces watched (`--watch-namespaces`); [`Context::touched`]
//!   their objects of a kind as they change, for `owns_stream` and `watches_stream`;
//! - [`apply()`] / [`apply_status()`] with `ctx.field_manager` for every write, each API
//!   call's error named with [`ApiResultExt::on`] (an [`ApiError`]: operation, object,
//!   cause);
//! - [`Context::events`] publishes Events with the controller's typed reasons
//!   ([`event_reasons!`]).
//!
//! A binary's whole `main.rs` then looks like this:
//!
//! ```no_run
//! use std::{process::ExitCode, sync::Arc, time::Duration};
//!
//! use clap::Parser;
//! use k8s_openapi::api::core::v1::ConfigMap; // stands in for a valkey.rs type
//! use kube::runtime::controller::Action;
//! use operator_runtime::controller::{self, ReconcileContext};
//! use operator_runtime::{ApiError, CommonArgs, Context, ErrorKind, RequiredCrd};
//!
//! #[derive(Parser)]
//! struct Cli {
//!     #[command(flatten)]
//!     common: CommonArgs,
//! }
//!
//! #[tokio::main]
//! async fn main() -> ExitCode {
//!     let cli = Cli::parse();
//!     let required = [RequiredCrd::new("valkey.rs", "v1alpha1", "valkeynodes")];
//!     operator_runtime::run("node-controller", "valkey-operator/node", cli.common, &required, run)
//!         .await
//! }
//!
//! async fn run(ctx: Context) -> Result<(), std::convert::Infallible> {
//!     // `|c| c` adds nothing; `|c| c.owns(...)` would watch what the objects own.
//!     controller::run_watching::<ConfigMap, _, _, _, _>(&ctx, |c| c, Arc::new(()), reconcile).await;
//!     Ok(())
//! }
//!
//! async fn reconcile(object: Arc<ConfigMap>, ctx: Arc<ReconcileContext<()>>) -> Result<Action, Error> {
//!     // ... operator_runtime::apply(&api, &name, &desired, ctx.runtime.field_manager).await?;
//!     # let _ = (object, ctx);
//!     Ok(Action::requeue(Duration::from_secs(300)))
//! }
//!
//! #[derive(Debug, thiserror::Error)]
//! enum Error {
//!     #[error(transparent)]
//!     Api(#[from] ApiError),
//! }
//!
//! impl ErrorKind for Error {
//!     fn kind(&self) -> std::borrow::Cow<'static, str> {
//!         match self {
//!             Error::Api(e) => e.kind(),
//!         }
//!     }
//! }
//! ```

pub mod apply;
pub mod cli;
pub mod controller;
pub mod error;
pub mod events;
pub mod http;
mod leader;
pub mod metrics;
pub mod preflight;
pub mod scope;
pub mod shutdown;
pub mod telemetry;

use std::fmt::{Debug, Display};
use std::future::Future;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::BoxStream;
use kube::Client;
use kube::runtime::watcher;
use tokio::net::TcpListener;

use crate::scope::{Scope, Watched};

pub use apply::{apply, apply_status, first_difference, is_applied};
pub use cli::{CommonArgs, LogFormat};
pub use error::{ApiError, ApiResultExt, ObjectName, Op};
pub use events::{EventReason, Publisher};
pub use http::Readiness;
pub use leader::LeaderError;
pub use metrics::{ErrorKind, Metrics, ReconcileTimer};
pub use preflight::{PreflightError, RequiredCrd};
pub use shutdown::Shutdown;

/// Exit code: the controller failed or stopped on its own, or leadership was lost.
pub const EXIT_RUNTIME_FAILURE: u8 = 1;
/// Exit code: bad configuration, or the API server is unreachable.
pub const EXIT_CONFIG: u8 = 2;
/// Exit code: a required CRD is not installed.
pub const EXIT_CRDS_MISSING: u8 = 3;

/// How long the controller may take to finish in-flight reconciles after SIGTERM. With the
/// Lease release and HTTP stop (5s each at most) this stays below the kubelet's default
/// 30s grace period, so we exit before being killed.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(15);
/// How long the HTTP server may take to stop once everything else has.
const HTTP_STOP_GRACE: Duration = Duration::from_secs(5);

/// What a running controller gets from [`run`].
#[derive(Clone)]
pub struct Context {
    /// The controller's name, e.g. `node-controller`; also the metrics label and Lease name.
    pub name: &'static str,
    /// The server-side-apply field manager for every write, e.g. `valkey-operator/node`.
    pub field_manager: &'static str,
    pub client: Client,
    /// Publishes Events as this controller.
    pub events: Publisher,
    pub metrics: Arc<Metrics>,
    pub readiness: Readiness,
    /// The namespaces watched (`WATCH_NAMESPACES`).
    pub scope: Scope,
    /// Triggered on SIGTERM/SIGINT; pass `shutdown.wait()` to `graceful_shutdown_on`.
    pub shutdown: Shutdown,
}

impl Context {
    /// The watched namespaces' objects of `K` as they change: for `Controller::owns_stream`
    /// and `watches_stream` (see [`Scope::touched`]).
    pub fn touched<K: Watched>(
        &self,
        config: watcher::Config,
    ) -> BoxStream<'static, Result<K, watcher::Error>> {
        self.scope.touched(&self.client, config)
    }
}

/// Runs a controller binary from start-up checks to exit code; see the crate docs.
///
/// `controller` receives the [`Context`] and should return when `ctx.shutdown` fires.
/// Its error is reported with `{:#}`, so an `anyhow::Error` prints its whole chain.
pub async fn run<F, Fut, E>(
    name: &'static str,
    field_manager: &'static str,
    args: CommonArgs,
    required_crds: &[RequiredCrd],
    controller: F,
) -> ExitCode
where
    F: FnOnce(Context) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: Display,
{
    let log_format = args.log_format;
    if let Err(error) = telemetry::init(log_format) {
        // No logger to report through; stderr is all there is.
        eprintln!("error: {name}: {}", one_line(&error.to_string()));
        return ExitCode::from(EXIT_CONFIG);
    }
    match run_until_stopped(name, field_manager, args, required_crds, controller).await {
        Ok(()) => {
            tracing::info!(controller = name, "stopped");
            ExitCode::SUCCESS
        }
        Err(failure) => {
            report(log_format, name, &failure.message);
            ExitCode::from(failure.code)
        }
    }
}

/// Writes the one stderr line; in JSON mode also a JSON event, because a pipeline that
/// parses stdout as JSON would not pick up the plain line. In text mode the stderr line
/// alone is enough and a second copy on stdout would just repeat it in `kubectl logs`.
fn report(log_format: LogFormat, name: &str, message: &str) {
    let message = one_line(message);
    if log_format == LogFormat::Json {
        tracing::error!(controller = name, "{message}");
    }
    eprintln!("error: {name}: {message}");
}

/// A fatal outcome of [`run`]: its exit code and its one-line explanation.
#[derive(Debug)]
struct Failure {
    code: u8,
    message: String,
}

impl Failure {
    fn config(message: impl Into<String>) -> Self {
        Self {
            code: EXIT_CONFIG,
            message: message.into(),
        }
    }

    fn runtime(message: impl Into<String>) -> Self {
        Self {
            code: EXIT_RUNTIME_FAILURE,
            message: message.into(),
        }
    }
}

impl From<PreflightError> for Failure {
    fn from(error: PreflightError) -> Self {
        let code = match error {
            PreflightError::MissingCrds(_) => EXIT_CRDS_MISSING,
            PreflightError::Unreachable(_)
            | PreflightError::Timeout(_)
            | PreflightError::Discovery { .. } => EXIT_CONFIG,
        };
        Self {
            code,
            message: error.to_string(),
        }
    }
}

impl From<LeaderError> for Failure {
    fn from(error: LeaderError) -> Self {
        let code = match error {
            LeaderError::Client(_) | LeaderError::Setup { .. } => EXIT_CONFIG,
            LeaderError::Lost { .. } | LeaderError::RenewFailed { .. } => EXIT_RUNTIME_FAILURE,
        };
        Self {
            code,
            message: error.to_string(),
        }
    }
}

async fn run_until_stopped<F, Fut, E>(
    name: &'static str,
    field_manager: &'static str,
    args: CommonArgs,
    required_crds: &[RequiredCrd],
    controller: F,
) -> Result<(), Failure>
where
    F: FnOnce(Context) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: Display,
{
    // Installed first so a SIGTERM during start-up still ends the process cleanly.
    let shutdown = Shutdown::on_signals()
        .map_err(|e| Failure::runtime(format!("cannot install signal handlers: {e}")))?;

    let config = kube::Config::infer().await.map_err(|e| {
        Failure::config(format!(
            "cannot load a Kubernetes client configuration: {} (set KUBECONFIG or run in-cluster with a service account)",
            error_chain(&e)
        ))
    })?;
    let client = Client::try_from(config.clone()).map_err(|e| {
        Failure::config(format!(
            "cannot build the Kubernetes client: {} (check KUBECONFIG or the in-cluster service account)",
            describe_kube_error(&e)
        ))
    })?;

    tokio::select! {
        checked = preflight::check(
            &client,
            required_crds,
            Duration::from_secs(args.crd_wait_seconds),
        ) => checked?,
        () = shutdown.wait() => return Ok(()),
    }

    let metrics = Arc::new(
        Metrics::new().map_err(|e| Failure::runtime(format!("cannot create metrics: {e}")))?,
    );
    metrics.set_leader(name, false);
    let readiness = Readiness::new();
    let listener = TcpListener::bind(args.http_addr).await.map_err(|e| {
        Failure::config(format!(
            "cannot listen on {}: {e} (check --http-addr / HTTP_ADDR)",
            args.http_addr
        ))
    })?;
    let server = tokio::spawn(http::serve(
        listener,
        http::router(metrics.clone(), readiness.clone()),
        shutdown.clone(),
    ));
    tracing::info!(controller = name, http_addr = %args.http_addr, "serving /healthz, /readyz and /metrics");

    let context = Context {
        name,
        field_manager,
        events: Publisher::new(client.clone(), name).counted_in(metrics.clone()),
        client,
        metrics,
        readiness,
        scope: args.scope(),
        shutdown: shutdown.clone(),
    };
    let result = lead_and_run(&config, &args, context, controller).await;

    // Whatever ended the controller, the HTTP server goes too.
    shutdown.trigger();
    match tokio::time::timeout(HTTP_STOP_GRACE, server).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(error))) => tracing::warn!(%error, "HTTP server failed"),
        Ok(Err(error)) => tracing::warn!(%error, "HTTP server task failed"),
        Err(_) => tracing::warn!("HTTP server did not stop in time"),
    }
    result
}

/// Waits for leadership if `--leader-elect` is on, then runs the controller.
async fn lead_and_run<F, Fut, E>(
    config: &kube::Config,
    args: &CommonArgs,
    context: Context,
    controller: F,
) -> Result<(), Failure>
where
    F: FnOnce(Context) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: Display,
{
    let shutdown = context.shutdown.clone();
    let readiness = context.readiness.clone();
    let election = if args.leader_elect {
        let identity = leader::holder_identity(
            std::env::var("POD_NAME").ok().as_deref(),
            leader::hostname().as_deref(),
        );
        let election = tokio::select! {
            election = leader::LeaderElection::new(config, &args.lease_namespace, context.name, identity) => election?,
            () = shutdown.wait() => return Ok(()),
        };
        // A standby is healthy and ready to take over. Reporting it unready would also
        // deadlock rolling updates: the new pod waits for the Lease the old pod holds,
        // and the old pod is only removed once the new one is ready.
        readiness.set(true);
        tracing::info!(
            lease = election.lease(),
            identity = election.identity(),
            "waiting for leadership"
        );
        tokio::select! {
            () = election.acquire() => {}
            () = shutdown.wait() => {
                // The interrupted attempt may just have taken the Lease; if it did, hand it
                // back (release leaves a Lease held by someone else alone).
                election.release().await;
                return Ok(());
            }
        }
        // As leader, ready again only once the controller's watches have listed.
        readiness.set(false);
        tracing::info!(
            lease = election.lease(),
            identity = election.identity(),
            "acquired leadership"
        );
        Some(election)
    } else {
        None
    };

    let name = context.name;
    let metrics = context.metrics.clone();
    metrics.set_leader(name, true);
    let ended = supervise(controller(context), election.as_ref(), &shutdown).await;
    metrics.set_leader(name, false);
    tracing::debug!(controller = name, "controller finished");
    match ended {
        Ended::Controller(result) => {
            if let Some(election) = &election {
                // The controller future is gone, so nothing writes any more and a standby
                // may take over at once rather than after the Lease expires.
                election.release().await;
            }
            result
        }
        // Not ours any more (or unknown): nothing to release.
        Ended::Leadership(error) => Err(error.into()),
    }
}

/// Why [`supervise`] returned.
enum Ended {
    /// The controller returned (or overran the shutdown grace period).
    Controller(Result<(), Failure>),
    /// Leadership was lost while the controller ran; the controller has been dropped.
    Leadership(LeaderError),
}

/// Drives the controller future to its end while watching leadership and shutdown.
async fn supervise<Fut, E>(
    controller: Fut,
    election: Option<&leader::LeaderElection>,
    shutdown: &Shutdown,
) -> Ended
where
    Fut: Future<Output = Result<(), E>>,
    E: Display,
{
    let mut controller = std::pin::pin!(controller);
    let finished = tokio::select! {
        finished = &mut controller => finished,
        lost = hold(election) => return Ended::Leadership(lost),
        () = shutdown.wait() => {
            // The controller sees the same signal and finishes its in-flight reconciles;
            // keep renewing the Lease meanwhile since it may still be writing.
            tokio::select! {
                finished = tokio::time::timeout(SHUTDOWN_GRACE, &mut controller) => match finished {
                    Ok(finished) => finished,
                    Err(_) => return Ended::Controller(Err(Failure::runtime(format!(
                        "controller did not stop within {}s of the shutdown signal (does it pass ctx.shutdown.wait() to graceful_shutdown_on?)",
                        SHUTDOWN_GRACE.as_secs()
                    )))),
                },
                lost = hold(election) => return Ended::Leadership(lost),
            }
        }
    };
    Ended::Controller(match finished {
        Ok(()) if shutdown.is_triggered() => Ok(()),
        Ok(()) => Err(Failure::runtime(
            "controller stopped without a shutdown signal (its watch streams ended)",
        )),
        Err(error) => Err(Failure::runtime(format!("controller failed: {error:#}"))),
    })
}

/// Resolves when leadership ends; never without leader election.
async fn hold(election: Option<&leader::LeaderElection>) -> LeaderError {
    match election {
        Some(election) => election.hold().await,
        None => std::future::pending().await,
    }
}

/// A kube error in one line: the API server's own message for API errors, the cause
/// chain (e.g. "... Connection refused") for transport errors.
pub(crate) fn describe_kube_error(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) if !status.message.is_empty() => {
            format!(
                "{} (HTTP {} {})",
                status.message, status.code, status.reason
            )
        }
        kube::Error::Api(status) => format!("HTTP {} {}", status.code, status.reason),
        other => error_chain(other),
    }
}

/// An error and its sources joined with ": ", skipping sources whose text the message
/// already contains (many errors repeat their source in their own message).
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = one_line(&error.to_string());
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = one_line(&cause.to_string());
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer failure")]
    struct Outer(#[source] Inner);

    #[derive(Debug, thiserror::Error)]
    #[error("inner cause\nwith a second line")]
    struct Inner;

    #[test]
    fn error_chain_is_one_line_with_all_causes() {
        assert_eq!(
            error_chain(&Outer(Inner)),
            "outer failure: inner cause with a second line"
        );
    }

    #[test]
    fn error_chain_skips_causes_already_in_the_message() {
        #[derive(Debug, thiserror::Error)]
        #[error("wrapped: inner cause with a second line")]
        struct Repeats(#[source] Inner);
        assert_eq!(
            error_chain(&Repeats(Inner)),
            "wrapped: inner cause with a second line"
        );
    }

    #[test]
    fn exit_codes_follow_the_failure_kind() {
        let missing = Failure::from(PreflightError::MissingCrds(vec!["x.valkey.rs".into()]));
        assert_eq!(missing.code, EXIT_CRDS_MISSING);
        let timeout = Failure::from(PreflightError::Timeout(Duration::from_secs(10)));
        assert_eq!(timeout.code, EXIT_CONFIG);
        let lost = Failure::from(LeaderError::Lost {
            lease: "ns/node-controller".into(),
        });
        assert_eq!(lost.code, EXIT_RUNTIME_FAILURE);
    }

    fn controller_result(ended: Ended) -> Result<(), Failure> {
        match ended {
            Ended::Controller(result) => result,
            Ended::Leadership(error) => panic!("no leader election in these tests: {error}"),
        }
    }

    #[tokio::test]
    async fn supervise_exits_cleanly_only_after_a_shutdown_signal() {
        let shutdown = Shutdown::new();
        let unexpected =
            controller_result(supervise(async { Ok::<(), String>(()) }, None, &shutdown).await);
        assert_eq!(unexpected.unwrap_err().code, EXIT_RUNTIME_FAILURE);

        let failed =
            controller_result(supervise(async { Err::<(), _>("boom") }, None, &shutdown).await);
        assert_eq!(failed.unwrap_err().message, "controller failed: boom");

        let stopping = shutdown.clone();
        let controller = async move {
            stopping.wait().await;
            Ok::<(), String>(())
        };
        shutdown.trigger();
        assert!(controller_result(supervise(controller, None, &shutdown).await).is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn supervise_gives_up_on_a_controller_that_ignores_shutdown() {
        let shutdown = Shutdown::new();
        shutdown.trigger();
        let stuck = std::future::pending::<Result<(), String>>();
        let failure = controller_result(supervise(stuck, None, &shutdown).await).unwrap_err();
        assert_eq!(failure.code, EXIT_RUNTIME_FAILURE);
        assert!(
            failure.message.contains("did not stop within 15s"),
            "{}",
            failure.message
        );
    }
}
