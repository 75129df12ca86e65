//! `run()` end to end, as a binary's `main` uses it: exit codes, the single stderr line,
//! the fail-fast timeout, the probe endpoints and SIGTERM.
//!
//! Each scenario runs in a child process (this test binary re-executed with
//! `OPERATOR_RUNTIME_TEST_SCENARIO` set), because `run` installs process-wide state: the
//! log subscriber and signal handlers. The Kubernetes API is faked on 127.0.0.1.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Output, Stdio};
use std::time::{Duration, Instant};

use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use clap::Parser;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use operator_runtime::{CommonArgs, Context, RequiredCrd, controller};
use serde_json::{Value, json};

const SCENARIO_VAR: &str = "OPERATOR_RUNTIME_TEST_SCENARIO";
const ARGS_VAR: &str = "OPERATOR_RUNTIME_TEST_ARGS";

// ---------------------------------------------------------------- child side

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
}

/// Not a test of its own: the entry point of the child processes. Without the scenario
/// variable (a normal `cargo test` run) it returns at once.
#[test]
fn child_process_entry_point() {
    let Ok(scenario) = std::env::var(SCENARIO_VAR) else {
        return;
    };
    let args = std::env::var(ARGS_VAR).unwrap_or_default();
    let cli = Cli::parse_from(std::iter::once("test-controller").chain(args.split_whitespace()));
    let required = [
        RequiredCrd::new("valkey.rs", "v1alpha1", "valkeynodes"),
        RequiredCrd::new("valkey.rs", "v1alpha1", "valkeyclusters"),
    ];
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let code = runtime.block_on(operator_runtime::run(
        "test-controller",
        "valkey-operator/test",
        cli.common,
        &required,
        move |ctx: Context| controller(scenario, ctx),
    ));
    std::process::exit(exit_status(code));
}

async fn controller(scenario: String, ctx: Context) -> Result<(), String> {
    assert_eq!(ctx.name, "test-controller");
    assert_eq!(ctx.field_manager, "valkey-operator/test");
    match scenario.as_str() {
        // Behaves like a kube-runtime Controller: ready after listing, stops on shutdown.
        "serve" => {
            drop(ctx.metrics.reconcile_started(ctx.name));
            ctx.readiness.mark_ready();
            ctx.shutdown.wait().await;
            Ok(())
        }
        "fail" => Err("reconciler exploded".into()),
        // What the binaries do: a kube-runtime Controller driven by operator_runtime.
        "kube-controller" => {
            controller::run_watching::<ConfigMap, _, _, _, _>(
                &ctx,
                |c| c,
                Arc::new(()),
                controller::observe,
            )
            .await;
            Ok(())
        }
        other => panic!("unknown scenario {other}"),
    }
}

/// `ExitCode` hides its value; find it by comparison.
fn exit_status(code: ExitCode) -> i32 {
    (0..=u8::MAX)
        .find(|c| ExitCode::from(*c) == code)
        .map(i32::from)
        .unwrap_or(255)
}

// ---------------------------------------------------------------- parent side

struct Scenario {
    name: &'static str,
    kubeconfig: PathBuf,
    args: String,
}

impl Scenario {
    fn new(name: &'static str, api_server: Option<SocketAddr>) -> Self {
        // One directory per Scenario: tests run in parallel and several use the same
        // scenario name, and a child reading another test's kubeconfig talks to that
        // test's fake API server.
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "operator-runtime-test-{}-{name}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let kubeconfig = dir.join("kubeconfig");
        match api_server {
            Some(addr) => std::fs::write(&kubeconfig, kubeconfig_yaml(addr)).unwrap(),
            None => {
                let _ = std::fs::remove_file(&kubeconfig);
            }
        }
        Self {
            name,
            kubeconfig,
            args: String::new(),
        }
    }

    fn args(mut self, args: &str) -> Self {
        self.args = args.to_owned();
        self
    }

    fn spawn(&self) -> Child {
        Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "child_process_entry_point",
                "--nocapture",
                "--test-threads=1",
            ])
            // No ambient cluster: only the kubeconfig written here may be used.
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.kubeconfig.parent().unwrap())
            .env("POD_NAME", "test-pod")
            .env("KUBECONFIG", &self.kubeconfig)
            .env(SCENARIO_VAR, self.name)
            .env(
                "RUST_LOG",
                std::env::var("CHILD_RUST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .env(ARGS_VAR, &self.args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    fn run(&self) -> (Output, Duration) {
        let started = Instant::now();
        let output = self.spawn().wait_with_output().unwrap();
        (output, started.elapsed())
    }
}

