//! `kubectl valkey rotate-password <name> [--which ...]`: a new password in the Secret the
//! topology reads it from; the operator does the rest.

use anyhow::{Result, bail};

use crate::kube_api::Session;
use crate::passwords::{self, Which};

pub async fn run(session: &Session, name: &str, which: &Which) -> Result<()> {
    let topology = session.topology(name).await?;
    let reference = passwords::secret_of(&topology, which)?;
    let Some(secret) = session.secret(&reference.name).await? else {
        bail!(
            "Secret {} (the one {} reads this password from) was not found in namespace {}: nothing written (the operator creates a generated Secret itself; a Secret the spec names is yours to create)",
            reference.name,
            super::object(&topology),
            session.namespace
        );
    };
    let has_key = secret
        .data
        .as_ref()
        .is_some_and(|d| d.contains_key(&reference.key));
    if !has_key {
        bail!(
            "Secret {} has no key {:?}: nothing written (the topology reads its password there)",
            reference.name,
            reference.key
        );
    }
    if secret.metadata.deletion_timestamp.is_some() {
        bail!(
            "Secret {} is being deleted: nothing written",
            reference.name
        );
    }
    let password = passwords::new_password(&passwords::random_bytes()?);
    let patch = passwords::secret_patch(
        &reference.key,
        &password,
        secret.metadata.resource_version.as_deref(),
    );
    session.patch_secret(&reference.name, &patch).await?;
    println!(
        "secret/{} updated: a new random password under key {:?} (not shown; read it from the Secret)",
        reference.name, reference.key
    );
    println!("Next: {}", passwords::what_next(&topology, which));
    Ok(())
}
