//! Listening sockets inside another network namespace.
//!
//! The API server refuses to proxy to loopback node addresses (`kubectl logs`, the node
//! proxy's /stats/summary), so the launcher gives the kubelet API an address inside a
//! network namespace the run creates. A socket keeps the namespace it was created in, so
//! a short-lived thread enters the namespace, binds, and hands the socket back: the agent
//! itself, and everything else it serves, stays on loopback.

use std::net::SocketAddr;
use std::path::Path;

use anyhow::{Context, Result};
use nix::sched::{CloneFlags, setns};

/// Binds a TCP listener on `addr` inside the network namespace at `netns` (e.g.
/// /var/run/netns/<name>).
pub fn bind_in(netns: &Path, addr: SocketAddr) -> Result<std::net::TcpListener> {
    let netns = netns.to_path_buf();
    std::thread::spawn(move || -> Result<std::net::TcpListener> {
        let namespace = std::fs::File::open(&netns)
            .with_context(|| format!("opening network namespace {}", netns.display()))?;
        // setns changes only this thread's namespace; the thread ends right after.
        setns(&namespace, CloneFlags::CLONE_NEWNET)
            .with_context(|| format!("entering network namespace {}", netns.display()))?;
        let listener = std::net::TcpListener::bind(addr)
            .with_context(|| format!("binding {addr} in {}", netns.display()))?;
        listener.set_nonblocking(true)?;
        Ok(listener)
    })
    .join()
    .map_err(|_| anyhow::anyhow!("the namespace thread panicked"))?
}
