//! Loopback address ranges per run, so two runs (a `just up` and a test, say) never listen
//! on each other's pod or Service addresses. Run k gets pods in 127.(64+k).0.0/16,
//! Services in 127.(100+k).0.0/16 and the loopback ports 20000+32k .. 20000+32k+31.
//! A claim is a file naming the run dir, locked while the claiming process lives and
//! held afterwards as long as a process of that run is alive.
//!
//! The ports are fixed per slot and below the kernel's ephemeral range: a port found by
//! binding port 0 and handed to a server later can meanwhile become the source port of
//! any outgoing connection, and the server then fails with "address already in use".

use std::fs::File;
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// How many runs can coexist.
pub const SLOTS: u8 = 32;

/// The first loopback port of slot 0.
const FIRST_PORT: u16 = 20000;
/// Loopback ports per slot.
pub const PORTS_PER_SLOT: u16 = 32;

/// The loopback ports of a run, by purpose.
pub mod port {
    pub const ETCD_CLIENT: u16 = 0;
    pub const ETCD_PEER: u16 = 1;
    pub const API_SERVER: u16 = 2;
    pub const AGENT_CONTROL: u16 = 3;
    /// Controllers started as local processes take ports from here to the end of the block.
    pub const FIRST_CONTROLLER: u16 = 8;
}

/// The address ranges of one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ranges {
    pub slot: u8,
    pub pod_cidr: String,
    pub service_cidr: String,
    /// First of this run's [`PORTS_PER_SLOT`] loopback ports.
    pub first_port: u16,
}

impl Ranges {
    pub fn for_slot(slot: u8) -> Self {
        Self {
            slot,
            pod_cidr: format!("127.{}.0.0/16", 64 + slot),
            service_cidr: format!("127.{}.0.0/16", 100 + slot),
            first_port: FIRST_PORT + u16::from(slot) * PORTS_PER_SLOT,
        }
    }

    /// The port at `offset` (see [`port`]) of this run's block.
    pub fn port(&self, offset: u16) -> u16 {
        assert!(
            offset < PORTS_PER_SLOT,
            "port offset {offset} out of the block"
        );
        self.first_port + offset
    }

    /// The next port for a controller run as a local process after `previous` (None: the
    /// first), cycling through the block's controller ports and skipping any in use, so a
    /// restarted controller never waits for its predecessor's port.
    pub fn controller_port(&self, previous: Option<u16>) -> Result<u16> {
        let span = PORTS_PER_SLOT - port::FIRST_CONTROLLER;
        let start = previous.map_or(0, |p| p + 1 - self.port(port::FIRST_CONTROLLER));
        (0..span)
            .map(|i| self.port(port::FIRST_CONTROLLER + (start + i) % span))
            .find(|&p| bindable(p))
            .with_context(|| format!("all controller ports of slot {} are in use", self.slot))
    }
}

fn bindable(port: u16) -> bool {
    TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port)).is_ok()
}

/// Fails, naming the kernel setting, when the slots' ports reach into the ephemeral range.
fn check_below_ephemeral_range() -> Result<()> {
    let path = "/proc/sys/net/ipv4/ip_local_port_range";
    let range = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
    let low: u32 = range
        .split_whitespace()
        .next()
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("{path} is {range:?}"))?;
    let last = u32::from(FIRST_PORT) + u32::from(SLOTS) * u32::from(PORTS_PER_SLOT);
    if last > low {
        bail!(
            "the local cluster uses loopback ports {FIRST_PORT}-{}, but {path} starts the \
             ephemeral range at {low}; raise its lower bound above {}",
            last - 1,
            last - 1
        );
    }
    Ok(())
}

/// A claimed slot: its ranges and the lock that keeps other processes off it while the
/// run's own processes may not have started yet.
#[derive(Debug)]
pub struct Claim {
    pub ranges: Ranges,
    _lock: File,
}

fn claims_dir() -> PathBuf {
    std::env::temp_dir().join("valkey-operator-local-cluster")
}

/// Claims a free slot for `run_dir` (the one it already holds, if any). The claim stays
/// locked until the returned [`Claim`] is dropped.
pub fn claim(run_dir: &Path) -> Result<Claim> {
    check_below_ephemeral_range()?;
    let dir = claims_dir();
    std::fs::create_dir_all(&dir)?;
    let run_dir = std::fs::canonicalize(run_dir)?;
    for slot in 0..SLOTS {
        let path = dir.join(format!("slot-{slot}"));
        let lock = File::options()
            .create(true)
            .append(true)
            .open(dir.join(format!("slot-{slot}.lock")))?;
        // Held by a process whose run may not have started anything yet.
        if lock.try_lock().is_err() {
            continue;
        }
        match std::fs::read_to_string(&path) {
            Ok(owner) if Path::new(owner.trim()) == run_dir => {}
            Ok(owner) if run_is_alive(Path::new(owner.trim())) => continue,
            _ => std::fs::write(&path, run_dir.to_string_lossy().as_bytes())?,
        }
        return Ok(Claim {
            ranges: Ranges::for_slot(slot),
            _lock: lock,
        });
    }
    bail!("all {SLOTS} local-cluster address ranges are in use; stop a run (local-cluster down)")
}

fn run_is_alive(run_dir: &Path) -> bool {
    crate::process::recorded(run_dir).is_ok_and(|records| records.iter().any(|r| r.is_alive()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_map_to_disjoint_loopback_ranges() {
        let first = Ranges::for_slot(0);
        assert_eq!(first.pod_cidr, "127.64.0.0/16");
        assert_eq!(first.service_cidr, "127.100.0.0/16");
        let last = Ranges::for_slot(SLOTS - 1);
        // The last pod range stays below the first Service range.
        assert_eq!(last.pod_cidr, "127.95.0.0/16");
        assert_eq!(last.service_cidr, "127.131.0.0/16");
        assert_eq!(first.port(port::ETCD_CLIENT), 20000);
        assert_eq!(Ranges::for_slot(1).port(port::ETCD_CLIENT), 20032);
        assert_eq!(last.port(PORTS_PER_SLOT - 1), 21023);
    }

    #[test]
    fn controller_ports_cycle_through_the_block_and_skip_ports_in_use() {
        // A slot far from any a test run claims, so its ports are free here.
        let ranges = Ranges::for_slot(SLOTS - 1);
        let first = ranges.controller_port(None).unwrap();
        assert_eq!(first, ranges.port(port::FIRST_CONTROLLER));
        let _held = TcpListener::bind(("127.0.0.1", first + 1)).unwrap();
        assert_eq!(ranges.controller_port(Some(first)).unwrap(), first + 2);
        let end = ranges.port(PORTS_PER_SLOT - 1);
        assert_eq!(ranges.controller_port(Some(end)).unwrap(), first);
    }

    #[test]
    fn a_run_keeps_its_slot_and_an_idle_slot_is_reused() {
        let run = tempfile::tempdir().unwrap();
        let first = claim(run.path()).unwrap().ranges;
        assert_eq!(claim(run.path()).unwrap().ranges, first);
        // No process of `run` is alive and its claim is dropped, so another run may take
        // its slot.
        let other = tempfile::tempdir().unwrap();
        assert!(claim(other.path()).unwrap().ranges.slot <= first.slot);
    }

    #[test]
    fn a_held_claim_keeps_other_runs_off_its_slot() {
        let run = tempfile::tempdir().unwrap();
        let held = claim(run.path()).unwrap();
        // `run` has started no process yet, but its claim is still held.
        let other = tempfile::tempdir().unwrap();
        assert_ne!(claim(other.path()).unwrap().ranges.slot, held.ranges.slot);
    }
}
