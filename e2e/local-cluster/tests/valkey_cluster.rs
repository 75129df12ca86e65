//! ValkeyCluster end to end, with every controller and real valkey-server pods: a cluster
//! forms, scales out and in (shards and replicas) keeping every key; a killed primary is
//! replaced by its replica and rejoins as a replica, and a requested switchover moves a
//! primary, without losing an acknowledged write; a full restart reforms the cluster with its
//! data; a template change rolls one member at a time without losing an acknowledged write;
//! a topology-controller killed in the middle of a slot migration finishes it on restart; bad
//! input is refused at admission, and an image that cannot start halts the roll at its first
//! member while the cluster keeps serving.
//!
//! Valkey is always asked directly too (`CLUSTER NODES`, `valkey-cli --cluster check`, reads
//! of every key), so a status that claims more than Valkey shows fails the tests.
//!
//! Each test starts its own local cluster; they run one at a time (`SERIAL`), about 8
//! minutes in all on the 2-core development machine (scenario 1, with its two moves of 4096
//! slots, takes 2.5 of them).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crd_types::ValkeyCluster;
use crd_types::cluster::Phase;
use crd_types::conditions::{self, types};
use crd_types::names::{cluster_member_name, statefulset_pod_name};
use crd_types::node::Role;
use crd_types::template::{Auth, SecretKeyRef};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ApiResource, DeleteParams, DynamicObject, PostParams};
use kube::{Api, ResourceExt};
use local_cluster::LocalCluster;
use local_cluster::cluster_testing::{
    Access, AckedWriter, ClusterApis, DataSet, Progress, RollWatch, SLOTS, access, open_slots,
    ready_status, shape, slots_by_primary, status_matches_valkey, valkey_cluster, wait_until,
};
use local_cluster::operator::{self, RunningController};
use local_cluster::testing::{cluster_with_operator, ready_node, restart_controller, stop_process};
use serde_json::json;

const NS: &str = "default";
/// A new cluster: members created, pods started, MEET, slots, replication.
const FORM: Duration = Duration::from_secs(180);
/// A scale step, moving up to a quarter of the keys.
const RESHAPE: Duration = Duration::from_secs(300);
/// A roll of every member, one at a time (readiness is probed every 5 s).
const ROLL: Duration = Duration::from_secs(300);
/// A failover: Valkey's cluster-node-timeout (15 s) plus the election.
const FAILOVER: Duration = Duration::from_secs(120);
/// Something that follows promptly from a state already reached.
const SETTLE: Duration = Duration::from_secs(60);
/// Keys of scenario 1 (loading them takes a few seconds here).
const KEYS: usize = 100_000;

/// The tests of this file run one at a time even without `--test-threads=1`: each starts a
/// whole local cluster, and two at once would starve the 2-core machine.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A local cluster with the operator. Fields drop in order: the processes stop before the
/// run directory goes, and the next test starts only after both.
struct Env {
    cluster: LocalCluster,
    controllers: Vec<RunningController>,
    apis: ClusterApis,
    client: kube::Client,
    _run: tempfile::TempDir,
    _serial: tokio::sync::MutexGuard<'static, ()>,
}

impl Env {
    async fn start() -> Self {
        let serial = SERIAL.lock().await;
        let run = tempfile::tempdir().unwrap();
        let (cluster, controllers) = cluster_with_operator(run.path(), true).await.unwrap();
        let client = cluster.client().await.unwrap();
        Self {
            apis: ClusterApis::new(&client, NS),
            cluster,
            controllers,
            client,
            _run: run,
            _serial: serial,
        }
    }

