//! Reaching the members: their ClusterIPs and password, `valkey-cli` against them, and the
//! fred cluster client.

use crate::valkey_tls::{ClientTls, client_of_secret};
use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use crd_types::ValkeyNode;
use crd_types::names::{self, labels};
use crd_types::template::SecretKeyRef;
use fred::prelude::{
    ClientLike, ConnectionConfig, PerformanceConfig, ReconnectPolicy, ServerConfig,
};
use kube::ResourceExt;

use super::{ClusterApis, ClusterNode, PORT, Progress, ValkeyClient, parse_cluster_nodes};
use crate::topology::{cluster_ip, secret_value};

/// One member and the address it serves on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberAddr {
    pub name: String,
    pub shard: u32,
    pub member: u32,
    /// Its Service's ClusterIP.
    pub ip: String,
}

/// How to reach a cluster: its members' ClusterIPs and the passwords, if any.
#[derive(Clone, Debug)]
pub struct Access {
    pub members: Vec<MemberAddr>,
    /// The default user's (the clients').
    pub password: Option<String>,
    /// The `operator` user's, as the members started with it: for the admin commands the
    /// default user may not run.
    pub operator_password: Option<String>,
    /// With `spec.tls`: valkey-cli's client side (the cluster's own Secret's certificate).
    pub tls: Option<ClientTls>,
}

/// The default user's and the operator's passwords of the members' `spec.auth`, if they
/// have one (its Secret named there or generated as `<cluster>-auth`, `<cluster>-operator`).
async fn passwords(
    apis: &ClusterApis,
    cluster: &str,
    members: &[ValkeyNode],
) -> Result<(Option<String>, Option<String>)> {
    let Some(auth) = members.iter().find_map(|n| n.spec.auth.clone()) else {
        return Ok((None, None));
    };
    let generated = |name: String| SecretKeyRef {
        name,
        key: "password".to_string(),
    };
    let default = auth
        .password_secret_ref
        .unwrap_or_else(|| generated(names::generated_auth_secret_name(cluster)));
    let operator = auth
        .operator_secret_ref
        .unwrap_or_else(|| generated(names::generated_operator_secret_name(cluster)));
    Ok((
        Some(secret_value(&apis.secrets, &default.name, &default.key).await?),
        Some(secret_value(&apis.secrets, &operator.name, &operator.key).await?),
    ))
}

/// [`Access`] to the members that exist now (those with a ClusterIP).
pub async fn access(apis: &ClusterApis, cluster: &str) -> Result<Access> {
    let nodes = apis.members(cluster).await?;
    let mut members = Vec::new();
    for node in &nodes {
        let l = node.labels();
        let (Some(shard), Some(member)) = (
            l.get(labels::SHARD).and_then(|s| s.parse().ok()),
            l.get(labels::MEMBER).and_then(|s| s.parse().ok()),
        ) else {
            continue;
        };
        if let Some(ip) = cluster_ip(node) {
            members.push(MemberAddr {
                name: node.name_any(),
                shard,
                member,
                ip,
            });
        }
    }
    if members.is_empty() {
        bail!("ValkeyCluster {cluster} has no member with a ClusterIP");
    }
    members.sort_by_key(|m| (m.shard, m.member));
    let tls = match nodes.iter().find_map(|n| n.spec.tls.clone()) {
        Some(tls) => Some(client_of_secret(&apis.secrets, &tls.secret_name, cluster).await?),
        None => None,
    };
    let (password, operator_password) = passwords(apis, cluster, &nodes).await?;
    Ok(Access {
        password,
        operator_password,
        members,
        tls,
    })
}

/// Runs `valkey-cli` (bounded by `timeout 30`): its trimmed stdout, or stderr when stdout is
/// empty, and whether it exited 0.
fn run_cli(args: &[String]) -> (String, bool) {
    let output = match Command::new("timeout")
        .arg("30")
        .arg("valkey-cli")
        .args(args)
        .output()
    {
        Ok(output) => output,
        Err(error) => return (format!("valkey-cli did not run: {error}"), false),
    };
    let stdout = String::from_utf8_lossy(&output.stdout).trim().to_string();
    let text = if stdout.is_empty() {
        String::from_utf8_lossy(&output.stderr).trim().to_string()
    } else {
        stdout
    };
    (text, output.status.success())
}

impl Access {
    /// The member's ClusterIP.
    pub fn ip(&self, member: &str) -> Option<&str> {
        self.members
            .iter()
            .find(|m| m.name == member)
            .map(|m| m.ip.as_str())
    }

    /// The member serving on `ip`.
    pub fn member_at(&self, ip: &str) -> Option<&MemberAddr> {
        self.members.iter().find(|m| m.ip == ip)
    }

