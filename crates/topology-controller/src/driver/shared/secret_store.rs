//! The Secret calls of [`super::secrets`] and [`super::member_certs`], behind a seam (as
//! [`topology_controller::shared::execute::MemberObjects`] is for members): the binary
//! makes them against the API server through `Api<Secret>`, tests against an in-memory
//! fake (`fake::FakeSecrets`, built for tests only). Each method is the very call those
//! modules made before the seam, with the same errors, so their rules (a 409 on create, a
//! stale `resourceVersion`) read the same against either.

use std::future::Future;

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use operator_runtime::apply;

#[cfg(test)]
pub mod fake;
#[cfg(test)]
mod tests;

/// The Secrets of one namespace, as the topology's Kubernetes half reads and writes them.
pub trait SecretStore: Sync {
    /// The Secret `name`, or `None` when there is none.
    fn get_opt(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<Option<Secret>, kube::Error>> + Send;

    /// The Secret `name`; an error (404) when there is none.
    fn get(&self, name: &str) -> impl Future<Output = Result<Secret, kube::Error>> + Send;

    /// Creates `secret`; 409 (AlreadyExists) when one of its name exists.
    fn create(&self, secret: &Secret) -> impl Future<Output = Result<Secret, kube::Error>> + Send;

    /// Server-side applies `secret` as `field_manager` (forced, see [`apply::apply`]).
    fn apply(
        &self,
        name: &str,
        secret: &Secret,
        field_manager: &str,
    ) -> impl Future<Output = Result<Secret, kube::Error>> + Send;

    /// Merge-patches `name` with `patch` as `field_manager`; 409 (Conflict) when `patch`
    /// names a `metadata.resourceVersion` the Secret no longer has.
    fn merge_patch(
        &self,
        name: &str,
        patch: &serde_json::Value,
        field_manager: &str,
    ) -> impl Future<Output = Result<Secret, kube::Error>> + Send;
}

/// The API server: each method is one request, as the modules made it before the seam.
impl SecretStore for Api<Secret> {
    async fn get_opt(&self, name: &str) -> Result<Option<Secret>, kube::Error> {
        Api::get_opt(self, name).await
    }

    async fn get(&self, name: &str) -> Result<Secret, kube::Error> {
        Api::get(self, name).await
    }

    async fn create(&self, secret: &Secret) -> Result<Secret, kube::Error> {
        Api::create(self, &PostParams::default(), secret).await
    }

    async fn apply(
        &self,
        name: &str,
        secret: &Secret,
        field_manager: &str,
    ) -> Result<Secret, kube::Error> {
        apply::apply(self, name, secret, field_manager).await
    }

    async fn merge_patch(
        &self,
        name: &str,
        patch: &serde_json::Value,
        field_manager: &str,
    ) -> Result<Secret, kube::Error> {
        let params = PatchParams {
            field_manager: Some(field_manager.to_string()),
            ..Default::default()
        };
        Api::patch(self, name, &params, &Patch::Merge(patch)).await
    }
}

/// A reference to a store is one: a caller holding `&&Api<Secret>` passes it as before the
/// seam, when `&Api<Secret>` was taken by deref.
impl<S: SecretStore + ?Sized> SecretStore for &S {
    fn get_opt(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<Option<Secret>, kube::Error>> + Send {
        (**self).get_opt(name)
    }

    fn get(&self, name: &str) -> impl Future<Output = Result<Secret, kube::Error>> + Send {
        (**self).get(name)
    }

    fn create(&self, secret: &Secret) -> impl Future<Output = Result<Secret, kube::Error>> + Send {
        (**self).create(secret)
    }

    fn apply(
        &self,
        name: &str,
        secret: &Secret,
        field_manager: &str,
    ) -> impl Future<Output = Result<Secret, kube::Error>> + Send {
        (**self).apply(name, secret, field_manager)
    }

    fn merge_patch(
        &self,
        name: &str,
        patch: &serde_json::Value,
        field_manager: &str,
    ) -> impl Future<Output = Result<Secret, kube::Error>> + Send {
        (**self).merge_patch(name, patch, field_manager)
    }
}
