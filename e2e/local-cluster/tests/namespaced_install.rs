//! deploy/overlays/namespaced on a real API server and node agent, extended to a second
//! namespace the way its kustomization says (a directory placing `bindings/` in it, the
//! name appended to WATCH_NAMESPACES): the four controllers, pods of their Deployments,
//! watch the two namespaces, granted their roles there only by RoleBindings. A
//! ValkeyCluster forms in one and a ValkeyReplication in the other, and pvc-resizer grows
//! the cluster's volumes when its spec asks; a third namespace's objects are never served
//! nor reported (no status, no Event, no series), and no controller may read a Secret (or
//! create a workload) outside the two.

use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use crd_types::{ValkeyCluster, ValkeyNode};
use e2e_kit::cluster_testing::{ClusterApis, valkey_cluster, wait_ready};
use e2e_kit::replication_testing::{ReplicationApis, ready_status, valkey_replication};
use e2e_kit::testing::allowed;
use e2e_kit::topology::wait_until;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim};
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use local_cluster::{LocalCluster, Options, kube_client, operator_pods};
use serde_json::json;

/// The overlay's own watched namespace, and the one the test adds.
const WATCHED: [&str; 2] = ["valkey-apps", "team-b"];
/// Watched by nobody.
const IGNORED: &str = "default";

/// `to` relative to the directory `from` (both absolute): kustomize takes no absolute
/// resource paths.
fn relative(from: &Path, to: &Path) -> PathBuf {
    let depth = from
        .components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .count();
    let mut path: PathBuf = std::iter::repeat_n("..", depth).collect();
    path.push(to.strip_prefix("/").unwrap());
    path
}

/// The shipped overlay plus `team-b`, as its kustomization tells a user to add one.
fn overlay_for_two_namespaces(dir: &Path) -> PathBuf {
    let overlay = local_cluster::repo_root().join("deploy/overlays/namespaced");
    let root = dir.join("overlay");
    let extra = root.join(WATCHED[1]);
    std::fs::create_dir_all(&extra).unwrap();
    std::fs::write(
        root.join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - {}\n  - {}\n",
            relative(&root, &overlay).display(),
            WATCHED[1]
        ),
    )
    .unwrap();
    std::fs::write(
        extra.join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: {}\nresources:\n  - {}\n",
            WATCHED[1],
            relative(&extra, &overlay.join("bindings")).display()
        ),
    )
    .unwrap();
    root
}

