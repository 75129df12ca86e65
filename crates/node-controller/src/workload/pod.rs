//! The pod template: the pod spec around the containers, its volumes (the ConfigMap, /data
//! from the claim or an emptyDir, a scratch /tmp, a data node's users Secret, the TLS
//! Secret, the operator password Secret) and its security context (the restricted Pod
//! Security Standard).

use std::collections::BTreeMap;

use crd_types::ValkeyNode;
use crd_types::names;
use crd_types::node::Mode;
use crd_types::pod_template::{DEFAULT_IDENTITY, PodIdentity, PodTemplate};
use crd_types::template::{
    ScratchVolume, SecretKeyRef, TLS_CA_KEY, TLS_CERT_KEY, TLS_KEY_KEY, Tls,
};
use crd_types::users::USERS_KEY;
use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, Container, EmptyDirVolumeSource, KeyToPath,
    PersistentVolumeClaimVolumeSource, PodSecurityContext, PodSpec, PodTemplateSpec,
    SeccompProfile, SecretVolumeSource, Volume,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

use super::containers::{
    VALKEY_CONTAINER, exporter_auth_init_container, exporter_container, sentinel_init_container,
    valkey_container,
};
use super::layout::{
    DATA_VOLUME, EXPORTER_AUTH_VOLUME, OPERATOR_PASSWORD_VOLUME, TLS_VOLUME, TMP_VOLUME,
    USERS_VOLUME, operator_secret,
};
use super::platform::{self, merged};
use crate::config::cluster_context::CLUSTER_CONTEXT_KEY;
use crate::config::replication::CONTEXT_KEY;
use crate::config::{
    LIVE_FILE, OPERATOR_PASSWORD_FILE, OPERATOR_PASSWORD_FILE_NAME, RenderedConfig,
    exporter_logs_in_as_monitoring, tls, users_secret,
};
use crate::configmap::{self, CONFIG_VOLUME};
use crate::meta;

/// Non-root with the RuntimeDefault seccomp profile, as `pod.securityContext` says (see
/// [`PodIdentity`]): without it the official image's `valkey` user, 999, for the UID, GID
/// and fsGroup; with it only what it sets, so a platform assigns the rest.
fn pod_security(pod: Option<&PodTemplate>) -> PodSecurityContext {
    let fixed = PodIdentity {
        run_as_user: Some(DEFAULT_IDENTITY),
        run_as_group: Some(DEFAULT_IDENTITY),
        fs_group: Some(DEFAULT_IDENTITY),
    };
    let identity = pod
        .and_then(|p| p.security_context.clone())
        .unwrap_or(fixed);
    PodSecurityContext {
        run_as_non_root: Some(true),
        run_as_user: identity.run_as_user,
        run_as_group: identity.run_as_group,
        // Skip the recursive chown of a large volume on every start.
        fs_group_change_policy: identity.fs_group.map(|_| "OnRootMismatch".into()),
        fs_group: identity.fs_group,
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".into(),
            localhost_profile: None,
        }),
        ..Default::default()
    }
}
/// SIGTERM makes Valkey SHUTDOWN: save the RDB (when `save` is on) and fsync the AOF.
/// A large dataset takes a while to write; SIGKILL in the middle loses the snapshot. 60 s
/// unless `pod.terminationGracePeriodSeconds` says otherwise.
pub use crd_types::pod_template::DEFAULT_TERMINATION_GRACE_SECONDS as TERMINATION_GRACE_SECONDS;

