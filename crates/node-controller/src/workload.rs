//! The singleton StatefulSet or Deployment and its pod template.
//!
//! StatefulSet: replicas 1, `podManagementPolicy: Parallel` and `updateStrategy:
//! RollingUpdate`. The roll gate works by withholding the new template (see
//! [`crate::revision::decide`]), so Kubernetes may restart the pod as soon as a template is
//! applied; OnDelete would make node-controller delete pods itself, an imperative step that
//! can be left half-done by an operator restart. Parallel because OrderedReady refuses to
//! replace a pod that is not Ready, which would wedge a roll that fixes a crash-looping pod.
//!
//! Deployment: replicas 1 and `strategy: Recreate`: on a template roll the old pod is gone
//! before the new one starts. Recreate orders rollouts only: when the pod itself is deleted
//! or evicted, the ReplicaSet creates the replacement at once, and on the same Kubernetes node
//! it can mount the ReadWriteOnce volume while the old Valkey still writes its shutdown
//! snapshot (the e2e test sees the new one load an empty /data). StatefulSet, which waits for
//! the old pod to be gone, is the default for that reason.

use crd_types::ValkeyNode;
use crd_types::names::{self, ports};
use crd_types::node::Mode;
use crd_types::template::{Exporter, OPERATOR_USER, SecretKeyRef, WorkloadType};
use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, DeploymentStrategy, StatefulSet, StatefulSetSpec,
    StatefulSetUpdateStrategy,
};
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMapVolumeSource, Container, ContainerPort, EmptyDirVolumeSource, EnvVar,
    EnvVarSource, ExecAction, KeyToPath, ObjectFieldSelector, ObjectReference,
    PersistentVolumeClaimVolumeSource, PodSecurityContext, PodSpec, PodTemplateSpec, Probe,
    SeccompProfile, SecretKeySelector, SecurityContext, TCPSocketAction, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};

use crate::config::{
    CONFIG_DIR, DATA_DIR, OPERATOR_PASSWORD_ENV, PASSWORD_ENV, POD_IP_ENV, RenderedConfig,
};
use crate::configmap::{self, CONFIG_VOLUME};
use crate::{meta, revision};

pub const VALKEY_CONTAINER: &str = "valkey";
pub const EXPORTER_CONTAINER: &str = "exporter";
/// Sentinel mode: copies sentinel.conf to /data before Sentinel starts.
pub const SENTINEL_INIT_CONTAINER: &str = "sentinel-config";
pub const DATA_VOLUME: &str = "data";
pub const TMP_VOLUME: &str = "tmp";
/// The `valkey` user and group of the official image.
pub const VALKEY_UID: i64 = 999;
/// SIGTERM makes Valkey SHUTDOWN: save the RDB (when `save` is on) and fsync the AOF.
/// A large dataset takes a while to write; SIGKILL in the middle loses the snapshot.
pub const TERMINATION_GRACE_SECONDS: i64 = 60;

/// Sentinel rewrites its config file (it refuses to start on a read-only one) and keeps its
/// state there (myid, monitored primaries, known replicas and sentinels, epochs), so it runs
/// from a copy in /data. Each start takes the fresh operator-rendered file and carries over
/// the `sentinel` state lines the fresh file does not set; `announce-ip` is never carried:
/// it comes from the fresh file or the command line. This runs in an init container so the
/// main container execs valkey-sentinel directly and SIGTERM reaches it (a shell wrapper
/// would have to forward signals).
pub const SENTINEL_INIT_SCRIPT: &str = r#"set -eu
new=/data/sentinel.conf.new
cp /etc/valkey/sentinel.conf "$new"
if [ -f /data/sentinel.conf ]; then
  awk 'NR == FNR { if ($1 == "sentinel") seen[$2] = 1; next }
       $1 == "sentinel" && !($2 in seen) && $2 != "announce-ip"' \
    /etc/valkey/sentinel.conf /data/sentinel.conf >> "$new"
fi
mv "$new" /data/sentinel.conf
"#;

/// The node's workload, one of the two kinds.
#[derive(Debug, Clone, PartialEq)]
pub enum Workload {
    StatefulSet(StatefulSet),
    Deployment(Deployment),
}

