//! ValkeyReplication end to end, with every controller and real valkey-server and
//! valkey-sentinel pods: a group forms with one primary, its replicas linked and every
//! sentinel knowing exactly the group, all by Service IP; a frozen primary is failed over by
//! Sentinel, the read-write Service follows and no acknowledged write is lost, and so is a
//! killed one, which waits for the failover instead of serving again; a primary whose pod
//! is deleted gracefully hands over through Sentinel before it stops; with every
//! controller stopped, pods restart in their roles and nothing rolls once the controllers
//! are back; every pod deleted at once comes back with the data and one primary, and
//! Sentinel's lists keep one entry per member through many restarts; a switchover to a named
//! member and a roll of every member (the primary handing over first) lose nothing; data
//! nodes and sentinels scale out and in (a leaving primary handing over first, sentinels
//! forgetting removed members); a primary cut off from the others stops taking writes and
//! rejoins as a replica after the heal; a frozen primary takes Ready away before Sentinel
//! judges it, and Ready returns once it thaws; bad input is refused at admission; the group
//! upgrades 8.0 -> 8.1 -> 9.1 under a writer and refuses a downgrade, restarting nothing.
//!
//! Valkey and Sentinel are always asked directly too (`ROLE`, `SENTINEL REPLICAS` and
//! `SENTINELS`), so a status that claims more than they show fails the tests.
//!
//! The tests share one local cluster, each in a namespace of its own, and run one at a time;
//! those that stop the operator's controllers start their own (`Env::start_own`, see
//! `e2e_kit::test_run`).

mod bad_input;
mod ca_replacement;
mod env;
mod failover;
mod forming;
mod full_restart;
mod memory_only;
mod operator_password;
mod partition;
mod passwords;
mod paused;
mod ready_follows;
mod restarts;
mod scaling;
mod switchover;
mod tls;
mod upgrades;
mod users;
