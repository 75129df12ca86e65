//! The local cluster runs real pods: upstream controllers and scheduler, our node agent,
//! real valkey-server processes. Scenarios run in sequence on one cluster, each in its own
//! namespace, and the cluster is torn down at the end (checked: no process left).

use std::process::Command;
use std::time::Duration;

use agent_services::ControlClient;
use e2e_kit::testing::{pod_ready, valkey_cli};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim, Pod, Service};
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, Client};
use local_cluster::{LocalCluster, Options};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

async fn apply<K>(client: &Client, namespace: &str, object: Value) -> K
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    let name = object["metadata"]["name"].as_str().unwrap().to_string();
    api.patch(
        &name,
        &PatchParams::apply("e2e").force(),
        &Patch::Apply(&object),
    )
    .await
    .unwrap_or_else(|e| panic!("applying {name}: {e}"))
}

async fn namespace(client: &Client, name: &str) {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
    api.patch(name, &PatchParams::apply("e2e"), &Patch::Apply(&ns))
        .await
        .unwrap();
}

/// Pod labels, a PVC and a Service for a single Valkey server named `name`.
fn valkey_pod_template(name: &str, with_claim: bool) -> Value {
    let mut volumes = vec![];
    let mut mounts = vec![];
    if with_claim {
        volumes.push(
            json!({"name": "data", "persistentVolumeClaim": {"claimName": format!("{name}-data")}}),
        );
        mounts.push(json!({"name": "data", "mountPath": "/data"}));
    }
    json!({
        "metadata": {"labels": {"app": name}},
        "spec": {
            "terminationGracePeriodSeconds": 10,
            "containers": [{
                "name": "valkey",
                "image": "valkey/valkey:8.1",
                "args": ["--appendonly", "yes", "--appendfsync", "always", "--dir", "/data", "--save", ""],
                "ports": [{"name": "valkey", "containerPort": 6379}],
                "readinessProbe": {"tcpSocket": {"port": "valkey"}, "periodSeconds": 1},
                "volumeMounts": mounts,
            }],
            "volumes": volumes,
        }
    })
}

async fn pvc(client: &Client, ns: &str, name: &str, size: &str) {
    apply::<PersistentVolumeClaim>(client, ns, json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}},
    }))
    .await;
}

async fn service(client: &Client, ns: &str, name: &str) -> String {
    let svc: Service = apply(
        client,
        ns,
        json!({
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"selector": {"app": name}, "publishNotReadyAddresses": true,
                     "ports": [{"name": "valkey", "port": 6379, "targetPort": "valkey"}]},
        }),
    )
    .await;
    svc.spec.unwrap().cluster_ip.unwrap()
}

async fn statefulset(client: &Client, ns: &str, name: &str) {
    apply::<StatefulSet>(
        client,
        ns,
        json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name},
            "spec": {"replicas": 1, "serviceName": name, "selector": {"matchLabels": {"app": name}},
                     "template": valkey_pod_template(name, true)},
        }),
    )
    .await;
}

/// The ready pod of `app`, once there is exactly one.
async fn ready_pod(cluster: &LocalCluster, client: &Client, ns: &str, app: &str) -> Pod {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    cluster
        .wait_for_value(&format!("a ready pod of {ns}/{app}"), || {
            let pods = pods.clone();
            async move {
                let list = pods
                    .list(&kube::api::ListParams::default().labels(&format!("app={app}")))
                    .await?;
                let ready: Vec<Pod> = list
                    .items
                    .into_iter()
                    .filter(|p| p.metadata.deletion_timestamp.is_none() && pod_ready(p))
                    .collect();
                Ok((ready.len() == 1).then(|| ready[0].clone()))
            }
        })
        .await
        .unwrap()
}

fn pod_ip(pod: &Pod) -> String {
    pod.status.as_ref().unwrap().pod_ip.clone().unwrap()
}

/// Live processes whose command line, root or working directory mentions `needle`: the run
/// dir appears in every component's arguments, and pods run chrooted below it.
fn processes_mentioning(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let link = |name: &str| {
            std::fs::read_link(entry.path().join(name))
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        };
        if [cmdline.clone(), link("root"), link("cwd")]
            .iter()
            .any(|s| s.contains(needle))
        {
            found.push(format!(
                "{}: {cmdline}",
                entry.file_name().to_string_lossy()
            ));
        }
    }
    found
}