impl Workload {
    /// `StatefulSet` or `Deployment`.
    pub fn kind(&self) -> &'static str {
        match self {
            Workload::StatefulSet(_) => "StatefulSet",
            Workload::Deployment(_) => "Deployment",
        }
    }

    /// The kind as `status.workload.kind` says it.
    pub fn workload_type(&self) -> WorkloadType {
        match self {
            Workload::StatefulSet(_) => WorkloadType::StatefulSet,
            Workload::Deployment(_) => WorkloadType::Deployment,
        }
    }

    pub fn name(&self) -> String {
        match self {
            Workload::StatefulSet(s) => s.name_any(),
            Workload::Deployment(d) => d.name_any(),
        }
    }

    /// The pod template.
    pub fn template(&self) -> Option<&PodTemplateSpec> {
        match self {
            Workload::StatefulSet(s) => s.spec.as_ref().map(|s| &s.template),
            Workload::Deployment(d) => d.spec.as_ref().map(|s| &s.template),
        }
    }

    /// The revision its template carries (`None`: made by an older operator, or no template).
    pub fn revision(&self) -> Option<&str> {
        self.template().and_then(revision::template_revision)
    }

    /// Where this object is, for an Event's related object.
    pub fn object_ref(&self) -> ObjectReference {
        match self {
            Workload::StatefulSet(s) => s.object_ref(&()),
            Workload::Deployment(d) => d.object_ref(&()),
        }
    }

    /// The first field (a JSON pointer) where `live` does not hold `self`; `None` when it
    /// holds it all (see `operator_runtime::first_difference`).
    pub fn first_difference(&self, live: &Workload) -> Option<String> {
        match (self, live) {
            (Workload::StatefulSet(d), Workload::StatefulSet(l)) => {
                operator_runtime::first_difference(d, l)
            }
            (Workload::Deployment(d), Workload::Deployment(l)) => {
                operator_runtime::first_difference(d, l)
            }
            _ => Some("kind".into()),
        }
    }
}

/// The desired workload with its revision.
#[derive(Debug, Clone, PartialEq)]
pub struct Desired {
    pub workload: Workload,
    /// The template revision, also on the template as `valkey.rs/revision`.
    pub revision: String,
    /// The ConfigMap key the template mounts.
    pub config_key: String,
}

/// Builds the desired workload for `node` running `rendered`.
pub fn desired(node: &ValkeyNode, rendered: &RenderedConfig) -> Desired {
    let mut template = pod_template(node, rendered);
    let revision = revision::stamp(&mut template, &rendered.text);
    Desired {
        workload: workload(node, template),
        revision,
        config_key: configmap::config_key(rendered),
    }
}

/// Wraps `template` into the StatefulSet or Deployment the spec asks for.
pub fn workload(node: &ValkeyNode, template: PodTemplateSpec) -> Workload {
    let name = node.name_any();
    let metadata = ObjectMeta {
        name: Some(names::workload_name(&name)),
        namespace: node.namespace(),
        labels: Some(meta::labels(node)),
        owner_references: meta::owner_reference(node).map(|o| vec![o]),
        ..Default::default()
    };
    let selector = LabelSelector {
        match_labels: Some(meta::selector(node)),
        match_expressions: None,
    };
    match node.spec.template.workload_type {
        WorkloadType::StatefulSet => Workload::StatefulSet(StatefulSet {
            metadata,
            spec: Some(StatefulSetSpec {
                replicas: Some(1),
                selector,
                service_name: Some(names::service_name(&name)),
                pod_management_policy: Some("Parallel".into()),
                update_strategy: Some(StatefulSetUpdateStrategy {
                    type_: Some("RollingUpdate".into()),
                    rolling_update: None,
                }),
                template,
                ..Default::default()
            }),
            status: None,
        }),
        WorkloadType::Deployment => Workload::Deployment(Deployment {
            metadata,
            spec: Some(DeploymentSpec {
                replicas: Some(1),
                selector,
                strategy: Some(DeploymentStrategy {
                    type_: Some("Recreate".into()),
                    rolling_update: None,
                }),
                template,
                ..Default::default()
            }),
            status: None,
        }),
    }
}

/// The pod template without its revision annotation.
pub fn pod_template(node: &ValkeyNode, rendered: &RenderedConfig) -> PodTemplateSpec {
    let t = &node.spec.template;
    let mode = node.spec.mode;
    let scheduling = t.scheduling.clone().unwrap_or_default();

    let mut containers = vec![valkey_container(node, rendered)];
    if let Some(exporter) = &t.exporter {
        containers.push(exporter_container(node, exporter));
    }
    let init_containers = (mode == Mode::Sentinel).then(|| vec![sentinel_init_container(node)]);

    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(meta::labels(node)),
            ..Default::default()
        }),
        spec: Some(PodSpec {
            init_containers,
            containers,
            volumes: Some(volumes(node, rendered)),
            security_context: Some(PodSecurityContext {
                run_as_non_root: Some(true),
                run_as_user: Some(VALKEY_UID),
                run_as_group: Some(VALKEY_UID),
                fs_group: Some(VALKEY_UID),
                // Skip the recursive chown of a large volume on every start.
                fs_group_change_policy: Some("OnRootMismatch".into()),
                seccomp_profile: Some(SeccompProfile {
                    type_: "RuntimeDefault".into(),
                    localhost_profile: None,
                }),
                ..Default::default()
            }),
            termination_grace_period_seconds: Some(TERMINATION_GRACE_SECONDS),
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
    }
}

/// The main port's number and name for `mode`.
fn main_port(mode: Mode) -> (i32, &'static str) {
    match mode {
        Mode::Sentinel => (ports::SENTINEL, ports::SENTINEL_NAME),
        Mode::Standalone | Mode::Cluster => (ports::VALKEY, ports::VALKEY_NAME),
    }
}

