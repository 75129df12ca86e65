//! A topology's password Secrets: generated ones are created when absent (never rewritten),
//! and the passwords are read for logging in and for the guard.

use std::fmt::Debug;
use std::io::Read;

use crd_types::ValkeyCluster;
use crd_types::names::{self, labels};
use k8s_openapi::api::core::v1::Secret;
use kube::{Resource, ResourceExt};
use operator_runtime::{ApiResultExt, ObjectName, Op};
use topology_controller::shared::auth::{self, AppliedOperator, PasswordError, TopologySecret};

use crate::driver::shared::error::Error;
use crate::driver::shared::member_tls::TlsUnusable;
use crate::driver::shared::secret_store::SecretStore;

#[cfg(test)]
mod tests;

/// What the controller knows about a topology's passwords, and why one cannot be used;
/// the guard puts the reasons in words.
pub struct Passwords {
    /// The `operator` user's password, or why it cannot be read, and its Secret's
    /// `<name>/<resourceVersion>`.
    pub operator: Result<String, PasswordError>,
    pub operator_version: Option<String>,
    /// The operator passwords members hold (see [`applied_operator`]).
    pub operator_applied: Option<AppliedOperator>,
    /// The default user's password, or why it cannot be read (members would not start).
    pub default: Result<String, PasswordError>,
    /// The default password Secret's `<name>/<resourceVersion>`, when it was read.
    pub default_version: Option<String>,
    /// Why the TLS Secret cannot be used, if it cannot (see [`crate::driver::shared::member_tls::read`]).
    pub tls_problem: Option<TlsUnusable>,
}

/// A cluster's passwords; see [`read`].
pub async fn prepare<S: SecretStore>(
    secrets: &S,
    cluster: &ValkeyCluster,
    members_exist: bool,
    field_manager: &str,
) -> Result<Passwords, Error> {
    let (password, operator) = auth::cluster_secrets(cluster);
    let (operator, operator_version) =
        read_with_version(secrets, cluster, labels::CLUSTER, &operator, members_exist).await?;
    let operator_applied =
        applied_operator(secrets, cluster, labels::CLUSTER, &operator, field_manager).await?;
    let (default, default_version) =
        read_with_version(secrets, cluster, labels::CLUSTER, &password, members_exist).await?;
    Ok(Passwords {
        operator,
        operator_version,
        operator_applied,
        default,
        default_version,
        tls_problem: None,
    })
}

/// One password of `topology` (labelled `label_key`), or why it cannot be used; a generated
/// Secret is created first if it may be. It may only while the topology has no member: once
/// servers run with its value, a new random one would lock everyone out, so a deleted one is
/// reported instead.
pub async fn read<S, K>(
    secrets: &S,
    topology: &K,
    label_key: &str,
    wanted: &TopologySecret,
    members_exist: bool,
) -> Result<Result<String, PasswordError>, Error>
where
    S: SecretStore,
    K: Resource<DynamicType = ()> + Debug,
{
    let (password, _) =
        read_with_version(secrets, topology, label_key, wanted, members_exist).await?;
    Ok(password)
}

/// [`read`], with the Secret's `<name>/<resourceVersion>` when there is one (a rotation
/// records which version it goes to).
pub async fn read_with_version<S, K>(
    secrets: &S,
    topology: &K,
    label_key: &str,
    wanted: &TopologySecret,
    members_exist: bool,
) -> Result<(Result<String, PasswordError>, Option<String>), Error>
where
    S: SecretStore,
    K: Resource<DynamicType = ()> + Debug,
{
    let ns = topology.namespace().unwrap_or_default();
    let reference = &wanted.reference;
    let mut secret = secrets
        .get_opt(&reference.name)
        .await
        .on(Op::Read, ObjectName::new::<Secret>(&ns, &reference.name))?;
    if secret.is_none() && wanted.generated && !members_exist {
        secret = Some(create(secrets, topology, label_key, &reference.name).await?);
    }
    let problem = match &secret {
        None if wanted.generated && members_exist => {
            Some(PasswordError::GeneratedGone(reference.clone()))
        }
        Some(s) if wanted.generated => auth::not_this_topologys(s, topology).map(Into::into),
        _ => None,
    };
    let version = secret.as_ref().map(|s| {
        format!(
            "{}/{}",
            reference.name,
            s.resource_version().unwrap_or_default()
        )
    });
    let password = match problem {
        Some(why) => Err(why),
        None => auth::password_in(secret.as_ref(), reference),
    };
    Ok((password, version))
}

/// The operator passwords members of `topology` hold ([`auth::AppliedOperator`]), kept in
/// `<name>-operator-applied` (owned by the topology). Created from `operator`, the
/// Secret's password, when absent: right for every topology whose Secret did not change
/// since its members started. `None` while neither can be read.
pub async fn applied_operator<S, K>(
    secrets: &S,
    topology: &K,
    label_key: &str,
    operator: &Result<String, PasswordError>,
    field_manager: &str,
) -> Result<Option<AppliedOperator>, Error>
where
    S: SecretStore,
    K: Resource<DynamicType = ()> + Debug,
{
    let ns = topology.namespace().unwrap_or_default();
    let name = names::applied_operator_secret_name(&topology.name_any());
    let kept = secrets
        .get_opt(&name)
        .await
        .on(Op::Read, ObjectName::new::<Secret>(&ns, &name))?;
    match (kept, operator) {
        (Some(kept), _) => Ok(AppliedOperator::read(&kept)),
        (None, Ok(password)) => {
            let first = AppliedOperator {
                password: password.clone(),
                rotating: Vec::new(),
            };
            keep_applied_operator(secrets, topology, label_key, &first, field_manager).await?;
            Ok(Some(first))
        }
        (None, Err(_)) => Ok(None),
    }
}

/// Keeps `applied` as the operator passwords members of `topology` hold (see
/// [`applied_operator`]).
pub async fn keep_applied_operator<S, K>(
    secrets: &S,
    topology: &K,
    label_key: &str,
    applied: &AppliedOperator,
    field_manager: &str,
) -> Result<(), Error>
where
    S: SecretStore,
    K: Resource<DynamicType = ()> + Debug,
{
    let ns = topology.namespace().unwrap_or_default();
    let name = names::applied_operator_secret_name(&topology.name_any());
    let secret = applied.secret(topology, label_key, &name);
    secrets
        .apply(&name, &secret, field_manager)
        .await
        .on(Op::Apply, ObjectName::new::<Secret>(&ns, &name))?;
    Ok(())
}

/// Creates a generated Secret; if another writer created it first, theirs is kept.
async fn create<S, K>(
    secrets: &S,
    topology: &K,
    label_key: &str,
    name: &str,
) -> Result<Secret, Error>
where
    S: SecretStore,
    K: Resource<DynamicType = ()>,
{
    let ns = topology.namespace().unwrap_or_default();
    let mut random = [0u8; auth::PASSWORD_BYTES];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut random))
        .map_err(Error::Random)?;
    let password = auth::password_from_random(&random);
    let secret = auth::generated_secret(topology, label_key, name, &password);
    let object = || ObjectName::new::<Secret>(&ns, name);
    let created = secrets.create(&secret).await;
    if let Err(kube::Error::Api(e)) = &created
        && e.code == 409
    {
        return Ok(secrets.get(name).await.on(Op::Read, object())?);
    }
    let created = created.on(Op::Create, object())?;
    tracing::info!(
        owner = %topology.name_any(),
        kind = %K::kind(&()),
        secret = %name,
        "generated a password Secret"
    );
    Ok(created)
}