impl Drop for Scenario {
    // The child reads the kubeconfig at start-up, so keep a Scenario alive while its
    // child runs.
    fn drop(&mut self) {
        if let Some(dir) = self.kubeconfig.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn kubeconfig_yaml(addr: SocketAddr) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: http://{addr}
contexts:
- name: test
  context:
    cluster: test
    user: test
current-context: test
users:
- name: test
  user:
    token: test-token
"
    )
}

fn stderr_lines(output: &Output) -> Vec<String> {
    String::from_utf8_lossy(&output.stderr)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The one Lease the fake API server stores, shared with the test.
type LeaseStore = Arc<Mutex<Option<Value>>>;

/// A minimal API server: /version, discovery for valkey.rs/v1alpha1 serving `plurals`,
/// and just enough of the Lease API for kube-lease-manager (one Lease; get, create, and
/// patches that merge `spec`). Runs on its own thread so that the blocking child-process
/// calls cannot starve it.
fn fake_api_server(plurals: &'static [&'static str]) -> (SocketAddr, LeaseStore) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let lease = LeaseStore::default();
    let store = lease.clone();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let resources: Vec<_> = plurals
                .iter()
                .map(|plural| {
                    json!({
                        "name": plural, "singularName": "", "namespaced": true,
                        "kind": "Kind", "verbs": ["get", "list", "watch"],
                    })
                })
                .collect();
            let discovery = json!({
                "kind": "APIResourceList", "apiVersion": "v1",
                "groupVersion": "valkey.rs/v1alpha1", "resources": resources,
            });
            let version = json!({
                "major": "1", "minor": "33", "gitVersion": "v1.33.0", "gitCommit": "test",
                "gitTreeState": "clean", "buildDate": "2025-01-01T00:00:00Z",
                "goVersion": "go1.24", "compiler": "gc", "platform": "linux/amd64",
            });
            let leases = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases";
            let router = Router::new()
                .route(
                    "/version",
                    get(move || async move { json_response(StatusCode::OK, &version) }),
                )
                .route(
                    "/apis/valkey.rs/v1alpha1",
                    get(move || async move { json_response(StatusCode::OK, &discovery) }),
                )
                .route(
                    "/api/v1/namespaces/{namespace}/configmaps",
                    get(list_or_watch_config_maps),
                )
                .route(leases, post(create_lease))
                .route(
                    &format!("{leases}/{{name}}"),
                    get(get_lease).patch(patch_lease),
                )
                .with_state(store);
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            axum::serve(listener, router).await.unwrap();
        });
    });
    (addr, lease)
}

/// One ConfigMap in each of the namespaces team-a and team-b, none elsewhere (so watching
/// all namespaces never lists); watches stay open without events.
async fn list_or_watch_config_maps(
    Path(namespace): Path<String>,
    uri: axum::http::Uri,
) -> Response {
    if !["team-a", "team-b"].contains(&namespace.as_str()) {
        return not_found();
    }
    if uri.query().unwrap_or_default().contains("watch=true") {
        let silence = futures::stream::pending::<Result<String, std::io::Error>>();
        return (
            [(header::CONTENT_TYPE, "application/json")],
            axum::body::Body::from_stream(silence),
        )
            .into_response();
    }
    let list = json!({
        "apiVersion": "v1", "kind": "ConfigMapList", "metadata": {"resourceVersion": "7"},
        "items": [{
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "config", "namespace": namespace, "resourceVersion": "7"},
        }],
    });
    json_response(StatusCode::OK, &list)
}

async fn get_lease(State(lease): State<LeaseStore>) -> Response {
    match lease.lock().unwrap().clone() {
        Some(lease) => json_response(StatusCode::OK, &lease),
        None => not_found(),
    }
}

