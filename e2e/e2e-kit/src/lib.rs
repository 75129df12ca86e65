//! The e2e test kit, on top of the launcher (`local-cluster`): what the tests in
//! `e2e/local-cluster/tests` and the measurements in `e2e/bench` share.
//!
//! - [`testing`]: the local cluster with the operator installed, valkey-cli, Events,
//!   ValkeyNode fixtures, controllers stopped and restarted, pods and their processes;
//! - [`cluster_testing`]: ValkeyCluster, Valkey's own view of it (`CLUSTER NODES`,
//!   `--cluster check`), key sets and a writer acknowledged by replicas;
//! - [`replication_testing`]: ValkeyReplication, its data nodes and sentinels as Valkey and
//!   Sentinel see them, key sets, writers through the Services or Sentinel;
//! - [`topology`]: what those two share, with the topology as a parameter: the APIs of a
//!   namespace, readiness per the status contract, waits, the fixtures' member template,
//!   Secrets, plain connections for writers;
//! - [`valkey_tls`]: certificates in Secrets and the client side of TLS;
//! - [`network_policy`]: NetworkPolicies evaluated as a plugin would;
//! - [`platform`]: pods under a platform-assigned identity in a restricted namespace, and
//!   what a member's process runs as;
//! - [`sampler`]: a check kept running while a test changes something underneath;
//! - [`test_run`]: a test's namespace on the cluster its binary's tests share (or on its
//!   own), one test at a time, the run directory kept after a failure.

pub mod cluster_testing;
pub mod network_policy;
pub mod platform;
pub mod replication_testing;
pub mod sampler;
pub mod test_run;
pub mod testing;
pub mod topology;
pub mod valkey_tls;
