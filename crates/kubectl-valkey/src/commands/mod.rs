//! One module per subcommand: each reads through [`crate::kube_api::Session`], builds with
//! the pure modules, and prints what it did.

pub mod pause;
pub mod replace_ca;
pub mod report;
pub mod rotate;
pub mod status;
pub mod switchover;

/// Unix seconds now.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// `valkeycluster/orders` as kubectl names an object in its messages.
pub fn object(topology: &crate::topology::Topology) -> String {
    format!(
        "{}/{}",
        topology.kind().as_str().to_lowercase(),
        topology.name()
    )
}
