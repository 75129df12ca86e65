//! service-controller on a real API server: each ValkeyNode gets its own ClusterIP Service
//! and `status.endpoint`; a deleted Service comes back, the new ClusterIP is recorded and
//! announced with an Event; deleting the node garbage-collects the Service.

use std::collections::BTreeMap;

use crd_types::conditions::{self, types};
use crd_types::node::{EndpointPort, Mode};
use crd_types::template::{Exporter, ValkeyNodeTemplate};
use crd_types::{ValkeyNode, ValkeyNodeSpec};
use e2e_kit::testing::{api_server_with_operator, events_about};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use local_cluster::operator;
use serde_json::json;

const NODE: &str = "shard-0-0";

/// The node's Service ClusterIP, once status.endpoint records it with EndpointReady=True
/// and it is the live Service's (with a uid other than `not_uid`).
async fn recorded_endpoint(
    nodes: &Api<ValkeyNode>,
    services: &Api<Service>,
    not_uid: Option<&str>,
) -> anyhow::Result<Option<(String, String)>> {
    let Some(service) = services.get_opt(NODE).await? else {
        return Ok(None);
    };
    let uid = service.uid().unwrap_or_default();
    if not_uid == Some(uid.as_str()) {
        return Ok(None);
    }
    let Some(live_ip) = service.spec.and_then(|s| s.cluster_ip) else {
        return Ok(None);
    };
    let status = nodes.get_status(NODE).await?.status.unwrap_or_default();
    let recorded = status.endpoint.and_then(|e| e.cluster_ip);
    let ready = conditions::is_true(&status.conditions, types::ENDPOINT_READY);
    Ok((ready && recorded.as_deref() == Some(live_ip.as_str())).then_some((live_ip, uid)))
}

