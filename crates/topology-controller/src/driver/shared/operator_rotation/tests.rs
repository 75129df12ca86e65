//! A pass's Kubernetes half: when it runs, what it keeps in `<topology>-operator-applied`
//! and when, which pods it reads, and what it records, against fakes of the Secrets, the
//! pods and the Events. The pass itself is the library's
//! ([`topology_controller::shared::operator_password`]); its members here do not answer, or
//! peek at what is kept when asked.

use std::collections::BTreeMap;
use std::sync::Mutex;

use crd_types::names::labels;
use crd_types::node::{ValkeyNodeSpec, ValkeyNodeStatus, WorkloadStatus};
use crd_types::{ValkeyCluster, ValkeyClusterSpec};
use k8s_openapi::api::core::v1::{PodSpec, SecretVolumeSource, Volume};
use k8s_openapi::jiff::Timestamp;
use operator_runtime::event_reasons;
use topology_controller::shared::auth::PasswordError;
use topology_controller::shared::commands::{ErrorKind, ValkeyError};
use topology_controller::shared::operator_password::Kind;

use super::*;
use crate::driver::shared::secret_store::fake::{FakeSecrets, Verb};

event_reasons! {
    enum Told {
        Added: Normal,
        Switched: Normal,
        Dropped: Normal,
        Refused: Warning,
    }
}

const APPLIED: &str = "cache-operator-applied";
const SECRET: &str = "cache-operator";
const VERSION: &str = "cache-operator/7";

/// The Events a pass told.
#[derive(Default)]
struct Events(Mutex<Vec<(Told, String)>>);

impl Tell<Told> for Events {
    async fn tell(&self, reason: Told, note: String) {
        self.0.lock().unwrap().push((reason, note));
    }
}

impl Events {
    fn told(&self) -> Vec<(Told, String)> {
        self.0.lock().unwrap().clone()
    }
}

/// Pods by name; reading one named in `failing` fails. Records the names read.
#[derive(Default)]
struct Pods {
    pods: BTreeMap<String, Pod>,
    failing: Vec<String>,
    read: Mutex<Vec<String>>,
}

impl PodReader for Pods {
    async fn get_opt(&self, name: &str) -> Result<Option<Pod>, kube::Error> {
        self.read.lock().unwrap().push(name.to_string());
        if self.failing.iter().any(|f| f == name) {
            return Err(crate::driver::shared::secret_store::fake::api_error(
                500, "Injected",
            ));
        }
        Ok(self.pods.get(name).cloned())
    }
}

/// A member that does not answer; it notes what `<topology>-operator-applied` held when it
/// was first asked.
struct Silent<'a> {
    secrets: &'a FakeSecrets,
    kept_when_asked: Mutex<Option<Option<AppliedOperator>>>,
}

impl AclMember for Silent<'_> {
    async fn acl_lines(&self) -> Result<Vec<String>, ValkeyError> {
        let kept = self
            .secrets
            .secret(APPLIED)
            .and_then(|s| AppliedOperator::read(&s));
        self.kept_when_asked.lock().unwrap().get_or_insert(kept);
        Err(ValkeyError::new(ErrorKind::Unreachable, "gone"))
    }

    async fn acl_set(&self, _: &str, _: &[String]) -> Result<(), ValkeyError> {
        unreachable!("a silent member is only read")
    }

    async fn acl_del(&self, _: &[String]) -> Result<(), ValkeyError> {
        unreachable!("a silent member is only read")
    }
}

impl OutgoingLogin for Silent<'_> {
    async fn outgoing(&self) -> Result<Option<String>, ValkeyError> {
        unreachable!("read after ACL LIST, which fails")
    }

    async fn switch_outgoing(&self, _: &str) -> Result<(), ValkeyError> {
        unreachable!("a silent member is only read")
    }
}

