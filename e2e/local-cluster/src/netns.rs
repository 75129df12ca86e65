//! The network namespace holding the kubelet API's address.
//!
//! The API server refuses to proxy to loopback addresses, and the node proxy is how
//! `kubectl logs` and /stats/summary reach a kubelet. So each run creates a namespace with
//! one end of a veth pair: 10.250.<slot>.1 stays with the host, 10.250.<slot>.2 lives in
//! the namespace, and the node agent binds its kubelet API sockets there. Nothing else
//! leaves loopback, and nothing is sent anywhere but this run's own namespace.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The namespace of one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeletNetwork {
    pub name: String,
    host_link: String,
    namespace_link: String,
    pub host_ip: Ipv4Addr,
    /// The Nodes' InternalIP.
    pub kubelet_ip: Ipv4Addr,
}

impl KubeletNetwork {
    /// Names and addresses for range slot `slot`.
    pub fn for_slot(slot: u8) -> Self {
        Self {
            name: format!("vko-{slot}"),
            host_link: format!("vko{slot}h"),
            namespace_link: format!("vko{slot}n"),
            host_ip: Ipv4Addr::new(10, 250, slot, 1),
            kubelet_ip: Ipv4Addr::new(10, 250, slot, 2),
        }
    }

    /// Where `ip netns` keeps the namespace (what the node agent opens).
    pub fn path(&self) -> PathBuf {
        Path::new("/var/run/netns").join(&self.name)
    }

    /// The `ip` invocations that create it, in order.
    fn create_commands(&self) -> Vec<Vec<String>> {
        let (ns, host, peer) = (&self.name, &self.host_link, &self.namespace_link);
        let words = |s: &str| s.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
        vec![
            words(&format!("netns add {ns}")),
            words(&format!(
                "link add {host} type veth peer name {peer} netns {ns}"
            )),
            words(&format!("addr add {}/30 dev {host}", self.host_ip)),
            words(&format!("link set {host} up")),
            words(&format!(
                "-n {ns} addr add {}/30 dev {peer}",
                self.kubelet_ip
            )),
            words(&format!("-n {ns} link set {peer} up")),
            words(&format!("-n {ns} link set lo up")),
        ]
    }

    /// Creates the namespace, replacing a stale one of the same slot.
    pub fn create(slot: u8, run_dir: &Path) -> Result<Self> {
        let network = Self::for_slot(slot);
        network.delete();
        for args in network.create_commands() {
            run_ip(&args)?;
        }
        std::fs::write(run_dir.join("netns"), &network.name)?;
        Ok(network)
    }

    /// Deletes the namespace (its veth pair goes with it). Quiet when already gone.
    pub fn delete(&self) {
        let _ = Command::new("ip")
            .args(["netns", "delete", &self.name])
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// Deletes the namespace a run recorded, if any.
pub fn delete_for_run(run_dir: &Path) {
    let record = run_dir.join("netns");
    if let Ok(name) = std::fs::read_to_string(&record) {
        let _ = Command::new("ip")
            .args(["netns", "delete", name.trim()])
            .stderr(std::process::Stdio::null())
            .status();
        let _ = std::fs::remove_file(record);
    }
}

fn run_ip(args: &[String]) -> Result<()> {
    let output = Command::new("ip")
        .args(args)
        .output()
        .context("running ip (iproute2)")?;
    if !output.status.success() {
        bail!(
            "ip {} failed: {} (the local cluster needs root for its network namespace)",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_get_their_own_names_and_subnet() {
        let network = KubeletNetwork::for_slot(7);
        assert_eq!(network.name, "vko-7");
        assert_eq!(network.kubelet_ip, Ipv4Addr::new(10, 250, 7, 2));
        assert_eq!(network.path(), Path::new("/var/run/netns/vko-7"));
        // Interface names must fit IFNAMSIZ (15 characters).
        let widest = KubeletNetwork::for_slot(255);
        assert!(widest.host_link.len() <= 15 && widest.namespace_link.len() <= 15);
    }

    #[test]
    fn the_peer_is_created_inside_the_namespace() {
        let commands = KubeletNetwork::for_slot(1).create_commands();
        let joined: Vec<String> = commands.iter().map(|c| c.join(" ")).collect();
        assert_eq!(joined[0], "netns add vko-1");
        assert_eq!(
            joined[1],
            "link add vko1h type veth peer name vko1n netns vko-1"
        );
        assert!(joined.contains(&"-n vko-1 addr add 10.250.1.2/30 dev vko1n".to_string()));
    }
}
