//! A platform's identity for the pods, as OpenShift's restricted-v2 assigns one: a UID and
//! an fsGroup from the namespace's range, no GID (so group 0), in a namespace whose Pod
//! Security admission enforces `restricted`. And what a member's process really runs as,
//! read from /proc: the local node agent's containers are host processes, so the PID that
//! `INFO server` gives is the host's.

use anyhow::{Context, Result, bail};
use crd_types::pod_template::{PodIdentity, PodTemplate};
use crd_types::template::ValkeyNodeTemplate;
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::{Patch, PatchParams};

/// The UID and fsGroup: the start of a range OpenShift hands a namespace.
pub const ASSIGNED_ID: u32 = 1_000_680_000;

/// `pod.securityContext` as restricted-v2 fills it: UID and fsGroup, GID left out.
pub fn assigned_identity() -> PodIdentity {
    PodIdentity {
        run_as_user: Some(ASSIGNED_ID.into()),
        run_as_group: None,
        fs_group: Some(ASSIGNED_ID.into()),
    }
}

/// Puts [`assigned_identity`] on `template`'s pods.
pub fn with_assigned_identity(template: &mut ValkeyNodeTemplate) {
    template
        .pod
        .get_or_insert_with(PodTemplate::default)
        .security_context = Some(assigned_identity());
}

/// Makes the API server refuse, in `namespace`, any pod outside the restricted Pod Security
/// Standard (the workload controllers' pod creations included).
pub async fn enforce_restricted(client: &kube::Client, namespace: &str) -> Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let labels = serde_json::json!({"metadata": {"labels": {
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/enforce-version": "latest",
    }}});
    namespaces
        .patch(namespace, &PatchParams::default(), &Patch::Merge(&labels))
        .await
        .with_context(|| format!("labelling namespace {namespace} restricted"))?;
    Ok(())
}

/// The real, effective UID and GID and the supplementary groups of a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessIdentity {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

/// Who the server that answered `info` (an `INFO server` reply) runs as.
pub fn process_identity(info: &str) -> Result<ProcessIdentity> {
    let pid = info
        .lines()
        .find_map(|l| l.trim().strip_prefix("process_id:"))
        .context("INFO server has no process_id")?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    parse_status(&status)
}

/// Fails unless the server that answered `info` runs as [`assigned_identity`] gives it: the
/// UID, group 0, and the fsGroup among its groups.
pub fn runs_as_assigned(info: &str) -> Result<()> {
    let id = process_identity(info)?;
    if id.uid != ASSIGNED_ID || id.gid != 0 || !id.groups.contains(&ASSIGNED_ID) {
        bail!("runs as {id:?}, not UID {ASSIGNED_ID} GID 0 with group {ASSIGNED_ID}");
    }
    Ok(())
}

fn parse_status(status: &str) -> Result<ProcessIdentity> {
    let ids = |key: &str| -> Result<Vec<u32>> {
        let line = status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .with_context(|| format!("no {key} line"))?;
        line.split_whitespace()
            .map(|n| n.parse().with_context(|| format!("{key} {line}")))
            .collect()
    };
    let (uid, gid) = (ids("Uid:")?, ids("Gid:")?);
    // Real, effective, saved, filesystem: all four the same for a process that dropped root.
    if uid.iter().any(|u| *u != uid[0]) || gid.iter().any(|g| *g != gid[0]) {
        bail!("mixed ids: Uid {uid:?}, Gid {gid:?}");
    }
    Ok(ProcessIdentity {
        uid: uid[0],
        gid: gid[0],
        groups: ids("Groups:")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_status_gives_the_ids() {
        let status = "Name:\tvalkey-server\nUid:\t1000680000\t1000680000\t1000680000\t1000680000\n\
                      Gid:\t0\t0\t0\t0\nFDSize:\t64\nGroups:\t1000680000 \n";
        assert_eq!(
            parse_status(status).unwrap(),
            ProcessIdentity {
                uid: 1000680000,
                gid: 0,
                groups: vec![1000680000]
            }
        );
        let mixed = status.replace("Uid:\t1000680000\t1000680000", "Uid:\t0\t1000680000");
        assert!(parse_status(&mixed).is_err());
    }
}
