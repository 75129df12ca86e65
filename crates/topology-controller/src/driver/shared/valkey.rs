//! One plain (non-cluster) fred connection to one member (a server or a sentinel), through
//! its announce address, and the raw commands topology management needs. Every call is bounded by a timeout: a stuck
//! node must cost one reconcile a few seconds, never hang the controller.

use std::time::Duration;

use fred::bytes::Bytes;
use fred::prelude::{
    Client, ClientLike, Config, ConnectionConfig, FromValue, PerformanceConfig, ServerConfig, Value,
};
use fred::types::config::TlsConnector;
use fred::types::{ClusterHash, CustomCommand};
use rustls::ClientConfig;
use topology_controller::shared::acl::AclUser;
use topology_controller::shared::commands::{
    ClusterNode, ErrorKind, Fields, Key, SentinelNode, Server, SlotState, ValkeyError,
};
use topology_controller::shared::default_password::RequirePass;
use topology_controller::shared::operator_password::OutgoingLogin;
use topology_controller::shared::tls;
use topology_controller::shared::users::AclMember;

/// Bound on connecting and on each command.
const TIMEOUT: Duration = Duration::from_secs(5);
/// Bound on connecting to one member and asking it what it sees, in a look: a healthy
/// member answers in milliseconds, and a frozen one must not hold up the look that reports
/// it (Ready goes False about a second after the pulse finds it silent) or a reconcile that
/// follows a failover (the read-write Service's label waits for it).
pub const LOOK_BOUND: Duration = Duration::from_secs(2);
/// MIGRATE's own timeout (milliseconds): the source waits this long on the target per call.
const MIGRATE_TIMEOUT_MS: u64 = 10_000;

/// An ACL user and its password, and TLS toward members of a topology with `spec.tls`.
#[derive(Clone)]
pub struct Login {
    pub user: String,
    pub password: String,
    /// During a rotation of the operator password, those members may hold instead: a
    /// member that refuses `password` (it has not taken it yet) is asked with each in turn.
    pub fallbacks: Vec<String>,
    pub tls: Option<tls::Client>,
}

impl Login {
    /// fred's config for the member at `ip:port`: fail fast, this user, and TLS when the
    /// topology has it.
    pub fn config(&self, ip: &str, port: u16) -> Config {
        Config {
            fail_fast: true,
            username: Some(self.user.clone()),
            password: Some(self.password.clone()),
            server: ServerConfig::new_centralized(ip, port),
            // Dialled at the IP, so that is the name the handshake records (see tls::Served).
            tls: self
                .tls
                .as_ref()
                .map(|t| TlsConnector::from(ClientConfig::clone(&t.config)).into()),
            ..Default::default()
        }
    }

    /// Whether connections made with `other` would log in and handshake the same way: a
    /// long-lived follower restarts when the password or the TLS Secret changes.
    pub fn same_as(&self, other: &Login) -> bool {
        let digest = |l: &Login| l.tls.as_ref().map(|t| t.digest.clone());
        self.user == other.user
            && self.password == other.password
            && self.fallbacks == other.fallbacks
            && digest(self) == digest(other)
    }
}

impl std::fmt::Debug for Login {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Login({}, <redacted>)", self.user)
    }
}

