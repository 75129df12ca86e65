//! Template revisions and the roll gate.
//!
//! The revision is a hash of the desired pod template (which names the config by its own
//! hash, see [`crate::configmap::config_key`]) and the rendered config, set on the template
//! as `valkey.rs/revision`. node-controller publishes it as `status.workload.desiredRevision`;
//! with `rolloutPolicy: Gated` the template is only applied once the parent copies that value
//! into `spec.allowedRevision`.
//!
//! Holding works because the config is keyed by hash in the ConfigMap: the held template keeps
//! pointing at its old config, so even a crash restart of a held pod starts the old config.

use crd_types::conditions::reasons::RollPending;
use crd_types::node::RolloutPolicy;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use sha2::{Digest, Sha256};

use crate::meta::REVISION_ANNOTATION;

/// Length of a revision: 40 bits is plenty to tell one node's templates apart.
pub const REVISION_LEN: usize = 10;

/// The first [`REVISION_LEN`] hex digits of the SHA-256 of `bytes`.
pub fn short_hash(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut hex = String::with_capacity(64);
    for b in digest {
        hex.push_str(&format!("{b:02x}"));
    }
    hex.truncate(REVISION_LEN);
    hex
}

/// The revision of `template` with `config`. The revision annotation itself is left out, so
/// the result is the same before and after [`stamp`].
pub fn revision(template: &PodTemplateSpec, config: &str) -> String {
    let mut t = template.clone();
    if let Some(m) = t.metadata.as_mut() {
        if let Some(a) = m.annotations.as_mut() {
            a.remove(REVISION_ANNOTATION);
            if a.is_empty() {
                m.annotations = None;
            }
        }
        if *m == Default::default() {
            t.metadata = None;
        }
    }
    // Serializing typed k8s-openapi structs is deterministic: fixed field order, sorted maps.
    let mut bytes = serde_json::to_vec(&t).expect("a pod template serializes");
    bytes.push(0);
    bytes.extend_from_slice(config.as_bytes());
    short_hash(&bytes)
}

/// Sets the revision annotation on `template` and returns the revision.
pub fn stamp(template: &mut PodTemplateSpec, config: &str) -> String {
    let rev = revision(template, config);
    template
        .metadata
        .get_or_insert_with(Default::default)
        .annotations
        .get_or_insert_with(Default::default)
        .insert(REVISION_ANNOTATION.to_string(), rev.clone());
    rev
}

/// The revision annotation of a template (live or desired).
pub fn template_revision(template: &PodTemplateSpec) -> Option<&str> {
    template
        .metadata
        .as_ref()?
        .annotations
        .as_ref()?
        .get(REVISION_ANNOTATION)
        .map(String::as_str)
}

/// The live workload as far as the roll gate cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Live<'a> {
    /// No workload yet.
    Missing,
    /// A workload whose template carries this revision (None: made by something older).
    At(Option<&'a str>),
}

/// What to do with the workload's template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RollDecision {
    /// Apply the desired template (creating the workload, a no-op, or a roll).
    ApplyNow,
    /// Keep the live template as it is: the reconciler does not apply the workload (its other
    /// fields are constant) and reports `RollPending=True` with `reason` and `message`.
    HoldAt {
        /// The live template's revision.
        current: Option<String>,
        reason: RollPending,
        message: String,
    },
}

impl RollDecision {
    pub fn is_pending(&self) -> bool {
        matches!(self, RollDecision::HoldAt { .. })
    }
}

