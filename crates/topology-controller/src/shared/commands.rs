//! The seam in front of Valkey: every command topology-controller sends to one member, as
//! role-sized traits: [`Server`] (what every member answers), [`ClusterNode`] and
//! [`SentinelNode`]. The binary implements all three with fred (one plain connection per
//! member); tests use an in-memory fake per topology, each implementing only its role
//! ([`crate::cluster::fake`] for a cluster, [`crate::replication::fake`] for a group). Code that
//! talks to Valkey (asking members, moving slots, carrying out a step) is generic over the
//! traits it needs, so it lives in this library and is tested without a server.

use std::fmt;
use std::future::Future;

use crate::shared::acl::AclUser;

/// A key as Valkey stores it: bytes, not necessarily UTF-8.
pub type Key = Vec<u8>;

/// One entry of a SENTINEL listing: field name to value, as Sentinel prints them.
pub type Fields = std::collections::BTreeMap<String, String>;

/// What every member answers, server or sentinel (a sentinel refuses the server-only
/// commands: `REPLICAOF`, `CONFIG`). Every call is bounded by the implementation's own
/// timeout.
pub trait Server: Send + Sync {
    /// `INFO <section> [<section> ...]` as text, in one round trip.
    fn info(
        &self,
        sections: &[&'static str],
    ) -> impl Future<Output = Result<String, ValkeyError>> + Send;

    /// `ROLE`'s first element: "master", "slave" or "sentinel".
    fn role(&self) -> impl Future<Output = Result<String, ValkeyError>> + Send;

    /// `REPLICAOF host port`, or `REPLICAOF NO ONE` for `None`.
    fn replica_of(
        &self,
        primary: Option<(&str, u16)>,
    ) -> impl Future<Output = Result<(), ValkeyError>> + Send;

    /// `CLIENT PAUSE millis WRITE`: write commands wait (reads go on) and the replication
    /// offset stands still, until `CLIENT UNPAUSE` or the time is up.
    fn pause_writes(&self, millis: u64) -> impl Future<Output = Result<(), ValkeyError>> + Send;

    /// `CLIENT UNPAUSE`.
    fn unpause(&self) -> impl Future<Output = Result<(), ValkeyError>> + Send;

    /// `CLIENT KILL TYPE normal`: every normal client but this connection is disconnected;
    /// how many were.
    fn kill_clients(&self) -> impl Future<Output = Result<u64, ValkeyError>> + Send;

    /// `CONFIG GET name...`: the directives among `names` the server knows, with its values.
    fn config_get(
        &self,
        names: &[&str],
    ) -> impl Future<Output = Result<Vec<(String, String)>, ValkeyError>> + Send;

    /// `CONFIG SET name value`.
    fn config_set(
        &self,
        name: &str,
        value: &str,
    ) -> impl Future<Output = Result<(), ValkeyError>> + Send;

    /// `ACL GETUSER user`: `None` when there is no such user.
    fn acl_user(
        &self,
        user: &str,
    ) -> impl Future<Output = Result<Option<AclUser>, ValkeyError>> + Send;

    /// `ACL SETUSER user rule...`.
    fn acl_setuser(
        &self,
        user: &str,
        rules: &[String],
    ) -> impl Future<Output = Result<(), ValkeyError>> + Send;

    /// Says goodbye (QUIT). Called once for every connection, whatever happened before.
    fn close(self) -> impl Future<Output = ()> + Send
    where
        Self: Sized;
}

/// A server in cluster mode: the cluster bus, slots and their migration.
pub trait ClusterNode: Server {
    /// `CLUSTER NODES`, as text.
    fn cluster_nodes(&self) -> impl Future<Output = Result<String, ValkeyError>> + Send;

    /// `CLUSTER SHARDS` reduced to the node ids of each shard, as this member groups them.
    fn cluster_shards(&self) -> impl Future<Output = Result<Vec<Vec<String>>, ValkeyError>> + Send;

    /// `CLUSTER INFO`, as text.
    fn cluster_info(&self) -> impl Future<Output = Result<String, ValkeyError>> + Send;

