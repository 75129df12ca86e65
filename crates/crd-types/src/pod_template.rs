//! `template.pod`: what a platform adds to a node's pod (labels, annotations, pull secrets, a
//! service account, the grace period, env, volumes, sidecars and init containers), with CEL
//! rules refusing whatever would break the operator's own pod: its label and annotation
//! keys, its env, volume and container names, its mount paths, and containers outside the
//! restricted Pod Security Standard where a rule can tell. docs/pod-template.md.
//!
//! No `hostNetwork`, `hostPID`, `hostIPC` or `hostPath` is offered: none of them has a field
//! here, and a `hostPath` volume is refused.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, EnvVar, LocalObjectReference, Volume, VolumeMount};
use kube::KubeSchema;
use kube::core::Rule;
use serde::{Deserialize, Serialize};

/// The UID, GID and fsGroup of every pod without `pod.securityContext`: the official
/// image's `valkey` user.
pub const DEFAULT_IDENTITY: i64 = 999;

/// The grace period when `terminationGracePeriodSeconds` is absent.
pub const DEFAULT_TERMINATION_GRACE_SECONDS: i64 = 60;

/// The names of the operator's own containers (valkey, the exporter, the Sentinel and
/// exporter init containers), which sidecars and init containers may not take.
pub const OPERATOR_CONTAINERS: &[&str] =
    &["valkey", "exporter", "sentinel-config", "exporter-auth"];

/// The operator's volumes (the ConfigMap, /data, /tmp, the exporter's password, the users,
/// TLS and operator password Secrets).
pub const OPERATOR_VOLUMES: &[&str] = &[
    "config",
    "data",
    "tmp",
    "exporter-auth",
    "users",
    "tls",
    "operator-password",
];

/// Where the operator mounts them in the valkey container: an extra mount may be neither at
/// one of these nor under it.
pub const OPERATOR_PATHS: &[&str] = &[
    "/data",
    "/etc/valkey",
    "/tmp",
    "/etc/valkey-users",
    "/etc/valkey-tls",
    "/etc/valkey-operator",
    "/run/valkey-exporter",
];

/// The env vars the operator sets on the valkey container.
pub const OPERATOR_ENV: &[&str] = &[
    "POD_IP",
    "POD_NAME",
    "POD_NAMESPACE",
    "REDISCLI_AUTH",
    "VALKEY_OPERATOR_PASSWORD",
];

// The messages name the lists above in words (a rule's message is a literal); the tests
// check that each names every item.
const ENV_MESSAGE: &str = "pod.env: POD_IP, POD_NAME, POD_NAMESPACE, REDISCLI_AUTH, VALKEY_OPERATOR_PASSWORD and any VALKEY_OPERATOR_* are set by the operator (the pod's address and name, the passwords): choose another name";
const VOLUME_NAME_MESSAGE: &str = "pod.volumes: config, data, tmp, exporter-auth, users, tls and operator-password are the operator's own volume names: choose another name";
const MOUNT_PATH_MESSAGE: &str = "pod.volumeMounts: /data, /etc/valkey, /tmp, /etc/valkey-users, /etc/valkey-tls, /etc/valkey-operator and /run/valkey-exporter (and anything under them) are where the operator mounts the data, config, scratch space and credentials: mount elsewhere, for example under /mnt";
const SIDECAR_NAME_MESSAGE: &str = "pod.sidecars: valkey, exporter, sentinel-config and exporter-auth are the operator's own container names: choose another name";
const INIT_NAME_MESSAGE: &str = "pod.initContainers: valkey, exporter, sentinel-config and exporter-auth are the operator's own container names: choose another name";
const SIDECAR_RESTRICTED_MESSAGE: &str = "pod.sidecars: a container must stay within the restricted Pod Security Standard: not privileged, no allowPrivilegeEscalation, not root (runAsNonRoot false or runAsUser 0), no added capability but NET_BIND_SERVICE, no Unconfined seccomp profile";
const INIT_RESTRICTED_MESSAGE: &str = "pod.initContainers: a container must stay within the restricted Pod Security Standard: not privileged, no allowPrivilegeEscalation, not root (runAsNonRoot false or runAsUser 0), no added capability but NET_BIND_SERVICE, no Unconfined seccomp profile";

/// A CEL list literal of `items`.
fn cel_list(items: &[&str]) -> String {
    let quoted: Vec<_> = items.iter().map(|i| format!("'{i}'")).collect();
    format!("[{}]", quoted.join(", "))
}

/// Keys under these prefixes are the operator's, on the pod's labels.
const OPERATOR_LABEL_RULE: &str =
    "self.all(k, !k.startsWith('app.kubernetes.io/') && !k.startsWith('valkey.rs/'))";