/// A connected member. Dropping it closes the connection.
pub struct Conn {
    client: Client,
    /// Also what MIGRATE logs in to the target with (members share the operator user).
    login: Login,
    /// fred's connection task. It holds the client too, so it would keep the socket open
    /// after the last handle is gone: aborted on drop.
    task: fred::types::ConnectHandle,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Conn {
    /// Connects to `ip:port` as `login`, failing fast: no reconnect policy, one attempt per
    /// command.
    pub async fn connect(ip: &str, port: u16, login: &Login) -> Result<Self, ValkeyError> {
        Self::connect_bounded(ip, port, login, TIMEOUT, TIMEOUT).await
    }

    /// [`Conn::connect`], with `timeout` bounding the connection and each command.
    pub async fn connect_within(
        ip: &str,
        port: u16,
        login: &Login,
        timeout: Duration,
    ) -> Result<Self, ValkeyError> {
        Self::connect_bounded(ip, port, login, timeout, timeout).await
    }

    /// [`Conn::connect`], with `connecting` bounding the TCP connection and, again, the
    /// login, and the usual bound on each command. Bound here, not by a timeout around the
    /// call: fred's connection task, spawned inside, would outlive a cancelled call and keep
    /// the connection open once a slow (frozen) server answers.
    async fn connect_quickly(
        ip: &str,
        port: u16,
        login: &Login,
        connecting: Duration,
    ) -> Result<Self, ValkeyError> {
        Self::connect_bounded(ip, port, login, connecting, TIMEOUT).await
    }

    /// Connects to `ip:port` and asks it `ask`, within [`LOOK_BOUND`]: half of it for the
    /// connection and half for the login (both inside fred), then the whole bound for the
    /// asking. The connection comes back with the answer. After a failure it is closed:
    /// with QUIT when the member answered badly, dropped when it did not answer in time.
    pub async fn look<T>(
        ip: &str,
        port: u16,
        login: &Login,
        ask: impl AsyncFnOnce(&Conn) -> Result<T, ValkeyError>,
    ) -> Result<(Self, T), ValkeyError> {
        let conn = Self::connect_quickly(ip, port, login, LOOK_BOUND / 2).await?;
        match tokio::time::timeout(LOOK_BOUND, ask(&conn)).await {
            Ok(Ok(answer)) => Ok((conn, answer)),
            Ok(Err(e)) => {
                conn.close().await;
                Err(e)
            }
            Err(_) => Err(ValkeyError::new(
                ErrorKind::Unreachable,
                format!("no answer within {LOOK_BOUND:?}"),
            )),
        }
    }

    async fn connect_bounded(
        ip: &str,
        port: u16,
        login: &Login,
        connecting: Duration,
        commands: Duration,
    ) -> Result<Self, ValkeyError> {
        let mut tried = Self::connect_once(ip, port, login, connecting, commands).await;
        for fallback in &login.fallbacks {
            if !matches!(&tried, Err(e) if e.kind == ErrorKind::Login) {
                break;
            }
            // Recorded with the one that worked: MIGRATE logs in to the target with it.
            let previous = Login {
                password: fallback.clone(),
                fallbacks: Vec::new(),
                ..login.clone()
            };
            tried = Self::connect_once(ip, port, &previous, connecting, commands).await;
        }
        tried
    }

    async fn connect_once(
        ip: &str,
        port: u16,
        login: &Login,
        connecting: Duration,
        commands: Duration,
    ) -> Result<Self, ValkeyError> {
        let config = login.config(ip, port);
        let connection = ConnectionConfig {
            connection_timeout: connecting,
            internal_command_timeout: connecting,
            max_command_attempts: 1,
            ..Default::default()
        };
        let perf = PerformanceConfig {
            default_command_timeout: commands,
            ..Default::default()
        };
        let client = Client::new(config, Some(perf), Some(connection), None);
        let task = client.init().await.map_err(to_valkey_error)?;
        Ok(Self {
            client,
            login: login.clone(),
            task,
        })
    }

    async fn raw<R: FromValue>(
        &self,
        command: &'static str,
        args: Vec<Value>,
    ) -> Result<R, ValkeyError> {
        // A connection the server closed (Sentinel's CLIENT KILL when it promotes a
        // replica, say) is never reopened (no reconnect policy); fred would hold the command
        // until its timeout.
        if !self.client.is_connected() {
            return Err(ValkeyError::new(
                ErrorKind::Unreachable,
                format!("{command}: the connection is closed"),
            ));
        }
        self.client
            .custom(
                CustomCommand::new_static(command, ClusterHash::Random, false),
                args,
            )
            .await
            .map_err(to_valkey_error)
    }

    async fn cluster<R: FromValue>(&self, args: Vec<Value>) -> Result<R, ValkeyError> {
        self.raw("CLUSTER", args).await
    }

    async fn sentinel(&self, args: Vec<Value>) -> Result<Value, ValkeyError> {
        self.raw("SENTINEL", args).await
    }

    /// A SENTINEL listing: an array of entries, each one's fields.
    async fn sentinel_list(
        &self,
        what: &'static str,
        name: &str,
    ) -> Result<Vec<Fields>, ValkeyError> {
        match self.sentinel(vec![what.into(), name.into()]).await? {
            Value::Array(entries) => Ok(entries.into_iter().map(fields).collect()),
            other => Err(ValkeyError::new(
                ErrorKind::Protocol,
                format!("SENTINEL {what} answered {other:?}"),
            )),
        }
    }
}

/// What a sentinel says of a name it does not monitor.
const NOT_MONITORED: &str = "No such master";

/// The fields of one SENTINEL entry: a map, or in RESP2 a flat array of names and values.
fn fields(entry: Value) -> Fields {
    match entry {
        Value::Map(map) => map
            .inner()
            .into_iter()
            .filter_map(|(k, v)| Some((k.as_str()?.to_string(), v.as_string()?)))
            .collect(),
        Value::Array(items) => items
            .chunks(2)
            .filter_map(|pair| match pair {
                [k, v] => Some((k.as_string()?, v.as_string()?)),
                _ => None,
            })
            .collect(),
        _ => Fields::new(),
    }
}

impl AclMember for Conn {
    async fn acl_lines(&self) -> Result<Vec<String>, ValkeyError> {
        self.raw("ACL", vec!["LIST".into()]).await
    }

