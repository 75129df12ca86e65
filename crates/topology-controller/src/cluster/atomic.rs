//! Moving slots with Valkey's atomic slot migration (9.0+, `CLUSTER MIGRATESLOTS`): the
//! source streams the slots' keys to the target in the background and hands the slots over
//! in one step, so clients see no ASK redirects and no half-moved slot, and replicas follow
//! through replication. One command per source, one job per target (several ranges each).
//!
//! Valkey runs the jobs on its own: a controller that dies leaves them running, and
//! `CLUSTER GETSLOTMIGRATIONS` reports them to the next one (the planner waits while any is in
//! flight). A failed or cancelled job leaves its slots with the source, keys and all
//! (measured on 9.1.2, target killed mid-snapshot), so the plan simply moves them again.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::future::join_all;
use tokio::time::Instant;

use crate::cluster::migrate::{End, Moved, Stopped};
use crate::cluster::slot_jobs::SlotJob;
use crate::cluster::slots::{Move, slot_count};
use crate::shared::commands::{ClusterNode, CommandResultExt, ErrorKind, StepError, ValkeyError};

/// How often a running migration's jobs are looked at.
const POLL: Duration = Duration::from_millis(100);

/// One `MIGRATESLOTS`: per target member, the ranges of its job.
pub type Groups<'a> = BTreeMap<&'a str, Vec<(u16, u16)>>;

/// The moves as one `MIGRATESLOTS` per source member.
pub fn commands(moves: &[Move<String>]) -> BTreeMap<&str, Groups<'_>> {
    let mut by_source: BTreeMap<&str, Groups<'_>> = BTreeMap::new();
    for m in moves {
        by_source
            .entry(m.from.as_str())
            .or_default()
            .entry(m.to.as_str())
            .or_default()
            .push(m.slots);
    }
    by_source
}