    /// The password and, with TLS, the client certificate.
    fn auth_args(&self) -> Vec<String> {
        let mut args = match &self.password {
            Some(p) => vec!["-a".into(), p.clone(), "--no-auth-warning".into()],
            None => vec![],
        };
        args.extend(self.tls.iter().flat_map(ClientTls::cli_args));
        args
    }

    /// `valkey-cli -h <ip> -p 6379 <args>` (trimmed output, or the error text).
    pub fn cli(&self, ip: &str, args: &[&str]) -> String {
        let mut all: Vec<String> = vec!["-h".into(), ip.into(), "-p".into(), PORT.to_string()];
        all.extend(self.auth_args());
        all.extend(args.iter().map(|a| a.to_string()));
        run_cli(&all).0
    }

    /// [`Access::cli`] as the `operator` user (the default user's when the members have no
    /// passwords): for `CONFIG`, `CLIENT KILL`, `CLUSTER SETSLOT` and the other admin
    /// commands, which the default user may not run.
    pub fn admin_cli(&self, ip: &str, args: &[&str]) -> String {
        let Some(password) = &self.operator_password else {
            return self.cli(ip, args);
        };
        let mut all: Vec<String> = vec!["-h".into(), ip.into(), "-p".into(), PORT.to_string()];
        all.extend(
            [
                "--user",
                "operator",
                "-a",
                password.as_str(),
                "--no-auth-warning",
            ]
            .map(String::from),
        );
        all.extend(self.tls.iter().flat_map(ClientTls::cli_args));
        all.extend(args.iter().map(|a| a.to_string()));
        run_cli(&all).0
    }

    /// A member answering PING, preferring the cluster's order.
    pub fn live_ip(&self) -> Option<&str> {
        self.members
            .iter()
            .map(|m| m.ip.as_str())
            .find(|ip| self.cli(ip, &["PING"]) == "PONG")
    }

    /// `valkey-cli -c` (following redirections) against a live member.
    pub fn cli_cluster(&self, args: &[&str]) -> String {
        let Some(ip) = self.live_ip() else {
            return "no member answers PING".into();
        };
        let mut all: Vec<&str> = vec!["-c"];
        all.extend(args);
        self.cli(ip, &all)
    }

    /// `valkey-cli --cluster check <ip>:6379` from a live member: its output when it exits 0,
    /// covers every slot and reports neither an error nor a warning (an open slot is a
    /// warning), else why not.
    pub fn check(&self) -> Progress<String> {
        let ip = self.live_ip().ok_or("no member answers PING")?;
        let mut args: Vec<String> =
            vec!["--cluster".into(), "check".into(), format!("{ip}:{PORT}")];
        args.extend(self.auth_args());
        let (output, success) = run_cli(&args);
        check_passed(&output, success).map(|()| output)
    }

    /// `CLUSTER NODES` as the member on `ip` sees it.
    pub fn nodes_seen_by(&self, ip: &str) -> Result<Vec<ClusterNode>> {
        let text = self.cli(ip, &["CLUSTER", "NODES"]);
        let nodes = parse_cluster_nodes(&text);
        if nodes.is_empty() {
            bail!("CLUSTER NODES on {ip}: {text}");
        }
        Ok(nodes)
    }

    /// Every member's `CLUSTER NODES`, by member name.
    pub fn views(&self) -> Result<BTreeMap<String, Vec<ClusterNode>>> {
        self.members
            .iter()
            .map(|m| Ok((m.name.clone(), self.nodes_seen_by(&m.ip)?)))
            .collect()
    }

    /// Failover elections the members started so far, summed (CLUSTER INFO's
    /// `failover_auth_request_sent`, listed once a replica sent one): a primary the cluster
    /// never judged failed leaves it unchanged.
    pub fn elections_started(&self) -> u64 {
        self.members
            .iter()
            .map(|m| {
                let info = self.cli(&m.ip, &["CLUSTER", "INFO"]);
                info.lines()
                    .find_map(|l| {
                        l.strip_prefix("cluster_stats_messages_failover_auth_request_sent:")
                    })
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .unwrap_or(0)
            })
            .sum()
    }

    /// Starts a BGSAVE on `ip` whose child takes about `length` (each key's save delayed with
    /// `rdb-key-save-delay`, in microseconds): a long fork beside a serving primary. Put the
    /// delay back with [`Access::end_slow_save`] once `INFO persistence` shows it done.
    pub fn start_slow_save(&self, ip: &str, length: Duration) -> Result<()> {
        let keys: u64 = self.cli(ip, &["DBSIZE"]).trim().parse()?;
        let delay = (length.as_micros() / u128::from(keys.max(1))).to_string();
        let set = self.admin_cli(ip, &["CONFIG", "SET", "rdb-key-save-delay", &delay]);
        if set != "OK" {
            bail!("CONFIG SET rdb-key-save-delay {delay} on {ip}: {set}");
        }
        let reply = self.admin_cli(ip, &["BGSAVE", "SCHEDULE"]);
        if !reply.starts_with("Background saving") {
            bail!("BGSAVE on {ip}: {reply}");
        }
        Ok(())
    }