/// `valkey-cli -h <host> <args>` with `input` on stdin (for `-x`: values too long for argv).
fn cli_stdin(host: &str, args: &[&str], input: &str) -> String {
    use std::io::Write;
    let mut child = Command::new("valkey-cli")
        .args(["-h", host, "-p", "6379"])
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("valkey-cli runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

#[tokio::test]
async fn local_cluster_runs_real_pods() {
    let run = tempfile::tempdir().unwrap();
    let cluster = LocalCluster::start(Options::new(run.path())).await.unwrap();
    let client = cluster.client().await.unwrap();

    statefulset_pod_survives_deletion(&cluster, &client).await;
    deployment_pod_and_image_pull_errors(&cluster, &client).await;
    volume_grows_and_reports_usage(&cluster, &client).await;
    partition_cuts_and_heals_replication(&cluster, &client).await;
    lifecycle_hooks_run_around_the_container(&cluster, &client, run.path()).await;

    let recorded = local_cluster::process::recorded(run.path()).unwrap();
    let mut cluster = cluster;
    cluster.stop().unwrap();
    assert!(recorded.iter().all(|r| !r.is_alive()), "{recorded:?}");
    let leftovers = processes_mentioning(&run.path().display().to_string());
    assert!(
        leftovers.is_empty(),
        "processes of the run survive: {leftovers:?}"
    );
}

async fn statefulset_pod_survives_deletion(cluster: &LocalCluster, client: &Client) {
    let ns = "sts";
    namespace(client, ns).await;
    pvc(client, ns, "cache-data", "1Gi").await;
    let service_ip = service(client, ns, "cache").await;
    statefulset(client, ns, "cache").await;

    let pod = ready_pod(cluster, client, ns, "cache").await;
    assert_eq!(pod.metadata.name.as_deref(), Some("cache-0"));
    let first_ip = pod_ip(&pod);
    assert_eq!(valkey_cli(&first_ip, &["PING"]), "PONG");
    assert_eq!(valkey_cli(&service_ip, &["PING"]), "PONG");
    assert_eq!(valkey_cli(&service_ip, &["SET", "greeting", "hello"]), "OK");

    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let old_uid = pod.metadata.uid.clone();
    pods.delete("cache-0", &DeleteParams::default())
        .await
        .unwrap();
    let replacement = cluster
        .wait_for_value("cache-0 to be recreated and ready", || {
            let pods = pods.clone();
            let old_uid = old_uid.clone();
            async move {
                let pod = pods.get_opt("cache-0").await?;
                Ok(pod.filter(|p| p.metadata.uid != old_uid && pod_ready(p)))
            }
        })
        .await
        .unwrap();
    assert_eq!(replacement.metadata.name.as_deref(), Some("cache-0"));
    let services: Api<Service> = Api::namespaced(client.clone(), ns);
    let still = services
        .get("cache")
        .await
        .unwrap()
        .spec
        .unwrap()
        .cluster_ip
        .unwrap();
    assert_eq!(still, service_ip, "the Service keeps its ClusterIP");
    assert_eq!(
        valkey_cli(&service_ip, &["GET", "greeting"]),
        "hello",
        "the key survived the pod"
    );
    assert_eq!(
        valkey_cli(&pod_ip(&replacement), &["GET", "greeting"]),
        "hello"
    );
}

async fn deployment_pod_and_image_pull_errors(cluster: &LocalCluster, client: &Client) {
    let ns = "deploy";
    namespace(client, ns).await;
    let service_ip = service(client, ns, "cache").await;
    apply::<Deployment>(client, ns, json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "cache"},
        "spec": {"replicas": 1, "strategy": {"type": "Recreate"}, "selector": {"matchLabels": {"app": "cache"}},
                 "template": valkey_pod_template("cache", false)},
    }))
    .await;
    let pod = ready_pod(cluster, client, ns, "cache").await;
    assert_eq!(valkey_cli(&pod_ip(&pod), &["PING"]), "PONG");
    assert_eq!(valkey_cli(&service_ip, &["PING"]), "PONG");

    // An image the registry does not have: ErrImagePull, then ImagePullBackOff, with the
    // reference and the registry's answer in the message; never a fake Running.
    apply::<Deployment>(
        client,
        ns,
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "mystery"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "mystery"}},
                     "template": {"metadata": {"labels": {"app": "mystery"}},
                                  "spec": {"containers": [{"name": "app", "image": "valkey/valkey:no-such-tag"}]}}},
        }),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let waiting_reasons = |want: &'static str| {
        let pods = pods.clone();
        move || {
            let pods = pods.clone();
            async move {
                let list = pods
                    .list(&kube::api::ListParams::default().labels("app=mystery"))
                    .await?;
                Ok(list.items.into_iter().find_map(|pod| {
                    let status = pod.status.unwrap_or_default();
                    let waiting = status
                        .container_statuses
                        .unwrap_or_default()
                        .into_iter()
                        .find_map(|c| c.state.and_then(|s| s.waiting))?;
                    (waiting.reason.as_deref() == Some(want)).then_some((status.phase, waiting))
                }))
            }
        }
    };
    let (phase, pulling) = cluster
        .wait_for_value(
            "the pod to report ErrImagePull",
            waiting_reasons("ErrImagePull"),
        )
        .await
        .unwrap();
    assert_eq!(phase.as_deref(), Some("Pending"), "never a fake Running");
    let message = pulling.message.unwrap_or_default();
    assert!(message.contains("valkey/valkey:no-such-tag"), "{message}");
    assert!(
        message.contains("MANIFEST_UNKNOWN"),
        "the registry's answer: {message}"
    );
    let (phase, backoff) = cluster
        .wait_for_value(
            "the pod to back off with ImagePullBackOff",
            waiting_reasons("ImagePullBackOff"),
        )
        .await
        .unwrap();
    assert_eq!(phase.as_deref(), Some("Pending"));
    let message = backoff.message.unwrap_or_default();
    assert!(message.contains("valkey/valkey:no-such-tag"), "{message}");

    // Fixing the tag rolls out a pod that pulls and runs.
    apply::<Deployment>(
        client,
        ns,
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "mystery"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "mystery"}},
                     "template": {"metadata": {"labels": {"app": "mystery"}},
                                  "spec": {"containers": [{"name": "app", "image": "valkey/valkey:8.1",
                                           "readinessProbe": {"tcpSocket": {"port": 6379}, "periodSeconds": 1}}]}}},
        }),
    )
    .await;
    let pod = ready_pod(cluster, client, ns, "mystery").await;
    let status = pod.status.unwrap_or_default();
    let image_id = status.container_statuses.unwrap_or_default()[0]
        .image_id
        .clone();
    assert!(image_id.starts_with("valkey/valkey@sha256:"), "{image_id}");
    let info = valkey_cli(&status.pod_ip.unwrap(), &["INFO", "server"]);
    assert!(info.contains("valkey_version:8.1."), "{info}");
}

