//! `template.pod`: what a platform adds to the pod (docs/pod-template.md). Labels and
//! annotations go under the operator's (which win; CEL already refuses their keys), pull
//! secrets and the service account onto the pod, env and mounts onto the valkey container,
//! the volumes next to the operator's, init containers and then the sidecars (native
//! sidecars: init containers with `restartPolicy: Always`) before the operator's own init
//! containers. A user container's unset security fields get the restricted ones. All of it
//! is in the pod template, so its revision moves with any change and the pod rolls.

use std::collections::BTreeMap;

use crd_types::pod_template::PodTemplate;
use k8s_openapi::api::core::v1::{Capabilities, Container, PodSpec, SecurityContext};

/// `ours` over the user's `theirs`: on a shared key, ours wins.
pub(super) fn merged(
    theirs: &BTreeMap<String, String>,
    ours: BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut out = theirs.clone();
    out.extend(ours);
    out
}

/// Fills what the restricted Pod Security Standard needs and the user left unset: no
/// privilege escalation, every capability dropped, not root. What the user set stays (CEL
/// refuses what the standard forbids).
fn restricted_where_unset(c: &mut Container) {
    let s = c
        .security_context
        .get_or_insert_with(SecurityContext::default);
    s.allow_privilege_escalation.get_or_insert(false);
    s.run_as_non_root.get_or_insert(true);
    let caps = s.capabilities.get_or_insert_with(Capabilities::default);
    caps.drop.get_or_insert_with(|| vec!["ALL".into()]);
}

/// A user's init container as it runs.
fn init_container(c: &Container) -> Container {
    let mut c = c.clone();
    restricted_where_unset(&mut c);
    c
}

/// A user's sidecar as a native sidecar: started before Valkey, stopped after it.
fn sidecar(c: &Container) -> Container {
    let mut c = init_container(c);
    c.restart_policy = Some("Always".into());
    c
}

