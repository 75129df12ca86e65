//! Pod IP allocation from a loopback CIDR, persisted so a restarted agent
//! never hands out an address a live pod still has.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    pub base: u32,
    pub prefix: u8,
}

impl std::str::FromStr for Cidr {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> Result<Self> {
        let (ip, prefix) = s.split_once('/').context("CIDR needs a /prefix")?;
        let ip: Ipv4Addr = ip.parse().context("bad CIDR address")?;
        let prefix: u8 = prefix.parse().context("bad CIDR prefix")?;
        if !(8..=30).contains(&prefix) {
            bail!("CIDR prefix must be between 8 and 30");
        }
        if ip.octets()[0] != 127 {
            bail!("pod CIDR must be inside 127.0.0.0/8 (loopback)");
        }
        let mask = u32::MAX << (32 - prefix);
        Ok(Cidr {
            base: u32::from(ip) & mask,
            prefix,
        })
    }
}

impl Cidr {
    fn size(&self) -> u32 {
        1u32 << (32 - self.prefix)
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Persisted {
    /// IP → pod UID.
    allocations: BTreeMap<Ipv4Addr, String>,
    /// Next offset to try: cycling avoids handing a just-freed IP to a new pod.
    next: u32,
}

pub struct Ipam {
    cidr: Cidr,
    path: PathBuf,
    state: Persisted,
}

impl Ipam {
    pub fn load(cidr: Cidr, path: PathBuf) -> Result<Self> {
        let state = match std::fs::read(&path) {
            Ok(b) => {
                serde_json::from_slice(&b).with_context(|| format!("parsing {}", path.display()))?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Persisted::default(),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        Ok(Self { cidr, path, state })
    }

    fn save(&self) -> Result<()> {
        let tmp = self.path.with_extension("tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(&self.state)?)?;
        std::fs::rename(&tmp, &self.path)?;
        Ok(())
    }

    /// Returns the pod's IP, allocating one if it has none yet.
    pub fn allocate(&mut self, uid: &str) -> Result<Ipv4Addr> {
        if let Some(ip) = self.lookup(uid) {
            return Ok(ip);
        }
        let size = self.cidr.size();
        for i in 0..size {
            let off = (self.state.next + i) % size;
            let ip = Ipv4Addr::from(self.cidr.base + off);
            let last = ip.octets()[3];
            // .0/.1 of the range are reserved, as are network/broadcast-like octets.
            if off < 2 || last == 0 || last == 255 || off == size - 1 {
                continue;
            }
            if self.state.allocations.contains_key(&ip) {
                continue;
            }
            self.state.allocations.insert(ip, uid.to_string());
            self.state.next = (off + 1) % size;
            self.save()?;
            return Ok(ip);
        }
        bail!("pod CIDR exhausted")
    }

    pub fn lookup(&self, uid: &str) -> Option<Ipv4Addr> {
        self.state
            .allocations
            .iter()
            .find(|(_, u)| u.as_str() == uid)
            .map(|(ip, _)| *ip)
    }

    pub fn release(&mut self, uid: &str) -> Result<()> {
        let before = self.state.allocations.len();
        self.state.allocations.retain(|_, u| u != uid);
        if self.state.allocations.len() != before {
            self.save()?;
        }
        Ok(())
    }

    /// Drops allocations of pods that no longer exist.
    pub fn retain(&mut self, keep: &dyn Fn(&str) -> bool) -> Result<()> {
        let before = self.state.allocations.len();
        self.state.allocations.retain(|_, u| keep(u));
        if self.state.allocations.len() != before {
            self.save()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cidr() {
        let c: Cidr = "127.64.1.2/16".parse().unwrap();
        assert_eq!(Ipv4Addr::from(c.base), Ipv4Addr::new(127, 64, 0, 0));
        assert!("10.0.0.0/16".parse::<Cidr>().is_err());
        assert!("127.0.0.0".parse::<Cidr>().is_err());
    }

    #[test]
    fn allocates_unique_ips_and_persists() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ipam.json");
        let cidr: Cidr = "127.64.0.0/16".parse().unwrap();
        let mut ipam = Ipam::load(cidr, path.clone()).unwrap();
        let a = ipam.allocate("a").unwrap();
        let b = ipam.allocate("b").unwrap();
        assert_eq!(a, Ipv4Addr::new(127, 64, 0, 2));
        assert_eq!(b, Ipv4Addr::new(127, 64, 0, 3));
        assert_eq!(ipam.allocate("a").unwrap(), a, "idempotent per pod");

        // A restarted agent sees the same allocations.
        let mut again = Ipam::load(cidr, path).unwrap();
        assert_eq!(again.lookup("b"), Some(b));
        let c = again.allocate("c").unwrap();
        assert!(c != a && c != b);

        // Freed IPs are not handed out again right away.
        again.release("a").unwrap();
        let d = again.allocate("d").unwrap();
        assert_ne!(d, a);
        again.retain(&|u| u == "d").unwrap();
        assert_eq!(again.lookup("b"), None);
        assert_eq!(again.lookup("d"), Some(d));
    }

    #[test]
    fn never_reuses_a_live_ip_when_wrapping() {
        let dir = tempfile::tempdir().unwrap();
        let cidr: Cidr = "127.65.0.0/29".parse().unwrap();
        let mut ipam = Ipam::load(cidr, dir.path().join("x.json")).unwrap();
        let ips: Vec<_> = (0..5)
            .map(|i| ipam.allocate(&format!("p{i}")).unwrap())
            .collect();
        // /29 = 8 addresses: .0/.1 reserved and .7 the last: 5 usable.
        assert_eq!(ips.last(), Some(&Ipv4Addr::new(127, 65, 0, 6)));
        assert!(ipam.allocate("p5").is_err());
        ipam.release("p2").unwrap();
        assert_eq!(ipam.allocate("p6").unwrap(), ips[2]);
    }
}