async fn volume_grows_and_reports_usage(cluster: &LocalCluster, client: &Client) {
    let ns = "sts";
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let capacity = |claim: &PersistentVolumeClaim| {
        claim
            .status
            .as_ref()
            .and_then(|s| s.capacity.as_ref())
            .and_then(|c| c.get("storage"))
            .map(|q| q.0.clone())
    };
    assert_eq!(
        capacity(&claims.get("cache-data").await.unwrap()).as_deref(),
        Some("1Gi")
    );
    let grow = json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}});
    claims
        .patch("cache-data", &PatchParams::default(), &Patch::Merge(&grow))
        .await
        .unwrap();
    cluster
        .wait_for("the claim to report 2Gi", || {
            let claims = claims.clone();
            async move { Ok(capacity(&claims.get("cache-data").await?).as_deref() == Some("2Gi")) }
        })
        .await
        .unwrap();

    // Write ~1 MiB so usage is clearly non-zero, then read it back through the node proxy.
    let pod = ready_pod(cluster, client, ns, "cache").await;
    assert_eq!(
        cli_stdin(&pod_ip(&pod), &["-x", "SET", "blob"], &"x".repeat(1 << 20)),
        "OK"
    );
    let node = pod.spec.unwrap().node_name.unwrap();
    let used = cluster
        .wait_for_value("volume usage in /stats/summary", || {
            let client = client.clone();
            let node = node.clone();
            async move {
                let request =
                    http::Request::get(format!("/api/v1/nodes/{node}/proxy/stats/summary"))
                        .body(Vec::new())?;
                let summary: Value = serde_json::from_str(&client.request_text(request).await?)?;
                let volume = summary["pods"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .flat_map(|p| p["volume"].as_array().into_iter().flatten())
                    .find(|v| v["pvcRef"]["name"] == "cache-data")
                    .cloned();
                Ok(volume.and_then(|v| {
                    let used = v["usedBytes"].as_u64()?;
                    let capacity = v["capacityBytes"].as_u64()?;
                    (used >= 1 << 20 && capacity == 2 << 30).then_some(used)
                }))
            }
        })
        .await
        .unwrap();
    assert!(used < 2 << 30);
}

