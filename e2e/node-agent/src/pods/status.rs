//! The agent's view of a pod's containers, and its translation into the
//! PodStatus the kubelet would report.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, HostIP, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

#[derive(Debug, Clone, PartialEq)]
pub enum CState {
    Waiting {
        reason: String,
        message: Option<String>,
    },
    Running {
        started_at: Timestamp,
    },
    Terminated {
        exit_code: i32,
        signal: Option<i32>,
        reason: String,
        message: Option<String>,
        started_at: Option<Timestamp>,
        finished_at: Timestamp,
    },
}

impl CState {
    pub fn waiting(reason: &str, message: Option<String>) -> Self {
        CState::Waiting {
            reason: reason.to_string(),
            message,
        }
    }

    pub fn to_k8s(&self) -> ContainerState {
        match self {
            CState::Waiting { reason, message } => ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some(reason.clone()),
                    message: message.clone(),
                }),
                ..Default::default()
            },
            CState::Running { started_at } => ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: Some(Time(*started_at)),
                }),
                ..Default::default()
            },
            CState::Terminated {
                exit_code,
                signal,
                reason,
                message,
                started_at,
                finished_at,
            } => ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: *exit_code,
                    signal: *signal,
                    reason: Some(reason.clone()),
                    message: message.clone(),
                    started_at: started_at.map(Time),
                    finished_at: Some(Time(*finished_at)),
                    container_id: None,
                }),
                ..Default::default()
            },
        }
    }
}

#[derive(Debug, Clone)]
pub struct ContainerRt {
    pub name: String,
    pub image: String,
    /// `<repository>@<manifest digest>` once pulled, as a kubelet reports it.
    pub image_id: Option<String>,
    pub state: CState,
    pub last_state: Option<CState>,
    pub restart_count: i32,
    pub ready: bool,
    /// Startup probe passed (or none) while running.
    pub started: bool,
    pub pid: Option<u32>,
    /// The container will not run again (restart policy says so).
    pub done: bool,
}

impl ContainerRt {
    pub fn new(name: &str, image: &str) -> Self {
        Self {
            name: name.to_string(),
            image: image.to_string(),
            image_id: None,
            state: CState::waiting("ContainerCreating", None),
            last_state: None,
            restart_count: 0,
            ready: false,
            started: false,
            pid: None,
            done: false,
        }
    }

    pub fn is_running(&self) -> bool {
        matches!(self.state, CState::Running { .. })
    }

    pub fn has_run(&self) -> bool {
        !matches!(self.state, CState::Waiting { .. }) || self.last_state.is_some()
    }

    pub fn succeeded(&self) -> bool {
        matches!(self.state, CState::Terminated { exit_code: 0, .. })
    }

    fn to_k8s(&self, is_init: bool) -> ContainerStatus {
        ContainerStatus {
            name: self.name.clone(),
            image: self.image.clone(),
            image_id: self.image_id.clone().unwrap_or_default(),
            container_id: self.pid.map(|p| format!("local://{p}")),
            state: Some(self.state.to_k8s()),
            last_state: Some(
                self.last_state
                    .as_ref()
                    .map(CState::to_k8s)
                    .unwrap_or_default(),
            ),
            ready: self.ready,
            restart_count: self.restart_count,
            started: Some(if is_init {
                self.is_running()
            } else {
                self.is_running() && self.started
            }),
            ..Default::default()
        }
    }
}

#[derive(Debug, Clone)]
pub struct PodRt {
    pub init: Vec<ContainerRt>,
    pub containers: Vec<ContainerRt>,
    pub pod_ip: Option<String>,
    pub host_ip: String,
    pub start_time: Timestamp,
    /// Volumes ready and IP allocated.
    pub sandbox_ready: bool,
    /// Conditions as last computed: type → (status, lastTransitionTime).
    conditions: BTreeMap<&'static str, (bool, Timestamp)>,
    /// Pod-level message, e.g. why volumes are not ready.
    pub message: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Pending,
    Running,
    Succeeded,
    Failed,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Running => "Running",
            Phase::Succeeded => "Succeeded",
            Phase::Failed => "Failed",
        }
    }
}

