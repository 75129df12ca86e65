//! The password Secrets against [`FakeSecrets`]: what is created, kept, refused and read.

use std::collections::BTreeMap;

use crd_types::template::{Auth, SecretKeyRef};
use crd_types::{ValkeyCluster, ValkeyClusterSpec};
use k8s_openapi::ByteString;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use operator_runtime::Op;

use topology_controller::shared::auth::UnusableSecret;

use super::*;
use crate::driver::shared::secret_store::fake::{FakeSecrets, Verb};

const FIELD_MANAGER: &str = "valkey-operator/topology";

fn cluster() -> ValkeyCluster {
    let mut cluster = ValkeyCluster::new("cache", ValkeyClusterSpec::default());
    cluster.metadata.namespace = Some("prod".into());
    cluster.metadata.uid = Some("cluster-uid".into());
    cluster
}

/// The generated default user's Secret of [`cluster`].
fn generated() -> TopologySecret {
    auth::cluster_secrets(&cluster()).0
}

/// A Secret the spec names, `key` in `name`.
fn named(name: &str, key: &str) -> TopologySecret {
    TopologySecret {
        reference: SecretKeyRef {
            name: name.into(),
            key: key.into(),
        },
        generated: false,
    }
}

/// `<name>` holding `password` as the cluster's generated Secret does.
fn owned(name: &str, password: &str) -> Secret {
    auth::generated_secret(&cluster(), labels::CLUSTER, name, password)
}

/// `<name>` holding `password`, controlled by another object (`uid`), or by none.
fn foreign(name: &str, password: &str, uid: Option<&str>) -> Secret {
    let mut secret = owned(name, password);
    secret.metadata.owner_references = uid.map(|uid| {
        vec![OwnerReference {
            api_version: "valkey.rs/v1alpha1".into(),
            kind: "ValkeyCluster".into(),
            name: "other".into(),
            uid: uid.into(),
            controller: Some(true),
            ..Default::default()
        }]
    });
    secret
}

fn password_of(secret: &Secret, key: &str) -> String {
    let value = &secret.data.as_ref().expect("data")[key];
    String::from_utf8(value.0.clone()).expect("UTF-8")
}

async fn read(
    fake: &FakeSecrets,
    wanted: &TopologySecret,
    members_exist: bool,
) -> (Result<String, PasswordError>, Option<String>) {
    read_with_version(fake, &cluster(), labels::CLUSTER, wanted, members_exist)
        .await
        .expect("no API error")
}

#[tokio::test]
async fn a_missing_generated_secret_is_created_owned_while_no_member_exists() {
    let fake = FakeSecrets::default();
    let wanted = generated();
    let name = &wanted.reference.name;
    let (password, version) = read(&fake, &wanted, false).await;
    let password = password.expect("a generated password");
    assert_eq!(password.len(), 2 * auth::PASSWORD_BYTES);
    assert_eq!(fake.writes(), [(Verb::Create, name.clone())]);
    let created = fake.secret(name).expect("created");
    assert_eq!(password_of(&created, auth::GENERATED_KEY), password);
    // Owned by the cluster: it goes with it.
    assert_eq!(created.owner_references()[0].uid, "cluster-uid");
    assert_eq!(created.labels()[labels::CLUSTER], "cache");
    let rv = created.resource_version().expect("a version");
    assert_eq!(version, Some(format!("{name}/{rv}")));
}

#[tokio::test]
async fn a_missing_generated_secret_is_reported_never_regenerated_once_members_exist() {
    let fake = FakeSecrets::default();
    let wanted = generated();
    let (password, version) = read(&fake, &wanted, true).await;
    let why = password.expect_err("nothing to read");
    assert_eq!(why, PasswordError::GeneratedGone(wanted.reference.clone()));
    let why = why.to_string();
    assert!(
        why.contains("does not exist but the members already run"),
        "{why}"
    );
    assert!(why.contains(&wanted.reference.name), "{why}");
    assert_eq!(version, None);
    assert_eq!(fake.writes(), []);
}

#[tokio::test]
async fn a_secret_the_spec_names_is_never_created() {
    let fake = FakeSecrets::default();
    let wanted = named("mine", "pw");
    let (password, version) = read(&fake, &wanted, false).await;
    let why = password.expect_err("no Secret");
    assert_eq!(why, PasswordError::SecretMissing(wanted.reference));
    assert_eq!(why.to_string(), "Secret mine does not exist");
    assert_eq!(version, None);
    assert_eq!(fake.writes(), []);
}

#[tokio::test]
async fn a_secret_the_spec_names_is_read_with_its_version() {
    let mut mine = foreign("mine", "", None);
    mine.data = Some(BTreeMap::from([(
        "pw".into(),
        ByteString(b"s3cret".into()),
    )]));
    let fake = FakeSecrets::with([mine]);
    let (password, version) = read(&fake, &named("mine", "pw"), true).await;
    assert_eq!(password, Ok("s3cret".into()));
    assert_eq!(version, Some("mine/1".into()));
    assert_eq!(fake.writes(), []);
}

