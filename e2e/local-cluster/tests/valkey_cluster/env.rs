//! The shared test environment: timeouts and [`Env`] (the test's [`TestRun`] and the
//! cluster APIs) with its helpers.

use std::collections::BTreeMap;
use std::ops::Deref;
use std::time::{Duration, Instant};

use crd_types::ValkeyCluster;
use crd_types::cluster::ValkeyClusterStatus;
use crd_types::names::cluster_member_name;
use crd_types::node::Role;
use e2e_kit::cluster_testing::{
    Access, AckedWriter, ClusterApis, DataSet, Progress, WriterReport, access, ready_status, shape,
    status_matches_valkey, wait_until,
};
use e2e_kit::test_run::TestRun;
use e2e_kit::testing::{events_about, pod_starts};
use kube::ResourceExt;
use local_cluster::controller_pods::Outage;
use serde_json::json;

/// A cluster member as a test names it: its ValkeyNode, announce address and node id.
pub(crate) struct Member {
    pub(crate) name: String,
    pub(crate) ip: String,
    pub(crate) id: String,
}
/// A new cluster: members created, pods started, MEET, slots, replication.
pub(crate) const FORM: Duration = Duration::from_secs(180);
/// A scale step, moving up to a quarter of the keys.
pub(crate) const RESHAPE: Duration = Duration::from_secs(300);
/// A roll of every member, one at a time (readiness is probed every 5 s).
pub(crate) const ROLL: Duration = Duration::from_secs(300);
/// A failover: cluster-node-timeout (the operator's 3 s, or Valkey's 15 s) plus the election.
pub(crate) const FAILOVER: Duration = Duration::from_secs(120);
/// Something that follows promptly from a state already reached.
pub(crate) const SETTLE: Duration = Duration::from_secs(60);

/// `cluster` at Valkey's own cluster-node-timeout (15 s) rather than the operator's 3 s: for
/// a test of what the operator does before Valkey judges a member, which the short default
/// would make a race.
pub(crate) fn at_valkeys_node_timeout(mut cluster: ValkeyCluster) -> ValkeyCluster {
    let config = &mut cluster.spec.common.template.config.0;
    config.insert("cluster-node-timeout".into(), "15000".into());
    cluster
}

/// A local cluster with the operator ([`TestRun`], whose fields it shows) and the cluster
/// APIs of the test's namespace. The run drops last: its processes stop, its run directory goes, then the
/// next test starts.
pub(crate) struct Env {
    pub(crate) apis: ClusterApis,
    run: TestRun,
}

impl Deref for Env {
    type Target = TestRun;

    fn deref(&self) -> &TestRun {
        &self.run
    }
}

impl Env {
    /// The test's namespace on the binary's shared cluster ([`TestRun::start`]).
    pub(crate) async fn start() -> Self {
        Self::on(TestRun::start().await)
    }

    /// On a cluster of the test's own ([`TestRun::start_own`]): for a test that stops the
    /// operator's controllers or changes the Nodes.
    pub(crate) async fn start_own() -> Self {
        Self::on(TestRun::start_own().await)
    }

    fn on(run: TestRun) -> Self {
        Self {
            apis: ClusterApis::new(&run.client, &run.namespace),
            run,
        }
    }

    /// Each member's pod UID and restart count ([`pod_starts`]).
    pub(crate) async fn pod_starts(
        &self,
        members: &[crd_types::ValkeyNode],
    ) -> BTreeMap<String, (String, i32)> {
        pod_starts(&self.apis.pods, members).await.unwrap()
    }

