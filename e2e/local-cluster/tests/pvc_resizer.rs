//! pvc-resizer end to end, on volumes that really fill up (the `local-sized` class: a tmpfs
//! per volume) with real valkey-server pods:
//!
//! - a node with autoResize (threshold 50 %, increase 100 %, limit 4x) filled with values
//!   grows twice, its usage drops below the threshold each time, its data stays; filled
//!   further at the limit it reports LimitReached (condition and Event) and nothing patches
//!   the claim again;
//! - a spec growth on a StorageClass without expansion is NotExpandable, with no PATCH of
//!   the claim (counted in the audit log);
//! - a full volume without autoResize refuses writes and serves reads; grown, it takes
//!   writes again without a restart;
//! - pvc-resizer holds no `nodes/proxy`; the kubelet API refuses `/stats/summary` to a
//!   token without `nodes/stats` (403) and without a token (401), serves it with, and
//!   `kubectl logs` still works through the API server's node proxy;
//! - a ValkeyCluster's template growth reaches every member's claim.

use std::collections::BTreeMap;
use std::time::Instant;

use crd_types::cluster::ValkeyClusterSpec;
use crd_types::conditions::{self, types};
use crd_types::node::{StorageState, StorageStatus};
use crd_types::template::{AutoResize, WorkloadType};
use crd_types::{ValkeyCluster, ValkeyNode};
use e2e_kit::testing::{
    cluster_with_operator_using, controller, events_about, ready_node, set_from_stdin, valkey_cli,
    valkey_node,
};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod, ServiceAccount};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use local_cluster::controller_pods::{LeaderEndpoint, PodController};
use local_cluster::{LocalCluster, Options, kubeconfig, operator};
use serde_json::json;

const NS: &str = "default";
const SIZED: &str = agent_services::SIZED_STORAGE_CLASS;
const RESIZER_USER: &str =
    "system:serviceaccount:valkey-operator-system:valkey-operator-pvc-resizer";
/// One value written to fill a volume.
const VALUE: usize = 256 << 10;
const MI: i64 = 1 << 20;

