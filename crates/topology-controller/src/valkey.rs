//! One plain (non-cluster) fred connection to one member, through its announce address, and
//! the raw commands cluster management needs. Every call is bounded by a timeout: a stuck
//! node must cost one reconcile a few seconds, never hang the controller.

use std::time::Duration;

use fred::bytes::Bytes;
use fred::prelude::*;
use fred::types::{ClusterHash, CustomCommand};

/// Bound on connecting and on each command.
const TIMEOUT: Duration = Duration::from_secs(5);
/// MIGRATE's own timeout (milliseconds): the source waits this long on the target per call.
const MIGRATE_TIMEOUT_MS: u64 = 10_000;

/// An ACL user and its password.
#[derive(Clone)]
pub struct Login {
    pub user: String,
    pub password: String,
}

impl std::fmt::Debug for Login {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Login({}, <redacted>)", self.user)
    }
}

/// A connected member.
pub struct Conn {
    client: Client,
    /// Also what MIGRATE logs in to the target with (members share the operator user).
    login: Login,
}

impl Conn {
    /// Connects to `ip:port` as `login`, failing fast: no reconnect policy, one attempt per
    /// command.
    pub async fn connect(ip: &str, port: u16, login: &Login) -> Result<Self, Error> {
        let config = Config {
            fail_fast: true,
            username: Some(login.user.clone()),
            password: Some(login.password.clone()),
            server: ServerConfig::new_centralized(ip, port),
            ..Default::default()
        };
        let connection = ConnectionConfig {
            connection_timeout: TIMEOUT,
            internal_command_timeout: TIMEOUT,
            max_command_attempts: 1,
            ..Default::default()
        };
        let perf = PerformanceConfig {
            default_command_timeout: TIMEOUT,
            ..Default::default()
        };
        let client = Client::new(config, Some(perf), Some(connection), None);
        client.init().await?;
        Ok(Self {
            client,
            login: login.clone(),
        })
    }

    /// Closes the connection (dropping it would too, but QUIT is polite to the server).
    pub async fn close(self) {
        let _ = self.client.quit().await;
    }

    async fn raw<R: FromValue>(&self, command: &'static str, args: Vec<Value>) -> Result<R, Error> {
        self.client
            .custom(
                CustomCommand::new_static(command, ClusterHash::Random, false),
                args,
            )
            .await
    }

    async fn cluster<R: FromValue>(&self, args: Vec<Value>) -> Result<R, Error> {
        self.raw("CLUSTER", args).await
    }

    pub async fn cluster_nodes(&self) -> Result<String, Error> {
        self.cluster(vec!["NODES".into()]).await
    }

    /// `CLUSTER SHARDS` reduced to what the planner needs: the node ids of each shard, as
    /// this member groups them (by shard id).
    pub async fn cluster_shards(&self) -> Result<Vec<Vec<String>>, Error> {
        let reply: Vec<Value> = self.cluster(vec!["SHARDS".into()]).await?;
        Ok(reply.into_iter().map(shard_node_ids).collect())
    }

    pub async fn cluster_info(&self) -> Result<String, Error> {
        self.cluster(vec!["INFO".into()]).await
    }

