//! The kubelet's HTTPS API, per node: /healthz, /stats/summary and
//! /containerLogs, reached directly (pvc-resizer reads /stats/summary with its
//! own token) and through the API server's node proxy (`kubectl logs`). Every
//! path but /healthz is authenticated and authorized like a real kubelet's
//! ([`crate::kubelet_auth`]). The serving certificate is the launcher's, signed
//! by the cluster CA (as with `serverTLSBootstrap`), else self-signed.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use k8s_openapi::jiff::Timestamp;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use crate::kubelet_auth::{self, AuthState, Authorizer, Peer};
use crate::pods::volumes::{self, VolKind};
use crate::pods::{PodEntry, Registry, find_pod};

#[derive(Clone)]
pub struct ApiState {
    pub node_name: String,
    pub registry: Registry,
    pub state_dir: PathBuf,
    pub start_time: Timestamp,
    pub authorizer: Authorizer,
}

impl AuthState for ApiState {
    fn node_name(&self) -> &str {
        &self.node_name
    }

    fn authorizer(&self) -> &Authorizer {
        &self.authorizer
    }
}

/// The serving certificate and the CA that signs client certificates.
#[derive(Debug, Clone, Default)]
pub struct TlsFiles {
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub client_ca: Option<PathBuf>,
}

pub fn router(state: ApiState) -> Router {
    let state = Arc::new(state);
    let guarded = Router::new()
        .route("/stats/summary", get(stats_summary))
        .route("/containerLogs/{ns}/{pod}/{container}", get(container_logs))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            kubelet_auth::authorize::<ApiState>,
        ));
    // Unauthenticated, like the kubelet's separate healthz port.
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .merge(guarded)
        .with_state(state)
}

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, TlsListener>> for Peer {
    fn connect_info(stream: axum::serve::IncomingStream<'_, TlsListener>) -> Self {
        stream.remote_addr().clone()
    }
}

/// Serves the router over TLS until `shutdown` resolves.
pub async fn serve(
    tcp: TcpListener,
    state: ApiState,
    tls: &TlsFiles,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let acceptor = tls_acceptor(&state.node_name, tls)?;
    let addr = tcp.local_addr()?;
    let (tx, rx) = mpsc::channel(64);
    // Handshakes run in their own tasks so one slow client blocks no one.
    let accept_task = tokio::spawn(async move {
        loop {
            let Ok((sock, peer)) = tcp.accept().await else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            let acceptor = acceptor.clone();
            let tx = tx.clone();
            tokio::spawn(async move {
                match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(sock)).await {
                    Ok(Ok(tls)) => {
                        let certificate = tls
                            .get_ref()
                            .1
                            .peer_certificates()
                            .and_then(|chain| chain.first())
                            .and_then(|leaf| kubelet_auth::certificate_user(leaf));
                        let peer = Peer {
                            addr: peer,
                            certificate,
                        };
                        let _ = tx.send((tls, peer)).await;
                    }
                    Ok(Err(e)) => tracing::debug!(%peer, error = %e, "kubelet API TLS handshake"),
                    Err(_) => tracing::debug!(%peer, "kubelet API TLS handshake timed out"),
                }
            });
        }
    });
    let listener = TlsListener { rx, local: addr };
    let app = router(state).into_make_service_with_connect_info::<Peer>();
    let result = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await;
    accept_task.abort();
    result.context("kubelet API server")
}

fn tls_acceptor(node: &str, files: &TlsFiles) -> Result<TlsAcceptor> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let (chain, key) = match (&files.cert, &files.key) {
        (Some(cert), Some(key)) => (
            CertificateDer::pem_file_iter(cert)
                .with_context(|| format!("reading {}", cert.display()))?
                .collect::<Result<Vec<_>, _>>()?,
            PrivateKeyDer::from_pem_file(key)
                .with_context(|| format!("reading {}", key.display()))?,
        ),
        _ => {
            let ck = rcgen::generate_simple_self_signed(vec![
                "127.0.0.1".to_string(),
                "localhost".to_string(),
                node.to_string(),
            ])
            .context("generating kubelet serving certificate")?;
            let key = PrivateKeyDer::Pkcs8(rustls::pki_types::PrivatePkcs8KeyDer::from(
                ck.signing_key.serialize_der(),
            ));
            (vec![ck.cert.der().clone()], key)
        }
    };
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?;
    let builder = match &files.client_ca {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_file_iter(ca)
                .with_context(|| format!("reading {}", ca.display()))?
            {
                roots.add(cert?)?;
            }
            // A certificate is one way in; a bearer token is the other.
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .allow_unauthenticated()
            .build()?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut cfg = builder.with_single_cert(chain, key)?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(cfg)))
}

