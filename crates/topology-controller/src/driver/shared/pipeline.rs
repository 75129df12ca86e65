//! One reconcile of any topology kind, as typed stages, each taking the one before:
//!
//! 1. [`stages::fetch`]: the topology and the ValkeyNodes labelled as its members; a paused
//!    topology stops here ([`stages::report_paused`]);
//! 2. [`prepare`]: its Secrets read ([`Kind::read_passwords`]) and followed, its TLS, members
//!    ([`Kind::apply_members`]) and owned objects ([`Kind::apply_owned`]) applied, the login
//!    ([`Prepared`]);
//! 3. [`Kind::observe`]: every member asked what it sees, the pulse following the data nodes
//!    ([`Seen`], with the connections, closed here in one place whatever happens after);
//! 4. [`Kind::credentials`]: the passes over users, passwords and certificates
//!    ([`Credentials`]);
//! 5. [`Kind::decide`] (pure): the planner's one next step and the status that says so, on
//!    the [`Grounds`] every kind reads the same way;
//! 6. [`Kind::carry_out`]: status written first, the step run, its Events published; when to
//!    look again.
//!
//! A kind says only what is its own; what every kind does is in [`stages`] and
//! [`crate::driver::shared::credentials`].

use std::error::Error as StdError;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crd_types::ValkeyNode;
use crd_types::template::SecretKeyRef;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use operator_runtime::controller::ReconcileContext;
use topology_controller::shared::acl::ReplicationPassword;
use topology_controller::shared::auth::{self, PasswordError};
use topology_controller::shared::connections::Connections;
use topology_controller::shared::guard::Holds;
use topology_controller::shared::tls::Client;

use crate::driver::shared::error::Error;
use crate::driver::shared::member_tls::{self, TlsUnusable};
use crate::driver::shared::stages::{self, Apis, Common, Credentials, Live};
use crate::driver::shared::topology::Topology;
use crate::driver::shared::valkey::Conn;
use crate::driver::shared::{pod_monitors, secrets};

/// A reconcile's context for kind `K`.
pub type Ctx<K> = ReconcileContext<<K as Kind>::Shared>;
/// Stage 2's output for kind `K`.
pub type Prepared<K> = stages::Prepared<K, <K as Kind>::Passwords>;
/// Stage 3's output for kind `K`.
pub type Seen<K> = stages::Seen<K, <K as Kind>::Passwords, <K as Kind>::Observed>;

/// A kind's passwords as the shared stages read them: the data nodes' and the operator's,
/// and any of its own.
pub trait KindPasswords:
    AsRef<secrets::Passwords> + AsMut<secrets::Passwords> + Send + Sync
{
    /// Why the passwords the members need to start cannot be read, if any cannot.
    fn start_problems(&self) -> Vec<&PasswordError>;
}

impl AsMut<secrets::Passwords> for secrets::Passwords {
    fn as_mut(&mut self) -> &mut secrets::Passwords {
        self
    }
}

/// A kind with no password of its own: its members need the default user's to start.
impl KindPasswords for secrets::Passwords {
    fn start_problems(&self) -> Vec<&PasswordError> {
        self.default.as_ref().err().into_iter().collect()
    }
}

/// What every kind's planner reads the same way besides its members' answers.
pub struct Grounds<'a> {
    pub holds: Holds<'a>,
    /// The `replication` user's password, with the previous one while a rotation lasts.
    pub replication_password: Option<ReplicationPassword>,
    /// The id of the switchover status says is finished.
    pub recorded_switchover: Option<&'a str>,
}

/// A topology kind's own stages.
pub trait Kind: Topology {
    /// What all its reconciles share: [`Common`], and the kind's own.
    type Shared: Send + Sync + 'static;
    type Passwords: KindPasswords;
    /// What its members answered.
    type Observed: Send + Sync;
    /// Its planner's step and the status that says so.
    type Decided: Send;

    fn common(shared: &Self::Shared) -> &Common;

    /// Forgets what the kind's own context keeps of a topology that is gone.
    fn forget(shared: &Self::Shared, namespace: &str, name: &str);

