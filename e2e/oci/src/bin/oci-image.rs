//! Build, push and pull OCI images without Docker (test infrastructure).

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use oci_image::{ImageConfig, ImageStore, PullPolicy, RegistryClient, build_layout};

#[derive(Parser)]
#[command(about = "Build, push and pull OCI images without Docker")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build a one-layer OCI image layout from a root filesystem; prints the manifest digest.
    Build {
        #[arg(long)]
        rootfs: PathBuf,
        #[arg(long)]
        out: PathBuf,
        #[arg(long)]
        tag: String,
        #[arg(long)]
        user: Option<String>,
        /// K=V, repeatable.
        #[arg(long)]
        env: Vec<String>,
        /// A JSON array, e.g. '["valkey-server"]'.
        #[arg(long)]
        entrypoint: Option<String>,
        /// A JSON array.
        #[arg(long)]
        cmd: Option<String>,
        #[arg(long)]
        workdir: Option<String>,
        /// K=V, repeatable.
        #[arg(long)]
        label: Vec<String>,
        /// PORT/PROTO, repeatable, e.g. 6379/tcp.
        #[arg(long)]
        expose: Vec<String>,
    },
    /// Push a layout to a registry; prints the manifest digest.
    Push {
        #[arg(long)]
        layout: PathBuf,
        /// e.g. http://127.0.0.1:5000
        #[arg(long)]
        registry: String,
        #[arg(long)]
        repository: String,
        #[arg(long)]
        tag: String,
    },
    /// Pull and unpack an image into a store; prints the rootfs path.
    Pull {
        #[arg(long)]
        registry: String,
        #[arg(long)]
        store: PathBuf,
        image: String,
    },
}

fn json_array(flag: &str, value: Option<String>) -> anyhow::Result<Vec<String>> {
    match value {
        None => Ok(Vec::new()),
        Some(v) => serde_json::from_str(&v)
            .with_context(|| format!("--{flag} must be a JSON array of strings, got {v:?}")),
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    // One line with the cause chain, not a backtrace: callers are scripts that log stderr.
    match run(Cli::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("oci-image: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Build {
            rootfs,
            out,
            tag,
            user,
            env,
            entrypoint,
            cmd,
            workdir,
            label,
            expose,
        } => {
            let mut labels = BTreeMap::new();
            for l in label {
                let Some((k, v)) = l.split_once('=') else {
                    bail!("--label must be K=V, got {l:?}");
                };
                labels.insert(k.to_string(), v.to_string());
            }
            if let Some(e) = env.iter().find(|e| !e.contains('=')) {
                bail!("--env must be K=V, got {e:?}");
            }
            let config = ImageConfig {
                user,
                env,
                entrypoint: json_array("entrypoint", entrypoint)?,
                cmd: json_array("cmd", cmd)?,
                working_dir: workdir,
                labels,
                exposed_ports: expose,
            };
            let built =
                tokio::task::spawn_blocking(move || build_layout(&rootfs, &config, &out, &tag))
                    .await??;
            println!("{}", built.manifest);
        }
        Command::Push {
            layout,
            registry,
            repository,
            tag,
        } => {
            let digest = RegistryClient::new(&registry)
                .push_layout(&layout, &repository, &tag)
                .await?;
            println!("{digest}");
        }
        Command::Pull {
            registry,
            store,
            image,
        } => {
            let pulled = ImageStore::new(store, registry)
                .ensure(&image, PullPolicy::IfNotPresent)
                .await?;
            println!("{}", pulled.rootfs.display());
        }
    }
    Ok(())
}