#[tokio::test]
async fn each_node_gets_a_service_that_comes_back_and_goes_with_the_node() {
    let run = tempfile::tempdir().unwrap();
    let (mut cluster, controllers) = api_server_with_operator(run.path()).await.unwrap();
    let client = cluster.client().await.unwrap();
    let nodes: Api<ValkeyNode> = Api::namespaced(client.clone(), "default");
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let events: Api<Event> = Api::namespaced(client.clone(), "default");

    // --- A cluster-mode node with an exporter gets its Service and status.endpoint.
    let node = ValkeyNode::new(
        NODE,
        ValkeyNodeSpec {
            mode: Mode::Cluster,
            template: ValkeyNodeTemplate {
                exporter: Some(Exporter {
                    image: "oliver006/redis_exporter".into(),
                    port: 9121,
                    resources: None,
                }),
                ..Default::default()
            },
            ..Default::default()
        },
    );
    let node = nodes.create(&PostParams::default(), &node).await.unwrap();
    let node_uid = node.uid().unwrap();
    let (first_ip, first_uid) = cluster
        .wait_for_value("the node's Service and status.endpoint", || {
            recorded_endpoint(&nodes, &services, None)
        })
        .await
        .unwrap();

    let service = services.get(NODE).await.unwrap();
    let spec = service.spec.clone().unwrap();
    let ports: Vec<(String, i32, IntOrString)> = spec
        .ports
        .iter()
        .flatten()
        .map(|p| {
            (
                p.name.clone().unwrap(),
                p.port,
                p.target_port.clone().unwrap(),
            )
        })
        .collect();
    let named = |name: &str, port| (name.to_string(), port, IntOrString::String(name.into()));
    assert_eq!(
        ports,
        [
            named("valkey", 6379),
            named("cluster-bus", 16379),
            named("metrics", 9121)
        ]
    );
    assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
    assert_eq!(
        spec.selector.unwrap(),
        BTreeMap::from([("valkey.rs/node".to_string(), NODE.to_string())])
    );
    assert_eq!(spec.publish_not_ready_addresses, Some(true));
    let owners = service.owner_references();
    assert_eq!(owners.len(), 1, "{owners:?}");
    assert_eq!(
        (
            owners[0].kind.as_str(),
            owners[0].uid.as_str(),
            owners[0].controller,
            owners[0].block_owner_deletion
        ),
        ("ValkeyNode", node_uid.as_str(), Some(true), Some(true))
    );
    assert_eq!(
        service
            .labels()
            .get("app.kubernetes.io/managed-by")
            .map(String::as_str),
        Some("valkey-operator")
    );
    assert_eq!(
        service.labels().get("valkey.rs/node").map(String::as_str),
        Some(NODE)
    );

    let endpoint = nodes
        .get_status(NODE)
        .await
        .unwrap()
        .status
        .unwrap()
        .endpoint
        .unwrap();
    assert_eq!(endpoint.service_name.as_deref(), Some(NODE));
    assert_eq!(endpoint.dns_name.as_deref(), Some("shard-0-0.default.svc"));
    let port = |name: &str, port| EndpointPort {
        name: name.into(),
        port,
    };
    assert_eq!(
        endpoint.ports,
        [
            port("valkey", 6379),
            port("cluster-bus", 16379),
            port("metrics", 9121)
        ]
    );
    assert_eq!(endpoint.observed_generation, node.metadata.generation);
    cluster
        .wait_for("a ServiceCreated Event", || async {
            Ok(!events_about(&events, "ValkeyNode", NODE, "ServiceCreated")
                .await?
                .is_empty())
        })
        .await
        .unwrap();

    // Another writer's condition on the same status list-map.
    let foreign = json!({"apiVersion": "valkey.rs/v1alpha1", "kind": "ValkeyNode",
        "status": {"conditions": [{"type": "E2eProbe", "status": "True", "reason": "Test",
        "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
    nodes
        .patch_status(
            NODE,
            &PatchParams::apply("e2e-test").force(),
            &Patch::Apply(&foreign),
        )
        .await
        .unwrap();

    // --- Deleting the Service: it comes back, and the new ClusterIP is recorded and announced.
    // A recreated Service almost always gets another address; should the allocator hand back
    // the same one, there is no change to announce and we delete again.
    let mut deleted_uid = first_uid;
    let second_ip = loop {
        services
            .delete(NODE, &DeleteParams::default())
            .await
            .unwrap();
        let (ip, uid) = cluster
            .wait_for_value("the Service to be recreated and recorded", || {
                recorded_endpoint(&nodes, &services, Some(&deleted_uid))
            })
            .await
            .unwrap();
        if ip != first_ip {
            break ip;
        }
        deleted_uid = uid;
    };
    let changed = cluster
        .wait_for_value("an AnnounceAddressChanged Event", || async {
            let found = events_about(&events, "ValkeyNode", NODE, "AnnounceAddressChanged").await?;
            Ok(found.into_iter().find(|e| {
                e.note
                    .as_deref()
                    .is_some_and(|n| n.contains(&format!("{first_ip} -> {second_ip}")))
            }))
        })
        .await
        .unwrap();
    assert_eq!(changed.type_.as_deref(), Some("Warning"));
    assert_eq!(
        changed.reporting_controller.as_deref(),
        Some("service-controller")
    );
    let status = nodes.get_status(NODE).await.unwrap().status.unwrap();
    assert!(
        conditions::is_true(&status.conditions, "E2eProbe"),
        "another writer's condition survives: {:?}",
        status.conditions
    );

    // --- The controller never failed a reconcile on the way.
    let service_controller = controllers
        .iter()
        .find(|c| c.process.binary == "service-controller")
        .unwrap();
    let metrics = operator::http_get(&service_controller.http_addr, "/metrics")
        .await
        .unwrap();
    assert!(
        !metrics.contains(
            r#"valkey_operator_reconcile_failures_total{controller="service-controller""#
        ),
        "{metrics}"
    );

    // --- Deleting the node deletes its Service (garbage collector, owner reference). The
    // garbage collector learns about the new ValkeyNode resource on its periodic discovery
    // resync, so this wait is the longest of the test.
    nodes.delete(NODE, &DeleteParams::default()).await.unwrap();
    cluster
        .wait_for("the Service to be garbage-collected", || async {
            Ok(services.get_opt(NODE).await?.is_none())
        })
        .await
        .unwrap();

    cluster.stop().unwrap();
}