#[tokio::test]
async fn a_create_meeting_409_keeps_and_uses_the_secret_that_won_the_race() {
    let fake = FakeSecrets::default();
    let wanted = generated();
    let name = &wanted.reference.name;
    fake.rival_writes_first(owned(name, "theirs"));
    let (password, version) = read(&fake, &wanted, false).await;
    assert_eq!(password, Ok("theirs".into()));
    // Theirs is read again, never overwritten.
    assert_eq!(fake.writes(), [(Verb::Create, name.clone())]);
    let kept = fake.secret(name).expect("theirs");
    assert_eq!(password_of(&kept, auth::GENERATED_KEY), "theirs");
    let rv = kept.resource_version().expect("a version");
    assert_eq!(version, Some(format!("{name}/{rv}")));
}

#[tokio::test]
async fn a_create_failing_otherwise_fails_the_reconcile() {
    let fake = FakeSecrets::default();
    let wanted = generated();
    fake.fail(Verb::Create, &wanted.reference.name, 403);
    let result = read_with_version(&fake, &cluster(), labels::CLUSTER, &wanted, false).await;
    let Err(Error::Api(e)) = result else {
        panic!("an API error, not {result:?}");
    };
    assert_eq!((e.op, e.status_code()), (Op::Create, Some(403)));
    assert_eq!(e.to_string(), "cannot create Secret prod/cache-auth");
}

#[tokio::test]
async fn a_read_failing_fails_the_reconcile_and_nothing_is_created() {
    let fake = FakeSecrets::default();
    let wanted = generated();
    fake.fail(Verb::Get, &wanted.reference.name, 500);
    let result = read_with_version(&fake, &cluster(), labels::CLUSTER, &wanted, false).await;
    let Err(Error::Api(e)) = result else {
        panic!("an API error, not {result:?}");
    };
    assert_eq!((e.op, e.status_code()), (Op::Read, Some(500)));
    assert_eq!(fake.writes(), []);
}

#[tokio::test]
async fn an_existing_generated_secret_is_used_and_never_rewritten() {
    let wanted = generated();
    let name = &wanted.reference.name;
    let fake = FakeSecrets::with([owned(name, "kept")]);
    let (password, version) = read(&fake, &wanted, false).await;
    assert_eq!(password, Ok("kept".into()));
    assert_eq!(version, Some(format!("{name}/1")));
    assert_eq!(fake.writes(), []);
}

#[tokio::test]
async fn a_generated_name_another_object_controls_is_refused_with_the_reason() {
    let wanted = generated();
    let name = &wanted.reference.name;
    let fake = FakeSecrets::with([foreign(name, "theirs", Some("other-uid"))]);
    let (password, version) = read(&fake, &wanted, false).await;
    let why = password.expect_err("not this cluster's");
    assert!(
        matches!(
            why,
            PasswordError::Unusable(UnusableSecret::ControlledByAnother { .. })
        ),
        "{why}"
    );
    assert!(
        why.to_string()
            .contains("belongs to ValkeyCluster other (other-uid), not this ValkeyCluster"),
        "{why}"
    );
    // Reported, not taken over; the version is still told.
    assert_eq!(fake.writes(), []);
    assert_eq!(version, Some(format!("{name}/1")));
    let theirs = fake.secret(name).expect("still there");
    assert_eq!(theirs.owner_references()[0].uid, "other-uid");
}

#[tokio::test]
async fn a_generated_name_nobody_controls_is_read_but_never_taken_over() {
    let wanted = generated();
    let name = &wanted.reference.name;
    let fake = FakeSecrets::with([foreign(name, "by-hand", None)]);
    let (password, _) = read(&fake, &wanted, false).await;
    // Made by hand under the generated name: its password is used as the user's own.
    assert_eq!(password, Ok("by-hand".into()));
    assert_eq!(fake.writes(), []);
    let kept = fake.secret(name).expect("still there");
    assert!(kept.owner_references().is_empty());
}

#[tokio::test]
async fn a_generated_secret_being_deleted_is_refused() {
    let wanted = generated();
    let name = &wanted.reference.name;
    let mut going = owned(name, "going");
    going.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
    let fake = FakeSecrets::with([going]);
    let (password, _) = read(&fake, &wanted, false).await;
    let why = password.expect_err("going");
    assert_eq!(
        why,
        PasswordError::Unusable(UnusableSecret::BeingDeleted {
            secret: name.clone()
        })
    );
    assert_eq!(why.to_string(), format!("Secret {name} is being deleted"));
    assert_eq!(fake.writes(), []);
}

