//! Authentication and authorization of the kubelet API, as a real kubelet does them in
//! webhook mode (`--authentication-token-webhook`, `--authorization-mode=Webhook`,
//! `--client-ca-file`, `--anonymous-auth=false`):
//!
//! - a client certificate signed by the cluster CA is its subject (CN user, O groups): the
//!   API server's kubelet client, which the node proxy (`kubectl logs`) uses;
//! - a bearer token is reviewed with a TokenReview;
//! - nothing else is 401;
//! - then a SubjectAccessReview: `verb` from the HTTP method, `resource: nodes`,
//!   `name: <node>`, `subresource` from the path (upstream's mapping with fine-grained
//!   authorization: `/stats/*` stats, `/metrics*` metrics, `/logs/*` log, `/spec*` spec,
//!   `/pods` and `/runningpods` pods, `/configz` configz, `/healthz` healthz, everything
//!   else, container logs included, proxy). A fine-grained subresource that is denied is
//!   tried again as `proxy`, so callers holding `nodes/proxy` keep working.
//!
//! Answers are cached (authentication 2 minutes; authorization 5 minutes when allowed,
//! 30 seconds when denied), like the kubelet's webhook caches.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;

/// Who is asking.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct User {
    pub name: String,
    pub groups: Vec<String>,
}

/// A connection's peer: its address and, when it presented one, its verified certificate's
/// subject.
#[derive(Debug, Clone)]
pub struct Peer {
    pub addr: std::net::SocketAddr,
    pub certificate: Option<User>,
}

const AUTHN_TTL: Duration = Duration::from_secs(120);
const ALLOWED_TTL: Duration = Duration::from_secs(300);
const DENIED_TTL: Duration = Duration::from_secs(30);

/// What a SubjectAccessReview asks: the Node is part of it, as a grant can name one Node.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Question {
    user: User,
    node: String,
    verb: String,
    subresource: String,
}

/// Authorization answers, each kept for its TTL.
#[derive(Default)]
struct Decisions(HashMap<Question, (bool, Instant)>);

impl Decisions {
    fn get(&self, question: &Question, now: Instant) -> Option<bool> {
        let (allowed, at) = self.0.get(question)?;
        let ttl = if *allowed { ALLOWED_TTL } else { DENIED_TTL };
        (now.duration_since(*at) < ttl).then_some(*allowed)
    }

    fn insert(&mut self, question: Question, allowed: bool, at: Instant) {
        self.0.insert(question, (allowed, at));
    }
}

/// A token's user (`None`: not authenticated) and when it was reviewed.
type Tokens = HashMap<String, (Option<User>, Instant)>;

/// The webhook clients and their caches, shared by every node the agent serves.
#[derive(Clone)]
pub struct Authorizer {
    client: kube::Client,
    tokens: Arc<Mutex<Tokens>>,
    decisions: Arc<Mutex<Decisions>>,
}

impl Authorizer {
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            tokens: Arc::default(),
            decisions: Arc::default(),
        }
    }

    async fn user_of_token(&self, token: &str) -> Result<Option<User>, String> {
        if let Some((user, at)) = self.tokens.lock().unwrap().get(token)
            && at.elapsed() < AUTHN_TTL
        {
            return Ok(user.clone());
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                ..Default::default()
            },
            ..Default::default()
        };
        let reviewed = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| format!("TokenReview: {e}"))?;
        let status = reviewed.status.unwrap_or_default();
        let user = match (status.authenticated, status.user) {
            (Some(true), Some(u)) => Some(User {
                name: u.username.unwrap_or_default(),
                groups: u.groups.unwrap_or_default(),
            }),
            _ => None,
        };
        self.tokens
            .lock()
            .unwrap()
            .insert(token.to_string(), (user.clone(), Instant::now()));
        Ok(user)
    }

    async fn allowed(
        &self,
        user: &User,
        node: &str,
        verb: &str,
        subresource: &str,
    ) -> Result<bool, String> {
        let question = Question {
            user: user.clone(),
            node: node.to_string(),
            verb: verb.to_string(),
            subresource: subresource.to_string(),
        };
        if let Some(allowed) = self
            .decisions
            .lock()
            .unwrap()
            .get(&question, Instant::now())
        {
            return Ok(allowed);
        }
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.name.clone()),
                groups: Some(user.groups.clone()),
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(verb.into()),
                    resource: Some("nodes".into()),
                    subresource: Some(subresource.into()),
                    name: Some(node.into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let reviewed = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| format!("SubjectAccessReview: {e}"))?;
        let allowed = reviewed.status.is_some_and(|s| s.allowed);
        self.decisions
            .lock()
            .unwrap()
            .insert(question, allowed, Instant::now());
        Ok(allowed)
    }
}

/// The SubjectAccessReview verb of an HTTP method.
pub fn verb(method: &Method) -> &'static str {
    match *method {
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "get",
    }
}

