//! Test-facing control API of the node agent: partitions and freezing.
//!
//! Routes (JSON bodies, errors are plain-text with a 4xx/5xx status):
//! - `POST   /partitions`     `{"a":"ns/pod","b":"ns/pod"}` → 204 (cut)
//! - `DELETE /partitions`     same body → 204 (heal)
//! - `DELETE /partitions/all` → 204
//! - `GET    /partitions`     → 200 `[{"a":"<ip>","b":"<ip>"}]`
//! - `POST   /freeze`, `POST /thaw` `{"pod":"ns/name"}` → 204
//!
//! Partition endpoints may also be given as literal IPs instead of `ns/pod`.
//! Pod names are resolved to their *current* pod IP when the cut is made; a
//! pod that is recreated with a new IP is not cut until cut again.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderValue, Method, Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use futures::future::BoxFuture;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use serde::{Deserialize, Serialize};

use crate::Error;
use crate::partitions::Partitions;

/// Pauses and resumes a pod's processes (the node agent uses SIGSTOP/SIGCONT).
pub trait Freezer: Send + Sync {
    fn freeze(&self, namespace: &str, pod: &str) -> Result<(), String>;
    fn thaw(&self, namespace: &str, pod: &str) -> Result<(), String>;
}

/// Serve the control API on `listener` until `shutdown` resolves.
pub async fn serve_control(
    listener: tokio::net::TcpListener,
    partitions: Partitions,
    freezer: Arc<dyn Freezer>,
    resolver: kube::Client,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let app = router(partitions, freezer, Arc::new(KubePods(resolver)));
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await?;
    Ok(())
}

#[derive(Debug)]
pub(crate) enum ResolveError {
    NotFound(String),
    NoIp(String),
    Api(String),
}

/// Pod name → IP lookup; abstracted so routes can be tested without a cluster.
pub(crate) trait PodIps: Send + Sync {
    fn pod_ip<'a>(
        &'a self,
        ns: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<IpAddr, ResolveError>>;
}

struct KubePods(kube::Client);

impl PodIps for KubePods {
    fn pod_ip<'a>(
        &'a self,
        ns: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<IpAddr, ResolveError>> {
        Box::pin(async move {
            let pod = Api::<Pod>::namespaced(self.0.clone(), ns)
                .get_opt(name)
                .await
                .map_err(|e| ResolveError::Api(e.to_string()))?
                .ok_or_else(|| ResolveError::NotFound(format!("pod {ns}/{name} not found")))?;
            crate::backends::pod_ip(&pod)
                .ok_or_else(|| ResolveError::NoIp(format!("pod {ns}/{name} has no IP yet")))
        })
    }
}

#[derive(Clone)]
struct Ctx {
    partitions: Partitions,
    freezer: Arc<dyn Freezer>,
    pods: Arc<dyn PodIps>,
}

#[derive(Serialize, Deserialize)]
struct PairBody {
    a: String,
    b: String,
}

#[derive(Serialize, Deserialize)]
struct PodBody {
    pod: String,
}

pub(crate) fn router(
    partitions: Partitions,
    freezer: Arc<dyn Freezer>,
    pods: Arc<dyn PodIps>,
) -> Router {
    Router::new()
        .route("/partitions", post(cut).delete(heal).get(list))
        .route("/partitions/all", delete(heal_all))
        .route("/freeze", post(freeze))
        .route("/thaw", post(thaw))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(Ctx {
            partitions,
            freezer,
            pods,
        })
}

type HandlerResult = Result<Response, (StatusCode, String)>;

fn bad_request(msg: impl Into<String>) -> (StatusCode, String) {
    (StatusCode::BAD_REQUEST, msg.into())
}

fn parse<T: serde::de::DeserializeOwned>(body: &Bytes) -> Result<T, (StatusCode, String)> {
    serde_json::from_slice(body).map_err(|e| bad_request(format!("invalid JSON body: {e}")))
}

fn split_pod(s: &str) -> Result<(&str, &str), (StatusCode, String)> {
    match s.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((ns, name))
        }
        _ => Err(bad_request(format!(
            "expected \"namespace/pod\", got {s:?}"
        ))),
    }
}