/// Starts the moves (one command per source) and follows their jobs for at most `budget`:
/// done when every job ended; `Stopped::Budget` while some still run (the planner then
/// waits for them). A job that failed is the step's error, with Valkey's words.
pub async fn migrate<V: ClusterNode>(
    moves: &[Move<String>],
    ends: &[End<'_, V>],
    budget: Duration,
) -> Result<Moved, StepError> {
    let end = |name: &str| {
        ends.iter()
            .find(|e| e.name == name)
            .ok_or_else(|| StepError::NotAnswering(name.to_string()))
    };
    let started = Instant::now();
    let mut sources = Vec::new();
    for (source, targets) in commands(moves) {
        let source = end(source)?;
        let groups: Vec<(Vec<(u16, u16)>, String)> = targets
            .into_iter()
            .map(|(target, ranges)| Ok((ranges, end(target)?.id.to_string())))
            .collect::<Result<_, StepError>>()?;
        let command = describe(&groups);
        // Jobs listed before the command are not this step's.
        let before: BTreeSet<String> = jobs(source).await?.into_iter().map(|j| j.name).collect();
        source
            .conn
            .migrate_slots_atomically(&groups)
            .await
            .on(command.clone(), source.name)?;
        sources.push((source, before, groups.len(), command));
    }
    loop {
        let looks = join_all(sources.iter().map(|(source, before, _, _)| async move {
            let now = jobs(source).await?;
            Ok::<_, StepError>(
                now.into_iter()
                    .filter(|j| j.export && !before.contains(&j.name))
                    .collect::<Vec<_>>(),
            )
        }))
        .await;
        let mut moved = 0;
        let mut running = false;
        for ((source, _, expected, command), look) in sources.iter().zip(looks) {
            let mine = look?;
            if let Some(failed) = mine.iter().find(|j| !j.in_flight() && j.state != "success") {
                return Err(StepError::Command {
                    command: command.clone(),
                    member: source.name.to_string(),
                    source: ValkeyError::new(
                        ErrorKind::Refused,
                        format!(
                            "slot migration {} of {} {}: {}",
                            failed.name, failed.slot_ranges, failed.state, failed.message
                        ),
                    ),
                });
            }
            running |= mine.len() < *expected || mine.iter().any(SlotJob::in_flight);
            moved += mine
                .iter()
                .filter(|j| j.state == "success")
                .map(SlotJob::slots)
                .sum::<usize>();
        }
        if !running {
            return Ok(Moved {
                slots: moved,
                keys: None,
                stopped: None,
            });
        }
        if started.elapsed() >= budget {
            return Ok(Moved {
                slots: moved,
                keys: None,
                stopped: Some(Stopped::Budget),
            });
        }
        tokio::time::sleep(POLL).await;
    }
}

async fn jobs<V: ClusterNode>(end: &End<'_, V>) -> Result<Vec<SlotJob>, StepError> {
    let fields = end
        .conn
        .slot_migrations()
        .await
        .on("CLUSTER GETSLOTMIGRATIONS", end.name)?;
    Ok(fields.iter().filter_map(SlotJob::parse).collect())
}

/// The command, in words.
fn describe(groups: &[(Vec<(u16, u16)>, String)]) -> String {
    let slots: usize = groups.iter().map(|(ranges, _)| slot_count(ranges)).sum();
    format!(
        "CLUSTER MIGRATESLOTS ({slots} slots to {} nodes)",
        groups.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::fake::{FakeCluster, FakeConn};
    use crate::cluster::slot_jobs::all_support;
    use crate::shared::member_facts::Address;
    use crd_types::versions::Version;

    fn moving(first: u16, last: u16, from: &str, to: &str) -> Move<String> {
        Move {
            slots: (first, last),
            from: from.into(),
            to: to.into(),
        }
    }

    #[test]
    fn one_command_per_source_one_group_per_target() {
        let moves = [
            moving(0, 99, "a", "c"),
            moving(200, 299, "a", "c"),
            moving(300, 399, "a", "d"),
            moving(5000, 5099, "b", "c"),
        ];
        let commands = commands(&moves);
        assert_eq!(commands.len(), 2);
        assert_eq!(commands["a"]["c"], [(0, 99), (200, 299)]);
        assert_eq!(commands["a"]["d"], [(300, 399)]);
        assert_eq!(commands["b"]["c"], [(5000, 5099)]);
        assert!(all_support([
            Some(Version::new(9, 0)),
            Some(Version::new(9, 1))
        ]));
        assert!(!all_support([
            Some(Version::new(9, 1)),
            Some(Version::new(8, 1))
        ]));
        assert!(!all_support([Some(Version::new(9, 1)), None]));
    }

    /// A connection to and the address of each of `ids`.
    fn connect(cluster: &FakeCluster, ids: &[String]) -> (Vec<FakeConn>, Vec<Address>) {
        ids.iter()
            .map(|id| {
                let (ip, port) = cluster.address(id);
                let address = Address {
                    ip,
                    port,
                    bus_port: port + 10_000,
                };
                (cluster.conn(id), address)
            })
            .unzip()
    }

    fn ends<'a>(
        ids: &'a [String],
        conns: &'a [FakeConn],
        addresses: &'a [Address],
    ) -> Vec<End<'a, FakeConn>> {
        ids.iter()
            .zip(conns)
            .zip(addresses)
            .map(|((id, conn), address)| End {
                name: id,
                conn,
                id,
                address,
                replicas: 0,
            })
            .collect()
    }

    #[tokio::test]
    async fn moves_slots_with_their_keys_in_one_job_per_target() {
        let (cluster, ids) = FakeCluster::formed(2, 0);
        for id in &ids {
            cluster.set_version(id, Version::new(9, 1));
        }
        cluster.load(5, 30);
        cluster.load(7, 10);
        let (conns, addresses) = connect(&cluster, &ids);
        let ends = ends(&ids, &conns, &addresses);
        let moves = [
            moving(0, 9, &ids[0], &ids[1]),
            moving(20, 29, &ids[0], &ids[1]),
        ];
        let moved = migrate(&moves, &ends, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(
            moved,
            Moved {
                slots: 20,
                keys: None,
                stopped: None
            }
        );
        assert_eq!(cluster.owner(5).as_deref(), Some(ids[1].as_str()));
        assert_eq!(cluster.owner(25).as_deref(), Some(ids[1].as_str()));
        assert_eq!(cluster.owner(15).as_deref(), Some(ids[0].as_str()));
        assert_eq!(cluster.keys(&ids[1]).get(&5), Some(&30));
        assert_eq!(cluster.keys(&ids[0]).get(&5), None);
        let sent: Vec<String> = cluster
            .log()
            .into_iter()
            .filter(|c| c.contains("MIGRATESLOTS"))
            .collect();
        assert_eq!(sent.len(), 1, "{sent:?}");
        assert!(
            sent[0].ends_with(&format!("SLOTSRANGE 0 9 20 29 NODE {}", ids[1])),
            "{sent:?}"
        );
        // No classic marker was ever set.
        assert!(!cluster.log().iter().any(|c| c.contains("SETSLOT")));
    }

    #[tokio::test]
    async fn jobs_still_running_when_the_budget_ends_are_left_to_valkey() {
        let (cluster, ids) = FakeCluster::formed(2, 0);
        for id in &ids {
            cluster.set_version(id, Version::new(9, 1));
        }
        cluster.hold_slot_migrations();
        let (conns, addresses) = connect(&cluster, &ids);
        let ends = ends(&ids, &conns, &addresses);
        let moves = [moving(0, 9, &ids[0], &ids[1])];
        let moved = migrate(&moves, &ends, Duration::from_millis(250))
            .await
            .unwrap();
        assert_eq!(
            moved,
            Moved {
                slots: 0,
                keys: None,
                stopped: Some(Stopped::Budget)
            }
        );
        assert_eq!(cluster.owner(5).as_deref(), Some(ids[0].as_str()));
        cluster.finish_slot_migrations();
        assert_eq!(cluster.owner(5).as_deref(), Some(ids[1].as_str()));
    }

    #[tokio::test]
    async fn a_job_that_fails_is_the_steps_error_in_valkeys_words() {
        let (cluster, ids) = FakeCluster::formed(2, 0);
        cluster.set_version(&ids[0], Version::new(9, 1));
        let (conns, addresses) = connect(&cluster, &ids);
        let ends = ends(&ids, &conns, &addresses);
        let moves = [moving(0, 9, &ids[0], &ids[1])];
        let err = migrate(&moves, &ends, Duration::from_secs(5))
            .await
            .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("failed: Received error during handshake"),
            "{text}"
        );
        assert_eq!(cluster.owner(5).as_deref(), Some(ids[0].as_str()));
    }
}
