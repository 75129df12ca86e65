//! The pulse: wakes the reconciles of one kind of topology (ValkeyClusters, or
//! ValkeyReplications) within about a second of any member's Valkey showing a change in
//! its [`Vitals`] (cluster state, failure flags, epoch, role, replication link) or falling
//! silent, so Ready follows Valkey without a full look every few seconds. Kubernetes changes
//! (pods, ValkeyNodes) arrive through the watches; the pulse covers what changes inside
//! Valkey only. One task per topology keeps one connection per member (a replication
//! group's data nodes; its sentinels announce failovers themselves, see
//! [`crate::driver::replication::SwitchWatch`]) and asks one or two small commands a second on it; nothing
//! is decided here, the reconcile looks for itself. (A wake reconciles every topology of the
//! kind: per-object triggers are behind an unstable kube-runtime feature, and changes are
//! rare.)

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use futures::Stream;
use futures::future::join_all;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use topology_controller::shared::connections::vitals;
use topology_controller::shared::vitals::Vitals;

use crate::driver::shared::valkey::{Conn, Login};

/// Which kind of topology a [`Pulse`] follows, and so what it asks each member.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    /// ValkeyCluster members: `CLUSTER INFO` and `INFO replication`.
    Cluster,
    /// ValkeyReplication data nodes: `INFO replication`.
    Replication,
}

/// The pulses of every followed topology of one kind. Each member is asked once a `period`
/// and has a period to answer: a change shows within two.
pub struct Pulse {
    kind: Kind,
    /// Zero: the pulse is off and follows nothing.
    period: Duration,
    trigger: mpsc::UnboundedSender<()>,
    followed: Mutex<HashMap<(String, String), Followed>>,
}

/// One topology's pulse, and the members and login it was started for.
struct Followed {
    members: Vec<(String, u16)>,
    login: Login,
    task: JoinHandle<()>,
}

impl Drop for Followed {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Pulse {
    /// The pulse, and the stream of wake-ups (for `Controller::reconcile_all_on`).
    pub fn new(
        kind: Kind,
        period: Duration,
    ) -> (Self, impl Stream<Item = ()> + Send + Sync + 'static) {
        let (trigger, mut wakes) = mpsc::unbounded_channel();
        let pulse = Self {
            kind,
            period,
            trigger,
            followed: Mutex::default(),
        };
        (
            pulse,
            futures::stream::poll_fn(move |cx| wakes.poll_recv(cx)),
        )
    }

    /// Follows topology `namespace/name`'s `members` (announce addresses), unless already
    /// following exactly these with this login.
    pub fn follow(
        &self,
        namespace: &str,
        name: &str,
        mut members: Vec<(String, u16)>,
        login: &Login,
    ) {
        if self.period.is_zero() {
            return;
        }
        members.sort();
        let key = (namespace.to_string(), name.to_string());
        let mut followed = self.followed.lock().unwrap_or_else(|e| e.into_inner());
        if followed
            .get(&key)
            .is_some_and(|f| f.members == members && f.login.same_as(login))
        {
            return;
        }
        let task = tokio::spawn(beat(
            self.kind,
            members.clone(),
            login.clone(),
            self.period,
            self.trigger.clone(),
        ));
        followed.insert(
            key,
            Followed {
                members,
                login: login.clone(),
                task,
            },
        );
    }

    /// Stops following a topology that is gone.
    pub fn forget(&self, namespace: &str, name: &str) {
        self.followed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(namespace.to_string(), name.to_string()));
    }
}

/// What one member showed at one beat: its vitals, or `None` when it did not answer in time.
type Sign = Option<Vitals>;

/// Asks every member each `period`, for ever; wakes the reconciles when any member's sign
/// differs from the beat before.
async fn beat(
    kind: Kind,
    members: Vec<(String, u16)>,
    login: Login,
    period: Duration,
    trigger: mpsc::UnboundedSender<()>,
) {
    let mut conns: Vec<Option<Conn>> = members.iter().map(|_| None).collect();
    let mut last: Option<Vec<Sign>> = None;
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let signs: Vec<Sign> = join_all(
            members
                .iter()
                .zip(conns.iter_mut())
                .map(|((ip, port), conn)| sign(kind, ip, *port, &login, period, conn)),
        )
        .await;
        let changed: Vec<String> = last
            .iter()
            .flat_map(|last| last.iter().zip(&signs).zip(&members))
            .filter(|((was, is), _)| was != is)
            .map(|((_, is), (ip, _))| match is {
                Some(_) => format!("{ip} changed"),
                None => format!("{ip} silent"),
            })
            .collect();
        if !changed.is_empty() {
            tracing::info!(?kind, ?changed, "members' vitals changed");
            if trigger.send(()).is_err() {
                return; // the controller is gone
            }
        }
        last = Some(signs);
    }
}

/// One member's sign, over `conn` (opened when missing, dropped after any failure so the
/// next beat starts afresh).
async fn sign(
    kind: Kind,
    ip: &str,
    port: u16,
    login: &Login,
    period: Duration,
    conn: &mut Option<Conn>,
) -> Sign {
    if conn.is_none() {
        *conn = Conn::connect_within(ip, port, login, period).await.ok();
    }
    let open = conn.as_ref()?;
    let cluster_member = matches!(kind, Kind::Cluster);
    match tokio::time::timeout(period, vitals(open, cluster_member)).await {
        Ok(Ok(vitals)) => Some(vitals),
        _ => {
            // Dropped (which closes it), not QUIT: a frozen server never answers.
            conn.take();
            None
        }
    }
}
