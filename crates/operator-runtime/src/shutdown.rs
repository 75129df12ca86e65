//! Process shutdown: SIGTERM (what the kubelet sends) or SIGINT (Ctrl+C) starts it.

use std::future::Future;

use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

/// A cloneable "the process is shutting down" signal.
///
/// Every part of the process (controller, HTTP server, leader election) watches the same
/// handle, so one SIGTERM stops them all in an orderly way.
#[derive(Debug, Clone, Default)]
pub struct Shutdown {
    token: CancellationToken,
}

impl Shutdown {
    /// A handle that is only triggered by [`Shutdown::trigger`], not by signals.
    pub fn new() -> Self {
        Self::default()
    }

    /// A handle that is triggered on the first SIGTERM or SIGINT.
    ///
    /// The handlers are installed before this returns, so a signal that arrives while the
    /// process is still starting up is not lost. Must be called inside a Tokio runtime.
    pub fn on_signals() -> std::io::Result<Self> {
        let mut terminate = signal(SignalKind::terminate())?;
        let mut interrupt = signal(SignalKind::interrupt())?;
        let shutdown = Self::new();
        let trigger = shutdown.clone();
        tokio::spawn(async move {
            let name = tokio::select! {
                _ = terminate.recv() => "SIGTERM",
                _ = interrupt.recv() => "SIGINT",
                // Someone else started the shutdown; nothing left to listen for.
                () = trigger.token.cancelled() => return,
            };
            tracing::info!(signal = name, "shutting down");
            trigger.trigger();
        });
        Ok(shutdown)
    }

    /// Starts the shutdown (idempotent).
    pub fn trigger(&self) {
        self.token.cancel();
    }

    /// Whether the shutdown has started.
    pub fn is_triggered(&self) -> bool {
        self.token.is_cancelled()
    }

    /// Resolves once the shutdown has started.
    ///
    /// Owned and `Send + Sync + 'static`, as kube-runtime's
    /// `Controller::graceful_shutdown_on` requires.
    pub fn wait(&self) -> impl Future<Output = ()> + Send + Sync + 'static {
        self.token.clone().cancelled_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn wait_resolves_only_after_trigger() {
        let shutdown = Shutdown::new();
        let waiter = tokio::spawn(shutdown.wait());
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished());
        assert!(!shutdown.is_triggered());

        shutdown.clone().trigger();
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("wait() resolves after trigger()")
            .unwrap();
        assert!(shutdown.is_triggered());
    }
}