fn cluster() -> ValkeyCluster {
    let mut cluster = ValkeyCluster::new("cache", ValkeyClusterSpec::default());
    cluster.metadata.namespace = Some("prod".into());
    cluster.metadata.uid = Some("cluster-uid".into());
    cluster
}

fn applied(password: &str, rotating: &[&str]) -> AppliedOperator {
    AppliedOperator {
        password: password.into(),
        rotating: rotating.iter().map(|r| r.to_string()).collect(),
    }
}

fn kept_in(fake: &FakeSecrets) -> Option<AppliedOperator> {
    AppliedOperator::read(&fake.secret(APPLIED)?)
}

/// A recorded rotation of `user` toward [`VERSION`], whose previous password may go
/// `until_in` seconds from now (negative: already).
fn recorded(user: RotatedPassword, until_in: i64) -> PasswordRotation {
    let now = Timestamp::now().as_second();
    let at = |s: i64| Time(Timestamp::from_second(s).unwrap());
    PasswordRotation {
        user,
        since: at(now - 3600),
        previous_until: at(now + until_in),
        members_with_new: 0,
        members: 1,
        secret_version: VERSION.into(),
        held_back_by: Vec::new(),
    }
}

/// ValkeyNode `name`, its pod `pod` (`None`: none known).
fn node(name: &str, pod: Option<&str>) -> ValkeyNode {
    let mut node = ValkeyNode::new(name, ValkeyNodeSpec::default());
    node.status = Some(ValkeyNodeStatus {
        workload: Some(WorkloadStatus {
            pod_name: pod.map(str::to_string),
            ..Default::default()
        }),
        ..Default::default()
    });
    node
}

fn silent<'a>(name: &'a str, conn: Option<&'a Silent<'a>>) -> Member<'a, Silent<'a>> {
    Member {
        name,
        kind: Kind::DataNode,
        conn,
    }
}

/// What a pass is given, beside the fakes.
struct Given<'a> {
    value: Result<String, PasswordError>,
    version: Option<&'a str>,
    applied: Option<AppliedOperator>,
    recorded: Vec<PasswordRotation>,
    nodes: Vec<ValkeyNode>,
}

impl Default for Given<'_> {
    fn default() -> Self {
        Self {
            value: Ok("new".into()),
            version: Some(VERSION),
            applied: Some(applied("old", &[])),
            recorded: Vec::new(),
            nodes: Vec::new(),
        }
    }
}

/// A pass of [`cluster`] with `given`, `members`, and the fakes.
async fn pass(
    given: &Given<'_>,
    members: &[Member<'_, Silent<'_>>],
    secrets: &FakeSecrets,
    pods: &Pods,
    events: &Events,
) -> Vec<PasswordRotation> {
    let apis = Apis {
        secrets,
        pods,
        label_key: labels::CLUSTER,
        field_manager: "valkey-operator/topology",
    };
    let reference = SecretKeyRef {
        name: SECRET.into(),
        key: "password".into(),
    };
    let pass = Pass {
        auth: None,
        password: Password {
            version: given.version,
            reference: &reference,
            value: &given.value,
        },
        applied: given.applied.as_ref(),
        recorded: &given.recorded,
        members,
        nodes: &given.nodes,
    };
    let reasons = Reasons {
        added: Told::Added,
        switched: Told::Switched,
        dropped: Told::Dropped,
        refused: Told::Refused,
    };
    rotate(events, &apis, &cluster(), pass, reasons).await
}

#[tokio::test]
async fn without_the_password_its_version_or_the_applied_ones_what_was_recorded_stays() {
    let operator = recorded(RotatedPassword::Operator, 60);
    let default = recorded(RotatedPassword::DataNodesDefault, 60);
    let cases = [
        Given {
            value: Err(PasswordError::SecretMissing(SecretKeyRef {
                name: "cache-operator".into(),
                key: "password".into(),
            })),
            ..Default::default()
        },
        Given {
            version: None,
            ..Default::default()
        },
        Given {
            applied: None,
            ..Default::default()
        },
    ];
    for mut given in cases {
        given.recorded = vec![operator.clone(), default.clone()];
        let (secrets, pods, events) = Default::default();
        let rotations = pass(&given, &[], &secrets, &pods, &events).await;
        // Only the operator's: the default user's is another pass's.
        assert_eq!(rotations, std::slice::from_ref(&operator));
        assert_eq!(secrets.calls(), []);
        assert_eq!(events.told(), []);
    }
}

