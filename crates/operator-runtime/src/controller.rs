//! Driving a kube-runtime `Controller` the same way in every binary: graceful shutdown,
//! reconcile metrics, error logging and retry, readiness.
//!
//! See the crate docs for a complete binary.

use std::fmt::{Debug, Display};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::NamespaceResourceScope;
use kube::Resource;
use kube::runtime::controller::{Action, Error as ControllerError};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{Controller, watcher};
use serde::de::DeserializeOwned;

use crate::{Context, ErrorKind};

/// How long to wait before retrying an object whose reconcile failed.
pub const RETRY_AFTER_ERROR: Duration = Duration::from_secs(10);

/// How often every object is reconciled again without any change: a safety net for missed
/// watch events, not a polling loop (controllers react to their watches).
pub const RESYNC_INTERVAL: Duration = Duration::from_secs(300);

/// The action for a successful reconcile: look again after [`RESYNC_INTERVAL`] unless a
/// watch event comes first.
pub fn resync() -> Action {
    Action::requeue(RESYNC_INTERVAL)
}

/// What a reconcile function receives next to the object: the process [`Context`] and
/// the controller's own shared state.
pub struct ReconcileContext<T> {
    pub runtime: Context,
    pub data: Arc<T>,
}

/// How often [`ready_when`] re-checks its future; see there.
const READY_POLL_INTERVAL: Duration = Duration::from_millis(250);

/// Marks the controller ready once `listed` succeeds, typically the reflector stores'
/// `wait_until_ready()`. Runs in the background so the controller can start meanwhile.
pub fn ready_when<F, E>(ctx: &Context, listed: F)
where
    F: Future<Output = Result<(), E>> + Send + 'static,
    E: Display,
{
    let readiness = ctx.readiness.clone();
    let name = ctx.name;
    tokio::spawn(async move {
        let mut listed = std::pin::pin!(listed);
        let mut recheck = tokio::time::interval(READY_POLL_INTERVAL);
        // kube-runtime's `Store::wait_until_ready` (5.0) wakes only the task that polled it
        // last, and the Controller itself waits on the same store, so a plain `.await` here
        // can sleep forever. Polling again on a timer sees the store's ready state anyway.
        let result = loop {
            tokio::select! {
                result = &mut listed => break result,
                _ = recheck.tick() => {}
            }
        };
        match result {
            Ok(()) => {
                readiness.mark_ready();
                tracing::info!(controller = name, "initial list complete; ready");
            }
            // Only happens when the controller stops before its first list.
            Err(error) => tracing::debug!(controller = name, %error, "never became ready"),
        }
    });
}

/// Runs `controller` with `reconcile` until the process shuts down.
///
/// Adds what every controller needs: graceful shutdown on `ctx.shutdown`, the reconcile
/// metrics (runs, duration, failures by [`ErrorKind`]), a log line per failed reconcile
/// and a retry after [`RETRY_AFTER_ERROR`].
pub async fn run<K, T, R, Fut, E>(
    ctx: &Context,
    controller: Controller<K>,
    data: Arc<T>,
    mut reconcile: R,
) where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    T: Send + Sync + 'static,
    R: FnMut(Arc<K>, Arc<ReconcileContext<T>>) -> Fut,
    Fut: Future<Output = Result<Action, E>> + Send + 'static,
    E: std::error::Error + ErrorKind + Send + 'static,
{
    let name = ctx.name;
    let shared = Arc::new(ReconcileContext {
        runtime: ctx.clone(),
        data,
    });
    let timed_reconcile = move |object: Arc<K>, shared: Arc<ReconcileContext<T>>| {
        let timer = shared.runtime.metrics.reconcile_started(name);
        let reconciled = reconcile(object, shared);
        async move {
            let result = reconciled.await;
            drop(timer);
            result
        }
    };
    controller
        .graceful_shutdown_on(ctx.shutdown.wait())
        .run(timed_reconcile, error_policy, shared)
        .for_each(|result| async move { log_outcome(name, result) })
        .await;
}

/// The common case: one controller for the namespaced resource `K` (honouring
/// `--watch-namespace`). `configure` adds what it owns or watches besides `K`; the process
/// reports ready once the watch on `K` has listed. See [`run`] for what is added around
/// `reconcile`.
pub async fn run_watching<K, T, R, Fut, E>(
    ctx: &Context,
    configure: impl FnOnce(Controller<K>) -> Controller<K>,
    data: Arc<T>,
    reconcile: R,
) where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static,
    T: Send + Sync + 'static,
    R: FnMut(Arc<K>, Arc<ReconcileContext<T>>) -> Fut,
    Fut: Future<Output = Result<Action, E>> + Send + 'static,
    E: std::error::Error + ErrorKind + Send + 'static,
{
    let controller = configure(Controller::new(
        ctx.watch_api::<K>(),
        watcher::Config::default(),
    ));
    let store = controller.store();
    ready_when(ctx, async move { store.wait_until_ready().await });
    run(ctx, controller, data, reconcile).await;
}