/// The pod template without its revision annotation.
pub fn pod_template(node: &ValkeyNode, rendered: &RenderedConfig) -> PodTemplateSpec {
    let t = &node.spec.template;
    let mode = node.spec.mode;
    let scheduling = t.scheduling.clone().unwrap_or_default();

    let mut containers = vec![valkey_container(node, rendered)];
    if let Some(exporter) = &t.exporter {
        containers.push(exporter_container(node, exporter));
    }
    let mut init_containers: Vec<_> = (mode == Mode::Sentinel)
        .then(|| sentinel_init_container(node))
        .into_iter()
        .collect();
    init_containers.extend(exporter_auth_init_container(node));
    if let Some(tls) = &node.spec.tls {
        for c in containers.iter_mut().chain(init_containers.iter_mut()) {
            valkey_cli_over_tls(c, tls);
        }
    }
    let init_containers = (!init_containers.is_empty()).then_some(init_containers);

    let mut annotations = BTreeMap::new();
    // Tells topology-controller this server reloads its certificate by itself on 9.1+.
    if node.spec.tls.is_some() {
        annotations.insert(
            names::annotations::TLS_AUTO_RELOAD_SECONDS.to_string(),
            tls::AUTO_RELOAD_SECONDS.to_string(),
        );
    }
    // Tells topology-controller the hooks follow the Secret, so it may rotate the password
    // without restarting the pod.
    if operator_secret(node).is_some() {
        annotations.insert(
            names::annotations::OPERATOR_PASSWORD_FILE.to_string(),
            OPERATOR_PASSWORD_FILE.to_string(),
        );
    }
    let extra = t.pod.clone().unwrap_or_default();
    let annotations = merged(&extra.annotations, annotations);
    let annotations = (!annotations.is_empty()).then_some(annotations);
    let mut template = PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(merged(&extra.labels, meta::labels(node))),
            annotations,
            ..Default::default()
        }),
        spec: Some(PodSpec {
            init_containers,
            containers,
            volumes: Some(volumes(node, rendered)),
            security_context: Some(pod_security(t.pod.as_ref())),
            termination_grace_period_seconds: Some(PodTemplate::termination_grace_seconds(
                t.pod.as_ref(),
            )),
            // Valkey needs neither Service env vars nor API access.
            enable_service_links: Some(false),
            automount_service_account_token: Some(false),
            node_selector: (!scheduling.node_selector.is_empty())
                .then_some(scheduling.node_selector),
            affinity: scheduling.affinity,
            tolerations: (!scheduling.tolerations.is_empty()).then_some(scheduling.tolerations),
            topology_spread_constraints: (!scheduling.topology_spread_constraints.is_empty())
                .then_some(scheduling.topology_spread_constraints),
            priority_class_name: scheduling.priority_class_name,
            ..Default::default()
        }),
    };
    if let Some(spec) = template.spec.as_mut() {
        platform::apply(spec, VALKEY_CONTAINER, &extra);
    }
    template
}

/// The config file under its content's key and, for a replication member, the context
/// under its fixed key; for a Gated data node, its live directives under theirs. The
/// template names neither content, so a new context or live value restarts nothing.
fn config_items(rendered: &RenderedConfig) -> Vec<KeyToPath> {
    let mut items = vec![KeyToPath {
        key: configmap::config_key(rendered),
        path: rendered.file_name.into(),
        mode: None,
    }];
    if rendered.replication.is_some() {
        items.push(KeyToPath {
            key: CONTEXT_KEY.into(),
            path: CONTEXT_KEY.into(),
            mode: None,
        });
    }
    if rendered.cluster.is_some() {
        items.push(KeyToPath {
            key: CLUSTER_CONTEXT_KEY.into(),
            path: CLUSTER_CONTEXT_KEY.into(),
            mode: None,
        });
    }
    if rendered.live.is_some() {
        items.push(KeyToPath {
            key: LIVE_FILE.into(),
            path: LIVE_FILE.into(),
            mode: None,
        });
    }
    items
}

pub(super) fn volumes(node: &ValkeyNode, rendered: &RenderedConfig) -> Vec<Volume> {
    let name = node.name_any();
    let config = Volume {
        name: CONFIG_VOLUME.into(),
        config_map: Some(ConfigMapVolumeSource {
            name: names::config_map_name(&name),
            items: Some(config_items(rendered)),
            default_mode: Some(0o444),
            optional: Some(false),
        }),
        ..Default::default()
    };
    let memory_only = node.spec.template.memory_only.as_ref();
    let data = match &node.spec.template.persistence {
        Some(_) => Volume {
            name: DATA_VOLUME.into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: names::pvc_name(&name),
                read_only: None,
            }),
            ..Default::default()
        },
        None => Volume {
            name: DATA_VOLUME.into(),
            empty_dir: Some(EmptyDirVolumeSource {
                medium: memory_only
                    .filter(|m| m.volume == ScratchVolume::Memory)
                    .map(|_| "Memory".into()),
                size_limit: None,
            }),
            ..Default::default()
        },
    };
    // /tmp: the root file system is read-only; valkey-cli and the shell may need scratch.
    let tmp = Volume {
        name: TMP_VOLUME.into(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Default::default()
    };
    let mut volumes = vec![config, data, tmp];
    if exporter_logs_in_as_monitoring(&node.spec) {
        volumes.push(Volume {
            name: EXPORTER_AUTH_VOLUME.into(),
            empty_dir: Some(EmptyDirVolumeSource {
                medium: Some("Memory".into()),
                size_limit: Some(Quantity("1Mi".into())),
            }),
            ..Default::default()
        });
    }
    if let Some(secret) = users_secret(&node.spec) {
        volumes.push(users_volume(secret));
    }
    if let Some(tls) = &node.spec.tls {
        volumes.push(tls_volume(tls));
    }
    if let Some(secret) = operator_secret(node) {
        volumes.push(operator_password_volume(secret));
    }
    volumes
}