#[tokio::test]
async fn volumes_grow_before_they_fill_with_least_privilege() {
    let run = tempfile::tempdir().unwrap();
    let mut options = Options::new(run.path());
    options.audit = true;
    let (mut cluster, controllers) =
        cluster_with_operator_using(options, &[("pvc-resizer", "STATS_INTERVAL", "2")])
            .await
            .unwrap();
    let client = cluster.client().await.unwrap();

    kubelet_api_authorizes_like_a_kubelet(&cluster, &client).await;
    a_filling_volume_grows_until_its_limit(&cluster, &client, resizer(&controllers)).await;
    an_unexpandable_class_is_reported_without_retries(&cluster, &client, resizer(&controllers))
        .await;
    a_full_volume_serves_reads_and_writes_again_once_grown(&cluster, &client).await;
    a_cluster_template_growth_reaches_every_member(&cluster, &client).await;

    let metrics = resizer(&controllers).metrics(&client).await.unwrap();
    let failures: Vec<&str> = metrics
        .lines()
        .filter(|l| {
            l.starts_with(r#"valkey_operator_reconcile_failures_total{controller="pvc-resizer""#)
        })
        .collect();
    assert!(failures.is_empty(), "{failures:?}");
    cluster.check_restarts("the end of the test").await.unwrap();
    cluster.stop().unwrap();
}

fn resizer(controllers: &[PodController]) -> &PodController {
    controller(controllers, "pvc-resizer")
}

/// The metrics of the pod that led when `leader` was taken: counters compared across a
/// window come from one pod.
async fn metrics(leader: &LeaderEndpoint) -> String {
    leader.metrics().await.unwrap()
}

/// The value of the metric line that starts with `series`, 0 when absent.
fn sample(metrics: &str, series: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// A ValkeyNode on `class` of `size`, with `auto_resize`.
fn sized_node(name: &str, size: &str, class: &str, auto_resize: Option<AutoResize>) -> ValkeyNode {
    let mut node = valkey_node(name, WorkloadType::StatefulSet, true, Some(class));
    let persistence = node.spec.template.persistence.as_mut().unwrap();
    persistence.size = size.into();
    persistence.auto_resize = auto_resize;
    node
}

/// Creates `node` and waits until it serves; its ClusterIP.
async fn create_ready(cluster: &LocalCluster, client: &Client, node: ValkeyNode) -> String {
    let nodes: Api<ValkeyNode> = Api::namespaced(client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let name = node.name_any();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let (_, ip) = cluster
        .wait_for_value(&format!("{name} ready"), || {
            let (nodes, pods, name) = (nodes.clone(), pods.clone(), name.clone());
            async move { ready_node(&nodes, &pods, &name, None).await }
        })
        .await
        .unwrap();
    ip
}

/// `SET <key> <VALUE bytes>`; its answer.
fn set_value(host: &str, key: &str) -> String {
    set_from_stdin(host, key, &vec![b'v'; VALUE])
}

/// Writes keys `prefix0..prefix<count>` and checks each was taken.
fn fill(host: &str, prefix: &str, range: std::ops::Range<usize>) {
    for i in range {
        let answer = set_value(host, &format!("{prefix}{i}"));
        assert_eq!(answer, "OK", "SET {prefix}{i}");
    }
}

async fn storage(nodes: &Api<ValkeyNode>, name: &str) -> (StorageStatus, Option<String>) {
    let status = nodes
        .get_status(name)
        .await
        .unwrap()
        .status
        .unwrap_or_default();
    let reason =
        conditions::find(&status.conditions, types::STORAGE_READY).map(|c| c.reason.clone());
    (status.storage.unwrap_or_default(), reason)
}

/// How many times `events` were told, counting the repeats folded into each.
fn told(events: &[Event]) -> i32 {
    events
        .iter()
        .map(|e| e.series.as_ref().map_or(1, |s| s.count))
        .sum()
}

fn used_percent(s: &StorageStatus) -> Option<i64> {
    let (used, available) = (s.used_bytes?, s.available_bytes?);
    Some(used * 100 / (used + available).max(1))
}

/// PATCH requests on claim `name` by `user`, from the API server's audit log.
fn claim_patches(cluster: &LocalCluster, name: &str, user: &str) -> usize {
    let log = std::fs::read_to_string(cluster.audit_log.as_ref().unwrap()).unwrap();
    log.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| {
            e["verb"] == "patch"
                && e["stage"] == "ResponseComplete"
                && e["user"]["username"] == user
                && e["objectRef"]["resource"] == "persistentvolumeclaims"
                && e["objectRef"]["name"] == name
                && e["objectRef"]["subresource"].is_null()
        })
        .count()
}

async fn claim_request(claims: &Api<PersistentVolumeClaim>, name: &str) -> String {
    let claim = claims.get(name).await.unwrap();
    claim.spec.unwrap().resources.unwrap().requests.unwrap()["storage"]
        .0
        .clone()
}

// --- a) usage-driven growth up to the limit -------------------------------------------------

async fn a_filling_volume_grows_until_its_limit(
    cluster: &LocalCluster,
    client: &Client,
    resizer: &PodController,
) {
    let leader = resizer.leader_endpoint(client).await.unwrap();
    let nodes: Api<ValkeyNode> = Api::namespaced(client.clone(), NS);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    let events: Api<Event> = Api::namespaced(client.clone(), NS);
    let auto_resize = AutoResize {
        used_percent_threshold: 50,
        increase: "100%".into(),
        limit: "64Mi".into(),
        min_increase: "1Mi".into(),
        cooldown_seconds: 0,
    };
    let node = sized_node("fill", "16Mi", SIZED, Some(auto_resize));
    let ip = create_ready(cluster, client, node).await;
    // pvc-resizer reads the volume's usage from the kubelet.
    cluster
        .wait_for("fill's usage in status.storage", || {
            let nodes = nodes.clone();
            async move {
                let (s, reason) = storage(&nodes, "fill").await;
                Ok(s.used_bytes.is_some() && reason.as_deref() == Some("VolumeReady"))
            }
        })
        .await
        .unwrap();

    let mut written = 0;
    for (step, target) in [(1, "32Mi"), (2, "64Mi")] {
        // 9Mi more: 56 % of the capacity before this step.
        fill(&ip, "k", written..written + 36);
        written += 36;
        let crossed = Instant::now();
        cluster
            .wait_for(&format!("step {step}: fill grows to {target}"), || {
                let nodes = nodes.clone();
                async move {
                    let (s, _) = storage(&nodes, "fill").await;
                    Ok(s.capacity.as_deref() == Some(target)
                        && s.state == Some(StorageState::Bound))
                }
            })
            .await
            .unwrap();
        println!(
            "step {step}: from 9Mi written past 50% to capacity {target} in status: {:.1}s",
            crossed.elapsed().as_secs_f64()
        );
        assert_eq!(claim_request(&claims, "fill-data").await, target);
        // Usage falls below the threshold on the larger volume.
        let percent = cluster
            .wait_for_value(&format!("step {step}: usage read on {target}"), || {
                let nodes = nodes.clone();
                async move {
                    let (s, _) = storage(&nodes, "fill").await;
                    let grown = s
                        .used_bytes
                        .zip(s.available_bytes)
                        .is_some_and(|(u, a)| u + a > 3 * MI * if step == 1 { 8 } else { 16 });
                    Ok(grown.then(|| used_percent(&s)).flatten())
                }
            })
            .await
            .unwrap();
        println!("step {step}: {percent}% used after growing");
        assert!(percent < 50, "{percent}%");
        assert_eq!(valkey_cli(&ip, &["DBSIZE"]), written.to_string());
        assert_eq!(valkey_cli(&ip, &["STRLEN", "k0"]), VALUE.to_string());
    }
    let resized = events_about(&events, "ValkeyNode", "fill", "Resized")
        .await
        .unwrap();
    assert_eq!(told(&resized), 2, "{resized:?}");

    // At the limit: fill past 50 % of 64Mi.
    fill(&ip, "k", written..written + 80);
    written += 80;
    cluster
        .wait_for("fill reports LimitReached", || {
            let (nodes, events) = (nodes.clone(), events.clone());
            async move {
                let (s, reason) = storage(&nodes, "fill").await;
                let told = !events_about(&events, "ValkeyNode", "fill", "LimitReached")
                    .await?
                    .is_empty();
                Ok(reason.as_deref() == Some("LimitReached")
                    && s.state == Some(StorageState::LimitReached)
                    && told)
            }
        })
        .await
        .unwrap();
    // Several more stats rounds later: no further growth, no crash loop.
    let calls = |m: &str| sample(m, "valkey_operator_kubelet_stats_calls_total");
    let before = calls(&metrics(&leader).await);
    cluster
        .wait_for("three more stats rounds", || async {
            Ok(calls(&metrics(&leader).await) >= before + 3)
        })
        .await
        .unwrap();
    assert_eq!(claim_request(&claims, "fill-data").await, "64Mi");
    let patches = claim_patches(cluster, "fill-data", RESIZER_USER);
    println!("fill-data: {patches} PATCH requests by pvc-resizer");
    assert_eq!(patches, 2);
    let m = metrics(&leader).await;
    assert_eq!(
        sample(
            &m,
            r#"valkey_operator_pvc_resizes_total{claim="fill-data",namespace="default",result="requested"}"#
        ),
        2,
        "{m}"
    );
    assert_eq!(
        sample(
            &m,
            r#"valkey_operator_pvc_capacity_bytes{claim="fill-data",namespace="default"}"#
        ),
        64 << 20
    );
    assert_eq!(
        sample(
            &m,
            r#"valkey_operator_pvc_limit_bytes{claim="fill-data",namespace="default"}"#
        ),
        64 << 20,
        "autoResize.limit: {m}"
    );
    assert_eq!(
        sample(&m, r#"valkey_operator_leader{controller="pvc-resizer"}"#),
        1,
        "the leader says so: {m}"
    );
    let warnings = events_about(&events, "ValkeyNode", "fill", "LimitReached")
        .await
        .unwrap();
    assert_eq!(told(&warnings), 1, "told once: {warnings:?}");
    let workload = nodes
        .get_status("fill")
        .await
        .unwrap()
        .status
        .unwrap()
        .workload
        .unwrap();
    assert_eq!(workload.restarts, 0);
    assert_eq!(valkey_cli(&ip, &["DBSIZE"]), written.to_string());
}

// --- b) a class without expansion ------------------------------------------------------------

async fn an_unexpandable_class_is_reported_without_retries(
    cluster: &LocalCluster,
    client: &Client,
    resizer: &PodController,
) {
    let leader = resizer.leader_endpoint(client).await.unwrap();
    let classes: Api<StorageClass> = Api::all(client.clone());
    let fixed: StorageClass = serde_json::from_value(json!({
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": "fixed"},
        "provisioner": agent_services::PROVISIONER,
        "parameters": {agent_services::MEDIUM: "tmpfs"},
        "allowVolumeExpansion": false,
        "reclaimPolicy": "Delete",
    }))
    .unwrap();
    classes
        .create(&PostParams::default(), &fixed)
        .await
        .unwrap();
    let nodes: Api<ValkeyNode> = Api::namespaced(client.clone(), NS);
    let events: Api<Event> = Api::namespaced(client.clone(), NS);
    create_ready(cluster, client, sized_node("fixed", "16Mi", "fixed", None)).await;
    nodes
        .patch(
            "fixed",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"persistence": {"size": "32Mi"}}})),
        )
        .await
        .unwrap();
    cluster
        .wait_for("fixed reports NotExpandable", || {
            let (nodes, events) = (nodes.clone(), events.clone());
            async move {
                let (s, reason) = storage(&nodes, "fixed").await;
                let told = !events_about(&events, "ValkeyNode", "fixed", "NotExpandable")
                    .await?
                    .is_empty();
                Ok(reason.as_deref() == Some("NotExpandable")
                    && s.state == Some(StorageState::NotExpandable)
                    && told)
            }
        })
        .await
        .unwrap();
    // node-controller says the claim is smaller than the spec.
    let status = nodes.get_status("fixed").await.unwrap().status.unwrap();
    let size = conditions::find(&status.conditions, types::CLAIM_SIZE).unwrap();
    assert_eq!(size.reason, "SmallerThanSpec", "{size:?}");
    // A change of the node wakes pvc-resizer again: still no PATCH of the claim.
    let runs = |m: &str| {
        sample(
            m,
            r#"valkey_operator_reconcile_runs_total{controller="pvc-resizer"}"#,
        )
    };
    let before = runs(&metrics(&leader).await);
    nodes
        .patch(
            "fixed",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"poke": "1"}}})),
        )
        .await
        .unwrap();
    cluster
        .wait_for("pvc-resizer looks at fixed again", || async {
            Ok(runs(&metrics(&leader).await) > before)
        })
        .await
        .unwrap();
    let patches = claim_patches(cluster, "fixed-data", RESIZER_USER);
    println!("fixed-data: {patches} PATCH requests by pvc-resizer");
    assert_eq!(patches, 0);
    let warned = events_about(&events, "ValkeyNode", "fixed", "NotExpandable")
        .await
        .unwrap();
    assert_eq!(told(&warned), 1, "{warned:?}");
}

