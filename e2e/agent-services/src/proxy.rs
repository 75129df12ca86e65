//! kube-proxy stand-in: one userspace TCP listener per (ClusterIP, port).
//!
//! Backend choice: round-robin over the eligible pods sorted by name, decided
//! per accepted connection from the *current* Pod/Service caches (so pod
//! readiness or selector changes apply without restarting listeners). It is
//! deterministic like "first by name" for single-backend Services, and like
//! kube-proxy's random pick it lets a retrying client reach another backend.
//!
//! The proxy dials the backend from the client's own source IP, so backends
//! see the real client address, as with kube-proxy for ClusterIP traffic.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::Error;
use crate::backends::{self, Backend};
use crate::partitions::{ConnGuard, Partitions};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const REBIND_INTERVAL: Duration = Duration::from_secs(1);

/// Watch Services and Pods in all namespaces and proxy every ClusterIP TCP
/// port to matching pods until `shutdown` resolves. All listener and
/// connection tasks are stopped before this returns.
pub async fn run_service_proxy(
    client: kube::Client,
    partitions: Partitions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let (svc_store, svc_writer) = reflector::store::<Service>();
    let (pod_store, pod_writer) = reflector::store::<Pod>();
    let svc_events = reflector::reflector(
        svc_writer,
        watcher(
            Api::<Service>::all(client.clone()),
            watcher::Config::default(),
        )
        .default_backoff(),
    );
    let pod_events = reflector::reflector(
        pod_writer,
        watcher(Api::<Pod>::all(client), watcher::Config::default()).default_backoff(),
    );
    tokio::pin!(svc_events, pod_events, shutdown);

    let mut listeners = Listeners::new(partitions, svc_store.clone(), pod_store.clone());
    let (mut svc_synced, mut pod_synced) = (false, false);
    let result = loop {
        let mut changed = false;
        tokio::select! {
            _ = &mut shutdown => break Ok(()),
            ev = svc_events.next() => match ev {
                Some(Ok(ev)) => {
                    svc_synced |= matches!(ev, watcher::Event::InitDone);
                    changed = true;
                }
                Some(Err(e)) => warn!(error = %e, "service watch error (retrying)"),
                None => break Err(Error::WatchEnded("services")),
            },
            ev = pod_events.next() => match ev {
                // Pods only affect backend choice, which is read at accept
                // time; the first full sync unblocks starting listeners.
                Some(Ok(watcher::Event::InitDone)) if !pod_synced => {
                    pod_synced = true;
                    changed = true;
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => warn!(error = %e, "pod watch error (retrying)"),
                None => break Err(Error::WatchEnded("pods")),
            },
        }
        if changed && svc_synced && pod_synced {
            listeners.reconcile(&svc_store.state()).await;
        }
    };
    listeners.stop_all().await;
    result
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ListenerKey {
    namespace: String,
    name: String,
    ip: IpAddr,
    port: u16,
}

struct Listener {
    cancel: CancellationToken,
    task: JoinHandle<()>,
}

struct Listeners {
    partitions: Partitions,
    services: Store<Service>,
    pods: Store<Pod>,
    running: HashMap<ListenerKey, Listener>,
}

impl Listeners {
    fn new(partitions: Partitions, services: Store<Service>, pods: Store<Pod>) -> Self {
        Self {
            partitions,
            services,
            pods,
            running: HashMap::new(),
        }
    }

    fn desired(services: &[Arc<Service>]) -> Vec<ListenerKey> {
        let mut out = Vec::new();
        for svc in services {
            let (Some(ip), Some(_)) = (backends::cluster_ip(svc), backends::selector(svc)) else {
                continue;
            };
            for p in backends::tcp_ports(svc) {
                out.push(ListenerKey {
                    namespace: svc.metadata.namespace.clone().unwrap_or_default(),
                    name: svc.metadata.name.clone().unwrap_or_default(),
                    ip,
                    port: p.port as u16, // range-checked by tcp_ports
                });
            }
        }
        out
    }

    async fn reconcile(&mut self, services: &[Arc<Service>]) {
        let desired = Self::desired(services);
        let stale: Vec<ListenerKey> = self
            .running
            .keys()
            .filter(|k| !desired.contains(k))
            .cloned()
            .collect();
        // Stop first and wait, so a Service re-created with the same
        // ClusterIP:port can bind again immediately.
        for key in stale {
            if let Some(l) = self.running.remove(&key) {
                info!(svc = %format!("{}/{}", key.namespace, key.name), addr = %SocketAddr::new(key.ip, key.port), "stopping listener");
                l.cancel.cancel();
                let _ = l.task.await;
            }
        }
        for key in desired {
            if self.running.contains_key(&key) {
                continue;
            }
            let cancel = CancellationToken::new();
            let resolve = self.resolver(&key);
            let task = tokio::spawn(bind_and_serve(
                SocketAddr::new(key.ip, key.port),
                format!("{}/{}", key.namespace, key.name),
                resolve,
                self.partitions.clone(),
                cancel.clone(),
            ));
            self.running.insert(key, Listener { cancel, task });
        }
    }

    fn resolver(&self, key: &ListenerKey) -> impl Fn() -> Vec<Backend> + Send + Sync + 'static {
        let (services, pods) = (self.services.clone(), self.pods.clone());
        let oref = ObjectRef::<Service>::new(&key.name).within(&key.namespace);
        let (ip, port) = (key.ip, key.port);
        move || {
            let Some(svc) = services.get(&oref) else {
                return Vec::new();
            };
            if backends::cluster_ip(&svc) != Some(ip) {
                return Vec::new();
            }
            let pods = pods.state();
            backends::backends_for(&svc, port, pods.iter().map(|p| &**p))
        }
    }

    async fn stop_all(&mut self) {
        for l in self.running.values() {
            l.cancel.cancel();
        }
        for (_, l) in self.running.drain() {
            let _ = l.task.await;
        }
    }
}

/// Bind (retrying while e.g. the address is still in use) and serve.
async fn bind_and_serve<F>(
    addr: SocketAddr,
    service: String,
    resolve: F,
    partitions: Partitions,
    cancel: CancellationToken,
) where
    F: Fn() -> Vec<Backend> + Send + Sync + 'static,
{
    let listener = loop {
        match TcpListener::bind(addr).await {
            Ok(l) => break l,
            Err(e) => {
                warn!(%addr, %service, error = %e, "bind failed; retrying");
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(REBIND_INTERVAL) => {}
                }
            }
        }
    };
    info!(%addr, %service, "listening");
    serve_listener(listener, resolve, partitions, cancel).await;
}

