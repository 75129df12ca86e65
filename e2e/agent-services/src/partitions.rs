//! Simulated network partitions between pod IPs.
//!
//! Only traffic that goes through the Service proxy can be cut: a connection
//! is identified by (client source IP, chosen backend pod IP). Valkey pods run
//! with `--bind-source-addr <podIP>`, so connections they open to a Service
//! carry their pod IP as source. Direct pod-IP-to-pod-IP traffic (e.g. a
//! replica dialing a primary's pod IP, or cluster-bus gossip to announced pod
//! IPs) never passes the proxy and therefore CANNOT be cut here.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio_util::sync::CancellationToken;

/// Cheap-to-clone shared handle to the partition table and the registry of
/// live proxied connections.
#[derive(Clone, Default)]
pub struct Partitions {
    inner: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    /// Unordered pairs, stored normalized as (min, max).
    cuts: BTreeSet<(IpAddr, IpAddr)>,
    next_id: u64,
    conns: HashMap<u64, LiveConn>,
}

struct LiveConn {
    src: IpAddr,
    dst: IpAddr,
    cancel: CancellationToken,
}

/// Keeps a proxied connection registered; dropping it unregisters.
pub(crate) struct ConnGuard {
    partitions: Partitions,
    id: u64,
}

impl Drop for ConnGuard {
    fn drop(&mut self) {
        self.partitions.lock().conns.remove(&self.id);
    }
}

fn norm(a: IpAddr, b: IpAddr) -> (IpAddr, IpAddr) {
    // IPv4-mapped IPv6 and plain IPv4 must compare equal.
    let (a, b) = (a.to_canonical(), b.to_canonical());
    if a <= b { (a, b) } else { (b, a) }
}

impl std::fmt::Debug for Partitions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Partitions")
            .field("cuts", &self.list())
            .finish_non_exhaustive()
    }
}

impl Partitions {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock cannot leave the table half-updated
        // in a way that matters, so recover from poisoning.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Cut traffic between `a` and `b` (both directions). Existing proxied
    /// connections between them are torn down now.
    pub fn cut(&self, a: IpAddr, b: IpAddr) {
        let key = norm(a, b);
        let mut st = self.lock();
        st.cuts.insert(key);
        for c in st.conns.values() {
            if norm(c.src, c.dst) == key {
                c.cancel.cancel();
            }
        }
    }

    pub fn heal(&self, a: IpAddr, b: IpAddr) {
        self.lock().cuts.remove(&norm(a, b));
    }

    pub fn heal_all(&self) {
        self.lock().cuts.clear();
    }

    pub fn is_cut(&self, src: IpAddr, dst: IpAddr) -> bool {
        self.lock().cuts.contains(&norm(src, dst))
    }

    /// Current cuts as normalized (lower, higher) pairs.
    pub fn list(&self) -> Vec<(IpAddr, IpAddr)> {
        self.lock().cuts.iter().copied().collect()
    }

    /// Number of live proxied connections (for tests and diagnostics).
    pub fn live_connections(&self) -> usize {
        self.lock().conns.len()
    }

    /// Atomically check the cut table and register a connection, so a
    /// concurrent `cut` either refuses it here or cancels `cancel` later.
    pub(crate) fn register(
        &self,
        src: IpAddr,
        dst: IpAddr,
        cancel: CancellationToken,
    ) -> Option<ConnGuard> {
        let mut st = self.lock();
        if st.cuts.contains(&norm(src, dst)) {
            return None;
        }
        let id = st.next_id;
        st.next_id += 1;
        st.conns.insert(id, LiveConn { src, dst, cancel });
        Some(ConnGuard {
            partitions: self.clone(),
            id,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn cut_is_symmetric_and_heals() {
        let p = Partitions::new();
        let (a, b, c) = (ip("127.64.0.1"), ip("127.64.0.2"), ip("127.64.0.3"));
        assert!(!p.is_cut(a, b));
        p.cut(b, a);
        assert!(p.is_cut(a, b));
        assert!(p.is_cut(b, a));
        assert!(!p.is_cut(a, c));
        p.cut(a, b); // idempotent
        assert_eq!(p.list(), vec![(a, b)]);
        p.heal(a, b);
        assert!(!p.is_cut(b, a));
        p.cut(a, b);
        p.cut(a, c);
        p.heal_all();
        assert!(p.list().is_empty());
    }

    #[test]
    fn mapped_ipv6_matches_ipv4() {
        let p = Partitions::new();
        p.cut(ip("127.64.0.1"), ip("127.64.0.2"));
        assert!(p.is_cut(ip("::ffff:127.64.0.2"), ip("127.64.0.1")));
    }

    #[test]
    fn cut_cancels_matching_connections_only() {
        let p = Partitions::new();
        let (a, b, c) = (ip("127.64.0.1"), ip("127.64.0.2"), ip("127.64.0.3"));
        let t_ab = CancellationToken::new();
        let t_ac = CancellationToken::new();
        let g_ab = p.register(a, b, t_ab.clone()).unwrap();
        let _g_ac = p.register(a, c, t_ac.clone()).unwrap();
        assert_eq!(p.live_connections(), 2);
        p.cut(b, a);
        assert!(t_ab.is_cancelled());
        assert!(!t_ac.is_cancelled());
        assert!(p.register(b, a, CancellationToken::new()).is_none());
        drop(g_ab);
        assert_eq!(p.live_connections(), 1);
    }
}
