//! The monitoring we ship, proven against a real Prometheus: the exporters' PodMonitor
//! (deploy/components/monitoring) and the chart's ServiceMonitors, translated into the
//! scrape jobs prometheus-operator would generate, and the alert rules of
//! deploy/monitoring/alerts.yaml with every `for` cut from minutes to as many seconds
//! (promtool's unit tests check the real durations; here the expressions meet real series):
//! a frozen primary and a volume full at its limit fire their alerts, healing resolves them.

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use agent_services::ControlClient;
use crd_types::ValkeyNode;
use crd_types::conditions::{self, types};
use crd_types::monitoring::{
    MonitoringSpec, POD_MONITOR_GROUP, POD_MONITOR_KIND, POD_MONITOR_PLURAL, POD_MONITOR_VERSION,
    PodMonitorSpec,
};
use crd_types::names::statefulset_pod_name;
use crd_types::template::{
    AutoResize, Exporter, Persistence, ReclaimPolicy, TlsAuthClients, WorkloadType,
};
use e2e_kit::cluster_testing::Progress;
use e2e_kit::replication_testing::{self, ReplicationApis, valkey_replication};
use e2e_kit::testing::{ready_node, set_from_stdin, valkey_node};
use e2e_kit::topology::issued;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use local_cluster::operator::{apply_all, apply_crds_first, documents};
use local_cluster::prometheus::{Prometheus, scrape_job};
use local_cluster::repo_root;
use serde_json::Value;
use serde_json::json;

use super::{FORM, Installed, NS, OPERATOR_NS, SERIAL, install_with};

/// The alert a frozen primary must raise, and its `for` here (15m in the rules).
const NOT_READY: &str = "ValkeyTopologyNotReady";

/// The monitors a user applies, the component's PodMonitor and the chart's ServiceMonitors,
/// and the chart's Services (the same as the overlay installed).
fn monitors() -> (Vec<Value>, Vec<Value>) {
    let root = repo_root();
    let pod_monitor =
        std::fs::read_to_string(root.join("deploy/components/monitoring/podmonitor.yaml")).unwrap();
    let chart = Command::new("helm")
        .args(["template", "valkey-operator"])
        .arg(root.join("charts/valkey-operator"))
        .args(["--namespace", OPERATOR_NS])
        .args(["--set", "metrics.serviceMonitor.enabled=true"])
        .output()
        .expect("helm on PATH (hack/install-tools.sh builds it)");
    assert!(chart.status.success(), "{chart:?}");
    let rendered = String::from_utf8(chart.stdout).unwrap();
    let objects: Vec<Value> = documents(&pod_monitor)
        .unwrap()
        .into_iter()
        .chain(documents(&rendered).unwrap())
        .map(|o| serde_json::to_value(o).unwrap())
        .collect();
    let of_kind = |kinds: &[&str]| -> Vec<Value> {
        objects
            .iter()
            .filter(|o| kinds.contains(&o["kind"].as_str().unwrap_or_default()))
            .cloned()
            .collect()
    };
    let monitors = of_kind(&["PodMonitor", "ServiceMonitor"]);
    assert_eq!(monitors.len(), 5, "a PodMonitor and four ServiceMonitors");
    (monitors, of_kind(&["Service"]))
}

/// deploy/monitoring/alerts.yaml with each `for: <n>m` as `<n>s` (and hours as minutes).
fn quick_rules(env: &Installed) -> PathBuf {
    let rules = std::fs::read_to_string(repo_root().join("deploy/monitoring/alerts.yaml")).unwrap();
    let quick: Vec<String> = rules
        .lines()
        .map(|line| {
            let Some((indent, duration)) = line.split_once("for: ") else {
                return line.to_string();
            };
            if !indent.trim().is_empty() {
                return line.to_string();
            }
            let (number, unit) = duration.split_at(duration.len() - 1);
            let seconds = match unit {
                "m" => number.parse::<u32>().unwrap(),
                "h" => number.parse::<u32>().unwrap() * 60,
                _ => panic!("unexpected `for: {duration}`"),
            };
            format!("{indent}for: {seconds}s")
        })
        .collect();
    let path = env._run.path().join("alerts-quick.yaml");
    std::fs::write(&path, quick.join("\n")).unwrap();
    path
}

/// The value of the one series `expr` returns, or what it returned instead.
async fn one_value(prometheus: &Prometheus, expr: &str) -> anyhow::Result<Progress<f64>> {
    Ok(match prometheus.query(expr).await?.as_slice() {
        [(_, value)] => Ok(*value),
        other => Err(format!("{expr}: {other:?}")),
    })
}

