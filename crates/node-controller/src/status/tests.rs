use super::*;
use std::collections::BTreeMap;

use crd_types::conditions::{TRUE, find, types};
use crd_types::template::WorkloadType;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateTerminated, ContainerStateWaiting, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

fn at(s: i64) -> Timestamp {
    Timestamp::from_second(s).unwrap()
}

fn pod(name: &str, created: i64, ready: bool) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            creation_timestamp: Some(Time(at(created))),
            annotations: Some(BTreeMap::from([(
                REVISION_ANNOTATION.to_string(),
                "rev1".to_string(),
            )])),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some("worker-1".into()),
            ..Default::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            pod_ip: Some("10.1.0.4".into()),
            container_statuses: Some(vec![
                ContainerStatus {
                    name: "valkey".into(),
                    ready,
                    restart_count: 2,
                    ..Default::default()
                },
                ContainerStatus {
                    name: "exporter".into(),
                    ready: false,
                    restart_count: 7,
                    ..Default::default()
                },
            ]),
            ..Default::default()
        }),
    }
}

fn sts(name: &str) -> StatefulSet {
    StatefulSet {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

#[test]
fn status_from_statefulset_and_pod() {
    let s = sts("cache");
    let p = pod("cache-0", 1, true);
    let w = workload_status(
        Some(&Workload::StatefulSet(s)),
        Some(&p),
        Some("rev2"),
        Some(4),
    );
    assert_eq!(
        w,
        WorkloadStatus {
            kind: Some(WorkloadType::StatefulSet),
            name: Some("cache".into()),
            pod_name: Some("cache-0".into()),
            pod_ip: Some("10.1.0.4".into()),
            node_name: Some("worker-1".into()),
            ready: true,
            revision: Some("rev1".into()),
            desired_revision: Some("rev2".into()),
            restarts: 2,
            observed_generation: Some(4),
        }
    );
}

#[test]
fn status_without_workload_or_pod() {
    let w = workload_status(None, None, None, Some(1));
    assert_eq!(
        w,
        WorkloadStatus {
            observed_generation: Some(1),
            ..Default::default()
        }
    );
    let d = Deployment {
        metadata: ObjectMeta {
            name: Some("cache".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let w = workload_status(Some(&Workload::Deployment(d)), None, Some("r"), None);
    assert_eq!(w.kind, Some(WorkloadType::Deployment));
    assert_eq!(w.pod_name, None);
    assert!(!w.ready);
}

#[test]
fn readiness_is_the_valkey_containers() {
    // The exporter is not ready in the fixture; the node still is.
    assert!(is_ready(&pod("a", 1, true)));
    assert!(!is_ready(&pod("a", 1, false)));
    let mut terminating = pod("a", 1, true);
    terminating.metadata.deletion_timestamp = Some(Time(at(5)));
    assert!(!is_ready(&terminating));
}

#[test]
fn current_pod_prefers_live_and_new() {
    let mut old = pod("cache-abc", 1, true);
    old.metadata.deletion_timestamp = Some(Time(at(9)));
    let new = pod("cache-def", 5, false);
    let older_live = pod("cache-ghi", 2, true);
    let pods = vec![old.clone(), new.clone(), older_live];
    assert_eq!(current_pod(&pods).unwrap().name_any(), "cache-def");
    assert_eq!(
        current_pod(std::slice::from_ref(&old)).unwrap().name_any(),
        "cache-abc"
    );
    assert!(current_pod(&[]).is_none());
}

fn observed<'a>(
    w: &'a WorkloadStatus,
    pod: Option<&'a Pod>,
    roll: Option<&'a RollDecision>,
) -> Observed<'a> {
    Observed {
        config: Ok(()),
        waiting_for_endpoint: false,
        workload_exists: true,
        pod,
        claim: None,
        storage_class_missing: false,
        persistence: None,
        roll,
        workload: w,
    }
}

fn get<'a>(c: &'a [Condition], t: &str) -> &'a Condition {
    find(c, t).unwrap()
}

#[test]
fn all_good() {
    let p = pod("cache-0", 1, true);
    let mut w = workload_status(None, Some(&p), Some("rev1"), Some(1));
    w.kind = Some(WorkloadType::StatefulSet);
    let roll = RollDecision::ApplyNow;
    let c = conditions(&[], &observed(&w, Some(&p), Some(&roll)), Some(1), at(10));
    assert_eq!(c.len(), 3);
    assert_eq!(get(&c, types::CONFIG_VALID).status, TRUE);
    assert_eq!(get(&c, types::WORKLOAD_READY).reason, "PodReady");
    let rp = get(&c, types::ROLL_PENDING);
    assert_eq!(
        (rp.status.as_str(), rp.reason.as_str()),
        ("False", "UpToDate")
    );
    // Re-observing the same keeps the clocks.
    let again = conditions(&c, &observed(&w, Some(&p), Some(&roll)), Some(2), at(99));
    assert!(again.iter().all(|x| x.last_transition_time == Time(at(10))));
}

#[test]
fn claim_size_tells_a_spec_growth_nobody_carried_out() {
    use k8s_openapi::api::core::v1::{PersistentVolumeClaimSpec, VolumeResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use std::collections::BTreeMap;
    let p = pod("cache-0", 1, true);
    let w = workload_status(None, Some(&p), Some("rev1"), Some(1));
    let roll = RollDecision::ApplyNow;
    let persistence = Persistence {
        size: "2Gi".into(),
        ..Default::default()
    };
    let claim = |size: &str| PersistentVolumeClaim {
        spec: Some(PersistentVolumeClaimSpec {
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([("storage".into(), Quantity(size.into()))])),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let small = claim("1Gi");
    let o = Observed {
        claim: Some(&small),
        persistence: Some(&persistence),
        ..observed(&w, Some(&p), Some(&roll))
    };
    let c = conditions(&[], &o, Some(1), at(10));
    let size = get(&c, types::CLAIM_SIZE);
    assert_eq!(
        (size.status.as_str(), size.reason.as_str()),
        ("False", "SmallerThanSpec")
    );
    assert!(size.message.contains("requests 1Gi") && size.message.contains("pvc-resizer"));
    let big = claim("2048Mi");
    let o = Observed {
        claim: Some(&big),
        persistence: Some(&persistence),
        ..observed(&w, Some(&p), Some(&roll))
    };
    let size = get(&conditions(&[], &o, Some(1), at(10)), types::CLAIM_SIZE).clone();
    assert_eq!(
        (size.status.as_str(), size.reason.as_str()),
        ("True", "MatchesSpec")
    );
    // No claim yet: no condition.
    let o = Observed {
        persistence: Some(&persistence),
        ..observed(&w, Some(&p), Some(&roll))
    };
    assert!(find(&conditions(&[], &o, Some(1), at(10)), types::CLAIM_SIZE).is_none());
}

#[test]
fn invalid_config() {
    let w = WorkloadStatus::default();
    let err = ConfigError::OwnedDirectives(vec!["port".into()]);
    let o = Observed {
        config: Err(&err),
        workload_exists: false,
        ..observed(&w, None, None)
    };
    let c = conditions(&[], &o, None, at(1));
    let cv = get(&c, types::CONFIG_VALID);
    assert_eq!(
        (cv.status.as_str(), cv.reason.as_str()),
        ("False", "OwnedDirective")
    );
    assert!(cv.message.contains("port"));
    assert_eq!(get(&c, types::WORKLOAD_READY).reason, "ConfigInvalid");
    assert_eq!(get(&c, types::ROLL_PENDING).reason, "NoDesiredRevision");
}

#[test]
fn waiting_for_endpoint() {
    let w = WorkloadStatus::default();
    let o = Observed {
        waiting_for_endpoint: true,
        workload_exists: false,
        ..observed(&w, None, None)
    };
    let c = conditions(&[], &o, None, at(1));
    assert_eq!(get(&c, types::CONFIG_VALID).status, TRUE);
    assert_eq!(get(&c, types::WORKLOAD_READY).reason, "WaitingForEndpoint");
}

#[test]
fn workload_ready_reasons() {
    let w = WorkloadStatus::default();
    let reason = |o: Observed<'_>| {
        let c = conditions(&[], &o, None, at(1));
        get(&c, types::WORKLOAD_READY).reason.clone()
    };
    assert_eq!(
        reason(Observed {
            workload_exists: false,
            ..observed(&w, None, None)
        }),
        "WorkloadMissing"
    );
    assert_eq!(reason(observed(&w, None, None)), "PodMissing");

    let loading = pod("cache-0", 1, false);
    assert_eq!(reason(observed(&w, Some(&loading), None)), "PodNotReady");

    let mut crashing = pod("cache-0", 1, false);
    crashing
        .status
        .as_mut()
        .unwrap()
        .container_statuses
        .as_mut()
        .unwrap()[0]
        .state = Some(ContainerState {
        waiting: Some(ContainerStateWaiting {
            reason: Some("CrashLoopBackOff".into()),
            message: None,
        }),
        ..Default::default()
    });
    let c = conditions(&[], &observed(&w, Some(&crashing), None), None, at(1));
    let wr = get(&c, types::WORKLOAD_READY);
    assert_eq!(wr.reason, "ContainerWaiting");
    assert!(wr.message.ends_with("CrashLoopBackOff"), "{}", wr.message);
    let status = &mut crashing
        .status
        .as_mut()
        .unwrap()
        .container_statuses
        .as_mut()
        .unwrap()[0];
    status.last_state = Some(ContainerState {
        terminated: Some(ContainerStateTerminated {
            exit_code: 1,
            message: Some("the password from auth.passwordSecretRef is empty\n".into()),
            ..Default::default()
        }),
        ..Default::default()
    });
    let c = conditions(&[], &observed(&w, Some(&crashing), None), None, at(1));
    let wr = get(&c, types::WORKLOAD_READY);
    assert!(
        wr.message.ends_with(
            "CrashLoopBackOff; last exit 1: the password from auth.passwordSecretRef is empty"
        ),
        "{}",
        wr.message
    );

    let mut pending = pod("cache-0", 1, false);
    pending.status.as_mut().unwrap().phase = Some("Pending".into());
    pending.status.as_mut().unwrap().container_statuses = None;
    assert_eq!(reason(observed(&w, Some(&pending), None)), "PodPending");

    let mut terminating = pod("cache-0", 1, true);
    terminating.metadata.deletion_timestamp = Some(Time(at(3)));
    assert_eq!(
        reason(observed(&w, Some(&terminating), None)),
        "PodTerminating"
    );
}

#[test]
fn only_a_container_waiting_for_the_user_is_blocked() {
    let waiting = |reason: &str, message: &str| {
        let mut p = pod("cache-0", 1, false);
        p.status
            .as_mut()
            .unwrap()
            .container_statuses
            .as_mut()
            .unwrap()[0]
            .state = Some(ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some(reason.into()),
                message: Some(message.into()),
            }),
            ..Default::default()
        });
        p
    };
    let missing = waiting(
        "CreateContainerConfigError",
        "secret \"cache-auth\" not found",
    );
    let blocked = blocked_container(&missing).unwrap();
    assert_eq!(
        blocked,
        BlockedContainer {
            pod: "cache-0".into(),
            container: "valkey".into(),
            reason: "CreateContainerConfigError".into(),
            message: "secret \"cache-auth\" not found".into(),
        }
    );
    assert!(
        blocked
            .to_string()
            .contains("cannot start: CreateContainerConfigError: secret \"cache-auth\" not found;"),
        "{blocked}"
    );
    // These end by themselves (or are the server's own failure, with its own back-off).
    for passing in ["ContainerCreating", "CrashLoopBackOff", "ErrImagePull"] {
        assert_eq!(blocked_container(&waiting(passing, "")), None, "{passing}");
    }
    assert_eq!(blocked_container(&pod("cache-0", 1, true)), None);
    let mut leaving = missing;
    leaving.metadata.deletion_timestamp = Some(Time(at(5)));
    assert_eq!(blocked_container(&leaving), None);

    // An init container that needs the Secret first (exporter-auth): valkey only waits
    // behind it, so the init container is the one reported.
    let mut behind = waiting("PodInitializing", "");
    let mut init = behind
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0]
        .clone();
    init.name = "exporter-auth".into();
    init.state = Some(ContainerState {
        waiting: Some(ContainerStateWaiting {
            reason: Some("CreateContainerConfigError".into()),
            message: Some("secret \"cache-operator\" not found".into()),
        }),
        ..Default::default()
    });
    behind.status.as_mut().unwrap().init_container_statuses = Some(vec![init]);
    let blocked = blocked_container(&behind).unwrap();
    assert_eq!(blocked.container, "exporter-auth");
    assert!(
        blocked
            .to_string()
            .starts_with("container exporter-auth of pod cache-0 cannot start"),
        "{blocked}"
    );
}

