//! Leader election on a coordination.k8s.io Lease (kube-lease-manager).
//!
//! Policy: a replica runs its controller only while it holds the Lease. If it loses the
//! Lease, or cannot confirm a renewal, the process exits non-zero and Kubernetes restarts
//! it as a fresh standby. Stopping a running controller cleanly and rejoining the election
//! in-process would have to guarantee that no reconcile of the old term is still writing;
//! a restart guarantees that trivially.

use std::hash::{BuildHasher, RandomState};
use std::time::Duration;

use kube::{Client, Config};
use kube_lease_manager::{LeaseCreateMode, LeaseManager, LeaseManagerError, LeaseParams};

use crate::describe_kube_error;

/// How long a Lease stays valid after the last renewal.
const LEASE_DURATION_SECS: u64 = 20;
/// The holder renews this long before expiry, i.e. every 20 - 15 = 5 seconds. The large
/// margin leaves room for a slow renewal (bounded by the timeouts below) plus clock skew
/// before another replica may take over.
const LEASE_GRACE_SECS: u64 = 15;
/// Per-request bounds for the Lease client: a renewal must fail, not hang, well within
/// the grace period, or two replicas could both believe they lead.
const LEASE_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const LEASE_IO_TIMEOUT: Duration = Duration::from_secs(3);
// LeaseParams::new panics unless grace < duration. And a failing renewal (at worst connect
// + write + read timeouts) must end, with 5s to spare for clock skew, before the Lease can
// expire, i.e. within the grace period.
const _: () = assert!(LEASE_GRACE_SECS < LEASE_DURATION_SECS);
const _: () = assert!(
    LEASE_CONNECT_TIMEOUT.as_secs() + 2 * LEASE_IO_TIMEOUT.as_secs() + 5 <= LEASE_GRACE_SECS
);
/// Pause between attempts while campaigning after an API error.
const RETRY_DELAY: Duration = Duration::from_secs(2);

/// Why leader election failed or stopped.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error("cannot build the Kubernetes client for leader election: {}", describe_kube_error(.0))]
    Client(kube::Error),
    #[error(
        "cannot use Lease {lease} for leader election: {} (check that the service account may get, create and patch coordination.k8s.io leases there)",
        describe_lease_error(.cause)
    )]
    Setup {
        lease: String,
        cause: LeaseManagerError,
    },
    #[error(
        "lost leadership of Lease {lease} to another replica; exiting so that only one replica reconciles"
    )]
    Lost { lease: String },
    #[error("cannot renew Lease {lease}: {}; exiting so that only one replica reconciles", describe_lease_error(.cause))]
    RenewFailed {
        lease: String,
        cause: LeaseManagerError,
    },
}

fn describe_lease_error(error: &LeaseManagerError) -> String {
    match error {
        LeaseManagerError::KubeError(kube) => describe_kube_error(kube),
        other => other.to_string(),
    }
}

/// One replica's participation in the election for one Lease.
pub(crate) struct LeaderElection {
    manager: LeaseManager,
    lease: String,
    identity: String,
}

impl LeaderElection {
    /// Prepares the election, creating the Lease if needed.
    ///
    /// Takes the client *config* because it builds its own client with short timeouts
    /// and without kube's retry-on-503 (which may wait minutes): the controller's client
    /// must keep long-lived watches, the Lease client must fail fast.
    pub(crate) async fn new(
        config: &Config,
        namespace: &str,
        name: &str,
        identity: String,
    ) -> Result<Self, LeaderError> {
        let client = Client::try_from(lease_client_config(config)).map_err(LeaderError::Client)?;
        let lease = format!("{namespace}/{name}");
        let params = LeaseParams::new(identity.clone(), LEASE_DURATION_SECS, LEASE_GRACE_SECS);
        let manager =
            LeaseManager::new(client, name, namespace, params, LeaseCreateMode::AutoCreate)
                .await
                .map_err(|cause| LeaderError::Setup {
                    lease: lease.clone(),
                    cause,
                })?;
        Ok(Self {
            manager,
            lease,
            identity,
        })
    }

    pub(crate) fn lease(&self) -> &str {
        &self.lease
    }

    pub(crate) fn identity(&self) -> &str {
        &self.identity
    }

    /// Waits until this replica holds the Lease. API errors are retried: while we do not
    /// lead, nothing depends on them.
    pub(crate) async fn acquire(&self) {
        loop {
            match self.manager.changed().await {
                Ok(true) => return,
                Ok(false) => {}
                Err(error) => {
                    tracing::warn!(lease = %self.lease, error = %describe_lease_error(&error), "leader election attempt failed; retrying");
                    tokio::time::sleep(RETRY_DELAY).await;
                }
            }
        }
    }

