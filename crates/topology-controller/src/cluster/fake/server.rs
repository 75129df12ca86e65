//! The commands every member answers ([`Server`]), as a cluster member answers them.

use super::{FakeConn, State, Sync, not_modelled, refused};
use crate::shared::acl::{self, AclUser};
use crate::shared::commands::{Server, ValkeyError};
use crate::shared::fake::config_reply;

impl FakeConn {
    fn replication_text(state: &State, me: &str) -> String {
        let node = state.node(me);
        match &node.primary {
            Some(primary) => {
                let p = state.node(primary);
                let online = node.sync == Sync::Online && p.answering;
                format!(
                    "# Replication\r\nrole:slave\r\nmaster_host:{}\r\nmaster_port:{}\r\n\
                     master_link_status:{}\r\nmaster_sync_in_progress:{}\r\n\
                     slave_repl_offset:{}\r\nconnected_slaves:0\r\nmaster_repl_offset:{}\r\n",
                    p.ip,
                    p.port,
                    if online { "up" } else { "down" },
                    u8::from(node.sync != Sync::Online),
                    p.offset,
                    p.offset,
                )
            }
            None => {
                let replicas = state.replicas_of(me);
                let mut text = format!(
                    "# Replication\r\nrole:master\r\nconnected_slaves:{}\r\n",
                    replicas.len()
                );
                for (i, id) in replicas.iter().enumerate() {
                    let r = state.node(id);
                    let sync_state = if r.sync == Sync::Online {
                        "online"
                    } else {
                        "wait_bgsave"
                    };
                    // The address it connects from (its pod's), as in cluster mode a replica
                    // does not tell its primary the address it announces.
                    text.push_str(&format!(
                        "slave{i}:ip={},port={},state={sync_state},offset={},lag=0\r\n",
                        r.ip.replacen("10.0.", "10.1.", 1),
                        r.port,
                        node.offset
                    ));
                }
                text.push_str(&format!("master_repl_offset:{}\r\n", node.offset));
                text
            }
        }
    }
}

impl Server for FakeConn {
    async fn info(&self, sections: &[&'static str]) -> Result<String, ValkeyError> {
        let wanted: Vec<&'static str> = sections.to_vec();
        self.run(format!("INFO {}", sections.join(" ")), move |state, me| {
            let mut text = String::new();
            if wanted.contains(&"server") {
                let v = state.node(me).version;
                text.push_str(&format!("# Server\r\nvalkey_version:{v}.1\r\n"));
            }
            if wanted.contains(&"replication") {
                text.push_str(&Self::replication_text(state, me));
            }
            Ok(text)
        })
        .await
    }

    async fn role(&self) -> Result<String, ValkeyError> {
        self.run("ROLE".into(), |state, me| {
            Ok(if state.node(me).primary.is_some() {
                "slave".into()
            } else {
                "master".into()
            })
        })
        .await
    }

    async fn replica_of(&self, _: Option<(&str, u16)>) -> Result<(), ValkeyError> {
        self.run("REPLICAOF".into(), |_, _| {
            Err(refused("ERR REPLICAOF not allowed in cluster mode."))
        })
        .await
    }

    async fn pause_writes(&self, _: u64) -> Result<(), ValkeyError> {
        self.run("CLIENT PAUSE".into(), |_, _| {
            Err(not_modelled("CLIENT PAUSE"))
        })
        .await
    }

    async fn unpause(&self) -> Result<(), ValkeyError> {
        self.run("CLIENT UNPAUSE".into(), |_, _| {
            Err(not_modelled("CLIENT UNPAUSE"))
        })
        .await
    }

    async fn kill_clients(&self) -> Result<u64, ValkeyError> {
        self.run("CLIENT KILL".into(), |_, _| {
            Err(not_modelled("CLIENT KILL"))
        })
        .await
    }

    async fn config_get(&self, names: &[&str]) -> Result<Vec<(String, String)>, ValkeyError> {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        self.run(
            format!("CONFIG GET {}", names.join(" ")),
            move |state, me| Ok(config_reply(&state.node(me).config, &names)),
        )
        .await
    }

    /// Only the live directives are modelled; values are stored as given (callers send
    /// `CONFIG GET`'s form).
    async fn config_set(&self, name: &str, value: &str) -> Result<(), ValkeyError> {
        let (name, value) = (name.to_string(), value.to_string());
        self.run(
            format!("CONFIG SET {name} {value}"),
            move |state, me| match state.node_mut(me).config.get_mut(&name) {
                Some(slot) => {
                    *slot = value;
                    Ok(())
                }
                None => Err(not_modelled("CONFIG SET of a directive that is not live")),
            },
        )
        .await
    }

    async fn acl_user(&self, user: &str) -> Result<Option<AclUser>, ValkeyError> {
        let user = user.to_string();
        self.run(format!("ACL GETUSER {user}"), move |state, me| {
            Ok(state.node(me).users.get(&user).cloned())
        })
        .await
    }

    async fn acl_setuser(&self, user: &str, rules: &[String]) -> Result<(), ValkeyError> {
        let (user, rules) = (user.to_string(), rules.to_vec());
        self.run(format!("ACL SETUSER {user}"), move |state, me| {
            let users = &mut state.node_mut(me).users;
            let changed = acl::set_user(users.remove(&user), &rules);
            users.insert(user, changed);
            Ok(())
        })
        .await
    }

    async fn close(self) {
        self.cluster.lock().closed += 1;
    }
}
