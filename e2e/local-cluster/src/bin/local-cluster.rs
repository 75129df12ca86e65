//! `local-cluster up|down|status`: the local Kubernetes behind `just up` / `just down`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use local_cluster::{LocalCluster, Options, operator, operator_pods, process};

/// A real Kubernetes (upstream control plane + our node agent) with real Valkey, on this machine.
#[derive(Parser)]
#[command(name = "local-cluster", version)]
struct Cli {
    /// Where certificates, kubeconfigs, logs, PIDs and volumes of the run live.
    #[arg(long, global = true, env = "LOCAL_CLUSTER_DIR", default_value_os_t = default_run_dir())]
    run_dir: PathBuf,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start the cluster, install the operator and apply a sample; leaves everything running.
    Up {
        /// Kubernetes Nodes the node agent registers.
        #[arg(long, default_value_t = 3)]
        nodes: u32,
        /// Control plane only: no node agent, no operator.
        #[arg(long)]
        no_agent: bool,
        /// kustomize overlay whose CRDs, RBAC and controllers to install.
        #[arg(long, default_value = "deploy/overlays/all")]
        overlay: PathBuf,
        /// Samples to apply after the operator is up (repeatable).
        #[arg(
            long,
            default_values = [
                "deploy/samples/valkeycluster.yaml",
                "deploy/samples/valkeyreplication.yaml"
            ]
        )]
        sample: Vec<PathBuf>,
    },
    /// Stop every process of the run, by PID.
    Down,
    /// List the run's processes and whether each still runs.
    Status,
}

fn default_run_dir() -> PathBuf {
    let cache = std::env::var_os("VALKEY_OPERATOR_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into()))
                .join(".cache/valkey-operator")
        });
    cache.join("run/local")
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("local-cluster: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Cmd::Up {
            nodes,
            no_agent,
            overlay,
            sample,
        } => {
            let mut options = Options::new(&cli.run_dir);
            options.nodes = nodes;
            options.agent = !no_agent;
            eprintln!(
                "local-cluster: starting the control plane in {}",
                cli.run_dir.display()
            );
            let cluster = LocalCluster::start(options).await?;
            if !no_agent {
                eprintln!(
                    "local-cluster: assembling and pushing the operator image (hack/operator-image.sh)"
                );
                let image = operator_pods::push_image(&cluster).await?;
                eprintln!(
                    "local-cluster: installing {} with image {}",
                    overlay.display(),
                    image.reference
                );
                let deployments =
                    operator_pods::install(&cluster, &overlay, &image.reference).await?;
                let client = cluster.client().await?;
                let mut nodes = Vec::new();
                let mut clusters = Vec::new();
                let mut groups = Vec::new();
                for path in &sample {
                    let yaml = std::fs::read_to_string(path)
                        .with_context(|| format!("reading {}", path.display()))?;
                    let mut objects = operator::documents(&yaml)?;
                    for object in &mut objects {
                        object
                            .metadata
                            .namespace
                            .get_or_insert_with(|| "default".into());
                        let name = object.metadata.name.clone().unwrap_or_default();
                        match object.types.as_ref().map(|t| t.kind.as_str()) {
                            Some("ValkeyNode") => nodes.push(name),
                            Some("ValkeyCluster") => clusters.push(name),
                            Some("ValkeyReplication") => groups.push(name),
                            _ => {}
                        }
                    }
                    operator::apply_all(&client, &objects).await?;
                }
                print_summary(
                    &cluster,
                    &image.reference,
                    &deployments,
                    &sample,
                    &Applied {
                        nodes,
                        clusters,
                        groups,
                    },
                );
            } else {
                println!("export KUBECONFIG={}", cluster.admin_kubeconfig.display());
            }
            cluster.detach();
            Ok(())
        }
        Cmd::Down => {
            let stopped = process::stop_all(&cli.run_dir, Duration::from_secs(10))?;
            let left = process::kill_container_leftovers(&cli.run_dir.join("agent"));
            if left > 0 {
                eprintln!(
                    "local-cluster: killed {left} container processes the node agent left running"
                );
            }
            local_cluster::netns::delete_for_run(&cli.run_dir);
            local_cluster::unmount_under(&cli.run_dir);
            if stopped.is_empty() {
                eprintln!(
                    "local-cluster: nothing running in {}",
                    cli.run_dir.display()
                );
            } else {
                eprintln!("local-cluster: stopped {}", stopped.join(", "));
            }
            Ok(())
        }
        Cmd::Status => {
            for record in process::recorded(&cli.run_dir)? {
                let state = if record.is_alive() { "running" } else { "gone" };
                println!("{:<28} pid {:<8} {state}", record.name, record.pid);
            }
            Ok(())
        }
    }
}

/// The names of the samples' objects, by kind.
struct Applied {
    nodes: Vec<String>,
    clusters: Vec<String>,
    groups: Vec<String>,
}

fn print_summary(
    cluster: &LocalCluster,
    image: &str,
    deployments: &[(String, String)],
    samples: &[PathBuf],
    applied: &Applied,
) {
    let names: Vec<&str> = deployments.iter().map(|(_, name)| name.as_str()).collect();
    let run_dir = cluster.layout.run_dir.display();
    println!("The local cluster is up.");
    println!("  export KUBECONFIG={}", cluster.admin_kubeconfig.display());
    println!("  operator image: {image}");
    println!(
        "  controllers (Deployments, 2 replicas each): {}",
        names.join(", ")
    );
    if let Some((namespace, _)) = deployments.first() {
        println!("  kubectl -n {namespace} get deployments,pods,leases");
    }
    for sample in samples {
        println!("  applied {}", sample.display());
    }
    println!("  kubectl get nodes,pods,valkeynodes,valkeyclusters,valkeyreplications -A");
    for node in &applied.nodes {
        println!(
            "  valkey-cli -h \"$(kubectl get vkn {node} -o jsonpath='{{.status.endpoint.clusterIP}}')\" ping"
        );
    }
    for cluster in &applied.clusters {
        println!(
            "  kubectl wait vkc/{cluster} --for=jsonpath='{{.status.phase}}'=Ready --timeout=3m"
        );
        println!(
            "  export REDISCLI_AUTH=\"$(kubectl get secret {cluster}-auth -o jsonpath='{{.data.password}}' | base64 -d)\""
        );
        println!(
            "  valkey-cli -c -h \"$(kubectl get vkn {cluster}-0-0 -o jsonpath='{{.status.endpoint.clusterIP}}')\" set hello world"
        );
    }
    for group in &applied.groups {
        println!(
            "  kubectl wait vkr/{group} --for=jsonpath='{{.status.phase}}'=Ready --timeout=3m"
        );
        println!(
            "  export REDISCLI_AUTH=\"$(kubectl get secret {group}-auth -o jsonpath='{{.data.password}}' | base64 -d)\""
        );
        println!(
            "  valkey-cli -h \"$(kubectl get svc {group} -o jsonpath='{{.spec.clusterIP}}')\" set hello world"
        );
        println!(
            "  REDISCLI_AUTH=\"$(kubectl get secret {group}-sentinel-auth -o jsonpath='{{.data.password}}' | base64 -d)\" valkey-cli -h \"$(kubectl get svc {group}-sentinel -o jsonpath='{{.spec.clusterIP}}')\" -p 26379 sentinel get-primary-addr-by-name {group}"
        );
    }
    println!("  logs: {run_dir}/logs/   stop: just down");
}