/// The roll gate. A missing workload is always created (there is no pod to protect), an
/// unchanged revision is always applied (a no-op), `Immediate` rolls at once and `Gated`
/// rolls only to exactly the revision the parent allowed: an `allowedRevision` naming some
/// other revision (an older desired one) does not let a different template through.
pub fn decide(
    live: Live<'_>,
    desired: &str,
    policy: RolloutPolicy,
    allowed: Option<&str>,
) -> RollDecision {
    let current = match live {
        Live::Missing => return RollDecision::ApplyNow,
        Live::At(rev) => rev,
    };
    if current == Some(desired) || policy == RolloutPolicy::Immediate || allowed == Some(desired) {
        return RollDecision::ApplyNow;
    }
    let message = format!(
        "template revision {desired} waits for spec.allowedRevision (now {}); the pod keeps revision {}",
        allowed.unwrap_or("unset"),
        current.unwrap_or("unknown"),
    );
    RollDecision::HoldAt {
        current: current.map(str::to_string),
        reason: RollPending::WaitingForAllowedRevision,
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use RolloutPolicy::{Gated, Immediate};
    use k8s_openapi::api::core::v1::{Container, PodSpec};

    fn template(image: &str) -> PodTemplateSpec {
        PodTemplateSpec {
            metadata: None,
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "valkey".into(),
                    image: Some(image.into()),
                    ..Default::default()
                }],
                ..Default::default()
            }),
        }
    }

    #[test]
    fn revision_is_stable_and_short() {
        let t = template("valkey/valkey:8.1");
        let r = revision(&t, "port 6379\n");
        assert_eq!(r.len(), REVISION_LEN);
        assert!(r.chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(r, revision(&t.clone(), "port 6379\n"));
    }

    #[test]
    fn revision_follows_template_and_config() {
        let t = template("valkey/valkey:8.1");
        let r = revision(&t, "a");
        assert_ne!(r, revision(&template("valkey/valkey:8.0"), "a"));
        assert_ne!(r, revision(&t, "b"));
    }

    #[test]
    fn stamping_does_not_change_the_revision() {
        let mut t = template("valkey/valkey:8.1");
        let before = revision(&t, "x");
        let stamped = stamp(&mut t, "x");
        assert_eq!(before, stamped);
        assert_eq!(template_revision(&t), Some(stamped.as_str()));
        assert_eq!(
            revision(&t, "x"),
            stamped,
            "stamped template hashes the same"
        );
        assert_eq!(stamp(&mut t, "x"), stamped, "restamping is idempotent");
    }

    #[test]
    fn short_hash_is_sha256() {
        // sha256("") = e3b0c44298fc1c14...
        assert_eq!(short_hash(b""), "e3b0c44298");
    }

    #[test]
    fn missing_workload_is_always_created() {
        for policy in [Immediate, Gated] {
            assert_eq!(
                decide(Live::Missing, "new", policy, None),
                RollDecision::ApplyNow
            );
        }
    }

    #[test]
    fn immediate_rolls_at_once() {
        assert_eq!(
            decide(Live::At(Some("old")), "new", Immediate, None),
            RollDecision::ApplyNow
        );
        assert_eq!(
            decide(Live::At(None), "new", Immediate, Some("other")),
            RollDecision::ApplyNow
        );
    }

    #[test]
    fn gated_waits_for_exactly_the_desired_revision() {
        assert_eq!(
            decide(Live::At(Some("old")), "new", Gated, Some("new")),
            RollDecision::ApplyNow
        );
        for allowed in [None, Some("old"), Some("older")] {
            let d = decide(Live::At(Some("old")), "new", Gated, allowed);
            assert!(d.is_pending(), "{allowed:?}");
            let RollDecision::HoldAt {
                current,
                reason,
                message,
            } = d
            else {
                unreachable!()
            };
            assert_eq!(current.as_deref(), Some("old"));
            assert_eq!(reason, RollPending::WaitingForAllowedRevision);
            assert!(message.contains("new"), "{message}");
        }
    }

    #[test]
    fn gated_without_a_change_applies() {
        assert_eq!(
            decide(Live::At(Some("same")), "same", Gated, None),
            RollDecision::ApplyNow
        );
    }

    #[test]
    fn gated_with_an_unknown_live_revision_holds() {
        let d = decide(Live::At(None), "new", Gated, None);
        assert!(matches!(d, RollDecision::HoldAt { current: None, .. }));
    }
}