    /// Creates the missing generated Secrets and reads the passwords.
    fn read_passwords(
        apis: &Apis<Self>,
        live: &Live<Self>,
    ) -> impl Future<Output = Result<Self::Passwords, Error>> + Send;

    /// Its own password Secrets to follow, besides the default user's and the operator's.
    fn own_secrets<'a>(
        topology: &Self,
        passwords: &'a Self::Passwords,
    ) -> Vec<(SecretKeyRef, Option<&'a str>)>;

    /// Applies the members it wants ([`stages::apply_members`]); the members afterwards.
    fn apply_members(
        apis: &Apis<Self>,
        live: &Live<Self>,
        tls: Option<&Result<Client, TlsUnusable>>,
    ) -> impl Future<Output = Result<Vec<ValkeyNode>, Error>> + Send;

    /// Applies what it owns besides members (budgets, Services, NetworkPolicy); whether the
    /// policy was refused.
    fn apply_owned(
        ctx: &Ctx<Self>,
        apis: &Apis<Self>,
        topology: &Self,
        nodes: &[ValkeyNode],
    ) -> impl Future<Output = Result<bool, Error>> + Send;

    /// Asks every member; what they answered and the connections to them.
    fn observe(
        ctx: &Ctx<Self>,
        apis: &Apis<Self>,
        prepared: &Prepared<Self>,
    ) -> impl Future<Output = (Self::Observed, Connections<Conn>)> + Send;

    /// Where its data nodes are reached, for the pulse.
    fn data_addresses(observed: &Self::Observed) -> Vec<(String, u16)>;

    /// Members that answered but refused the operator's login.
    fn login_refused(observed: &Self::Observed) -> &[String];

    fn credentials(
        ctx: &Ctx<Self>,
        apis: &Apis<Self>,
        seen: &Seen<Self>,
    ) -> impl Future<Output = Credentials> + Send;

    fn decide(
        ctx: &Ctx<Self>,
        apis: &Apis<Self>,
        seen: &Seen<Self>,
        credentials: &Credentials,
        grounds: Grounds<'_>,
    ) -> Self::Decided;

    /// Carries out the decision; when to look again (`idle`: while idle and Ready).
    fn carry_out(
        ctx: &Ctx<Self>,
        apis: &Apis<Self>,
        seen: &Seen<Self>,
        credentials: &Credentials,
        decided: Self::Decided,
        idle: Duration,
    ) -> impl Future<Output = Result<Action, Error>> + Send;
}

/// One reconcile of a topology of kind `K` (see the module's stages).
pub async fn reconcile<K: Kind>(cached: Arc<K>, ctx: Arc<Ctx<K>>) -> Result<Action, Error> {
    let apis = Apis::of(&ctx.runtime, cached.as_ref())?;
    let name = cached.name_any();
    let Some(live) = stages::fetch(&apis, &name).await? else {
        K::common(&ctx.data).forget(K::KIND, &apis.namespace, &name);
        K::forget(&ctx.data, &apis.namespace, &name);
        ctx.runtime.events.forget::<K>(&apis.namespace, &name);
        return Ok(Action::await_change());
    };
    if live.topology.paused() {
        stages::report_paused(&apis, &live.topology).await?;
        return Ok(Action::await_change());
    }
    let prepared = prepare(&ctx, &apis, live).await?;
    let seen = observe(&ctx, &apis, prepared).await;
    let credentials = K::credentials(&ctx, &apis, &seen).await;
    let outcome = decide_and_carry_out(&ctx, &apis, &seen, &credentials).await;
    seen.connections.close().await;
    outcome
}

