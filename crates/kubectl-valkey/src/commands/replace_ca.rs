//! `kubectl valkey replace-ca <name>`: a new value for valkey.rs/replace-ca.

use anyhow::{Result, bail};
use crd_types::names::annotations;

use crate::kube_api::Session;
use crate::patches;

pub async fn run(session: &Session, name: &str) -> Result<()> {
    let topology = session.topology(name).await?;
    let object = super::object(&topology);
    match topology.common().tls.as_ref() {
        None => bail!("{object} has no spec.tls: there is no CA to replace"),
        Some(tls) if tls.secret_name.is_some() => bail!(
            "{object} serves the certificate of Secret {}: that CA is yours to replace (put both CAs in its ca.crt first; docs/security.md)",
            tls.secret_name.as_deref().unwrap_or_default()
        ),
        Some(_) => {}
    }
    let current = topology.annotations().get(annotations::REPLACE_CA).cloned();
    let value = patches::new_replace_ca_value(current.as_deref(), super::now() as u64);
    session
        .patch_topology(&topology, &patches::replace_ca(&value))
        .await?;
    let under_way = topology.ca_replacement().is_some();
    println!(
        "{object} annotated {}={value}: the operator {} a new CA; members trust both before any serves a certificate of the new one. Follow status.caReplacement (kubectl valkey status {name}); clients must re-read ca.crt of {name}-ca while it holds both.",
        annotations::REPLACE_CA,
        if under_way {
            "finishes the replacement under way, then starts another with"
        } else {
            "starts replacing the CA with"
        }
    );
    Ok(())
}