    /// `CLUSTER MEET ip port bus_port`.
    fn meet(
        &self,
        ip: &str,
        port: u16,
        bus_port: u16,
    ) -> impl Future<Output = Result<(), ValkeyError>> + Send;

    /// `CLUSTER ADDSLOTSRANGE start end [start end ...]`.
    fn add_slots_ranges(
        &self,
        ranges: &[(u16, u16)],
    ) -> impl Future<Output = Result<(), ValkeyError>> + Send;

    /// `CLUSTER REPLICATE primary_id`.
    fn replicate(&self, primary_id: &str) -> impl Future<Output = Result<(), ValkeyError>> + Send;

    /// `CLUSTER FORGET node_id`.
    fn forget(&self, node_id: &str) -> impl Future<Output = Result<(), ValkeyError>> + Send;

    /// `CLUSTER RESET SOFT`: the node forgets every other node and its slot markers; a
    /// replica turns into an empty primary and drops its data (it keeps its node id).
    fn reset_soft(&self) -> impl Future<Output = Result<(), ValkeyError>> + Send;

    /// `CLUSTER FAILOVER` on a replica: a coordinated hand-over with the primary's agreement,
    /// so no acknowledged write is left behind.
    fn failover(&self) -> impl Future<Output = Result<(), ValkeyError>> + Send;

    /// `CLUSTER FAILOVER FORCE` on a replica whose primary is known not to run: no word from
    /// the primary, but still an election the other primaries vote in (never TAKEOVER).
    fn failover_force(&self) -> impl Future<Output = Result<(), ValkeyError>> + Send;

    /// `CLUSTER SETSLOT slot IMPORTING|MIGRATING|NODE id` or `STABLE`.
    fn set_slot(
        &self,
        slot: u16,
        state: SlotState<'_>,
    ) -> impl Future<Output = Result<(), ValkeyError>> + Send;

    /// `CLUSTER GETKEYSINSLOT slot count`.
    fn keys_in_slot(
        &self,
        slot: u16,
        count: u32,
    ) -> impl Future<Output = Result<Vec<Key>, ValkeyError>> + Send;

    /// `MIGRATE ip port "" 0 <timeout> REPLACE AUTH2 <login> KEYS key...`: atomic per key,
    /// a key disappears here only once the target has it.
    fn migrate(
        &self,
        ip: &str,
        port: u16,
        keys: Vec<Key>,
    ) -> impl Future<Output = Result<(), ValkeyError>> + Send;

    /// `CLUSTER MIGRATESLOTS SLOTSRANGE s e [s e ...] NODE id [SLOTSRANGE ... NODE id ...]`
    /// on the source (Valkey 9.0+): each group becomes one background job moving its ranges
    /// to its node.
    fn migrate_slots_atomically(
        &self,
        groups: &[(Vec<(u16, u16)>, String)],
    ) -> impl Future<Output = Result<(), ValkeyError>> + Send;