fn container_port(name: &str, port: i32) -> ContainerPort {
    ContainerPort {
        name: Some(name.into()),
        container_port: port,
        protocol: Some("TCP".into()),
        ..Default::default()
    }
}

fn field_env(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: None,
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                api_version: Some("v1".into()),
                field_path: path.into(),
            }),
            ..Default::default()
        }),
    }
}

fn secret_env(name: &str, secret: &SecretKeyRef) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: None,
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret.name.clone(),
                key: secret.key.clone(),
                optional: None,
            }),
            ..Default::default()
        }),
    }
}

/// POD_IP, POD_NAME and POD_NAMESPACE from the downward API, then the passwords the
/// rendered args reference. A missing Secret keeps the container from starting (the pod
/// waits with CreateContainerConfigError, which the node's status reports); an empty one is
/// refused by [`server_command`].
fn valkey_env(node: &ValkeyNode) -> Vec<EnvVar> {
    let mut env = vec![
        field_env(POD_IP_ENV, "status.podIP"),
        field_env("POD_NAME", "metadata.name"),
        field_env("POD_NAMESPACE", "metadata.namespace"),
    ];
    if let Some(auth) = &node.spec.auth {
        if let Some(secret) = &auth.password_secret_ref {
            env.push(secret_env(PASSWORD_ENV, secret));
        }
        if let Some(secret) = &auth.operator_secret_ref {
            env.push(secret_env(OPERATOR_PASSWORD_ENV, secret));
        }
    }
    env
}

fn restricted() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            add: None,
            drop: Some(vec!["ALL".into()]),
        }),
        read_only_root_filesystem: Some(true),
        run_as_non_root: Some(true),
        ..Default::default()
    }
}

fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: read_only.then_some(true),
        ..Default::default()
    }
}

fn tcp_probe(port: &str, period: i32, timeout: i32, failures: i32) -> Probe {
    Probe {
        tcp_socket: Some(TCPSocketAction {
            host: None,
            port: IntOrString::String(port.into()),
        }),
        initial_delay_seconds: Some(0),
        period_seconds: Some(period),
        timeout_seconds: Some(timeout),
        success_threshold: Some(1),
        failure_threshold: Some(failures),
        ..Default::default()
    }
}

/// The readiness check: PING must answer PONG. A loading server answers `-LOADING` and a
/// dead one nothing, so only a server that can serve reads counts as ready. Exec probes do
/// not expand `$(VAR)`, hence the shell. `-h $POD_IP` because the local node agent binds
/// only the pod IP; in a real pod 0.0.0.0 covers it too. With a password, valkey-cli logs
/// in from the REDISCLI_AUTH variable.
pub fn readiness_command(mode: Mode) -> Vec<String> {
    let (port, _) = main_port(mode);
    vec![
        "sh".into(),
        "-c".into(),
        format!("valkey-cli -h \"${POD_IP_ENV}\" -p {port} ping | grep -q PONG"),
    ]
}

fn valkey_container(node: &ValkeyNode, rendered: &RenderedConfig) -> Container {
    let t = &node.spec.template;
    let mode = node.spec.mode;
    let (port, port_name) = main_port(mode);
    let mut container_ports = vec![container_port(port_name, port)];
    if mode == Mode::Cluster {
        container_ports.push(container_port(ports::CLUSTER_BUS_NAME, ports::CLUSTER_BUS));
    }
    let (program, config_path) = match mode {
        Mode::Sentinel => (
            "valkey-sentinel",
            format!("{DATA_DIR}/{}", rendered.file_name),
        ),
        Mode::Standalone | Mode::Cluster => (
            "valkey-server",
            format!("{CONFIG_DIR}/{}", rendered.file_name),
        ),
    };
    let mut args = vec![config_path];
    args.extend(rendered.args.iter().cloned());

    let mut mounts = Vec::new();
    if mode != Mode::Sentinel {
        mounts.push(mount(CONFIG_VOLUME, CONFIG_DIR, true));
    }
    mounts.push(mount(DATA_VOLUME, DATA_DIR, false));
    mounts.push(mount(TMP_VOLUME, "/tmp", false));

    Container {
        name: VALKEY_CONTAINER.into(),
        image: Some(t.image.clone()),
        image_pull_policy: t.image_pull_policy.clone(),
        command: Some(server_command(node, program)),
        args: Some(args),
        ports: Some(container_ports),
        env: Some(valkey_env(node)),
        volume_mounts: Some(mounts),
        resources: t.resources.clone(),
        security_context: Some(restricted()),
        // Valkey listens before it loads its data, so this passes early; the generous
        // budget (10 minutes) covers slow volume attach and start-up, never killing a slow
        // start. Every second, because the first check at container start always misses and
        // the period is then what a new pod waits to be Ready (bench-nodes: 5 s at 5 s).
        startup_probe: Some(tcp_probe(port_name, 1, 1, 600)),
        // Alive = accepting connections, which a server busy loading does: never restart a
        // loading server. Six misses in a row (a minute) before a restart.
        liveness_probe: Some(tcp_probe(port_name, 10, 5, 6)),
        readiness_probe: Some(Probe {
            exec: Some(ExecAction {
                command: Some(readiness_command(mode)),
            }),
            initial_delay_seconds: Some(0),
            period_seconds: Some(5),
            timeout_seconds: Some(5),
            success_threshold: Some(1),
            failure_threshold: Some(2),
            ..Default::default()
        }),
        // Valkey logs to stdout; a crash shows its last lines in the pod status.
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Default::default()
    }
}

