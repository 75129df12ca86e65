//! Evaluates every CEL rule of the CRDs client-side (kube's `cel` feature), as the API server
//! would at admission: each rule once accepting and once rejecting, with its message. One
//! file per kind, passwords, users and TLS in `credentials`, deploy/samples in `samples`.

use std::collections::BTreeMap;
use std::sync::Mutex;

use kube::CustomResourceExt;
use kube::core::cel::Validator;
use serde_json::{Value, json};

use crd_types::{ValkeyCluster, ValkeyNode, ValkeyReplication};

/// The kind's schema, generated once per kind: the template's Container and Volume schemas
/// make each generation slow.
fn schema<K: CustomResourceExt>() -> Value {
    static SCHEMAS: Mutex<BTreeMap<&'static str, Value>> = Mutex::new(BTreeMap::new());
    let mut schemas = SCHEMAS.lock().unwrap();
    let schema = schemas.entry(K::crd_name()).or_insert_with(|| {
        let crd = K::crd();
        let schema = crd.spec.versions[0].schema.as_ref().unwrap();
        serde_json::to_value(schema.open_api_v3_schema.as_ref().unwrap()).unwrap()
    });
    schema.clone()
}

/// The messages of every rule the object breaks (on update when `old` is given).
fn violations<K: CustomResourceExt>(object: &Value, old: Option<&Value>) -> Vec<String> {
    match Validator::new().validate(&schema::<K>(), object, old) {
        Ok(()) => vec![],
        Err(errors) => errors.into_vec().into_iter().map(|e| e.message).collect(),
    }
}

#[track_caller]
fn accepted<K: CustomResourceExt>(object: &Value, old: Option<&Value>) {
    let found = violations::<K>(object, old);
    assert!(found.is_empty(), "expected no violation, got {found:?}");
}

#[track_caller]
fn rejected<K: CustomResourceExt>(object: &Value, old: Option<&Value>, message_part: &str) {
    let found = violations::<K>(object, old);
    assert!(
        found.iter().any(|m| m.contains(message_part)),
        "expected a violation containing {message_part:?}, got {found:?}"
    );
}

fn node(spec: Value) -> Value {
    node_named("cache", spec)
}

fn node_named(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "valkey.rs/v1alpha1",
        "kind": "ValkeyNode",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    })
}

fn cluster(spec: Value) -> Value {
    json!({
        "apiVersion": "valkey.rs/v1alpha1",
        "kind": "ValkeyCluster",
        "metadata": {"name": "orders", "namespace": "default"},
        "spec": spec,
    })
}

fn replication(spec: Value) -> Value {
    json!({
        "apiVersion": "valkey.rs/v1alpha1",
        "kind": "ValkeyReplication",
        "metadata": {"name": "sessions", "namespace": "default"},
        "spec": spec,
    })
}

mod credentials;
mod memory_only;
mod monitoring;
mod pod_template;
mod samples;
mod valkey_cluster;
mod valkey_node;
mod valkey_replication;
