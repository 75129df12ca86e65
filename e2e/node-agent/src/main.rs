//! node-agent: a kubelet + kube-proxy stand-in for the local e2e cluster.
//! Registers one or more Nodes and runs their pods as local processes, each
//! with its own loopback IP and a private mount namespace.

mod container_exec;
mod images;
mod ipam;
mod kubelet_api;
mod kubelet_auth;
mod netns;
mod node;
mod pods;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Parser;
use k8s_openapi::jiff::Timestamp;
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::sync::watch;

#[derive(Debug, Parser)]
#[command(
    name = "node-agent",
    about = "Runs Kubernetes pods of one or more Nodes as local processes"
)]
struct Cli {
    /// Kubeconfig with rights to manage nodes, leases, pods and volumes.
    #[arg(long)]
    kubeconfig: PathBuf,
    /// Directory for pod state, logs, IP allocations and volumes.
    #[arg(long)]
    state_dir: PathBuf,
    /// Number of Nodes this agent registers.
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    #[arg(long, default_value = "local-node")]
    node_prefix: String,
    /// Loopback range pod IPs are taken from.
    #[arg(long, default_value = "127.64.0.0/16")]
    pod_cidr: ipam::Cidr,
    /// Kubelet API port of node 0; node i listens on base + i.
    #[arg(long, default_value_t = 10250)]
    kubelet_port_base: u16,
    /// Address of every Node's kubelet API (its InternalIP). The API server proxies only to
    /// non-loopback addresses, so the launcher passes one inside `--kubelet-netns`.
    #[arg(long, default_value = "127.0.0.1")]
    kubelet_address: IpAddr,
    /// Network namespace (a path such as /var/run/netns/NAME) holding `--kubelet-address`.
    #[arg(long)]
    kubelet_netns: Option<PathBuf>,
    /// Control API (partitions, freeze/thaw); disabled when unset.
    #[arg(long)]
    control_addr: Option<SocketAddr>,
    /// The registry every image is pulled from, whatever registry its name gives (a mirror,
    /// as containerd's hosts.toml would configure), e.g. http://127.0.0.1:5000.
    #[arg(long)]
    registry_mirror: String,
    /// Pulled blobs and unpacked image roots [default: <state-dir>/images]. Kept across runs.
    #[arg(long)]
    image_dir: Option<PathBuf>,
    /// Where the storage provisioner creates PV directories [default: <state-dir>/volumes].
    #[arg(long)]
    volumes_dir: Option<PathBuf>,
    /// The kubelet API's serving certificate (PEM) [default: self-signed].
    #[arg(long, requires = "tls_private_key_file")]
    tls_cert_file: Option<PathBuf>,
    #[arg(long, requires = "tls_cert_file")]
    tls_private_key_file: Option<PathBuf>,
    /// CA that signs client certificates the kubelet API accepts (the API server's kubelet
    /// client); without it only bearer tokens authenticate.
    #[arg(long)]
    client_ca_file: Option<PathBuf>,
}

fn main() {
    // The re-executed helpers must stay single-threaded: dispatch before
    // any runtime or logging thread exists.
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("run-container") => container_exec::run_container_main(&args[2..]),
        Some("exec-in") => container_exec::exec_in_main(&args[2..]),
        _ => {}
    }
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,kube=warn,hyper=warn,rustls=warn".into()),
        )
        .init();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match rt.block_on(run(cli)) {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            tracing::error!(error = %format!("{e:#}"), "node-agent failed");
            std::process::exit(1);
        }
    }
}