    /// [`wait_until`], failing the test with the last reason on timeout.
    async fn wait<T, F, Fut>(&self, what: &str, timeout: Duration, check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = anyhow::Result<Progress<T>>>,
    {
        wait_until(&self.cluster, what, timeout, check)
            .await
            .unwrap_or_else(|e| panic!("{e:#}"))
    }

    async fn ready(&self, name: &str, timeout: Duration) -> crd_types::ValkeyClusterStatus {
        self.wait(
            &format!("ValkeyCluster {name} to be Ready"),
            timeout,
            || ready_status(&self.apis, name),
        )
        .await
    }

    async fn access(&self, name: &str) -> Access {
        access(&self.apis, name).await.unwrap()
    }

    /// [`Access`] once the members with an address are exactly those of `shards` x
    /// (1 + `replicas`): a removed member's ValkeyNode may outlive Ready for a moment.
    async fn exact_access(&self, name: &str, shards: u32, replicas: u32) -> Access {
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
    async fn create_ready(&self, cluster: ValkeyCluster) -> Access {
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

    /// Valkey agrees with the spec and the status: `--cluster check` passes, the shape is
    /// right (see [`shape`]) and every member's status.valkey matches what Valkey says.
    async fn healthy(&self, name: &str, access: &Access, shards: u32, replicas: u32) {
        self.wait("valkey-cli --cluster check to pass", SETTLE, || async {
            Ok(access.check().map(drop))
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
    async fn reshape(
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
    fn ids(access: &Access, members: &[String]) -> Vec<(String, String)> {
        members
            .iter()
            .map(|m| {
                let ip = access.ip(m).unwrap_or_else(|| panic!("{m} has no address"));
                (m.clone(), access.node_id(ip).unwrap())
            })
            .collect()
    }

    /// The removed members' ValkeyNodes are gone and no remaining member lists them.
    async fn gone(&self, name: &str, removed: &[(String, String)]) {
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

    fn topology_controller(&self) -> &RunningController {
        self.controllers
            .iter()
            .find(|c| c.process.binary == "topology-controller")
            .expect("the overlay runs topology-controller")
    }

    /// With no `spec.auth`, both Secrets were generated and owned by the cluster: clients
    /// need the default password, the `operator` user has its own, replication logs in
    /// as `operator` (the replicas are in sync, see `healthy`).
    async fn passwords_guard(&self, name: &str, access: &Access) {
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
        let operator = local_cluster::testing::valkey_cli_as(
            ip,
            Some((Some("operator"), &passwords[1])),
            &["ACL", "WHOAMI"],
        );
        assert_eq!(operator, "operator");
        for m in &access.members {
            assert_eq!(
                access.cli(&m.ip, &["CONFIG", "GET", "masteruser"]),
                "masteruser\noperator"
            );
        }
    }

    fn finish(mut self) {
        self.cluster.stop().unwrap();
    }
}

/// The value on the metric line `<series> <value>`.
fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// Scenario 1: 3x1 forms; 100k keys; shards 3 -> 4, replicas 1 -> 2 -> 1, shards 4 -> 3,
/// each step Ready and checked, every key read back, removed members deleted and forgotten.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_forms_scales_and_keeps_every_key() {
    let env = Env::start().await;
    let name = "grow";
    let access = env.create_ready(valkey_cluster(name, 3, 1, false)).await;
    env.passwords_guard(name, &access).await;
    // The planner places replicas; Valkey's own replica migration is off.
    for m in &access.members {
        assert_eq!(
            access.cli(&m.ip, &["CONFIG", "GET", "cluster-allow-replica-migration"]),
            "cluster-allow-replica-migration\nno"
        );
    }
    env.wait(
        "topology-controller Events about the cluster",
        SETTLE,
        || async {
            let events = env.apis.topology_events(name).await?;
            Ok(if events.is_empty() {
                Err("none yet".to_string())
            } else {
                Ok(())
            })
        },
    )
    .await;

    // A client that follows redirections reads what it wrote, on every shard.
    let pairs = [
        ("alpha", "1"),
        ("beta", "2"),
        ("gamma", "3"),
        ("delta", "4"),
    ];
    for (key, value) in pairs {
        assert_eq!(access.cli_cluster(&["SET", key, value]), "OK");
    }
    for (key, value) in pairs {
        assert_eq!(access.cli_cluster(&["GET", key]), value);
    }

    let data = DataSet::new("key", KEYS);
    let took = data.load(&access).await.unwrap();
    eprintln!("{name}: loaded {KEYS} keys in {took:?}");
    data.verify(&access).await.unwrap();

    // 3 -> 4 shards: a quarter of the slots move, 4096 each.
    let access = env.reshape(name, json!({"shards": 4}), 4, 1, &data).await;
    let view = access.nodes_seen_by(&access.members[0].ip).unwrap();
    let counts = slots_by_primary(&view);
    assert_eq!(
        counts.values().copied().collect::<Vec<_>>(),
        vec![4096; 4],
        "{counts:?}"
    );
    for (key, value) in pairs {
        assert_eq!(access.cli_cluster(&["GET", key]), value);
    }

    // Replicas 1 -> 2 -> 1.
    let access = env
        .reshape(name, json!({"replicasPerShard": 2}), 4, 2, &data)
        .await;
    let third: Vec<String> = (0..4).map(|s| cluster_member_name(name, s, 2)).collect();
    let removed = Env::ids(&access, &third);
    env.reshape(name, json!({"replicasPerShard": 1}), 4, 1, &data)
        .await;
    env.gone(name, &removed).await;

    // 4 -> 3 shards: shard 3's slots move back, its members go.
    let last: Vec<String> = (0..2).map(|m| cluster_member_name(name, 3, m)).collect();
    let access = env.access(name).await;
    let removed = Env::ids(&access, &last);
    let access = env.reshape(name, json!({"shards": 3}), 3, 1, &data).await;
    env.gone(name, &removed).await;
    let view = access.nodes_seen_by(&access.members[0].ip).unwrap();
    let counts = slots_by_primary(&view);
    assert_eq!(counts.values().sum::<u32>(), SLOTS, "{counts:?}");
    assert!(
        counts.values().all(|c| (5461..=5462).contains(c)),
        "{counts:?}"
    );
    for (key, value) in pairs {
        assert_eq!(access.cli_cluster(&["GET", key]), value);
    }
    env.finish();
}

/// Scenario 2: with a writer running, a primary's pod is killed (and, with every Kubernetes
/// Node cordoned, not replaced at once, as when its machine is lost): its replica takes
/// over, the old member comes back as a replica of it with its identity, the cluster is
/// Ready again. Then switchover s1 makes member 1 of shard 0 its primary. No acknowledged
/// write is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_primary_is_replaced_and_rejoins_as_replica() {
    let env = Env::start().await;
    let name = "heal";
    let access = env.create_ready(valkey_cluster(name, 3, 1, true)).await;
    let writer = AckedWriter::start(&access).await.unwrap();
    writer.progressed(200, SETTLE).await.unwrap();

    // Shard 1: its primary is killed, its replica must take over.
    let status = env.ready(name, SETTLE).await;
    let shard = &status.shards[1];
    let old_primary = shard.primary.clone().unwrap();
    let successor = shard
        .members
        .iter()
        .find(|m| m.name != old_primary)
        .unwrap()
        .name
        .clone();
    let old_ip = access.ip(&old_primary).unwrap().to_string();
    let old_id = access.node_id(&old_ip).unwrap();
    let successor_id = access.node_id(access.ip(&successor).unwrap()).unwrap();
    let witness = access.ip(&cluster_member_name(name, 0, 0)).unwrap();
    let old_pod = statefulset_pod_name(&old_primary);

    env.apis.set_schedulable(false).await.unwrap();
    env.apis.kill_pod(&old_pod).await.unwrap();
    let killed = Instant::now();
    env.wait(
        &format!("{successor} to take over shard 1 (status and CLUSTER NODES)"),
        FAILOVER,
        || async {
            let status = env
                .apis
                .clusters
                .get(name)
                .await?
                .status
                .unwrap_or_default();
            let primary = status.shards.get(1).and_then(|s| s.primary.clone());
            if primary.as_deref() != Some(successor.as_str()) {
                return Ok(Err(format!("status.shards[1].primary is {primary:?}")));
            }
            let view = access.nodes_seen_by(witness)?;
            let line = view.iter().find(|n| n.id == successor_id);
            Ok(match line {
                Some(n) if n.is_primary() && n.slot_count() > 0 => Ok(()),
                other => Err(format!("CLUSTER NODES on {witness}: {other:?}")),
            })
        },
    )
    .await;
    eprintln!(
        "{name}: {successor} took over {:?} after the kill",
        killed.elapsed()
    );
    let replacement = env.apis.pods.get_opt(&old_pod).await.unwrap();
    assert!(
        replacement
            .as_ref()
            .is_none_or(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Pending")),
        "the killed pod was replaced while every Node was cordoned: {replacement:?}"
    );

    // The old member comes back, as a replica of its successor, with its own node id.
    env.apis.set_schedulable(true).await.unwrap();
    env.ready(name, FORM).await;
    env.healthy(name, &access, 3, 1).await;
    assert_eq!(
        access.node_id(&old_ip).unwrap(),
        old_id,
        "{old_primary} kept its identity (nodes.conf on its volume)"
    );
    for (viewer, view) in access.views().unwrap() {
        let line = view.iter().find(|n| n.id == old_id).unwrap();
        assert!(line.is_replica(), "{viewer}: {line:?}");
        assert_eq!(
            line.primary_id.as_deref(),
            Some(successor_id.as_str()),
            "{viewer}: {line:?}"
        );
    }
    let valkey = env
        .apis
        .nodes
        .get_status(&old_primary)
        .await
        .unwrap()
        .status
        .and_then(|s| s.valkey)
        .unwrap_or_default();
    assert_eq!(valkey.role, Some(Role::Replica), "{valkey:?}");
    assert_eq!(
        valkey.primary_node_id.as_deref(),
        Some(successor_id.as_str())
    );
    writer.progressed(200, SETTLE).await.unwrap();

    // Switchover: member 1 of shard 0 becomes its primary.
    let target = cluster_member_name(name, 0, 1);
    let target_id = access.node_id(access.ip(&target).unwrap()).unwrap();
    env.apis
        .patch(
            name,
            json!({"spec": {"switchover": {"id": "s1", "shard": 0, "member": 1}}}),
        )
        .await
        .unwrap();
    env.wait("switchover s1 to succeed", FAILOVER, || async {
        let status = env
            .apis
            .clusters
            .get(name)
            .await?
            .status
            .unwrap_or_default();
        Ok(match status.switchover {
            Some(s) if s.id == "s1" && s.outcome == "Succeeded" => Ok(()),
            Some(s) if s.id == "s1" && s.outcome == "Failed" => {
                panic!("switchover s1 failed: {}", s.message)
            }
            other => Err(format!("status.switchover is {other:?}")),
        })
    })
    .await;
    let status = env.ready(name, SETTLE).await;
    assert_eq!(status.shards[0].primary.as_deref(), Some(target.as_str()));
    env.healthy(name, &access, 3, 1).await;
    let view = access.nodes_seen_by(witness).unwrap();
    let line = view.iter().find(|n| n.id == target_id).unwrap();
    assert!(line.is_primary() && line.slot_count() > 0, "{line:?}");

    writer.progressed(200, SETTLE).await.unwrap();
    let report = writer.stop().await.unwrap();
    eprintln!("{name}: writer\n{}", report.summary());
    for stream in &report.streams {
        assert!(!stream.acked.is_empty(), "{}", report.summary());
    }
    let lost = report.lost(&access).await.unwrap();
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged writes lost, e.g. {:?}",
        lost.len(),
        report.acked(),
        &lost[..lost.len().min(10)]
    );
    env.finish();
}

/// Scenario 3: every pod of a 3x1 cluster with persistence is deleted at once; the cluster
/// comes back Ready with the same node identities and every key, with no manual step.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_restart_reforms_with_data() {
    let env = Env::start().await;
    let name = "reboot";
    let access = env.create_ready(valkey_cluster(name, 3, 1, true)).await;
    let data = DataSet::new("key", 20_000);
    data.load(&access).await.unwrap();
    data.verify(&access).await.unwrap();
    let members: Vec<String> = access.members.iter().map(|m| m.name.clone()).collect();
    let ids = Env::ids(&access, &members);
    let mut old_uids = BTreeMap::new();
    for member in &members {
        let pod = env
            .apis
            .pods
            .get(&statefulset_pod_name(member))
            .await
            .unwrap();
        old_uids.insert(member.clone(), pod.uid().unwrap());
    }

    let deletions = members.iter().map(|m| {
        let pods = env.apis.pods.clone();
        let pod = statefulset_pod_name(m);
        async move { pods.delete(&pod, &DeleteParams::default()).await }
    });
    for deleted in futures::future::join_all(deletions).await {
        deleted.unwrap();
    }
    let restarted = Instant::now();
    env.wait(
        "every member's pod to be replaced and ready",
        FORM,
        || async {
            for member in &members {
                if ready_node(
                    &env.apis.nodes,
                    &env.apis.pods,
                    member,
                    Some(&old_uids[member]),
                )
                .await?
                .is_none()
                {
                    return Ok(Err(format!("{member} is not back")));
                }
            }
            Ok(Ok(()))
        },
    )
    .await;
    // The status may still say Ready from before: Valkey's own check must pass as well.
    env.wait(
        "the cluster to be Ready as Valkey sees it",
        FORM,
        || async {
            if let Err(why) = ready_status(&env.apis, name).await? {
                return Ok(Err(why));
            }
            Ok(access.check().map(drop))
        },
    )
    .await;
    eprintln!(
        "{name}: Ready {:?} after deleting every pod",
        restarted.elapsed()
    );
    env.healthy(name, &access, 3, 1).await;
    assert_eq!(
        Env::ids(&access, &members),
        ids,
        "every member kept its node id"
    );
    data.verify(&access).await.unwrap();
    env.finish();
}

/// Scenario 4: maxmemory 100mb -> 200mb with a writer running: every member rolls, one at a
/// time and replicas first in each shard, the cluster ends Ready serving the new config, and
/// no acknowledged write is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rolling_update_keeps_acknowledged_writes() {
    let env = Env::start().await;
    let name = "roll";
    let access = env.create_ready(valkey_cluster(name, 3, 1, true)).await;
    let writer = AckedWriter::start(&access).await.unwrap();
    writer.progressed(200, SETTLE).await.unwrap();

    let members = env.apis.members(name).await.unwrap();
    let mut old_uids = BTreeMap::new();
    for node in &members {
        let workload = node
            .status
            .as_ref()
            .and_then(|s| s.workload.clone())
            .unwrap();
        assert!(workload.revision.is_some());
        assert_eq!(workload.revision, workload.desired_revision, "{node:?}");
        let pod = env
            .apis
            .pods
            .get(&statefulset_pod_name(&node.name_any()))
            .await
            .unwrap();
        old_uids.insert(node.name_any(), pod.uid().unwrap());
    }
    let watch = RefCell::new(RollWatch::new(&members));

    let started = Instant::now();
    env.apis
        .patch(
            name,
            json!({"spec": {"template": {"config": {"maxmemory": "200mb"}}}}),
        )
        .await
        .unwrap();
    env.wait(
        "every member to roll and the cluster to be Ready",
        ROLL,
        || async {
            let members = env.apis.members(name).await?;
            watch.borrow_mut().sample(&members);
            if !watch.borrow().all_rolled(&members) {
                let order: Vec<String> = watch
                    .borrow()
                    .gate_order
                    .iter()
                    .map(|(n, _)| n.clone())
                    .collect();
                return Ok(Err(format!("rolled so far: {order:?}")));
            }
            Ok(ready_status(&env.apis, name).await?.map(drop))
        },
    )
    .await;
    eprintln!("{name}: rolled in {:?}", started.elapsed());

    let watch = watch.into_inner();
    eprintln!(
        "{name}: {} samples, gate order {:?}",
        watch.samples, watch.gate_order
    );
    assert!(
        watch.max_rolling <= 1,
        "members rolling at once: {:?}",
        watch.worst
    );
    assert!(
        watch.max_not_ready <= 1,
        "{} members were not ready at once",
        watch.max_not_ready
    );
    assert_eq!(
        watch.gate_order.len(),
        members.len(),
        "{:?}",
        watch.gate_order
    );
    for shard in 0..3 {
        let prefix = format!("{name}-{shard}-");
        let first = watch
            .gate_order
            .iter()
            .find(|(n, _)| n.starts_with(&prefix))
            .unwrap();
        assert_eq!(
            first.1,
            Some(Role::Replica),
            "shard {shard} rolled {first:?} first"
        );
    }
    for (member, uid) in &old_uids {
        let pod = env
            .apis
            .pods
            .get(&statefulset_pod_name(member))
            .await
            .unwrap();
        assert_ne!(
            pod.uid().as_ref(),
            Some(uid),
            "{member}'s pod was not replaced"
        );
        assert_eq!(
            access.cli(access.ip(member).unwrap(), &["CONFIG", "GET", "maxmemory"]),
            "maxmemory\n209715200",
            "{member}"
        );
    }
    env.healthy(name, &access, 3, 1).await;

    writer.progressed(200, SETTLE).await.unwrap();
    let report = writer.stop().await.unwrap();
    eprintln!("{name}: writer during the roll\n{}", report.summary());
    for stream in &report.streams {
        assert!(!stream.acked.is_empty(), "{}", report.summary());
    }
    let lost = report.lost(&access).await.unwrap();
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged writes lost, e.g. {:?}",
        lost.len(),
        report.acked(),
        &lost[..lost.len().min(10)]
    );
    env.finish();
}

/// Whether the scale-out to 4 shards is unfinished, as the first three members see it: an
/// open slot, or not yet 4 primaries with 4096 slots each. Describes what it saw.
fn scale_out_state(access: &Access) -> anyhow::Result<(bool, String)> {
    let views = access.views()?;
    let open = open_slots(&views);
    let counts: Vec<u32> = views
        .values()
        .next()
        .map(|v| slots_by_primary(v).into_values().collect())
        .unwrap_or_default();
    let done = open.is_empty() && counts == [4096; 4];
    Ok((
        !done,
        format!("slots per primary {counts:?}, open slots {open:?}"),
    ))
}

/// Scenario 5: 3 shards, 50k keys, scale to 4; as soon as slots are seen moving,
/// topology-controller is killed (SIGKILL) for a few seconds: the cluster keeps serving
/// every key meanwhile, and on restart the controller finishes the move.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn operator_restart_mid_migration_completes() {
    let mut env = Env::start().await;
    let name = "move";
    let access = env.create_ready(valkey_cluster(name, 3, 0, false)).await;
    let data = DataSet::new("key", 50_000);
    data.load(&access).await.unwrap();
    let originals = access.clone();

    env.apis
        .patch(name, json!({"spec": {"shards": 4}}))
        .await
        .unwrap();
    let deadline = Instant::now() + RESHAPE;
    let seen = loop {
        assert!(
            Instant::now() < deadline,
            "no slot migration seen within {RESHAPE:?}"
        );
        let views = originals.views().unwrap_or_default();
        let open = open_slots(&views);
        let counts = views
            .values()
            .next()
            .map(|v| slots_by_primary(v))
            .unwrap_or_default();
        let moved = counts.len() == 4 && counts.values().any(|c| *c != 4096);
        if !open.is_empty() || moved {
            break format!("slots per primary {counts:?}, open slots {open:?}");
        }
        assert!(
            counts.len() < 4 || !open.is_empty(),
            "the scale-out finished before a migration was seen ({counts:?}); load more keys"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    stop_process(&mut env.cluster, "topology-controller", Duration::ZERO).unwrap();
    eprintln!("{name}: killed topology-controller on seeing {seen}");

    // Nothing moves without the controller, and every key is still served (following ASK
    // for a slot left half moved).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let access = env.access(name).await;
    let (unfinished, state) = scale_out_state(&access).unwrap();
    eprintln!("{name}: left behind: {state}");
    assert!(
        unfinished,
        "the scale-out was complete when the controller died: {state}"
    );
    data.verify(&access).await.unwrap();

    let index = env
        .controllers
        .iter()
        .position(|c| c.process.binary == "topology-controller")
        .unwrap();
    let restarted = restart_controller(&mut env.cluster, &env.controllers[index])
        .await
        .unwrap();
    env.controllers[index] = restarted;
    let started = Instant::now();
    env.ready(name, RESHAPE).await;
    eprintln!("{name}: Ready {:?} after the restart", started.elapsed());
    let access = env.exact_access(name, 4, 0).await;
    env.healthy(name, &access, 4, 0).await;
    let (unfinished, state) = scale_out_state(&access).unwrap();
    assert!(!unfinished, "{state}");
    data.verify(&access).await.unwrap();

    let series =
        r#"valkey_operator_reconcile_duration_seconds_count{controller="topology-controller"}"#;
    let text = operator::http_get(&env.topology_controller().http_addr, "/metrics")
        .await
        .unwrap();
    assert!(
        metric(&text, series).unwrap_or(0.0) >= 1.0,
        "the restarted controller finished no reconcile: {text}"
    );
    env.finish();
}

/// Creates `spec` as a ValkeyCluster, untyped, so values the Rust types would refuse still
/// reach the API server; the rejection message on failure.
async fn create_untyped(
    client: &kube::Client,
    name: &str,
    spec: serde_json::Value,
) -> Result<(), String> {
    let api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        NS,
        &ApiResource::erase::<ValkeyCluster>(&()),
    );
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "valkey.rs/v1alpha1",
        "kind": "ValkeyCluster",
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    }))
    .unwrap();
    api.create(&PostParams::default(), &object)
        .await
        .map(drop)
        .map_err(|e| match e {
            kube::Error::Api(status) => status.message,
            other => other.to_string(),
        })
}

