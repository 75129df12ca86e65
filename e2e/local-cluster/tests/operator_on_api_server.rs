//! The operator's API and controllers against a real API server (no node agent needed):
//! CRDs and RBAC from deploy/, controllers as local processes with their own
//! ServiceAccount tokens, CEL admission with the messages a person sees, and status
//! ownership through server-side apply.

use std::path::Path;

use crd_types::conditions::{self, types};
use crd_types::{ValkeyCluster, ValkeyNode, ValkeyReplication};
use e2e_kit::testing::{allowed, api_server_with_operator, events_about};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::RoleBinding;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use local_cluster::{kube_client, operator};
use serde_json::{Value, json};

#[path = "operator_on_api_server/admission.rs"]
mod admission;

/// Creates `object` untyped, so values our Rust types would refuse still reach the API server.
async fn create<K>(client: &Client, object: Value) -> Result<DynamicObject, String>
where
    K: kube::Resource<DynamicType = ()>,
{
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &ApiResource::erase::<K>(&()));
    let object: DynamicObject =
        serde_json::from_value(object).map_err(|e| format!("fixture: {e}"))?;
    api.create(&PostParams::default(), &object)
        .await
        .map_err(|e| match e {
            kube::Error::Api(status) => status.message,
            other => other.to_string(),
        })
}

#[track_caller]
fn assert_rejected<T: std::fmt::Debug>(result: Result<T, String>, message_part: &str) {
    match result {
        Ok(object) => panic!("expected a rejection containing {message_part:?}, got {object:?}"),
        Err(message) => assert!(
            message.contains(message_part),
            "expected {message_part:?} in: {message}"
        ),
    }
}

/// A RoleBinding in `default` of ClusterRole `role` to user `user`.
async fn bind(client: &Client, user: &str, role: &str) {
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": format!("{user}-{role}"), "namespace": "default"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }))
    .unwrap();
    let api: Api<RoleBinding> = Api::namespaced(client.clone(), "default");
    api.create(&PostParams::default(), &binding).await.unwrap();
}

/// Whether `user` may `verb` `resource` (`name` or `name/subresource`) of valkey.rs in
/// `default`, as the API server's authorizer answers a SubjectAccessReview.
async fn may(client: &Client, user: &str, verb: &str, resource: &str) -> bool {
    let (resource, subresource) = match resource.split_once('/') {
        Some((r, s)) => (r, Some(s.to_string())),
        None => (resource, None),
    };
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.into()),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                group: Some("valkey.rs".into()),
                resource: Some(resource.into()),
                subresource,
                namespace: Some("default".into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let api: Api<SubjectAccessReview> = Api::all(client.clone());
    let answer = api.create(&PostParams::default(), &review).await.unwrap();
    answer.status.is_some_and(|s| s.allowed)
}