async fn create_lease(
    State(lease): State<LeaseStore>,
    Path(namespace): Path<String>,
    body: String,
) -> Response {
    let mut body: Value = serde_json::from_str(&body).unwrap();
    body["metadata"]["namespace"] = json!(namespace);
    body["metadata"]["resourceVersion"] = json!("1");
    *lease.lock().unwrap() = Some(body.clone());
    json_response(StatusCode::CREATED, &body)
}

async fn patch_lease(State(lease): State<LeaseStore>, body: String) -> Response {
    let patch: Value = serde_json::from_str(&body).unwrap();
    let mut stored = lease.lock().unwrap();
    let Some(current) = stored.as_mut() else {
        return not_found();
    };
    if current["spec"].is_null() {
        current["spec"] = json!({});
    }
    for (key, value) in patch["spec"].as_object().into_iter().flatten() {
        let spec = current["spec"].as_object_mut().unwrap();
        if value.is_null() {
            spec.remove(key);
        } else {
            spec.insert(key.clone(), value.clone());
        }
    }
    json_response(StatusCode::OK, current)
}

fn not_found() -> Response {
    let status = json!({
        "kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": "not found", "reason": "NotFound", "code": 404,
    });
    json_response(StatusCode::NOT_FOUND, &status)
}

// axum's Json needs its `json` feature, which the library does not use.
fn json_response(status: StatusCode, body: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn lease_holder(lease: &LeaseStore) -> Option<String> {
    lease.lock().unwrap().as_ref()?["spec"]["holderIdentity"]
        .as_str()
        .map(str::to_owned)
}

/// Makes `holder` the current, unexpired holder of the Lease.
fn hand_lease_to(lease: &LeaseStore, holder: &str) {
    let now = serde_json::to_value(MicroTime(Timestamp::now())).unwrap();
    let spec = json!({
        "holderIdentity": holder, "acquireTime": now, "renewTime": now,
        "leaseDurationSeconds": 3600, "leaseTransitions": 1,
    });
    let mut stored = lease.lock().unwrap();
    let lease = stored.get_or_insert_with(|| {
        json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "test-controller", "namespace": "test-ns", "resourceVersion": "1"},
        })
    });
    lease["spec"] = spec;
}

fn wait_until(what: &str, child: &mut Child, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let mut stdout = String::new();
            let mut stderr = String::new();
            child
                .stdout
                .take()
                .map(|mut out| out.read_to_string(&mut stdout));
            child
                .stderr
                .take()
                .map(|mut err| err.read_to_string(&mut stderr));
            panic!("timed out waiting until {what}\n--- stdout:\n{stdout}\n--- stderr:\n{stderr}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn sigterm(child: &Child) {
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
}

fn status_of(http: SocketAddr, path: &str) -> Option<u16> {
    http_get(http, path)?.get(9..12)?.parse().ok()
}

/// A free port on a loopback address of this call's own. The port is released before the
/// child binds it, and the tests run in parallel: on a shared 127.0.0.1 another test's child
/// could take it in between, and this test would then read that child's metrics.
fn free_loopback_port() -> SocketAddr {
    static NEXT: AtomicU16 = AtomicU16::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let ip = Ipv4Addr::new(127, 97, (n >> 8) as u8, (n & 0xff) as u8);
    TcpListener::bind((ip, 0)).unwrap().local_addr().unwrap()
}

fn http_get(addr: SocketAddr, path: &str) -> Option<String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    Some(response)
}

#[test]
fn missing_kubeconfig_exits_2_with_one_line() {
    let (output, _) = Scenario::new("no-config", None).run();
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let lines = stderr_lines(&output);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0]
            .starts_with("error: test-controller: cannot load a Kubernetes client configuration: "),
        "{lines:?}"
    );
}

#[test]
fn refused_connection_exits_2_quickly() {
    let (output, took) = Scenario::new("refused", Some(free_loopback_port())).run();
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let lines = stderr_lines(&output);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].starts_with("error: test-controller: cannot reach the Kubernetes API server: "),
        "{lines:?}"
    );
    assert!(
        lines[0].contains("refused"),
        "the cause is named: {lines:?}"
    );
    assert!(took < Duration::from_secs(8), "took {took:?}");
}

