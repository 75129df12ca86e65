//! Driving a kube-runtime `Controller` the same way in every binary: graceful shutdown,
//! reconcile metrics, a Warning Event and a growing per-object delay after a failure,
//! objects that do not deserialize isolated from the rest, readiness.
//!
//! Controllers watch their main resource through [`Guarded`] (kube's `DeserializeGuard`): an
//! object that cannot be read as the controller's type (a field of the wrong type, written
//! under an older schema, say) becomes an [`Failure::Invalid`] value for that object alone,
//! with a Warning Event, instead of an error that breaks the watch for every object.
//!
//! See the crate docs for a complete binary.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt::{Debug, Display};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::NamespaceResourceScope;
use kube::Resource;
use kube::core::DeserializeGuard;
use kube::core::error_boundary::InvalidObject;
use kube::runtime::controller::{Action, Error as ControllerError};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{Controller, watcher};
use serde::de::DeserializeOwned;

use crate::events::RuntimeEvent;
use crate::scope::Watched;
use crate::{Context, ErrorKind};

/// A watched object that may not deserialize as `K`; see the module docs.
pub type Guarded<K> = DeserializeGuard<K>;

/// The first retry after a failed reconcile; each further failure doubles it.
pub const FIRST_RETRY: Duration = Duration::from_secs(5);
/// The longest retry delay: a permanently broken object is looked at every 5 minutes.
pub const MAX_RETRY: Duration = Duration::from_secs(300);

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

/// Why a reconcile run failed, as the runtime sees it.
#[derive(Debug, thiserror::Error)]
pub enum Failure<E> {
    /// The object does not deserialize as the controller's type.
    #[error("the object cannot be read: {0}")]
    Invalid(Box<InvalidObject>),
    /// The controller's reconcile returned an error.
    #[error(transparent)]
    Reconcile(E),
}

impl<E: ErrorKind> ErrorKind for Failure<E> {
    fn kind(&self) -> Cow<'static, str> {
        match self {
            Failure::Invalid(_) => "invalid_object".into(),
            Failure::Reconcile(e) => e.kind(),
        }
    }
}

/// Retry delays per object: [`FIRST_RETRY`] doubling up to [`MAX_RETRY`] while its
/// reconciles keep failing, forgotten once one succeeds.
pub struct Backoff<K: Resource<DynamicType = ()>> {
    failures: Mutex<HashMap<ObjectRef<K>, u32>>,
}

impl<K: Resource<DynamicType = ()>> Default for Backoff<K> {
    fn default() -> Self {
        Self {
            failures: Mutex::default(),
        }
    }
}

impl<K: Resource<DynamicType = ()>> Backoff<K> {
    /// Records a failure of `object`; the delay before its next try.
    pub fn failed(&self, object: ObjectRef<K>) -> Duration {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let count = failures.entry(object).or_insert(0);
        *count = count.saturating_add(1);
        retry_delay(*count)
    }

    /// Records a success of `object`: its next failure starts from [`FIRST_RETRY`] again.
    pub fn succeeded(&self, object: &ObjectRef<K>) {
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(object);
    }
}

/// The delay after `failures` failures in a row.
fn retry_delay(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    FIRST_RETRY.saturating_mul(1 << doublings).min(MAX_RETRY)
}