    async fn acl_set(&self, user: &str, args: &[String]) -> Result<(), ValkeyError> {
        let mut all: Vec<Value> = vec!["SETUSER".into(), user.into()];
        all.extend(args.iter().map(|a| Value::from(a.as_str())));
        self.raw::<Value>("ACL", all).await.map(drop)
    }

    async fn acl_del(&self, users: &[String]) -> Result<(), ValkeyError> {
        let mut all: Vec<Value> = vec!["DELUSER".into()];
        all.extend(users.iter().map(|u| Value::from(u.as_str())));
        self.raw::<Value>("ACL", all).await.map(drop)
    }
}

/// A data node's own login (for the operator password's rotation): `masterauth`, the replication
/// password it logs in to its primary with.
pub struct DataLoginOf<'a>(pub &'a Conn);

/// A sentinel's own logins (for the operator password's rotation): `sentinel-pass` to the other
/// sentinels, and `auth-pass` of its group to the data nodes (which cannot be read back:
/// set before `sentinel-pass`, which stands for both).
pub struct SentinelLoginOf<'a> {
    pub conn: &'a Conn,
    pub group: &'a str,
}

/// A member's connection for the operator password's pass.
pub enum OperatorConn<'a> {
    Data(DataLoginOf<'a>),
    Sentinel(SentinelLoginOf<'a>),
}

impl OperatorConn<'_> {
    fn conn(&self) -> &Conn {
        match self {
            Self::Data(d) => d.0,
            Self::Sentinel(s) => s.conn,
        }
    }
}

impl AclMember for OperatorConn<'_> {
    async fn acl_lines(&self) -> Result<Vec<String>, ValkeyError> {
        self.conn().acl_lines().await
    }

    async fn acl_set(&self, user: &str, args: &[String]) -> Result<(), ValkeyError> {
        self.conn().acl_set(user, args).await
    }

    async fn acl_del(&self, users: &[String]) -> Result<(), ValkeyError> {
        self.conn().acl_del(users).await
    }
}

impl OutgoingLogin for OperatorConn<'_> {
    async fn outgoing(&self) -> Result<Option<String>, ValkeyError> {
        match self {
            Self::Data(d) => {
                let got = d.0.config_get(&["masterauth"]).await?;
                Ok(got
                    .into_iter()
                    .find(|(k, _)| k == "masterauth")
                    .map(|(_, v)| v))
            }
            Self::Sentinel(s) => {
                let reply = s
                    .conn
                    .sentinel(vec!["CONFIG".into(), "GET".into(), "sentinel-pass".into()])
                    .await?;
                Ok(fields(reply).remove("sentinel-pass"))
            }
        }
    }

    async fn switch_outgoing(&self, password: &str) -> Result<(), ValkeyError> {
        match self {
            Self::Data(d) => d.0.config_set("masterauth", password).await,
            Self::Sentinel(s) => {
                // One that does not monitor the group yet gets the login with its MONITOR.
                let auth_pass = [("auth-pass".to_string(), password.to_string())];
                match s.conn.sentinel_set(s.group, &auth_pass).await {
                    Err(e) if !e.says(NOT_MONITORED) => return Err(e),
                    _ => {}
                }
                s.conn
                    .sentinel(vec![
                        "CONFIG".into(),
                        "SET".into(),
                        "sentinel-pass".into(),
                        password.into(),
                    ])
                    .await
                    .map(drop)
            }
        }
    }
}

impl RequirePass for Conn {
    async fn set_requirepass(&self, password: &str) -> Result<(), ValkeyError> {
        self.config_set("requirepass", password).await
    }
}

