//! Reaching a group's data nodes and sentinels on their Service ClusterIPs (the addresses
//! they announce), with the generated passwords, and what Valkey and Sentinel say.

use std::process::Command;

use anyhow::{Result, bail};
use crd_types::names::{self, labels, ports};
use crd_types::node::Mode;
use kube::ResourceExt;

use super::{Progress, ReplicationApis};
use crate::topology::{cluster_ip, secret_value};
use crate::valkey_tls::{ClientTls, client_of_secret};

/// One member and its Service's ClusterIP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberAddr {
    pub name: String,
    pub index: u32,
    pub ip: String,
}

/// How to reach a group.
#[derive(Clone, Debug)]
pub struct GroupAccess {
    pub name: String,
    pub data: Vec<MemberAddr>,
    pub sentinels: Vec<MemberAddr>,
    /// The default user's password on the data nodes.
    pub password: String,
    /// The default user's password on the sentinels.
    pub sentinel_password: String,
    /// The `operator` user's password (data nodes and sentinels).
    pub operator_password: String,
    /// ClusterIPs of the read-write (`<name>`), read-only (`<name>-replicas`) and sentinel
    /// (`<name>-sentinel`) Services, once they exist.
    pub service_ip: Option<String>,
    pub replicas_service_ip: Option<String>,
    pub sentinel_service_ip: Option<String>,
    /// With `spec.tls`: how to reach the members (the group's own Secret's certificate).
    pub tls: Option<ClientTls>,
}

/// What one sentinel says of the group.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SentinelView {
    /// GET-MASTER-ADDR-BY-NAME.
    pub primary: Option<(String, u16)>,
    /// (ip, port, flags) of each replica it lists.
    pub replicas: Vec<(String, u16, String)>,
    /// (ip, port) of each other sentinel it lists.
    pub sentinels: Vec<(String, u16)>,
}

/// The password in Secret `name`.
async fn secret(apis: &ReplicationApis, name: &str) -> Result<String> {
    secret_value(&apis.secrets, name, "password").await
}

/// [`GroupAccess`] to the members that exist now (those with a ClusterIP).
pub async fn access(apis: &ReplicationApis, group: &str) -> Result<GroupAccess> {
    let nodes = apis.members(group).await?;
    let (mut data, mut sentinels) = (Vec::new(), Vec::new());
    for node in &nodes {
        let Some(index) = node
            .labels()
            .get(labels::MEMBER)
            .and_then(|m| m.parse().ok())
        else {
            continue;
        };
        let Some(ip) = cluster_ip(node) else { continue };
        let member = MemberAddr {
            name: node.name_any(),
            index,
            ip,
        };
        match node.spec.mode {
            Mode::Sentinel => sentinels.push(member),
            _ => data.push(member),
        }
    }
    data.sort_by_key(|m| m.index);
    sentinels.sort_by_key(|m| m.index);
    let service_ip = |name: String| async move {
        let service = apis.services.get_opt(&name).await?;
        anyhow::Ok(
            service
                .and_then(|s| s.spec)
                .and_then(|s| s.cluster_ip)
                .filter(|ip| !ip.is_empty() && ip != "None"),
        )
    };
    let stored = apis.groups.get(group).await?;
    let namespace = stored.namespace().unwrap_or_default();
    let tls = match stored.spec.common.tls {
        // Without a Secret of the user's, as a client holding a certificate of the group's
        // CA would: data node 0's. The read-write Service's name is one every data node's
        // certificate holds.
        Some(tls) => Some(match tls.secret_name {
            Some(secret) => client_of_secret(&apis.secrets, &secret, group).await?,
            None => {
                let member = names::replication_member_name(group, 0);
                let secret = names::member_tls_secret_name(&member);
                client_of_secret(&apis.secrets, &secret, group)
                    .await?
                    .with_server_name(&format!("{group}.{namespace}.svc"))
            }
        }),
        None => None,
    };
    Ok(GroupAccess {
        tls,
        service_ip: service_ip(names::primary_service_name(group)).await?,
        replicas_service_ip: service_ip(names::replicas_service_name(group)).await?,
        sentinel_service_ip: service_ip(names::sentinel_service_name(group)).await?,
        name: group.to_string(),
        data,
        sentinels,
        password: secret(apis, &names::generated_auth_secret_name(group)).await?,
        sentinel_password: secret(apis, &names::generated_sentinel_secret_name(group)).await?,
        operator_password: secret(apis, &names::generated_operator_secret_name(group)).await?,
    })
}