#[tokio::test]
async fn members_settled_on_the_secrets_password_need_no_pass() {
    let given = Given {
        applied: Some(applied("new", &[])),
        recorded: vec![recorded(RotatedPassword::Operator, -60)],
        ..Default::default()
    };
    let (secrets, pods, events) = Default::default();
    let rotations = pass(&given, &[], &secrets, &pods, &events).await;
    assert_eq!(rotations, []);
    assert_eq!(secrets.calls(), []);
    assert_eq!(*pods.read.lock().unwrap(), Vec::<String>::new());
}

#[tokio::test]
async fn a_password_members_would_refuse_is_told_and_not_rotated_in() {
    let operator = recorded(RotatedPassword::Operator, 60);
    for refused in ["-", "two\nlines"] {
        let given = Given {
            value: Ok(refused.into()),
            recorded: vec![operator.clone()],
            ..Default::default()
        };
        let (secrets, pods, events) = Default::default();
        let rotations = pass(&given, &[], &secrets, &pods, &events).await;
        assert_eq!(rotations, std::slice::from_ref(&operator));
        let told = events.told();
        assert_eq!(told.len(), 1);
        assert_eq!(told[0].0, Told::Refused);
        let note = &told[0].1;
        assert!(
            note.contains("Secret cache-operator key password is '-'"),
            "{note}"
        );
        assert_eq!(secrets.writes(), []);
    }
}

#[tokio::test]
async fn the_new_password_is_kept_as_rotating_before_any_member_is_asked() {
    let secrets = FakeSecrets::default();
    let member = Silent {
        secrets: &secrets,
        kept_when_asked: Mutex::default(),
    };
    let (pods, events) = Default::default();
    let members = [silent("cache-0-0", Some(&member))];
    pass(&Given::default(), &members, &secrets, &pods, &events).await;
    let asked = member.kept_when_asked.lock().unwrap().clone();
    assert_eq!(asked, Some(Some(applied("old", &["new"]))));
    // The member did not answer: nothing is settled, the rotating one stays kept.
    assert_eq!(secrets.writes(), [(Verb::Apply, APPLIED.to_string())]);
    assert_eq!(kept_in(&secrets), Some(applied("old", &["new"])));
}

#[tokio::test]
async fn a_rotation_that_cannot_be_kept_is_not_started() {
    let secrets = FakeSecrets::default();
    secrets.fail(Verb::Apply, APPLIED, 409);
    let member = Silent {
        secrets: &secrets,
        kept_when_asked: Mutex::default(),
    };
    let (pods, events) = Default::default();
    let operator = recorded(RotatedPassword::Operator, 60);
    let given = Given {
        recorded: vec![operator.clone()],
        ..Default::default()
    };
    let members = [silent("cache-0-0", Some(&member))];
    let rotations = pass(&given, &members, &secrets, &pods, &events).await;
    assert_eq!(rotations, [operator]);
    assert_eq!(*member.kept_when_asked.lock().unwrap(), None);
}

#[tokio::test]
async fn once_every_member_settles_the_new_password_is_kept_as_the_one_they_hold() {
    let (secrets, pods, events) = Default::default();
    let rotations = pass(&Given::default(), &[], &secrets, &pods, &events).await;
    assert_eq!(rotations, []);
    assert_eq!(
        secrets.writes(),
        vec![(Verb::Apply, APPLIED.to_string()); 2]
    );
    assert_eq!(kept_in(&secrets), Some(applied("new", &[])));
}