impl Server for Conn {
    async fn info(&self, sections: &[&'static str]) -> Result<String, ValkeyError> {
        self.raw("INFO", sections.iter().map(|s| Value::from(*s)).collect())
            .await
    }

    async fn role(&self) -> Result<String, ValkeyError> {
        let reply: Vec<Value> = self.raw("ROLE", vec![]).await?;
        reply
            .into_iter()
            .next()
            .and_then(|v| v.as_string())
            .ok_or_else(|| ValkeyError::new(ErrorKind::Protocol, "empty ROLE reply"))
    }

    async fn replica_of(&self, primary: Option<(&str, u16)>) -> Result<(), ValkeyError> {
        let args: Vec<Value> = match primary {
            Some((host, port)) => vec![host.into(), i64::from(port).into()],
            None => vec!["NO".into(), "ONE".into()],
        };
        self.raw::<Value>("REPLICAOF", args).await.map(drop)
    }

    async fn pause_writes(&self, millis: u64) -> Result<(), ValkeyError> {
        let millis = i64::try_from(millis).unwrap_or(i64::MAX);
        self.raw::<Value>(
            "CLIENT",
            vec!["PAUSE".into(), millis.into(), "WRITE".into()],
        )
        .await
        .map(drop)
    }

    async fn unpause(&self) -> Result<(), ValkeyError> {
        self.raw::<Value>("CLIENT", vec!["UNPAUSE".into()])
            .await
            .map(drop)
    }

    async fn kill_clients(&self) -> Result<u64, ValkeyError> {
        self.raw(
            "CLIENT",
            vec!["KILL".into(), "TYPE".into(), "normal".into()],
        )
        .await
    }

    async fn config_get(&self, names: &[&str]) -> Result<Vec<(String, String)>, ValkeyError> {
        let mut args: Vec<Value> = vec!["GET".into()];
        args.extend(names.iter().map(|n| Value::from(*n)));
        let reply: Value = self.raw("CONFIG", args).await?;
        Ok(fields(reply).into_iter().collect())
    }

    async fn config_set(&self, name: &str, value: &str) -> Result<(), ValkeyError> {
        self.raw::<Value>("CONFIG", vec!["SET".into(), name.into(), value.into()])
            .await
            .map(drop)
    }

    async fn acl_user(&self, user: &str) -> Result<Option<AclUser>, ValkeyError> {
        let reply: Value = self.raw("ACL", vec!["GETUSER".into(), user.into()]).await?;
        Ok(acl_user(reply))
    }

    async fn acl_setuser(&self, user: &str, rules: &[String]) -> Result<(), ValkeyError> {
        let mut args: Vec<Value> = vec!["SETUSER".into(), user.into()];
        args.extend(rules.iter().map(|r| Value::from(r.as_str())));
        self.raw::<Value>("ACL", args).await.map(drop)
    }

    /// QUIT (dropping the connection closes it too, but QUIT is polite to the server).
    async fn close(self) {
        let _ = self.client.quit().await;
    }
}

impl ClusterNode for Conn {
    async fn cluster_nodes(&self) -> Result<String, ValkeyError> {
        self.cluster(vec!["NODES".into()]).await
    }

    async fn cluster_shards(&self) -> Result<Vec<Vec<String>>, ValkeyError> {
        let reply: Vec<Value> = self.cluster(vec!["SHARDS".into()]).await?;
        Ok(reply.into_iter().map(shard_node_ids).collect())
    }

    async fn cluster_info(&self) -> Result<String, ValkeyError> {
        self.cluster(vec!["INFO".into()]).await
    }

    async fn meet(&self, ip: &str, port: u16, bus_port: u16) -> Result<(), ValkeyError> {
        self.cluster::<Value>(vec![
            "MEET".into(),
            ip.into(),
            i64::from(port).into(),
            i64::from(bus_port).into(),
        ])
        .await
        .map(drop)
    }

    async fn add_slots_ranges(&self, ranges: &[(u16, u16)]) -> Result<(), ValkeyError> {
        let mut args: Vec<Value> = vec!["ADDSLOTSRANGE".into()];
        for (start, end) in ranges {
            args.push(i64::from(*start).into());
            args.push(i64::from(*end).into());
        }
        self.cluster::<Value>(args).await.map(drop)
    }

    async fn replicate(&self, primary_id: &str) -> Result<(), ValkeyError> {
        self.cluster::<Value>(vec!["REPLICATE".into(), primary_id.into()])
            .await
            .map(drop)
    }