impl PodRt {
    pub fn new(
        init: Vec<ContainerRt>,
        containers: Vec<ContainerRt>,
        host_ip: &str,
        now: Timestamp,
    ) -> Self {
        Self {
            init,
            containers,
            pod_ip: None,
            host_ip: host_ip.to_string(),
            start_time: now,
            sandbox_ready: false,
            conditions: BTreeMap::new(),
            message: None,
        }
    }

    pub fn initialized(&self) -> bool {
        self.init.iter().all(|c| c.succeeded() && c.done)
    }

    pub fn phase(&self) -> Phase {
        if self.init.iter().any(|c| c.done && !c.succeeded()) {
            return Phase::Failed;
        }
        if !self.initialized() {
            return Phase::Pending;
        }
        if !self.containers.is_empty() && self.containers.iter().all(|c| c.done) {
            return if self.containers.iter().all(|c| c.succeeded()) {
                Phase::Succeeded
            } else {
                Phase::Failed
            };
        }
        if self.containers.iter().all(|c| c.has_run()) {
            Phase::Running
        } else {
            Phase::Pending
        }
    }

    /// Recomputes conditions, moving lastTransitionTime only on a change.
    pub fn refresh_conditions(&mut self, now: Timestamp) {
        let all_ready = !self.containers.is_empty() && self.containers.iter().all(|c| c.ready);
        let finished = matches!(self.phase(), Phase::Succeeded | Phase::Failed);
        let values = [
            ("PodReadyToStartContainers", self.sandbox_ready),
            ("Initialized", self.initialized()),
            ("ContainersReady", all_ready && !finished),
            ("Ready", all_ready && !finished),
        ];
        for (ty, value) in values {
            match self.conditions.get(ty) {
                Some((v, _)) if *v == value => {}
                _ => {
                    self.conditions.insert(ty, (value, now));
                }
            }
        }
    }

    /// PodStatus for the pods/status subresource. `scheduled` tells whether
    /// the pod already carries a PodScheduled condition (set at binding).
    pub fn to_status(&self, scheduled: bool) -> PodStatus {
        let mut conditions: Vec<PodCondition> = self
            .conditions
            .iter()
            .map(|(ty, (v, t))| PodCondition {
                type_: ty.to_string(),
                status: if *v { "True" } else { "False" }.to_string(),
                last_transition_time: Some(Time(*t)),
                reason: self.condition_reason(ty, *v),
                ..Default::default()
            })
            .collect();
        if !scheduled {
            conditions.push(PodCondition {
                type_: "PodScheduled".into(),
                status: "True".into(),
                last_transition_time: Some(Time(self.start_time)),
                ..Default::default()
            });
        }
        let phase = self.phase();
        PodStatus {
            phase: Some(phase.as_str().to_string()),
            conditions: Some(conditions),
            host_ip: Some(self.host_ip.clone()),
            host_ips: Some(vec![HostIP {
                ip: self.host_ip.clone(),
            }]),
            pod_ip: self.pod_ip.clone(),
            pod_ips: self
                .pod_ip
                .as_ref()
                .map(|ip| vec![PodIP { ip: ip.clone() }]),
            start_time: Some(Time(self.start_time)),
            message: self.message.clone(),
            init_container_statuses: if self.init.is_empty() {
                None
            } else {
                Some(self.init.iter().map(|c| c.to_k8s(true)).collect())
            },
            container_statuses: Some(self.containers.iter().map(|c| c.to_k8s(false)).collect()),
            qos_class: None,
            ..Default::default()
        }
    }

