//! Services the node agent (our kubelet stand-in) runs next to pods in the
//! local e2e cluster:
//!
//! - [`run_service_proxy`]: a userspace kube-proxy for ClusterIP Services,
//!   with simulated network [`Partitions`] between pod IPs;
//! - [`serve_control`] / [`ControlClient`]: an HTTP API for tests to cut and
//!   heal partitions and freeze/thaw pods;
//! - [`run_provisioner`] / [`volume_stats`]: a directory-backed dynamic PV
//!   provisioner with expansion and reclaim, and per-volume usage stats.
//!
//! Wiring in the node agent (each runs until its shutdown future resolves):
//!
//! ```text
//! let partitions = Partitions::new();
//! tokio::try_join!(
//!     run_service_proxy(client.clone(), partitions.clone(), shutdown()),
//!     serve_control(control_listener, partitions, freezer, client.clone(), shutdown()),
//!     run_provisioner(client, run_dir.join("volumes"), shutdown()),
//! )?;
//! // kubelet /stats/summary, per PVC volume:
//! let s = volume_stats(Path::new(&pv_host_path), pvc_capacity_bytes);
//! ```
//!
//! Partitions only affect connections made through Service ClusterIPs;
//! direct pod-IP-to-pod-IP traffic bypasses the proxy and cannot be cut.

mod backends;
mod control;
mod partitions;
mod proxy;
pub mod quantity;
mod stats;
mod storage;

pub use control::{ControlClient, Freezer, serve_control};
pub use partitions::Partitions;
pub use proxy::run_service_proxy;
pub use stats::{VolumeStats, volume_stats};
pub use storage::{MEDIUM, PROVISIONER, SIZED_STORAGE_CLASS, STORAGE_CLASS, run_provisioner};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("watch stream for {0} ended unexpectedly")]
    WatchEnded(&'static str),
    #[error("control API: {0}")]
    Http(String),
    #[error("provisioner: {0}")]
    Provision(String),
}
