//! `spec.users` for one topology (see [`topology_controller::shared::users`]): reads each user's
//! password Secret (generating the absent ones), writes the `<topology>-users` Secret the
//! members start with, then brings every answering data node's ACL to it. The Secret is
//! written before any member changes, so a member restarting meanwhile starts with the
//! users it is about to be given.

use std::fmt::Debug;
use std::time::Duration;

use crd_types::conditions::ConditionSpec;
use crd_types::conditions::reasons::UsersReady;
use crd_types::names;
use crd_types::users::{USERS_KEY, User};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kube::{Api, Resource, ResourceExt};
use operator_runtime::{ApiResultExt, Context, EventReason, ObjectName, Op, apply};
use topology_controller::shared::acl::sha256_hex;
use topology_controller::shared::auth;
use topology_controller::shared::users::report::{applied_note, condition, is_news};
use topology_controller::shared::users::{self, Checks, Member, Wanted, parse_file, render_file};

use crate::driver::shared::error::Error;
use crate::driver::shared::secrets;
use crate::driver::shared::valkey::Conn;

/// What one pass found: the `UsersReady` condition, and the Events worth publishing (a
/// refusal only when the condition's message changes, so a standing problem is told once).
struct Outcome {
    condition: ConditionSpec,
    /// Users set or deleted on members.
    applied: Option<String>,
    /// Why some user is not as the spec says, when that is news.
    refused: Option<String>,
}

/// What a pass over one topology's users needs besides the topology.
pub struct Pass<'a> {
    pub secrets: &'a Api<Secret>,
    /// The label naming the topology on its objects.
    pub label_key: &'a str,
    pub checks: &'a Checks,
    /// The topology's conditions as written.
    pub current: &'a [Condition],
    pub field_manager: &'a str,
}

/// The longest a pass over one topology's users may take: it runs before the topology's
/// step, which must not wait on users.
const PASS_LIMIT: Duration = Duration::from_secs(15);

impl Pass<'_> {
    /// Brings `users` of `topology` to its data nodes `members`, publishes the Events
    /// (`reasons`: applied, refused) and returns the `UsersReady` condition. Nothing fails
    /// the reconcile: an error is reported in the condition and the log, so failovers and
    /// rolls never wait on a user.
    pub async fn run<K, R>(
        &self,
        ctx: &Context,
        topology: &K,
        users: &[User],
        members: &[Member<'_, Conn>],
        (applied, refused): (R, R),
    ) -> ConditionSpec
    where
        K: Resource<DynamicType = ()> + Debug,
        R: EventReason,
    {
        let topology_name = topology.name_any();
        let outcome = tokio::time::timeout(PASS_LIMIT, self.outcome(topology, users, members));
        let outcome = match outcome.await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(e)) => {
                let note = operator_runtime::error_chain(&e);
                tracing::warn!(topology = %topology_name, error = %note, "users not applied");
                return ConditionSpec::new(UsersReady::UsersApplying, false, note);
            }
            Err(_) => {
                let note = format!("the users were not all applied within {PASS_LIMIT:?}");
                tracing::warn!(topology = %topology_name, "{note}");
                return ConditionSpec::new(UsersReady::UsersApplying, false, note);
            }
        };
        let events = [(applied, outcome.applied), (refused, outcome.refused)];
        for (reason, note) in events {
            let Some(note) = note else { continue };
            if !reason.is_warning() {
                tracing::info!(topology = %topology_name, %note, "users applied");
            }
            ctx.events.publish(topology, reason, note, None).await;
        }
        outcome.condition
    }

    async fn outcome<K>(
        &self,
        topology: &K,
        users: &[User],
        members: &[Member<'_, Conn>],
    ) -> Result<Outcome, Error>
    where
        K: Resource<DynamicType = ()> + Debug,
    {
        let name = topology.name_any();
        let ns = topology.namespace().unwrap_or_default();
        let secret_name = names::users_secret_name(&name);
        let live = self
            .secrets
            .get_opt(&secret_name)
            .await
            .on(Op::Read, ObjectName::new::<Secret>(&ns, &secret_name))?;
        if let Some(why) = live
            .as_ref()
            .and_then(|s| auth::not_written_for(s, topology))
        {
            // Never taken over: applying would make the topology its owner, and its deletion
            // would delete someone else's Secret.
            let condition =
                ConditionSpec::new(UsersReady::UsersSecretTaken, false, why.to_string());
            let refused = is_news(self.current, &condition).then(|| condition.message().into());
            return Ok(Outcome {
                condition,
                applied: None,
                refused,
            });
        }
        // Admission refuses the operator's own names; one stored before it did is left out.
        let users: Vec<User> = users
            .iter()
            .filter(|u| !users::reserved(&u.name))
            .cloned()
            .collect();
        let users = users.as_slice();
        let mut hashes = Vec::with_capacity(users.len());
        for user in users {
            let wanted = auth::user_secret(&name, user);
            // Generated ones are created whenever absent: deleting one gives the user a new
            // password, which rotates like any other change.
            let password =
                secrets::read(self.secrets, topology, self.label_key, &wanted, false).await?;
            hashes.push(password.map(|p| sha256_hex(p.as_bytes())));
        }
        let wanted: Vec<Wanted> = users
            .iter()
            .zip(hashes)
            .map(|(user, password_hash)| Wanted {
                user,
                password_hash,
            })
            .collect();
        let live_text = live
            .as_ref()
            .and_then(|s| s.data.as_ref()?.get(USERS_KEY))
            .map(|v| String::from_utf8_lossy(&v.0).into_owned());
        let previous = live_text.as_deref().map(parse_file).unwrap_or_default();

        let now = Timestamp::now();
        let prepared = users::prepare(self.checks, &wanted, &previous, members, now).await;
        let text = render_file(&prepared.file);
        if live_text.as_deref() != Some(text.as_str()) {
            let secret =
                auth::owned_secret(topology, self.label_key, &secret_name, USERS_KEY, &text);
            apply::apply(self.secrets, &secret_name, &secret, self.field_manager)
                .await
                .on(Op::Apply, ObjectName::new::<Secret>(&ns, &secret_name))?;
        }
        let applied = users::apply_live(&prepared, members).await;
        let condition = condition(&prepared, &applied, members.len());
        let refused = (!prepared.problems.is_empty() && is_news(self.current, &condition))
            .then(|| condition.message().to_string());
        Ok(Outcome {
            applied: applied_note(&applied),
            condition,
            refused,
        })
    }
}
