//! Carrying out a replication step over the [`crate::shared::commands::Server`] and
//! [`crate::shared::commands::SentinelNode`] seams (and the Kubernetes half, opening a roll gate, through
//! [`MemberObjects`]).
//!
//! The hand-over ([`Step::HandOver`]) is what plain 8.0.1 processes showed loses nothing
//! (docs/replication.md): `CLIENT PAUSE WRITE` on the primary, until every replica's
//! offset in the primary's INFO equals its own (replicas acknowledge once a second, and
//! Valkey asks for no acknowledgement while writes are paused); `SENTINEL FAILOVER`, so
//! Sentinel promotes a replica and every sentinel learns it; as soon as a sentinel names
//! the promoted one, `REPLICAOF` it and `CLIENT KILL TYPE normal` on the old primary (its
//! clients reconnect through Sentinel or the read-write Service; Sentinel alone would
//! convert it only 8 s later); then `CLIENT UNPAUSE`, whatever happened.
//!
//! `CLIENT PAUSE WRITE` does not stop the primary's replication PING (14 bytes, every
//! `repl-ping-replica-period`; Valkey 8.0 skips it only during its own `FAILOVER`). One
//! sent after the target is promoted reaches the replicas still following the old primary,
//! which are then ahead of the new primary and must full-resync (seen in e2e: writes
//! refused with NOREPLICAS for about 7 s). So the old primary's ping period is set out of
//! reach for the hand-over and restored after it, like the pause.

use std::time::Duration;

use tokio::time::Instant;

use crate::replication::PORT;
use crate::replication::model::{Group, Members};
use crate::replication::plan::Step;
use crate::shared::commands::{CommandResultExt, SentinelNode, StepError};
use crate::shared::connections::Connections;
use crate::shared::execute::{MemberObjects, create_replication_user, set_config};
use crate::shared::info::ReplicationInfo;

/// The login sentinels use on the data nodes (`auth-user`, `auth-pass`).
pub struct DataLogin<'a> {
    pub user: &'a str,
    pub password: &'a str,
}

/// `CLIENT PAUSE`'s own bound: writes resume by themselves if the operator dies mid-way.
pub const PAUSE: Duration = Duration::from_secs(10);
/// The old primary's `repl-ping-replica-period` during a hand-over: Valkey pings when its
/// once-a-second cron count is a multiple of it, so this value never comes round.
pub const QUIET_PING_PERIOD: u32 = i32::MAX as u32;
/// How long the replicas have to hold the paused primary's last offset.
pub const CATCH_UP: Duration = Duration::from_secs(5);
/// How long Sentinel has to promote a replica.
pub const PROMOTION: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(50);

