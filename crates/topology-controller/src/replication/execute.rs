//! Carrying out a replication step over the [`Valkey`] seam.

use crate::commands::{CommandResultExt, StepError, Valkey};
use crate::observe::Connections;
use crate::replication::PORT;
use crate::replication::model::Group;
use crate::replication::plan::Step;

/// The login sentinels use on the data nodes (`auth-user`, `auth-pass`).
pub struct DataLogin<'a> {
    pub user: &'a str,
    pub password: &'a str,
}

/// Carries out `step` on the members that answered (`conns`). An error is for status and
/// the Event: the next reconcile looks again from scratch.
pub async fn execute<V: Valkey>(
    step: &Step,
    group: &Group,
    conns: &Connections<V>,
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
            let conn = conns.get(sentinel)?;
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
            )?;
        }
        Step::Configure { sentinel, options } => conns
            .get(sentinel)?
            .sentinel_set(&group.name, options)
            .await
            .on(format!("SENTINEL SET {}", group.name), sentinel)?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication::fake::{FakeGroup, observe_all};
    use crate::replication::plan::next_step;
    use crate::replication::sim::group;
    use crate::replication::survey::Health;

    const LOGIN: DataLogin = DataLogin {
        user: "operator",
        password: "secret",
    };

    /// Plans and carries out steps until the planner is idle or waits; the steps taken.
    async fn settle(fake: &FakeGroup, g: &Group) -> Vec<Step> {
        let mut taken = Vec::new();
        for _ in 0..30 {
            let (members, conns) = observe_all(fake, g).await;
            let step = next_step(g, &members, None);
            let result = execute(&step, g, &conns, &LOGIN).await;
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
}
