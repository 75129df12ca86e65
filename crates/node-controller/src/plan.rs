//! The plan stage of a reconcile: from what is live ([`Live`]) to what to apply
//! ([`NodePlan`]), with no I/O.
//!
//! It renders the config, builds the desired objects, asks the roll gate
//! ([`revision::decide`]) and leaves out every object the live one already holds
//! (`operator_runtime::is_applied`), so an idle resync costs reads only. Nothing is planned
//! while the config is invalid or the announce address is unknown: a running pod keeps
//! running what it runs.

use crd_types::ValkeyNode;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim};

use crate::config::{self, ConfigError, Rendered};
use crate::live::Live;
use crate::revision::{self, RollDecision};
use crate::workload::{self, Workload};
use crate::{configmap, pvc};

/// What the plan decided besides the objects; carried through apply to the report.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// `Err` when the spec's config cannot be rendered.
    pub config: Result<(), ConfigError>,
    /// `announce: Service` and no ClusterIP yet.
    pub waiting_for_endpoint: bool,
    /// The template revision the spec asks for; `None` while there is no desired template.
    pub desired_revision: Option<String>,
    /// The roll gate's answer; `None` while there is no desired template.
    pub roll: Option<RollDecision>,
}

/// Why the workload is applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkloadChange {
    /// There is none yet.
    Create,
    /// The live template is at another revision (`None`: unknown) and the gate lets the new one
    /// through: the pod restarts.
    Roll { from: Option<String> },
    /// Same revision, yet the live object departs from it at `field` (a JSON pointer): an edit
    /// by someone else, or a value the API server rewrites (which would cost an apply per look).
    Repair { field: String },
}

/// The workload to apply, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedWorkload {
    pub workload: Workload,
    pub change: WorkloadChange,
}

/// What to apply: each object only when the live one does not already hold it.
#[derive(Debug, Clone, PartialEq)]
pub struct NodePlan {
    pub decision: Decision,
    pub config_map: Option<ConfigMap>,
    pub claim: Option<PersistentVolumeClaim>,
    pub workload: Option<PlannedWorkload>,
}

/// Plans one reconcile of `live.node`.
pub fn plan(live: &Live) -> NodePlan {
    let node = &live.node;
    let (config, waiting_for_endpoint, rendered) =
        match config::render(&node.spec, config::cluster_ip(node)) {
            Err(error) => (Err(error), false, None),
            Ok(Rendered::WaitingForEndpoint) => (Ok(()), true, None),
            Ok(Rendered::Config(c)) => (Ok(()), false, Some(c)),
        };
    let Some(rendered) = rendered else {
        return NodePlan {
            decision: Decision {
                config,
                waiting_for_endpoint,
                desired_revision: None,
                roll: None,
            },
            config_map: None,
            claim: None,
            workload: None,
        };
    };

    let desired = workload::desired(node, &rendered);
    let roll = roll_decision(node, live.workload.as_ref(), &desired.revision);

    let config_map = configmap::config_map(
        node,
        &rendered,
        live.config_map.as_ref(),
        &config_keys_in_use(live),
    );
    let config_map = (!live
        .config_map
        .as_ref()
        .is_some_and(|l| configmap::is_current(&config_map, l)))
    .then_some(config_map);

    let claim = pvc::pvc(node, live.claim.as_ref()).filter(|claim| {
        !live
            .claim
            .as_ref()
            .is_some_and(|l| operator_runtime::is_applied(claim, l))
    });

    // A held roll applies nothing: the live template stays at its revision.
    let workload = match roll {
        RollDecision::HoldAt { .. } => None,
        RollDecision::ApplyNow => {
            workload_change(live.workload.as_ref(), &desired.workload, &desired.revision).map(
                |change| PlannedWorkload {
                    workload: desired.workload,
                    change,
                },
            )
        }
    };

    NodePlan {
        decision: Decision {
            config,
            waiting_for_endpoint,
            desired_revision: Some(desired.revision),
            roll: Some(roll),
        },
        config_map,
        claim,
        workload,
    }
}

fn roll_decision(node: &ValkeyNode, live: Option<&Workload>, desired: &str) -> RollDecision {
    let live = match live {
        None => revision::Live::Missing,
        Some(w) => revision::Live::At(w.revision()),
    };
    revision::decide(
        live,
        desired,
        node.spec.rollout_policy,
        node.spec.allowed_revision.as_deref(),
    )
}