/// Passwords before members, so a member's pod finds its Secrets when it starts; members
/// only once their certificates can be issued; then what the kind owns besides.
pub async fn prepare<K: Kind>(
    ctx: &Ctx<K>,
    apis: &Apis<K>,
    live: Live<K>,
) -> Result<Prepared<K>, Error> {
    let topology = &live.topology;
    let name = topology.name_any();
    let mut passwords = K::read_passwords(apis, &live).await?;
    let (default_secret, operator_secret) = auth::topology_secrets(&name, topology.auth());
    let data = passwords.as_ref();
    let mut followed = vec![
        (default_secret.reference, data.default.as_deref().ok()),
        (operator_secret.reference, data.operator.as_deref().ok()),
    ];
    followed.extend(K::own_secrets(topology, &passwords));
    let look = &K::common(&ctx.data).password_look;
    look.follow(&apis.secrets, &apis.namespace, &name, followed);
    let certificates = &K::common(&ctx.data).certificates;
    let tls = stages::read_tls(&ctx.runtime, apis, &live, certificates).await?;
    let nodes = K::apply_members(apis, &live, tls.as_ref()).await?;
    let policy_refused = K::apply_owned(ctx, apis, &live.topology, &nodes).await?;
    let pod_monitor = pod_monitors::reconcile(&ctx.runtime, apis, &live.topology).await;
    let data = passwords.as_mut();
    let login = match tls {
        // Nothing is asked of the members: the guard says why.
        Some(Err(why)) => {
            data.tls_problem = Some(why);
            None
        }
        tls => {
            let client = tls.and_then(Result::ok);
            member_tls::login(&data.operator, data.operator_applied.as_ref(), client)
        }
    };
    Ok(Prepared {
        live,
        passwords,
        login,
        nodes,
        policy_refused,
        pod_monitor,
    })
}

/// Asks every member ([`Kind::observe`]); the pulse follows the data nodes.
async fn observe<K: Kind>(ctx: &Ctx<K>, apis: &Apis<K>, prepared: Prepared<K>) -> Seen<K> {
    let (observed, connections) = K::observe(ctx, apis, &prepared).await;
    if let Some(login) = &prepared.login {
        let name = prepared.live.topology.name_any();
        let addresses = K::data_addresses(&observed);
        let pulse = &K::common(&ctx.data).pulse;
        pulse.follow(&apis.namespace, &name, addresses, login);
    }
    stages::Seen {
        prepared,
        observed,
        connections,
    }
}

/// The kind's decision on the [`Grounds`] every kind shares, then carried out.
async fn decide_and_carry_out<K: Kind>(
    ctx: &Ctx<K>,
    apis: &Apis<K>,
    seen: &Seen<K>,
    credentials: &Credentials,
) -> Result<Action, Error> {
    let prepared = &seen.prepared;
    let (topology, passwords) = (&prepared.live.topology, prepared.passwords.as_ref());
    let refused: Vec<&str> = K::login_refused(&seen.observed)
        .iter()
        .map(String::as_str)
        .collect();
    let foreign = prepared.live.foreign_member();
    let start_problems = prepared.passwords.start_problems();
    let tls_problem = passwords.tls_problem.as_ref();
    let grounds = Grounds {
        holds: Holds {
            foreign_member: foreign.as_deref(),
            operator_password_problem: passwords.operator.as_ref().err(),
            tls_problem: tls_problem.map(|why| why as &dyn StdError),
            default_password_problems: &start_problems,
            login_refused: &refused,
        },
        replication_password: replication_password(passwords),
        recorded_switchover: topology.recorded_switchover(),
    };
    let decided = K::decide(ctx, apis, seen, credentials, grounds);
    // A PodMonitor not applied is looked at again like a refused policy: nothing watches
    // the CRD's installation or an RBAC fix.
    let monitor_not_applied = prepared.pod_monitor.as_ref().is_some_and(|c| !c.status());
    let idle = stages::idle_look(
        K::common(&ctx.data).idle_look,
        topology,
        prepared.policy_refused || monitor_not_applied,
        &credentials.rotations,
    );
    K::carry_out(ctx, apis, seen, credentials, decided, idle).await
}

/// The `replication` user's password: the operator's, and while a rotation lasts the one
/// members were last brought to.
fn replication_password(passwords: &secrets::Passwords) -> Option<ReplicationPassword> {
    let password = passwords.operator.as_deref().ok()?;
    let applied = passwords.operator_applied.as_ref();
    let previous = applied.map(|a| a.fallbacks(password)).unwrap_or_default();
    Some(ReplicationPassword::rotating_from(password, &previous))
}