#[track_caller]
fn assert_rejected(result: Result<(), String>, message_part: &str) {
    match result {
        Ok(()) => panic!("expected a rejection containing {message_part:?}, it was accepted"),
        Err(message) => assert!(
            message.contains(message_part),
            "expected {message_part:?} in: {message}"
        ),
    }
}

/// Scenario 6: bad input. Admission refuses a switchover naming a member that does not
/// exist (on create and on a live cluster), zero shards and negative replicas. An image that
/// cannot start halts the roll at its first member (a replica): one member down, the status
/// says why, the cluster keeps serving; putting the image back heals it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_input() {
    let env = Env::start().await;
    assert_rejected(
        create_untyped(&env.client, "zero", json!({"shards": 0})).await,
        "shards must be at least 1",
    );
    assert_rejected(
        create_untyped(
            &env.client,
            "negative",
            json!({"shards": 3, "replicasPerShard": -1}),
        )
        .await,
        "replicasPerShard cannot be negative",
    );
    assert_rejected(
        create_untyped(
            &env.client,
            "nobody",
            json!({"shards": 3, "replicasPerShard": 1,
                   "switchover": {"id": "s1", "shard": 0, "member": 2}}),
        )
        .await,
        "switchover.member must name an existing member",
    );

    let name = "stuck";
    let access = env.create_ready(valkey_cluster(name, 3, 1, false)).await;
    let generation = env
        .apis
        .clusters
        .get(name)
        .await
        .unwrap()
        .metadata
        .generation;
    let refused = env
        .apis
        .patch(
            name,
            json!({"spec": {"switchover": {"id": "s1", "shard": 1, "member": 2}}}),
        )
        .await
        .unwrap_err();
    assert!(
        format!("{refused:#}").contains("switchover.member must name an existing member"),
        "{refused:#}"
    );
    assert_eq!(
        env.apis
            .clusters
            .get(name)
            .await
            .unwrap()
            .metadata
            .generation,
        generation
    );
    let pairs = [
        ("alpha", "1"),
        ("beta", "2"),
        ("gamma", "3"),
        ("delta", "4"),
    ];
    for (key, value) in pairs {
        assert_eq!(access.cli_cluster(&["SET", key, value]), "OK");
    }
    let data = DataSet::new("key", 2_000);
    data.load(&access).await.unwrap();

    // The node agent runs only valkey/valkey images: this one waits with ImageNotMapped, as
    // an image that cannot be pulled would.
    let members = env.apis.members(name).await.unwrap();
    let watch = RefCell::new(RollWatch::new(&members));
    env.apis
        .patch(
            name,
            json!({"spec": {"template": {"image": "no-such/valkey:1.0"}}}),
        )
        .await
        .unwrap();
    let stuck = env
        .wait("the roll to stop at its first member", ROLL, || async {
            let members = env.apis.members(name).await?;
            watch.borrow_mut().sample(&members);
            let Some((first, _)) = watch.borrow().gate_order.first().cloned() else {
                return Ok(Err("no gate open yet".to_string()));
            };
            let pod = env.apis.pods.get_opt(&statefulset_pod_name(&first)).await?;
            let waiting = pod
                .and_then(|p| p.status)
                .and_then(|s| s.container_statuses)
                .and_then(|c| c.into_iter().next())
                .and_then(|c| c.state)
                .and_then(|s| s.waiting)
                .and_then(|w| w.reason);
            if waiting.as_deref() != Some("ImageNotMapped") {
                return Ok(Err(format!(
                    "{first}'s container is waiting for {waiting:?}"
                )));
            }
            Ok(Ok(first))
        })
        .await;

    // Held there: sample a while longer.
    let cluster_state = || async {
        let vc = env.apis.clusters.get(name).await?;
        let status = vc.status.unwrap_or_default();
        let flagged: Vec<String> = [types::DEGRADED, types::PROGRESSING]
            .into_iter()
            .filter_map(|t| conditions::find(&status.conditions, t))
            .filter(|c| c.status == conditions::TRUE && !c.message.is_empty())
            .map(|c| format!("{}: {}", c.type_, c.message))
            .collect();
        anyhow::Ok((status, flagged))
    };
    env.wait("the cluster to report the halted roll", SETTLE, || async {
        let (status, flagged) = cluster_state().await?;
        Ok(
            if flagged.is_empty() || conditions::is_true(&status.conditions, types::READY) {
                Err(format!("conditions {:?}", status.conditions))
            } else {
                Ok(())
            },
        )
    })
    .await;
    let hold = Instant::now();
    while hold.elapsed() < Duration::from_secs(20) {
        let members = env.apis.members(name).await.unwrap();
        watch.borrow_mut().sample(&members);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let members = env.apis.members(name).await.unwrap();
    let watch = watch.into_inner();
    assert_eq!(
        watch.gate_order.len(),
        1,
        "the roll went on past {stuck}: {:?}",
        watch.gate_order
    );
    assert_eq!(
        watch.gate_order[0].1,
        Some(Role::Replica),
        "the first member to roll was not a replica: {:?}",
        watch.gate_order
    );
    assert_eq!(watch.max_rolling, 1, "{:?}", watch.worst);
    assert_eq!(watch.max_not_ready, 1);
    assert_eq!(RollWatch::not_ready(&members), vec![stuck.clone()]);
    let at_new_revision: Vec<String> = members
        .iter()
        .filter(|n| {
            n.status
                .as_ref()
                .and_then(|s| s.workload.as_ref())
                .is_some_and(|w| w.revision.is_some() && w.revision == w.desired_revision)
        })
        .map(|n| n.name_any())
        .collect();
    assert_eq!(at_new_revision, vec![stuck.clone()]);
    let (status, flagged) = cluster_state().await.unwrap();
    eprintln!(
        "{name}: halted at {stuck}: phase {:?}, {flagged:?}",
        status.phase
    );
    assert_ne!(status.phase, Some(Phase::Ready));
    assert!(!flagged.is_empty(), "{:?}", status.conditions);

    // The rest keeps serving.
    for (key, value) in pairs {
        assert_eq!(access.cli_cluster(&["GET", key]), value);
    }
    data.verify(&access).await.unwrap();

    // Putting the image back heals it: only the stuck member rolls (back).
    env.apis
        .patch(
            name,
            json!({"spec": {"template": {"image": crd_types::template::DEFAULT_IMAGE}}}),
        )
        .await
        .unwrap();
    env.ready(name, ROLL).await;
    env.healthy(name, &access, 3, 1).await;
    data.verify(&access).await.unwrap();

    // A password Secret that does not exist: members cannot start, and the status says
    // which Secret is missing; creating it lets the cluster form with that password.
    let name = "locked";
    let mut locked = valkey_cluster(name, 1, 0, false);
    locked.spec.auth = Some(Auth {
        password_secret_ref: Some(SecretKeyRef {
            name: "locked-pass".into(),
            key: "pw".into(),
        }),
        operator_secret_ref: None,
    });
    env.apis.create(&locked).await.unwrap();
    env.wait("the status to name the missing Secret", FORM, || async {
        let status = env
            .apis
            .clusters
            .get(name)
            .await?
            .status
            .unwrap_or_default();
        let ready = conditions::find(&status.conditions, types::READY);
        Ok(match ready {
            Some(c) if c.message.contains("Secret locked-pass does not exist") => Ok(()),
            other => Err(format!("Ready: {other:?}")),
        })
    })
    .await;
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some("locked-pass".into()),
            ..Default::default()
        },
        string_data: Some(BTreeMap::from([("pw".into(), "chosen by a person".into())])),
        ..Default::default()
    };
    env.apis
        .secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    env.ready(name, FORM).await;
    let access = env.access(name).await;
    assert_eq!(access.password.as_deref(), Some("chosen by a person"));
    assert_eq!(access.cli_cluster(&["SET", "k", "v"]), "OK");
    env.finish();
}