#[test]
fn an_unbound_claim_is_named_as_the_reason() {
    use k8s_openapi::api::core::v1::{PersistentVolumeClaimSpec, PersistentVolumeClaimStatus};
    let w = WorkloadStatus::default();
    let mut pending = pod("cache-0", 1, false);
    pending.status.as_mut().unwrap().phase = Some("Pending".into());
    let mut claim = PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some("cache-data".into()),
            ..Default::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            storage_class_name: Some("does-not-exist".into()),
            ..Default::default()
        }),
        status: Some(PersistentVolumeClaimStatus {
            phase: Some("Pending".into()),
            ..Default::default()
        }),
    };
    let o = Observed {
        claim: Some(&claim),
        storage_class_missing: true,
        persistence: None,
        ..observed(&w, Some(&pending), None)
    };
    let c = conditions(&[], &o, None, at(1));
    let wr = get(&c, types::WORKLOAD_READY);
    assert_eq!(
        (wr.status.as_str(), wr.reason.as_str()),
        ("False", WorkloadReady::ClaimNotBound.as_str())
    );
    assert!(wr.message.contains("cache-data"), "{}", wr.message);
    assert!(
        wr.message
            .contains("StorageClass \"does-not-exist\" does not exist"),
        "{}",
        wr.message
    );
    let o = Observed {
        claim: Some(&claim),
        ..observed(&w, Some(&pending), None)
    };
    let c = conditions(&[], &o, None, at(1));
    assert!(
        get(&c, types::WORKLOAD_READY)
            .message
            .contains("waiting for a volume")
    );

    claim.status.as_mut().unwrap().phase = Some("Bound".into());
    let o = Observed {
        claim: Some(&claim),
        ..observed(&w, Some(&pending), None)
    };
    let c = conditions(&[], &o, None, at(1));
    assert_eq!(get(&c, types::WORKLOAD_READY).reason, "PodPending");
}

