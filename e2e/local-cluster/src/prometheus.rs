//! A real Prometheus (Debian's build, `e2e/images/prometheus.sh`) scraping the local
//! cluster. prometheus-operator does not run here, so its monitor objects are translated
//! into the scrape jobs it would generate ([`scrape_job`]): Kubernetes service discovery
//! against the local API server, the monitor's selector, port and relabelings.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::operator::http_get;
use crate::{LocalCluster, run_script};

/// A Prometheus process of the run (stopped with the local cluster).
pub struct Prometheus {
    /// `127.0.0.1:port` of its HTTP API.
    pub addr: String,
}

/// The directory holding `prometheus` and `promtool`.
pub fn binaries() -> Result<PathBuf> {
    let out = run_script("e2e/images/prometheus.sh", &[], &[])?;
    Ok(PathBuf::from(out.trim()))
}

impl Prometheus {
    /// Starts Prometheus with `jobs` (scrape and evaluate every `interval_seconds`) and the
    /// rule files `rules`, its data under the run directory.
    pub fn start(
        cluster: &mut LocalCluster,
        jobs: Vec<Value>,
        rules: &[PathBuf],
        interval_seconds: u32,
    ) -> Result<Self> {
        Self::start_named(cluster, "prometheus", jobs, rules, interval_seconds)
    }