    /// `CLUSTER GETSLOTMIGRATIONS` (Valkey 9.0+): this node's slot migration jobs, newest
    /// first, finished ones included, each as its fields.
    fn slot_migrations(&self) -> impl Future<Output = Result<Vec<Fields>, ValkeyError>> + Send;
}

/// A sentinel: what it monitors, and its failover.
pub trait SentinelNode: Server {
    /// `SENTINEL MASTER name` as its fields; `None` when this sentinel does not monitor it.
    fn sentinel_primary(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<Option<Fields>, ValkeyError>> + Send;

    /// `SENTINEL GET-MASTER-ADDR-BY-NAME name`: where this sentinel sends clients now (during
    /// a failover, the promoted replica once it is promoted).
    fn sentinel_primary_addr(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<Option<(String, u16)>, ValkeyError>> + Send;

    /// `SENTINEL REPLICAS name`: the replicas this sentinel knows, with their fields.
    fn sentinel_replicas(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<Vec<Fields>, ValkeyError>> + Send;

    /// `SENTINEL SENTINELS name`: the other sentinels this sentinel knows.
    fn sentinel_sentinels(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<Vec<Fields>, ValkeyError>> + Send;

    /// `SENTINEL MONITOR name ip port quorum`.
    fn sentinel_monitor(
        &self,
        name: &str,
        ip: &str,
        port: u16,
        quorum: u32,
    ) -> impl Future<Output = Result<(), ValkeyError>> + Send;

    /// `SENTINEL SET name option value [option value ...]`.
    fn sentinel_set(
        &self,
        name: &str,
        options: &[(String, String)],
    ) -> impl Future<Output = Result<(), ValkeyError>> + Send;

    /// `SENTINEL REMOVE name`: stop monitoring it, forgetting everything about it.
    fn sentinel_remove(&self, name: &str) -> impl Future<Output = Result<(), ValkeyError>> + Send;

    /// `SENTINEL RESET name`: forget the replicas and sentinels known for it, then find the
    /// current ones again (sentinels within seconds, replicas at the next INFO of the
    /// primary).
    fn sentinel_reset(&self, name: &str) -> impl Future<Output = Result<(), ValkeyError>> + Send;

    /// `SENTINEL FAILOVER name`: promote a replica of this sentinel's choosing without
    /// asking the other sentinels.
    fn sentinel_failover(&self, name: &str)
    -> impl Future<Output = Result<(), ValkeyError>> + Send;
}

/// The argument of `CLUSTER SETSLOT`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotState<'a> {
    Importing(&'a str),
    Migrating(&'a str),
    Node(&'a str),
    Stable,
}

impl fmt::Display for SlotState<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SlotState::Importing(id) => write!(f, "IMPORTING {id}"),
            SlotState::Migrating(id) => write!(f, "MIGRATING {id}"),
            SlotState::Node(id) => write!(f, "NODE {id}"),
            SlotState::Stable => f.write_str("STABLE"),
        }
    }
}

/// What kind of failure a command met.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// A wrong password or unknown user (`WRONGPASS`, `NOAUTH`).
    Login,
    /// No answer: refused, reset, timed out.
    Unreachable,
    /// The server answered with an error reply.
    Refused,
    /// The reply had an unexpected shape.
    Protocol,
}

/// A failed command: its kind and the server's (or client's) words.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ValkeyError {
    pub kind: ErrorKind,
    pub message: String,
}

impl ValkeyError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    /// The server refused with a reply containing `text`.
    pub fn says(&self, text: &str) -> bool {
        self.kind == ErrorKind::Refused && self.message.contains(text)
    }
}

/// Why a step did not complete. Its Display is what status, the Event and the log say.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// A command failed on a member.
    #[error("{command} on {member}: {source}")]
    Command {
        command: String,
        member: String,
        #[source]
        source: ValkeyError,
    },
    /// The step needs a member that did not answer this time.
    #[error("{0} does not answer")]
    NotAnswering(String),
    /// A failover did not complete in time.
    #[error("{member} did not become primary within {seconds}s")]
    FailoverTimedOut { member: String, seconds: u64 },
    /// A replica the step needs in sync is not.
    #[error("{replica} is not in sync with {primary} ({state})")]
    ReplicaNotOnline {
        replica: String,
        primary: String,
        state: String,
    },
    /// A hand-over of a primary did not happen as asked (writes were let through again).
    #[error("{primary} was not handed over: {why}")]
    NotHandedOver { primary: String, why: String },
    /// The Kubernetes half of a step (deleting a member, opening a roll gate).
    #[error("{error}: {}", .error.source)]
    Api {
        #[from]
        error: operator_runtime::ApiError,
    },
}

/// `.on(command, member)` on a command's result.
pub trait CommandResultExt<T> {
    fn on(self, command: impl Into<String>, member: &str) -> Result<T, StepError>;
}

impl<T> CommandResultExt<T> for Result<T, ValkeyError> {
    fn on(self, command: impl Into<String>, member: &str) -> Result<T, StepError> {
        self.map_err(|source| StepError::Command {
            command: command.into(),
            member: member.into(),
            source,
        })
    }
}