    async fn forget(&self, node_id: &str) -> Result<(), ValkeyError> {
        self.cluster::<Value>(vec!["FORGET".into(), node_id.into()])
            .await
            .map(drop)
    }

    async fn reset_soft(&self) -> Result<(), ValkeyError> {
        self.cluster::<Value>(vec!["RESET".into(), "SOFT".into()])
            .await
            .map(drop)
    }

    async fn failover(&self) -> Result<(), ValkeyError> {
        self.cluster::<Value>(vec!["FAILOVER".into()])
            .await
            .map(drop)
    }

    async fn failover_force(&self) -> Result<(), ValkeyError> {
        self.cluster::<Value>(vec!["FAILOVER".into(), "FORCE".into()])
            .await
            .map(drop)
    }

    async fn set_slot(&self, slot: u16, state: SlotState<'_>) -> Result<(), ValkeyError> {
        let mut args: Vec<Value> = vec!["SETSLOT".into(), i64::from(slot).into()];
        match state {
            SlotState::Importing(from) => args.extend(["IMPORTING".into(), from.into()]),
            SlotState::Migrating(to) => args.extend(["MIGRATING".into(), to.into()]),
            SlotState::Node(owner) => args.extend(["NODE".into(), owner.into()]),
            SlotState::Stable => args.push("STABLE".into()),
        }
        self.cluster::<Value>(args).await.map(drop)
    }

    async fn keys_in_slot(&self, slot: u16, count: u32) -> Result<Vec<Key>, ValkeyError> {
        let keys: Vec<Bytes> = self
            .cluster(vec![
                "GETKEYSINSLOT".into(),
                i64::from(slot).into(),
                i64::from(count).into(),
            ])
            .await?;
        Ok(keys.into_iter().map(|k| k.to_vec()).collect())
    }

    /// MIGRATE ... REPLACE AUTH2 ... KEYS: REPLACE, because a key that reached the target
    /// before an interrupted run is the same key; AUTH2, because the target wants a login
    /// (members share the operator user).
    async fn migrate(&self, ip: &str, port: u16, keys: Vec<Key>) -> Result<(), ValkeyError> {
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
        args.extend(keys.into_iter().map(|k| Value::Bytes(k.into())));
        self.raw::<Value>("MIGRATE", args).await.map(drop)
    }

    async fn migrate_slots_atomically(
        &self,
        groups: &[(Vec<(u16, u16)>, String)],
    ) -> Result<(), ValkeyError> {
        let mut args: Vec<Value> = vec!["MIGRATESLOTS".into()];
        for (ranges, node) in groups {
            args.push("SLOTSRANGE".into());
            for (start, end) in ranges {
                args.extend([i64::from(*start).into(), i64::from(*end).into()]);
            }
            args.extend(["NODE".into(), node.as_str().into()]);
        }
        self.cluster::<Value>(args).await.map(drop)
    }