async fn partition_cuts_and_heals_replication(cluster: &LocalCluster, client: &Client) {
    let ns = "net";
    namespace(client, ns).await;
    let primary_ip = service(client, ns, "primary").await;
    service(client, ns, "replica").await;
    for name in ["primary", "replica"] {
        apply::<StatefulSet>(client, ns, json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name},
            "spec": {"replicas": 1, "serviceName": name, "selector": {"matchLabels": {"app": name}},
                     "template": valkey_pod_template(name, false)},
        }))
        .await;
    }
    let primary = ready_pod(cluster, client, ns, "primary").await;
    let replica = ready_pod(cluster, client, ns, "replica").await;
    let replica_ip = pod_ip(&replica);
    assert_eq!(
        valkey_cli(&replica_ip, &["REPLICAOF", &primary_ip, "6379"]),
        "OK"
    );
    let link = |want: &'static str| {
        let replica_ip = replica_ip.clone();
        move || {
            let replica_ip = replica_ip.clone();
            async move {
                Ok(valkey_cli(&replica_ip, &["INFO", "replication"])
                    .contains(&format!("master_link_status:{want}")))
            }
        }
    };
    cluster
        .wait_for("the replica to link up", link("up"))
        .await
        .unwrap();
    assert_eq!(valkey_cli(&primary_ip, &["SET", "before", "1"]), "OK");

    let control = ControlClient::new(cluster.control_addr.unwrap());
    let (a, b) = (
        format!("{ns}/{}", primary.metadata.name.unwrap()),
        format!("{ns}/{}", replica.metadata.name.unwrap()),
    );
    control.cut(&a, &b).await.unwrap();
    cluster
        .wait_for("the cut to drop the link", link("down"))
        .await
        .unwrap();
    // Still down a little later: the replica cannot reconnect through the cut.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(valkey_cli(&replica_ip, &["INFO", "replication"]).contains("master_link_status:down"));
    assert_eq!(valkey_cli(&primary_ip, &["SET", "during", "1"]), "OK");

    control.heal(&a, &b).await.unwrap();
    cluster
        .wait_for("the link to heal", link("up"))
        .await
        .unwrap();
    cluster
        .wait_for("the write made during the cut to arrive", || {
            let replica_ip = replica_ip.clone();
            async move { Ok(valkey_cli(&replica_ip, &["GET", "during"]) == "1") }
        })
        .await
        .unwrap();

    // A frozen pod holds its connections but answers nothing until thawed.
    let primary_pod_ip = pod_ip(&ready_pod(cluster, client, ns, "primary").await);
    control.freeze(&a).await.unwrap();
    assert!(
        !answers_ping(&primary_pod_ip, Duration::from_secs(2)).await,
        "a frozen pod answered"
    );
    control.thaw(&a).await.unwrap();
    assert!(
        answers_ping(&primary_pod_ip, Duration::from_secs(10)).await,
        "the thawed pod is silent"
    );
}

/// Whether a PING over a raw connection gets +PONG within `timeout`.
async fn answers_ping(ip: &str, timeout: Duration) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let attempt = async {
        let mut stream = tokio::net::TcpStream::connect((ip, 6379)).await.ok()?;
        stream.write_all(b"PING\r\n").await.ok()?;
        let mut reply = [0u8; 7];
        stream.read_exact(&mut reply).await.ok()?;
        Some(&reply == b"+PONG\r\n")
    };
    tokio::time::timeout(timeout, attempt)
        .await
        .ok()
        .flatten()
        .unwrap_or(false)
}