#[tokio::test]
async fn the_applied_operator_passwords_are_kept_from_the_operators_when_absent() {
    let fake = FakeSecrets::default();
    let operator = Ok("op-pw".to_string());
    let applied = applied_operator(&fake, &cluster(), labels::CLUSTER, &operator, FIELD_MANAGER)
        .await
        .expect("no API error");
    let first = AppliedOperator {
        password: "op-pw".into(),
        rotating: Vec::new(),
    };
    assert_eq!(applied, Some(first.clone()));
    let name = "cache-operator-applied";
    assert_eq!(fake.writes(), [(Verb::Apply, name.to_string())]);
    let kept = fake.secret(name).expect("applied");
    assert_eq!(AppliedOperator::read(&kept), Some(first));
    assert_eq!(kept.owner_references()[0].uid, "cluster-uid");
}

#[tokio::test]
async fn kept_applied_operator_passwords_are_read_not_rewritten() {
    let kept = AppliedOperator {
        password: "old".into(),
        rotating: vec!["new".into()],
    };
    let secret = kept.secret(&cluster(), labels::CLUSTER, "cache-operator-applied");
    let fake = FakeSecrets::with([secret]);
    // The Secret's password moved on: what members hold is still what was kept.
    let operator = Ok("newer".to_string());
    let applied = applied_operator(&fake, &cluster(), labels::CLUSTER, &operator, FIELD_MANAGER)
        .await
        .expect("no API error");
    assert_eq!(applied, Some(kept));
    assert_eq!(fake.writes(), []);
}

#[tokio::test]
async fn without_either_the_applied_operator_passwords_are_unknown() {
    let fake = FakeSecrets::default();
    let operator = Err(PasswordError::SecretMissing(SecretKeyRef {
        name: "cache-operator".into(),
        key: "password".into(),
    }));
    let applied = applied_operator(&fake, &cluster(), labels::CLUSTER, &operator, FIELD_MANAGER)
        .await
        .expect("no API error");
    assert_eq!(applied, None);
    assert_eq!(fake.writes(), []);
}

#[tokio::test]
async fn keeping_the_applied_operator_passwords_replaces_what_was_kept() {
    let old = AppliedOperator {
        password: "old".into(),
        rotating: vec!["new".into()],
    };
    let name = "cache-operator-applied";
    let fake = FakeSecrets::with([old.secret(&cluster(), labels::CLUSTER, name)]);
    let settled = AppliedOperator {
        password: "new".into(),
        rotating: Vec::new(),
    };
    keep_applied_operator(&fake, &cluster(), labels::CLUSTER, &settled, FIELD_MANAGER)
        .await
        .expect("kept");
    let kept = fake.secret(name).expect("kept");
    assert_eq!(AppliedOperator::read(&kept), Some(settled));
    fake.fail(Verb::Apply, name, 409);
    let failed =
        keep_applied_operator(&fake, &cluster(), labels::CLUSTER, &old, FIELD_MANAGER).await;
    assert!(matches!(failed, Err(Error::Api(e)) if e.op == Op::Apply));
}

#[tokio::test]
async fn a_new_cluster_gets_both_passwords_and_keeps_the_operators_as_applied() {
    let fake = FakeSecrets::default();
    let passwords = prepare(&fake, &cluster(), false, FIELD_MANAGER)
        .await
        .expect("no API error");
    let operator = passwords.operator.expect("generated");
    let default = passwords.default.expect("generated");
    assert_ne!(operator, default);
    assert_eq!(
        passwords.operator_version.as_deref(),
        Some("cache-operator/1")
    );
    assert_eq!(passwords.default_version.as_deref(), Some("cache-auth/3"));
    let applied = passwords.operator_applied.expect("kept");
    assert_eq!(applied.password, operator);
    assert_eq!(
        fake.writes(),
        [
            (Verb::Create, "cache-operator".to_string()),
            (Verb::Apply, "cache-operator-applied".to_string()),
            (Verb::Create, "cache-auth".to_string()),
        ]
    );
}

#[tokio::test]
async fn a_running_cluster_whose_secrets_are_gone_gets_nothing_new() {
    let fake = FakeSecrets::default();
    let passwords = prepare(&fake, &cluster(), true, FIELD_MANAGER)
        .await
        .expect("no API error");
    assert!(passwords.operator.is_err());
    assert!(passwords.default.is_err());
    assert!(passwords.operator_applied.is_none());
    assert_eq!(fake.writes(), []);
}

#[tokio::test]
async fn a_cluster_naming_its_own_secrets_has_none_created() {
    let mut cluster = cluster();
    cluster.spec.common.auth = Some(Auth {
        password_secret_ref: Some(SecretKeyRef {
            name: "mine".into(),
            key: "pw".into(),
        }),
        ..Default::default()
    });
    let fake = FakeSecrets::default();
    let passwords = prepare(&fake, &cluster, false, FIELD_MANAGER)
        .await
        .expect("no API error");
    let why = passwords.default.expect_err("no Secret");
    assert_eq!(
        why,
        PasswordError::SecretMissing(SecretKeyRef {
            name: "mine".into(),
            key: "pw".into(),
        })
    );
    assert_eq!(why.to_string(), "Secret mine does not exist");
    // The operator's is still generated: the spec names none.
    assert!(passwords.operator.is_ok());
    assert!(!fake.writes().iter().any(|(_, n)| n == "mine"));
}
