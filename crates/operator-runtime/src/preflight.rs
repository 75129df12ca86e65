//! Start-up checks: is the API server reachable, and are the CRDs we watch installed?
//!
//! Without them a controller would start and then retry its watches forever with
//! errors that do not say what is wrong. Checking first turns that into one clear line
//! and a non-zero exit.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::Duration;

use kube::{Client, Resource};

use crate::describe_kube_error;

/// Upper bound for the whole check, so an unreachable API server fails the start in
/// seconds instead of hanging on TCP or TLS timeouts.
pub const PREFLIGHT_TIMEOUT: Duration = Duration::from_secs(10);

/// A custom resource type the controller needs to be served by the API server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequiredCrd {
    group: Cow<'static, str>,
    version: Cow<'static, str>,
    plural: Cow<'static, str>,
}

impl RequiredCrd {
    pub const fn new(group: &'static str, version: &'static str, plural: &'static str) -> Self {
        Self {
            group: Cow::Borrowed(group),
            version: Cow::Borrowed(version),
            plural: Cow::Borrowed(plural),
        }
    }

    /// The requirement for a typed resource, e.g. `RequiredCrd::of::<ValkeyNode>()`.
    pub fn of<K: Resource<DynamicType = ()>>() -> Self {
        Self {
            group: Cow::Owned(K::group(&()).into_owned()),
            version: Cow::Owned(K::version(&()).into_owned()),
            plural: Cow::Owned(K::plural(&()).into_owned()),
        }
    }

    /// The CRD's object name, `<plural>.<group>`, as `kubectl get crd` shows it.
    pub fn crd_name(&self) -> String {
        format!("{}.{}", self.plural, self.group)
    }

    /// The discovery path segment: `<group>/<version>`, or just `<version>` for core types.
    fn group_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

/// Why the controller cannot start. Each message is one self-explanatory line.
#[derive(Debug, thiserror::Error)]
pub enum PreflightError {
    #[error(
        "cannot reach the Kubernetes API server: {} (check KUBECONFIG or the in-cluster service account)",
        describe_kube_error(.0)
    )]
    Unreachable(kube::Error),

    #[error(
        "cannot reach the Kubernetes API server: no answer within {}s (check KUBECONFIG or the in-cluster service account)",
        .0.as_secs()
    )]
    Timeout(Duration),

    #[error(
        "cannot list the resources of API group {group_version}: {} (check the API server and the service account's permissions)",
        describe_kube_error(.cause)
    )]
    Discovery {
        group_version: String,
        cause: kube::Error,
    },

    #[error(
        "{} {} not installed: apply deploy/crds first (kubectl apply -k deploy/crds)",
        if .0.len() == 1 { "CRD" } else { "CRDs" },
        crd_list(.0)
    )]
    MissingCrds(Vec<String>),
}

fn crd_list(names: &[String]) -> String {
    let verb = if names.len() == 1 { "is" } else { "are" };
    format!("{} {verb}", names.join(", "))
}

