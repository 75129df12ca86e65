//! One reconcile of any topology kind, as typed stages, each taking the one before:
//!
//! 1. [`stages::fetch`]: the topology and the ValkeyNodes labelled as its members; a paused
//!    topology stops here ([`stages::report_paused`]);
//! 2. [`Kind::prepare`]: its Secrets read, its TLS, members and owned objects applied
//!    ([`Prepared`]);
//! 3. [`Kind::observe`]: every member asked what it sees ([`Seen`], with the connections,
//!    closed here in one place whatever happens after);
//! 4. [`Kind::credentials`]: the passes over users, passwords and certificates
//!    ([`Credentials`]);
//! 5. [`Kind::decide`] (pure): the planner's one next step and the status that says so;
//! 6. [`Kind::carry_out`]: status written first, the step run, its Events published; when to
//!    look again.
//!
//! A kind says only what is its own; what every kind does is in [`stages`] and
//! [`crate::driver::shared::credentials`].

use std::future::Future;
use std::sync::Arc;

use kube::ResourceExt;
use kube::runtime::controller::Action;
use operator_runtime::controller::ReconcileContext;

use crate::driver::shared::error::Error;
use crate::driver::shared::stages::{self, Apis, Common, Credentials, Live, Prepared, Seen};
use crate::driver::shared::topology::Topology;

/// A reconcile's context for kind `K`.
pub type Ctx<K> = ReconcileContext<<K as Kind>::Shared>;

/// A topology kind's own stages.
pub trait Kind: Topology {
    /// What all its reconciles share: [`Common`], and the kind's own.
    type Shared: Send + Sync + 'static;
    /// Its passwords as read: the data nodes' and the operator's, and any of its own.
    type Passwords: Send + Sync;
    /// What its members answered.
    type Observed: Send + Sync;
    /// Its planner's step and the status that says so.
    type Decided: Send;

    fn common(shared: &Self::Shared) -> &Common;

    /// Forgets what the kind's own context keeps of a topology that is gone.
    fn forget(shared: &Self::Shared, namespace: &str, name: &str);

    fn prepare(
        ctx: &Ctx<Self>,
        apis: &Apis<Self>,
        live: Live<Self>,
    ) -> impl Future<Output = Result<Prepared<Self, Self::Passwords>, Error>> + Send;

    fn observe(
        ctx: &Ctx<Self>,
        apis: &Apis<Self>,
        prepared: Prepared<Self, Self::Passwords>,
    ) -> impl Future<Output = Seen<Self, Self::Passwords, Self::Observed>> + Send;

    fn credentials(
        ctx: &Ctx<Self>,
        apis: &Apis<Self>,
        seen: &Seen<Self, Self::Passwords, Self::Observed>,
    ) -> impl Future<Output = Credentials> + Send;

    fn decide(
        ctx: &Ctx<Self>,
        apis: &Apis<Self>,
        seen: &Seen<Self, Self::Passwords, Self::Observed>,
        credentials: &Credentials,
    ) -> Self::Decided;

    fn carry_out(
        ctx: &Ctx<Self>,
        apis: &Apis<Self>,
        seen: &Seen<Self, Self::Passwords, Self::Observed>,
        credentials: &Credentials,
        decided: Self::Decided,
    ) -> impl Future<Output = Result<Action, Error>> + Send;
}

/// One reconcile of a topology of kind `K` (see the module's stages).
pub async fn reconcile<K: Kind>(cached: Arc<K>, ctx: Arc<Ctx<K>>) -> Result<Action, Error> {
    let apis = Apis::of(&ctx.runtime, cached.as_ref())?;
    let name = cached.name_any();
    let Some(live) = stages::fetch(&apis, &name).await? else {
        K::common(&ctx.data).forget(&apis.namespace, &name);
        K::forget(&ctx.data, &apis.namespace, &name);
        return Ok(Action::await_change());
    };
    if live.topology.paused() {
        stages::report_paused(&apis, &live.topology).await?;
        return Ok(Action::await_change());
    }
    let prepared = K::prepare(&ctx, &apis, live).await?;
    let seen = K::observe(&ctx, &apis, prepared).await;
    let credentials = K::credentials(&ctx, &apis, &seen).await;
    let decided = K::decide(&ctx, &apis, &seen, &credentials);
    let outcome = K::carry_out(&ctx, &apis, &seen, &credentials, decided).await;
    seen.connections.close().await;
    outcome
}
