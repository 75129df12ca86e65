//! The replication context file: `spec.replication` written as `key value` lines, which a
//! data node's start script and a sentinel's init script read (see
//! [`crate::workload::scripts`]). It sits in the ConfigMap under a key of its own, outside
//! the revision: it changes with every failover and must restart nothing.

use crd_types::node::NodeReplication;

use super::ConfigError;

/// The ConfigMap key (and the file name under /etc/valkey) of the context.
pub const CONTEXT_KEY: &str = "replication";

/// The context text for `replication`; `announce_ip` is the node's own announce address
/// when it is known here (`announce: Service`), so the script can tell itself apart.
pub fn render_context(
    replication: &NodeReplication,
    announce_ip: Option<&str>,
) -> Result<String, ConfigError> {
    let mut problems = Vec::new();
    let mut text = String::from(
        "# Rendered by valkey-operator (node-controller) from spec.replication; read at start.\n",
    );
    let mut line = |key: &str, value: &str| {
        if value.is_empty() || !value.bytes().all(is_plain) {
            problems.push((
                format!("replication.{key}"),
                format!("{value:?} is not a plain name or address"),
            ));
        } else {
            text.push_str(&format!("{key} {value}\n"));
        }
    };
    line("name", &replication.primary_name);
    if let Some(ip) = announce_ip {
        line("self", ip);
    }
    if let Some(primary) = &replication.primary {
        line("primary", primary);
    }
    line(
        "monitored",
        if replication.monitored { "yes" } else { "no" },
    );
    line("quorum", &replication.quorum.to_string());
    line(
        "down-after-milliseconds",
        &replication.down_after_milliseconds.to_string(),
    );
    line(
        "failover-timeout",
        &replication.failover_timeout.to_string(),
    );
    line("parallel-syncs", &replication.parallel_syncs.to_string());
    for sentinel in &replication.sentinels {
        line("sentinel", sentinel);
    }
    for data in &replication.data_nodes {
        line("data", data);
    }
    if !problems.is_empty() {
        return Err(ConfigError::InvalidDirectives(problems));
    }
    Ok(text)
}

/// Letters, digits and what names and IPv4/IPv6 addresses hold: nothing a shell `read` or a
/// config line could take for something else.
pub(super) fn is_plain(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b':' | b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn context() -> NodeReplication {
        NodeReplication {
            primary_name: "sessions".into(),
            primary: Some("10.96.0.1".into()),
            monitored: true,
            sentinels: vec!["10.96.1.1".into(), "10.96.1.2".into()],
            data_nodes: vec!["10.96.0.1".into(), "10.96.0.2".into()],
            quorum: 2,
            down_after_milliseconds: 5000,
            failover_timeout: 60000,
            parallel_syncs: 1,
        }
    }

    #[test]
    fn the_context_is_one_line_per_fact() {
        let text = render_context(&context(), Some("10.96.0.2")).unwrap();
        let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            lines,
            [
                "name sessions",
                "self 10.96.0.2",
                "primary 10.96.0.1",
                "monitored yes",
                "quorum 2",
                "down-after-milliseconds 5000",
                "failover-timeout 60000",
                "parallel-syncs 1",
                "sentinel 10.96.1.1",
                "sentinel 10.96.1.2",
                "data 10.96.0.1",
                "data 10.96.0.2",
            ]
        );
        let mut unknown = context();
        unknown.primary = None;
        unknown.monitored = false;
        let text = render_context(&unknown, None).unwrap();
        assert!(!text.contains("primary") && !text.contains("self"));
        assert!(text.contains("monitored no\n"));
    }

    #[test]
    fn a_value_that_could_inject_a_line_is_refused() {
        let mut bad = context();
        bad.sentinels.push("10.0.0.1\nprimary 6.6.6.6".into());
        bad.primary = Some("a b".into());
        let Err(ConfigError::InvalidDirectives(problems)) = render_context(&bad, None) else {
            panic!("accepted");
        };
        let fields: Vec<&str> = problems.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(fields, ["replication.primary", "replication.sentinel"]);
    }
}