/// `valkey-cli` (bounded by `timeout 10`) logged in through REDISCLI_AUTH (not at all with
/// an empty password): its trimmed stdout, or stderr when stdout is empty.
fn run_cli(
    tls: Option<&ClientTls>,
    ip: &str,
    port: i32,
    password: &str,
    user: Option<&str>,
    args: &[&str],
) -> String {
    let mut command = Command::new("timeout");
    command.args(["10", "valkey-cli", "-h", ip, "-p", &port.to_string()]);
    if let Some(tls) = tls {
        command.args(tls.cli_args());
    }
    // An empty password: a server without one (bench-replication's hand-made floor).
    if !password.is_empty() {
        command.env("REDISCLI_AUTH", password);
    }
    if let Some(user) = user {
        command.args(["--user", user]);
    }
    let output = match command.args(args).output() {
        Ok(output) => output,
        Err(error) => return format!("valkey-cli did not run: {error}"),
    };
    let stdout = String::from_utf8_lossy(&output.stdout).trim().to_string();
    if stdout.is_empty() {
        return String::from_utf8_lossy(&output.stderr).trim().to_string();
    }
    stdout
}

/// Entries of a flattened SENTINEL listing: each starts with its `name` field.
fn entries(text: &str) -> Vec<Vec<(String, String)>> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out: Vec<Vec<(String, String)>> = Vec::new();
    for pair in lines.chunks(2) {
        let [key, value] = pair else { continue };
        if *key == "name" || out.is_empty() {
            out.push(Vec::new());
        }
        if let Some(entry) = out.last_mut() {
            entry.push((key.to_string(), value.to_string()));
        }
    }
    out
}

fn field<'a>(entry: &'a [(String, String)], key: &str) -> Option<&'a str> {
    entry
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

impl GroupAccess {
    /// The member's ClusterIP.
    pub fn ip(&self, member: &str) -> Option<&str> {
        self.data
            .iter()
            .chain(&self.sentinels)
            .find(|m| m.name == member)
            .map(|m| m.ip.as_str())
    }

    /// The data node serving on `ip`.
    pub fn data_at(&self, ip: &str) -> Option<&MemberAddr> {
        self.data.iter().find(|m| m.ip == ip)
    }

    /// `valkey-cli` against a data node (or the group's Services), as the default user.
    pub fn cli(&self, ip: &str, args: &[&str]) -> String {
        run_cli(
            self.tls.as_ref(),
            ip,
            ports::VALKEY,
            &self.password,
            None,
            args,
        )
    }

    /// `valkey-cli` against a sentinel, as its default user.
    pub fn sentinel_cli(&self, ip: &str, args: &[&str]) -> String {
        run_cli(
            self.tls.as_ref(),
            ip,
            ports::SENTINEL,
            &self.sentinel_password,
            None,
            args,
        )
    }

    /// `valkey-cli` against a data node as the `operator` user.
    pub fn operator_cli(&self, ip: &str, args: &[&str]) -> String {
        run_cli(
            self.tls.as_ref(),
            ip,
            ports::VALKEY,
            &self.operator_password,
            Some("operator"),
            args,
        )
    }

    /// The run id of the data node (or Service) at `ip`, from `INFO server`.
    pub fn run_id(&self, ip: &str) -> Option<String> {
        self.cli(ip, &["INFO", "server"])
            .lines()
            .find_map(|l| l.trim().strip_prefix("run_id:").map(str::to_string))
    }

    /// The data node's role: `("master", None)` or `("slave", Some(primary ip))`.
    pub fn role(&self, ip: &str) -> Result<(String, Option<String>)> {
        let text = self.cli(ip, &["ROLE"]);
        let mut lines = text.lines();
        match lines.next() {
            Some("master") => Ok(("master".into(), None)),
            Some("slave") => Ok(("slave".into(), lines.next().map(str::to_string))),
            _ => bail!("ROLE on {ip}: {text}"),
        }
    }