// --- c) disk full, then grown ------------------------------------------------------------------

async fn a_full_volume_serves_reads_and_writes_again_once_grown(
    cluster: &LocalCluster,
    client: &Client,
) {
    let nodes: Api<ValkeyNode> = Api::namespaced(client.clone(), NS);
    let ip = create_ready(cluster, client, sized_node("full", "8Mi", SIZED, None)).await;
    // Fill until Valkey refuses a write.
    let mut taken = 0;
    let refusal = loop {
        let answer = set_value(&ip, &format!("f{taken}"));
        if answer != "OK" {
            break answer;
        }
        taken += 1;
        assert!(taken < 64, "8Mi never filled");
    };
    println!("full: {taken} values taken, then: {refusal}");
    assert!(
        refusal.contains("MISCONF") || refusal.contains("AOF"),
        "{refusal}"
    );
    // Reads still work.
    assert_eq!(valkey_cli(&ip, &["STRLEN", "f0"]), VALUE.to_string());
    // PING is refused too (Valkey denies it on a disk error so health checks notice), so the
    // readiness probe fails while the volume is full; the Service still routes to the pod
    // (it publishes not-ready addresses), which serves reads.
    assert!(valkey_cli(&ip, &["PING"]).contains("MISCONF"));

    nodes
        .patch(
            "full",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"persistence": {"size": "16Mi"}}})),
        )
        .await
        .unwrap();
    cluster
        .wait_for("full grows to 16Mi", || {
            let nodes = nodes.clone();
            async move { Ok(storage(&nodes, "full").await.0.capacity.as_deref() == Some("16Mi")) }
        })
        .await
        .unwrap();
    // Valkey retries its AOF write by itself; writes are taken again.
    cluster
        .wait_for("full takes writes again", || {
            let ip = ip.clone();
            async move { Ok(set_value(&ip, "after") == "OK") }
        })
        .await
        .unwrap();
    assert_eq!(valkey_cli(&ip, &["STRLEN", "after"]), VALUE.to_string());
    assert_eq!(valkey_cli(&ip, &["STRLEN", "f0"]), VALUE.to_string());
    // Ready again, in the same pod.
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let (workload, _) = cluster
        .wait_for_value("full ready again", || {
            let (nodes, pods) = (nodes.clone(), pods.clone());
            async move { ready_node(&nodes, &pods, "full", None).await }
        })
        .await
        .unwrap();
    assert_eq!(workload.restarts, 0, "no restart");
}