    /// As [`Prometheus::start`], one of several: `name` is its directory and process.
    pub fn start_named(
        cluster: &mut LocalCluster,
        name: &str,
        jobs: Vec<Value>,
        rules: &[PathBuf],
        interval_seconds: u32,
    ) -> Result<Self> {
        let dir = cluster.layout.run_dir.join(name);
        std::fs::create_dir_all(dir.join("data"))?;
        let interval = format!("{interval_seconds}s");
        let config = json!({
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "rule_files": rules,
            "scrape_configs": jobs,
        });
        // JSON is YAML.
        let config_file = dir.join("prometheus.yml");
        std::fs::write(&config_file, serde_json::to_vec_pretty(&config)?)?;
        let port = cluster.controller_port()?;
        let addr = format!("127.0.0.1:{port}");
        let binary = binaries()?.join("prometheus");
        cluster.spawn_recorded(
            name,
            Command::new(binary)
                .arg(format!("--config.file={}", config_file.display()))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    dir.join("data").display()
                ))
                .arg(format!("--web.listen-address={addr}"))
                .arg("--log.level=warn"),
        )?;
        Ok(Self { addr })
    }

    /// `GET /api/v1/<path>`'s `data`, or why there is none.
    async fn api(&self, path: &str) -> Result<Value> {
        let body = http_get(&self.addr, &format!("/api/v1/{path}"))
            .await
            .with_context(|| format!("Prometheus at {} did not answer {path}", self.addr))?;
        let answer: Value = serde_json::from_str(&body)?;
        if answer["status"] != "success" {
            bail!("Prometheus refused {path}: {body}");
        }
        Ok(answer["data"].clone())
    }

    /// An instant query: each series' labels and value.
    pub async fn query(&self, expr: &str) -> Result<Vec<(Value, f64)>> {
        let data = self.api(&format!("query?query={}", encode(expr))).await?;
        let series = data["result"].as_array().cloned().unwrap_or_default();
        series
            .into_iter()
            .map(|s| {
                let value = s["value"][1]
                    .as_str()
                    .context("a sample without a value")?
                    .parse()?;
                Ok((s["metric"].clone(), value))
            })
            .collect()
    }

    /// The alerts as Prometheus holds them: each one's labels and state (pending, firing).
    pub async fn alerts(&self) -> Result<Vec<(Value, String)>> {
        let data = self.api("alerts").await?;
        Ok(data["alerts"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .map(|a| {
                (
                    a["labels"].clone(),
                    a["state"].as_str().unwrap_or("").into(),
                )
            })
            .collect())
    }

    /// The scrape targets by job: how many are up, and the last error of any that is not.
    pub async fn targets(&self) -> Result<Vec<(String, bool, String)>> {
        let data = self.api("targets?state=active").await?;
        Ok(data["activeTargets"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .map(|t| {
                (
                    t["labels"]["job"].as_str().unwrap_or("").to_string(),
                    t["health"] == "up",
                    t["lastError"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect())
    }
}

/// Percent-encodes a query parameter.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A Kubernetes label name as Prometheus's discovery spells it in meta labels.
fn meta_name(label: &str) -> String {
    label
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// The scrape jobs prometheus-operator generates for a PodMonitor or ServiceMonitor (one
/// per endpoint), discovering pods through `kubeconfig`: the monitor's namespaces, its
/// selector's `matchLabels`, the endpoint's port (by name), path, `honorLabels` and
/// relabelings, then `namespace`, `pod` (and `service`) as prometheus-operator adds them.
///
/// The local cluster has no EndpointSlices (they refuse its loopback pod addresses), so a
/// ServiceMonitor's Services, chosen from `services` by its selector, are followed to the
/// pods they select and the container port their port targets: the same endpoints.
pub fn scrape_job(monitor: &Value, services: &[Value], kubeconfig: &Path) -> Result<Vec<Value>> {
    let kind = monitor["kind"].as_str().unwrap_or_default();
    let name = monitor["metadata"]["name"].as_str().unwrap_or_default();
    let own_namespace = monitor["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default();
    let selector = &monitor["spec"]["namespaceSelector"];
    let namespaces: Option<Vec<Value>> = (selector["any"] != true).then(|| {
        selector["matchNames"]
            .as_array()
            .cloned()
            .unwrap_or_else(|| vec![json!(own_namespace)])
    });
    let wanted = labels_of(&monitor["spec"]["selector"]["matchLabels"]);
    // What each endpoint scrapes: (namespaces, pod labels, container port name, service).
    let targets: Vec<Target> = match kind {
        "PodMonitor" => vec![Target {
            namespaces: namespaces.clone(),
            pod_labels: wanted,
            port: None,
            service: None,
        }],
        "ServiceMonitor" => services
            .iter()
            .filter(|s| {
                let namespace = s["metadata"]["namespace"].clone();
                let labels = labels_of(&s["metadata"]["labels"]);
                namespaces.as_ref().is_none_or(|n| n.contains(&namespace))
                    && wanted.iter().all(|w| labels.contains(w))
            })
            .map(|s| Target {
                namespaces: Some(vec![s["metadata"]["namespace"].clone()]),
                pod_labels: labels_of(&s["spec"]["selector"]),
                port: Some(s["spec"]["ports"].clone()),
                service: s["metadata"]["name"].as_str().map(String::from),
            })
            .collect(),
        other => bail!("not a monitor: {other:?}"),
    };
    let endpoints_key = if kind == "PodMonitor" {
        "podMetricsEndpoints"
    } else {
        "endpoints"
    };
    let endpoints = monitor["spec"][endpoints_key]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut jobs = Vec::new();
    for (index, endpoint) in endpoints.iter().enumerate() {
        let port = endpoint["port"]
            .as_str()
            .context("a monitor endpoint without a port name")?;
        for (t, target) in targets.iter().enumerate() {
            let container_port = match &target.port {
                None => port.to_string(),
                Some(ports) => target_port(ports, port)?,
            };
            let mut discovery = json!({"role": "pod", "kubeconfig_file": kubeconfig});
            if let Some(names) = &target.namespaces {
                discovery["namespaces"] = json!({ "names": names });
            }
            let mut relabel: Vec<Value> = target
                .pod_labels
                .iter()
                .map(|(key, value)| {
                    json!({
                        "action": "keep",
                        "source_labels": [format!("__meta_kubernetes_pod_label_{}", meta_name(key))],
                        "regex": value,
                    })
                })
                .collect();
            relabel.push(json!({"action": "keep", "regex": container_port,
                                "source_labels": ["__meta_kubernetes_pod_container_port_name"]}));
            for (target, source) in [
                ("namespace", "__meta_kubernetes_namespace"),
                ("pod", "__meta_kubernetes_pod_name"),
            ] {
                relabel.push(json!({"source_labels": [source], "target_label": target}));
            }
            if let Some(service) = &target.service {
                relabel.push(json!({"target_label": "service", "replacement": service}));
            }
            for r in endpoint["relabelings"]
                .as_array()
                .cloned()
                .unwrap_or_default()
            {
                let mut rule = json!({
                    "source_labels": r["sourceLabels"],
                    "target_label": r["targetLabel"],
                });
                for key in ["separator", "regex", "replacement", "action"] {
                    if !r[key].is_null() {
                        rule[key] = r[key].clone();
                    }
                }
                relabel.push(rule);
            }
            jobs.push(json!({
                "job_name": format!("{}/{own_namespace}/{name}/{index}/{t}", kind.to_lowercase()),
                "honor_labels": endpoint["honorLabels"] == true,
                "metrics_path": endpoint["path"].as_str().unwrap_or("/metrics"),
                "kubernetes_sd_configs": [discovery],
                "relabel_configs": relabel,
            }));
        }
    }
    Ok(jobs)
}

/// Where one monitor endpoint's targets are.
struct Target {
    /// `None`: every namespace.
    namespaces: Option<Vec<Value>>,
    pod_labels: Vec<(String, String)>,
    /// A Service's ports, to find the container port its named port targets.
    port: Option<Value>,
    service: Option<String>,
}

fn labels_of(map: &Value) -> Vec<(String, String)> {
    map.as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
        .collect()
}

/// The container port name a Service's port `name` targets.
fn target_port(ports: &Value, name: &str) -> Result<String> {
    let port = ports
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == name)
        .with_context(|| format!("the Service has no port {name:?}"))?;
    port["targetPort"]
        .as_str()
        .map(String::from)
        .with_context(|| format!("port {name:?} targets no named container port"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_monitor_becomes_a_pod_job_with_its_selector_port_and_relabelings() {
        let monitor = object(
            r#"{"kind": "PodMonitor", "metadata": {"name": "valkey-exporters", "namespace": "ops"},
                "spec": {"namespaceSelector": {"any": true},
                         "selector": {"matchLabels": {"app.kubernetes.io/name": "valkey"}},
                         "podMetricsEndpoints": [{"port": "metrics", "relabelings": [
                             {"sourceLabels": ["a", "b"], "separator": "", "targetLabel": "topology"}]}]}}"#,
        );
        let jobs = scrape_job(&monitor, &[], Path::new("/k")).unwrap();
        assert_eq!(jobs.len(), 1);
        let job = &jobs[0];
        assert_eq!(job["job_name"], "podmonitor/ops/valkey-exporters/0/0");
        assert_eq!(job["honor_labels"], false);
        assert_eq!(
            job["kubernetes_sd_configs"],
            json!([{"role": "pod", "kubeconfig_file": "/k"}])
        );
        let relabel = job["relabel_configs"].as_array().unwrap();
        assert_eq!(
            relabel[0],
            json!({"action": "keep", "regex": "valkey",
                   "source_labels": ["__meta_kubernetes_pod_label_app_kubernetes_io_name"]})
        );
        assert_eq!(
            relabel[1],
            json!({"action": "keep", "regex": "metrics",
                   "source_labels": ["__meta_kubernetes_pod_container_port_name"]})
        );
        assert_eq!(
            relabel.last().unwrap(),
            &json!({"source_labels": ["a", "b"], "separator": "", "target_label": "topology"})
        );
    }

    #[test]
    fn a_service_monitor_scrapes_the_pods_of_its_services_port() {
        let monitor = object(
            r#"{"kind": "ServiceMonitor", "metadata": {"name": "tc", "namespace": "ops"},
                "spec": {"selector": {"matchLabels": {"app.kubernetes.io/component": "tc"}},
                         "endpoints": [{"port": "http", "path": "/metrics", "honorLabels": true}]}}"#,
        );
        let service = |name: &str, namespace: &str, component: &str| {
            object(&format!(
                r#"{{"metadata": {{"name": "{name}", "namespace": "{namespace}",
                                  "labels": {{"app.kubernetes.io/component": "{component}"}}}},
                    "spec": {{"selector": {{"app": "{component}"}},
                              "ports": [{{"name": "http", "port": 8080, "targetPort": "web"}}]}}}}"#
            ))
        };
        let services = [
            service("tc-metrics", "ops", "tc"),
            service("other", "ops", "nc"),
            service("tc-metrics", "elsewhere", "tc"),
        ];
        let jobs = scrape_job(&monitor, &services, Path::new("/k")).unwrap();
        assert_eq!(
            jobs.len(),
            1,
            "only the matching Service in the monitor's namespace"
        );
        let job = &jobs[0];
        assert_eq!(job["honor_labels"], true);
        assert_eq!(
            job["kubernetes_sd_configs"][0]["namespaces"],
            json!({"names": ["ops"]})
        );
        let relabel = job["relabel_configs"].as_array().unwrap();
        assert_eq!(
            relabel[0],
            json!({"action": "keep", "regex": "tc",
                   "source_labels": ["__meta_kubernetes_pod_label_app"]})
        );
        assert_eq!(
            relabel[1]["regex"], "web",
            "the port the Service's http targets"
        );
        assert!(
            relabel
                .iter()
                .any(|r| r == &json!({"target_label": "service", "replacement": "tc-metrics"}))
        );
    }

    #[test]
    fn queries_are_percent_encoded() {
        assert_eq!(encode(r#"up{job="a b"}"#), "up%7Bjob%3D%22a%20b%22%7D");
    }

    fn object(json_text: &str) -> Value {
        serde_json::from_str(json_text).unwrap()
    }
}