    /// What the sentinel on `ip` says of the group.
    pub fn sentinel_view(&self, ip: &str) -> Result<SentinelView> {
        let addr = self.sentinel_cli(ip, &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", &self.name]);
        let mut parts = addr.lines();
        let primary = match (parts.next(), parts.next().and_then(|p| p.parse().ok())) {
            (Some(ip), Some(port)) => Some((ip.to_string(), port)),
            _ if addr.is_empty() => None,
            _ => bail!("GET-MASTER-ADDR-BY-NAME on {ip}: {addr}"),
        };
        let listing = |what: &str| -> Result<Vec<Vec<(String, String)>>> {
            let text = self.sentinel_cli(ip, &["SENTINEL", what, &self.name]);
            if text.starts_with("ERR") || text.contains("Could not connect") {
                bail!("SENTINEL {what} on {ip}: {text}");
            }
            Ok(entries(&text))
        };
        let port = |e: &[(String, String)]| field(e, "port").and_then(|p| p.parse().ok());
        Ok(SentinelView {
            primary,
            replicas: listing("REPLICAS")?
                .iter()
                .filter_map(|e| {
                    Some((
                        field(e, "ip")?.to_string(),
                        port(e)?,
                        field(e, "flags").unwrap_or_default().to_string(),
                    ))
                })
                .collect(),
            sentinels: listing("SENTINELS")?
                .iter()
                .filter_map(|e| Some((field(e, "ip")?.to_string(), port(e)?)))
                .collect(),
        })
    }

    /// `(ip, slave-priority)` of each replica the sentinel on `ip` lists.
    pub fn replica_priorities(&self, ip: &str) -> Result<Vec<(String, i64)>> {
        let text = self.sentinel_cli(ip, &["SENTINEL", "REPLICAS", &self.name]);
        if text.starts_with("ERR") || text.contains("Could not connect") {
            bail!("SENTINEL REPLICAS on {ip}: {text}");
        }
        Ok(entries(&text)
            .iter()
            .filter_map(|e| {
                let priority = field(e, "slave-priority")?.parse().ok()?;
                Some((field(e, "ip")?.to_string(), priority))
            })
            .collect())
    }

    /// Whether Valkey and Sentinel agree that the data node at `primary_ip` is the primary:
    /// it serves as primary, every other data node replicates it with its link up, and
    /// [`Self::sentinels_agree_on`] it.
    pub fn agree_on(&self, primary_ip: &str) -> Progress<()> {
        for m in &self.data {
            let (role, follows) = self.role(&m.ip).map_err(|e| format!("{e:#}"))?;
            let ok = if m.ip == primary_ip {
                role == "master"
            } else {
                role == "slave"
                    && follows.as_deref() == Some(primary_ip)
                    && self
                        .cli(&m.ip, &["INFO", "replication"])
                        .contains("master_link_status:up")
            };
            if !ok {
                return Err(format!("{}: {role} of {follows:?}", m.name));
            }
        }
        self.sentinels_agree_on(primary_ip)
    }

    /// Whether every sentinel names `primary` (a data node's ClusterIP) and lists exactly
    /// the other data nodes as replicas (none counted down) and the other sentinels, all by
    /// Service IP, each once.
    pub fn sentinels_agree_on(&self, primary: &str) -> Progress<()> {
        let mut want_replicas: Vec<(String, u16)> = self
            .data
            .iter()
            .filter(|m| m.ip != primary)
            .map(|m| (m.ip.clone(), ports::VALKEY as u16))
            .collect();
        want_replicas.sort();
        for s in &self.sentinels {
            let view = self
                .sentinel_view(&s.ip)
                .map_err(|e| format!("{}: {e:#}", s.name))?;
            if view.primary != Some((primary.to_string(), ports::VALKEY as u16)) {
                return Err(format!(
                    "{} names {:?}, not {primary}",
                    s.name, view.primary
                ));
            }
            let mut replicas: Vec<(String, u16)> = view
                .replicas
                .iter()
                .map(|(ip, p, _)| (ip.clone(), *p))
                .collect();
            replicas.sort();
            if replicas != want_replicas {
                return Err(format!(
                    "{} lists replicas {replicas:?}, not {want_replicas:?}",
                    s.name
                ));
            }
            if let Some((ip, _, flags)) = view
                .replicas
                .iter()
                .find(|(_, _, f)| f.contains("down") || f.contains("disconnected"))
            {
                return Err(format!("{} flags replica {ip} {flags}", s.name));
            }
            let mut sentinels = view.sentinels.clone();
            sentinels.sort();
            let mut want: Vec<(String, u16)> = self
                .sentinels
                .iter()
                .filter(|o| o.name != s.name)
                .map(|o| (o.ip.clone(), ports::SENTINEL as u16))
                .collect();
            want.sort();
            if sentinels != want {
                return Err(format!(
                    "{} lists sentinels {sentinels:?}, not {want:?}",
                    s.name
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentinel_listings_split_into_entries() {
        let text = "name\n10.0.0.2:6379\nip\n10.0.0.2\nport\n6379\nflags\nslave\n\
                    name\n10.0.0.3:6379\nip\n10.0.0.3\nport\n6379\nflags\ns_down,slave";
        let e = entries(text);
        assert_eq!(e.len(), 2);
        assert_eq!(field(&e[1], "flags"), Some("s_down,slave"));
        assert!(entries("").is_empty());
    }
}