/// Only the key the env var reads, as [`OPERATOR_PASSWORD_FILE_NAME`], readable by the valkey
/// group alone as the users Secret is. Optional: the env var, which is not, already keeps
/// the container from starting without the key, and says so (`CreateContainerConfigError`,
/// naming the Secret, which the node reports); a required volume would hold the pod in
/// `ContainerCreating` first, with the reason only in an Event. The hooks read the env
/// var when the file is missing.
fn operator_password_volume(secret: &SecretKeyRef) -> Volume {
    Volume {
        name: OPERATOR_PASSWORD_VOLUME.into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret.name.clone()),
            items: Some(vec![KeyToPath {
                key: secret.key.clone(),
                path: OPERATOR_PASSWORD_FILE_NAME.into(),
                mode: None,
            }]),
            default_mode: Some(0o440),
            optional: Some(true),
        }),
        ..Default::default()
    }
}

/// The TLS Secret: its three cert-manager keys, the whole directory (a subPath mount never
/// sees the Secret change, and certificates are renewed by changing it), readable by the
/// valkey group alone as the users Secret is (the key is private; every container runs in
/// that group). Not optional: a node without its certificate cannot serve, so the pod
/// waits for the Secret (and for all three keys) rather than start.
fn tls_volume(tls: &Tls) -> Volume {
    let item = |key: &str| KeyToPath {
        key: key.into(),
        path: key.into(),
        mode: None,
    };
    Volume {
        name: TLS_VOLUME.into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(tls.secret_name.clone()),
            items: Some(vec![
                item(TLS_CERT_KEY),
                item(TLS_KEY_KEY),
                item(TLS_CA_KEY),
            ]),
            default_mode: Some(0o440),
            optional: Some(false),
        }),
        ..Default::default()
    }
}

/// Puts [`tls::cli_flags`] into every `valkey-cli` a container's shell runs: its command and
/// arguments, its exec probes and its lifecycle hooks. Applied to every container of a TLS
/// node's pod, so a new script cannot forget them.
fn valkey_cli_over_tls(c: &mut Container, t: &Tls) {
    let rewrite = |lines: &mut Option<Vec<String>>| {
        for line in lines.iter_mut().flatten() {
            *line = tls::cli_over_tls(line, Some(t));
        }
    };
    rewrite(&mut c.command);
    rewrite(&mut c.args);
    for probe in [
        &mut c.startup_probe,
        &mut c.liveness_probe,
        &mut c.readiness_probe,
    ]
    .into_iter()
    .flatten()
    {
        if let Some(exec) = &mut probe.exec {
            rewrite(&mut exec.command);
        }
    }
    if let Some(lifecycle) = &mut c.lifecycle {
        for hook in [&mut lifecycle.post_start, &mut lifecycle.pre_stop]
            .into_iter()
            .flatten()
        {
            if let Some(exec) = &mut hook.exec {
                rewrite(&mut exec.command);
            }
        }
    }
}

/// Optional, so the pod starts (without those users) before the Secret exists, and the first
/// user needs no new template. Only its `user` lines; readable by the valkey group alone (the
/// kubelet gives a Secret's files the pod's fsGroup).
fn users_volume(secret: &str) -> Volume {
    Volume {
        name: USERS_VOLUME.into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret.into()),
            items: Some(vec![KeyToPath {
                key: USERS_KEY.into(),
                path: USERS_KEY.into(),
                mode: None,
            }]),
            default_mode: Some(0o440),
            optional: Some(true),
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests;
