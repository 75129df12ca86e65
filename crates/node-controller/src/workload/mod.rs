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
//!
//! The pod template is built in parts: [`pod`] (the pod spec, its volumes and security),
//! [`containers`] (valkey, the sentinel init container, the exporter), [`env`], [`probes`]
//! [`scripts`] (a replication member's role at start), [`lifecycle`] (a cluster
//! primary's hand-over before it stops) and [`platform`] (what `template.pod` adds).

pub mod containers;
pub mod env;
pub mod layout;
pub mod lifecycle;
pub mod memory_only;
pub mod platform;
pub mod pod;
pub mod probes;
pub mod scripts;

#[cfg(test)]
mod fixtures;

use crd_types::ValkeyNode;
use crd_types::names;
use crd_types::template::WorkloadType;
use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, DeploymentStrategy, StatefulSet, StatefulSetSpec,
    StatefulSetUpdateStrategy,
};
use k8s_openapi::api::core::v1::{ObjectReference, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::{Resource, ResourceExt};

use crate::config::RenderedConfig;
use crate::{configmap, meta, revision};

pub use containers::VALKEY_CONTAINER;

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
pub struct DesiredWorkload {
    pub workload: Workload,
    /// The template revision, also on the template as `valkey.rs/revision`.
    pub revision: String,
    /// The ConfigMap key the template mounts.
    pub config_key: String,
}

/// Builds the desired workload for `node` running `rendered`.
pub fn desired(node: &ValkeyNode, rendered: &RenderedConfig) -> DesiredWorkload {
    let mut template = pod::pod_template(node, rendered);
    let revision = revision::stamp(&mut template, &rendered.text);
    DesiredWorkload {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use crd_types::names::labels;
    use crd_types::node::Mode;
    use crd_types::template::{Announce, Auth, Scheduling};

    use fixtures::{build, container, node, secret, secret_env_of};

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
    fn auth_changes_move_the_revision() {
        let plain = node(Mode::Cluster, |_| {});
        let mut with = plain.clone();
        with.spec.auth = Some(Auth {
            password_secret_ref: Some(secret("app")),
            operator_secret_ref: None,
            ..Default::default()
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
        let annotations = fixtures::template_annotations(&a);
        assert_eq!(annotations[meta::REVISION_ANNOTATION], a.revision);
        // Status and generation do not feed the template.
        let mut later = n.clone();
        later.metadata.generation = Some(9);
        assert_eq!(build(&later).revision, a.revision);
    }

    #[test]
    fn a_new_replication_context_restarts_nothing() {
        use crd_types::node::NodeReplication;
        let context = |primary: &str| NodeReplication {
            primary_name: "g".into(),
            primary: Some(primary.into()),
            monitored: true,
            ..Default::default()
        };
        let before = build(&node(Mode::Standalone, |s| {
            s.replication = Some(context("10.96.0.1"))
        }));
        let after = build(&node(Mode::Standalone, |s| {
            s.replication = Some(context("10.96.0.2"))
        }));
        assert_eq!(before.revision, after.revision, "a failover rolls nobody");
        assert_eq!(before.workload, after.workload);
        let items = fixtures::pod(&before).volumes.as_ref().unwrap()[0]
            .config_map
            .clone()
            .unwrap()
            .items
            .unwrap();
        assert_eq!(items[1].key, "replication");
        // The role script runs before the server.
        let command = container(&before, "valkey").command.clone().unwrap();
        assert!(command[2].contains("SENTINEL GET-MASTER-ADDR-BY-NAME"));
        // Joining a replication group at all is a new template.
        assert_ne!(
            build(&node(Mode::Standalone, |_| {})).revision,
            before.revision
        );
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
            // A new volume: it rolls under the topology's roll gate.
            build(&node(Mode::Standalone, |s| {
                s.users_secret_name = Some("cache-users".into())
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
