//! The cluster's password Secrets: generated ones are created when absent (never
//! rewritten), and the operator's password is read for logging in.

use std::io::Read;

use crd_types::ValkeyCluster;
use k8s_openapi::api::core::v1::Secret;
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use operator_runtime::{ApiResultExt, ObjectName, Op};
use topology_controller::auth::{self, ClusterSecret};

use crate::error::Error;

/// What the controller knows about the cluster's passwords.
pub struct Passwords {
    /// The `operator` user's password, or why it cannot be read.
    pub operator: Result<String, String>,
    /// Why the default user's password cannot be read, if it cannot: members would not start.
    pub default_problem: Option<String>,
}

/// Creates the missing generated Secrets and reads both passwords. A generated Secret is
/// created only while the cluster has no member: once servers run with its value, a new
/// random one would lock everyone out, so a deleted one is reported instead.
pub async fn prepare(
    secrets: &Api<Secret>,
    cluster: &ValkeyCluster,
    members_exist: bool,
) -> Result<Passwords, Error> {
    let (password, operator) = auth::cluster_secrets(cluster);
    Ok(Passwords {
        operator: read(secrets, cluster, &operator, members_exist).await?,
        default_problem: read(secrets, cluster, &password, members_exist)
            .await?
            .err(),
    })
}

/// One password, or why it cannot be used; a generated Secret is created first if it may be.
async fn read(
    secrets: &Api<Secret>,
    cluster: &ValkeyCluster,
    wanted: &ClusterSecret,
    members_exist: bool,
) -> Result<Result<String, String>, Error> {
    let ns = cluster.namespace().unwrap_or_default();
    let reference = &wanted.reference;
    let mut secret = secrets
        .get_opt(&reference.name)
        .await
        .on(Op::Read, ObjectName::new::<Secret>(&ns, &reference.name))?;
    if secret.is_none() && wanted.generated && !members_exist {
        secret = Some(create(secrets, cluster, &reference.name).await?);
    }
    let problem = match &secret {
        None if wanted.generated && members_exist => Some(format!(
            "Secret {} does not exist but the members already run (it was deleted, or \
             they predate generated passwords); a new password would lock them out, so \
             restore it (CONFIG GET requirepass or masterauth on a member shows the value)",
            reference.name
        )),
        Some(s) if wanted.generated => auth::not_this_clusters(s, cluster),
        _ => None,
    };
    Ok(match problem {
        Some(why) => Err(why),
        None => auth::password_in(secret.as_ref(), reference),
    })
}

/// Creates a generated Secret; if another writer created it first, theirs is kept.
async fn create(
    secrets: &Api<Secret>,
    cluster: &ValkeyCluster,
    name: &str,
) -> Result<Secret, Error> {
    let ns = cluster.namespace().unwrap_or_default();
    let mut random = [0u8; auth::PASSWORD_BYTES];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut random))
        .map_err(Error::Random)?;
    let secret = auth::generated_secret(cluster, name, &auth::password_from_random(&random));
    let object = || ObjectName::new::<Secret>(&ns, name);
    let created = secrets.create(&PostParams::default(), &secret).await;
    if let Err(kube::Error::Api(e)) = &created
        && e.code == 409
    {
        return Ok(secrets.get(name).await.on(Op::Read, object())?);
    }
    let created = created.on(Op::Create, object())?;
    tracing::info!(cluster = %cluster.name_any(), secret = %name, "generated a password Secret");
    Ok(created)
}
