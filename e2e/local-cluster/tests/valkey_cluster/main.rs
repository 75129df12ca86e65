//! ValkeyCluster end to end, with every controller and real valkey-server pods: a cluster
//! forms, scales out and in (shards and replicas) keeping every key; a killed primary is
//! replaced by its replica and rejoins as a replica, and a requested switchover moves a
//! primary, without losing an acknowledged write; a primary whose pod is evicted hands its
//! shard to its replica before it stops, and the shard's disruption budget holds the
//! replica's eviction meanwhile; `kubectl drain` of a Node holding two primaries hands each
//! over first; a crash-looping primary is replaced by force before
//! Valkey's node-timeout, while a primary only cut off from its peers is left to Valkey's
//! own failover; a frozen primary takes Ready away before Valkey judges it, and
//! Ready returns once it thaws; at the operator's 3 s cluster-node-timeout Valkey fails a
//! frozen primary over, while a primary only slow (stopped 1 s of every 2, a long BGSAVE and
//! a 5 s script beside it) never is; a full restart reforms the cluster with its data;
//! a template change rolls one member at a time without losing an acknowledged write; a
//! topology-controller killed in the middle of a slot migration finishes it on restart; a
//! replica that missed the end of a slot move while syncing keeps a stale slot marker, which
//! topology-controller clears through its primary, the move finished (its primary owns the
//! slot) or abandoned (another shard kept it); bad input is refused at admission, and an image that cannot
//! be pulled halts the roll at its first member while the cluster keeps serving; the same
//! cluster forms on every Valkey version the local registry has an image of (8.0, 8.1, 9.1);
//! it upgrades 8.0 -> 8.1 -> 9.1 under a writer, member by member, and refuses a downgrade
//! past the data format and a directive the image's version does not know, restarting
//! nothing; on 9.1 slots move with atomic slot migration, through a controller killed
//! mid-job, with no slot ever half open.
//!
//! Valkey is always asked directly too (`CLUSTER NODES`, `valkey-cli --cluster check`, reads
//! of every key), so a status that claims more than Valkey shows fails the tests.
//!
//! The tests share one local cluster, each in a namespace of its own, and run one at a time;
//! those that stop the operator's controllers or cordon a Node start their own
//! (`Env::start_own`, see `e2e_kit::test_run`).

mod atomic_migration;
mod bad_input;
mod ca_replacement;
mod drain;
mod env;
mod failover;
mod forced_failover;
mod frozen_primary;
mod full_restart;
mod memory_only;
mod mid_migration;
mod operator_password;
mod partition;
mod passwords;
mod paused;
mod planned_departure;
mod ready_follows;
mod rolling_update;
mod scaling;
mod stale_marker;
mod tls;
mod upgrades;
mod versions;