async fn run(cli: Cli) -> Result<()> {
    if !nix::unistd::geteuid().is_root() {
        anyhow::bail!("node-agent must run as root (mount namespaces, chroot, setuid)");
    }
    std::fs::create_dir_all(cli.state_dir.join("pods"))
        .with_context(|| format!("creating {}", cli.state_dir.display()))?;
    let state_dir = std::path::absolute(&cli.state_dir)?;
    // Adopt nothing from a previous run: its pods are started afresh.
    pods::runtime::kill_leftovers(&state_dir);

    let kubeconfig = Kubeconfig::read_from(&cli.kubeconfig)
        .with_context(|| format!("reading {}", cli.kubeconfig.display()))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .context("loading kubeconfig")?;
    let api_host = config.cluster_url.host().unwrap_or("127.0.0.1").to_string();
    let api_port = config.cluster_url.port_u16().unwrap_or(443);
    let client = kube::Client::try_from(config).context("building Kubernetes client")?;

    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    tokio::spawn(async move {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        tracing::info!("shutdown requested");
        let _ = shutdown_tx.send(true);
    });
    let shutdown = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|v| *v).await;
    };

    let nodes: Vec<node::NodeConfig> = (0..cli.nodes)
        .map(|i| node::NodeConfig {
            name: format!("{}-{i}", cli.node_prefix),
            index: i,
            address: cli.kubelet_address,
            kubelet_port: cli.kubelet_port_base + i as u16,
        })
        .collect();

    // The API server may still be starting: retry registration for a while.
    for n in &nodes {
        let mut attempt = 0;
        loop {
            match node::register(&client, n).await {
                Ok(_) => break,
                Err(e) if attempt < 30 => {
                    attempt += 1;
                    tracing::warn!(node = %n.name, error = %format!("{e:#}"), "node registration failed, retrying");
                    tokio::time::sleep(Duration::from_secs(2)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    let registry: pods::Registry = Arc::new(RwLock::new(Default::default()));
    let ctx = Arc::new(pods::AgentCtx {
        client: client.clone(),
        state_dir: state_dir.clone(),
        images: oci_image::ImageStore::new(
            cli.image_dir
                .clone()
                .unwrap_or_else(|| state_dir.join("images")),
            cli.registry_mirror.clone(),
        ),
        ipam: Mutex::new(ipam::Ipam::load(cli.pod_cidr, state_dir.join("ipam.json"))?),
        registry: registry.clone(),
        host_ip: Ipv4Addr::LOCALHOST.to_string(),
        api_host,
        api_port,
    });

    let mut tasks = tokio::task::JoinSet::new();
    let start_time = Timestamp::now();
    let authorizer = kubelet_auth::Authorizer::new(client.clone());
    let tls = kubelet_api::TlsFiles {
        cert: cli.tls_cert_file.clone(),
        key: cli.tls_private_key_file.clone(),
        client_ca: cli.client_ca_file.clone(),
    };
    for n in &nodes {
        tasks.spawn(node::heartbeat(
            client.clone(),
            n.clone(),
            shutdown_rx.clone(),
        ));
        let state = kubelet_api::ApiState {
            node_name: n.name.clone(),
            registry: registry.clone(),
            state_dir: state_dir.clone(),
            start_time,
            authorizer: authorizer.clone(),
        };
        let addr = SocketAddr::new(cli.kubelet_address, n.kubelet_port);
        let listener = match &cli.kubelet_netns {
            Some(netns) => tokio::net::TcpListener::from_std(netns::bind_in(netns, addr)?)?,
            None => tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding kubelet API on {addr}"))?,
        };
        let sd = shutdown(shutdown_rx.clone());
        let tls = tls.clone();
        tasks.spawn(async move {
            if let Err(e) = kubelet_api::serve(listener, state, &tls, sd).await {
                tracing::error!(error = %format!("{e:#}"), "kubelet API stopped");
            }
        });
    }

    let partitions = agent_services::Partitions::new();
    {
        let (client, partitions, sd) = (
            client.clone(),
            partitions.clone(),
            shutdown(shutdown_rx.clone()),
        );
        tasks.spawn(async move {
            if let Err(e) = agent_services::run_service_proxy(client, partitions, sd).await {
                tracing::error!(error = %e, "service proxy stopped");
            }
        });
    }
    {
        let volumes_dir = cli
            .volumes_dir
            .clone()
            .unwrap_or_else(|| state_dir.join("volumes"));
        let (client, sd) = (client.clone(), shutdown(shutdown_rx.clone()));
        tasks.spawn(async move {
            if let Err(e) = agent_services::run_provisioner(client, volumes_dir, sd).await {
                tracing::error!(error = %e, "storage provisioner stopped");
            }
        });
    }
    if let Some(addr) = cli.control_addr {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding control API on {addr}"))?;
        let freezer: Arc<dyn agent_services::Freezer> = Arc::new(Freezer(pods::ProcessFreezer {
            registry: registry.clone(),
        }));
        let (client, partitions, sd) = (
            client.clone(),
            partitions.clone(),
            shutdown(shutdown_rx.clone()),
        );
        tracing::info!(%addr, "control API listening");
        tasks.spawn(async move {
            if let Err(e) =
                agent_services::serve_control(listener, partitions, freezer, client, sd).await
            {
                tracing::error!(error = %e, "control API stopped");
            }
        });
    }

    tracing::info!(
        nodes = nodes.len(),
        state_dir = %state_dir.display(),
        pod_cidr = ?cli.pod_cidr,
        "node agent running"
    );
    pods::run_manager(
        ctx,
        nodes.iter().map(|n| n.name.clone()).collect(),
        shutdown_rx,
    )
    .await;
    // Everything else watches the same shutdown signal.
    let _ = tokio::time::timeout(Duration::from_secs(10), async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    tracing::info!("node agent stopped");
    Ok(())
}

struct Freezer(pods::ProcessFreezer);

impl agent_services::Freezer for Freezer {
    fn freeze(&self, namespace: &str, pod: &str) -> Result<(), String> {
        self.0.freeze(namespace, pod)
    }

    fn thaw(&self, namespace: &str, pod: &str) -> Result<(), String> {
        self.0.thaw(namespace, pod)
    }
}