/// The forwarding core, independent of the API server: accept on
/// `listener`, pick a backend via `resolve` (round-robin), and splice bytes
/// until either side closes, the listener is cancelled, or the pair is cut.
/// Returns once `cancel` fires, after all its connection tasks ended.
pub(crate) async fn serve_listener<F>(
    listener: TcpListener,
    resolve: F,
    partitions: Partitions,
    cancel: CancellationToken,
) where
    F: Fn() -> Vec<Backend> + Send + Sync + 'static,
{
    let next = AtomicUsize::new(0);
    // Owning the connection tasks here means dropping the set on exit
    // aborts any straggler: nothing outlives the listener.
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            _ = cancel.cancelled() => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            accepted = listener.accept() => {
                let (client, peer) = match accepted {
                    Ok(x) => x,
                    Err(e) => {
                        // E.g. EMFILE: back off briefly instead of spinning.
                        warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let candidates = resolve();
                if candidates.is_empty() {
                    debug!(%peer, "no ready backend; rejecting");
                    reject(client);
                    continue;
                }
                let backend = candidates[next.fetch_add(1, Ordering::Relaxed) % candidates.len()].clone();
                let conn_cancel = cancel.child_token();
                let Some(guard) = partitions.register(peer.ip(), backend.addr.ip(), conn_cancel.clone()) else {
                    debug!(%peer, backend = %backend.addr, "partitioned; rejecting");
                    reject(client);
                    continue;
                };
                conns.spawn(forward(client, peer.ip(), backend.addr, conn_cancel, guard));
            }
        }
    }
    // Children of `cancel` are already cancelled; let them close cleanly.
    while conns.join_next().await.is_some() {}
}

/// Close with RST, the closest userspace analogue of kube-proxy's REJECT.
fn reject(stream: TcpStream) {
    let _ = stream.set_zero_linger();
    drop(stream);
}

