//! `just bench-local`: how fast the local cluster starts and runs pods, and what the node
//! agent costs. Prints a Markdown table for docs/benchmarks.md.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client};
use local_cluster::{LocalCluster, Options};
use serde_json::json;

#[tokio::main]
async fn main() -> Result<()> {
    let base = std::env::temp_dir().join(format!("bench-local-{}", std::process::id()));
    let started = Instant::now();
    let mut options = Options::new(base.join("control-plane"));
    options.agent = false;
    let plane = LocalCluster::start(options).await?;
    let control_plane = started.elapsed();
    drop(plane);

    // A fresh run dir: a reused etcd would skip namespace and ServiceAccount creation.
    let run = base.join("with-agent");
    let started = Instant::now();
    let cluster = LocalCluster::start(Options::new(&run)).await?;
    let with_agent = started.elapsed();
    let client = cluster.client().await?;

    let one = start_pods(&cluster, &client, "one", 1).await?;
    let twenty = start_pods(&cluster, &client, "twenty", 20).await?;
    let rss = agent_rss_kib(&run)?;
    drop(cluster);
    let _ = std::fs::remove_dir_all(&base);

    println!("| measurement | value |");
    println!("|---|---|");
    println!(
        "| control plane start, binaries cached (etcd, API server ready, default ServiceAccount) | {:.1} s |",
        control_plane.as_secs_f64()
    );
    println!(
        "| control plane + node agent start (3 Nodes Ready) | {:.1} s |",
        with_agent.as_secs_f64()
    );
    println!(
        "| 1 pod: create to Ready | {:.1} s |",
        one.max.as_secs_f64()
    );
    println!(
        "| 20 pods at once: median / slowest create to Ready | {:.1} s / {:.1} s |",
        twenty.median.as_secs_f64(),
        twenty.max.as_secs_f64()
    );
    println!("| node agent RSS with 21 pods | {} MiB |", rss / 1024);
    Ok(())
}

struct Latency {
    median: Duration,
    max: Duration,
}

/// Creates `count` Valkey pods in namespace `ns` and waits for all to be Ready; latency is
/// each pod's Ready condition time minus its creation time, as the API server recorded them.
async fn start_pods(
    cluster: &LocalCluster,
    client: &Client,
    ns: &str,
    count: usize,
) -> Result<Latency> {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
    namespaces
        .patch(ns, &PatchParams::apply("bench"), &Patch::Apply(&namespace))
        .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    for i in 0..count {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("valkey-{i}"), "labels": {"bench": ns}},
            "spec": {"containers": [{
                "name": "valkey", "image": "valkey/valkey:8.1",
                "ports": [{"containerPort": 6379}],
                "readinessProbe": {"tcpSocket": {"port": 6379}, "periodSeconds": 1},
            }]},
        });
        pods.patch(
            &format!("valkey-{i}"),
            &PatchParams::apply("bench"),
            &Patch::Apply(&pod),
        )
        .await?;
    }
    let ready = cluster
        .wait_for_value(&format!("{count} pods Ready"), || {
            let pods = pods.clone();
            async move {
                let list = pods
                    .list(&ListParams::default().labels(&format!("bench={ns}")))
                    .await?;
                let latencies: Option<Vec<Duration>> =
                    list.items.iter().map(ready_latency).collect();
                Ok(latencies.filter(|l| l.len() == count))
            }
        })
        .await?;
    let mut sorted = ready;
    sorted.sort();
    Ok(Latency {
        median: sorted[sorted.len() / 2],
        max: *sorted.last().context("no pods")?,
    })
}

fn ready_latency(pod: &Pod) -> Option<Duration> {
    let created = pod.metadata.creation_timestamp.as_ref()?.0;
    let ready = pod
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")?
        .last_transition_time
        .as_ref()?
        .0;
    let span = ready.duration_since(created);
    Some(Duration::from_secs_f64(span.as_secs_f64().max(0.0)))
}

fn agent_rss_kib(run: &std::path::Path) -> Result<u64> {
    let agent = local_cluster::process::recorded(run)?
        .into_iter()
        .find(|r| r.name == "node-agent")
        .context("node-agent not recorded")?;
    let status = std::fs::read_to_string(format!("/proc/{}/status", agent.pid))?;
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .context("no VmRSS")?;
    Ok(rss.trim().trim_end_matches("kB").trim().parse()?)
}
