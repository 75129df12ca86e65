//! `kubectl valkey report <name>`: a gzipped tarball for a bug report. Holds the topology
//! and its ValkeyNodes (YAML), `status` as the plugin prints it, the Events, the
//! controllers' logs and each member's own views. Never a Secret's data: every value of the
//! topology's Secrets is scrubbed from every file, and so is whatever follows a password
//! directive or command.

use std::path::PathBuf;

use anyhow::{Context, Result};
use crd_types::names::{self, labels};
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::ListParams;

use crate::archive::{Report, component};
use crate::kube_api::Session;
use crate::members::Reach;
use crate::passwords::{self, Which};
use crate::redact::Redactor;
use crate::status_view::View;
use crate::topology::{Topology, strip_managed_fields};

pub struct Options {
    pub output: Option<PathBuf>,
    pub operator_namespace: String,
    pub log_lines: i64,
}

/// Every value of every Secret that belongs to the topology or that it names.
async fn known_secrets(session: &Session, topology: &Topology) -> Result<Vec<Secret>> {
    let mut found: Vec<Secret> = session
        .api::<Secret>()
        .list(&ListParams::default().labels(&format!("{}={}", labels::PART_OF, topology.name())))
        .await?
        .items;
    for name in passwords::password_secrets(topology) {
        if found.iter().any(|s| s.name_any() == name) {
            continue;
        }
        if let Some(secret) = session.secret(&name).await? {
            found.push(secret);
        }
    }
    Ok(found)
}

fn value(secrets: &[Secret], name: &str, key: &str) -> Option<String> {
    let secret = secrets.iter().find(|s| s.name_any() == name)?;
    let bytes = secret.data.as_ref()?.get(key)?;
    Some(String::from_utf8_lossy(&bytes.0).into_owned())
}

/// How to log in to the members: the operator Secret's password, then each one the
/// controller's copy keeps (members may hold one of those during a rotation).
fn reach(session: &Session, topology: &Topology, secrets: &[Secret]) -> Result<Reach> {
    let name = topology.name();
    let operator = passwords::secret_of(topology, &Which::Operator)?;
    let mut candidates: Vec<String> = value(secrets, &operator.name, &operator.key)
        .into_iter()
        .collect();
    let applied = names::applied_operator_secret_name(&name);
    for key in ["password", "rotating"] {
        for line in value(secrets, &applied, key).unwrap_or_default().lines() {
            let line = line.trim().to_string();
            if !line.is_empty() && !candidates.contains(&line) {
                candidates.push(line);
            }
        }
    }
    let ca_pem = match topology.common().tls.as_ref() {
        None => None,
        Some(tls) => match &tls.secret_name {
            Some(secret) => value(secrets, secret, "ca.crt"),
            None => value(secrets, &names::topology_ca_secret_name(&name), "ca.crt"),
        },
    };
    Ok(Reach {
        namespace: session.namespace.clone(),
        operator_passwords: candidates,
        ca_pem,
    })
}

fn yaml<T: serde::Serialize>(object: &T) -> Result<String> {
    let mut value = serde_json::to_value(object)?;
    strip_managed_fields(&mut value);
    Ok(serde_yaml::to_string(&value)?)
}

pub async fn run(session: &Session, name: &str, options: Options) -> Result<()> {
    let topology = session.topology(name).await?;
    let nodes = session.members(&topology).await?;
    let events = session.events(&topology, &nodes).await?;
    let mut secrets = known_secrets(session, &topology).await?;
    // The user's TLS Secret: only its ca.crt is read; its key is scrubbed like the rest.
    if let Some(user_tls) = topology
        .common()
        .tls
        .as_ref()
        .and_then(|t| t.secret_name.clone())
        && let Some(secret) = session.secret(&user_tls).await?
    {
        secrets.push(secret);
    }
    let redactor = Redactor::from_secret_data(
        secrets
            .iter()
            .flat_map(|s| s.data.iter().flat_map(|d| d.values())),
    );

    let mut report = Report::default();
    let kind = topology.kind().as_str().to_lowercase();
    report.add(format!("{kind}-{name}.yaml"), topology.to_yaml()?);
    let view = View {
        namespace: &session.namespace,
        topology: &topology,
        nodes: &nodes,
        events: &events,
        last_events: usize::MAX,
        now: super::now(),
    };
    report.add("status.txt", view.render());
    for node in &nodes {
        report.add(
            format!("valkeynodes/{}.yaml", component(&node.name_any())),
            yaml(node)?,
        );
    }
    report.add("events.yaml", yaml(&events)?);

    match session
        .logs(&options.operator_namespace, options.log_lines)
        .await
    {
        Ok(logs) => {
            for (pod_container, text) in logs {
                let (pod, container) = pod_container
                    .split_once('/')
                    .unwrap_or((&pod_container, ""));
                report.add(
                    format!("logs/{}/{}.log", component(pod), component(container)),
                    text,
                );
            }
        }
        Err(e) => report.add(
            "logs/error.txt",
            format!(
                "error: listing the pods of namespace {}: {e}\n",
                options.operator_namespace
            ),
        ),
    }

    let reach = reach(session, &topology, &secrets)?;
    for node in &nodes {
        for (file, text) in reach.read(topology.kind(), node, name).await {
            report.add(
                format!("members/{}/{file}", component(&node.name_any())),
                text,
            );
        }
    }

    let top = format!("{name}-report");
    let bytes = report.tar_gz(&top, &redactor, super::now() as u64)?;
    let path = options
        .output
        .unwrap_or_else(|| PathBuf::from(format!("{top}.tar.gz")));
    std::fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))?;
    println!(
        "wrote {} ({} files; Secret data left out and every known password redacted)",
        path.display(),
        report.paths().len()
    );
    Ok(())
}
