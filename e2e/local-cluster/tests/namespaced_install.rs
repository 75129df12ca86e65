//! deploy/overlays/namespaced on a real API server and node agent: the controllers, pods of
//! their Deployments, watch one namespace, granted their roles there only by RoleBindings.
//! A cluster in that namespace forms; a ValkeyNode in another is never served, and no
//! controller may read a Secret (or create a workload) outside it.

use std::path::Path;
use std::time::Duration;

use crd_types::ValkeyNode;
use e2e_kit::cluster_testing::{ClusterApis, valkey_cluster, wait_ready};
use e2e_kit::testing::allowed;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::PostParams;
use local_cluster::{LocalCluster, Options, kube_client, operator_pods};
use serde_json::json;

/// The overlay's watched namespace.
const WATCHED: &str = "valkey-apps";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_namespaced_overlay_serves_one_namespace_and_reads_nothing_elsewhere() {
    let run = tempfile::tempdir().unwrap();
    let mut cluster = LocalCluster::start(Options::new(run.path())).await.unwrap();
    // The overlay binds roles in the namespace; it is the user's, so it does not create it.
    let namespace: Namespace =
        serde_json::from_value(json!({"metadata": {"name": WATCHED}})).unwrap();
    let admin = cluster.client().await.unwrap();
    Api::<Namespace>::all(admin)
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();
    let overlay = local_cluster::repo_root().join("deploy/overlays/namespaced");
    let controllers = operator_pods::install_controllers(&mut cluster, &overlay, &[])
        .await
        .unwrap();
    let mut binaries: Vec<&str> = controllers.iter().map(|c| c.binary.as_str()).collect();
    binaries.sort();
    assert_eq!(
        binaries,
        [
            "node-controller",
            "service-controller",
            "topology-controller"
        ]
    );
    let client = cluster.client().await.unwrap();

    // A ValkeyNode outside the watched namespace, created first: by the time the cluster
    // below is Ready, every controller has had it in reach for as long.
    let elsewhere: ValkeyNode = serde_json::from_value(json!({
        "apiVersion": "valkey.rs/v1alpha1", "kind": "ValkeyNode",
        "metadata": {"name": "elsewhere", "namespace": "default"},
        "spec": {"config": {"maxmemory": "100mb"}},
    }))
    .unwrap();
    let default_nodes: Api<ValkeyNode> = Api::namespaced(client.clone(), "default");
    default_nodes
        .create(&PostParams::default(), &elsewhere)
        .await
        .unwrap();

    let apis = ClusterApis::new(&client, WATCHED);
    let mut vkc = valkey_cluster("scoped", 3, 0, false);
    vkc.metadata.namespace = Some(WATCHED.into());
    apis.clusters
        .create(&PostParams::default(), &vkc)
        .await
        .unwrap();
    wait_ready(&cluster, &apis, "scoped", Duration::from_secs(180))
        .await
        .unwrap();

    let untouched = default_nodes.get("elsewhere").await.unwrap();
    assert!(untouched.status.is_none(), "{:?}", untouched.status);
    let default_sets: Api<StatefulSet> = Api::namespaced(client.clone(), "default");
    assert!(default_sets.get_opt("elsewhere").await.unwrap().is_none());

    // Each controller's own token: its rights in the watched namespace, none elsewhere.
    for controller in &controllers {
        let own = kube_client(Path::new(&controller.kubeconfig))
            .await
            .unwrap();
        let binary = controller.binary.as_str();
        let (verb, group, resource) = match binary {
            "node-controller" => ("create", "apps", "statefulsets"),
            "service-controller" => ("create", "", "services"),
            _ => ("get", "", "secrets"),
        };
        assert!(
            allowed(&own, verb, group, resource, WATCHED).await,
            "{binary}"
        );
        for namespace in ["default", "kube-system"] {
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