/// What [`run`] hands kube-runtime: the reconcile's context and the retry state.
struct Shared<K: Resource<DynamicType = ()>, T> {
    reconcile: Arc<ReconcileContext<T>>,
    backoff: Backoff<Guarded<K>>,
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
/// metrics (runs, duration, failures by [`ErrorKind`]), and for a failed reconcile a log
/// line, a Warning Event `ReconcileFailed` on the object and a retry after a delay that
/// grows per object ([`Backoff`]). An object that does not deserialize gets a Warning Event
/// `InvalidObject` and is looked at again only when it changes.
pub async fn run<K, T, R, Fut, E>(
    ctx: &Context,
    controller: Controller<Guarded<K>>,
    data: Arc<T>,
    mut reconcile: R,
) where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    T: Send + Sync + 'static,
    R: FnMut(Arc<K>, Arc<ReconcileContext<T>>) -> Fut,
    Fut: Future<Output = Result<Action, E>> + Send + 'static,
    E: std::error::Error + ErrorKind + Send + Sync + 'static,
{
    let name = ctx.name;
    let shared = Arc::new(Shared {
        reconcile: Arc::new(ReconcileContext {
            runtime: ctx.clone(),
            data,
        }),
        backoff: Backoff::default(),
    });
    let guarded_reconcile = move |guarded: Arc<Guarded<K>>, shared: Arc<Shared<K, T>>| {
        let timer = shared.reconcile.runtime.metrics.reconcile_started(name);
        let started = match &guarded.0 {
            Ok(object) => Ok(reconcile(
                Arc::new(object.clone()),
                shared.reconcile.clone(),
            )),
            Err(invalid) => Err(Box::new(invalid.clone())),
        };
        async move {
            let result = match started {
                Ok(reconciled) => reconciled.await.map_err(Failure::Reconcile),
                Err(invalid) => Err(Failure::Invalid(invalid)),
            };
            match &result {
                Ok(_) => shared
                    .backoff
                    .succeeded(&ObjectRef::from_obj(guarded.as_ref())),
                Err(failure) => report_failure(&shared.reconcile.runtime, &guarded, failure).await,
            }
            drop(timer);
            result
        }
    };
    controller
        .graceful_shutdown_on(ctx.shutdown.wait())
        .run(guarded_reconcile, error_policy, shared)
        .for_each(|result| async move { log_outcome(name, result) })
        .await;
}

/// The common case: one controller for the namespaced resource `K` (in the watched
/// namespaces). `configure` adds what it owns or watches besides `K`; the process
/// reports ready once the watch on `K` has listed. See [`run`] for what is added around
/// `reconcile`.
pub async fn run_watching<K, T, R, Fut, E>(
    ctx: &Context,
    configure: impl FnOnce(Controller<Guarded<K>>) -> Controller<Guarded<K>>,
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
    E: std::error::Error + ErrorKind + Send + Sync + 'static,
{
    let controller = configure(watching::<K>(ctx));
    let store = controller.store();
    ready_when(ctx, async move { store.wait_until_ready().await });
    run(ctx, controller, data, reconcile).await;
}

/// A controller for the namespaced resource `K`, watched through [`Guarded`] in the watched
/// namespaces (`--watch-namespaces`, see [`crate::scope`]); for [`run`].
pub fn watching<K: Watched>(ctx: &Context) -> Controller<Guarded<K>> {
    ctx.scope
        .controller::<Guarded<K>>(&ctx.client, watcher::Config::default())
}

/// The Warning Event for a failed run. Best effort: an Event that cannot be published is
/// logged, and the failure is retried anyway.
async fn report_failure<K, E>(ctx: &Context, object: &Guarded<K>, failure: &Failure<E>)
where
    K: Resource<DynamicType = ()>,
    E: std::error::Error + ErrorKind + 'static,
{
    let (reason, note) = match failure {
        Failure::Invalid(invalid) => (
            RuntimeEvent::InvalidObject,
            format!(
                "cannot read this object as {}: {}; fix the field (or recreate the object) and \
                 it is reconciled again",
                K::kind(&()),
                invalid.error
            ),
        ),
        Failure::Reconcile(error) => (
            RuntimeEvent::ReconcileFailed,
            crate::error_chain(error).to_string(),
        ),
    };
    // The action carries the failure's kind, so the Recorder folds repeats of one failure
    // into one Event, and a different failure gets its own.
    let published = ctx
        .events
        .publish_as(object, reason, &failure.kind(), note, None)
        .await;
    if let Err(error) = published {
        tracing::warn!(controller = ctx.name, error = %crate::error_chain(&error), "cannot publish the failure Event");
    }
}

fn error_policy<K, T, E>(
    object: Arc<Guarded<K>>,
    failure: &Failure<E>,
    shared: Arc<Shared<K, T>>,
) -> Action
where
    K: Resource<DynamicType = ()>,
    E: std::error::Error + ErrorKind + 'static,
{
    let runtime = &shared.reconcile.runtime;
    runtime.metrics.reconcile_failed(runtime.name, failure);
    let at = ObjectRef::from_obj(object.as_ref());
    match failure {
        // Retrying cannot help; a change to the object triggers the next look.
        Failure::Invalid(invalid) => {
            tracing::warn!(
                controller = runtime.name,
                object = %at,
                error = %invalid,
                "cannot read the object; waiting for it to change"
            );
            Action::await_change()
        }
        Failure::Reconcile(error) => {
            let delay = shared.backoff.failed(at.clone());
            tracing::warn!(
                controller = runtime.name,
                object = %at,
                kind = %error.kind(),
                error = %crate::error_chain(error),
                "reconcile failed; retrying in {}s",
                delay.as_secs()
            );
            Action::requeue(delay)
        }
    }
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

/// A reconcile function that only logs: for a resource a controller watches but does not
/// act on yet.
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
    fn kind(&self) -> Cow<'static, str> {
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
        fn kind(&self) -> Cow<'static, str> {
            "valkey".into()
        }
    }