/// The pod's additions onto `spec` whose valkey container is `valkey` (by name). The user's
/// init containers, then the sidecars, come before the operator's init containers.
pub(super) fn apply(spec: &mut PodSpec, valkey: &str, pod: &PodTemplate) {
    if !pod.image_pull_secrets.is_empty() {
        spec.image_pull_secrets = Some(pod.image_pull_secrets.clone());
    }
    spec.service_account_name = pod.service_account_name.clone();
    spec.automount_service_account_token = Some(pod.automount_service_account_token);

    if let Some(c) = spec.containers.iter_mut().find(|c| c.name == valkey) {
        c.env
            .get_or_insert_with(Vec::new)
            .extend(pod.env.iter().cloned());
        c.volume_mounts
            .get_or_insert_with(Vec::new)
            .extend(pod.volume_mounts.iter().cloned());
    }
    if !pod.volumes.is_empty() {
        spec.volumes
            .get_or_insert_with(Vec::new)
            .extend(pod.volumes.iter().cloned());
    }
    let users: Vec<Container> = pod
        .init_containers
        .iter()
        .map(init_container)
        .chain(pod.sidecars.iter().map(sidecar))
        .collect();
    if !users.is_empty() {
        let ours = spec.init_containers.take().unwrap_or_default();
        spec.init_containers = Some(users.into_iter().chain(ours).collect());
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use crd_types::ValkeyNodeSpec;
    use crd_types::node::Mode;
    use crd_types::pod_template::{
        OPERATOR_CONTAINERS, OPERATOR_ENV, OPERATOR_PATHS, OPERATOR_VOLUMES, PodIdentity,
        PodTemplate,
    };
    use crd_types::template::{Auth, Exporter, Tls};
    use k8s_openapi::api::core::v1::{
        Container, EmptyDirVolumeSource, EnvVar, LocalObjectReference, SecurityContext, Volume,
        VolumeMount,
    };

    use crate::workload::fixtures::{build, container, node, pod, secret, template_annotations};
    use crate::workload::{DesiredWorkload, pod::TERMINATION_GRACE_SECONDS};

    fn user_container(name: &str) -> Container {
        Container {
            name: name.into(),
            image: Some("valkey/valkey:8.1".into()),
            command: Some(vec!["sleep".into(), "3600".into()]),
            ..Default::default()
        }
    }

    fn every_knob() -> PodTemplate {
        PodTemplate {
            labels: BTreeMap::from([("team".into(), "payments".into())]),
            annotations: BTreeMap::from([("backup/hook".into(), "save".into())]),
            image_pull_secrets: vec![LocalObjectReference {
                name: "registry".into(),
            }],
            service_account_name: Some("valkey".into()),
            automount_service_account_token: false,
            termination_grace_period_seconds: Some(600),
            security_context: None,
            env: vec![EnvVar {
                name: "TZ".into(),
                value: Some("UTC".into()),
                value_from: None,
            }],
            volumes: vec![Volume {
                name: "scratch".into(),
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..Default::default()
            }],
            volume_mounts: vec![VolumeMount {
                name: "scratch".into(),
                mount_path: "/mnt/scratch".into(),
                ..Default::default()
            }],
            sidecars: vec![user_container("logs")],
            init_containers: vec![user_container("prepare")],
        }
    }

    fn with_pod(mode: Mode, p: PodTemplate) -> DesiredWorkload {
        build(&node(mode, |s| s.template.pod = Some(p)))
    }

    fn labels(d: &DesiredWorkload) -> BTreeMap<String, String> {
        let t = d.workload.template().unwrap();
        t.metadata.clone().unwrap().labels.unwrap()
    }

    #[test]
    fn labels_and_annotations_merge_with_ours_winning() {
        let mut p = every_knob();
        // CEL refuses these keys; were one to get through, ours still wins.
        p.labels.insert("valkey.rs/node".into(), "other".into());
        p.annotations
            .insert("valkey.rs/revision".into(), "forged".into());
        let d = with_pod(Mode::Standalone, p);
        let l = labels(&d);
        assert_eq!(l["team"], "payments");
        assert_eq!(l["valkey.rs/node"], "cache");
        assert_eq!(l["app.kubernetes.io/managed-by"], "valkey-operator");
        let a = template_annotations(&d);
        assert_eq!(a["backup/hook"], "save");
        assert_eq!(a["valkey.rs/revision"], d.revision);
    }

    #[test]
    fn pull_secrets_account_and_grace_period() {
        let plain = build(&node(Mode::Standalone, |_| {}));
        let spec = pod(&plain);
        assert_eq!(spec.image_pull_secrets, None);
        assert_eq!(spec.service_account_name, None);
        assert_eq!(spec.automount_service_account_token, Some(false));
        assert_eq!(
            spec.termination_grace_period_seconds,
            Some(TERMINATION_GRACE_SECONDS)
        );
        assert_eq!(TERMINATION_GRACE_SECONDS, 60);

        let d = with_pod(Mode::Standalone, every_knob());
        let spec = pod(&d);
        assert_eq!(
            spec.image_pull_secrets.as_deref(),
            Some(
                &[LocalObjectReference {
                    name: "registry".into()
                }][..]
            )
        );
        assert_eq!(spec.service_account_name.as_deref(), Some("valkey"));
        // A named account still gets no token unless asked.
        assert_eq!(spec.automount_service_account_token, Some(false));
        assert_eq!(spec.termination_grace_period_seconds, Some(600));
        let mut asked = every_knob();
        asked.automount_service_account_token = true;
        let asked = with_pod(Mode::Standalone, asked);
        assert_eq!(pod(&asked).automount_service_account_token, Some(true));
    }

    #[test]
    fn env_volumes_and_mounts_reach_the_valkey_container_only() {
        let d = build(&node(Mode::Cluster, |s| {
            s.template.pod = Some(every_knob());
            s.template.exporter = Some(Exporter::default());
        }));
        let v = container(&d, "valkey");
        let env = v.env.as_ref().unwrap();
        assert_eq!(env[0].name, "POD_IP", "ours first");
        assert_eq!(env.last().unwrap().name, "TZ");
        let mounts = v.volume_mounts.as_ref().unwrap();
        assert_eq!(mounts[0].mount_path, "/etc/valkey", "ours first");
        assert_eq!(mounts.last().unwrap().mount_path, "/mnt/scratch");
        let e = container(&d, "exporter");
        assert!(!e.env.iter().flatten().any(|v| v.name == "TZ"));
        let volumes: Vec<_> = pod(&d)
            .volumes
            .iter()
            .flatten()
            .map(|v| v.name.as_str())
            .collect();
        assert_eq!(volumes, ["config", "data", "tmp", "scratch"]);
    }

    #[test]
    fn init_containers_then_native_sidecars_before_ours() {
        let d = build(&node(Mode::Sentinel, |s| {
            s.template.pod = Some(every_knob());
        }));
        let inits = pod(&d).init_containers.as_ref().unwrap();
        let names: Vec<_> = inits.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["prepare", "logs", "sentinel-config"]);
        assert_eq!(inits[0].restart_policy, None, "runs to completion");
        assert_eq!(inits[1].restart_policy.as_deref(), Some("Always"));
        assert_eq!(inits[2].restart_policy, None);
        // The operator's containers stay the only regular ones.
        let containers: Vec<_> = pod(&d).containers.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(containers, ["valkey"]);
        // Unset security fields are the restricted ones.
        for c in &inits[..2] {
            let s = c.security_context.as_ref().unwrap();
            assert_eq!(s.allow_privilege_escalation, Some(false));
            assert_eq!(s.run_as_non_root, Some(true));
            assert_eq!(
                s.capabilities.as_ref().unwrap().drop.as_deref(),
                Some(&["ALL".to_string()][..])
            );
        }
        // Set ones stay.
        let mut p = every_knob();
        p.sidecars[0].security_context = Some(SecurityContext {
            run_as_user: Some(1000),
            read_only_root_filesystem: Some(true),
            ..Default::default()
        });
        let d = with_pod(Mode::Standalone, p);
        let s = pod(&d).init_containers.as_ref().unwrap()[1]
            .security_context
            .clone()
            .unwrap();
        assert_eq!(s.run_as_user, Some(1000));
        assert_eq!(s.read_only_root_filesystem, Some(true));
        assert_eq!(s.allow_privilege_escalation, Some(false));
    }

    #[test]
    fn every_knob_moves_the_revision() {
        let base = with_pod(Mode::Standalone, PodTemplate::default()).revision;
        // An empty `pod` is no `pod`: an upgrade rolls nobody.
        assert_eq!(build(&node(Mode::Standalone, |_| {})).revision, base);
        let changes: [fn(&mut PodTemplate); 13] = [
            |p| p.security_context = Some(PodIdentity::default()),
            |p| {
                p.security_context = Some(PodIdentity {
                    run_as_user: Some(1000680000),
                    ..Default::default()
                })
            },
            |p| {
                p.labels.insert("team".into(), "x".into());
            },
            |p| {
                p.annotations.insert("a".into(), "x".into());
            },
            |p| p.image_pull_secrets = vec![LocalObjectReference { name: "r".into() }],
            |p| p.service_account_name = Some("sa".into()),
            |p| p.automount_service_account_token = true,
            |p| p.termination_grace_period_seconds = Some(120),
            |p| p.env = every_knob().env,
            |p| p.volumes = every_knob().volumes,
            |p| p.volume_mounts = every_knob().volume_mounts,
            |p| p.sidecars = every_knob().sidecars,
            |p| p.init_containers = every_knob().init_containers,
        ];
        for (i, change) in changes.iter().enumerate() {
            let mut p = PodTemplate::default();
            change(&mut p);
            assert_ne!(with_pod(Mode::Standalone, p).revision, base, "change {i}");
        }
    }

    #[test]
    fn the_identity_is_999_unless_pod_security_context_says_otherwise() {
        let identity = |d: &DesiredWorkload| {
            let s = pod(d).security_context.clone().unwrap();
            assert_eq!(s.run_as_non_root, Some(true));
            assert_eq!(s.seccomp_profile.unwrap().type_, "RuntimeDefault");
            (
                s.run_as_user,
                s.run_as_group,
                s.fs_group,
                s.fs_group_change_policy,
            )
        };
        let on_root_mismatch = Some("OnRootMismatch".to_string());
        let plain = build(&node(Mode::Standalone, |_| {}));
        assert_eq!(
            identity(&plain),
            (Some(999), Some(999), Some(999), on_root_mismatch.clone())
        );
        // OpenShift's restricted-v2: a UID and an fsGroup from the namespace's ranges, no GID.
        let assigned = PodIdentity {
            run_as_user: Some(1000680000),
            run_as_group: None,
            fs_group: Some(1000680000),
        };
        for mode in [Mode::Cluster, Mode::Sentinel] {
            let p = PodTemplate {
                security_context: Some(assigned.clone()),
                ..Default::default()
            };
            assert_eq!(
                identity(&with_pod(mode, p)),
                (
                    Some(1000680000),
                    None,
                    Some(1000680000),
                    on_root_mismatch.clone()
                )
            );
        }
        // Empty: everything left to the platform.
        let p = PodTemplate {
            security_context: Some(PodIdentity::default()),
            ..Default::default()
        };
        assert_eq!(
            identity(&with_pod(Mode::Standalone, p)),
            (None, None, None, None)
        );
    }

    /// The names and paths CEL keeps for the operator (crd_types::pod_template) hold every
    /// one the builders render, on a node with everything on.
    #[test]
    fn the_reserved_lists_cover_what_the_operator_renders() {
        for mode in [Mode::Cluster, Mode::Sentinel] {
            let d = build(&node(mode, |s: &mut ValkeyNodeSpec| {
                s.auth = Some(Auth {
                    password_secret_ref: Some(secret("app")),
                    operator_secret_ref: Some(secret("op")),
                    ..Default::default()
                });
                s.tls = Some(Tls {
                    secret_name: "t".into(),
                    auth_clients: Default::default(),
                    plain_text_clients: false,
                });
                s.template.exporter = Some(Exporter::default());
                s.users_secret_name = Some("cache-users".into());
            }));
            let spec = pod(&d);
            for v in spec.volumes.iter().flatten() {
                assert!(OPERATOR_VOLUMES.contains(&v.name.as_str()), "{}", v.name);
            }
            for c in spec
                .containers
                .iter()
                .chain(spec.init_containers.iter().flatten())
            {
                assert!(OPERATOR_CONTAINERS.contains(&c.name.as_str()), "{}", c.name);
            }
            let v = container(&d, "valkey");
            for e in v.env.iter().flatten() {
                assert!(OPERATOR_ENV.contains(&e.name.as_str()), "{}", e.name);
            }
            for m in v.volume_mounts.iter().flatten() {
                let p = m.mount_path.as_str();
                assert!(
                    OPERATOR_PATHS
                        .iter()
                        .any(|d| p == *d || p.starts_with(&format!("{d}/"))),
                    "{p}"
                );
            }
        }
    }
}