// --- d) least privilege at the kubelet ---------------------------------------------------------

async fn kubelet_api_authorizes_like_a_kubelet(cluster: &LocalCluster, client: &Client) {
    // pvc-resizer may read stats and may not proxy.
    let may = |resource: &str, subresource: &str| {
        let client = client.clone();
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(RESIZER_USER.into()),
                groups: Some(vec!["system:serviceaccounts".into()]),
                resource_attributes: Some(ResourceAttributes {
                    verb: Some("get".into()),
                    resource: Some(resource.into()),
                    subresource: Some(subresource.into()),
                    name: Some("local-node-0".into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        async move {
            Api::<SubjectAccessReview>::all(client)
                .create(&PostParams::default(), &review)
                .await
                .unwrap()
                .status
                .unwrap()
                .allowed
        }
    };
    assert!(may("nodes", "stats").await);
    assert!(
        !may("nodes", "proxy").await,
        "pvc-resizer must not hold nodes/proxy"
    );
    let roles: Api<ClusterRole> = Api::all(client.clone());
    for role in roles.list(&Default::default()).await.unwrap() {
        if role.name_any().starts_with("valkey-operator") {
            let rules = serde_json::to_string(&role.rules).unwrap();
            assert!(
                !rules.contains("nodes/proxy"),
                "{}: {rules}",
                role.name_any()
            );
        }
    }

    // The kubelet API itself: a token without nodes/stats, none, one with.
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), NS);
    for name in ["no-stats", "stats-reader"] {
        let account: ServiceAccount =
            serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        accounts
            .create(&PostParams::default(), &account)
            .await
            .unwrap();
    }
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": "e2e-node-stats"},
        "rules": [{"apiGroups": [""], "resources": ["nodes/stats"], "verbs": ["get"]}],
    }))
    .unwrap();
    roles.create(&PostParams::default(), &role).await.unwrap();
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "e2e-node-stats"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "e2e-node-stats"},
        "subjects": [{"kind": "ServiceAccount", "name": "stats-reader", "namespace": NS}],
    }))
    .unwrap();
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    let node: Node = Api::<Node>::all(client.clone())
        .get("local-node-0")
        .await
        .unwrap();
    let address = &node.status.as_ref().unwrap().addresses.as_ref().unwrap()[0].address;
    let port = node
        .status
        .as_ref()
        .unwrap()
        .daemon_endpoints
        .as_ref()
        .unwrap()
        .kubelet_endpoint
        .as_ref()
        .unwrap()
        .port;
    let kubelet = format!("https://{address}:{port}");
    let ca = cluster.layout.run_dir.join("pki/ca.crt");
    let as_account = |account: Option<&str>| {
        let (client, kubelet, ca) = (client.clone(), kubelet.clone(), ca.clone());
        let account = account.map(str::to_string);
        async move {
            let token = match &account {
                Some(a) => operator::service_account_token(&client, NS, a)
                    .await
                    .unwrap(),
                None => String::new(),
            };
            let path = tempfile::NamedTempFile::new().unwrap();
            std::fs::write(
                path.path(),
                kubeconfig::render(&kubelet, &ca, "e2e", kubeconfig::Credentials::Token(&token)),
            )
            .unwrap();
            let kubelet_client = local_cluster::kube_client(path.path()).await.unwrap();
            let request = http::Request::get("/stats/summary")
                .body(Vec::new())
                .unwrap();
            match kubelet_client.request_text(request).await {
                Ok(body) => Ok(body),
                Err(kube::Error::Api(status)) => Err(status.code),
                Err(other) => panic!("{other}"),
            }
        }
    };
    assert_eq!(as_account(Some("no-stats")).await.unwrap_err(), 403);
    assert_eq!(as_account(None).await.unwrap_err(), 401);
    let summary = as_account(Some("stats-reader")).await.unwrap();
    assert!(
        summary.contains("\"nodeName\":\"local-node-0\""),
        "{summary}"
    );

    // The node proxy (the API server's kubelet client certificate) still reads logs.
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    create_ready(
        cluster,
        client,
        valkey_node("logs", WorkloadType::StatefulSet, false, None),
    )
    .await;
    let log = pods.logs("logs-0", &Default::default()).await.unwrap();
    assert!(log.contains("Ready to accept connections"), "{log}");
}