/// And on its annotations (`valkey.rs/revision`, `valkey.rs/tls-auto-reload-seconds`,
/// `valkey.rs/operator-password-file` and any later one).
const OPERATOR_ANNOTATION_RULE: &str = "self.all(k, !k.startsWith('valkey.rs/'))";

fn env_rule() -> Rule {
    Rule::new(format!(
        "self.all(e, !(e.name in {}) && !e.name.startsWith('VALKEY_OPERATOR_'))",
        cel_list(OPERATOR_ENV)
    ))
    .message(ENV_MESSAGE)
}

fn volume_name_rule() -> Rule {
    Rule::new(format!(
        "self.all(v, !(v.name in {}))",
        cel_list(OPERATOR_VOLUMES)
    ))
    .message(VOLUME_NAME_MESSAGE)
}

/// The volume sources the restricted Pod Security Standard allows.
fn volume_type_rule() -> Rule {
    Rule::new(
        "self.all(v, has(v.configMap) || has(v.csi) || has(v.downwardAPI) || has(v.emptyDir) || has(v.ephemeral) || has(v.persistentVolumeClaim) || has(v.projected) || has(v.secret))",
    )
    .message("pod.volumes: only configMap, csi, downwardAPI, emptyDir, ephemeral, persistentVolumeClaim, projected and secret volumes are allowed (the restricted Pod Security Standard); hostPath and the other node-bound sources are refused")
}

fn mount_path_rule() -> Rule {
    Rule::new(format!(
        "self.all(m, !{}.exists(d, m.mountPath == d || m.mountPath.startsWith(d + '/')))",
        cel_list(OPERATOR_PATHS)
    ))
    .message(MOUNT_PATH_MESSAGE)
}

fn container_name_rule(message: &'static str) -> Rule {
    Rule::new(format!(
        "self.all(c, !(c.name in {}))",
        cel_list(OPERATOR_CONTAINERS)
    ))
    .message(message)
}

/// `privileged` and `allowPrivilegeEscalation` true, `runAsNonRoot` false, `runAsUser` 0, a
/// capability other than NET_BIND_SERVICE and an Unconfined seccomp profile: what the
/// restricted Pod Security Standard refuses and a rule can see in a container alone.
/// Constant cost per container (the API server estimates every rule's cost).
fn restricted_rule(message: &'static str) -> Rule {
    Rule::new(
        "self.all(c, !has(c.securityContext) || (\
         (!has(c.securityContext.privileged) || !c.securityContext.privileged) && \
         (!has(c.securityContext.allowPrivilegeEscalation) || !c.securityContext.allowPrivilegeEscalation) && \
         (!has(c.securityContext.runAsNonRoot) || c.securityContext.runAsNonRoot) && \
         (!has(c.securityContext.runAsUser) || c.securityContext.runAsUser != 0) && \
         (!has(c.securityContext.capabilities) || !has(c.securityContext.capabilities.add) || c.securityContext.capabilities.add.size() == 0 || (c.securityContext.capabilities.add.size() == 1 && c.securityContext.capabilities.add[0] == 'NET_BIND_SERVICE')) && \
         (!has(c.securityContext.seccompProfile) || c.securityContext.seccompProfile.type != 'Unconfined')))",
    )
    .message(message)
}

