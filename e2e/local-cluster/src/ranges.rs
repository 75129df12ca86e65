//! Loopback address ranges per run, so two runs (a `just up` and a test, say) never listen
//! on each other's pod or Service addresses. Run k gets pods in 127.(64+k).0.0/16 and
//! Services in 127.(100+k).0.0/16; a claim is a file naming the run dir, free again once
//! no process of that run is alive.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};

/// How many runs can coexist.
pub const SLOTS: u8 = 32;

/// The address ranges of one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ranges {
    pub slot: u8,
    pub pod_cidr: String,
    pub service_cidr: String,
}

impl Ranges {
    pub fn for_slot(slot: u8) -> Self {
        Self {
            slot,
            pod_cidr: format!("127.{}.0.0/16", 64 + slot),
            service_cidr: format!("127.{}.0.0/16", 100 + slot),
        }
    }
}

fn claims_dir() -> PathBuf {
    std::env::temp_dir().join("valkey-operator-local-cluster")
}

/// Claims a free slot for `run_dir` (the one it already holds, if any).
pub fn claim(run_dir: &Path) -> Result<Ranges> {
    let dir = claims_dir();
    std::fs::create_dir_all(&dir)?;
    let run_dir = std::fs::canonicalize(run_dir)?;
    for slot in 0..SLOTS {
        let path = dir.join(format!("slot-{slot}"));
        match std::fs::read_to_string(&path) {
            Ok(owner) if Path::new(owner.trim()) == run_dir => return Ok(Ranges::for_slot(slot)),
            Ok(owner) if run_is_alive(Path::new(owner.trim())) => continue,
            _ => {}
        }
        std::fs::write(&path, run_dir.to_string_lossy().as_bytes())?;
        return Ok(Ranges::for_slot(slot));
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
    }

    #[test]
    fn a_run_keeps_its_slot_and_an_idle_slot_is_reused() {
        let run = tempfile::tempdir().unwrap();
        let first = claim(run.path()).unwrap();
        assert_eq!(claim(run.path()).unwrap(), first);
        // No process of `run` is alive, so another run may take its slot.
        let other = tempfile::tempdir().unwrap();
        assert!(claim(other.path()).unwrap().slot <= first.slot);
    }
}