// --- e) a topology's template growth -----------------------------------------------------------

async fn a_cluster_template_growth_reaches_every_member(cluster: &LocalCluster, client: &Client) {
    let clusters: Api<ValkeyCluster> = Api::namespaced(client.clone(), NS);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    let mut spec: ValkeyClusterSpec = serde_json::from_value(json!({
        "shards": 1,
        "replicasPerShard": 1,
        "template": {"persistence": {"size": "16Mi", "storageClassName": SIZED, "reclaimPolicy": "Delete"}},
    }))
    .unwrap();
    spec.common.template.config.0 = BTreeMap::from([("maxmemory".into(), "100mb".into())]);
    clusters
        .create(&PostParams::default(), &ValkeyCluster::new("grow", spec))
        .await
        .unwrap();
    let members = ["grow-0-0-data", "grow-0-1-data"];
    cluster
        .wait_for("grow's members' claims", || {
            let claims = claims.clone();
            async move {
                for m in members {
                    if claims.get_opt(m).await?.is_none() {
                        return Ok(false);
                    }
                }
                Ok(true)
            }
        })
        .await
        .unwrap();
    clusters
        .patch(
            "grow",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"persistence": {"size": "24Mi"}}}})),
        )
        .await
        .unwrap();
    cluster
        .wait_for("every member's claim at 24Mi", || {
            let claims = claims.clone();
            async move {
                for m in members {
                    let claim = claims.get(m).await?;
                    let capacity = claim
                        .status
                        .and_then(|s| s.capacity)
                        .and_then(|c| c.get("storage").cloned());
                    if capacity.map(|q| q.0).as_deref() != Some("24Mi") {
                        return Ok(false);
                    }
                }
                Ok(true)
            }
        })
        .await
        .unwrap();
}
