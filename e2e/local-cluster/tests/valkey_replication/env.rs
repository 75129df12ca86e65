//! The shared test environment: timeouts and [`Env`] (the test's [`TestRun`] and the
//! replication APIs) with its helpers.

use std::ops::Deref;
use std::time::{Duration, Instant};

use crd_types::ValkeyReplication;
use e2e_kit::replication_testing::{
    GroupAccess, GroupWriter, GroupWriterReport, Progress, ReplicationApis, access, ready_status,
    wait_until,
};
use e2e_kit::test_run::TestRun;
use kube::ResourceExt;

/// A new group: members created, pods started, replicas attached, sentinels monitoring.
pub(crate) const FORM: Duration = Duration::from_secs(180);
/// A failover: down-after-milliseconds, the election, the operator following.
pub(crate) const FAILOVER: Duration = Duration::from_secs(120);
/// Something that follows promptly from a state already reached.
pub(crate) const SETTLE: Duration = Duration::from_secs(60);
/// Lines of each pod's log a failed wait prints.
const POD_LOG_LINES: i64 = 12;

/// A local cluster with the operator ([`TestRun`], whose fields it shows) and the
/// replication APIs of the test's namespace. The run drops last: its processes stop, its run directory
/// goes, then the next test starts.
pub(crate) struct Env {
    pub(crate) apis: ReplicationApis,
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
            apis: ReplicationApis::new(&run.client, &run.namespace),
            run,
        }
    }

    /// [`wait_until`], failing the test with the last reason on timeout.
    pub(crate) async fn wait<T, F, Fut>(&self, what: &str, timeout: Duration, check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = anyhow::Result<Progress<T>>>,
    {
        match wait_until(&self.cluster, what, timeout, check).await {
            Ok(value) => value,
            Err(e) => panic!("{e:#}\n{}", self.pod_log_tails(POD_LOG_LINES).await),
        }
    }

    /// The last `lines` of each pod's log in the test's namespace (through the API server, as `kubectl
    /// logs`): what Sentinel and Valkey did is half of any failed wait.
    async fn pod_log_tails(&self, lines: i64) -> String {
        let Ok(client) = self.cluster.client().await else {
            return "(no client for the pod logs)".into();
        };
        let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
            kube::Api::namespaced(client.clone(), &self.namespace);
        let Ok(list) = pods.list(&Default::default()).await else {
            return "(the pods could not be listed)".into();
        };
        let mut out = String::new();
        for pod in list {
            let name = pod.name_any();
            let params = kube::api::LogParams {
                tail_lines: Some(lines),
                ..Default::default()
            };
            let log = pods
                .logs(&name, &params)
                .await
                .unwrap_or_else(|e| format!("(no log: {e})"));
            out.push_str(&format!("pod {name}'s log ends:\n{log}\n"));
        }
        out.push_str(&self.topology_controller().leader_log(&client, lines).await);
        out
    }

    pub(crate) async fn ready(
        &self,
        name: &str,
        timeout: Duration,
    ) -> crd_types::ValkeyReplicationStatus {
        self.wait(
            &format!("ValkeyReplication {name} to be Ready"),
            timeout,
            || ready_status(&self.apis, name),
        )
        .await
    }

    /// Creates the group, waits for Ready and checks Valkey and Sentinel agree with it.
    pub(crate) async fn create_ready(&self, group: ValkeyReplication) -> GroupAccess {
        let name = group.name_any();
        let started = Instant::now();
        self.apis.create(&group).await.unwrap();
        let status = self.ready(&name, FORM).await;
        eprintln!(
            "{name}: {} data nodes + {} sentinels Ready {:?} after creation",
            group.spec.replicas,
            group.spec.sentinel.replicas,
            started.elapsed()
        );
        let access = access(&self.apis, &name).await.unwrap();
        let primary = status.current_primary.unwrap();
        self.healthy(&access, &primary).await;
        access
    }

    /// Valkey and Sentinel agree with status: `primary` serves as the one primary, every
    /// other data node replicates it with its link up, every sentinel names it and lists
    /// exactly the other data nodes and sentinels.
    pub(crate) async fn healthy(&self, access: &GroupAccess, primary: &str) {
        self.wait(
            &format!("Valkey and Sentinel to agree that {primary} is primary"),
            SETTLE,
            || async { Ok(agrees(access, primary)) },
        )
        .await;
    }

    /// Waits until status says Ready, names `primary` (when given), Valkey and Sentinel agree
    /// with it and the read-write Service leads to it. Ready follows the role label at once,
    /// and the Service's proxy follows it on its own watch: in CI of feaf402 a read right after
    /// a full restart's Ready was reset, the new primary pod not yet routed. Nor does agreement
    /// alone tell a status written before a change from one after it when the change leaves
    /// Valkey's roles as they were (forced: topology-controller stopped across a full restart
    /// leaves status Ready and the new primary pod unlabelled).
    pub(crate) async fn ready_agreeing(
        &self,
        name: &str,
        primary: Option<&str>,
        timeout: Duration,
    ) -> crd_types::ValkeyReplicationStatus {
        self.wait(
            &format!("ValkeyReplication {name} to be Ready, agreeing with Valkey"),
            timeout,
            || async {
                let status = match ready_status(&self.apis, name).await? {
                    Ok(status) => status,
                    Err(why) => return Ok(Err(why)),
                };
                let named = status.current_primary.clone().unwrap_or_default();
                if primary.is_some_and(|p| p != named) {
                    return Ok(Err(format!("currentPrimary is {named}, not {primary:?}")));
                }
                let access = access(&self.apis, name).await?;
                if let Err(why) = agrees(&access, &named) {
                    return Ok(Err(why));
                }
                let Some(service) = access.service_ip.as_deref() else {
                    return Ok(Err("the read-write Service has no ClusterIP yet".into()));
                };
                Ok(self
                    .serves_as_primary(&access, service, &named)
                    .map(|()| status))
            },
        )
        .await
    }

    /// Whether `ip` (a Service) reaches `member` serving as primary: `ROLE` says master and
    /// the run id is the member's own.
    pub(crate) fn serves_as_primary(
        &self,
        access: &GroupAccess,
        ip: &str,
        member: &str,
    ) -> Progress<()> {
        let role = access.role(ip).map_err(|e| format!("{e:#}"))?.0;
        let theirs = access.run_id(access.ip(member).ok_or("no such member")?);
        let here = access.run_id(ip);
        if role == "master" && here.is_some() && here == theirs {
            Ok(())
        } else {
            Err(format!(
                "{ip} answers {role} with run id {here:?}, {member} has {theirs:?}"
            ))
        }
    }

    /// Waits until every member has been told the group is monitored and node-controller
    /// has rendered that (so a pod that starts now reads it).
    pub(crate) async fn contexts_monitored(&self, name: &str) {
        self.wait(
            "every member to be told the group is monitored",
            SETTLE,
            || async {
                for node in self.apis.members(name).await? {
                    let told = node.spec.replication.as_ref().is_some_and(|r| r.monitored);
                    let rendered = node
                        .status
                        .as_ref()
                        .and_then(|s| s.workload.as_ref())
                        .and_then(|w| w.observed_generation)
                        == node.metadata.generation;
                    if !(told && rendered) {
                        return Ok(Err(format!(
                            "{}: told {told}, rendered {rendered}",
                            node.name_any()
                        )));
                    }
                }
                Ok(Ok(()))
            },
        )
        .await
    }

    /// Ends the test: no controller restarted on the way, then the cluster stops.
    pub(crate) async fn finish(self) {
        self.run.finish().await;
    }
}

/// Whether Valkey and Sentinel agree that `primary` is the group's primary; see
/// [`Env::healthy`].
pub(crate) fn agrees(access: &GroupAccess, primary: &str) -> Progress<()> {
    let primary_ip = access.ip(primary).ok_or("no such member")?.to_string();
    access.agree_on(&primary_ip)
}

/// Stops the writers and checks every acknowledged write reads back on `access`.
pub(crate) async fn nothing_lost(
    name: &str,
    writers: impl IntoIterator<Item = GroupWriter>,
    access: &GroupAccess,
) -> Vec<GroupWriterReport> {
    let mut reports = Vec::new();
    for writer in writers {
        let report = writer.stop().await.unwrap();
        eprintln!("{name}: {}", report.summary());
        let lost = report.lost(access).await.unwrap();
        assert!(
            lost.is_empty(),
            "{} of {} acknowledged writes lost, e.g. {:?}",
            lost.len(),
            report.acked.len(),
            &lost[..lost.len().min(10)]
        );
        reports.push(report);
    }
    reports
}