/// What a platform adds to the node's pod. Every change rolls the pod (a topology's members
/// replicas first, with the hand-over). No `hostNetwork`, `hostPID` or `hostIPC` is offered,
/// and no `hostPath` volume: a data pod shares nothing with its Kubernetes node.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodTemplate {
    /// Labels on the pod (a mesh opt-out, a cost centre), next to the operator's; the keys
    /// app.kubernetes.io/* and valkey.rs/* are the operator's.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 64))]
    #[x_kube(validation = Rule::new(OPERATOR_LABEL_RULE).message("pod.labels: app.kubernetes.io/*, valkey.rs/* keys are the operator's (its Services and controllers select the pods by them): choose another key"))]
    pub labels: BTreeMap<String, String>,

    /// Annotations on the pod (backup hooks, a mesh's settings), next to the operator's;
    /// the keys valkey.rs/* are the operator's.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 64))]
    #[x_kube(validation = Rule::new(OPERATOR_ANNOTATION_RULE).message("pod.annotations: valkey.rs/* keys are the operator's (the pod's revision, how it reloads certificates and passwords): choose another key"))]
    pub annotations: BTreeMap<String, String>,

    /// Secrets to pull the images with (a private registry).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub image_pull_secrets: Vec<LocalObjectReference>,

    /// The pod's ServiceAccount; the namespace's `default` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub service_account_name: Option<String>,

    /// Mount the ServiceAccount's API token. Off by default: Valkey needs no API access, so a
    /// token is there only when a sidecar asks for it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub automount_service_account_token: bool,

    /// Who the pod's containers run as. Absent: UID, GID and fsGroup 999 (the official
    /// image's `valkey` user). Present: exactly what it sets, and a field left out is not set
    /// on the pod, so a platform that assigns it (OpenShift's restricted-v2 assigns a UID and
    /// an fsGroup from the namespace's ranges, GID 0) does. docs/pod-template.md.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<PodIdentity>,

    /// Seconds between SIGTERM and SIGKILL (default 60). On SIGTERM Valkey saves its RDB
    /// (with `save` on) and syncs its AOF: a large dataset needs longer, or the final save is
    /// cut short.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 10 && self <= 86400").message("pod.terminationGracePeriodSeconds is 10 to 86400: on stop Valkey writes its final save, and a large dataset needs time (the default is 60)"))]
    pub termination_grace_period_seconds: Option<i64>,

    /// Extra env vars for the valkey container.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    #[x_kube(validation = env_rule())]
    pub env: Vec<EnvVar>,

    /// Extra volumes of the pod (for `volumeMounts`, sidecars and init containers).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    #[x_kube(validation = volume_name_rule(), validation = volume_type_rule())]
    pub volumes: Vec<Volume>,

    /// Extra mounts of the valkey container.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    #[x_kube(validation = mount_path_rule())]
    pub volume_mounts: Vec<VolumeMount>,

    /// Containers running next to Valkey, as native sidecars (init containers with
    /// `restartPolicy: Always`, Kubernetes 1.29+): each is started before Valkey and the
    /// operator's init containers, and stopped after Valkey. Unset security fields get the
    /// restricted ones (no privilege escalation, every capability dropped, not root).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    #[x_kube(validation = container_name_rule(SIDECAR_NAME_MESSAGE), validation = restricted_rule(SIDECAR_RESTRICTED_MESSAGE))]
    pub sidecars: Vec<Container>,

    /// Containers run to completion, in order, before the sidecars, the operator's init
    /// containers and Valkey. Unset security fields get the restricted ones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    #[x_kube(validation = container_name_rule(INIT_NAME_MESSAGE), validation = restricted_rule(INIT_RESTRICTED_MESSAGE))]
    pub init_containers: Vec<Container>,
}

/// `pod.securityContext`: the identity part of a PodSecurityContext. The rest (non-root,
/// the RuntimeDefault seccomp profile) is the operator's and always set.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodIdentity {
    /// The UID of every container; not 0, the pods run as non-root. Unset: the platform's
    /// (or the image's `USER`, which for the official image is root and is refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 1 && self <= 2147483647").message("pod.securityContext.runAsUser is 1 to 2147483647: the pods run as non-root, so not 0"))]
    pub run_as_user: Option<i64>,

    /// The primary GID of every container (0 is allowed: OpenShift runs containers in
    /// group 0). Unset: the platform's, else 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 0 && self <= 2147483647").message("pod.securityContext.runAsGroup is 0 to 2147483647"))]
    pub run_as_group: Option<i64>,

    /// The group that owns the volumes and reads the mounted Secrets (passwords, TLS keys:
    /// mode 0440), added to every container's groups. Unset where no platform assigns one,
    /// those Secrets are unreadable and the pod cannot start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 1 && self <= 2147483647").message("pod.securityContext.fsGroup is 1 to 2147483647"))]
    pub fs_group: Option<i64>,
}

impl PodTemplate {
    /// The grace period the pod gets.
    pub fn termination_grace_seconds(pod: Option<&Self>) -> i64 {
        pod.and_then(|p| p.termination_grace_period_seconds)
            .unwrap_or(DEFAULT_TERMINATION_GRACE_SECONDS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cel_lists_quote_each_item() {
        assert_eq!(cel_list(&["a", "b"]), "['a', 'b']");
    }

    #[test]
    fn each_message_names_every_item_of_its_list() {
        for (message, items) in [
            (ENV_MESSAGE, OPERATOR_ENV),
            (VOLUME_NAME_MESSAGE, OPERATOR_VOLUMES),
            (MOUNT_PATH_MESSAGE, OPERATOR_PATHS),
            (SIDECAR_NAME_MESSAGE, OPERATOR_CONTAINERS),
            (INIT_NAME_MESSAGE, OPERATOR_CONTAINERS),
        ] {
            for item in items {
                assert!(message.contains(item), "{message:?} lacks {item}");
            }
        }
    }
}