    /// [`wait_until`], failing the test with the last reason on timeout.
    pub(crate) async fn wait<T, F, Fut>(&self, what: &str, timeout: Duration, check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = anyhow::Result<Progress<T>>>,
    {
        wait_until(&self.cluster, what, timeout, check)
            .await
            .unwrap_or_else(|e| panic!("{e:#}"))
    }

    pub(crate) async fn ready(
        &self,
        name: &str,
        timeout: Duration,
    ) -> crd_types::ValkeyClusterStatus {
        self.wait(
            &format!("ValkeyCluster {name} to be Ready"),
            timeout,
            || ready_status(&self.apis, name),
        )
        .await
    }

    /// The ValkeyCluster's status as the API server has it now (empty before the first).
    pub(crate) async fn status(&self, name: &str) -> anyhow::Result<ValkeyClusterStatus> {
        let cluster = self.apis.clusters.get(name).await?;
        Ok(cluster.status.unwrap_or_default())
    }

    /// Shard `shard`'s primary, per the Ready status, and the replica that is to succeed it
    /// (its first other member).
    pub(crate) async fn primary_and_successor(
        &self,
        name: &str,
        access: &Access,
        shard: usize,
    ) -> (Member, Member) {
        let status = self.ready(name, SETTLE).await;
        let shard = &status.shards[shard];
        let primary = shard.primary.clone().unwrap();
        let successor = shard.members.iter().find(|m| m.name != primary).unwrap();
        let member = |name: &str| {
            let ip = access.ip(name).unwrap().to_string();
            let id = access.node_id(&ip).unwrap();
            Member {
                name: name.to_string(),
                ip,
                id,
            }
        };
        (member(&primary), member(&successor.name))
    }

    pub(crate) async fn access(&self, name: &str) -> Access {
        access(&self.apis, name).await.unwrap()
    }

    /// [`Access`] once the members with an address are exactly those of `shards` x
    /// (1 + `replicas`): a removed member's ValkeyNode may outlive Ready for a moment.
    pub(crate) async fn exact_access(&self, name: &str, shards: u32, replicas: u32) -> Access {
        let want: Vec<String> = (0..shards)
            .flat_map(|s| (0..=replicas).map(move |m| cluster_member_name(name, s, m)))
            .collect();
        self.wait(&format!("exactly the members {want:?}"), SETTLE, || async {
            let access = access(&self.apis, name).await?;
            let mut have: Vec<String> = access.members.iter().map(|m| m.name.clone()).collect();
            have.sort();
            let mut sorted = want.clone();
            sorted.sort();
            Ok(if have == sorted {
                Ok(access)
            } else {
                Err(format!("members with an address: {have:?}"))
            })
        })
        .await
    }

    /// Creates the cluster and waits for it to be Ready and healthy.
    pub(crate) async fn create_ready(&self, cluster: ValkeyCluster) -> Access {
        let name = cluster.name_any();
        let (shards, replicas) = (cluster.spec.shards, cluster.spec.replicas_per_shard);
        let started = Instant::now();
        self.apis.create(&cluster).await.unwrap();
        self.ready(&name, FORM).await;
        eprintln!(
            "{name}: {shards}x{replicas} Ready {:?} after creation",
            started.elapsed()
        );
        let access = self
            .exact_access(&name, shards as u32, replicas as u32)
            .await;
        self.healthy(&name, &access, shards as u32, replicas as u32)
            .await;
        access
    }

    /// Valkey agrees with the spec and the status: `--cluster check` passes, every member
    /// serves (`cluster_state:ok`), the shape is right (see [`shape`]) and every member's
    /// status.valkey matches what Valkey says.
    pub(crate) async fn healthy(&self, name: &str, access: &Access, shards: u32, replicas: u32) {
        self.wait("valkey-cli --cluster check to pass", SETTLE, || async {
            Ok(access.check().map(drop))
        })
        .await;
        self.wait("every member to say cluster_state:ok", SETTLE, || async {
            Ok(access.serving())
        })
        .await;
        self.wait(
            &format!("Valkey to have {shards} shards of 1 + {replicas} members"),
            SETTLE,
            || async { shape(access, shards, replicas) },
        )
        .await;
        self.wait(
            "status.valkey and the status' roles to match Valkey",
            SETTLE,
            || status_matches_valkey(&self.apis, access, name),
        )
        .await;
    }

    /// Patches the spec, waits for Ready with the new shape, checks it and reads every key.
    pub(crate) async fn reshape(
        &self,
        name: &str,
        spec: serde_json::Value,
        shards: u32,
        replicas: u32,
        data: &DataSet,
    ) -> Access {
        let events = self.apis.topology_event_count(name).await.unwrap();
        let started = Instant::now();
        self.apis
            .patch(name, json!({ "spec": spec.clone() }))
            .await
            .unwrap();
        self.ready(name, RESHAPE).await;
        eprintln!("{name}: {spec} Ready after {:?}", started.elapsed());
        let access = self.exact_access(name, shards, replicas).await;
        self.healthy(name, &access, shards, replicas).await;
        let started = Instant::now();
        data.verify(&access).await.unwrap();
        eprintln!(
            "{name}: read {} keys back in {:?}",
            data.count,
            started.elapsed()
        );
        self.wait("an Event about the change", SETTLE, || async {
            let now = self.apis.topology_event_count(name).await?;
            Ok(if now > events {
                Ok(())
            } else {
                Err(format!("{now} Events, as before the change"))
            })
        })
        .await;
        access
    }

    /// The members' node ids, for [`Env::gone`].
    pub(crate) fn ids(access: &Access, members: &[String]) -> Vec<(String, String)> {
        members
            .iter()
            .map(|m| {
                let ip = access.ip(m).unwrap_or_else(|| panic!("{m} has no address"));
                (m.clone(), access.node_id(ip).unwrap())
            })
            .collect()
    }

    /// The removed members' ValkeyNodes are gone and no remaining member lists them.
    pub(crate) async fn gone(&self, name: &str, removed: &[(String, String)]) {
        self.wait(
            "the removed members to be deleted and forgotten",
            SETTLE,
            || async {
                for (member, _) in removed {
                    if self.apis.nodes.get_opt(member).await?.is_some() {
                        return Ok(Err(format!("ValkeyNode {member} still exists")));
                    }
                }
                let access = access(&self.apis, name).await?;
                for (viewer, view) in access.views()? {
                    for (member, id) in removed {
                        if view.iter().any(|n| n.id == *id) {
                            return Ok(Err(format!("{viewer} still lists {member} ({id})")));
                        }
                    }
                    if view.len() != access.members.len() {
                        return Ok(Err(format!(
                            "{viewer} lists {} nodes for {} members",
                            view.len(),
                            access.members.len()
                        )));
                    }
                }
                Ok(Ok(()))
            },
        )
        .await;
    }

    /// Takes topology-controller down (see [`Outage`]): nothing acts on the clusters'
    /// topology until [`Env::restart_topology_controller`].
    pub(crate) async fn stop_topology_controller(&self, outage: Outage) {
        self.topology_controller()
            .stop(&self.cluster, outage)
            .await
            .unwrap();
    }

    /// Scales topology-controller back up after [`Env::stop_topology_controller`]; how
    /// long after the scale-up its leader ran its first reconcile (it includes the rollout).
    /// After a crash the new pods wait for the crashed leader's Lease to expire, as they
    /// would in production.
    pub(crate) async fn restart_topology_controller(&self) -> Duration {
        let restarting = Instant::now();
        let controller = self.topology_controller();
        controller.start(&self.cluster).await.unwrap();
        let leader = controller.leader_endpoint(&self.client).await.unwrap();
        let runs = r#"valkey_operator_reconcile_runs_total{controller="topology-controller"}"#;
        loop {
            let text = leader.metrics().await;
            if text.is_ok_and(|t| t.lines().any(|l| l.starts_with(runs))) {
                break;
            }
            assert!(
                restarting.elapsed() < SETTLE,
                "the restarted topology-controller ran no reconcile within {SETTLE:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        restarting.elapsed()
    }

    /// With no `spec.auth`, both Secrets were generated and owned by the cluster: clients
    /// need the default password, the `operator` user has its own, replication logs in
    /// as `replication` (the replicas are in sync, see `healthy`), which may do nothing but
    /// replicate, and the default user runs no admin command (it cannot read `masterauth`
    /// either). A member that
    /// loses the user gets it back live and its replica syncs again.
    pub(crate) async fn passwords_guard(&self, name: &str, access: &Access) {
        let uid = self.apis.clusters.get(name).await.unwrap().uid();
        let mut passwords = Vec::new();
        for secret in [format!("{name}-auth"), format!("{name}-operator")] {
            let s = self.apis.secrets.get(&secret).await.unwrap();
            let owner = &s.owner_references()[0];
            assert_eq!(
                (owner.kind.as_str(), Some(&owner.uid)),
                ("ValkeyCluster", uid.as_ref())
            );
            let value = s.data.unwrap()["password"].0.clone();
            assert_eq!(value.len(), 64, "{secret}: 32 random bytes, hex");
            passwords.push(String::from_utf8(value).unwrap());
        }
        assert_ne!(passwords[0], passwords[1]);
        assert_eq!(access.password.as_deref(), Some(passwords[0].as_str()));
        let ip = &access.members[0].ip;
        let anonymous = Access {
            password: None,
            ..access.clone()
        };
        let refused = anonymous.cli(ip, &["GET", "k"]);
        assert!(refused.starts_with("NOAUTH"), "{refused}");
        let operator = e2e_kit::testing::valkey_cli_as(
            ip,
            Some((Some("operator"), &passwords[1])),
            &["ACL", "WHOAMI"],
        );
        assert_eq!(operator, "operator");
        for m in &access.members {
            assert_eq!(
                access.admin_cli(&m.ip, &["CONFIG", "GET", "masteruser"]),
                "masteruser\nreplication"
            );
        }
        // The clients' user runs no admin command: the masterauth below is the operator's to
        // read.
        e2e_kit::testing::assert_default_user_is_a_clients(|args| access.cli(ip, args), true);
        let masterauth = access.admin_cli(ip, &["CONFIG", "GET", "masterauth"]);
        let masterauth = masterauth.strip_prefix("masterauth\n").unwrap();
        assert!(!passwords.iter().any(|p| p == masterauth));
        let as_replication = |ip: &str, args: &[&str]| {
            e2e_kit::testing::valkey_cli_as(ip, Some((Some("replication"), masterauth)), args)
        };
        assert_eq!(as_replication(ip, &["PING"]), "PONG");
        for refused in [
            &["GET", "k"][..],
            &["SET", "k", "v"],
            &["CONFIG", "GET", "masterauth"],
            &["ACL", "GETUSER", "operator"],
            &["CLUSTER", "NODES"],
        ] {
            let answer = as_replication(ip, refused);
            assert!(answer.starts_with("NOPERM"), "{refused:?}: {answer}");
        }
        let not_operator = e2e_kit::testing::valkey_cli_as(
            ip,
            Some((Some("operator"), masterauth)),
            &["ACL", "WHOAMI"],
        );
        assert!(not_operator.contains("NOAUTH"), "{not_operator}");

        // Every member loses the user (as one whose config predates it would lack it), which
        // also cuts every replica's link: the operator creates it again, live.
        let operator = Some((Some("operator"), passwords[1].as_str()));
        for m in &access.members {
            let deleted = e2e_kit::testing::valkey_cli_as(
                &m.ip,
                operator,
                &["ACL", "DELUSER", "replication"],
            );
            assert_eq!(deleted, "1", "{}", m.ip);
        }
        self.wait(
            "the replication user to be created again",
            SETTLE,
            || async {
                let events = events_about(
                    &self.apis.events,
                    "ValkeyCluster",
                    name,
                    "ReplicationUserCreated",
                )
                .await?;
                Ok(match events.is_empty() {
                    true => Err("no ReplicationUserCreated Event yet".to_string()),
                    false => Ok(()),
                })
            },
        )
        .await;
        self.healthy(name, access, 3, 1).await;
        for m in &access.members {
            assert_eq!(as_replication(&m.ip, &["PING"]), "PONG", "{}", m.ip);
        }
    }

    /// Waits until every member lists `old_id` (`member`, back after `successor` took
    /// over) as a replica of `primary_id`.
    pub(crate) async fn wait_rejoined(
        &self,
        access: &Access,
        member: &str,
        old_id: &str,
        successor: &str,
        primary_id: &str,
    ) {
        self.wait(
            &format!("{member} to rejoin as a replica of {successor}"),
            FAILOVER,
            || async {
                let views = access.views()?;
                let rejoined = views.values().all(|view| {
                    view.iter().any(|n| {
                        n.id == old_id
                            && n.is_replica()
                            && n.primary_id.as_deref() == Some(primary_id)
                    })
                });
                Ok(if rejoined {
                    Ok(())
                } else {
                    Err("not every member lists it as the successor's replica".to_string())
                })
            },
        )
        .await;
    }

    /// `member` (node id `old_id`) is a replica of `primary_id` in every member's
    /// `CLUSTER NODES` and in its `status.valkey`, as a primary that came back after its
    /// replica took over.
    pub(crate) async fn rejoined_as_replica(
        &self,
        access: &Access,
        member: &str,
        old_id: &str,
        primary_id: &str,
    ) {
        for (viewer, view) in access.views().unwrap() {
            let line = view.iter().find(|n| n.id == old_id).unwrap();
            assert!(line.is_replica(), "{viewer}: {line:?}");
            assert_eq!(
                line.primary_id.as_deref(),
                Some(primary_id),
                "{viewer}: {line:?}"
            );
        }
        let valkey = self
            .apis
            .nodes
            .get_status(member)
            .await
            .unwrap()
            .status
            .and_then(|s| s.valkey)
            .unwrap_or_default();
        assert_eq!(valkey.role, Some(Role::Replica), "{valkey:?}");
        assert_eq!(valkey.primary_node_id.as_deref(), Some(primary_id));
    }

    /// Stops `writer` and asserts that every stream wrote and every acknowledged write reads
    /// back; `during` names the writer's time in the report.
    pub(crate) async fn nothing_lost(
        &self,
        name: &str,
        during: &str,
        writer: AckedWriter,
        access: &Access,
    ) -> WriterReport {
        let report = writer.stop().await.unwrap();
        eprintln!("{name}: writer {during}\n{}", report.summary());
        for stream in &report.streams {
            assert!(!stream.acked.is_empty(), "{}", report.summary());
        }
        let lost = report.lost(access).await.unwrap();
        assert!(
            lost.is_empty(),
            "{} of {} acknowledged writes lost, e.g. {:?}",
            lost.len(),
            report.acked(),
            &lost[..lost.len().min(10)]
        );
        report
    }

    /// Ends the test: no controller restarted on the way, then the cluster stops.
    pub(crate) async fn finish(self) {
        self.run.finish().await;
    }
}