pub struct TlsListener {
    rx: mpsc::Receiver<(TlsStream<TcpStream>, Peer)>,
    local: SocketAddr,
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = Peer;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.rx.recv().await {
            Some(conn) => conn,
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(Peer {
            addr: self.local,
            certificate: None,
        })
    }
}

/// Usage numbers of one volume, as in the kubelet's summary API.
#[derive(Debug, Clone, PartialEq)]
pub struct VolumeSnapshot {
    pub name: String,
    pub pvc: Option<(String, String)>,
    pub used_bytes: u64,
    pub capacity_bytes: u64,
    pub available_bytes: u64,
    pub inodes_used: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ContainerSnapshot {
    pub name: String,
    pub start_time: Option<Timestamp>,
    pub cpu_core_nanos: Option<u64>,
    pub memory_bytes: Option<u64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PodSnapshot {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub start_time: Timestamp,
    pub containers: Vec<ContainerSnapshot>,
    pub volumes: Vec<VolumeSnapshot>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct FsSnapshot {
    pub capacity: u64,
    pub available: u64,
    pub inodes: u64,
    pub inodes_free: u64,
}

/// The /stats/summary document.
pub fn summary_json(
    node: &str,
    node_start: Timestamp,
    now: Timestamp,
    fs: &FsSnapshot,
    memory: (u64, u64),
    pods: &[PodSnapshot],
) -> Value {
    let t = now.to_string();
    let fs_json = json!({
        "time": t,
        "availableBytes": fs.available,
        "capacityBytes": fs.capacity,
        "usedBytes": fs.capacity.saturating_sub(fs.available),
        "inodesFree": fs.inodes_free,
        "inodes": fs.inodes,
        "inodesUsed": fs.inodes.saturating_sub(fs.inodes_free),
    });
    let (mem_total, mem_available) = memory;
    let pods: Vec<Value> = pods
        .iter()
        .map(|p| {
            let containers: Vec<Value> = p
                .containers
                .iter()
                .map(|c| {
                    let mut v = json!({
                        "name": c.name,
                        "startTime": c.start_time.unwrap_or(p.start_time).to_string(),
                    });
                    if let Some(cpu) = c.cpu_core_nanos {
                        v["cpu"] = json!({"time": t, "usageCoreNanoSeconds": cpu});
                    }
                    if let Some(mem) = c.memory_bytes {
                        v["memory"] = json!({"time": t, "workingSetBytes": mem, "rssBytes": mem, "usageBytes": mem});
                    }
                    v
                })
                .collect();
            let volumes: Vec<Value> = p
                .volumes
                .iter()
                .map(|v| {
                    let mut j = json!({
                        "time": t,
                        "name": v.name,
                        "usedBytes": v.used_bytes,
                        "capacityBytes": v.capacity_bytes,
                        "availableBytes": v.available_bytes,
                        "inodesUsed": v.inodes_used,
                    });
                    if let Some((name, ns)) = &v.pvc {
                        j["pvcRef"] = json!({"name": name, "namespace": ns});
                    }
                    j
                })
                .collect();
            let mem: u64 = p.containers.iter().filter_map(|c| c.memory_bytes).sum();
            let cpu: u64 = p.containers.iter().filter_map(|c| c.cpu_core_nanos).sum();
            json!({
                "podRef": {"name": p.name, "namespace": p.namespace, "uid": p.uid},
                "startTime": p.start_time.to_string(),
                "containers": containers,
                "cpu": {"time": t, "usageCoreNanoSeconds": cpu},
                "memory": {"time": t, "workingSetBytes": mem, "usageBytes": mem},
                "volume": volumes,
            })
        })
        .collect();
    json!({
        "node": {
            "nodeName": node,
            "startTime": node_start.to_string(),
            "memory": {
                "time": t,
                "availableBytes": mem_available,
                "usageBytes": mem_total.saturating_sub(mem_available),
                "workingSetBytes": mem_total.saturating_sub(mem_available),
            },
            "fs": fs_json,
            "runtime": {"imageFs": fs_json},
        },
        "pods": pods,
    })
}

fn proc_cpu_nanos(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no memory-safety preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Some(ticks * (1_000_000_000 / hz))
}

fn proc_rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

fn meminfo() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let get = |k: &str| {
        text.lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    (get("MemTotal:"), get("MemAvailable:"))
}

fn snapshot(entry: &PodEntry) -> PodSnapshot {
    let containers = {
        let rt = entry.rt.lock().unwrap();
        rt.containers
            .iter()
            .map(|c| {
                let running = match &c.state {
                    crate::pods::status::CState::Running { started_at } => Some(*started_at),
                    _ => None,
                };
                let pid = c.pid.filter(|_| running.is_some());
                ContainerSnapshot {
                    name: c.name.clone(),
                    start_time: running,
                    cpu_core_nanos: pid.and_then(proc_cpu_nanos),
                    memory_bytes: pid.and_then(proc_rss),
                }
            })
            .collect()
    };
    let vols = entry.volumes.lock().unwrap().clone();
    let mut volumes: Vec<VolumeSnapshot> = vols
        .values()
        .map(|v| match &v.kind {
            VolKind::Pvc {
                claim,
                capacity_bytes,
            } => {
                let s = agent_services::volume_stats(&v.path, *capacity_bytes);
                VolumeSnapshot {
                    name: v.name.clone(),
                    pvc: Some((claim.clone(), entry.namespace.clone())),
                    used_bytes: s.used_bytes,
                    capacity_bytes: s.capacity_bytes,
                    available_bytes: s.available_bytes,
                    inodes_used: s.inodes_used,
                }
            }
            _ => {
                let (used, inodes) = volumes::dir_usage(&v.path);
                let fs = fs_snapshot(&v.path);
                VolumeSnapshot {
                    name: v.name.clone(),
                    pvc: None,
                    used_bytes: used,
                    capacity_bytes: fs.capacity,
                    available_bytes: fs.available,
                    inodes_used: inodes,
                }
            }
        })
        .collect();
    volumes.sort_by(|a, b| a.name.cmp(&b.name));
    PodSnapshot {
        name: entry.name.clone(),
        namespace: entry.namespace.clone(),
        uid: entry.uid.clone(),
        start_time: entry.start_time,
        containers,
        volumes,
    }
}

fn fs_snapshot(path: &std::path::Path) -> FsSnapshot {
    match nix::sys::statvfs::statvfs(path) {
        Ok(s) => FsSnapshot {
            capacity: s.blocks() * s.fragment_size(),
            available: s.blocks_available() * s.fragment_size(),
            inodes: s.files(),
            inodes_free: s.files_free(),
        },
        Err(_) => FsSnapshot::default(),
    }
}

async fn stats_summary(State(st): State<Arc<ApiState>>) -> Response {
    let entries: Vec<Arc<PodEntry>> = st
        .registry
        .read()
        .unwrap()
        .values()
        .filter(|e| e.node == st.node_name)
        .cloned()
        .collect();
    // Directory walks can be slow; keep them off the async workers.
    let st2 = st.clone();
    let doc = tokio::task::spawn_blocking(move || {
        let pods: Vec<PodSnapshot> = entries.iter().map(|e| snapshot(e)).collect();
        summary_json(
            &st2.node_name,
            st2.start_time,
            Timestamp::now(),
            &fs_snapshot(&st2.state_dir),
            meminfo(),
            &pods,
        )
    })
    .await
    .unwrap_or_else(|e| json!({"error": e.to_string()}));
    axum::Json(doc).into_response()
}

#[derive(Debug, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct LogQuery {
    tail_lines: Option<usize>,
    previous: Option<bool>,
    follow: Option<bool>,
    limit_bytes: Option<usize>,
}

/// Last `n` lines of `data`.
pub fn tail_lines(data: &[u8], n: usize) -> &[u8] {
    if n == 0 {
        return &data[data.len()..];
    }
    let body = data.strip_suffix(b"\n").unwrap_or(data);
    let mut count = 0;
    for (i, b) in body.iter().enumerate().rev() {
        if *b == b'\n' {
            count += 1;
            if count == n {
                return &data[i + 1..];
            }
        }
    }
    data
}

async fn container_logs(
    State(st): State<Arc<ApiState>>,
    Path((ns, pod, container)): Path<(String, String, String)>,
    Query(q): Query<LogQuery>,
) -> Response {
    let Some(entry) = find_pod(&st.registry, &ns, &pod) else {
        return (
            StatusCode::NOT_FOUND,
            format!("pod {ns}/{pod} not found on this node"),
        )
            .into_response();
    };
    let restart = {
        let rt = entry.rt.lock().unwrap();
        rt.containers
            .iter()
            .chain(rt.init.iter())
            .find(|c| c.name == container)
            .map(|c| c.restart_count)
    };
    let Some(restart) = restart else {
        return (
            StatusCode::NOT_FOUND,
            format!("container {container:?} is not valid for pod {pod}"),
        )
            .into_response();
    };
    let n = if q.previous == Some(true) {
        restart - 1
    } else {
        restart
    };
    if n < 0 {
        return (
            StatusCode::BAD_REQUEST,
            format!("previous terminated container {container:?} in pod {pod:?} not found"),
        )
            .into_response();
    }
    let path = entry.dir.join(&container).join(format!("{n}.log"));
    let data = tokio::fs::read(&path).await.unwrap_or_default();
    let mut out = match q.tail_lines {
        Some(t) => tail_lines(&data, t).to_vec(),
        None => data.clone(),
    };
    if let Some(limit) = q.limit_bytes {
        out.truncate(limit);
    }
    let headers = [(header::CONTENT_TYPE, "text/plain")];
    if q.follow != Some(true) || q.previous == Some(true) {
        return (headers, out).into_response();
    }
    // Follow: poll the file for growth until the container restarts or the pod goes.
    let state = (
        entry,
        path,
        data.len() as u64,
        Some(out),
        container,
        restart,
        st.registry.clone(),
    );
    let stream = futures::stream::unfold(
        state,
        |(entry, path, mut pos, first, container, restart, reg)| async move {
            if let Some(first) = first {
                return Some((
                    Ok::<_, std::io::Error>(Bytes::from(first)),
                    (entry, path, pos, None, container, restart, reg),
                ));
            }
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                let data = tokio::fs::read(&path).await.unwrap_or_default();
                if (data.len() as u64) > pos {
                    let chunk = Bytes::copy_from_slice(&data[pos as usize..]);
                    pos = data.len() as u64;
                    return Some((Ok(chunk), (entry, path, pos, None, container, restart, reg)));
                }
                let alive = reg.read().unwrap().contains_key(&entry.uid);
                let same_run = {
                    let rt = entry.rt.lock().unwrap();
                    rt.containers.iter().chain(rt.init.iter()).any(|c| {
                        c.name == container && c.restart_count == restart && c.is_running()
                    })
                };
                if !alive || !same_run {
                    return None;
                }
            }
        },
    );
    (headers, Body::from_stream(stream)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tails() {
        assert_eq!(tail_lines(b"a\nb\nc\n", 2), b"b\nc\n");
        assert_eq!(tail_lines(b"a\nb\nc", 2), b"b\nc");
        assert_eq!(tail_lines(b"a\nb\n", 5), b"a\nb\n");
        assert_eq!(tail_lines(b"a\nb\n", 0), b"");
    }

    #[test]
    fn summary_shape() {
        let now = Timestamp::from_second(1_700_000_000).unwrap();
        let pods = vec![PodSnapshot {
            name: "web-0".into(),
            namespace: "ns".into(),
            uid: "u1".into(),
            start_time: now,
            containers: vec![ContainerSnapshot {
                name: "valkey".into(),
                start_time: Some(now),
                cpu_core_nanos: Some(5),
                memory_bytes: Some(1024),
            }],
            volumes: vec![
                VolumeSnapshot {
                    name: "data".into(),
                    pvc: Some(("data-web-0".into(), "ns".into())),
                    used_bytes: 10,
                    capacity_bytes: 100,
                    available_bytes: 90,
                    inodes_used: 2,
                },
                VolumeSnapshot {
                    name: "tmp".into(),
                    pvc: None,
                    used_bytes: 1,
                    capacity_bytes: 1000,
                    available_bytes: 999,
                    inodes_used: 1,
                },
            ],
        }];
        let fs = FsSnapshot {
            capacity: 1000,
            available: 400,
            inodes: 10,
            inodes_free: 4,
        };
        let v = summary_json("local-node-0", now, now, &fs, (100, 40), &pods);
        assert_eq!(v["node"]["nodeName"], "local-node-0");
        assert_eq!(v["node"]["fs"]["usedBytes"], 600);
        assert_eq!(v["node"]["memory"]["usageBytes"], 60);
        let p = &v["pods"][0];
        assert_eq!(
            p["podRef"],
            json!({"name": "web-0", "namespace": "ns", "uid": "u1"})
        );
        assert_eq!(p["startTime"], "2023-11-14T22:13:20Z");
        assert_eq!(p["containers"][0]["memory"]["workingSetBytes"], 1024);
        assert_eq!(
            p["volume"][0]["pvcRef"],
            json!({"name": "data-web-0", "namespace": "ns"})
        );
        assert_eq!(p["volume"][0]["usedBytes"], 10);
        assert_eq!(p["volume"][0]["capacityBytes"], 100);
        assert_eq!(p["volume"][0]["availableBytes"], 90);
        assert_eq!(p["volume"][0]["inodesUsed"], 2);
        assert!(p["volume"][1].get("pvcRef").is_none());
    }
}