#[test]
fn silent_api_server_times_out_after_10s() {
    // Accepts connections but never answers.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let (output, took) = Scenario::new("silent", Some(silent.local_addr().unwrap())).run();
    drop(silent);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert_eq!(
        stderr_lines(&output),
        [
            "error: test-controller: cannot reach the Kubernetes API server: no answer within 10s (check KUBECONFIG or the in-cluster service account)"
        ]
    );
    assert!(
        took >= Duration::from_secs(10) && took < Duration::from_secs(20),
        "took {took:?}"
    );
}

#[test]
fn missing_crd_exits_3_and_json_logs_keep_stderr_plain() {
    let (api, _) = fake_api_server(&["valkeynodes"]);
    let started = Instant::now();
    let (output, _) = Scenario::new("missing-crd", Some(api))
        .args("--log-format json --crd-wait-seconds 2")
        .run();
    // It waited for the CRD to be served (an install racing its CRDs) before giving up.
    assert!(started.elapsed() >= Duration::from_secs(2), "{output:?}");
    assert_eq!(output.status.code(), Some(3), "{output:?}");
    let message = "CRD valkeyclusters.valkey.rs is not installed: apply deploy/crds first (kubectl apply -k deploy/crds)";
    assert_eq!(
        stderr_lines(&output),
        [format!("error: test-controller: {message}")]
    );
    // The same message is a structured event on stdout. libtest's own output shares
    // stdout and may precede it on the same line.
    let stdout = String::from_utf8_lossy(&output.stdout);
    let event = stdout
        .lines()
        .filter_map(|line| line.find('{').map(|start| &line[start..]))
        .filter_map(|json| serde_json::from_str::<serde_json::Value>(json).ok())
        .find(|event| event["level"] == "ERROR")
        .unwrap_or_else(|| panic!("no JSON error event in {stdout}"));
    assert_eq!(event["message"], message, "{event}");
}

#[test]
fn controller_error_exits_1() {
    let (api, _) = fake_api_server(&["valkeynodes", "valkeyclusters"]);
    let (output, _) = Scenario::new("fail", Some(api))
        .args(&format!("--http-addr {}", free_loopback_port()))
        .run();
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert_eq!(
        stderr_lines(&output),
        ["error: test-controller: controller failed: reconciler exploded"]
    );
}