/// Whether `alert` about the group is firing.
async fn firing(prometheus: &Prometheus, alert: &str, group: &str) -> anyhow::Result<bool> {
    firing_about(prometheus, alert, "name", group).await
}

/// Every query of the dashboard (deploy/monitoring/dashboard/queries, on this group)
/// returns data: Grafana does not run here, its queries do.
async fn every_panel_has_data(env: &Installed, prometheus: &Prometheus) {
    let out = Command::new("python3")
        .arg(repo_root().join("hack/dashboard.py"))
        .arg("--queries")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let queries = String::from_utf8(out.stdout).unwrap();
    let mut panels = 0;
    for line in queries.lines() {
        let (panel, query) = line.split_once('\t').unwrap();
        env.wait(&format!("panel {panel} to have data"), FORM, || async {
            let series = prometheus.query(query).await?;
            Ok(if series.is_empty() {
                Err(format!("no series for {query}"))
            } else {
                Ok(())
            })
        })
        .await;
        panels += 1;
    }
    assert!(panels >= 15, "{panels} panels");
}

/// Series per topology and per member, and the exporters' memory and CPU, for
/// docs/benchmarks.md.
async fn print_figures(prometheus: &Prometheus, name: &str) {
    for expr in [
        format!(r#"count({{__name__=~"valkey_operator_.*",namespace="{NS}",name="{name}"}})"#),
        format!(r#"count by (pod) ({{namespace="{NS}",topology="{name}"}})"#),
        format!(r#"process_resident_memory_bytes{{namespace="{NS}",topology="{name}"}}"#),
        format!(r#"rate(process_cpu_seconds_total{{namespace="{NS}",topology="{name}"}}[1m])"#),
    ] {
        let series = prometheus.query(&expr).await.unwrap();
        let values: Vec<String> = series
            .iter()
            .map(|(labels, v)| format!("{} {v}", labels["pod"].as_str().unwrap_or("")))
            .collect();
        eprintln!("{expr}: {values:?}");
    }
}

/// A ValkeyReplication with exporters, TLS and volumes, scraped through the shipped
/// monitors: the exporters' and the controllers' series arrive with the labels the rules
/// join on; every dashboard query returns data; a frozen primary fires ValkeyTopologyNotReady within its `for` plus a few
/// scrapes; thawed, the group heals and the alert resolves.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn prometheus_scrapes_the_monitors_and_a_frozen_primary_fires_its_alert() {
    let _serial = SERIAL.lock().await;
    // pvc-resizer reads volume usage every 2 s (60 s by default) so the volume panel fills.
    let mut env = install_with("all", &[("pvc-resizer", "STATS_INTERVAL", "2")]).await;
    env.controllers_run_as_deployed().await;
    let kubeconfig = env.cluster.admin_kubeconfig.clone();
    let (monitors, services) = monitors();
    let jobs = monitors
        .iter()
        .flat_map(|m| scrape_job(m, &services, &kubeconfig).unwrap())
        .collect();
    let rules = quick_rules(&env);
    let prometheus = Prometheus::start(&mut env.cluster, jobs, &[rules], 1).unwrap();

    let name = "watched";
    let groups = replication_testing::ReplicationApis::new(&env.client, NS);
    let mut group = valkey_replication(name, 2, 3, false);
    // Everything the dashboard shows: exporters, the operator's certificates, volumes that
    // pvc-resizer reads.
    group.spec.common.template.exporter = Some(Exporter::default());
    group.spec.common.tls = Some(issued::operator_issued(TlsAuthClients::Optional));
    group.spec.common.template.persistence = Some(Persistence {
        size: "64Mi".into(),
        storage_class_name: Some(agent_services::SIZED_STORAGE_CLASS.into()),
        reclaim_policy: ReclaimPolicy::Delete,
        auto_resize: Some(AutoResize {
            used_percent_threshold: 80,
            increase: "20%".into(),
            limit: "128Mi".into(),
            min_increase: "8Mi".into(),
            cooldown_seconds: 300,
        }),
        ..Default::default()
    });
    // Its own PodMonitor too, asked for before prometheus-operator's CRDs exist.
    group.spec.common.monitoring = Some(MonitoringSpec {
        pod_monitor: Some(PodMonitorSpec {
            labels: [("release".to_string(), "e2e".to_string())].into(),
            interval: Some("1s".into()),
            ..Default::default()
        }),
    });
    groups.create(&group).await.unwrap();
    env.wait("the group to be Ready", FORM, || {
        replication_testing::ready_status(&groups, name)
    })
    .await;
    let own_monitor = its_pod_monitor_once_the_crds_exist(&env, &groups, name, &monitors).await;

    // Every target up: 5 exporters, 2 pods of each controller.
    env.wait("every scrape target up", FORM, || async {
        let targets = prometheus.targets().await?;
        let down: Vec<_> = targets.iter().filter(|(_, up, _)| !up).collect();
        let exporters = targets
            .iter()
            .filter(|(job, up, _)| job.starts_with("podmonitor/") && *up)
            .count();
        Ok(
            if down.is_empty() && exporters == 5 && targets.len() == 5 + 8 {
                Ok(targets.len())
            } else {
                Err(format!("{exporters} exporters up; targets {targets:?}"))
            },
        )
    })
    .await;
    // The rules' joins: exporters by topology and role, the operator's series by the
    // object's own namespace, a leader per controller.
    let topology = format!(r#"namespace="{NS}",topology="{name}""#);
    for (expr, want) in [
        (
            format!(r#"count(redis_instance_info{{{topology},role="master"}})"#),
            1.0,
        ),
        (
            format!(r#"count(redis_instance_info{{{topology},role="slave"}})"#),
            1.0,
        ),
        (
            format!(
                r#"count(redis_sentinel_master_status{{namespace="{NS}",master_name="{name}"}})"#
            ),
            3.0,
        ),
        (
            format!(
                r#"valkey_operator_topology_ready{{namespace="{NS}",kind="ValkeyReplication",name="{name}"}}"#
            ),
            1.0,
        ),
        (
            format!(
                r#"valkey_operator_topology_members_ready{{namespace="{NS}",name="{name}",role="sentinel"}}"#
            ),
            3.0,
        ),
        (
            "count(sum by (controller) (valkey_operator_leader) == 1)".into(),
            4.0,
        ),
    ] {
        env.wait(&format!("{expr} = {want}"), FORM, || async {
            Ok(match one_value(&prometheus, &expr).await? {
                Ok(v) if v == want => Ok(()),
                Ok(v) => Err(format!("{v}")),
                Err(e) => Err(e),
            })
        })
        .await;
    }
    assert!(!firing(&prometheus, NOT_READY, name).await.unwrap());
    its_own_pod_monitor_scrapes_it_until_turned_off(
        &mut env,
        &groups,
        name,
        &own_monitor,
        &services,
    )
    .await;
    every_panel_has_data(&env, &prometheus).await;
    print_figures(&prometheus, name).await;

    // The primary frozen: it keeps its pod and stops answering.
    let primary = groups.status(name).await.unwrap().current_primary.unwrap();
    let control = ControlClient::new(env.cluster.control_addr.expect("the node agent runs"));
    let pod = format!("{NS}/{}", statefulset_pod_name(&primary));
    control.freeze(&pod).await.unwrap();
    let frozen = Instant::now();
    env.wait(&format!("{NOT_READY} to fire"), FORM, || async {
        Ok(if firing(&prometheus, NOT_READY, name).await? {
            Ok(())
        } else {
            Err(format!("{:?}", prometheus.alerts().await?))
        })
    })
    .await;
    let fired = frozen.elapsed();
    let others: Vec<String> = prometheus
        .alerts()
        .await
        .unwrap()
        .into_iter()
        .map(|(labels, state)| format!("{} {state}", labels["alertname"]))
        .collect();
    eprintln!("{NOT_READY} fired {fired:?} after the freeze (for: 15s); alerts: {others:?}");

    control.thaw(&pod).await.unwrap();
    let thawed = Instant::now();
    env.wait(&format!("{NOT_READY} to resolve"), FORM, || async {
        let ready = one_value(
            &prometheus,
            &format!(r#"valkey_operator_topology_ready{{namespace="{NS}",name="{name}"}}"#),
        )
        .await?;
        let still = firing(&prometheus, NOT_READY, name).await?;
        Ok(match ready {
            Ok(v) if v == 1.0 && !still => Ok(()),
            other => Err(format!("ready {other:?}, firing {still}")),
        })
    })
    .await;
    eprintln!("{NOT_READY} resolved {:?} after the thaw", thawed.elapsed());

    a_volume_full_at_its_limit_fires_until_the_limit_is_raised(&env, &prometheus).await;
    env.cluster.stop().unwrap();
}

/// prometheus-operator's own CRDs for PodMonitor, ServiceMonitor and PrometheusRule
/// (hack/prometheus-operator-crds.sh).
fn prometheus_operator_crds() -> Vec<DynamicObject> {
    let out = Command::new("bash")
        .arg(repo_root().join("hack/prometheus-operator-crds.sh"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let dir = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
    ["podmonitors", "servicemonitors", "prometheusrules"]
        .iter()
        .flat_map(|plural| {
            let file = dir.join(format!("monitoring.coreos.com_{plural}.yaml"));
            documents(&std::fs::read_to_string(file).unwrap()).unwrap()
        })
        .collect()
}

fn pod_monitors(env: &Installed) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(POD_MONITOR_GROUP, POD_MONITOR_VERSION, POD_MONITOR_KIND);
    let resource = ApiResource::from_gvk_with_plural(&gvk, POD_MONITOR_PLURAL);
    Api::namespaced_with(env.client.clone(), NS, &resource)
}

/// The group's `PodMonitorReady` condition as (status, reason), if it has one.
async fn pod_monitor_ready(groups: &ReplicationApis, name: &str) -> Option<(String, String)> {
    let status = groups.status(name).await.unwrap();
    let found = conditions::find(&status.conditions, types::POD_MONITOR_READY)?;
    Some((found.status.clone(), found.reason.clone()))
}

/// The group asked for its own PodMonitor where prometheus-operator's CRDs are not installed:
/// it is Ready all the same, and the condition and an Event say why there is no monitor.
/// The real CRDs installed (and the monitors we ship admitted by their schemas), the
/// PodMonitor is made at the next look; returned as the API server holds it.
async fn its_pod_monitor_once_the_crds_exist(
    env: &Installed,
    groups: &ReplicationApis,
    name: &str,
    shipped: &[Value],
) -> Value {
    env.wait(
        "PodMonitorReady to say the CRD is missing",
        FORM,
        || async {
            Ok(match pod_monitor_ready(groups, name).await {
                Some((status, reason)) if status == "False" && reason == "CrdMissing" => Ok(()),
                other => Err(format!("{other:?}")),
            })
        },
    )
    .await;
    let told = groups
        .group_events(name, Some("PodMonitorNotApplied"))
        .await
        .unwrap();
    assert!(!told.is_empty(), "no PodMonitorNotApplied Event");

    apply_crds_first(&env.cluster, &env.client, &prometheus_operator_crds())
        .await
        .unwrap();
    let rule = std::fs::read_to_string(
        repo_root().join("deploy/components/monitoring/prometheusrule.yaml"),
    )
    .unwrap();
    let mut ours: Vec<DynamicObject> = shipped
        .iter()
        .map(|m| serde_json::from_value(m.clone()).unwrap())
        .chain(documents(&rule).unwrap())
        .collect();
    for object in &mut ours {
        object.metadata.namespace = Some(OPERATOR_NS.into());
    }
    apply_all(&env.client, &ours)
        .await
        .expect("the real CRDs admit the monitors and the rule we ship");

    let installed = Instant::now();
    env.wait("PodMonitorReady True", FORM, || async {
        Ok(match pod_monitor_ready(groups, name).await {
            Some((status, _)) if status == "True" => Ok(()),
            other => Err(format!("{other:?}")),
        })
    })
    .await;
    eprintln!(
        "the group's PodMonitor made {:?} after the CRDs",
        installed.elapsed()
    );
    let monitor = pod_monitors(env)
        .get(&format!("{name}-exporters"))
        .await
        .unwrap();
    assert_eq!(monitor.labels()["release"], "e2e", "the spec's label");
    let owner = &monitor.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("ValkeyReplication", name)
    );
    serde_json::to_value(monitor).unwrap()
}

/// A Prometheus of its own, given only the PodMonitor topology-controller made, scrapes the
/// group's five exporters, their series labelled with the topology as the rules expect.
/// Turned off, the PodMonitor and its condition are gone.
async fn its_own_pod_monitor_scrapes_it_until_turned_off(
    env: &mut Installed,
    groups: &ReplicationApis,
    name: &str,
    monitor: &Value,
    services: &[Value],
) {
    let kubeconfig = env.cluster.admin_kubeconfig.clone();
    let jobs = scrape_job(monitor, services, &kubeconfig).unwrap();
    let own = Prometheus::start_named(&mut env.cluster, "prometheus-own", jobs, &[], 1).unwrap();
    let topology = format!(r#"namespace="{NS}",topology="{name}""#);
    let primaries = format!(r#"count(redis_instance_info{{{topology},role="master"}})"#);
    env.wait("the group's own PodMonitor to scrape it", FORM, || async {
        let targets = own.targets().await?;
        let up = targets.iter().filter(|(_, up, _)| *up).count();
        let primary = one_value(&own, &primaries).await?;
        Ok(match primary {
            Ok(v) if v == 1.0 && up == 5 && targets.len() == 5 => Ok(()),
            other => Err(format!("{up} of {} targets up; {other:?}", targets.len())),
        })
    })
    .await;

    let off = json!({"spec": {"monitoring": {"podMonitor": {"enabled": false}}}});
    groups.patch(name, off).await.unwrap();
    let monitors = pod_monitors(env);
    env.wait("the PodMonitor and its condition to go", FORM, || async {
        let left = monitors.get_opt(&format!("{name}-exporters")).await?;
        let condition = pod_monitor_ready(groups, name).await;
        Ok(match (left, condition) {
            (None, None) => Ok(()),
            (left, condition) => Err(format!("left: {}; {condition:?}", left.is_some())),
        })
    })
    .await;
}

/// The alert a volume full at its autoResize limit raises.
const VOLUME_FULL: &str = "ValkeyVolumeFullAtLimit";

/// A ValkeyNode whose volume (16Mi) is at its autoResize limit is filled past 90 %: the
/// volume alert fires (the series pvc-resizer reads from the kubelet every 2 s here). Its
/// limit raised, pvc-resizer grows the volume and the alert resolves.
async fn a_volume_full_at_its_limit_fires_until_the_limit_is_raised(
    env: &Installed,
    prometheus: &Prometheus,
) {
    let name = "brimful";
    let nodes: Api<ValkeyNode> = Api::namespaced(env.client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), NS);
    let mut node = valkey_node(
        name,
        WorkloadType::StatefulSet,
        true,
        Some(agent_services::SIZED_STORAGE_CLASS),
    );
    let persistence = node.spec.template.persistence.as_mut().unwrap();
    persistence.size = "16Mi".into();
    persistence.auto_resize = Some(AutoResize {
        used_percent_threshold: 80,
        increase: "100%".into(),
        limit: "16Mi".into(),
        min_increase: "1Mi".into(),
        cooldown_seconds: 0,
    });
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let ip = env
        .wait("brimful to serve", FORM, || async {
            Ok(match ready_node(&nodes, &pods, name, None).await? {
                Some((_, ip)) => Ok(ip),
                None => Err("not ready".to_string()),
            })
        })
        .await;
    let used_share = || async {
        let storage = nodes
            .get_status(name)
            .await?
            .status
            .unwrap_or_default()
            .storage;
        let storage = storage.unwrap_or_default();
        Ok::<_, anyhow::Error>(
            storage
                .used_bytes
                .zip(storage.available_bytes)
                .map(|(u, a)| u as f64 / (u + a) as f64),
        )
    };
    // 256 KiB values until the volume reads past 92 % full.
    let mut written = 0;
    while used_share().await.unwrap().is_none_or(|share| share < 0.92) {
        assert!(
            written < 80,
            "16Mi never read 92 % full: {:?}",
            used_share().await
        );
        for _ in 0..4 {
            assert_eq!(
                set_from_stdin(&ip, &format!("fill{written}"), &vec![b'v'; 256 << 10]),
                "OK"
            );
            written += 1;
        }
        // The next reading of the kubelet's stats (every 2 s) and of the status.
        tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    }
    let full = Instant::now();
    env.wait(&format!("{VOLUME_FULL} to fire"), FORM, || async {
        Ok(
            if firing_about(prometheus, VOLUME_FULL, "claim", &format!("{name}-data")).await? {
                Ok(())
            } else {
                Err(format!("{:?}", prometheus.alerts().await?))
            },
        )
    })
    .await;
    eprintln!(
        "{VOLUME_FULL} fired {:?} after {written} values read past 92 % (for: 15s)",
        full.elapsed()
    );

    let raised = json!({"spec": {"persistence": {"autoResize": {"limit": "64Mi"}}}});
    nodes
        .patch(name, &PatchParams::default(), &Patch::Merge(&raised))
        .await
        .unwrap();
    env.wait(&format!("{VOLUME_FULL} to resolve"), FORM, || async {
        let still = firing_about(prometheus, VOLUME_FULL, "claim", &format!("{name}-data")).await?;
        let share = used_share().await?;
        Ok(match share {
            Some(share) if share < 0.9 && !still => Ok(()),
            other => Err(format!("used {other:?}, firing {still}")),
        })
    })
    .await;
}

/// Whether `alert` is firing with `label` = `value`.
async fn firing_about(
    prometheus: &Prometheus,
    alert: &str,
    label: &str,
    value: &str,
) -> anyhow::Result<bool> {
    Ok(prometheus.alerts().await?.iter().any(|(labels, state)| {
        labels["alertname"] == alert && labels[label] == value && state == "firing"
    }))
}
