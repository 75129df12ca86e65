//! Test support for the planner and status: a group `g` built by hand. Data node `i`
//! announces `10.96.0.<i>`, sentinel `j` `10.96.1.<j>`.

use crd_types::conditions::reasons::Waiting;
use crd_types::config::ValkeyConfig;
use crd_types::node::Role;

use crate::replication::PORT;
use crate::replication::model::*;
use crate::replication::plan::Step;
use crate::shared::fake::settled_revisions;
use crate::shared::info::{ConnectedReplica, PrimaryLink, ReplicationInfo};

pub fn ip(i: u32) -> String {
    format!("10.96.0.{i}")
}

pub fn sentinel_ip(j: u32) -> String {
    format!("10.96.1.{j}")
}

/// Group `g` with `data` data nodes and `sentinels` sentinels, quorum 2 (1 with one).
pub fn group(data: u32, sentinels: u32) -> Group {
    Group {
        name: "g".into(),
        data_nodes: data,
        sentinels,
        options: options(sentinels.min(2)),
        switchover: None,
        replica_priority: DEFAULT_PRIORITY,
        ping_period: DEFAULT_PING_PERIOD,
        // What data_config gives a spec with `data` data nodes and no config.
        config: ValkeyConfig(
            [
                ("min-replicas-max-lag".to_string(), "10".to_string()),
                (
                    "min-replicas-to-write".to_string(),
                    if data > 1 { "1" } else { "0" }.to_string(),
                ),
            ]
            .into(),
        ),
        image: crd_types::template::DEFAULT_IMAGE.into(),
        replication_password: None,
    }
}

pub fn options(quorum: u32) -> SentinelOptions {
    SentinelOptions {
        quorum,
        down_after_ms: 5000,
        failover_timeout_ms: 60000,
        parallel_syncs: 1,
    }
}

fn facts(at: At) -> Facts {
    let (name, address) = match at {
        At::Data(i) => (format!("g-{i}"), ip(i)),
        At::Sentinel(j) => (format!("g-sentinel-{j}"), sentinel_ip(j)),
    };
    Facts {
        pod: Some(format!("{name}-0")),
        name,
        at,
        address: Some(address),
        ready: true,
        revisions: settled_revisions(),
        told_monitored: true,
    }
}

/// Data node `i` serving as primary with `replicas` (data nodes numbered from 0, skipping
/// `i`) online.
pub fn data_primary(i: u32, replicas: u32) -> DataNode {
    let others: Vec<u32> = (0..).filter(|r| *r != i).take(replicas as usize).collect();
    DataNode {
        facts: facts(At::Data(i)),
        answer: Some(DataAnswer {
            replication: ReplicationInfo {
                role: Role::Primary,
                connected_replicas: replicas,
                replicas: others
                    .iter()
                    .map(|r| ConnectedReplica {
                        ip: ip(*r),
                        port: PORT,
                        state: "online".into(),
                        offset: 100,
                        lag: 0,
                    })
                    .collect(),
                repl_offset: 100,
                primary: None,
            },
            run_id: Some(format!("run-{i}")),
            version: Some("8.0.1".into()),
            priority: None,
            live_config: None,
            replication_user: None,
        }),
    }
}

/// Data node `i`, an in-sync replica of data node `primary`.
pub fn data_replica(i: u32, primary: u32) -> DataNode {
    DataNode {
        facts: facts(At::Data(i)),
        answer: Some(DataAnswer {
            replication: ReplicationInfo {
                role: Role::Replica,
                connected_replicas: 0,
                replicas: vec![],
                repl_offset: 100,
                primary: Some(PrimaryLink {
                    host: ip(primary),
                    port: PORT,
                    link_up: true,
                    sync_in_progress: false,
                    repl_offset: 100,
                }),
            },
            run_id: Some(format!("run-{i}")),
            version: Some("8.0.1".into()),
            priority: Some(100),
            live_config: None,
            replication_user: None,
        }),
    }
}

/// Sentinel `j` answering; monitoring `primary` (knowing the other data nodes and the other
/// sentinels of a group of `data` + `sentinels`) when given.
pub fn sentinel(j: u32, primary: Option<u32>, data: u32, sentinels: u32) -> Sentinel {
    let monitored = primary.map(|p| Monitored {
        primary: (ip(p), PORT),
        flags: vec!["master".into()],
        options: options(sentinels.min(2)),
        replicas: (0..data)
            .filter(|i| *i != p)
            .map(|i| Peer {
                ip: ip(i),
                port: PORT,
                flags: vec!["slave".into()],
                priority: Some(100),
            })
            .collect(),
        sentinels: (0..sentinels)
            .filter(|o| *o != j)
            .map(|o| Peer {
                ip: sentinel_ip(o),
                port: 26379,
                flags: vec!["sentinel".into()],
                priority: None,
            })
            .collect(),
    });
    Sentinel {
        facts: facts(At::Sentinel(j)),
        answer: Some(SentinelAnswer {
            version: Some("8.0.1".into()),
            run_id: Some(format!("sentinel-run-{j}")),
            monitored,
        }),
    }
}

/// A new group: every data node an empty primary (offset 0), no sentinel monitoring.
pub fn fresh(data: u32, sentinels: u32) -> Members {
    let empty = |i| {
        let mut d = data_primary(i, 0);
        d.answer.as_mut().unwrap().replication.repl_offset = 0;
        d
    };
    Members {
        data: (0..data).map(empty).collect(),
        sentinels: (0..sentinels)
            .map(|j| sentinel(j, None, data, sentinels))
            .collect(),
    }
}

/// Data node 0 primary with the others in sync, no sentinel monitoring yet.
pub fn formed_unmonitored(data: u32, sentinels: u32) -> Members {
    Members {
        data: (0..data)
            .map(|i| {
                if i == 0 {
                    data_primary(0, data - 1)
                } else {
                    data_replica(i, 0)
                }
            })
            .collect(),
        sentinels: (0..sentinels)
            .map(|j| sentinel(j, None, data, sentinels))
            .collect(),
    }
}

/// A healthy group: data node 0 primary, every sentinel monitoring it and knowing everyone.
pub fn formed(data: u32, sentinels: u32) -> Members {
    let mut m = formed_unmonitored(data, sentinels);
    m.sentinels = (0..sentinels)
        .map(|j| sentinel(j, Some(0), data, sentinels))
        .collect();
    m
}

/// Data node `p` becomes primary after a failover: the other data nodes follow it and every
/// sentinel names it.
pub fn promote(m: &mut Members, p: u32) {
    let (data, sentinels) = (m.data.len() as u32, m.sentinels.len() as u32);
    for (i, d) in m.data.iter_mut().enumerate() {
        let i = i as u32;
        *d = if i == p {
            data_primary(p, data - 1)
        } else {
            data_replica(i, p)
        };
    }
    for (j, s) in m.sentinels.iter_mut().enumerate() {
        *s = sentinel(j as u32, Some(p), data, sentinels);
    }
}

/// What sentinel `j` says of the group, to change in a test.
pub fn monitored_mut(m: &mut Members, j: usize) -> &mut Monitored {
    m.sentinels[j]
        .answer
        .as_mut()
        .expect("the sentinel answers")
        .monitored
        .as_mut()
        .expect("it monitors the group")
}

/// The reason and message of a wait.
pub fn wait_of(step: Step) -> (Waiting, String) {
    match step {
        Step::Wait { reason, message } => (reason, message),
        other => panic!("not a wait: {other:?}"),
    }
}