    /// `INFO <section> [<section> ...]` as text, in one round trip.
    pub async fn info(&self, sections: &[&'static str]) -> Result<String, Error> {
        self.raw("INFO", sections.iter().map(|s| Value::from(*s)).collect())
            .await
    }

    pub async fn meet(&self, ip: &str, port: u16, bus_port: u16) -> Result<(), Error> {
        self.cluster::<Value>(vec![
            "MEET".into(),
            ip.into(),
            i64::from(port).into(),
            i64::from(bus_port).into(),
        ])
        .await
        .map(drop)
    }

    /// `CLUSTER ADDSLOTSRANGE start end [start end ...]`.
    pub async fn add_slots_ranges(&self, ranges: &[(u16, u16)]) -> Result<(), Error> {
        let mut args: Vec<Value> = vec!["ADDSLOTSRANGE".into()];
        for (start, end) in ranges {
            args.push(i64::from(*start).into());
            args.push(i64::from(*end).into());
        }
        self.cluster::<Value>(args).await.map(drop)
    }

    pub async fn replicate(&self, primary_id: &str) -> Result<(), Error> {
        self.cluster::<Value>(vec!["REPLICATE".into(), primary_id.into()])
            .await
            .map(drop)
    }

    pub async fn forget(&self, node_id: &str) -> Result<(), Error> {
        self.cluster::<Value>(vec!["FORGET".into(), node_id.into()])
            .await
            .map(drop)
    }

    /// `CLUSTER FAILOVER` run on a replica: a coordinated handover with the primary's
    /// agreement, so no acknowledged write is left behind.
    pub async fn failover(&self) -> Result<(), Error> {
        self.cluster::<Value>(vec!["FAILOVER".into()])
            .await
            .map(drop)
    }

    /// `CLUSTER SETSLOT <slot> IMPORTING|MIGRATING|NODE <id>` or `STABLE`.
    pub async fn set_slot(&self, slot: u16, state: SlotState<'_>) -> Result<(), Error> {
        let mut args: Vec<Value> = vec!["SETSLOT".into(), i64::from(slot).into()];
        match state {
            SlotState::Importing(from) => args.extend(["IMPORTING".into(), from.into()]),
            SlotState::Migrating(to) => args.extend(["MIGRATING".into(), to.into()]),
            SlotState::Node(owner) => args.extend(["NODE".into(), owner.into()]),
            SlotState::Stable => args.push("STABLE".into()),
        }
        self.cluster::<Value>(args).await.map(drop)
    }

    pub async fn keys_in_slot(&self, slot: u16, count: u32) -> Result<Vec<Bytes>, Error> {
        self.cluster(vec![
            "GETKEYSINSLOT".into(),
            i64::from(slot).into(),
            i64::from(count).into(),
        ])
        .await
    }

    /// Moves `keys` to `ip:port` with MIGRATE ... KEYS (atomic per key; the keys disappear
    /// here only once the target has them). REPLACE, because a key that reached the target
    /// before an interrupted run is the same key; AUTH2, because the target wants a login.
    pub async fn migrate(&self, ip: &str, port: u16, keys: Vec<Bytes>) -> Result<(), Error> {
        let mut args: Vec<Value> = vec![
            ip.into(),
            i64::from(port).into(),
            "".into(),
            0.into(),
            (MIGRATE_TIMEOUT_MS as i64).into(),
            "REPLACE".into(),
            "AUTH2".into(),
            self.login.user.as_str().into(),
            self.login.password.as_str().into(),
            "KEYS".into(),
        ];
        args.extend(keys.into_iter().map(Value::Bytes));
        self.raw::<Value>("MIGRATE", args).await.map(drop)
    }

    /// `ROLE`'s first element: "master", "slave" or "sentinel".
    pub async fn role(&self) -> Result<String, Error> {
        let reply: Vec<Value> = self.raw("ROLE", vec![]).await?;
        reply
            .into_iter()
            .next()
            .and_then(|v| v.as_string())
            .ok_or_else(|| Error::new(ErrorKind::Protocol, "empty ROLE reply"))
    }
}

/// The argument of `CLUSTER SETSLOT`.
#[derive(Clone, Copy, Debug)]
pub enum SlotState<'a> {
    Importing(&'a str),
    Migrating(&'a str),
    Node(&'a str),
    Stable,
}

/// The `id`s under `nodes` of one `CLUSTER SHARDS` entry (a map, or in RESP2 a flat array of
/// keys and values).
fn shard_node_ids(shard: Value) -> Vec<String> {
    let Some(nodes) = field(shard, "nodes") else {
        return Vec::new();
    };
    let Value::Array(nodes) = nodes else {
        return Vec::new();
    };
    nodes
        .into_iter()
        .filter_map(|node| field(node, "id")?.as_string())
        .collect()
}

fn field(value: Value, name: &str) -> Option<Value> {
    match value {
        Value::Map(map) => map
            .inner()
            .into_iter()
            .find(|(k, _)| k.as_str() == Some(name))
            .map(|(_, v)| v),
        Value::Array(items) => {
            let mut items = items.into_iter();
            while let (Some(k), Some(v)) = (items.next(), items.next()) {
                if k.as_string().as_deref() == Some(name) {
                    return Some(v);
                }
            }
            None
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_ids_from_a_resp2_shards_entry() {
        let node =
            |id: &str| Value::Array(vec!["id".into(), id.into(), "port".into(), 6379.into()]);
        let shard = Value::Array(vec![
            "slots".into(),
            Value::Array(vec![0.into(), 5460.into()]),
            "nodes".into(),
            Value::Array(vec![node("a"), node("b")]),
        ]);
        assert_eq!(shard_node_ids(shard), vec!["a", "b"]);
        assert!(shard_node_ids(Value::Null).is_empty());
    }
}