#[test]
fn serves_probes_and_metrics_then_exits_0_on_sigterm() {
    let (api, _) = fake_api_server(&["valkeynodes", "valkeyclusters"]);
    let http = free_loopback_port();
    let scenario = Scenario::new("serve", Some(api)).args(&format!("--http-addr {http}"));
    let mut child = scenario.spawn();

    wait_until("/readyz is 200", &mut child, || {
        status_of(http, "/readyz") == Some(200)
    });
    let healthz = http_get(http, "/healthz").unwrap();
    assert!(healthz.starts_with("HTTP/1.1 200"), "{healthz}");
    let metrics = http_get(http, "/metrics").unwrap();
    assert!(
        metrics.contains(r#"valkey_operator_reconcile_runs_total{controller="test-controller"} 1"#),
        "{metrics}"
    );

    sigterm(&child);
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(stderr_lines(&output).is_empty(), "{output:?}");
    assert!(
        http_get(http, "/healthz").is_none(),
        "the HTTP server is gone"
    );
}

const LEADER_ARGS: &str = "--leader-elect --lease-namespace test-ns --http-addr";

#[test]
fn leader_runs_after_acquiring_the_lease_and_releases_it_on_sigterm() {
    let (api, lease) = fake_api_server(&["valkeynodes", "valkeyclusters"]);
    let http = free_loopback_port();
    let scenario = Scenario::new("serve", Some(api)).args(&format!("{LEADER_ARGS} {http}"));
    let mut child = scenario.spawn();

    wait_until(
        "the controller has run and holds the Lease",
        &mut child,
        || {
            http_get(http, "/metrics").is_some_and(|m| m.contains("reconcile_runs_total"))
                && lease_holder(&lease).is_some()
        },
    );
    let holder = lease_holder(&lease).expect("the Lease has a holder");
    assert_eq!(holder, "test-pod", "the pod name is the holder identity");
    assert_eq!(status_of(http, "/readyz"), Some(200));

    sigterm(&child);
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(lease_holder(&lease), None, "released on shutdown");
}

#[test]
fn a_restarted_pod_takes_its_own_lease_back_at_once() {
    let (api, lease) = fake_api_server(&["valkeynodes", "valkeyclusters"]);
    // As a container restart finds it: the Lease held by this pod's last process, unexpired
    // for an hour, so running at all means it did not wait for the Lease to expire.
    hand_lease_to(&lease, "test-pod");
    let http = free_loopback_port();
    let scenario = Scenario::new("serve", Some(api)).args(&format!("{LEADER_ARGS} {http}"));
    let mut child = scenario.spawn();

    wait_until("the controller runs", &mut child, || {
        http_get(http, "/metrics").is_some_and(|m| m.contains("reconcile_runs_total"))
    });
    assert_eq!(lease_holder(&lease).as_deref(), Some("test-pod"));

    sigterm(&child);
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
}

#[test]
fn standby_waits_for_the_lease_and_reports_ready() {
    let (api, lease) = fake_api_server(&["valkeynodes", "valkeyclusters"]);
    hand_lease_to(&lease, "other-replica");
    let http = free_loopback_port();
    let scenario = Scenario::new("serve", Some(api)).args(&format!("{LEADER_ARGS} {http}"));
    let mut child = scenario.spawn();

    // Ready as a standby, so a rolling update can proceed, but not running the controller.
    wait_until("/readyz is 200", &mut child, || {
        status_of(http, "/readyz") == Some(200)
    });
    std::thread::sleep(Duration::from_millis(300));
    let metrics = http_get(http, "/metrics").unwrap();
    assert!(!metrics.contains("reconcile_runs_total"), "{metrics}");
    assert_eq!(lease_holder(&lease).as_deref(), Some("other-replica"));

    sigterm(&child);
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(
        lease_holder(&lease).as_deref(),
        Some("other-replica"),
        "a standby does not touch the holder's Lease"
    );
}

#[test]
fn losing_the_lease_exits_1() {
    let (api, lease) = fake_api_server(&["valkeynodes", "valkeyclusters"]);
    let http = free_loopback_port();
    let scenario = Scenario::new("serve", Some(api)).args(&format!("{LEADER_ARGS} {http}"));
    let mut child = scenario.spawn();
    wait_until("the controller has run", &mut child, || {
        http_get(http, "/metrics").is_some_and(|m| m.contains("reconcile_runs_total"))
    });

    // Another replica takes over; our next renewal (within 5s) notices.
    hand_lease_to(&lease, "other-replica");
    let started = Instant::now();
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert_eq!(
        stderr_lines(&output),
        [
            "error: test-controller: lost leadership of Lease test-ns/test-controller to another replica; exiting so that only one replica reconciles"
        ]
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// The controller binaries' loop over `namespaces` (a `--watch-namespaces` value): ready
/// once every namespace listed, then each namespace's ConfigMap reconciled once.
fn drives_a_kube_runtime_controller_in(flag: &str, namespaces: &str, reconciles: usize) {
    let (api, _) = fake_api_server(&["valkeynodes", "valkeyclusters"]);
    let http = free_loopback_port();
    let scenario = Scenario::new("kube-controller", Some(api))
        .args(&format!("{flag} {namespaces} --http-addr {http}"));
    let mut child = scenario.spawn();

    wait_until("/readyz is 200", &mut child, || {
        status_of(http, "/readyz") == Some(200)
    });
    let runs = format!(
        r#"valkey_operator_reconcile_runs_total{{controller="test-controller"}} {reconciles}"#
    );
    let durations = format!(
        r#"valkey_operator_reconcile_duration_seconds_count{{controller="test-controller"}} {reconciles}"#
    );
    wait_until("every ConfigMap has been reconciled", &mut child, || {
        http_get(http, "/metrics").is_some_and(|m| m.contains(&runs) && m.contains(&durations))
    });

    sigterm(&child);
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(stderr_lines(&output).is_empty(), "{output:?}");
}

#[test]
fn drives_a_kube_runtime_controller_in_the_watch_namespace() {
    drives_a_kube_runtime_controller_in("--watch-namespace", "team-a", 1);
}

#[test]
fn drives_a_kube_runtime_controller_over_a_list_of_namespaces() {
    drives_a_kube_runtime_controller_in("--watch-namespaces", "team-a,team-b", 2);
}
