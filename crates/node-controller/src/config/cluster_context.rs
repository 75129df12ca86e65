//! The cluster context file of a memory-only cluster member: its own announce address and
//! its shard's other members (`spec.cluster`), as `key value` lines its start script reads
//! (see [`crate::workload::scripts::memory_only_cluster_start`]). Under a key of its own in
//! the ConfigMap, outside the revision: a peer's new address must restart nothing. Always
//! rendered for such a member, even before it is told any peer, so the pod template never
//! changes when the context appears.

use crd_types::node::NodeCluster;

use super::ConfigError;
use super::replication::is_plain;

/// The ConfigMap key (and the file name under /etc/valkey) of the context.
pub const CLUSTER_CONTEXT_KEY: &str = "cluster";

/// The context text; `announce_ip` is the member's own announce address when it is known
/// here (`announce: Service`).
pub fn render(
    cluster: Option<&NodeCluster>,
    announce_ip: Option<&str>,
) -> Result<String, ConfigError> {
    let mut text = String::from(
        "# Rendered by valkey-operator (node-controller) from spec.cluster; read at start.\n",
    );
    let mut problems = Vec::new();
    let lines = announce_ip.map(|ip| ("self", ip)).into_iter().chain(
        cluster
            .into_iter()
            .flat_map(|c| c.shard_peers.iter().map(|p| ("peer", p.as_str()))),
    );
    for (key, value) in lines {
        if value.is_empty() || !value.bytes().all(is_plain) {
            problems.push((
                format!("cluster.{key}"),
                format!("{value:?} is not a plain address"),
            ));
        } else {
            text.push_str(&format!("{key} {value}\n"));
        }
    }
    if !problems.is_empty() {
        return Err(ConfigError::InvalidDirectives(problems));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_context_names_the_member_and_its_shard_peers() {
        let told = NodeCluster {
            shard_peers: vec!["10.96.0.2".into(), "10.96.0.3".into()],
        };
        let text = render(Some(&told), Some("10.96.0.1")).unwrap();
        let lines: Vec<&str> = text.lines().skip(1).collect();
        assert_eq!(
            lines,
            ["self 10.96.0.1", "peer 10.96.0.2", "peer 10.96.0.3"]
        );
        assert_eq!(
            render(None, None).unwrap().lines().count(),
            1,
            "only the header"
        );
    }

    #[test]
    fn an_address_a_shell_could_misread_is_refused() {
        let told = NodeCluster {
            shard_peers: vec!["10.0.0.1; rm -rf /".into()],
        };
        let err = render(Some(&told), None).unwrap_err().to_string();
        assert!(err.contains("cluster.peer"), "{err}");
    }
}