    /// Keeps renewing the Lease; resolves only when leadership is lost or a renewal fails.
    ///
    /// A failed renewal counts as lost: we can no longer prove we hold the Lease, and two
    /// leaders are worse than one restart.
    pub(crate) async fn hold(&self) -> LeaderError {
        loop {
            match self.manager.changed().await {
                Ok(true) => {}
                Ok(false) => {
                    return LeaderError::Lost {
                        lease: self.lease.clone(),
                    };
                }
                Err(cause) => {
                    return LeaderError::RenewFailed {
                        lease: self.lease.clone(),
                        cause,
                    };
                }
            }
        }
    }

    /// Gives the Lease up on a clean exit so a standby does not wait for it to expire.
    /// Best effort: if it fails, the Lease simply expires.
    pub(crate) async fn release(&self) {
        match tokio::time::timeout(Duration::from_secs(5), self.manager.release()).await {
            Ok(Ok(())) => tracing::info!(lease = %self.lease, "released leadership"),
            Ok(Err(error)) => {
                tracing::warn!(lease = %self.lease, error = %describe_lease_error(&error), "cannot release Lease; it will expire")
            }
            Err(_) => {
                tracing::warn!(lease = %self.lease, "releasing Lease timed out; it will expire")
            }
        }
    }
}

fn lease_client_config(config: &Config) -> Config {
    let mut config = config.clone();
    config.connect_timeout = Some(LEASE_CONNECT_TIMEOUT);
    config.read_timeout = Some(LEASE_IO_TIMEOUT);
    config.write_timeout = Some(LEASE_IO_TIMEOUT);
    // Count the read timeout from the request, not from when a pooled connection went idle.
    config.reset_reader_on_write = true;
    config.default_retry = false;
    config
}

/// The Lease holder identity: the pod name, else `<hostname>-<random suffix>`.
///
/// A pod name is unique among live pods and stays the same when the container restarts, so
/// a restarted controller finds the Lease held under its own name and takes it back at once
/// instead of waiting for its dead predecessor's Lease to expire (both are this pod, and the
/// predecessor is gone). Without a pod name (a process run by hand) the host name is not
/// unique, so a random suffix makes each process its own holder.
pub(crate) fn holder_identity(pod_name: Option<&str>, hostname: Option<&str>) -> String {
    if let Some(pod) = pod_name.map(str::trim).filter(|s| !s.is_empty()) {
        return pod.to_string();
    }
    let base = hostname
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .unwrap_or("valkey-operator");
    // RandomState is seeded from the OS per process: a dependency-free random suffix.
    let suffix = RandomState::new().hash_one(std::process::id());
    format!("{base}-{:08x}", suffix as u32)
}

/// The host name as the kernel reports it (the pod name inside Kubernetes).
pub(crate) fn hostname() -> Option<String> {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_is_the_pod_name_so_a_restart_keeps_it() {
        let a = holder_identity(Some("node-controller-7d9f-abcde"), Some("host"));
        let b = holder_identity(Some("node-controller-7d9f-abcde"), Some("host"));
        assert_eq!(a, "node-controller-7d9f-abcde");
        assert_eq!(a, b, "a restarted container takes its pod's Lease back");
    }

    #[test]
    fn without_a_pod_name_each_process_gets_a_unique_identity() {
        let a = holder_identity(None, Some("laptop"));
        assert!(a.starts_with("laptop-"), "{a}");
        assert_eq!(a.len(), "laptop-".len() + 8, "{a}");
        assert_ne!(a, holder_identity(None, Some("laptop")));
        assert!(holder_identity(Some(" "), Some("laptop")).starts_with("laptop-"));
        assert!(holder_identity(None, None).starts_with("valkey-operator-"));
    }

    #[test]
    fn lease_client_fails_fast_and_does_not_retry() {
        let base = Config::new("https://127.0.0.1:6443".parse().unwrap());
        let lease = lease_client_config(&base);
        assert_eq!(lease.read_timeout, Some(LEASE_IO_TIMEOUT));
        assert_eq!(lease.connect_timeout, Some(LEASE_CONNECT_TIMEOUT));
        assert!(!lease.default_retry);
        assert!(
            base.default_retry,
            "the controller's own config is untouched"
        );
    }
}