/// [`check_once`] until every required type is served, for up to `crd_wait` while only
/// CRDs are missing (an install that applies CRDs and controllers together races them).
pub async fn check(
    client: &Client,
    required: &[RequiredCrd],
    crd_wait: Duration,
) -> Result<(), PreflightError> {
    let started = tokio::time::Instant::now();
    let mut told = false;
    loop {
        match check_once(client, required).await {
            Err(PreflightError::MissingCrds(missing)) if started.elapsed() < crd_wait => {
                if !told {
                    tracing::info!(
                        crds = missing.join(", "),
                        wait_seconds = crd_wait.as_secs(),
                        "waiting for CRDs to be served"
                    );
                    told = true;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            result => return result,
        }
    }
}

/// Checks that the API server answers and serves every `required` type, within
/// [`PREFLIGHT_TIMEOUT`].
///
/// Uses discovery (`/version`, `/apis/<group>/<version>`), which every authenticated
/// client may read, rather than reading CustomResourceDefinitions, which would need
/// cluster-wide RBAC for no benefit. A CRD that is installed but does not serve the
/// required version counts as missing.
pub async fn check_once(client: &Client, required: &[RequiredCrd]) -> Result<(), PreflightError> {
    tokio::time::timeout(PREFLIGHT_TIMEOUT, check_unbounded(client, required))
        .await
        .map_err(|_| PreflightError::Timeout(PREFLIGHT_TIMEOUT))?
}

async fn check_unbounded(client: &Client, required: &[RequiredCrd]) -> Result<(), PreflightError> {
    client
        .apiserver_version()
        .await
        .map_err(PreflightError::Unreachable)?;

    let mut by_group_version: BTreeMap<String, Vec<&RequiredCrd>> = BTreeMap::new();
    for crd in required {
        by_group_version
            .entry(crd.group_version())
            .or_default()
            .push(crd);
    }

    let mut missing = Vec::new();
    for (group_version, crds) in by_group_version {
        let listed = if crds[0].group.is_empty() {
            client.list_core_api_resources(&group_version).await
        } else {
            client.list_api_group_resources(&group_version).await
        };
        let served: Vec<String> = match listed {
            Ok(list) => list.resources.into_iter().map(|r| r.name).collect(),
            // The whole group/version is unknown: none of its CRDs are installed.
            Err(kube::Error::Api(status)) if status.code == 404 => Vec::new(),
            Err(cause) => {
                return Err(PreflightError::Discovery {
                    group_version,
                    cause,
                });
            }
        };
        missing.extend(
            crds.into_iter()
                .filter(|crd| !served.iter().any(|name| *name == crd.plural))
                .map(RequiredCrd::crd_name),
        );
    }

    if missing.is_empty() {
        Ok(())
    } else {
        Err(PreflightError::MissingCrds(missing))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;

    #[test]
    fn names_a_crd_like_kubectl() {
        let crd = RequiredCrd::new("valkey.rs", "v1alpha1", "valkeynodes");
        assert_eq!(crd.crd_name(), "valkeynodes.valkey.rs");
        assert_eq!(crd.group_version(), "valkey.rs/v1alpha1");
    }

    #[test]
    fn derives_requirement_from_a_typed_resource() {
        let pod = RequiredCrd::of::<Pod>();
        assert_eq!(pod, RequiredCrd::new("", "v1", "pods"));
        assert_eq!(pod.group_version(), "v1");
    }

    #[test]
    fn missing_crd_message_names_the_crd_and_the_fix() {
        let one = PreflightError::MissingCrds(vec!["valkeynodes.valkey.rs".into()]);
        assert_eq!(
            one.to_string(),
            "CRD valkeynodes.valkey.rs is not installed: apply deploy/crds first (kubectl apply -k deploy/crds)"
        );
        let two = PreflightError::MissingCrds(vec![
            "valkeynodes.valkey.rs".into(),
            "valkeyclusters.valkey.rs".into(),
        ]);
        assert_eq!(
            two.to_string(),
            "CRDs valkeynodes.valkey.rs, valkeyclusters.valkey.rs are not installed: apply deploy/crds first (kubectl apply -k deploy/crds)"
        );
    }

    #[test]
    fn timeout_message_says_how_long_we_waited() {
        assert_eq!(
            PreflightError::Timeout(PREFLIGHT_TIMEOUT).to_string(),
            "cannot reach the Kubernetes API server: no answer within 10s (check KUBECONFIG or the in-cluster service account)"
        );
    }

    #[test]
    fn api_errors_are_summarised_on_one_line() {
        let status =
            kube::core::Status::failure("forbidden: User \"system:anonymous\"", "Forbidden")
                .with_code(403);
        let error = PreflightError::Discovery {
            group_version: "valkey.rs/v1alpha1".into(),
            cause: kube::Error::Api(Box::new(status)),
        };
        let message = error.to_string();
        assert_eq!(
            message,
            "cannot list the resources of API group valkey.rs/v1alpha1: forbidden: User \"system:anonymous\" (HTTP 403 Forbidden) (check the API server and the service account's permissions)"
        );
        assert!(!message.contains('\n'));
    }
}
