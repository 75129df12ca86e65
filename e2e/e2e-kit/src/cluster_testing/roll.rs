//! A watch over a roll through the members' roll gates.

use std::collections::BTreeMap;

use crd_types::ValkeyNode;
use crd_types::node::Role;
use kube::ResourceExt;

/// How a roll through the members' roll gates went, sampled from the ValkeyNodes.
///
/// A member's gate is open for the new template once `spec.allowedRevision` equals its
/// `status.workload.desiredRevision` and that differs from the revision it ran when the watch
/// began; it is rolling while its gate is open and it is not ready at that revision. Each
/// sample is one LIST, a single resourceVersion: the topology-controller opens a gate only
/// after it saw the previous member ready, so a consistent snapshot never shows that member
/// not ready next to the next open gate unless two really rolled at once.
#[derive(Debug, Default)]
pub struct RollWatch {
    /// Each member's revision when the watch began.
    initial: BTreeMap<String, Option<String>>,
    pub samples: usize,
    pub max_rolling: usize,
    /// The sample with the most members rolling.
    pub worst: Vec<String>,
    pub max_not_ready: usize,
    /// Members in the order their gate was first seen open, with the role
    /// `status.valkey.role` gave them in that sample.
    pub gate_order: Vec<(String, Option<Role>)>,
}

impl RollWatch {
    /// Starts from the members' current revisions.
    pub fn new(members: &[ValkeyNode]) -> Self {
        Self {
            initial: members
                .iter()
                .map(|n| {
                    let revision = n
                        .status
                        .as_ref()
                        .and_then(|s| s.workload.as_ref())
                        .and_then(|w| w.revision.clone());
                    (n.name_any(), revision)
                })
                .collect(),
            ..Default::default()
        }
    }

    /// The member's gate is open for a revision other than its initial one.
    pub fn gate_open(&self, node: &ValkeyNode) -> bool {
        let desired = node
            .status
            .as_ref()
            .and_then(|s| s.workload.as_ref())
            .and_then(|w| w.desired_revision.clone());
        desired.is_some()
            && node.spec.allowed_revision == desired
            && self.initial.get(&node.name_any()) != Some(&desired)
    }

    /// The member runs, ready, a revision other than its initial one, and it is the one
    /// the spec asks for.
    pub fn rolled(&self, node: &ValkeyNode) -> bool {
        let Some(w) = node.status.as_ref().and_then(|s| s.workload.as_ref()) else {
            return false;
        };
        w.ready
            && w.revision.is_some()
            && w.revision == w.desired_revision
            && self.initial.get(&node.name_any()) != Some(&w.revision)
    }

    /// Members whose pod is not ready.
    pub fn not_ready(members: &[ValkeyNode]) -> Vec<String> {
        members
            .iter()
            .filter(|n| {
                !n.status
                    .as_ref()
                    .and_then(|s| s.workload.as_ref())
                    .is_some_and(|w| w.ready)
            })
            .map(|n| n.name_any())
            .collect()
    }

    /// Records one snapshot of the members.
    pub fn sample(&mut self, members: &[ValkeyNode]) {
        self.samples += 1;
        let rolling: Vec<String> = members
            .iter()
            .filter(|n| self.initial.contains_key(&n.name_any()))
            .filter(|n| self.gate_open(n) && !self.rolled(n))
            .map(|n| n.name_any())
            .collect();
        if rolling.len() > self.max_rolling {
            self.max_rolling = rolling.len();
            self.worst = rolling;
        }
        self.max_not_ready = self.max_not_ready.max(Self::not_ready(members).len());
        for node in members {
            let name = node.name_any();
            if self.initial.contains_key(&name)
                && self.gate_open(node)
                && !self.gate_order.iter().any(|(n, _)| *n == name)
            {
                let role = node
                    .status
                    .as_ref()
                    .and_then(|s| s.valkey.as_ref())
                    .and_then(|v| v.role);
                self.gate_order.push((name, role));
            }
        }
    }

    /// Samples `members`; `Err` naming the gates opened so far until every member rolled.
    pub fn sample_until_rolled(&mut self, members: &[ValkeyNode]) -> Result<(), String> {
        self.sample(members);
        if self.all_rolled(members) {
            return Ok(());
        }
        let order: Vec<&str> = self.gate_order.iter().map(|(n, _)| n.as_str()).collect();
        Err(format!("rolled so far: {order:?}"))
    }

    /// Whether every watched member has rolled.
    pub fn all_rolled(&self, members: &[ValkeyNode]) -> bool {
        self.initial.keys().all(|name| {
            members
                .iter()
                .find(|n| n.name_any() == *name)
                .is_some_and(|n| self.rolled(n))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crd_types::node::{ValkeyNodeStatus, ValkeyStatus, WorkloadStatus};

    fn member(
        name: &str,
        revision: &str,
        desired: &str,
        allowed: Option<&str>,
        ready: bool,
    ) -> ValkeyNode {
        let mut node = ValkeyNode::new(name, Default::default());
        node.spec.allowed_revision = allowed.map(str::to_string);
        node.status = Some(ValkeyNodeStatus {
            workload: Some(WorkloadStatus {
                ready,
                revision: Some(revision.into()),
                desired_revision: Some(desired.into()),
                ..Default::default()
            }),
            valkey: Some(ValkeyStatus {
                role: Some(if name.ends_with("-0") {
                    Role::Primary
                } else {
                    Role::Replica
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        node
    }

    #[test]
    fn roll_watch_counts_members_rolling_at_once() {
        let before = [
            member("c-0-0", "a", "a", Some("a"), true),
            member("c-0-1", "a", "a", Some("a"), true),
        ];
        let mut watch = RollWatch::new(&before);
        // The template changed: both want b, no gate open yet.
        watch.sample(&[
            member("c-0-0", "a", "b", Some("a"), true),
            member("c-0-1", "a", "b", Some("a"), true),
        ]);
        assert_eq!((watch.max_rolling, watch.gate_order.len()), (0, 0));
        // The replica's gate opens, its pod restarts.
        watch.sample(&[
            member("c-0-0", "a", "b", Some("a"), true),
            member("c-0-1", "b", "b", Some("b"), false),
        ]);
        assert_eq!((watch.max_rolling, watch.max_not_ready), (1, 1));
        // Rolled; then the primary's turn.
        let done = [
            member("c-0-0", "b", "b", Some("b"), true),
            member("c-0-1", "b", "b", Some("b"), true),
        ];
        watch.sample(&[
            member("c-0-0", "a", "b", Some("b"), true),
            member("c-0-1", "b", "b", Some("b"), true),
        ]);
        watch.sample(&done);
        assert_eq!(watch.max_rolling, 1);
        assert!(watch.all_rolled(&done));
        assert_eq!(
            watch.gate_order,
            [
                ("c-0-1".to_string(), Some(Role::Replica)),
                ("c-0-0".to_string(), Some(Role::Primary))
            ]
        );
        // Two at once is seen.
        let mut watch = RollWatch::new(&before);
        watch.sample(&[
            member("c-0-0", "a", "b", Some("b"), true),
            member("c-0-1", "b", "b", Some("b"), false),
        ]);
        assert_eq!(watch.max_rolling, 2);
        assert!(!watch.all_rolled(&done[..1]));
    }
}