    /// Whether `ip` has a BGSAVE running.
    pub fn saving(&self, ip: &str) -> bool {
        self.cli(ip, &["INFO", "persistence"])
            .contains("rdb_bgsave_in_progress:1")
    }

    /// Puts `rdb-key-save-delay` back to 0 after [`Access::start_slow_save`].
    pub fn end_slow_save(&self, ip: &str) -> Result<()> {
        let set = self.admin_cli(ip, &["CONFIG", "SET", "rdb-key-save-delay", "0"]);
        if set != "OK" {
            bail!("CONFIG SET rdb-key-save-delay 0 on {ip}: {set}");
        }
        Ok(())
    }

    /// The member's own cluster node id (`CLUSTER MYID`).
    pub fn node_id(&self, ip: &str) -> Result<String> {
        let id = self.cli(ip, &["CLUSTER", "MYID"]);
        if id.len() != 40 || !id.chars().all(|c| c.is_ascii_hexdigit()) {
            bail!("CLUSTER MYID on {ip}: {id}");
        }
        Ok(id)
    }

    /// Whether every member says `cluster_state:ok` (`CLUSTER INFO`), as a client needs
    /// (fred refuses a connection otherwise); `--cluster check` does not ask it. A primary
    /// that just started says `fail` for its first 2 s (Valkey's writable delay) even when
    /// its config is whole.
    pub fn serving(&self) -> Progress<()> {
        let not: Vec<String> = self
            .members
            .iter()
            .filter(|m| {
                !self
                    .cli(&m.ip, &["CLUSTER", "INFO"])
                    .lines()
                    .any(|l| l.trim() == "cluster_state:ok")
            })
            .map(|m| m.name.clone())
            .collect();
        match not.is_empty() {
            true => Ok(()),
            false => Err(format!("not cluster_state:ok: {not:?}")),
        }
    }

    /// A fred cluster client seeded with every member's ClusterIP; it follows MOVED and ASK
    /// and reconnects for ever (every 250 ms).
    pub async fn client(&self) -> Result<ValkeyClient> {
        let hosts = self.members.iter().map(|m| (m.ip.clone(), PORT)).collect();
        // fred checks each member's IP in its certificate: certificates the operator issues
        // name it, a test Secret's do not.
        let config = fred::types::config::Config {
            password: self.password.clone(),
            tls: self.tls.as_ref().map(|t| t.fred()),
            server: ServerConfig::new_clustered(hosts),
            ..Default::default()
        };
        let connection = ConnectionConfig {
            connection_timeout: Duration::from_secs(5),
            internal_command_timeout: Duration::from_secs(10),
            max_command_attempts: 20,
            max_redirections: 50,
            ..Default::default()
        };
        let performance = PerformanceConfig {
            default_command_timeout: Duration::from_secs(30),
            ..Default::default()
        };
        let client = ValkeyClient::new(
            config,
            Some(performance),
            Some(connection),
            Some(ReconnectPolicy::new_constant(0, 250)),
        );
        tokio::time::timeout(Duration::from_secs(30), client.init())
            .await
            .context("connecting the cluster client: timed out")?
            .context("connecting the cluster client")?;
        Ok(client)
    }
}

/// Whether `valkey-cli --cluster check` passed, from its output and exit status.
pub fn check_passed(output: &str, success: bool) -> Progress<()> {
    if !success {
        return Err(format!("--cluster check failed: {output}"));
    }
    if !output.contains("[OK] All 16384 slots covered") {
        return Err(format!(
            "--cluster check does not cover every slot: {output}"
        ));
    }
    if output.contains("[ERR]") || output.contains("[WARNING]") {
        return Err(format!("--cluster check complains: {output}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_output_is_judged() {
        let ok = "127.100.0.1:6379 (e7d1eecc...) -> 0 keys | 5461 slots | 1 slaves.\n\
                  [OK] All nodes agree about slots configuration.\n\
                  >>> Check for open slots...\n>>> Check slots coverage...\n\
                  [OK] All 16384 slots covered.";
        assert!(check_passed(ok, true).is_ok());
        assert!(check_passed(ok, false).is_err());
        let open =
            format!("{ok}\n[WARNING] Node 127.100.0.2:6379 has slots in migrating state 10923.");
        assert!(check_passed(&open, true).is_err());
        assert!(check_passed("[ERR] Not all 16384 slots are covered by nodes.", true).is_err());
    }
}