/// The `nodes` subresource a path needs (fine-grained), before the `proxy` fallback.
pub fn subresource(path: &str) -> &'static str {
    let under = |prefix: &str| path == prefix || path.starts_with(&format!("{prefix}/"));
    if under("/stats") {
        "stats"
    } else if path.starts_with("/metrics") {
        "metrics"
    } else if under("/logs") {
        "log"
    } else if path.starts_with("/spec") {
        "spec"
    } else if under("/pods") || under("/runningpods") {
        "pods"
    } else if under("/configz") {
        "configz"
    } else if under("/healthz") {
        "healthz"
    } else {
        "proxy"
    }
}

/// What the node agent's state offers the middleware.
pub trait AuthState: Send + Sync + 'static {
    fn node_name(&self) -> &str;
    fn authorizer(&self) -> &Authorizer;
}

/// The middleware: 401 without credentials, 403 without the right, else the handler.
pub async fn authorize<S: AuthState>(
    State(state): State<Arc<S>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    request: Request,
    next: Next,
) -> Response {
    let bearer = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty());
    let authorizer = state.authorizer();
    let user = match (&peer.certificate, bearer) {
        (Some(user), _) => Some(user.clone()),
        (None, Some(token)) => match authorizer.user_of_token(token).await {
            Ok(user) => user,
            Err(e) => return (StatusCode::INTERNAL_SERVER_ERROR, e).into_response(),
        },
        (None, None) => None,
    };
    let Some(user) = user else {
        return (StatusCode::UNAUTHORIZED, "Unauthorized").into_response();
    };
    let verb = verb(request.method());
    let wanted = subresource(request.uri().path());
    let node = state.node_name();
    let mut allowed = authorizer.allowed(&user, node, verb, wanted).await;
    if wanted != "proxy" && allowed == Ok(false) {
        allowed = authorizer.allowed(&user, node, verb, "proxy").await;
    }
    match allowed {
        Ok(true) => next.run(request).await,
        Ok(false) => {
            tracing::info!(user = %user.name, verb, subresource = wanted, %node, peer = %peer.addr, "kubelet API request forbidden");
            (
                StatusCode::FORBIDDEN,
                format!(
                    "Forbidden (user={}, verb={verb}, resource=nodes, subresource={wanted})",
                    user.name
                ),
            )
                .into_response()
        }
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e).into_response(),
    }
}

/// The user a verified client certificate names: CN, and O as groups.
pub fn certificate_user(der: &[u8]) -> Option<User> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = cert.subject();
    let name = subject
        .iter_common_name()
        .next()?
        .as_str()
        .ok()?
        .to_string();
    let groups = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(str::to_string))
        .collect();
    Some(User { name, groups })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_map_to_subresources_like_upstream() {
        for (path, sub) in [
            ("/stats/summary", "stats"),
            ("/stats", "stats"),
            ("/metrics/cadvisor", "metrics"),
            ("/logs/syslog", "log"),
            ("/spec/", "spec"),
            ("/pods", "pods"),
            ("/runningpods/", "pods"),
            ("/configz", "configz"),
            ("/healthz", "healthz"),
            ("/containerLogs/ns/pod/c", "proxy"),
            ("/exec/ns/pod/c", "proxy"),
            ("/statsx", "proxy"),
        ] {
            assert_eq!(subresource(path), sub, "{path}");
        }
        assert_eq!(verb(&Method::GET), "get");
        assert_eq!(verb(&Method::POST), "create");
    }

    #[test]
    fn a_decision_holds_for_its_node_and_its_ttl_only() {
        let question = |node: &str| Question {
            user: User {
                name: "system:serviceaccount:ops:pvc-resizer".into(),
                groups: vec![],
            },
            node: node.into(),
            verb: "get".into(),
            subresource: "stats".into(),
        };
        let start = Instant::now();
        let mut decisions = Decisions::default();
        decisions.insert(question("node-a"), true, start);
        decisions.insert(question("node-c"), false, start);
        assert_eq!(decisions.get(&question("node-a"), start), Some(true));
        // A grant for one Node (resourceNames) says nothing about another.
        assert_eq!(decisions.get(&question("node-b"), start), None);
        assert_eq!(
            decisions.get(&question("node-a"), start + ALLOWED_TTL),
            None
        );
        assert_eq!(decisions.get(&question("node-c"), start + DENIED_TTL), None);
        assert_eq!(
            decisions.get(&question("node-c"), start + DENIED_TTL / 2),
            Some(false)
        );
    }

    #[test]
    fn a_certificate_names_its_user_and_groups() {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "kube-apiserver-kubelet-client");
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "ops");
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        assert_eq!(
            certificate_user(cert.der()),
            Some(User {
                name: "kube-apiserver-kubelet-client".into(),
                groups: vec!["ops".into()],
            })
        );
        assert_eq!(certificate_user(b"junk"), None);
    }
}