#[test]
fn desired_status_is_applied_only_when_it_changes() {
    let p = pod("cache-0", 1, true);
    let w = workload_status(None, Some(&p), Some("rev1"), Some(1));
    let roll = RollDecision::ApplyNow;
    let first = desired(
        None,
        w.clone(),
        &observed(&w, Some(&p), Some(&roll)),
        Some(1),
        at(10),
    );
    let json = serde_json::to_value(&first).unwrap();
    let keys: Vec<&String> = json.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        ["conditions", "workload"],
        "only node-controller's fields"
    );
    assert!(needs_update(None, &first));
    // Another controller's condition and endpoint next to ours do not count.
    let mut live = first.clone();
    live.conditions.push(Condition {
        type_: types::ENDPOINT_READY.into(),
        status: TRUE.into(),
        reason: "ServiceReady".into(),
        message: String::new(),
        observed_generation: None,
        last_transition_time: Time(at(1)),
    });
    live.endpoint = Some(Default::default());
    let again = desired(
        Some(&live),
        w.clone(),
        &observed(&w, Some(&p), Some(&roll)),
        Some(1),
        at(50),
    );
    assert!(!needs_update(Some(&live), &again));
    // The pod going unready is an update.
    let unready = pod("cache-0", 1, false);
    let w2 = workload_status(None, Some(&unready), Some("rev1"), Some(1));
    let changed = desired(
        Some(&live),
        w2.clone(),
        &observed(&w2, Some(&unready), Some(&roll)),
        Some(1),
        at(60),
    );
    assert!(needs_update(Some(&live), &changed));
}