/// postStart runs before the container counts as started, preStop runs before SIGTERM, and
/// a failing postStart kills the container with the hook's message. The hooks and the main
/// process append to one file on a hostPath, so the test reads their order after the pod
/// (and its directory on the node) is gone.
async fn lifecycle_hooks_run_around_the_container(
    cluster: &LocalCluster,
    client: &Client,
    run_dir: &std::path::Path,
) {
    let ns = "hooks";
    namespace(client, ns).await;
    let dir = run_dir.join("hook-events");
    let events_file = dir.join("events");
    let events = &|| -> Vec<String> {
        std::fs::read_to_string(&events_file)
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect()
    };
    // Each hook waits a second first: one that ran concurrently with what it must precede
    // would record its line after it.
    let main = "trap 'echo sigterm >> /hooks/events; exit 0' TERM
        until grep -q post-start /hooks/events 2>/dev/null; do sleep 0.1; done
        echo main-running >> /hooks/events
        while true; do sleep 0.1; done";
    apply::<Pod>(client, ns, json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "hooked", "labels": {"app": "hooked"}},
        "spec": {
            "terminationGracePeriodSeconds": 30,
            "containers": [{
                "name": "main",
                "image": "valkey/valkey:8.1",
                "command": ["sh", "-c", main],
                "lifecycle": {
                    "postStart": {"exec": {"command": ["sh", "-c", "sleep 1; echo post-start >> /hooks/events"]}},
                    "preStop": {"exec": {"command": ["sh", "-c", "sleep 1; echo pre-stop >> /hooks/events"]}},
                },
                "volumeMounts": [{"name": "hooks", "mountPath": "/hooks"}],
            }],
            "volumes": [{"name": "hooks", "hostPath": {"path": dir.display().to_string(), "type": "DirectoryOrCreate"}}],
        }
    }))
    .await;
    ready_pod(cluster, client, ns, "hooked").await;
    assert_eq!(
        events().first().map(String::as_str),
        Some("post-start"),
        "the container is ready only once postStart is done"
    );
    cluster
        .wait_for(
            "the main process to see postStart's line",
            move || async move { Ok(events() == ["post-start", "main-running"]) },
        )
        .await
        .unwrap();

    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    pods.delete("hooked", &DeleteParams::default())
        .await
        .unwrap();
    cluster
        .wait_for("the hooked pod to be gone", || {
            let pods = pods.clone();
            async move { Ok(pods.get_opt("hooked").await?.is_none()) }
        })
        .await
        .unwrap();
    assert_eq!(
        events(),
        ["post-start", "main-running", "pre-stop", "sigterm"],
        "preStop runs to completion before SIGTERM"
    );

    // A failing postStart: the container is killed and the run ends with the hook's message;
    // restartPolicy Never makes that final.
    apply::<Pod>(client, ns, json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bad-hook"},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 5,
            "containers": [{
                "name": "main",
                "image": "valkey/valkey:8.1",
                "command": ["sleep", "3600"],
                "lifecycle": {"postStart": {"exec": {"command": ["sh", "-c", "echo no config here >&2; exit 7"]}}},
            }],
        }
    }))
    .await;
    let terminated = cluster
        .wait_for_value("the bad-hook pod to fail", || {
            let pods = pods.clone();
            async move {
                let status = pods.get("bad-hook").await?.status.unwrap_or_default();
                Ok(status
                    .container_statuses
                    .unwrap_or_default()
                    .into_iter()
                    .find_map(|c| c.state.and_then(|s| s.terminated)))
            }
        })
        .await
        .unwrap();
    let message = terminated.message.unwrap_or_default();
    assert!(message.starts_with("PostStartHookError: "), "{message}");
    assert!(
        message.contains("exited with 7: no config here"),
        "{message}"
    );
    assert_ne!(terminated.exit_code, 0, "killed, not completed");
    cluster
        .wait_for("the bad-hook pod's phase to be Failed", || {
            let pods = pods.clone();
            async move {
                let pod = pods.get("bad-hook").await?;
                Ok(pod.status.and_then(|s| s.phase).as_deref() == Some("Failed"))
            }
        })
        .await
        .unwrap();
}