/// The server's command. With passwords, a shell first refuses an empty one (or `-`, which
/// valkey-server would read as "config from stdin"): Valkey takes an empty `requirepass` as
/// no password at all, so a blank Secret must stop the start, loudly, rather than serve
/// everyone. `exec` keeps the server the container's process; `$0` is the program.
fn server_command(node: &ValkeyNode, program: &str) -> Vec<String> {
    let Some(auth) = &node.spec.auth else {
        return vec![program.into()];
    };
    let mut checks = Vec::new();
    for (set, var, field) in [
        (
            auth.password_secret_ref.is_some(),
            PASSWORD_ENV,
            "passwordSecretRef",
        ),
        (
            auth.operator_secret_ref.is_some(),
            OPERATOR_PASSWORD_ENV,
            "operatorSecretRef",
        ),
    ] {
        if set {
            checks.push(format!(
                "case \"${{{var}-}}\" in ''|-) echo \"the password from auth.{field} is empty (or '-'): refusing to start without one\" >&2; exit 1;; esac"
            ));
        }
    }
    if checks.is_empty() {
        return vec![program.into()];
    }
    checks.push("exec \"$0\" \"$@\"".into());
    vec!["sh".into(), "-c".into(), checks.join("\n"), program.into()]
}

fn sentinel_init_container(node: &ValkeyNode) -> Container {
    let t = &node.spec.template;
    Container {
        name: SENTINEL_INIT_CONTAINER.into(),
        image: Some(t.image.clone()),
        image_pull_policy: t.image_pull_policy.clone(),
        command: Some(vec!["sh".into(), "-c".into(), SENTINEL_INIT_SCRIPT.into()]),
        volume_mounts: Some(vec![
            mount(CONFIG_VOLUME, CONFIG_DIR, true),
            mount(DATA_VOLUME, DATA_DIR, false),
        ]),
        resources: t.resources.clone(),
        security_context: Some(restricted()),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Default::default()
    }
}

fn exporter_container(node: &ValkeyNode, exporter: &Exporter) -> Container {
    let (port, _) = main_port(node.spec.mode);
    let mut env = vec![field_env(POD_IP_ENV, "status.podIP")];
    // The default user when it has a password, else the operator user: either reads INFO.
    match node
        .spec
        .auth
        .as_ref()
        .map(|a| (&a.password_secret_ref, &a.operator_secret_ref))
    {
        Some((Some(password), _)) => env.push(secret_env("REDIS_PASSWORD", password)),
        Some((None, Some(operator))) => {
            env.push(EnvVar {
                name: "REDIS_USER".into(),
                value: Some(OPERATOR_USER.into()),
                value_from: None,
            });
            env.push(secret_env("REDIS_PASSWORD", operator));
        }
        _ => {}
    }
    env.push(EnvVar {
        name: "REDIS_ADDR".into(),
        value: Some(format!("redis://$({POD_IP_ENV}):{port}")),
        value_from: None,
    });
    // The exporter's own listen address, so `exporter.port` is where it really serves.
    env.push(EnvVar {
        name: "REDIS_EXPORTER_WEB_LISTEN_ADDRESS".into(),
        value: Some(format!(":{}", exporter.port)),
        value_from: None,
    });
    Container {
        name: EXPORTER_CONTAINER.into(),
        image: Some(exporter.image.clone()),
        ports: Some(vec![container_port(ports::METRICS_NAME, exporter.port)]),
        env: Some(env),
        resources: exporter.resources.clone(),
        security_context: Some(restricted()),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Default::default()
    }
}