/// Carries out `step` on the members that answered (`conns`). An error is for status and
/// the Event: the next reconcile looks again from scratch.
pub async fn execute<V: SentinelNode, O: MemberObjects>(
    step: &Step,
    group: &Group,
    members: &Members,
    conns: &Connections<V>,
    objects: &O,
    login: &DataLogin<'_>,
) -> Result<(), StepError> {
    match step {
        Step::Wait { .. } | Step::Idle => {}
        Step::ReplicaOf {
            member, ip, demote, ..
        } => {
            let conn = conns.get(member)?;
            conn.replica_of(Some((ip, PORT)))
                .await
                .on(format!("REPLICAOF {ip} {PORT}"), member)?;
            if *demote {
                // Its clients reconnect: through the read-write Service or Sentinel they
                // reach the primary, instead of writing here and reading READONLY.
                conn.kill_clients()
                    .await
                    .on("CLIENT KILL TYPE normal", member)?;
            }
        }
        Step::Monitor { sentinel, ip, .. } => {
            monitor(group, conns.get(sentinel)?, sentinel, ip, login).await?
        }
        Step::Remonitor { sentinel, ip, .. } => {
            let conn = conns.get(sentinel)?;
            conn.sentinel_remove(&group.name)
                .await
                .on(format!("SENTINEL REMOVE {}", group.name), sentinel)?;
            monitor(group, conn, sentinel, ip, login).await?;
        }
        Step::Configure { sentinel, options } => conns
            .get(sentinel)?
            .sentinel_set(&group.name, options)
            .await
            .on(format!("SENTINEL SET {}", group.name), sentinel)?,
        Step::Remove(names) => {
            for member in names {
                objects.delete(member).await?;
            }
        }
        Step::Reset { sentinel } => conns
            .get(sentinel)?
            .sentinel_reset(&group.name)
            .await
            .on(format!("SENTINEL RESET {}", group.name), sentinel)?,
        Step::SetPriority { member, priority } => conns
            .get(member)?
            .config_set("replica-priority", &priority.to_string())
            .await
            .on(format!("CONFIG SET replica-priority {priority}"), member)?,
        Step::SetConfig(changes) => set_config(changes, conns).await?,
        Step::CreateReplicationUser { members, password } => {
            create_replication_user(members, password, conns).await?
        }
        Step::HandOver {
            primary,
            target,
            sentinel,
            ..
        } => hand_over(group, members, conns, primary, target.as_deref(), sentinel).await?,
        Step::AllowRoll { member, revision } => objects.allow_roll(member, revision).await?,
    }
    Ok(())
}

/// `SENTINEL MONITOR` the primary at `ip` on `sentinel`, then its options and login.
async fn monitor<V: SentinelNode>(
    group: &Group,
    conn: &V,
    sentinel: &str,
    ip: &str,
    login: &DataLogin<'_>,
) -> Result<(), StepError> {
    conn.sentinel_monitor(&group.name, ip, PORT, group.options.quorum)
        .await
        .on(
            format!(
                "SENTINEL MONITOR {} {ip} {PORT} {}",
                group.name, group.options.quorum
            ),
            sentinel,
        )?;
    let mut options = group.options.settings();
    options.push(("auth-user".into(), login.user.into()));
    options.push(("auth-pass".into(), login.password.into()));
    // The password is not named in what the error says.
    conn.sentinel_set(&group.name, &options).await.on(
        format!("SENTINEL SET {} (options, login)", group.name),
        sentinel,
    )
}

/// The hand-over of `primary` through `sentinel`; see the module docs.
async fn hand_over<V: SentinelNode>(
    group: &Group,
    members: &Members,
    conns: &Connections<V>,
    primary: &str,
    target: Option<&str>,
    sentinel: &str,
) -> Result<(), StepError> {
    let conn = conns.get(primary)?;
    let guide = conns.get(sentinel)?;
    let address = |name: &str| members.data_node(name).and_then(|d| d.address());
    let old_ip = address(primary).ok_or_else(|| StepError::NotAnswering(primary.to_string()))?;
    let replicas = members
        .data
        .iter()
        .filter(|d| group.wants(d.facts.at) && d.name() != primary && d.answer.is_some())
        .count();
    set_ping_period(conn, primary, QUIET_PING_PERIOD).await?;
    let paused = conn
        .pause_writes(PAUSE.as_millis() as u64)
        .await
        .on(format!("CLIENT PAUSE {} WRITE", PAUSE.as_millis()), primary);
    if let Err(e) = paused {
        // The pause's error is the one to tell; the restore's, if any, follows it in the log.
        if let Err(restore) = set_ping_period(conn, primary, group.ping_period).await {
            tracing::warn!(%restore, "after a refused pause");
        }
        return Err(e);
    }
    let handed = async {
        caught_up(conn, primary, replicas).await?;
        guide
            .sentinel_failover(&group.name)
            .await
            .on(format!("SENTINEL FAILOVER {}", group.name), sentinel)?;
        let new_ip = promoted(guide, &group.name, old_ip, primary, sentinel).await?;
        conn.replica_of(Some((&new_ip, PORT)))
            .await
            .on(format!("REPLICAOF {new_ip} {PORT}"), primary)?;
        conn.kill_clients()
            .await
            .on("CLIENT KILL TYPE normal", primary)?;
        match target {
            Some(t) if address(t) != Some(new_ip.as_str()) => Err(StepError::NotHandedOver {
                primary: primary.to_string(),
                why: format!("Sentinel promoted {new_ip}, not {t}"),
            }),
            _ => Ok(()),
        }
    }
    .await;
    let unpaused = conn.unpause().await.on("CLIENT UNPAUSE", primary);
    let restored = set_ping_period(conn, primary, group.ping_period).await;
    handed.and(unpaused).and(restored)
}