#[tokio::test]
async fn operator_installs_and_the_api_judges_input_as_documented() {
    let run = tempfile::tempdir().unwrap();
    let (mut cluster, controllers) = api_server_with_operator(run.path()).await.unwrap();
    assert_eq!(controllers.len(), 4, "{controllers:?}");
    let client = cluster.client().await.unwrap();

    // --- Admission: samples pass, mistakes are refused with the documented messages.
    let nodes: Api<ValkeyNode> = Api::namespaced(client.clone(), "default");
    let samples = local_cluster::repo_root().join("deploy/samples");
    for file in [
        "valkeynode-standalone.yaml",
        "valkeycluster.yaml",
        "valkeyreplication.yaml",
    ] {
        let yaml = std::fs::read_to_string(samples.join(file)).unwrap();
        let objects = operator::documents(&yaml).unwrap();
        for mut object in objects {
            object.metadata.namespace = Some("default".into());
            operator::apply_all(&client, &[object]).await.unwrap();
        }
    }
    let meta = |name: &str| json!({"name": name, "namespace": "default"});
    assert_rejected(
        create::<ValkeyCluster>(
            &client,
            json!({"apiVersion": "valkey.rs/v1alpha1", "kind": "ValkeyCluster",
            "metadata": meta("zero"), "spec": {"shards": 0}}),
        )
        .await,
        "shards must be at least 1",
    );
    assert_rejected(
        create::<ValkeyCluster>(
            &client,
            json!({"apiVersion": "valkey.rs/v1alpha1", "kind": "ValkeyCluster",
            "metadata": meta("negative"), "spec": {"shards": 3, "replicasPerShard": -1}}),
        )
        .await,
        "replicasPerShard cannot be negative",
    );
    assert_rejected(
        create::<ValkeyCluster>(&client, json!({"apiVersion": "valkey.rs/v1alpha1", "kind": "ValkeyCluster",
            "metadata": meta("far"), "spec": {"shards": 3, "switchover": {"id": "1", "shard": 5, "member": 0}}})).await,
        "switchover.shard must name an existing shard",
    );
    assert_rejected(
        create::<ValkeyReplication>(&client, json!({"apiVersion": "valkey.rs/v1alpha1", "kind": "ValkeyReplication",
            "metadata": meta("quorum"), "spec": {"replicas": 2, "sentinel": {"replicas": 3, "quorum": 4}}})).await,
        "sentinel.quorum cannot exceed sentinel.replicas",
    );
    assert_rejected(
        create::<ValkeyNode>(
            &client,
            json!({"apiVersion": "valkey.rs/v1alpha1", "kind": "ValkeyNode",
            "metadata": meta("owned"), "spec": {"config": {"port": "7000"}}}),
        )
        .await,
        "config sets a directive the operator manages",
    );
    assert_rejected(
        create::<ValkeyNode>(
            &client,
            json!({"apiVersion": "valkey.rs/v1alpha1", "kind": "ValkeyNode",
            "metadata": meta("ten"), "spec": {"persistence": {"size": "ten"}}}),
        )
        .await,
        "persistence.size must be a Kubernetes quantity",
    );
    assert_rejected(
        create::<ValkeyNode>(
            &client,
            json!({"apiVersion": "valkey.rs/v1alpha1", "kind": "ValkeyNode",
            "metadata": meta("daemon"), "spec": {"workloadType": "DaemonSet"}}),
        )
        .await,
        "supported values: \"StatefulSet\", \"Deployment\"",
    );

    // Transition rules: shrink, workloadType and storage class changes are refused.
    create::<ValkeyNode>(&client, json!({"apiVersion": "valkey.rs/v1alpha1", "kind": "ValkeyNode",
        "metadata": meta("grow"), "spec": {"persistence": {"size": "10Gi", "storageClassName": "fast"}}}))
        .await
        .unwrap();
    let edit = |spec: Value| Patch::Merge(json!({"spec": spec}));
    let update = |spec: Value| {
        let nodes = nodes.clone();
        async move {
            nodes
                .patch("grow", &PatchParams::default(), &edit(spec))
                .await
                .map_err(|e| e.to_string())
        }
    };
    assert_rejected(
        update(json!({"persistence": {"size": "5Gi"}})).await,
        "cannot shrink",
    );
    assert_rejected(
        update(json!({"workloadType": "Deployment"})).await,
        "workloadType is immutable",
    );
    assert_rejected(
        update(json!({"persistence": {"storageClassName": "slow"}})).await,
        "storageClassName is immutable",
    );
    update(json!({"persistence": {"size": "20Gi"}}))
        .await
        .unwrap();

    // tls is set at creation only: a null (which a merge patch would turn into a removal,
    // but a JSON patch or a PUT keeps) counts as removing it.
    create::<ValkeyNode>(&client, json!({"apiVersion": "valkey.rs/v1alpha1", "kind": "ValkeyNode",
        "metadata": meta("tls"), "spec": {"tls": {"secretName": "tls-certificate", "authClients": "Required"}}}))
        .await
        .unwrap();
    let to_null = Patch::<Value>::Json(
        serde_json::from_value(json!([{"op": "replace", "path": "/spec/tls", "value": null}]))
            .unwrap(),
    );
    assert_rejected(
        nodes
            .patch("tls", &PatchParams::default(), &to_null)
            .await
            .map_err(|e| e.to_string()),
        "tls cannot be added or removed",
    );
    assert_rejected(
        nodes
            .patch(
                "tls",
                &PatchParams::default(),
                &edit(json!({"tls": {"secretName": "other"}})),
            )
            .await
            .map_err(|e| e.to_string()),
        "tls cannot be changed after creation",
    );

    // --- Status ownership: two field managers, two conditions, both kept. Test-only
    // managers and types, so the running controllers' own writes do not interfere.
    let condition = |type_: &str| {
        json!({"type": type_, "status": "True", "reason": "Test",
        "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"})
    };
    for (manager, type_) in [("e2e-first", "E2eFirst"), ("e2e-second", "E2eSecond")] {
        let body = json!({"apiVersion": "valkey.rs/v1alpha1", "kind": "ValkeyNode",
            "status": {"conditions": [condition(type_)]}});
        nodes
            .patch_status(
                "grow",
                &PatchParams::apply(manager).force(),
                &Patch::Apply(&body),
            )
            .await
            .unwrap();
    }
    let status = nodes.get_status("grow").await.unwrap().status.unwrap();
    for type_ in ["E2eFirst", "E2eSecond"] {
        assert!(
            crd_types::conditions::is_true(&status.conditions, type_),
            "{type_}: {:?}",
            status.conditions
        );
    }
    // service-controller's part sits next to them: status.endpoint and EndpointReady.
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    cluster
        .wait_for(
            "status.endpoint of grow from service-controller",
            || async {
                let status = nodes.get_status("grow").await?.status.unwrap_or_default();
                let live = services
                    .get_opt("grow")
                    .await?
                    .and_then(|s| s.spec?.cluster_ip);
                Ok(live.is_some()
                    && status.endpoint.and_then(|e| e.cluster_ip) == live
                    && crd_types::conditions::is_true(&status.conditions, "EndpointReady")
                    && crd_types::conditions::is_true(&status.conditions, "E2eFirst"))
            },
        )
        .await
        .unwrap();

    // --- RBAC: each controller runs with exactly its own ServiceAccount's rights.
    let token_client = |binary: &str| {
        let path = controllers
            .iter()
            .find(|c| c.process.binary == binary)
            .unwrap()
            .kubeconfig
            .clone();
        async move { kube_client(Path::new(&path)).await.unwrap() }
    };
    let node_controller = token_client("node-controller").await;
    let service_controller = token_client("service-controller").await;
    assert!(
        allowed(
            &node_controller,
            "create",
            "apps",
            "statefulsets",
            "default"
        )
        .await
    );
    assert!(
        !allowed(
            &service_controller,
            "create",
            "apps",
            "statefulsets",
            "default"
        )
        .await
    );
    assert!(allowed(&service_controller, "create", "", "services", "default").await);
    assert!(!allowed(&node_controller, "delete", "", "secrets", "default").await);

    // --- Admission: where RBAC is coarse, the API server holds each controller to its own
    // objects (deploy/components/*/admission.yaml).
    let topology_controller = token_client("topology-controller").await;
    admission::holds_topology_controller(&cluster, &client, &topology_controller).await;
    admission::holds_node_controller(&client, &node_controller).await;
    admission::holds_service_controller(&client, &service_controller).await;
    let pvc_resizer = token_client("pvc-resizer").await;
    admission::holds_pvc_resizer(&client, &pvc_resizer).await;

    // --- People: valkey-view and valkey-edit, bound directly or through the built-in
    // view, edit and admin roles they aggregate into (the controller-manager fills those).
    for (user, role) in [
        ("viewer", "view"),
        ("editor", "edit"),
        ("owner", "admin"),
        ("reader", "valkey-view"),
    ] {
        bind(&client, user, role).await;
    }
    cluster
        .wait_for("valkey-view and valkey-edit to aggregate", || {
            let client = client.clone();
            async move {
                Ok(may(&client, "viewer", "list", "valkeyclusters").await
                    && may(&client, "editor", "create", "valkeyclusters").await
                    && may(&client, "owner", "create", "valkeyclusters").await)
            }
        })
        .await
        .unwrap();
    for (user, verb, resource, expected) in [
        ("viewer", "list", "valkeyclusters", true),
        ("viewer", "get", "valkeyreplications/status", true),
        ("viewer", "create", "valkeyclusters", false),
        ("editor", "patch", "valkeyreplications", true),
        ("editor", "delete", "valkeynodes", true),
        ("editor", "patch", "valkeyclusters/status", false),
        ("owner", "deletecollection", "valkeynodes", true),
        ("owner", "update", "valkeynodes/status", false),
        ("reader", "watch", "valkeynodes", true),
        ("reader", "update", "valkeyclusters", false),
    ] {
        assert_eq!(
            may(&client, user, verb, resource).await,
            expected,
            "{user} {verb} {resource}"
        );
    }

    // --- The controllers watched their resources under that RBAC and counted reconciles.
    for controller in &controllers {
        let metrics = cluster
            .wait_for_value(&format!("{} reconciles", controller.process.binary), || {
                let addr = controller.http_addr.clone();
                async move {
                    let body = operator::http_get(&addr, "/metrics").await;
                    Ok(body.filter(|b| b.contains("valkey_operator_reconcile_runs_total{")))
                }
            })
            .await
            .unwrap();
        assert!(
            !metrics.contains("valkey_operator_reconcile_failures_total{"),
            "{metrics}"
        );
    }

    // --- Teardown leaves no process of the run.
    let recorded = local_cluster::process::recorded(run.path()).unwrap();
    assert!(recorded.len() >= 8, "{recorded:?}");
    cluster.stop().unwrap();
    assert!(recorded.iter().all(|r| !r.is_alive()), "{recorded:?}");
}

