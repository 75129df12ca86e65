//! The default user's password of one topology, rotated live on its data nodes, and a
//! ValkeyReplication's sentinels' own (see [`topology_controller::shared::default_password`]): a
//! pass per reconcile and kind of member, before the step, whose outcome is recorded in
//! `status.passwordRotations` and told in Events. Nothing fails the reconcile: failovers
//! and rolls never wait on a password.

use std::time::Duration;

use crd_types::rotation::{PasswordRotation, RotatedPassword};
use crd_types::template::SecretKeyRef;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use operator_runtime::{Context, EventReason};
use topology_controller::shared::auth::PasswordError;
use topology_controller::shared::default_password::{self, Facts, Member, Outcome, RequirePass};
use topology_controller::shared::events::TopologyEvent;
use topology_controller::shared::users::AclMember;

use crate::driver::shared::topology::Topology;

/// The longest a pass may take: it runs before the topology's step.
const PASS_LIMIT: Duration = Duration::from_secs(15);

/// Whose default password a pass rotates.
#[derive(Clone, Copy)]
pub struct Whose {
    /// The status entry's `user`.
    pub key: RotatedPassword,
    /// How Events and logs name the password.
    pub what: &'static str,
}

/// The data nodes' default password.
pub const DATA_NODES: Whose = Whose {
    key: RotatedPassword::DataNodesDefault,
    what: "default password",
};

/// A ValkeyReplication's sentinels' password.
pub const SENTINELS: Whose = Whose {
    key: RotatedPassword::SentinelsDefault,
    what: "sentinels' password",
};

/// A default password of a topology, as the reconcile read it.
pub struct Password<'a> {
    /// `<name>/<resourceVersion>` of the Secret it was read from, if there was one.
    pub version: Option<&'a str>,
    pub reference: &'a SecretKeyRef,
    /// The password, or why it cannot be read.
    pub value: &'a Result<String, PasswordError>,
}

/// Brings `whose` `password` to `members` of `topology` (its data nodes, or its
/// sentinels); returns what to record now for `whose` in its status.
pub async fn run<T, V>(
    ctx: &Context,
    topology: &T,
    whose: Whose,
    password: Password<'_>,
    members: &[Member<'_, V>],
) -> Vec<PasswordRotation>
where
    T: Topology,
    V: AclMember + RequirePass,
{
    let recorded = topology.recorded_rotations();
    let auth = topology.auth();
    let name = topology.name_any();
    let what = whose.what;
    let kept = || {
        recorded
            .iter()
            .filter(|r| r.user == whose.key)
            .cloned()
            .collect()
    };
    // Unreadable: members would not start either, which the topology's conditions say.
    let Ok(value) = password.value else {
        return kept();
    };
    if !default_password::startable(value) {
        let note = format!(
            "the {what} in Secret {} key {} is '-' or has a line break, which a member \
             refuses at start: it is not rotated in",
            password.reference.name, password.reference.key
        );
        ctx.events
            .publish(topology, TopologyEvent::DefaultPasswordRefused, note, None)
            .await;
        return kept();
    }
    let Some(secret_version) = password.version else {
        return kept();
    };
    let facts = Facts {
        recorded: recorded
            .iter()
            .find(|r| r.user == whose.key && r.secret_version == secret_version)
            .map(|r| r.since.0),
        overlap: default_password::overlap(auth),
        drop_allowed: true,
        now: k8s_openapi::jiff::Timestamp::now(),
    };
    let pass = default_password::rotate(value, members, facts);
    let Ok(outcome) = tokio::time::timeout(PASS_LIMIT, pass).await else {
        tracing::warn!(topology = %name, %what, "password pass took over {PASS_LIMIT:?}");
        return kept();
    };
    if !outcome.failed.is_empty() {
        tracing::warn!(topology = %name, %what, failed = ?outcome.failed, "password not changed everywhere");
    }
    tracing::debug!(topology = %name, %what, ?outcome, "password pass");
    for (reason, note) in notes(what, &outcome) {
        if !reason.is_warning() {
            tracing::info!(topology = %name, %note, "password rotation");
        }
        ctx.events.publish(topology, reason, note, None).await;
    }
    outcome
        .rotation
        .map(|r| PasswordRotation {
            user: whose.key,
            since: Time(r.since),
            previous_until: Time(r.previous_until),
            members_with_new: i32::try_from(r.members_with_new).unwrap_or(i32::MAX),
            members: i32::try_from(r.members).unwrap_or(i32::MAX),
            secret_version: secret_version.to_string(),
            held_back_by: outcome
                .silent
                .iter()
                .chain(&outcome.without_probe)
                .cloned()
                .collect(),
        })
        .into_iter()
        .collect()
}

/// The Events of a pass, with their notes.
fn notes(what: &str, outcome: &Outcome) -> Vec<(TopologyEvent, String)> {
    let mut notes = Vec::new();
    if !outcome.new_added.is_empty() {
        let until = outcome
            .rotation
            .as_ref()
            .map(|r| format!(" until {} at the earliest", r.previous_until))
            .unwrap_or_default();
        notes.push((
            TopologyEvent::DefaultPasswordAdded,
            format!(
                "the new {what} works on {}; the previous one still does{until}",
                outcome.new_added.join(", ")
            ),
        ));
    }
    if !outcome.previous_dropped.is_empty() {
        notes.push((
            TopologyEvent::PreviousPasswordDropped,
            format!(
                "only the new {what} works on {} now",
                outcome.previous_dropped.join(", ")
            ),
        ));
    }
    if !outcome.failed.is_empty() {
        let failed: Vec<String> = outcome
            .failed
            .iter()
            .map(|(member, answer)| format!("{member}: {answer}"))
            .collect();
        notes.push((
            TopologyEvent::DefaultPasswordRefused,
            format!("the {what} could not be changed on {}", failed.join("; ")),
        ));
    }
    notes
}

/// How soon to look again for the rotations under way: when the first previous password
/// may go (at least a second from now), so it goes then rather than at the idle look.
/// `None` when none is waiting only for time.
pub fn next_look(rotations: &[PasswordRotation]) -> Option<Duration> {
    let now = k8s_openapi::jiff::Timestamp::now();
    rotations
        .iter()
        // A held-back rotation waits for its members, whose changes wake the reconcile.
        .filter(|r| r.held_back_by.is_empty())
        .map(|r| {
            let left = r.previous_until.0.duration_since(now);
            Duration::try_from(left).unwrap_or_default()
        })
        .min()
        .map(|left| left.max(Duration::from_secs(1)))
}