fn error_policy<K, T, E>(object: Arc<K>, error: &E, shared: Arc<ReconcileContext<T>>) -> Action
where
    K: Resource<DynamicType = ()>,
    E: std::error::Error + ErrorKind + 'static,
{
    let runtime = &shared.runtime;
    runtime.metrics.reconcile_failed(runtime.name, error);
    tracing::warn!(
        controller = runtime.name,
        object = %ObjectRef::from_obj(object.as_ref()),
        kind = error.kind(),
        error = %crate::error_chain(error),
        "reconcile failed; retrying in {}s",
        RETRY_AFTER_ERROR.as_secs()
    );
    Action::requeue(RETRY_AFTER_ERROR)
}

fn log_outcome<K, E>(
    name: &str,
    result: Result<(ObjectRef<K>, Action), ControllerError<E, kube::runtime::watcher::Error>>,
) where
    K: Resource<DynamicType = ()>,
    E: std::error::Error,
{
    match result {
        Ok((object, action)) => {
            tracing::debug!(controller = name, %object, ?action, "reconciled");
        }
        // Already counted and logged by error_policy.
        Err(ControllerError::ReconcilerFailed(..)) => {}
        // A queued object was deleted meanwhile: routine.
        Err(error @ ControllerError::ObjectNotFound(_)) => {
            tracing::debug!(controller = name, %error, "skipped");
        }
        // Watch errors (API server unavailable, RBAC): kube-runtime retries with backoff.
        Err(error) => {
            tracing::warn!(controller = name, error = %crate::error_chain(&error), "controller error");
        }
    }
}

/// A reconcile function that only logs and counts: a placeholder until a controller's
/// domain logic exists.
pub async fn observe<K, T>(
    object: Arc<K>,
    _ctx: Arc<ReconcileContext<T>>,
) -> Result<Action, std::convert::Infallible>
where
    K: Resource<DynamicType = ()>,
{
    tracing::debug!(object = %ObjectRef::from_obj(object.as_ref()), "observed");
    Ok(Action::await_change())
}

/// Lets [`observe`] (which cannot fail) be used with [`run`].
impl ErrorKind for std::convert::Infallible {
    fn kind(&self) -> &'static str {
        match *self {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::Client;

    #[derive(Debug, thiserror::Error)]
    #[error("valkey said no")]
    struct ValkeyRefused;

    impl ErrorKind for ValkeyRefused {
        fn kind(&self) -> &'static str {
            "valkey"
        }
    }

    fn context() -> Context {
        // Never connects: building a client needs no API server.
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        Context {
            name: "test-controller",
            field_manager: "valkey-operator/test",
            client: Client::try_from(config).unwrap(),
            metrics: Arc::new(crate::Metrics::new().unwrap()),
            readiness: crate::Readiness::new(),
            watch_namespace: None,
            shutdown: crate::Shutdown::new(),
        }
    }

    #[tokio::test]
    async fn failed_reconciles_are_counted_by_kind_and_retried() {
        let ctx = context();
        let shared = Arc::new(ReconcileContext {
            runtime: ctx.clone(),
            data: Arc::new(()),
        });
        let action = error_policy(Arc::new(ConfigMap::default()), &ValkeyRefused, shared);
        assert_eq!(action, Action::requeue(RETRY_AFTER_ERROR));
        let text = ctx.metrics.encode().unwrap();
        assert!(
            text.contains(r#"valkey_operator_reconcile_failures_total{controller="test-controller",error="valkey"} 1"#),
            "{text}"
        );
    }

    #[tokio::test]
    async fn ready_when_sees_a_store_another_task_also_waits_on() {
        use kube::runtime::{reflector, watcher};

        let ctx = context();
        let (store, mut writer) = reflector::store::<ConfigMap>();
        let ours = store.clone();
        ready_when(&ctx, async move { ours.wait_until_ready().await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        // Like the Controller's own wait: polled after ours, it takes over the wake-up.
        let theirs = tokio::spawn(async move { store.wait_until_ready().await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!ctx.readiness.is_ready());

        writer.apply_watcher_event(&watcher::Event::InitDone);
        theirs.await.unwrap().unwrap();
        tokio::time::timeout(Duration::from_secs(5), async {
            while !ctx.readiness.is_ready() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("ready once the store is");
    }

    #[tokio::test]
    async fn ready_when_marks_ready_only_on_success() {
        let ctx = context();
        ready_when(&ctx, async { Err::<(), _>("writer dropped") });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!ctx.readiness.is_ready());

        let (listed, wait) = tokio::sync::oneshot::channel::<()>();
        ready_when(&ctx, wait);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!ctx.readiness.is_ready(), "not before the list completes");
        listed.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(5), async {
            while !ctx.readiness.is_ready() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("ready after the list completes");
    }
}