async fn connect_from(src: IpAddr, dst: SocketAddr) -> std::io::Result<TcpStream> {
    let sock = if dst.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    // Preserve the client's source IP when possible (any 127.x is local).
    if src.is_loopback() && src.is_ipv4() == dst.is_ipv4() {
        let _ = sock.bind(SocketAddr::new(src, 0));
    }
    sock.connect(dst).await
}

async fn forward(
    mut client: TcpStream,
    src: IpAddr,
    backend: SocketAddr,
    cancel: CancellationToken,
    _guard: ConnGuard,
) {
    let upstream = tokio::select! {
        _ = cancel.cancelled() => None,
        r = tokio::time::timeout(CONNECT_TIMEOUT, connect_from(src, backend)) => match r {
            Ok(Ok(s)) => Some(s),
            Ok(Err(e)) => { debug!(%backend, error = %e, "backend connect failed"); None }
            Err(_) => { debug!(%backend, "backend connect timed out"); None }
        },
    };
    let Some(mut upstream) = upstream else {
        reject(client);
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    tokio::select! {
        _ = cancel.cancelled() => {
            debug!(%src, %backend, "connection torn down");
            reject(client);
            reject(upstream);
        }
        r = tokio::io::copy_bidirectional(&mut client, &mut upstream) => {
            if let Err(e) = r {
                debug!(%src, %backend, error = %e, "connection ended with error");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Echo server that prefixes replies with its name, so tests can tell
    /// which backend answered.
    async fn echo_server(ip: &str, tag: &'static str) -> SocketAddr {
        let l = TcpListener::bind((ip.parse::<IpAddr>().unwrap(), 0))
            .await
            .unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = l.accept().await else {
                    return;
                };
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    loop {
                        match s.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => {
                                let mut out = tag.as_bytes().to_vec();
                                out.extend_from_slice(&buf[..n]);
                                if s.write_all(&out).await.is_err() {
                                    return;
                                }
                            }
                        }
                    }
                });
            }
        });
        addr
    }

    /// Connect from `src`, send `msg`, return the reply (None if the proxy
    /// closed/reset the connection).
    async fn roundtrip(src: &str, proxy: SocketAddr, msg: &str) -> Option<String> {
        let mut s = connect_from(src.parse().unwrap(), proxy).await.ok()?;
        request(&mut s, msg).await
    }

    async fn request(s: &mut TcpStream, msg: &str) -> Option<String> {
        s.write_all(msg.as_bytes()).await.ok()?;
        let mut buf = vec![0u8; 256];
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
            .await
            .expect("proxy hung")
            .ok()?;
        (n > 0).then(|| String::from_utf8_lossy(&buf[..n]).into_owned())
    }

    fn backend(pod: &str, addr: SocketAddr) -> Backend {
        Backend {
            pod: pod.into(),
            addr,
        }
    }

    #[tokio::test]
    async fn proxies_round_robin_and_honours_partitions() {
        let a = echo_server("127.64.10.1", "a:").await;
        let b = echo_server("127.64.10.2", "b:").await;
        let listener = TcpListener::bind("127.100.10.1:0").await.unwrap();
        let proxy = listener.local_addr().unwrap();
        let partitions = Partitions::new();
        let cancel = CancellationToken::new();
        let backends = vec![backend("a", a), backend("b", b)];
        let server = tokio::spawn(serve_listener(
            listener,
            move || backends.clone(),
            partitions.clone(),
            cancel.clone(),
        ));

        let client_ip = "127.64.10.9";
        let r1 = roundtrip(client_ip, proxy, "x").await.unwrap();
        let r2 = roundtrip(client_ip, proxy, "x").await.unwrap();
        let mut seen = [r1, r2];
        seen.sort();
        assert_eq!(seen, ["a:x", "b:x"], "round-robin over both backends");

        // Open a long-lived connection to whichever backend comes next (a).
        let mut open = connect_from(client_ip.parse().unwrap(), proxy)
            .await
            .unwrap();
        assert_eq!(request(&mut open, "1").await.as_deref(), Some("a:1"));
        assert_eq!(partitions.live_connections(), 1);

        // Cut client<->a: the open connection dies, new ones to a are refused.
        partitions.cut(a.ip(), client_ip.parse().unwrap());
        assert_eq!(
            request(&mut open, "2").await,
            None,
            "existing conn torn down"
        );
        let mut outcomes = Vec::new();
        for _ in 0..4 {
            outcomes.push(roundtrip(client_ip, proxy, "y").await);
        }
        assert!(
            outcomes.contains(&None),
            "connections to a refused: {outcomes:?}"
        );
        assert!(
            outcomes.contains(&Some("b:y".into())),
            "b still reachable: {outcomes:?}"
        );
        // Another client is unaffected by the cut.
        for _ in 0..2 {
            assert!(roundtrip("127.64.10.8", proxy, "z").await.is_some());
        }

        partitions.heal(client_ip.parse().unwrap(), a.ip());
        for _ in 0..4 {
            assert!(roundtrip(client_ip, proxy, "w").await.is_some());
        }

        // Stopping the listener ends all its connections and its task.
        let mut open = connect_from(client_ip.parse().unwrap(), proxy)
            .await
            .unwrap();
        assert!(request(&mut open, "q").await.is_some());
        cancel.cancel();
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("listener task exits")
            .unwrap();
        assert_eq!(request(&mut open, "r").await, None);
        assert_eq!(partitions.live_connections(), 0);
        assert!(
            connect_from(client_ip.parse().unwrap(), proxy)
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn no_backend_closes_immediately() {
        let listener = TcpListener::bind("127.100.10.2:0").await.unwrap();
        let proxy = listener.local_addr().unwrap();
        let cancel = CancellationToken::new();
        let server = tokio::spawn(serve_listener(
            listener,
            Vec::new,
            Partitions::new(),
            cancel.clone(),
        ));
        assert_eq!(roundtrip("127.0.0.1", proxy, "x").await, None);
        cancel.cancel();
        server.await.unwrap();
    }

    #[tokio::test]
    async fn dead_backend_closes_client() {
        // Reserve a port then free it so nothing listens there.
        let dead = TcpListener::bind("127.64.10.3:0")
            .await
            .unwrap()
            .local_addr()
            .unwrap();
        let listener = TcpListener::bind("127.100.10.3:0").await.unwrap();
        let proxy = listener.local_addr().unwrap();
        let cancel = CancellationToken::new();
        let partitions = Partitions::new();
        let server = tokio::spawn(serve_listener(
            listener,
            move || vec![backend("dead", dead)],
            partitions.clone(),
            cancel.clone(),
        ));
        assert_eq!(roundtrip("127.0.0.1", proxy, "x").await, None);
        cancel.cancel();
        server.await.unwrap();
        assert_eq!(partitions.live_connections(), 0);
    }

    #[tokio::test]
    async fn backend_sees_client_source_ip() {
        let l = TcpListener::bind("127.64.10.4:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let peer = tokio::spawn(async move { l.accept().await.unwrap().1.ip() });
        let listener = TcpListener::bind("127.100.10.4:0").await.unwrap();
        let proxy = listener.local_addr().unwrap();
        let cancel = CancellationToken::new();
        let server = tokio::spawn(serve_listener(
            listener,
            move || vec![backend("p", addr)],
            Partitions::new(),
            cancel.clone(),
        ));
        let _c = connect_from("127.64.10.5".parse().unwrap(), proxy)
            .await
            .unwrap();
        assert_eq!(peer.await.unwrap().to_string(), "127.64.10.5");
        cancel.cancel();
        server.await.unwrap();
    }

    #[test]
    fn desired_listeners_skip_headless_and_selectorless() {
        use crate::backends::fixtures::*;
        let app = [("app", "v")];
        let svcs: Vec<Arc<Service>> = vec![
            Arc::new(service(
                "ns",
                "a",
                "127.100.0.1",
                Some(&app),
                vec![port(6379, None), port(16379, None)],
            )),
            Arc::new(service(
                "ns",
                "headless",
                "None",
                Some(&app),
                vec![port(6379, None)],
            )),
            Arc::new(service(
                "ns",
                "manual",
                "127.100.0.2",
                None,
                vec![port(6379, None)],
            )),
        ];
        let d = Listeners::desired(&svcs);
        assert_eq!(d.len(), 2);
        assert!(
            d.iter()
                .all(|k| k.name == "a" && k.ip.to_string() == "127.100.0.1")
        );
    }
}