    fn context() -> Context {
        // Never connects: building a client needs no API server.
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let client = Client::try_from(config).unwrap();
        Context {
            name: "test-controller",
            field_manager: "valkey-operator/test",
            events: crate::events::Publisher::new(client.clone(), "test-controller"),
            client,
            metrics: Arc::new(crate::Metrics::new().unwrap()),
            readiness: crate::Readiness::new(),
            scope: crate::scope::Scope::All,
            shutdown: crate::Shutdown::new(),
        }
    }

    fn shared(ctx: &Context) -> Arc<Shared<ConfigMap, ()>> {
        Arc::new(Shared {
            reconcile: Arc::new(ReconcileContext {
                runtime: ctx.clone(),
                data: Arc::new(()),
            }),
            backoff: Backoff::default(),
        })
    }

    fn named(name: &str) -> Arc<Guarded<ConfigMap>> {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name.into());
        cm.metadata.namespace = Some("default".into());
        Arc::new(DeserializeGuard(Ok(cm)))
    }

    #[test]
    fn the_retry_delay_doubles_from_five_seconds_to_five_minutes() {
        let delays: Vec<u64> = (1..=9).map(|n| retry_delay(n).as_secs()).collect();
        assert_eq!(delays, [5, 10, 20, 40, 80, 160, 300, 300, 300]);
        assert_eq!(retry_delay(u32::MAX), MAX_RETRY);
    }

    #[tokio::test]
    async fn failed_reconciles_back_off_per_object_and_reset_on_success() {
        let ctx = context();
        let shared = shared(&ctx);
        let error = Failure::Reconcile(ValkeyRefused);
        let a = named("a");
        let policy = |o: &Arc<Guarded<ConfigMap>>| error_policy(o.clone(), &error, shared.clone());
        assert_eq!(policy(&a), Action::requeue(Duration::from_secs(5)));
        assert_eq!(policy(&a), Action::requeue(Duration::from_secs(10)));
        assert_eq!(policy(&a), Action::requeue(Duration::from_secs(20)));
        // Another object starts from the first delay.
        assert_eq!(policy(&named("b")), Action::requeue(FIRST_RETRY));
        // A success resets the object's delay.
        shared.backoff.succeeded(&ObjectRef::from_obj(a.as_ref()));
        assert_eq!(policy(&a), Action::requeue(FIRST_RETRY));

        let text = ctx.metrics.encode().unwrap();
        assert!(
            text.contains(r#"valkey_operator_reconcile_failures_total{controller="test-controller",error="valkey"} 5"#),
            "{text}"
        );
    }

    #[tokio::test]
    async fn an_object_of_the_wrong_shape_fails_alone_and_waits_for_a_change() {
        // A list as a watch delivers it: the second ConfigMap has `data` of the wrong type.
        let list: Vec<Guarded<ConfigMap>> = serde_json::from_value(serde_json::json!([
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "good"}, "data": {"k": "v"}},
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bad"}, "data": ["not", "a", "map"]},
        ]))
        .expect("one bad object does not fail the list");
        assert!(list[0].0.is_ok());
        let Err(invalid) = &list[1].0 else {
            panic!("the bad object deserialized")
        };
        assert_eq!(list[1].meta().name.as_deref(), Some("bad"));

        let ctx = context();
        let failure = Failure::<ValkeyRefused>::Invalid(Box::new(invalid.clone()));
        let action = error_policy(Arc::new(list[1].clone()), &failure, shared(&ctx));
        assert_eq!(action, Action::await_change());
        assert_eq!(failure.kind(), "invalid_object");
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
