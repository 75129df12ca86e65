//! An in-memory [`SecretStore`] for tests, answering as the API server does where the
//! modules' rules depend on it: a create of an existing name is 409 AlreadyExists, a merge
//! patch naming a `resourceVersion` the Secret no longer has is 409 Conflict, a get of a
//! missing one is 404, and every write gives the Secret a new `resourceVersion`. A test may
//! have the next call of a kind fail, or another writer (a previous leader) write first.
//!
//! Server-side apply is approximated by a merge of the applied object: fields the manager
//! stops applying are not removed (no caller here stops applying one).

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::core::Status;
use serde_json::Value;

use super::SecretStore;

/// A kind of call, as the fake records and fails them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    /// `get` and `get_opt`.
    Get,
    Create,
    Apply,
    Patch,
}

/// The Secrets of one namespace, in memory.
#[derive(Default)]
pub struct FakeSecrets {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    secrets: BTreeMap<String, Secret>,
    version: u64,
    calls: Vec<(Verb, String)>,
    failures: Vec<(Verb, String, u16)>,
    rival: Option<Secret>,
}

impl State {
    /// Stores `secret` as the API server would: a new `resourceVersion`, a uid if new.
    fn store(&mut self, mut secret: Secret) -> Secret {
        self.version += 1;
        let name = secret.name_any();
        secret.metadata.resource_version = Some(self.version.to_string());
        if secret.metadata.uid.is_none() {
            secret.metadata.uid = Some(format!("secret-uid-{}", self.version));
        }
        self.secrets.insert(name, secret.clone());
        secret
    }

    /// Records the call, then fails it if the test said so, after another writer's write
    /// when it is a write.
    fn call(&mut self, verb: Verb, name: &str) -> Result<(), kube::Error> {
        self.calls.push((verb, name.to_string()));
        if verb != Verb::Get
            && let Some(rival) = self.rival.take()
        {
            self.store(rival);
        }
        let failure = self
            .failures
            .iter()
            .position(|(v, n, _)| *v == verb && n == name);
        match failure {
            Some(i) => Err(api_error(self.failures.remove(i).2, "Injected")),
            None => Ok(()),
        }
    }

    fn existing(&self, name: &str) -> Result<Secret, kube::Error> {
        self.secrets
            .get(name)
            .cloned()
            .ok_or_else(|| api_error(404, "NotFound"))
    }
}

impl FakeSecrets {
    /// A namespace holding `secrets` (each given a `resourceVersion`).
    pub fn with(secrets: impl IntoIterator<Item = Secret>) -> Self {
        let fake = Self::default();
        for secret in secrets {
            fake.put(secret);
        }
        fake
    }

    /// Stores `secret` as another writer would, outside the code under test.
    pub fn put(&self, secret: Secret) -> Secret {
        self.state().store(secret)
    }

    /// The Secret `name` as stored now.
    pub fn secret(&self, name: &str) -> Option<Secret> {
        self.state().secrets.get(name).cloned()
    }

    /// The next `verb` call on `name` fails with HTTP `code`.
    pub fn fail(&self, verb: Verb, name: &str, code: u16) {
        self.state().failures.push((verb, name.to_string(), code));
    }

    /// Another writer stores `secret` just before the next write reaches the fake: that
    /// write races with it, and loses as it would against the API server.
    pub fn rival_writes_first(&self, secret: Secret) {
        self.state().rival = Some(secret);
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<(Verb, String)> {
        self.state().calls.clone()
    }

    /// Every write so far (creates, applies, patches), in order.
    pub fn writes(&self) -> Vec<(Verb, String)> {
        let calls = self.calls();
        calls.into_iter().filter(|(v, _)| *v != Verb::Get).collect()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .expect("the fake's lock is never poisoned")
    }
}

impl SecretStore for FakeSecrets {
    async fn get_opt(&self, name: &str) -> Result<Option<Secret>, kube::Error> {
        let mut state = self.state();
        state.call(Verb::Get, name)?;
        Ok(state.secrets.get(name).cloned())
    }

    async fn get(&self, name: &str) -> Result<Secret, kube::Error> {
        let mut state = self.state();
        state.call(Verb::Get, name)?;
        state.existing(name)
    }

    async fn create(&self, secret: &Secret) -> Result<Secret, kube::Error> {
        let mut state = self.state();
        let name = secret.name_any();
        state.call(Verb::Create, &name)?;
        if state.secrets.contains_key(&name) {
            return Err(api_error(409, "AlreadyExists"));
        }
        let mut secret = secret.clone();
        secret.metadata.resource_version = None;
        Ok(state.store(secret))
    }

    async fn apply(
        &self,
        name: &str,
        secret: &Secret,
        _field_manager: &str,
    ) -> Result<Secret, kube::Error> {
        let mut state = self.state();
        state.call(Verb::Apply, name)?;
        let applied = serde_json::to_value(secret).map_err(kube::Error::SerdeError)?;
        let mut merged = match state.secrets.get(name) {
            Some(live) => serde_json::to_value(live).map_err(kube::Error::SerdeError)?,
            None => Value::Null,
        };
        merge(&mut merged, &applied);
        let merged = serde_json::from_value(merged).map_err(kube::Error::SerdeError)?;
        Ok(state.store(merged))
    }

    async fn merge_patch(
        &self,
        name: &str,
        patch: &Value,
        _field_manager: &str,
    ) -> Result<Secret, kube::Error> {
        let mut state = self.state();
        state.call(Verb::Patch, name)?;
        let live = state.existing(name)?;
        let wanted = patch.pointer("/metadata/resourceVersion");
        if let Some(Value::String(wanted)) = wanted
            && Some(wanted) != live.metadata.resource_version.as_ref()
        {
            return Err(api_error(409, "Conflict"));
        }
        let mut merged = serde_json::to_value(&live).map_err(kube::Error::SerdeError)?;
        merge(&mut merged, patch);
        let merged = serde_json::from_value(merged).map_err(kube::Error::SerdeError)?;
        Ok(state.store(merged))
    }
}

/// The error the API server answers with HTTP `code`.
pub fn api_error(code: u16, reason: &str) -> kube::Error {
    let status = Status::failure(&format!("the fake answers {code}"), reason).with_code(code);
    kube::Error::Api(status.boxed())
}

/// JSON merge patch (RFC 7386): `null` removes, objects merge, anything else replaces.
fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(serde_json::Map::new());
    }
    let target = target.as_object_mut().expect("made an object above");
    for (key, value) in patch {
        if value.is_null() {
            target.remove(key);
        } else {
            merge(target.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}
