//! The commands a data node answers ([`Server`]); a sentinel refuses those it does not
//! know.

use super::{Data, FakeGroupConn, State, Who, refused};
use crate::replication::PORT;
use crate::shared::acl::{self, AclUser};
use crate::shared::commands::{Server, ValkeyError};
use crate::shared::fake::config_reply;

impl FakeGroupConn {
    fn replication_text(state: &State, i: usize) -> String {
        let node = &state.data[i];
        match &node.primary {
            Some(primary) => {
                let p = state.data.iter().find(|d| &d.ip == primary);
                let up = p.is_some_and(|p| p.answering);
                let offset = p.map_or(node.offset, |p| p.offset - node.lag);
                format!(
                    "# Replication\r\nrole:slave\r\nmaster_host:{primary}\r\nmaster_port:{PORT}\r\n\
                     master_link_status:{}\r\nmaster_sync_in_progress:0\r\n\
                     slave_repl_offset:{offset}\r\nslave_priority:{}\r\nconnected_slaves:0\r\n\
                     master_repl_offset:{offset}\r\n",
                    if up { "up" } else { "down" },
                    node.priority,
                )
            }
            None => {
                let replicas: Vec<&Data> = state
                    .data
                    .iter()
                    .filter(|d| d.primary.as_deref() == Some(node.ip.as_str()) && d.answering)
                    .collect();
                let mut text = format!(
                    "# Replication\r\nrole:master\r\nconnected_slaves:{}\r\n",
                    replicas.len()
                );
                for (n, r) in replicas.iter().enumerate() {
                    text.push_str(&format!(
                        "slave{n}:ip={},port={PORT},state=online,offset={},lag=0\r\n",
                        r.ip,
                        node.offset - r.lag
                    ));
                }
                text.push_str(&format!("master_repl_offset:{}\r\n", node.offset));
                text
            }
        }
    }
}

impl Server for FakeGroupConn {
    async fn info(&self, sections: &[&'static str]) -> Result<String, ValkeyError> {
        let wanted = sections.to_vec();
        self.run(format!("INFO {}", sections.join(" ")), move |state, who| {
            let mut text = String::new();
            if wanted.contains(&"server") {
                let run_id = match who {
                    Who::Data(i) => state.data[i].run_id.clone(),
                    Who::Sentinel(j) => format!("{:040x}", 1000 + j),
                };
                text.push_str(&format!(
                    "# Server\r\nvalkey_version:8.0.1\r\nrun_id:{run_id}\r\n"
                ));
            }
            if let (true, Who::Data(i)) = (wanted.contains(&"replication"), who) {
                text.push_str(&Self::replication_text(state, i));
            }
            Ok(text)
        })
        .await
    }

    async fn role(&self) -> Result<String, ValkeyError> {
        self.run("ROLE".into(), |state, who| {
            Ok(match who {
                Who::Data(i) if state.data[i].primary.is_some() => "slave",
                Who::Data(_) => "master",
                Who::Sentinel(_) => "sentinel",
            }
            .to_string())
        })
        .await
    }

    async fn replica_of(&self, primary: Option<(&str, u16)>) -> Result<(), ValkeyError> {
        let primary = primary.map(|(ip, port)| (ip.to_string(), port));
        let text = match &primary {
            Some((ip, port)) => format!("REPLICAOF {ip} {port}"),
            None => "REPLICAOF NO ONE".into(),
        };
        self.data(text, move |state, i| {
            match primary {
                Some((ip, _)) => {
                    let offset = state.data.iter().find(|d| d.ip == ip).map(|p| p.offset);
                    let node = &mut state.data[i];
                    node.primary = Some(ip);
                    node.offset = offset.unwrap_or(node.offset);
                }
                None => {
                    // It keeps what it replicated.
                    let primary = state.data[i].primary.take();
                    let offset = primary
                        .and_then(|ip| state.data.iter().find(|d| d.ip == ip))
                        .map(|p| p.offset);
                    let node = &mut state.data[i];
                    node.offset = offset.unwrap_or(node.offset);
                }
            }
            Ok(())
        })
        .await
    }

    async fn pause_writes(&self, millis: u64) -> Result<(), ValkeyError> {
        self.data(format!("CLIENT PAUSE {millis} WRITE"), |state, i| {
            state.data[i].paused = true;
            Ok(())
        })
        .await
    }

    async fn unpause(&self) -> Result<(), ValkeyError> {
        self.data("CLIENT UNPAUSE".into(), |state, i| {
            state.data[i].paused = false;
            Ok(())
        })
        .await
    }

    async fn kill_clients(&self) -> Result<u64, ValkeyError> {
        self.data("CLIENT KILL TYPE normal".into(), |state, i| {
            state.data[i].killed += 1;
            Ok(1)
        })
        .await
    }

    async fn config_get(&self, names: &[&str]) -> Result<Vec<(String, String)>, ValkeyError> {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        self.data(
            format!("CONFIG GET {}", names.join(" ")),
            move |state, i| Ok(config_reply(&state.data[i].config, &names)),
        )
        .await
    }

    async fn config_set(&self, name: &str, value: &str) -> Result<(), ValkeyError> {
        let (name, value) = (name.to_string(), value.to_string());
        self.data(
            format!("CONFIG SET {name} {value}"),
            move |state, i| match name.as_str() {
                "replica-priority" => {
                    state.data[i].priority =
                        value.parse().map_err(|_| refused("ERR Invalid argument"))?;
                    Ok(())
                }
                "repl-ping-replica-period" => {
                    state.data[i].ping_period =
                        value.parse().map_err(|_| refused("ERR Invalid argument"))?;
                    Ok(())
                }
                other => match state.data[i].config.get_mut(other) {
                    Some(slot) => {
                        *slot = value;
                        Ok(())
                    }
                    None => Err(refused(&format!(
                        "ERR Unknown option or number of arguments for CONFIG SET - '{other}'"
                    ))),
                },
            },
        )
        .await
    }

    async fn acl_user(&self, user: &str) -> Result<Option<AclUser>, ValkeyError> {
        let user = user.to_string();
        self.data(format!("ACL GETUSER {user}"), move |state, i| {
            Ok(state.data[i].users.get(&user).cloned())
        })
        .await
    }

    async fn acl_setuser(&self, user: &str, rules: &[String]) -> Result<(), ValkeyError> {
        let (user, rules) = (user.to_string(), rules.to_vec());
        self.data(format!("ACL SETUSER {user}"), move |state, i| {
            let users = &mut state.data[i].users;
            let changed = acl::set_user(users.remove(&user), &rules);
            users.insert(user, changed);
            Ok(())
        })
        .await
    }

    async fn close(self) {
        self.group.lock().closed += 1;
    }
}