    async fn slot_migrations(&self) -> Result<Vec<Fields>, ValkeyError> {
        let reply: Vec<Value> = self.cluster(vec!["GETSLOTMIGRATIONS".into()]).await?;
        Ok(reply.into_iter().map(fields).collect())
    }
}

impl SentinelNode for Conn {
    async fn sentinel_primary(&self, name: &str) -> Result<Option<Fields>, ValkeyError> {
        match self.sentinel(vec!["MASTER".into(), name.into()]).await {
            Ok(reply) => Ok(Some(fields(reply))),
            Err(e) if e.says(NOT_MONITORED) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn sentinel_primary_addr(
        &self,
        name: &str,
    ) -> Result<Option<(String, u16)>, ValkeyError> {
        let reply: Value = self
            .sentinel(vec!["GET-MASTER-ADDR-BY-NAME".into(), name.into()])
            .await?;
        let Value::Array(parts) = reply else {
            return Ok(None);
        };
        let mut parts = parts.into_iter().filter_map(|v| v.as_string());
        match (parts.next(), parts.next().and_then(|p| p.parse().ok())) {
            (Some(ip), Some(port)) => Ok(Some((ip, port))),
            _ => Err(ValkeyError::new(
                ErrorKind::Protocol,
                "GET-MASTER-ADDR-BY-NAME answered no address and port",
            )),
        }
    }

    async fn sentinel_replicas(&self, name: &str) -> Result<Vec<Fields>, ValkeyError> {
        self.sentinel_list("REPLICAS", name).await
    }

    async fn sentinel_sentinels(&self, name: &str) -> Result<Vec<Fields>, ValkeyError> {
        self.sentinel_list("SENTINELS", name).await
    }

    async fn sentinel_monitor(
        &self,
        name: &str,
        ip: &str,
        port: u16,
        quorum: u32,
    ) -> Result<(), ValkeyError> {
        self.sentinel(vec![
            "MONITOR".into(),
            name.into(),
            ip.into(),
            i64::from(port).into(),
            i64::from(quorum).into(),
        ])
        .await
        .map(drop)
    }

    async fn sentinel_set(
        &self,
        name: &str,
        options: &[(String, String)],
    ) -> Result<(), ValkeyError> {
        let mut args: Vec<Value> = vec!["SET".into(), name.into()];
        for (option, value) in options {
            args.push(option.as_str().into());
            args.push(value.as_str().into());
        }
        self.sentinel(args).await.map(drop)
    }

    async fn sentinel_remove(&self, name: &str) -> Result<(), ValkeyError> {
        self.sentinel(vec!["REMOVE".into(), name.into()])
            .await
            .map(drop)
    }

    async fn sentinel_reset(&self, name: &str) -> Result<(), ValkeyError> {
        self.sentinel(vec!["RESET".into(), name.into()])
            .await
            .map(drop)
    }

    async fn sentinel_failover(&self, name: &str) -> Result<(), ValkeyError> {
        self.sentinel(vec!["FAILOVER".into(), name.into()])
            .await
            .map(drop)
    }
}

/// fred's error in the seam's terms: a refused login, no answer, an error reply or a reply
/// of the wrong shape.
fn to_valkey_error(e: fred::error::Error) -> ValkeyError {
    use fred::error::ErrorKind as Fred;
    let message = e.details().to_string();
    let kind = if *e.kind() == Fred::Auth
        || ["WRONGPASS", "NOAUTH"]
            .iter()
            .any(|code| e.details().contains(code))
    {
        ErrorKind::Login
    } else {
        match e.kind() {
            Fred::IO | Fred::Timeout | Fred::Canceled | Fred::Config => ErrorKind::Unreachable,
            Fred::Parse | Fred::Protocol => ErrorKind::Protocol,
            // An error reply ("ERR ...") is Unknown to fred.
            _ => ErrorKind::Refused,
        }
    };
    ValkeyError::new(kind, message)
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

/// An `ACL GETUSER` reply (a map, or in RESP2 a flat array of keys and values); `None` for
/// the null reply of a user that does not exist.
fn acl_user(reply: Value) -> Option<AclUser> {
    if reply.is_null() {
        return None;
    }
    let strings = |v: Option<Value>| -> Vec<String> {
        match v {
            Some(Value::Array(items)) => items.iter().filter_map(Value::as_string).collect(),
            _ => Vec::new(),
        }
    };
    Some(AclUser {
        enabled: strings(field(reply.clone(), "flags"))
            .iter()
            .any(|f| f == "on"),
        password_hashes: strings(field(reply, "passwords")),
    })
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
    fn sentinel_fields_from_resp2_and_resp3() {
        let flat = Value::Array(vec![
            "ip".into(),
            "10.0.0.1".into(),
            "port".into(),
            6379.into(),
        ]);
        let f = fields(flat);
        assert_eq!(f["ip"], "10.0.0.1");
        assert_eq!(f["port"], "6379");
        assert!(fields(Value::Null).is_empty());
    }

    #[test]
    fn an_acl_user_from_a_resp2_getuser_reply() {
        let list = |items: &[&str]| Value::Array(items.iter().map(|&i| i.into()).collect());
        let reply = Value::Array(vec![
            "flags".into(),
            list(&["on", "sanitize-payload"]),
            "passwords".into(),
            list(&["ab12"]),
            "commands".into(),
            "-@all +psync".into(),
            "selectors".into(),
            list(&[]),
        ]);
        assert_eq!(
            acl_user(reply),
            Some(AclUser {
                enabled: true,
                password_hashes: vec!["ab12".into()],
            })
        );
        let off = Value::Array(vec!["flags".into(), list(&["off"])]);
        assert_eq!(
            acl_user(off),
            Some(AclUser {
                enabled: false,
                password_hashes: vec![],
            })
        );
        assert_eq!(acl_user(Value::Null), None);
    }

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