async fn resolve(ctx: &Ctx, target: &str) -> Result<IpAddr, (StatusCode, String)> {
    if let Ok(ip) = target.parse::<IpAddr>() {
        return Ok(ip);
    }
    let (ns, name) = split_pod(target)?;
    ctx.pods.pod_ip(ns, name).await.map_err(|e| match e {
        ResolveError::NotFound(m) => (StatusCode::NOT_FOUND, m),
        ResolveError::NoIp(m) => (StatusCode::CONFLICT, m),
        ResolveError::Api(m) => (StatusCode::BAD_GATEWAY, m),
    })
}

async fn pair(ctx: &Ctx, body: &Bytes) -> Result<(IpAddr, IpAddr), (StatusCode, String)> {
    let p: PairBody = parse(body)?;
    Ok((resolve(ctx, &p.a).await?, resolve(ctx, &p.b).await?))
}

async fn cut(State(ctx): State<Ctx>, body: Bytes) -> HandlerResult {
    let (a, b) = pair(&ctx, &body).await?;
    tracing::info!(%a, %b, "partition cut");
    ctx.partitions.cut(a, b);
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn heal(State(ctx): State<Ctx>, body: Bytes) -> HandlerResult {
    let (a, b) = pair(&ctx, &body).await?;
    tracing::info!(%a, %b, "partition healed");
    ctx.partitions.heal(a, b);
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn heal_all(State(ctx): State<Ctx>) -> StatusCode {
    tracing::info!("all partitions healed");
    ctx.partitions.heal_all();
    StatusCode::NO_CONTENT
}

async fn list(State(ctx): State<Ctx>) -> Response {
    let pairs: Vec<PairBody> = ctx
        .partitions
        .list()
        .into_iter()
        .map(|(a, b)| PairBody {
            a: a.to_string(),
            b: b.to_string(),
        })
        .collect();
    let json = serde_json::to_vec(&pairs).unwrap_or_default();
    ([(header::CONTENT_TYPE, "application/json")], json).into_response()
}

async fn freeze(State(ctx): State<Ctx>, body: Bytes) -> HandlerResult {
    freeze_or_thaw(&ctx, &body, true)
}

async fn thaw(State(ctx): State<Ctx>, body: Bytes) -> HandlerResult {
    freeze_or_thaw(&ctx, &body, false)
}

fn freeze_or_thaw(ctx: &Ctx, body: &Bytes, freeze: bool) -> HandlerResult {
    let p: PodBody = parse(body)?;
    let (ns, name) = split_pod(&p.pod)?;
    let r = if freeze {
        ctx.freezer.freeze(ns, name)
    } else {
        ctx.freezer.thaw(ns, name)
    };
    r.map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e))?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Minimal client for e2e tests. Targets are `"ns/pod"` (or literal IPs
/// for partitions).
#[derive(Debug, Clone, Copy)]
pub struct ControlClient {
    base: SocketAddr,
}

impl ControlClient {
    pub fn new(base: SocketAddr) -> Self {
        Self { base }
    }

    pub async fn cut(&self, a: &str, b: &str) -> Result<(), Error> {
        let body = serde_json::json!({ "a": a, "b": b });
        self.call(Method::POST, "/partitions", Some(body))
            .await
            .map(drop)
    }

    pub async fn heal(&self, a: &str, b: &str) -> Result<(), Error> {
        let body = serde_json::json!({ "a": a, "b": b });
        self.call(Method::DELETE, "/partitions", Some(body))
            .await
            .map(drop)
    }

    pub async fn heal_all(&self) -> Result<(), Error> {
        self.call(Method::DELETE, "/partitions/all", None)
            .await
            .map(drop)
    }

    /// Current cuts as IP pairs.
    pub async fn partitions(&self) -> Result<Vec<(IpAddr, IpAddr)>, Error> {
        let body = self.call(Method::GET, "/partitions", None).await?;
        let pairs: Vec<PairBody> =
            serde_json::from_slice(&body).map_err(|e| Error::Http(format!("bad response: {e}")))?;
        pairs
            .into_iter()
            .map(|p| match (p.a.parse(), p.b.parse()) {
                (Ok(a), Ok(b)) => Ok((a, b)),
                _ => Err(Error::Http(format!("bad IP pair {}/{}", p.a, p.b))),
            })
            .collect()
    }

    pub async fn freeze(&self, pod: &str) -> Result<(), Error> {
        let body = serde_json::json!({ "pod": pod });
        self.call(Method::POST, "/freeze", Some(body))
            .await
            .map(drop)
    }

    pub async fn thaw(&self, pod: &str) -> Result<(), Error> {
        let body = serde_json::json!({ "pod": pod });
        self.call(Method::POST, "/thaw", Some(body)).await.map(drop)
    }

    /// One request per connection: simple, and tests issue few of them.
    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> Result<Bytes, Error> {
        let http = |e: hyper::Error| Error::Http(format!("{method} {path}: {e}"));
        let stream = tokio::net::TcpStream::connect(self.base).await?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(http)?;
        let conn = tokio::spawn(conn);
        let mut req = Request::builder()
            .method(method.clone())
            .uri(path)
            .header(header::HOST, self.base.to_string());
        if body.is_some() {
            req = req.header(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
        }
        let body = body
            .map(|b| Body::from(b.to_string()))
            .unwrap_or_else(Body::empty);
        let req = req.body(body).map_err(|e| Error::Http(e.to_string()))?;
        let resp = sender.send_request(req).await.map_err(http)?;
        let status = resp.status();
        let bytes = axum::body::to_bytes(Body::new(resp.into_body()), 1 << 20)
            .await
            .map_err(|e| Error::Http(format!("{method} {path}: reading body: {e}")))?;
        drop(sender);
        let _ = conn.await;
        if status.is_success() {
            Ok(bytes)
        } else {
            Err(Error::Http(format!(
                "{method} {path}: {status}: {}",
                String::from_utf8_lossy(&bytes).trim()
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::Mutex;
    use tower::ServiceExt;

    #[derive(Default)]
    struct FakeFreezer {
        calls: Mutex<Vec<String>>,
    }

    impl Freezer for FakeFreezer {
        fn freeze(&self, ns: &str, pod: &str) -> Result<(), String> {
            if pod == "missing" {
                return Err(format!("no such pod {ns}/{pod}"));
            }
            self.calls
                .lock()
                .unwrap()
                .push(format!("freeze {ns}/{pod}"));
            Ok(())
        }
        fn thaw(&self, ns: &str, pod: &str) -> Result<(), String> {
            self.calls.lock().unwrap().push(format!("thaw {ns}/{pod}"));
            Ok(())
        }
    }

    struct FakePods(HashMap<&'static str, &'static str>);

    impl PodIps for FakePods {
        fn pod_ip<'a>(
            &'a self,
            ns: &'a str,
            name: &'a str,
        ) -> BoxFuture<'a, Result<IpAddr, ResolveError>> {
            let key = format!("{ns}/{name}");
            Box::pin(async move {
                match self.0.get(key.as_str()) {
                    Some(&"") => Err(ResolveError::NoIp(key)),
                    Some(ip) => Ok(ip.parse().unwrap()),
                    None => Err(ResolveError::NotFound(key)),
                }
            })
        }
    }

    fn setup() -> (Router, Partitions, Arc<FakeFreezer>) {
        let partitions = Partitions::new();
        let freezer = Arc::new(FakeFreezer::default());
        let pods = FakePods(HashMap::from([
            ("ns/v-0", "127.64.0.1"),
            ("ns/v-1", "127.64.0.2"),
            ("ns/pending", ""),
        ]));
        (
            router(partitions.clone(), freezer.clone(), Arc::new(pods)),
            partitions,
            freezer,
        )
    }

    async fn send(app: &Router, method: &str, path: &str, body: &str) -> (StatusCode, String) {
        let req = Request::builder()
            .method(method)
            .uri(path)
            .body(Body::from(body.to_string()))
            .unwrap();
        let resp = app.clone().oneshot(req).await.unwrap();
        let status = resp.status();
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, String::from_utf8_lossy(&bytes).into_owned())
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[tokio::test]
    async fn partition_routes() {
        let (app, p, _) = setup();
        let pair = r#"{"a":"ns/v-1","b":"ns/v-0"}"#;
        assert_eq!(
            send(&app, "POST", "/partitions", pair).await.0,
            StatusCode::NO_CONTENT
        );
        assert!(p.is_cut(ip("127.64.0.1"), ip("127.64.0.2")));
        let (st, body) = send(&app, "GET", "/partitions", "").await;
        assert_eq!(st, StatusCode::OK);
        assert_eq!(body, r#"[{"a":"127.64.0.1","b":"127.64.0.2"}]"#);
        assert_eq!(
            send(&app, "DELETE", "/partitions", pair).await.0,
            StatusCode::NO_CONTENT
        );
        assert!(p.list().is_empty());

        // Literal IPs work too; heal_all clears everything.
        let ips = r#"{"a":"127.64.0.9","b":"ns/v-0"}"#;
        assert_eq!(
            send(&app, "POST", "/partitions", ips).await.0,
            StatusCode::NO_CONTENT
        );
        assert!(p.is_cut(ip("127.64.0.9"), ip("127.64.0.1")));
        assert_eq!(
            send(&app, "DELETE", "/partitions/all", "").await.0,
            StatusCode::NO_CONTENT
        );
        assert!(p.list().is_empty());
    }

    #[tokio::test]
    async fn partition_errors() {
        let (app, p, _) = setup();
        let cases = [
            (r#"{"a":"ns/nope","b":"ns/v-0"}"#, StatusCode::NOT_FOUND),
            (r#"{"a":"ns/pending","b":"ns/v-0"}"#, StatusCode::CONFLICT),
            (r#"{"a":"v-0","b":"ns/v-0"}"#, StatusCode::BAD_REQUEST),
            (r#"{"a":"ns/v-0"}"#, StatusCode::BAD_REQUEST),
            ("not json", StatusCode::BAD_REQUEST),
        ];
        for (body, want) in cases {
            let (st, msg) = send(&app, "POST", "/partitions", body).await;
            assert_eq!(st, want, "{body}: {msg}");
            assert!(!msg.is_empty());
        }
        assert!(p.list().is_empty());
    }

    #[tokio::test]
    async fn freeze_routes() {
        let (app, _, f) = setup();
        assert_eq!(
            send(&app, "POST", "/freeze", r#"{"pod":"ns/v-0"}"#).await.0,
            StatusCode::NO_CONTENT
        );
        assert_eq!(
            send(&app, "POST", "/thaw", r#"{"pod":"ns/v-0"}"#).await.0,
            StatusCode::NO_CONTENT
        );
        let (st, msg) = send(&app, "POST", "/freeze", r#"{"pod":"ns/missing"}"#).await;
        assert_eq!(st, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(msg, "no such pod ns/missing");
        assert_eq!(
            send(&app, "POST", "/freeze", r#"{"pod":"x"}"#).await.0,
            StatusCode::BAD_REQUEST
        );
        assert_eq!(*f.calls.lock().unwrap(), ["freeze ns/v-0", "thaw ns/v-0"]);
    }

    /// End to end over a real socket, exercising `ControlClient`.
    #[tokio::test]
    async fn client_against_server() {
        let (app, p, f) = setup();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await
        });
        let c = ControlClient::new(addr);
        c.cut("ns/v-0", "ns/v-1").await.unwrap();
        assert_eq!(
            c.partitions().await.unwrap(),
            vec![(ip("127.64.0.1"), ip("127.64.0.2"))]
        );
        c.heal("ns/v-0", "ns/v-1").await.unwrap();
        c.cut("ns/v-0", "127.64.0.7").await.unwrap();
        c.heal_all().await.unwrap();
        assert!(p.list().is_empty());
        c.freeze("ns/v-1").await.unwrap();
        c.thaw("ns/v-1").await.unwrap();
        let err = c.cut("ns/nope", "ns/v-0").await.unwrap_err().to_string();
        assert!(err.contains("404"), "{err}");
        assert_eq!(f.calls.lock().unwrap().len(), 2);
        stop.send(()).unwrap();
        server.await.unwrap().unwrap();
    }
}
