//! The admission policies of deploy/components/*/admission.yaml, tried with the controllers'
//! own ServiceAccount tokens: what RBAC allows but the operator never needs is refused.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Secret, Service};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use local_cluster::LocalCluster;
use serde_json::{Value, json};

const NS: &str = "default";
const TOPOLOGY_MANAGER: &str = "valkey-operator/topology";

/// The message of an API refusal, or what else came back.
fn refusal<T: std::fmt::Debug>(result: kube::Result<T>) -> String {
    match result {
        Err(kube::Error::Api(status)) => status.message,
        other => format!("not refused: {other:?}"),
    }
}

#[track_caller]
fn assert_refused<T: std::fmt::Debug>(result: kube::Result<T>, message_part: &str) {
    let message = refusal(result);
    assert!(
        message.contains(message_part),
        "expected {message_part:?} in: {message}"
    );
}

fn token_secret(name: &str) -> Secret {
    serde_json::from_value(json!({
        "metadata": {"name": name, "annotations": {"kubernetes.io/service-account.name": "default"}},
        "type": "kubernetes.io/service-account-token",
    }))
    .unwrap()
}

fn pod(name: &str, labels: Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "valkey/valkey:8.1"}]},
    }))
    .unwrap()
}

async fn apply_role(pods: &Api<Pod>, name: &str, role: &str) -> kube::Result<Pod> {
    let body = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"valkey.rs/role": role}}});
    pods.patch(
        name,
        &PatchParams::apply(TOPOLOGY_MANAGER),
        &Patch::Apply(&body),
    )
    .await
}

/// topology-controller writes no ServiceAccount token Secret (the token controller would
/// fill it with another identity's token), and its pod writes only move `valkey.rs/role` on
/// a ValkeyReplication's data pods.
pub async fn holds_topology_controller(
    cluster: &LocalCluster,
    admin: &Client,
    controller: &Client,
) {
    let secrets: Api<Secret> = Api::namespaced(controller.clone(), NS);
    // Policies take effect once the API server has read them: wait, with dry runs.
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    cluster
        .wait_for("the admission policies to be in force", || {
            let (secrets, dry_run) = (secrets.clone(), dry_run.clone());
            async move {
                Ok(secrets
                    .create(&dry_run, &token_secret("minted"))
                    .await
                    .is_err())
            }
        })
        .await
        .unwrap();
    let token = secrets
        .create(&PostParams::default(), &token_secret("minted"))
        .await;
    assert_refused(token, "may not write ServiceAccount token Secrets");
    let opaque: Secret = serde_json::from_value(json!({"metadata": {"name": "its-own"}})).unwrap();
    secrets
        .create(&PostParams::default(), &opaque)
        .await
        .unwrap();

    let created: Api<Pod> = Api::namespaced(admin.clone(), NS);
    let member = pod(
        "member",
        json!({"valkey.rs/replication": "group", "app": "valkey"}),
    );
    let stranger = pod("stranger", json!({"app": "web"}));
    for p in [&member, &stranger] {
        created.create(&PostParams::default(), p).await.unwrap();
    }
    let pods: Api<Pod> = Api::namespaced(controller.clone(), NS);
    apply_role(&pods, "member", "primary").await.unwrap();
    apply_role(&pods, "member", "replica").await.unwrap();
    let image = json!({"spec": {"containers": [{"name": "c", "image": "attacker/image"}]}});
    let patched = pods
        .patch("member", &PatchParams::default(), &Patch::Strategic(&image))
        .await;
    assert_refused(patched, "may not change a pod's spec");
    let label = json!({"metadata": {"labels": {"app": "other"}}});
    let relabelled = pods
        .patch("member", &PatchParams::default(), &Patch::Merge(&label))
        .await;
    assert_refused(relabelled, "may change no pod label but valkey.rs/role");
    let annotation = json!({"metadata": {"annotations": {"x": "y"}}});
    let annotated = pods
        .patch(
            "member",
            &PatchParams::default(),
            &Patch::Merge(&annotation),
        )
        .await;
    assert_refused(annotated, "may not change a pod's annotations");
    assert_refused(
        apply_role(&pods, "stranger", "primary").await,
        "may label only the data pods of a ValkeyReplication",
    );
    let stranger = created.get("stranger").await.unwrap();
    assert_eq!(
        stranger.metadata.labels.unwrap().get("valkey.rs/role"),
        None,
        "the stranger kept its labels"
    );
}