#[tokio::test]
async fn a_settled_pass_that_cannot_be_kept_records_what_was_recorded() {
    let secrets = FakeSecrets::default();
    secrets.fail(Verb::Apply, APPLIED, 500);
    let (pods, events) = Default::default();
    let operator = recorded(RotatedPassword::Operator, 60);
    // Already kept as rotating: only the settled one is written.
    let given = Given {
        applied: Some(applied("old", &["new"])),
        recorded: vec![operator.clone()],
        ..Default::default()
    };
    let rotations = pass(&given, &[], &secrets, &pods, &events).await;
    assert_eq!(rotations, [operator]);
    assert_eq!(secrets.writes(), [(Verb::Apply, APPLIED.to_string())]);
}

#[tokio::test]
async fn pods_are_read_only_once_the_previous_password_may_go() {
    let nodes = vec![node("cache-0-1", Some("cache-0-1-0"))];
    let members = [silent("cache-0-0", None)];
    let given = Given {
        applied: Some(applied("old", &["new"])),
        recorded: vec![recorded(RotatedPassword::Operator, 60)],
        nodes,
        ..Default::default()
    };
    let (secrets, pods, events) = Default::default();
    let rotations = pass(&given, &members, &secrets, &pods, &events).await;
    assert_eq!(*pods.read.lock().unwrap(), Vec::<String>::new());
    // The member that did not answer holds the rotation back, and no pod does.
    assert_eq!(rotations.len(), 1);
    assert_eq!(rotations[0].held_back_by, ["cache-0-0"]);
    assert_eq!(rotations[0].secret_version, VERSION);
}

#[tokio::test]
async fn pods_whose_hooks_do_not_read_the_mounted_secret_hold_the_drop_back() {
    let nodes = vec![
        node("reads", Some("reads-0")),
        node("older", Some("older-0")),
        node("no-pod", None),
        node("unread", Some("unread-0")),
    ];
    let pods = Pods {
        pods: BTreeMap::from([
            ("reads-0".to_string(), pod(true, Some(SECRET))),
            ("older-0".to_string(), pod(false, None)),
        ]),
        failing: vec!["unread-0".into()],
        read: Mutex::default(),
    };
    let given = Given {
        applied: Some(applied("old", &["new"])),
        recorded: vec![recorded(RotatedPassword::Operator, -60)],
        nodes,
        ..Default::default()
    };
    let (secrets, events) = Default::default();
    let members = [silent("cache-0-0", None)];
    let rotations = pass(&given, &members, &secrets, &pods, &events).await;
    assert_eq!(
        *pods.read.lock().unwrap(),
        ["reads-0", "older-0", "unread-0"]
    );
    assert_eq!(rotations.len(), 1);
    assert_eq!(
        rotations[0].held_back_by,
        ["cache-0-0", "older", "no-pod", "unread"]
    );
}

fn pod(annotated: bool, mounted: Option<&str>) -> Pod {
    let mut pod = Pod::default();
    if annotated {
        pod.metadata.annotations = Some(
            [(
                annotations::OPERATOR_PASSWORD_FILE.to_string(),
                "/etc/valkey-operator/operator/password".to_string(),
            )]
            .into(),
        );
    }
    pod.spec = Some(PodSpec {
        volumes: Some(
            mounted
                .map(|name| Volume {
                    name: "operator-password".into(),
                    secret: Some(SecretVolumeSource {
                        secret_name: Some(name.into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .into_iter()
                .collect(),
        ),
        ..Default::default()
    });
    pod
}

#[test]
fn only_a_pod_mounting_the_current_secret_lets_the_previous_password_go() {
    assert!(reads_the_file(&pod(true, Some("op")), "op"));
    // Not rolled yet onto the Secret the spec names now.
    assert!(!reads_the_file(&pod(true, Some("old-op")), "op"));
    // An older operator's template.
    assert!(!reads_the_file(&pod(false, None), "op"));
    assert!(!reads_the_file(&pod(false, Some("op")), "op"));
}