fn volumes(node: &ValkeyNode, rendered: &RenderedConfig) -> Vec<Volume> {
    let name = node.name_any();
    let config = Volume {
        name: CONFIG_VOLUME.into(),
        config_map: Some(ConfigMapVolumeSource {
            name: names::config_map_name(&name),
            items: Some(vec![KeyToPath {
                key: configmap::config_key(rendered),
                path: rendered.file_name.into(),
                mode: None,
            }]),
            default_mode: Some(0o444),
            optional: Some(false),
        }),
        ..Default::default()
    };
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
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        },
    };
    // /tmp: the root file system is read-only; valkey-cli and the shell may need scratch.
    let tmp = Volume {
        name: TMP_VOLUME.into(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Default::default()
    };
    vec![config, data, tmp]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use crate::config::{self, Rendered, render};
    use crate::meta::fixtures;
    use crd_types::ValkeyNodeSpec;
    use crd_types::names::labels;
    use crd_types::node::{EndpointStatus, ValkeyNodeStatus};
    use crd_types::template::{Announce, Auth, Persistence, Scheduling};
    use k8s_openapi::api::core::v1::{ResourceRequirements, Toleration};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn node(mode: Mode, f: impl FnOnce(&mut ValkeyNodeSpec)) -> ValkeyNode {
        let mut spec = ValkeyNodeSpec {
            mode,
            ..Default::default()
        };
        f(&mut spec);
        let mut n = fixtures::node("cache", spec);
        n.status = Some(ValkeyNodeStatus {
            endpoint: Some(EndpointStatus {
                cluster_ip: Some("10.96.0.5".into()),
                ..Default::default()
            }),
            ..Default::default()
        });
        n
    }

    fn rendered(n: &ValkeyNode) -> RenderedConfig {
        match render(&n.spec, config::cluster_ip(n)).unwrap() {
            Rendered::Config(c) => c,
            Rendered::WaitingForEndpoint => panic!("waiting"),
        }
    }

    fn build(n: &ValkeyNode) -> Desired {
        desired(n, &rendered(n))
    }

    fn pod(d: &Desired) -> &PodSpec {
        d.workload.template().unwrap().spec.as_ref().unwrap()
    }

    fn container<'a>(d: &'a Desired, name: &str) -> &'a Container {
        pod(d).containers.iter().find(|c| c.name == name).unwrap()
    }

    fn port_names(c: &Container) -> Vec<(String, i32)> {
        c.ports
            .iter()
            .flatten()
            .map(|p| (p.name.clone().unwrap(), p.container_port))
            .collect()
    }

    #[test]
    fn statefulset_singleton() {
        let d = build(&node(Mode::Standalone, |_| {}));
        assert_eq!(d.workload.kind(), "StatefulSet");
        let Workload::StatefulSet(s) = &d.workload else {
            unreachable!()
        };
        assert_eq!(s.metadata.name.as_deref(), Some("cache"));
        assert_eq!(s.metadata.namespace.as_deref(), Some("prod"));
        assert_eq!(
            s.metadata.owner_references.as_ref().unwrap()[0].uid,
            "uid-cache"
        );
        let spec = s.spec.as_ref().unwrap();
        assert_eq!(spec.replicas, Some(1));
        assert_eq!(spec.service_name.as_deref(), Some("cache"));
        assert_eq!(spec.pod_management_policy.as_deref(), Some("Parallel"));
        assert_eq!(
            spec.update_strategy.as_ref().unwrap().type_.as_deref(),
            Some("RollingUpdate")
        );
        let selector = spec.selector.match_labels.as_ref().unwrap();
        assert_eq!(
            selector,
            &BTreeMap::from([(labels::NODE.to_string(), "cache".to_string())])
        );
        let pod_labels = spec
            .template
            .metadata
            .as_ref()
            .unwrap()
            .labels
            .as_ref()
            .unwrap();
        assert!(selector.iter().all(|(k, v)| pod_labels.get(k) == Some(v)));
    }

    #[test]
    fn deployment_recreates() {
        let d = build(&node(Mode::Standalone, |s| {
            s.template.workload_type = WorkloadType::Deployment
        }));
        let Workload::Deployment(dep) = &d.workload else {
            panic!("{}", d.workload.kind())
        };
        let spec = dep.spec.as_ref().unwrap();
        assert_eq!(spec.replicas, Some(1));
        assert_eq!(
            spec.strategy.as_ref().unwrap().type_.as_deref(),
            Some("Recreate")
        );
        assert_eq!(d.workload.kind(), "Deployment");
    }

    #[test]
    fn ports_follow_the_contract() {
        let name = |s: &str, p: i32| (s.to_string(), p);
        let d = build(&node(Mode::Standalone, |_| {}));
        assert_eq!(port_names(container(&d, "valkey")), [name("valkey", 6379)]);
        let d = build(&node(Mode::Cluster, |_| {}));
        assert_eq!(
            port_names(container(&d, "valkey")),
            [name("valkey", 6379), name("cluster-bus", 16379)]
        );
        let d = build(&node(Mode::Sentinel, |_| {}));
        assert_eq!(
            port_names(container(&d, "valkey")),
            [name("sentinel", 26379)]
        );
    }

    #[test]
    fn server_command_and_config_mount() {
        let d = build(&node(Mode::Cluster, |_| {}));
        let c = container(&d, "valkey");
        assert_eq!(
            c.command.as_deref(),
            Some(&["valkey-server".to_string()][..])
        );
        assert_eq!(
            c.args.as_deref(),
            Some(&["/etc/valkey/valkey.conf".to_string()][..])
        );
        let config = pod(&d)
            .volumes
            .as_ref()
            .unwrap()
            .iter()
            .find(|v| v.name == "config")
            .unwrap();
        let cm = config.config_map.as_ref().unwrap();
        assert_eq!(cm.name, "cache-config");
        let item = &cm.items.as_ref().unwrap()[0];
        assert_eq!(item.key, d.config_key);
        assert_eq!(item.path, "valkey.conf");
        let mounts = c.volume_mounts.as_ref().unwrap();
        assert!(mounts.iter().any(|m| m.name == "config"
            && m.mount_path == "/etc/valkey"
            && m.read_only == Some(true)));
        assert!(
            mounts
                .iter()
                .any(|m| m.name == "data" && m.mount_path == "/data")
        );
        assert!(
            mounts
                .iter()
                .any(|m| m.name == "tmp" && m.mount_path == "/tmp")
        );
    }

    #[test]
    fn pod_ip_announce_expands_in_args() {
        let d = build(&node(Mode::Standalone, |s| {
            s.template.announce = Announce::PodIP
        }));
        let c = container(&d, "valkey");
        assert_eq!(
            c.args.as_ref().unwrap(),
            &[
                "/etc/valkey/valkey.conf",
                "--replica-announce-ip",
                "$(POD_IP)"
            ]
        );
        let env = c.env.as_ref().unwrap();
        let pod_ip = env.iter().find(|e| e.name == "POD_IP").unwrap();
        assert_eq!(
            pod_ip
                .value_from
                .as_ref()
                .unwrap()
                .field_ref
                .as_ref()
                .unwrap()
                .field_path,
            "status.podIP"
        );
        let names: Vec<_> = env.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["POD_IP", "POD_NAME", "POD_NAMESPACE"]);
    }

    #[test]
    fn sentinel_runs_from_a_writable_copy() {
        let d = build(&node(Mode::Sentinel, |s| {
            s.template.announce = Announce::PodIP
        }));
        let c = container(&d, "valkey");
        assert_eq!(
            c.command.as_deref(),
            Some(&["valkey-sentinel".to_string()][..])
        );
        assert_eq!(
            c.args.as_ref().unwrap(),
            &[
                "/data/sentinel.conf",
                "--sentinel",
                "announce-ip",
                "$(POD_IP)"
            ]
        );
        assert!(
            c.volume_mounts
                .as_ref()
                .unwrap()
                .iter()
                .all(|m| m.name != "config")
        );
        let init = &pod(&d).init_containers.as_ref().unwrap()[0];
        assert_eq!(init.name, SENTINEL_INIT_CONTAINER);
        assert_eq!(
            init.image.as_deref(),
            Some(crd_types::template::DEFAULT_IMAGE)
        );
        let script = &init.command.as_ref().unwrap()[2];
        assert!(script.contains("cp /etc/valkey/sentinel.conf"));
        assert!(script.contains("mv \"$new\" /data/sentinel.conf"));
        assert_eq!(init.security_context, Some(restricted()));
        let cm = pod(&d).volumes.as_ref().unwrap()[0]
            .config_map
            .clone()
            .unwrap();
        assert_eq!(cm.items.unwrap()[0].path, "sentinel.conf");
    }

    #[test]
    fn servers_have_no_init_container() {
        for mode in [Mode::Standalone, Mode::Cluster] {
            assert_eq!(pod(&build(&node(mode, |_| {}))).init_containers, None);
        }
    }

    #[test]
    fn data_volume_is_the_claim_or_an_empty_dir() {
        let d = build(&node(Mode::Standalone, |_| {}));
        let data = |d: &Desired| {
            pod(d)
                .volumes
                .as_ref()
                .unwrap()
                .iter()
                .find(|v| v.name == "data")
                .cloned()
                .unwrap()
        };
        assert!(data(&d).empty_dir.is_some());
        let d = build(&node(Mode::Standalone, |s| {
            s.template.persistence = Some(Persistence {
                size: "1Gi".into(),
                ..Default::default()
            })
        }));
        assert_eq!(
            data(&d).persistent_volume_claim.unwrap().claim_name,
            "cache-data"
        );
    }

    #[test]
    fn restricted_security() {
        let d = build(&node(Mode::Cluster, |_| {}));
        let p = pod(&d);
        let psc = p.security_context.as_ref().unwrap();
        assert_eq!(psc.run_as_non_root, Some(true));
        assert_eq!(psc.run_as_user, Some(999));
        assert_eq!(psc.run_as_group, Some(999));
        assert_eq!(psc.fs_group, Some(999));
        assert_eq!(
            psc.seccomp_profile.as_ref().unwrap().type_,
            "RuntimeDefault"
        );
        let sc = container(&d, "valkey").security_context.as_ref().unwrap();
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        assert_eq!(sc.read_only_root_filesystem, Some(true));
        assert_eq!(
            sc.capabilities.as_ref().unwrap().drop.as_deref(),
            Some(&["ALL".to_string()][..])
        );
        assert_eq!(p.enable_service_links, Some(false));
        assert_eq!(p.automount_service_account_token, Some(false));
        assert_eq!(p.termination_grace_period_seconds, Some(60));
    }

    #[test]
    fn probes_tell_loading_from_dead() {
        let d = build(&node(Mode::Standalone, |_| {}));
        let c = container(&d, "valkey");
        let startup = c.startup_probe.as_ref().unwrap();
        assert_eq!(
            startup.tcp_socket.as_ref().unwrap().port,
            IntOrString::String("valkey".into())
        );
        assert!(startup.failure_threshold.unwrap() * startup.period_seconds.unwrap() >= 300);
        assert!(c.liveness_probe.as_ref().unwrap().tcp_socket.is_some());
        let readiness = c.readiness_probe.as_ref().unwrap().exec.as_ref().unwrap();
        assert_eq!(
            readiness.command.as_ref().unwrap(),
            &[
                "sh",
                "-c",
                "valkey-cli -h \"$POD_IP\" -p 6379 ping | grep -q PONG"
            ]
        );
        assert!(readiness_command(Mode::Sentinel)[2].contains("-p 26379"));
    }

    #[test]
    fn resources_and_scheduling_pass_through() {
        let resources = ResourceRequirements {
            requests: Some(BTreeMap::from([("memory".into(), Quantity("1Gi".into()))])),
            ..Default::default()
        };
        let toleration = Toleration {
            key: Some("dedicated".into()),
            operator: Some("Exists".into()),
            ..Default::default()
        };
        let d = build(&node(Mode::Standalone, |s| {
            s.template.resources = Some(resources.clone());
            s.template.image_pull_policy = Some("Always".into());
            s.template.scheduling = Some(Scheduling {
                node_selector: BTreeMap::from([("disk".into(), "ssd".into())]),
                tolerations: vec![toleration.clone()],
                priority_class_name: Some("high".into()),
                ..Default::default()
            });
        }));
        let c = container(&d, "valkey");
        assert_eq!(c.resources.as_ref(), Some(&resources));
        assert_eq!(c.image_pull_policy.as_deref(), Some("Always"));
        let p = pod(&d);
        assert_eq!(p.node_selector.as_ref().unwrap()["disk"], "ssd");
        assert_eq!(p.tolerations.as_deref(), Some(&[toleration][..]));
        assert_eq!(p.priority_class_name.as_deref(), Some("high"));
        assert_eq!(p.affinity, None);
        assert_eq!(p.topology_spread_constraints, None);
    }

    #[test]
    fn exporter_sidecar() {
        let d = build(&node(Mode::Standalone, |_| {}));
        assert_eq!(pod(&d).containers.len(), 1);
        let d = build(&node(Mode::Cluster, |s| {
            s.template.exporter = Some(Exporter {
                image: "oliver006/redis_exporter:v1.67.0".into(),
                port: 9200,
                resources: None,
            })
        }));
        let e = container(&d, "exporter");
        assert_eq!(e.image.as_deref(), Some("oliver006/redis_exporter:v1.67.0"));
        assert_eq!(port_names(e), [("metrics".to_string(), 9200)]);
        let env: Vec<_> = e
            .env
            .iter()
            .flatten()
            .map(|v| (v.name.as_str(), v.value.as_deref()))
            .collect();
        assert_eq!(
            env,
            [
                ("POD_IP", None),
                ("REDIS_ADDR", Some("redis://$(POD_IP):6379")),
                ("REDIS_EXPORTER_WEB_LISTEN_ADDRESS", Some(":9200")),
            ]
        );
        assert_eq!(e.security_context, Some(restricted()));
    }

    /// `(name, secret name)` of every env var read from a Secret.
    fn secret_env_of(c: &Container) -> Vec<(String, String)> {
        c.env
            .iter()
            .flatten()
            .filter_map(|v| {
                let r = v.value_from.as_ref()?.secret_key_ref.as_ref()?;
                Some((v.name.clone(), format!("{}/{}", r.name, r.key)))
            })
            .collect()
    }

    fn secret(name: &str) -> SecretKeyRef {
        SecretKeyRef {
            name: name.into(),
            key: "password".into(),
        }
    }

    #[test]
    fn passwords_reach_the_containers_from_secrets() {
        let d = build(&node(Mode::Cluster, |s| {
            s.auth = Some(Auth {
                password_secret_ref: Some(secret("app")),
                operator_secret_ref: Some(secret("op")),
            });
            s.template.exporter = Some(Exporter {
                image: "e".into(),
                port: 9121,
                resources: None,
            });
        }));
        let v = container(&d, "valkey");
        assert_eq!(
            secret_env_of(v),
            [
                ("REDISCLI_AUTH".to_string(), "app/password".to_string()),
                ("VALKEY_OPERATOR_PASSWORD".into(), "op/password".into()),
            ]
        );
        // The args name the variables; Kubernetes expands them.
        assert!(
            v.args
                .as_ref()
                .unwrap()
                .contains(&"$(REDISCLI_AUTH)".to_string())
        );
        assert_eq!(
            secret_env_of(container(&d, "exporter")),
            [("REDIS_PASSWORD".to_string(), "app/password".to_string())]
        );
        // The probe's valkey-cli reads REDISCLI_AUTH itself.
        assert!(!readiness_command(Mode::Cluster).join(" ").contains("-a "));

        let d = build(&node(Mode::Cluster, |s| {
            s.auth = Some(Auth {
                password_secret_ref: None,
                operator_secret_ref: Some(secret("op")),
            });
            s.template.exporter = Some(Exporter {
                image: "e".into(),
                port: 9121,
                resources: None,
            });
        }));
        let e = container(&d, "exporter");
        assert_eq!(
            secret_env_of(e),
            [("REDIS_PASSWORD".to_string(), "op/password".to_string())]
        );
        assert!(
            e.env
                .iter()
                .flatten()
                .any(|v| v.name == "REDIS_USER" && v.value.as_deref() == Some("operator"))
        );
    }

    #[test]
    fn an_empty_password_stops_the_start() {
        let d = build(&node(Mode::Cluster, |s| {
            s.auth = Some(Auth {
                password_secret_ref: Some(secret("app")),
                operator_secret_ref: Some(secret("op")),
            });
        }));
        let command = container(&d, "valkey").command.clone().unwrap();
        assert_eq!(command[..2], ["sh", "-c"]);
        assert_eq!(command[3], "valkey-server", "$0 is the program");
        let run = |env: &[(&str, &str)]| {
            let out = std::process::Command::new("sh")
                .args(["-c", &command[2], "echo"])
                .arg("started")
                .env_clear()
                .envs(env.iter().copied())
                .output()
                .unwrap();
            (
                out.status.success(),
                String::from_utf8_lossy(&out.stdout).trim().to_string(),
                String::from_utf8_lossy(&out.stderr).to_string(),
            )
        };
        let ok = [
            ("REDISCLI_AUTH", "a b"),
            ("VALKEY_OPERATOR_PASSWORD", "--x"),
        ];
        assert_eq!(run(&ok).1, "started");
        for bad in [
            vec![("REDISCLI_AUTH", ""), ("VALKEY_OPERATOR_PASSWORD", "x")],
            vec![("REDISCLI_AUTH", "x"), ("VALKEY_OPERATOR_PASSWORD", "-")],
            vec![("REDISCLI_AUTH", "x")],
        ] {
            let (success, stdout, stderr) = run(&bad);
            assert!(!success && stdout.is_empty(), "{bad:?}");
            assert!(stderr.contains("refusing to start"), "{stderr}");
        }
        // Without auth the server is started directly.
        let plain = build(&node(Mode::Cluster, |_| {}));
        assert_eq!(
            container(&plain, "valkey").command.as_deref(),
            Some(&["valkey-server".to_string()][..])
        );
    }

    #[test]
    fn auth_changes_move_the_revision() {
        let plain = node(Mode::Cluster, |_| {});
        let mut with = plain.clone();
        with.spec.auth = Some(Auth {
            password_secret_ref: Some(secret("app")),
            operator_secret_ref: None,
        });
        assert_ne!(
            build(&plain).workload.template(),
            build(&with).workload.template()
        );
        assert!(secret_env_of(container(&build(&plain), "valkey")).is_empty());
    }

    #[test]
    fn unchanged_spec_builds_an_identical_object() {
        let n = node(Mode::Cluster, |s| {
            s.template.config.0.insert("maxmemory".into(), "1gb".into());
        });
        let a = build(&n);
        let b = build(&n.clone());
        assert_eq!(a, b);
        assert_eq!(
            serde_json::to_vec(&a.workload.template()).unwrap(),
            serde_json::to_vec(&b.workload.template()).unwrap()
        );
        let annotations = a
            .workload
            .template()
            .unwrap()
            .metadata
            .as_ref()
            .unwrap()
            .annotations
            .clone();
        assert_eq!(annotations.unwrap()[meta::REVISION_ANNOTATION], a.revision);
        // Status and generation do not feed the template.
        let mut later = n.clone();
        later.metadata.generation = Some(9);
        assert_eq!(build(&later).revision, a.revision);
    }

    #[test]
    fn every_pod_relevant_change_moves_the_revision() {
        let base = build(&node(Mode::Standalone, |_| {})).revision;
        let changed = [
            build(&node(Mode::Standalone, |s| {
                s.template.image = "valkey/valkey:8.0".into()
            })),
            build(&node(Mode::Standalone, |s| {
                s.template.config.0.insert("hz".into(), "20".into());
            })),
            build(&node(Mode::Standalone, |s| {
                s.template.announce = Announce::PodIP
            })),
            build(&node(Mode::Standalone, |s| {
                s.template.scheduling = Some(Scheduling {
                    priority_class_name: Some("x".into()),
                    ..Default::default()
                })
            })),
        ];
        for d in changed {
            assert_ne!(d.revision, base);
        }
        // A new ClusterIP is a new announce address: a roll.
        let mut n = node(Mode::Standalone, |_| {});
        n.status
            .as_mut()
            .unwrap()
            .endpoint
            .as_mut()
            .unwrap()
            .cluster_ip = Some("10.96.0.6".into());
        assert_ne!(build(&n).revision, base);
    }
}