/// One ValkeyNode the controllers cannot read (a field of the wrong type, as an object
/// written under an older or looser schema would have) fails alone: each controller reports
/// it with a Warning Event `InvalidObject`, and a ValkeyNode created after it is still
/// served. Without the guard, one bad object broke the watch of every object.
#[tokio::test]
async fn an_unreadable_object_fails_alone() {
    let run = tempfile::tempdir().unwrap();
    let (mut cluster, _controllers) = api_server_with_operator(run.path()).await.unwrap();
    let client = cluster.client().await.unwrap();

    // Loosen status.workload.restarts (an integer to every controller) to int-or-string.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let pointer = "/spec/versions/0/schema/openAPIV3Schema/properties/status/properties/\
                   workload/properties/restarts";
    let crd = crds.get("valkeynodes.valkey.rs").await.unwrap();
    let mut loosened = serde_json::to_value(&crd).unwrap();
    *loosened.pointer_mut(pointer).expect("the restarts schema") =
        json!({"x-kubernetes-int-or-string": true});
    let loosened: CustomResourceDefinition = serde_json::from_value(loosened).unwrap();
    crds.replace("valkeynodes.valkey.rs", &PostParams::default(), &loosened)
        .await
        .unwrap();

    let nodes: Api<ValkeyNode> = Api::namespaced(client.clone(), "default");
    let node = |name: &str| {
        json!({"apiVersion": "valkey.rs/v1alpha1", "kind": "ValkeyNode",
               "metadata": {"name": name, "namespace": "default"}, "spec": {}})
    };
    create::<ValkeyNode>(&client, node("broken")).await.unwrap();
    // node-controller applies status.workload with force whenever it changes (the pod
    // appearing, then Pending): a bad value written before it settles is overwritten, and a
    // controller that reconciles after that reads a valid object and never tells
    // InvalidObject. So wait until it settles (no Node: the pod stays Pending).
    cluster
        .wait_for("broken's status to settle", || async {
            let status = nodes.get_status("broken").await?.status.unwrap_or_default();
            let pending = conditions::find(&status.conditions, types::WORKLOAD_READY)
                .is_some_and(|c| c.reason == "PodPending");
            Ok(pending && status.endpoint.is_some())
        })
        .await
        .unwrap();
    // Written the way only a schema change lets it through: untyped, on the status.
    let untyped: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &ApiResource::erase::<ValkeyNode>(&()),
    );
    cluster
        .wait_for("the loosened schema to take effect", || async {
            let patch = json!({"status": {"workload": {"restarts": "many"}}});
            Ok(untyped
                .patch_status("broken", &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .is_ok())
        })
        .await
        .unwrap();

    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    for reporter in ["node-controller", "service-controller"] {
        let found = cluster
            .wait_for_value(&format!("InvalidObject from {reporter}"), || async {
                let found = events_about(&events, "ValkeyNode", "broken", "InvalidObject")
                    .await?
                    .into_iter()
                    .find(|e| e.reporting_controller.as_deref() == Some(reporter));
                Ok(found)
            })
            .await
            .unwrap();
        assert_eq!(found.type_.as_deref(), Some("Warning"));
        let note = found.note.unwrap_or_default();
        assert!(
            note.contains("cannot read this object as ValkeyNode"),
            "{note}"
        );
    }

    // Another node, created after: still served by both controllers.
    create::<ValkeyNode>(&client, node("fine")).await.unwrap();
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), "default");
    cluster
        .wait_for("fine's Service and StatefulSet", || async {
            let endpoint = nodes
                .get_status("fine")
                .await?
                .status
                .and_then(|s| s.endpoint)
                .and_then(|e| e.cluster_ip);
            Ok(endpoint.is_some()
                && services.get_opt("fine").await?.is_some()
                && statefulsets.get_opt("fine").await?.is_some())
        })
        .await
        .unwrap();
    cluster.stop().unwrap();
}