/// node-controller writes only objects labelled as its own, never takes one over, and
/// creates a workload or ConfigMap only under a ValkeyNode's controller reference.
pub async fn holds_node_controller(admin: &Client, controller: &Client) {
    let foreign: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "foreign"}, "data": {"k": "v"}}))
            .unwrap();
    Api::<ConfigMap>::namespaced(admin.clone(), NS)
        .create(&PostParams::default(), &foreign)
        .await
        .unwrap();
    let maps: Api<ConfigMap> = Api::namespaced(controller.clone(), NS);
    let taken = json!({"metadata": {"labels": {
        "app.kubernetes.io/managed-by": "valkey-operator", "valkey.rs/node": "foreign"}},
        "data": {"k": "taken"}});
    let patched = maps
        .patch("foreign", &PatchParams::default(), &Patch::Merge(&taken))
        .await;
    assert_refused(patched, "may not take over an object it did not write");
    let unlabelled = json!({"data": {"k": "changed"}});
    let patched = maps
        .patch(
            "foreign",
            &PatchParams::default(),
            &Patch::Merge(&unlabelled),
        )
        .await;
    assert_refused(patched, "may write only objects labelled");

    let labels = json!({"app.kubernetes.io/managed-by": "valkey-operator", "valkey.rs/node": "n"});
    let orphan: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "orphan", "labels": labels},
        "spec": {
            "selector": {"matchLabels": {"valkey.rs/node": "n"}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "c", "image": "attacker/image"}]},
            },
        },
    }))
    .unwrap();
    let created = Api::<Deployment>::namespaced(controller.clone(), NS)
        .create(&PostParams::default(), &orphan)
        .await;
    assert_refused(
        created,
        "only with a controller reference to the ValkeyNode",
    );
}

fn service(name: &str, labels: Value, selector: Value, extra: Value) -> Service {
    let mut spec = json!({"selector": selector, "ports": [{"port": 6379}]});
    spec.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}, "spec": spec}))
        .unwrap()
}

/// service-controller writes only Services labelled as its own, never takes one over, and
/// each selects exactly its ValkeyNode's pod, has no externalIPs and is owned by that node.
pub async fn holds_service_controller(admin: &Client, controller: &Client) {
    let ours = json!({"app.kubernetes.io/managed-by": "valkey-operator", "valkey.rs/node": "n"});
    Api::<Service>::namespaced(admin.clone(), NS)
        .create(
            &PostParams::default(),
            &service(
                "web",
                json!({"app": "web"}),
                json!({"app": "web"}),
                json!({}),
            ),
        )
        .await
        .unwrap();
    let services: Api<Service> = Api::namespaced(controller.clone(), NS);
    let redirect = json!({"spec": {"selector": {"app": "attacker"}}});
    let patched = services
        .patch("web", &PatchParams::default(), &Patch::Merge(&redirect))
        .await;
    assert_refused(patched, "may write only Services labelled");
    let taken = json!({"metadata": {"labels": ours}});
    let patched = services
        .patch("web", &PatchParams::default(), &Patch::Merge(&taken))
        .await;
    assert_refused(patched, "may not take over a Service it did not write");

    let create = |s: Service| {
        let services = services.clone();
        async move { services.create(&PostParams::default(), &s).await }
    };
    let elsewhere = service("n", ours.clone(), json!({"app": "web"}), json!({}));
    assert_refused(create(elsewhere).await, "must select exactly the pod");
    let external = service(
        "n",
        ours.clone(),
        json!({"valkey.rs/node": "n"}),
        json!({"externalIPs": ["10.0.0.1"]}),
    );
    assert_refused(create(external).await, "may not set externalIPs");
    let orphan = service("n", ours, json!({"valkey.rs/node": "n"}), json!({}));
    assert_refused(
        create(orphan).await,
        "only with a controller reference to the ValkeyNode",
    );
}

/// pvc-resizer changes only claims node-controller made, and in them only the storage
/// request and its own resize annotations.
pub async fn holds_pvc_resizer(admin: &Client, controller: &Client) {
    let claim = |name: &str, labels: Value| -> PersistentVolumeClaim {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        }))
        .unwrap()
    };
    let created: Api<PersistentVolumeClaim> = Api::namespaced(admin.clone(), NS);
    let ours = json!({"app.kubernetes.io/managed-by": "valkey-operator", "valkey.rs/node": "n"});
    for c in [
        claim("foreign-claim", json!({"app": "db"})),
        claim("n-data", ours),
    ] {
        created.create(&PostParams::default(), &c).await.unwrap();
    }
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(controller.clone(), NS);
    let patch = |name: &'static str, body: Value| {
        let claims = claims.clone();
        async move {
            claims
                .patch(name, &PatchParams::default(), &Patch::Merge(&body))
                .await
        }
    };
    let record = json!({"metadata": {"annotations": {"valkey.rs/last-resize-time": "2026-12-06T00:00:00Z"}}});
    assert_refused(
        patch("foreign-claim", record.clone()).await,
        "may only change claims node-controller made",
    );
    patch("n-data", record).await.unwrap();
    assert_refused(
        patch(
            "n-data",
            json!({"metadata": {"labels": {"valkey.rs/node": "other"}}}),
        )
        .await,
        "may not change a claim's labels",
    );
    assert_refused(
        patch(
            "n-data",
            json!({"metadata": {"annotations": {"backup": "skip"}}}),
        )
        .await,
        "may change no claim annotation but its own",
    );
}
