//! The probe and metrics HTTP server: /healthz, /readyz and /metrics.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;

use crate::metrics::{CONTENT_TYPE, Metrics};
use crate::shutdown::Shutdown;

/// Whether the controller is ready, as reported on /readyz.
///
/// Starts not ready; the controller calls [`Readiness::mark_ready`] once its watches have
/// listed (e.g. after the kube-runtime store's `wait_until_ready()`), so a pod is not
/// reported ready while it is still working from an empty cache.
#[derive(Debug, Clone, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn mark_ready(&self) {
        self.set(true);
    }

    pub fn is_ready(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    /// Also used by [`crate::run`] to report a standby replica as ready (see there).
    pub(crate) fn set(&self, ready: bool) {
        self.0.store(ready, Ordering::Release);
    }
}

#[derive(Clone)]
struct AppState {
    metrics: Arc<Metrics>,
    readiness: Readiness,
}

pub(crate) fn router(metrics: Arc<Metrics>, readiness: Readiness) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(AppState { metrics, readiness })
}

/// Serves `router` on `listener` until `shutdown` is triggered.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: Shutdown,
) -> std::io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown.wait())
        .await
}

// Answering at all is the liveness signal: a wedged runtime would not.
async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(state): State<AppState>) -> Response {
    if state.readiness.is_ready() {
        (StatusCode::OK, "ok").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready").into_response()
    }
}

async fn metrics_text(State(state): State<AppState>) -> Response {
    match state.metrics.encode() {
        Ok(text) => ([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response(),
        Err(error) => {
            tracing::warn!(%error, "cannot encode metrics");
            (StatusCode::INTERNAL_SERVER_ERROR, error.to_string()).into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::{Body, to_bytes};
    use axum::http::Request;
    use tower::ServiceExt;

    async fn get(router: &Router, path: &str) -> (StatusCode, String) {
        let response = router
            .clone()
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let body = to_bytes(response.into_body(), 1 << 20).await.unwrap();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    fn test_router() -> (Router, Arc<Metrics>, Readiness) {
        let metrics = Arc::new(Metrics::new().unwrap());
        let readiness = Readiness::new();
        (
            router(metrics.clone(), readiness.clone()),
            metrics,
            readiness,
        )
    }

    #[tokio::test]
    async fn healthz_is_ok_before_ready() {
        let (router, _, _) = test_router();
        assert_eq!(
            get(&router, "/healthz").await,
            (StatusCode::OK, "ok".into())
        );
    }

    #[tokio::test]
    async fn readyz_flips_from_503_to_200() {
        let (router, _, readiness) = test_router();
        assert_eq!(
            get(&router, "/readyz").await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        readiness.mark_ready();
        assert_eq!(get(&router, "/readyz").await, (StatusCode::OK, "ok".into()));
        readiness.set(false);
        assert_eq!(
            get(&router, "/readyz").await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
    }

    #[tokio::test]
    async fn metrics_serves_recorded_runs() {
        let (router, metrics, _) = test_router();
        drop(metrics.reconcile_started("service-controller"));
        let (status, body) = get(&router, "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert!(
            body.contains(
                r#"valkey_operator_reconcile_runs_total{controller="service-controller"} 1"#
            ),
            "{body}"
        );
    }

    #[tokio::test]
    async fn unknown_path_is_404() {
        let (router, _, _) = test_router();
        assert_eq!(get(&router, "/nope").await.0, StatusCode::NOT_FOUND);
    }

    #[tokio::test]
    async fn serves_on_loopback_and_stops_on_shutdown() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};

        let (router, _, _) = test_router();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = Shutdown::new();
        let server = tokio::spawn(serve(listener, router, shutdown.clone()));

        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        assert!(response.ends_with("ok"), "{response}");

        shutdown.trigger();
        tokio::time::timeout(std::time::Duration::from_secs(5), server)
            .await
            .expect("server stops after shutdown")
            .unwrap()
            .unwrap();
    }
}