    fn condition_reason(&self, ty: &str, value: bool) -> Option<String> {
        if value {
            return None;
        }
        match ty {
            "Initialized" => Some("ContainersNotInitialized".into()),
            "ContainersReady" | "Ready" => {
                if matches!(self.phase(), Phase::Succeeded | Phase::Failed) {
                    Some("PodCompleted".into())
                } else {
                    Some("ContainersNotReady".into())
                }
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + s).unwrap()
    }

    fn pod() -> PodRt {
        let mut p = PodRt::new(
            vec![ContainerRt::new("init", "valkey/valkey:8.1")],
            vec![ContainerRt::new("valkey", "valkey/valkey:8.1")],
            "127.0.0.1",
            ts(0),
        );
        p.pod_ip = Some("127.64.0.2".into());
        p
    }

    #[test]
    fn pending_until_init_done_then_running_and_ready() {
        let mut p = pod();
        p.refresh_conditions(ts(1));
        assert_eq!(p.phase(), Phase::Pending);
        let s = p.to_status(true);
        assert_eq!(s.phase.as_deref(), Some("Pending"));
        let init = &s.init_container_statuses.as_ref().unwrap()[0];
        assert_eq!(
            init.state
                .as_ref()
                .unwrap()
                .waiting
                .as_ref()
                .unwrap()
                .reason
                .as_deref(),
            Some("ContainerCreating")
        );

        p.init[0].state = CState::Terminated {
            exit_code: 0,
            signal: None,
            reason: "Completed".into(),
            message: None,
            started_at: Some(ts(1)),
            finished_at: ts(2),
        };
        p.init[0].done = true;
        p.containers[0].state = CState::Running { started_at: ts(3) };
        p.containers[0].pid = Some(42);
        p.containers[0].started = true;
        p.refresh_conditions(ts(3));
        assert_eq!(p.phase(), Phase::Running);
        let s = p.to_status(true);
        let cond = |s: &PodStatus, t: &str| {
            s.conditions
                .as_ref()
                .unwrap()
                .iter()
                .find(|c| c.type_ == t)
                .cloned()
                .unwrap()
        };
        assert_eq!(cond(&s, "Initialized").status, "True");
        assert_eq!(cond(&s, "Ready").status, "False");
        assert_eq!(cond(&s, "Ready").last_transition_time, Some(Time(ts(1))));

        p.containers[0].ready = true;
        p.refresh_conditions(ts(5));
        let s = p.to_status(true);
        assert_eq!(cond(&s, "Ready").status, "True");
        assert_eq!(cond(&s, "Ready").last_transition_time, Some(Time(ts(5))));
        assert_eq!(
            cond(&s, "Initialized").last_transition_time,
            Some(Time(ts(3)))
        );
        let cs = &s.container_statuses.as_ref().unwrap()[0];
        assert_eq!(cs.container_id.as_deref(), Some("local://42"));
        assert!(cs.ready);
        assert_eq!(cs.started, Some(true));
        assert_eq!(s.pod_ips.as_ref().unwrap()[0].ip, "127.64.0.2");
        assert!(
            !s.conditions
                .unwrap()
                .iter()
                .any(|c| c.type_ == "PodScheduled")
        );
    }

    #[test]
    fn terminal_phases() {
        let mut p = pod();
        p.init.clear();
        p.containers[0].state = CState::Terminated {
            exit_code: 1,
            signal: None,
            reason: "Error".into(),
            message: None,
            started_at: Some(ts(1)),
            finished_at: ts(2),
        };
        assert_eq!(p.phase(), Phase::Running, "will restart");
        p.containers[0].done = true;
        assert_eq!(p.phase(), Phase::Failed);
        p.refresh_conditions(ts(3));
        let s = p.to_status(false);
        let ready = s
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(ready.reason.as_deref(), Some("PodCompleted"));
        assert!(
            s.conditions
                .unwrap()
                .iter()
                .any(|c| c.type_ == "PodScheduled")
        );
    }

    #[test]
    fn image_pull_failure_keeps_pod_pending() {
        let mut p = pod();
        p.init.clear();
        p.containers.push(ContainerRt::new("other", "foo/bar:1"));
        p.containers[0].state = CState::Running { started_at: ts(1) };
        p.containers[1].state = CState::waiting("ErrImagePull", Some("no".into()));
        assert_eq!(p.phase(), Phase::Pending);
        let json = serde_json::to_value(p.to_status(true)).unwrap();
        assert_eq!(
            json["containerStatuses"][1]["state"]["waiting"]["reason"],
            "ErrImagePull"
        );
        assert_eq!(
            json["containerStatuses"][1]["lastState"],
            serde_json::json!({})
        );
    }
}