async fn set_ping_period<V: SentinelNode>(
    conn: &V,
    member: &str,
    seconds: u32,
) -> Result<(), StepError> {
    conn.config_set("repl-ping-replica-period", &seconds.to_string())
        .await
        .on(
            format!("CONFIG SET repl-ping-replica-period {seconds}"),
            member,
        )
}

/// Waits until the (paused) primary lists at least `replicas` replicas, every one online at
/// its own offset.
async fn caught_up<V: SentinelNode>(
    conn: &V,
    primary: &str,
    replicas: usize,
) -> Result<(), StepError> {
    let started = Instant::now();
    loop {
        let text = conn
            .info(&["replication"])
            .await
            .on("INFO replication", primary)?;
        let info = ReplicationInfo::parse(&text).map_err(|e| StepError::NotHandedOver {
            primary: primary.to_string(),
            why: e.to_string(),
        })?;
        let behind = info
            .replicas
            .iter()
            .find(|r| r.state != "online" || r.offset != info.repl_offset);
        if info.replicas.len() >= replicas && behind.is_none() {
            return Ok(());
        }
        if started.elapsed() > CATCH_UP {
            let why = match behind {
                Some(r) => format!(
                    "replica {} stayed at offset {} ({}) while the primary is at {}",
                    r.ip, r.offset, r.state, info.repl_offset
                ),
                None => format!("{} of {replicas} replicas connected", info.replicas.len()),
            };
            return Err(StepError::NotHandedOver {
                primary: primary.to_string(),
                why: format!("{why} after {CATCH_UP:?}"),
            });
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Waits until `sentinel` names another primary than `old_ip`; its address.
async fn promoted<V: SentinelNode>(
    guide: &V,
    name: &str,
    old_ip: &str,
    primary: &str,
    sentinel: &str,
) -> Result<String, StepError> {
    let started = Instant::now();
    loop {
        let named = guide
            .sentinel_primary_addr(name)
            .await
            .on(format!("SENTINEL GET-MASTER-ADDR-BY-NAME {name}"), sentinel)?;
        if let Some((ip, _)) = named.filter(|(ip, _)| ip != old_ip) {
            return Ok(ip);
        }
        if started.elapsed() > PROMOTION {
            return Err(StepError::NotHandedOver {
                primary: primary.to_string(),
                why: format!("{sentinel} promoted nobody within {PROMOTION:?}"),
            });
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::replication::fake::{FakeGroup, observe_all};
    use crate::replication::plan::next_step;
    use crate::replication::sim::group;
    use crate::replication::survey::Health;
    use crate::shared::commands::Server;

    /// Records the roll gates opened.
    #[derive(Default)]
    struct Objects {
        allowed: Mutex<Vec<String>>,
    }

    impl MemberObjects for Objects {
        async fn delete(&self, member: &str) -> Result<(), StepError> {
            panic!("deleting {member}");
        }

        async fn allow_roll(&self, member: &str, revision: &str) -> Result<(), StepError> {
            self.allowed
                .lock()
                .unwrap()
                .push(format!("{member} {revision}"));
            Ok(())
        }
    }

    const LOGIN: DataLogin = DataLogin {
        user: "operator",
        password: "secret",
    };

    /// Plans and carries out steps until the planner is idle or waits; the steps taken.
    async fn settle(fake: &FakeGroup, g: &Group) -> Vec<Step> {
        let mut taken = Vec::new();
        for _ in 0..30 {
            let (members, conns) = observe_all(fake, g).await;
            let step = next_step(g, &members, None, None);
            let result = execute(&step, g, &members, &conns, &Objects::default(), &LOGIN).await;
            conns.close().await;
            result.unwrap_or_else(|e| panic!("{step}: {e}"));
            let done = matches!(step, Step::Idle | Step::Wait { .. });
            taken.push(step);
            if done {
                return taken;
            }
        }
        panic!("not settled after 30 steps: {taken:?}")
    }

    #[tokio::test]
    async fn a_new_group_forms_on_the_fake() {
        let fake = FakeGroup::new(3, 3);
        let g = group(3, 3);
        let taken = settle(&fake, &g).await;
        let attached = taken
            .iter()
            .filter(|s| matches!(s, Step::ReplicaOf { .. }))
            .count();
        let monitored = taken
            .iter()
            .filter(|s| matches!(s, Step::Monitor { .. }))
            .count();
        assert_eq!((attached, monitored), (2, 3), "{taken:?}");
        assert_eq!(taken.last(), Some(&Step::Idle));
        assert_eq!(fake.primary_of(1).as_deref(), Some("10.96.0.0"));
        assert_eq!(fake.primary_of(2).as_deref(), Some("10.96.0.0"));
        let (members, conns) = observe_all(&fake, &g).await;
        conns.close().await;
        let health = Health::of(&g, &members, None);
        assert_eq!(health.primary.as_deref(), Ok("g-0"));
        assert_eq!((health.ready_data, health.ready_sentinels), (3, 3));
        assert_eq!(health.sentinel_view, None);
        assert!(
            fake.log()
                .iter()
                .any(|l| l.contains("SENTINEL SET g") && l.contains("auth-user operator")),
            "{:?}",
            fake.log()
        );
        assert_eq!(fake.open_connections(), 0);
    }

    #[tokio::test]
    async fn live_directives_reach_every_data_node_in_one_step_and_then_rest() {
        let fake = FakeGroup::new(3, 1);
        let mut g = group(3, 1);
        let formed = settle(&fake, &g).await;
        assert!(
            !formed.iter().any(|s| matches!(s, Step::SetConfig(_))),
            "nodes already run their config: {formed:?}"
        );
        g.config.0.insert("maxmemory".into(), "1mb".into());
        g.config
            .0
            .insert("min-replicas-to-write".into(), "2".into());
        let taken = settle(&fake, &g).await;
        match &taken[..] {
            [Step::SetConfig(changes), Step::Idle] => {
                assert_eq!(changes.len(), 3, "{changes:?}");
                assert_eq!(
                    changes[0].1,
                    [
                        ("maxmemory".to_string(), "1048576".to_string()),
                        ("min-replicas-to-write".to_string(), "2".to_string())
                    ]
                );
            }
            other => panic!("{other:?}"),
        }
        let got = fake.conn_data(2).config_get(&["maxmemory"]).await.unwrap();
        assert_eq!(got, [("maxmemory".to_string(), "1048576".to_string())]);
    }

    #[tokio::test]
    async fn a_demoted_primary_loses_its_clients() {
        let fake = FakeGroup::new(2, 1);
        let g = group(2, 1);
        settle(&fake, &g).await;
        fake.write(0, 10);
        // Data node 1 serves as primary on its own (started with no sentinel answering).
        fake.conn_data(1).replica_of(None).await.unwrap();
        let taken = settle(&fake, &g).await;
        assert!(
            matches!(&taken[0], Step::ReplicaOf { member, demote: true, .. } if member == "g-1"),
            "{taken:?}"
        );
        assert_eq!(
            fake.clients_killed(1),
            1,
            "only when demoted, not at formation"
        );
    }

    #[tokio::test]
    async fn a_switchover_on_the_fake_moves_the_primary_with_writes_paused_then_resumed() {
        let fake = FakeGroup::new(3, 3);
        let mut g = group(3, 3);
        settle(&fake, &g).await;
        fake.write(0, 100);
        g.switchover = Some(crate::shared::member_facts::SwitchoverRequest {
            id: "s1".into(),
            target: "g-2".into(),
        });
        let taken = settle(&fake, &g).await;
        assert!(
            matches!(&taken[0], Step::SetPriority { member, priority: 1 } if member == "g-2"),
            "{taken:?}"
        );
        assert!(
            taken.iter().any(|s| matches!(s, Step::HandOver { .. })),
            "{taken:?}"
        );
        assert_eq!(fake.named_primary().as_deref(), Some("10.96.0.2"));
        assert_eq!(fake.primary_of(0).as_deref(), Some("10.96.0.2"));
        assert_eq!(fake.primary_of(1).as_deref(), Some("10.96.0.2"));
        assert!(!fake.paused(0), "writes resumed");
        assert_eq!(
            fake.clients_killed(0),
            1,
            "the old primary's clients reconnect"
        );
        let log = fake.log();
        let order: Vec<&str> = [
            "CLIENT PAUSE",
            "SENTINEL FAILOVER",
            "REPLICAOF 10.96.0.2",
            "CLIENT KILL",
            "CLIENT UNPAUSE",
        ]
        .into_iter()
        .filter(|c| log.iter().any(|l| l.contains(c)))
        .collect();
        assert_eq!(order.len(), 5, "{log:?}");
        let at = |c: &str| log.iter().position(|l| l.contains(c)).unwrap();
        assert!(at("CLIENT PAUSE") < at("SENTINEL FAILOVER"));
        assert!(at("SENTINEL FAILOVER") < at("REPLICAOF 10.96.0.2"));
        assert!(at("CLIENT KILL") < at("CLIENT UNPAUSE"));
        // The old primary sends no PING from the pause until it follows the new one, so
        // nobody is left ahead of the new primary.
        let quiet = format!("10.96.0.0 CONFIG SET repl-ping-replica-period {QUIET_PING_PERIOD}");
        assert!(at(&quiet) < at("CLIENT PAUSE"), "{log:?}");
        assert!(
            at("CLIENT UNPAUSE") < at("10.96.0.0 CONFIG SET repl-ping-replica-period 10"),
            "{log:?}"
        );
        assert_eq!(fake.full_resyncs(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_replica_that_does_not_catch_up_stops_the_hand_over_and_writes_resume() {
        let fake = FakeGroup::new(2, 1);
        let g = group(2, 1);
        settle(&fake, &g).await;
        fake.write(0, 100);
        fake.lag(1, 10);
        let (members, conns) = observe_all(&fake, &g).await;
        let step = Step::HandOver {
            primary: "g-0".into(),
            target: None,
            sentinel: "g-sentinel-0".into(),
            reason: crate::shared::roll::FailoverReason::Roll,
        };
        let e = execute(&step, &g, &members, &conns, &Objects::default(), &LOGIN)
            .await
            .unwrap_err();
        conns.close().await;
        assert!(e.to_string().contains("stayed at offset 90"), "{e}");
        assert!(!fake.paused(0), "writes resumed");
        assert!(
            fake.log()
                .last()
                .is_some_and(|l| l.ends_with("CONFIG SET repl-ping-replica-period 10")),
            "the ping period is restored too: {:?}",
            fake.log()
        );
        assert_eq!(fake.named_primary().as_deref(), Some("10.96.0.0"));
        assert!(!fake.log().iter().any(|l| l.contains("SENTINEL FAILOVER")));
    }
}
