//! The fake answers as the API server does where the modules' rules depend on it.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use kube::ResourceExt;
use kube::api::ObjectMeta;
use serde_json::json;

use super::fake::{FakeSecrets, Verb};
use super::*;

fn secret(name: &str, pairs: &[(&str, &str)]) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                .collect(),
        ),
        ..Default::default()
    }
}

fn data(secret: &Secret) -> BTreeMap<String, String> {
    (secret.data.iter().flatten())
        .map(|(k, v)| (k.clone(), String::from_utf8(v.0.clone()).unwrap()))
        .collect()
}

fn code(result: Result<Secret, kube::Error>) -> u16 {
    match result {
        Err(kube::Error::Api(status)) => status.code,
        other => panic!("an API error, not {other:?}"),
    }
}

#[tokio::test]
async fn a_missing_secret_is_none_to_get_opt_and_404_to_get() {
    let fake = FakeSecrets::default();
    assert!(fake.get_opt("a").await.unwrap().is_none());
    assert_eq!(code(fake.get("a").await), 404);
    assert_eq!(
        fake.calls(),
        [(Verb::Get, "a".into()), (Verb::Get, "a".into())]
    );
    assert_eq!(fake.writes(), []);
}

#[tokio::test]
async fn a_create_of_an_existing_name_is_409_and_changes_nothing() {
    let fake = FakeSecrets::with([secret("a", &[("k", "first")])]);
    assert_eq!(
        code(fake.create(&secret("a", &[("k", "second")])).await),
        409
    );
    let kept = fake.secret("a").unwrap();
    assert_eq!(data(&kept)["k"], "first");
    assert_eq!(kept.resource_version().as_deref(), Some("1"));
    let created = fake.create(&secret("b", &[])).await.unwrap();
    assert_eq!(created.resource_version().as_deref(), Some("2"));
    assert!(created.uid().is_some());
}

#[tokio::test]
async fn a_merge_patch_sets_and_removes_keys_only_on_the_version_it_names() {
    let fake = FakeSecrets::with([secret("a", &[("k", "v"), ("gone", "x")])]);
    let stale = json!({"metadata": {"resourceVersion": "0"}, "data": {"k": null}});
    assert_eq!(code(fake.merge_patch("a", &stale, "fm").await), 409);
    assert_eq!(data(&fake.secret("a").unwrap()).len(), 2);
    let current = json!({
        "metadata": {"resourceVersion": "1", "annotations": {"x": "y"}},
        "data": {"gone": null, "new": "bmV3"},
    });
    let patched = fake.merge_patch("a", &current, "fm").await.unwrap();
    let expected = BTreeMap::from([("k".into(), "v".into()), ("new".into(), "new".into())]);
    assert_eq!(data(&patched), expected);
    assert_eq!(patched.annotations()["x"], "y");
    assert_eq!(patched.resource_version().as_deref(), Some("2"));
    assert_eq!(fake.secret("a"), Some(patched));
    // Without a version it is not a precondition; a missing Secret is 404.
    let unconditional = json!({"data": {"k": "dzI="}});
    assert!(fake.merge_patch("a", &unconditional, "fm").await.is_ok());
    assert_eq!(code(fake.merge_patch("b", &unconditional, "fm").await), 404);
}

#[tokio::test]
async fn apply_creates_or_merges_over_what_is_there() {
    let fake = FakeSecrets::default();
    fake.apply("a", &secret("a", &[("k", "1")]), "fm")
        .await
        .unwrap();
    let second = secret("a", &[("k", "2")]);
    let applied = fake.apply("a", &second, "fm").await.unwrap();
    assert_eq!(data(&applied)["k"], "2");
    assert_eq!(fake.writes(), vec![(Verb::Apply, "a".to_string()); 2]);
}

#[tokio::test]
async fn a_rival_writes_just_before_the_next_write_not_before_a_read() {
    let fake = FakeSecrets::default();
    fake.rival_writes_first(secret("a", &[("k", "theirs")]));
    assert!(fake.get_opt("a").await.unwrap().is_none());
    assert_eq!(code(fake.create(&secret("a", &[("k", "ours")])).await), 409);
    assert_eq!(data(&fake.secret("a").unwrap())["k"], "theirs");
    // Once only.
    assert!(fake.create(&secret("b", &[])).await.is_ok());
}

#[tokio::test]
async fn a_failure_fails_the_next_call_of_its_kind_on_its_name_once() {
    let fake = FakeSecrets::with([secret("a", &[])]);
    fake.fail(Verb::Get, "a", 500);
    assert!(fake.get_opt("b").await.is_ok());
    assert!(fake.get_opt("a").await.is_err());
    assert!(fake.get_opt("a").await.unwrap().is_some());
    fake.put(secret("c", &[]));
    assert_eq!(
        fake.secret("c").unwrap().resource_version().as_deref(),
        Some("2")
    );
}
