//! agent-services against a real API server, without the node agent (each test starts its
//! own control plane).
//!
//! Pods are never actually run here: the test writes their status (IP,
//! Ready) itself, and serves their "container" from an in-process echo server.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use agent_services::{
    ControlClient, Freezer, PROVISIONER, Partitions, STORAGE_CLASS, run_provisioner,
    run_service_proxy, serve_control,
};
use k8s_openapi::api::core::v1::{
    Namespace, PersistentVolume, PersistentVolumeClaim, Pod, Service,
};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::oneshot;

/// A control plane for one test; dropped (and stopped) at the end of the test.
struct ControlPlane {
    cluster: local_cluster::LocalCluster,
    _run: tempfile::TempDir,
}

async fn control_plane() -> ControlPlane {
    let run = tempfile::tempdir().unwrap();
    let mut options = local_cluster::Options::new(run.path());
    options.agent = false;
    let cluster = local_cluster::LocalCluster::start(options).await.unwrap();
    ControlPlane { cluster, _run: run }
}

async fn namespace(client: &Client, prefix: &str) -> String {
    let ns: Namespace = serde_json::from_value(json!({
        "metadata": { "generateName": format!("{prefix}-") }
    }))
    .unwrap();
    let ns = Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    ns.metadata.name.unwrap()
}

async fn eventually<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn stopper() -> (
    oneshot::Sender<()>,
    impl Future<Output = ()> + Send + 'static,
) {
    let (tx, rx) = oneshot::channel::<()>();
    (tx, async move {
        let _ = rx.await;
    })
}

fn storage(
    q: Option<
        &std::collections::BTreeMap<
            String,
            k8s_openapi::apimachinery::pkg::api::resource::Quantity,
        >,
    >,
) -> Option<String> {
    q?.get("storage").map(|q| q.0.clone())
}