#[test]
fn roll_pending_follows_the_gate() {
    let p = pod("cache-0", 1, true);
    let w = workload_status(None, Some(&p), Some("rev2"), None);
    let hold = crate::revision::decide(
        crate::revision::Live::At(Some("rev1")),
        "rev2",
        crd_types::node::RolloutPolicy::Gated,
        None,
    );
    let c = conditions(&[], &observed(&w, Some(&p), Some(&hold)), None, at(1));
    let rp = get(&c, types::ROLL_PENDING);
    assert_eq!(rp.status, TRUE);
    assert_eq!(rp.reason, RollPending::WaitingForAllowedRevision.as_str());
    assert!(rp.message.contains("rev2"));

    let now = RollDecision::ApplyNow;
    let c2 = conditions(&c, &observed(&w, Some(&p), Some(&now)), None, at(5));
    let rp = get(&c2, types::ROLL_PENDING);
    assert_eq!(
        (rp.status.as_str(), rp.reason.as_str()),
        ("False", "Rolling")
    );
    assert_eq!(rp.last_transition_time, Time(at(5)));
}

#[test]
fn a_missing_program_is_read_from_the_runtime_or_the_shell() {
    for (message, program) in [
        (
            "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: exec: \"sh\": executable file not found in $PATH: unknown",
            Some("sh"),
        ),
        (
            "exec: \"valkey-server\": executable file not found in $PATH",
            Some("valkey-server"),
        ),
        ("sh: 1: awk: not found", Some("awk")),
        ("loading\nsh: timeout: not found\n", Some("timeout")),
        (
            "sh: line 3: sha256sum: command not found",
            Some("sha256sum"),
        ),
        ("secret \"cache-auth\" not found", None),
        ("the password from auth.passwordSecretRef is empty", None),
        ("cat: /data/x: No such file or directory", None),
    ] {
        assert_eq!(missing_program(message).as_deref(), program, "{message}");
    }
}