async fn create_namespace(client: &kube::Client, name: &str) {
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_namespaced_overlay_serves_its_namespaces_and_reads_nothing_elsewhere() {
    let run = tempfile::tempdir().unwrap();
    let mut cluster = LocalCluster::start(Options::new(run.path())).await.unwrap();
    // The overlay binds roles in the namespaces; they are the user's, so it creates none.
    let admin = cluster.client().await.unwrap();
    for namespace in WATCHED {
        create_namespace(&admin, namespace).await;
    }
    let overlay = overlay_for_two_namespaces(run.path());
    let list = WATCHED.join(",");
    let env = [("*", "WATCH_NAMESPACES", list.as_str())];
    let controllers = operator_pods::install_controllers(&mut cluster, &overlay, &env)
        .await
        .unwrap();
    let mut binaries: Vec<&str> = controllers.iter().map(|c| c.binary.as_str()).collect();
    binaries.sort();
    assert_eq!(
        binaries,
        [
            "node-controller",
            "pvc-resizer",
            "service-controller",
            "topology-controller"
        ]
    );
    let client = cluster.client().await.unwrap();

    // Objects outside the watched namespaces, created first: by the time the topologies
    // below are Ready, every controller has had them in reach for as long.
    let ignored_nodes: Api<ValkeyNode> = Api::namespaced(client.clone(), IGNORED);
    let elsewhere: ValkeyNode = serde_json::from_value(json!({
        "apiVersion": "valkey.rs/v1alpha1", "kind": "ValkeyNode",
        "metadata": {"name": "elsewhere", "namespace": IGNORED},
        "spec": {"config": {"maxmemory": "100mb"}},
    }))
    .unwrap();
    ignored_nodes
        .create(&PostParams::default(), &elsewhere)
        .await
        .unwrap();
    let ignored_clusters: Api<ValkeyCluster> = Api::namespaced(client.clone(), IGNORED);
    ignored_clusters
        .create(
            &PostParams::default(),
            &valkey_cluster("ignored", 3, 0, false),
        )
        .await
        .unwrap();

    // A ValkeyCluster with volumes in one namespace, a ValkeyReplication in the other.
    let clusters = ClusterApis::new(&client, WATCHED[0]);
    let mut scoped = valkey_cluster("scoped", 1, 1, false);
    scoped.metadata.namespace = Some(WATCHED[0].into());
    scoped.spec.common.template.persistence = Some(
        serde_json::from_value(json!({
            "size": "16Mi", "storageClassName": agent_services::SIZED_STORAGE_CLASS,
            "reclaimPolicy": "Delete",
        }))
        .unwrap(),
    );
    clusters
        .clusters
        .create(&PostParams::default(), &scoped)
        .await
        .unwrap();
    let groups = ReplicationApis::new(&client, WATCHED[1]);
    let mut group = valkey_replication("group", 2, 1, false);
    group.metadata.namespace = Some(WATCHED[1].into());
    groups
        .groups
        .create(&PostParams::default(), &group)
        .await
        .unwrap();
    wait_ready(&cluster, &clusters, "scoped", Duration::from_secs(180))
        .await
        .unwrap();
    wait_until(
        &cluster,
        "the group in team-b to be Ready",
        Duration::from_secs(180),
        || ready_status(&groups, "group"),
    )
    .await
    .unwrap();

    // pvc-resizer, granted claims in the watched namespaces only, grows them as asked.
    clusters
        .clusters
        .patch(
            "scoped",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"persistence": {"size": "24Mi"}}}})),
        )
        .await
        .unwrap();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), WATCHED[0]);
    wait_until(
        &cluster,
        "scoped's claims at 24Mi",
        Duration::from_secs(120),
        || async {
            let mut sizes = Vec::new();
            for member in ["scoped-0-0", "scoped-0-1"] {
                let claim = claims.get(&format!("{member}-data")).await?;
                let capacity = claim
                    .status
                    .and_then(|s| s.capacity)
                    .and_then(|c| c.get("storage").map(|q| q.0.clone()));
                sizes.push(capacity);
            }
            Ok(if sizes.iter().all(|s| s.as_deref() == Some("24Mi")) {
                Ok(())
            } else {
                Err(format!("capacities {sizes:?}"))
            })
        },
    )
    .await
    .unwrap();

    // The ignored namespace: no status, no workload, no Event, no series.
    let untouched = ignored_nodes.get("elsewhere").await.unwrap();
    assert!(untouched.status.is_none(), "{:?}", untouched.status);
    let ignored = ignored_clusters.get("ignored").await.unwrap();
    assert!(ignored.status.is_none(), "{:?}", ignored.status);
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), IGNORED);
    assert!(
        sets.list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let events: Api<Event> = Api::namespaced(client.clone(), IGNORED);
    let about: Vec<String> = events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        // By what they regard: Kubernetes' own node lifecycle controller also reports as
        // `node-controller` (RegisteredNode, in this namespace).
        .filter(|e| {
            let kind = e.regarding.as_ref().and_then(|r| r.kind.as_deref());
            matches!(
                kind,
                Some("ValkeyNode" | "ValkeyCluster" | "ValkeyReplication")
            )
        })
        .map(|e| format!("{:?} {:?}", e.reason, e.note))
        .collect();
    assert!(about.is_empty(), "Events in {IGNORED}: {about:?}");
    for controller in &controllers {
        let metrics = controller.metrics(&client).await.unwrap();
        let series: Vec<&str> = metrics
            .lines()
            .filter(|l| l.contains(&format!("namespace=\"{IGNORED}\"")))
            .collect();
        assert!(series.is_empty(), "{}: {series:?}", controller.binary);
        if controller.binary == "topology-controller" {
            for namespace in WATCHED {
                assert!(
                    metrics.contains(&format!("namespace=\"{namespace}\"")),
                    "no series of {namespace}"
                );
            }
        }
    }

    // Each controller's own token: its rights in the watched namespaces, none elsewhere.
    for controller in &controllers {
        let own = kube_client(Path::new(&controller.kubeconfig))
            .await
            .unwrap();
        let binary = controller.binary.as_str();
        let (verb, group, resource) = match binary {
            "node-controller" => ("create", "apps", "statefulsets"),
            "service-controller" => ("create", "", "services"),
            "pvc-resizer" => ("patch", "", "persistentvolumeclaims"),
            _ => ("get", "", "secrets"),
        };
        for namespace in WATCHED {
            assert!(
                allowed(&own, verb, group, resource, namespace).await,
                "{binary} may not {verb} {resource} in {namespace}"
            );
        }
        for namespace in [IGNORED, "kube-system"] {
            assert!(
                !allowed(&own, verb, group, resource, namespace).await,
                "{binary} may {verb} {resource} in {namespace}"
            );
            assert!(
                !allowed(&own, "get", "", "secrets", namespace).await,
                "{binary} may read Secrets in {namespace}"
            );
        }
    }
    cluster.check_restarts("the end of the test").await.unwrap();
    cluster.stop().unwrap();
}

#[test]
fn a_path_relative_to_a_directory_climbs_to_the_root() {
    assert_eq!(
        relative(
            Path::new("/tmp/run/overlay"),
            Path::new("/work/main/deploy")
        ),
        PathBuf::from("../../../work/main/deploy")
    );
}