#[tokio::test]
async fn provisions_expands_and_reclaims() {
    let plane = control_plane().await;
    let client = plane.cluster.client().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (stop, shutdown) = stopper();
    let prov = tokio::spawn(run_provisioner(client.clone(), dir.path().into(), shutdown));
    // A second instance racing the first (as after a crash/restart overlap)
    // must not create duplicate volumes.
    let (stop2, shutdown2) = stopper();
    let prov2 = tokio::spawn(run_provisioner(
        client.clone(),
        dir.path().into(),
        shutdown2,
    ));

    let sc = eventually("StorageClass", || async {
        Api::<StorageClass>::all(client.clone())
            .get_opt(STORAGE_CLASS)
            .await
            .unwrap()
    })
    .await;
    assert_eq!(sc.provisioner, PROVISIONER);
    assert_eq!(sc.allow_volume_expansion, Some(true));

    let ns = namespace(&client, "as-pvc").await;
    let pvcs = Api::<PersistentVolumeClaim>::namespaced(client.clone(), &ns);
    let pvs = Api::<PersistentVolume>::all(client.clone());
    // No storageClassName: the default class must be filled in.
    for name in ["data-0", "data-1"] {
        let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": { "name": name },
            "spec": { "accessModes": ["ReadWriteOnce"], "resources": { "requests": { "storage": "1Gi" } } }
        }))
        .unwrap();
        pvcs.create(&PostParams::default(), &pvc).await.unwrap();
    }

    let mut pv_names = Vec::new();
    for name in ["data-0", "data-1"] {
        let pvc = eventually("PVC Bound", || async {
            let p = pvcs.get(name).await.unwrap();
            (p.status.as_ref()?.phase.as_deref() == Some("Bound")).then_some(p)
        })
        .await;
        assert_eq!(
            pvc.spec.as_ref().unwrap().storage_class_name.as_deref(),
            Some(STORAGE_CLASS)
        );
        assert_eq!(
            storage(pvc.status.as_ref().unwrap().capacity.as_ref()).as_deref(),
            Some("1Gi")
        );
        let pv_name = pvc.spec.unwrap().volume_name.unwrap();
        assert_eq!(pv_name, format!("pvc-{}", pvc.metadata.uid.unwrap()));
        let pv = pvs.get(&pv_name).await.unwrap();
        let path = pv
            .spec
            .as_ref()
            .unwrap()
            .host_path
            .as_ref()
            .unwrap()
            .path
            .clone();
        assert_eq!(path, dir.path().join(&pv_name).to_string_lossy());
        assert!(std::path::Path::new(&path).is_dir());
        let all = pvs.list(&Default::default()).await.unwrap().items;
        let for_claim = all.iter().filter(|pv| {
            let r = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
            r.and_then(|r| r.uid.as_deref()) == Some(&pv_name[4..])
        });
        assert_eq!(for_claim.count(), 1, "exactly one PV per claim");
        pv_names.push(pv_name);
    }

    // Expansion: PV first, then the claim status.
    let grow = json!({ "spec": { "resources": { "requests": { "storage": "3Gi" } } } });
    pvcs.patch("data-0", &PatchParams::default(), &Patch::Merge(&grow))
        .await
        .unwrap();
    eventually("PVC capacity 3Gi", || async {
        let p = pvcs.get("data-0").await.unwrap();
        (storage(p.status.as_ref()?.capacity.as_ref()).as_deref() == Some("3Gi")).then_some(())
    })
    .await;
    let status = pvcs.get("data-0").await.unwrap().status.unwrap();
    eprintln!(
        "expanded PVC status: {}",
        serde_json::to_string(&status).unwrap()
    );
    assert!(status.conditions.unwrap_or_default().is_empty());
    assert!(status.allocated_resource_statuses.is_none());
    let pv = pvs.get(&pv_names[0]).await.unwrap();
    assert_eq!(
        storage(pv.spec.as_ref().unwrap().capacity.as_ref()).as_deref(),
        Some("3Gi")
    );
    // Reclaim Delete: directory and PV go away.
    let dir0 = dir.path().join(&pv_names[0]);
    std::fs::write(dir0.join("dump.rdb"), b"data").unwrap();
    pvcs.delete("data-0", &DeleteParams::default())
        .await
        .unwrap();
    eventually("PV deleted", || async {
        pvs.get_opt(&pv_names[0])
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    assert!(!dir0.exists(), "volume directory removed");

    // Retain: both stay after the claim is gone.
    let retain = json!({ "spec": { "persistentVolumeReclaimPolicy": "Retain" } });
    pvs.patch(
        &pv_names[1],
        &PatchParams::default(),
        &Patch::Merge(&retain),
    )
    .await
    .unwrap();
    pvcs.delete("data-1", &DeleteParams::default())
        .await
        .unwrap();
    eventually("PV Released", || async {
        let pv = pvs.get(&pv_names[1]).await.unwrap();
        (pv.status?.phase.as_deref() == Some("Released")).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(pvs.get_opt(&pv_names[1]).await.unwrap().is_some());
    assert!(dir.path().join(&pv_names[1]).is_dir());

    // Cleanup.
    pvs.delete(&pv_names[1], &DeleteParams::default())
        .await
        .unwrap();
    Api::<Namespace>::all(client.clone())
        .delete(&ns, &DeleteParams::default())
        .await
        .unwrap();
    stop.send(()).unwrap();
    stop2.send(()).unwrap();
    for p in [prov, prov2] {
        let r = tokio::time::timeout(Duration::from_secs(10), p).await;
        r.unwrap().unwrap().unwrap();
    }
}

async fn echo_server(ip: &str) -> SocketAddr {
    let l = TcpListener::bind((ip.parse::<IpAddr>().unwrap(), 0))
        .await
        .unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr
}

/// Send "ping" from `src` to `dst`; Some("ping") if echoed.
async fn ping(src: &str, dst: SocketAddr) -> Option<String> {
    let sock = TcpSocket::new_v4().ok()?;
    sock.bind(SocketAddr::new(src.parse().unwrap(), 0)).ok()?;
    let mut s: TcpStream = sock.connect(dst).await.ok()?;
    s.write_all(b"ping").await.ok()?;
    let mut buf = [0u8; 16];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
        .await
        .ok()?
        .ok()?;
    (n > 0).then(|| String::from_utf8_lossy(&buf[..n]).into_owned())
}

struct NoFreezer;
impl Freezer for NoFreezer {
    fn freeze(&self, _: &str, _: &str) -> Result<(), String> {
        Err("not supported here".into())
    }
    fn thaw(&self, _: &str, _: &str) -> Result<(), String> {
        Err("not supported here".into())
    }
}

#[tokio::test]
async fn proxies_services_to_pods() {
    let plane = control_plane().await;
    let client = plane.cluster.client().await.unwrap();
    let ns = namespace(&client, "as-svc").await;
    let partitions = Partitions::new();
    let (stop, shutdown) = stopper();
    let proxy = tokio::spawn(run_service_proxy(
        client.clone(),
        partitions.clone(),
        shutdown,
    ));
    let control_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let control = ControlClient::new(control_listener.local_addr().unwrap());
    let (stop_ctl, ctl_shutdown) = stopper();
    let ctl = tokio::spawn(serve_control(
        control_listener,
        partitions.clone(),
        Arc::new(NoFreezer),
        client.clone(),
        ctl_shutdown,
    ));

    let pod_ip = "127.64.77.1";
    let echo = echo_server(pod_ip).await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": { "name": "echo-0", "labels": { "app": "echo" } },
        "spec": { "containers": [{ "name": "echo", "image": "none",
            "ports": [{ "name": "echo", "containerPort": echo.port() }] }] }
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let set_ready = |ready: bool| {
        json!({ "status": {
            "phase": "Running",
            "podIP": pod_ip,
            "podIPs": [{ "ip": pod_ip }],
            "conditions": [{ "type": "Ready", "status": if ready { "True" } else { "False" } }],
        }})
    };
    pods.patch_status(
        "echo-0",
        &PatchParams::default(),
        &Patch::Merge(&set_ready(true)),
    )
    .await
    .unwrap();

    let svcs = Api::<Service>::namespaced(client.clone(), &ns);
    let svc: Service = serde_json::from_value(json!({
        "metadata": { "name": "echo" },
        "spec": { "selector": { "app": "echo" },
            "ports": [{ "name": "echo", "port": 7777, "targetPort": "echo" }] }
    }))
    .unwrap();
    let svc = svcs.create(&PostParams::default(), &svc).await.unwrap();
    let cluster_ip = svc.spec.unwrap().cluster_ip.unwrap();
    let vip: SocketAddr = format!("{cluster_ip}:7777").parse().unwrap();
    eprintln!("service ClusterIP {vip}");

    let client_ip = "127.64.77.9";
    eventually("proxy forwards", || ping(client_ip, vip)).await;

    // Partition via the control API (pod name resolved through the API).
    let mut open = {
        let sock = TcpSocket::new_v4().unwrap();
        sock.bind(SocketAddr::new(client_ip.parse().unwrap(), 0))
            .unwrap();
        sock.connect(vip).await.unwrap()
    };
    open.write_all(b"x").await.unwrap();
    let mut b = [0u8; 1];
    open.read_exact(&mut b).await.unwrap();
    control
        .cut(&format!("{ns}/echo-0"), client_ip)
        .await
        .unwrap();
    assert_eq!(
        control.partitions().await.unwrap(),
        vec![(pod_ip.parse().unwrap(), client_ip.parse().unwrap())]
    );
    let _ = open.write_all(b"y").await;
    let n = tokio::time::timeout(Duration::from_secs(5), open.read(&mut b))
        .await
        .unwrap();
    assert!(matches!(n, Ok(0) | Err(_)), "open connection torn down");
    assert_eq!(ping(client_ip, vip).await, None, "new connection refused");
    assert!(
        ping("127.64.77.10", vip).await.is_some(),
        "other clients unaffected"
    );
    control
        .heal(client_ip, &format!("{ns}/echo-0"))
        .await
        .unwrap();
    assert!(ping(client_ip, vip).await.is_some());
    assert!(control.freeze(&format!("{ns}/echo-0")).await.is_err());

    // Not ready → rejected; publishNotReadyAddresses → served again.
    pods.patch_status(
        "echo-0",
        &PatchParams::default(),
        &Patch::Merge(&set_ready(false)),
    )
    .await
    .unwrap();
    eventually("unready pod rejected", || async {
        ping(client_ip, vip).await.is_none().then_some(())
    })
    .await;
    let pnr = json!({ "spec": { "publishNotReadyAddresses": true } });
    svcs.patch("echo", &PatchParams::default(), &Patch::Merge(&pnr))
        .await
        .unwrap();
    eventually("publishNotReady serves", || ping(client_ip, vip)).await;

    // Port change: old port closes, new one serves.
    let repl =
        json!({ "spec": { "ports": [{ "name": "echo", "port": 7778, "targetPort": "echo" }] } });
    svcs.patch("echo", &PatchParams::default(), &Patch::Merge(&repl))
        .await
        .unwrap();
    let vip2: SocketAddr = format!("{cluster_ip}:7778").parse().unwrap();
    eventually("new port serves", || ping(client_ip, vip2)).await;
    eventually("old port closed", || async {
        TcpStream::connect(vip).await.is_err().then_some(())
    })
    .await;

    // Deleting the Service closes its listener.
    svcs.delete("echo", &DeleteParams::default()).await.unwrap();
    eventually("listener closed", || async {
        TcpStream::connect(vip2).await.is_err().then_some(())
    })
    .await;

    Api::<Namespace>::all(client.clone())
        .delete(&ns, &DeleteParams::default())
        .await
        .unwrap();
    stop.send(()).unwrap();
    stop_ctl.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), proxy)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), ctl)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}