/// The config keys a live template or pod still mounts (a held template, a terminating
/// pod): kept in the ConfigMap, so no restart can find its config gone.
pub fn config_keys_in_use(live: &Live) -> Vec<String> {
    let template = live
        .workload
        .as_ref()
        .and_then(Workload::template)
        .and_then(|t| t.spec.as_ref());
    let pods = live.pods.iter().filter_map(|p| p.spec.as_ref());
    let mut keys: Vec<String> = template
        .into_iter()
        .chain(pods)
        .flat_map(configmap::referenced_keys)
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

/// Why `desired` (at `revision`) must be applied over `live`; `None` when it holds it all.
fn workload_change(
    live: Option<&Workload>,
    desired: &Workload,
    revision: &str,
) -> Option<WorkloadChange> {
    let Some(live) = live else {
        return Some(WorkloadChange::Create);
    };
    match live.revision() {
        Some(current) if current == revision => desired
            .first_difference(live)
            .map(|field| WorkloadChange::Repair { field }),
        from => Some(WorkloadChange::Roll {
            from: from.map(str::to_owned),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crd_types::ValkeyNodeSpec;
    use crd_types::conditions::reasons::RollPending;
    use crd_types::node::{EndpointStatus, RolloutPolicy, ValkeyNodeStatus};
    use crd_types::template::{Announce, Persistence};
    use k8s_openapi::api::core::v1::{Pod, PodSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    use crate::meta::fixtures;

    /// A node with persistence whose Service has its ClusterIP.
    fn node(f: impl FnOnce(&mut ValkeyNodeSpec)) -> ValkeyNode {
        let mut spec = ValkeyNodeSpec::default();
        spec.template.persistence = Some(Persistence {
            size: "1Gi".into(),
            ..Default::default()
        });
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

    fn nothing_live(node: ValkeyNode) -> Live {
        Live {
            node,
            config_map: None,
            claim: None,
            workload: None,
            pods: Vec::new(),
            storage_class_missing: false,
        }
    }

    /// `live` after `plan` was applied as planned.
    fn after(mut live: Live, plan: &NodePlan) -> Live {
        if let Some(cm) = &plan.config_map {
            live.config_map = Some(cm.clone());
        }
        if let Some(claim) = &plan.claim {
            live.claim = Some(claim.clone());
        }
        if let Some(w) = &plan.workload {
            live.workload = Some(w.workload.clone());
        }
        live
    }

    /// A pod made from `workload`'s template.
    fn pod_of(workload: &Workload) -> Pod {
        let template = workload.template().unwrap();
        Pod {
            metadata: template.metadata.clone().unwrap_or_default(),
            spec: template.spec.clone(),
            status: None,
        }
    }

    fn spec_of(w: &Workload) -> &PodSpec {
        w.template().unwrap().spec.as_ref().unwrap()
    }

    #[test]
    fn a_new_node_gets_everything_created() {
        let live = nothing_live(node(|_| {}));
        let plan = plan(&live);
        assert_eq!(plan.decision.config, Ok(()));
        assert_eq!(plan.decision.roll, Some(RollDecision::ApplyNow));
        let revision = plan.decision.desired_revision.clone().unwrap();
        assert!(plan.config_map.is_some());
        assert!(plan.claim.is_some());
        let w = plan.workload.unwrap();
        assert_eq!(w.change, WorkloadChange::Create);
        assert_eq!(w.workload.revision(), Some(revision.as_str()));
    }

    #[test]
    fn what_is_live_is_not_applied_again() {
        let live = nothing_live(node(|_| {}));
        let first = plan(&live);
        let again = plan(&after(live, &first));
        assert_eq!(again.decision, first.decision);
        assert_eq!(
            (again.config_map, again.claim, again.workload),
            (None, None, None),
            "an idle resync costs reads only"
        );
    }

    #[test]
    fn an_edited_workload_at_the_same_revision_is_repaired() {
        let live = nothing_live(node(|_| {}));
        let first = plan(&live);
        let mut live = after(live, &first);
        let Some(Workload::StatefulSet(sts)) = live.workload.as_mut() else {
            unreachable!()
        };
        sts.spec.as_mut().unwrap().replicas = Some(3);
        let w = plan(&live).workload.unwrap();
        assert_eq!(
            w.change,
            WorkloadChange::Repair {
                field: "/spec/replicas".into()
            }
        );
    }

    #[test]
    fn nothing_is_planned_while_the_config_is_invalid_or_the_address_unknown() {
        let invalid = node(|s| {
            s.template.config.0.insert("Port".into(), "7000".into());
        });
        let p = plan(&nothing_live(invalid));
        assert!(matches!(
            p.decision.config,
            Err(ConfigError::OwnedDirectives(_))
        ));
        assert_eq!((p.decision.roll, p.decision.desired_revision), (None, None));
        assert_eq!((p.config_map, p.claim, p.workload), (None, None, None));

        let mut waiting = node(|s| s.template.announce = Announce::Service);
        waiting.status = None;
        let p = plan(&nothing_live(waiting));
        assert_eq!(p.decision.config, Ok(()));
        assert!(p.decision.waiting_for_endpoint);
        assert_eq!((p.config_map, p.claim, p.workload), (None, None, None));
    }

    #[test]
    fn a_new_revision_rolls_at_once_unless_gated() {
        let live = nothing_live(node(|_| {}));
        let first = plan(&live);
        let old_revision = first.decision.desired_revision.clone().unwrap();
        let mut live = after(live, &first);
        live.node.spec.template.image = "valkey/valkey:8.0".into();

        let rolled = plan(&live);
        assert_eq!(
            rolled.workload.unwrap().change,
            WorkloadChange::Roll {
                from: Some(old_revision.clone())
            }
        );

        live.node.spec.rollout_policy = RolloutPolicy::Gated;
        let held = plan(&live);
        assert!(held.workload.is_none(), "the gate holds the template");
        let Some(RollDecision::HoldAt {
            current, reason, ..
        }) = &held.decision.roll
        else {
            panic!("{:?}", held.decision.roll)
        };
        assert_eq!(current.as_deref(), Some(old_revision.as_str()));
        assert_eq!(*reason, RollPending::WaitingForAllowedRevision);

        live.node.spec.allowed_revision = held.decision.desired_revision.clone();
        assert!(matches!(
            plan(&live).workload.unwrap().change,
            WorkloadChange::Roll { .. }
        ));
    }

    #[test]
    fn a_workload_from_an_older_operator_rolls_from_an_unknown_revision() {
        let live = nothing_live(node(|_| {}));
        let first = plan(&live);
        let mut live = after(live, &first);
        let Some(Workload::StatefulSet(sts)) = live.workload.as_mut() else {
            unreachable!()
        };
        sts.spec.as_mut().unwrap().template.metadata = None;
        assert_eq!(
            plan(&live).workload.unwrap().change,
            WorkloadChange::Roll { from: None }
        );
    }

    #[test]
    fn config_keys_of_a_held_template_and_of_terminating_pods_are_kept() {
        let live = nothing_live(node(|s| s.rollout_policy = RolloutPolicy::Gated));
        let first = plan(&live);
        let mut live = after(live, &first);
        let held_key = configmap::referenced_keys(spec_of(live.workload.as_ref().unwrap()));
        // A pod of an even older template, still terminating.
        let mut terminating = pod_of(live.workload.as_ref().unwrap());
        let volumes = terminating.spec.as_mut().unwrap().volumes.as_mut().unwrap();
        let items = volumes[0]
            .config_map
            .as_mut()
            .unwrap()
            .items
            .as_mut()
            .unwrap();
        items[0].key = "valkey-0000000000.conf".into();
        terminating.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        live.pods.push(terminating);
        live.config_map
            .as_mut()
            .unwrap()
            .data
            .as_mut()
            .unwrap()
            .insert("valkey-0000000000.conf".into(), "old\n".into());

        let mut keys = held_key.clone();
        keys.push("valkey-0000000000.conf".into());
        keys.sort();
        assert_eq!(config_keys_in_use(&live), keys);

        // A held config change: the new key joins, both old ones stay.
        live.node
            .spec
            .template
            .config
            .0
            .insert("hz".into(), "20".into());
        let held = plan(&live);
        assert!(held.workload.is_none());
        let data = held.config_map.unwrap().data.unwrap();
        assert_eq!(data.len(), 3, "{:?}", data.keys());
        for key in &keys {
            assert!(data.contains_key(key), "{key}");
        }
    }
}
