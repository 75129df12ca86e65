//! Wakes the groups' reconciles the moment one of their sentinels announces a new primary
//! (`+switch-master` on Sentinel's pub/sub), so the read-write Service's role label and
//! status follow a failover within a reconcile, not at the next idle poll. (kube-runtime's
//! per-object trigger is behind an unstable feature; waking every group is cheap, as
//! failovers are rare.) One subscription
//! per sentinel, each reconnecting by itself; [`SwitchWatch::follow`] (called by every
//! reconcile with the sentinels' addresses) replaces them when the sentinels change.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use fred::prelude::{ClientLike, ConnectionConfig, EventInterface, PubsubInterface};
use futures::Stream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use topology_controller::replication::SENTINEL_PORT;

use crate::driver::shared::valkey::Login;

/// Sentinel's channel for a primary that moved: `<name> <old ip> <old port> <new ip> <new
/// port>`.
const SWITCH_CHANNEL: &str = "+switch-master";
/// Pause between two attempts to (re)subscribe to one sentinel.
const RETRY: Duration = Duration::from_secs(1);

/// The subscriptions of every followed group.
pub struct SwitchWatch {
    trigger: mpsc::UnboundedSender<()>,
    followed: Mutex<HashMap<(String, String), Followed>>,
}

/// One group's subscriptions, and what they were made for.
struct Followed {
    sentinels: Vec<String>,
    login: Login,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Followed {
    fn drop(&mut self) {
        self.tasks.iter().for_each(JoinHandle::abort);
    }
}

impl SwitchWatch {
    /// The watch, and the stream of wake-ups (for `Controller::reconcile_all_on`).
    pub fn new() -> (Self, impl Stream<Item = ()> + Send + Sync + 'static) {
        let (trigger, mut wakes) = mpsc::unbounded_channel();
        let watch = Self {
            trigger,
            followed: Mutex::default(),
        };
        (
            watch,
            futures::stream::poll_fn(move |cx| wakes.poll_recv(cx)),
        )
    }

    /// Subscribes to the `sentinels` (announce addresses) of group `namespace/name`, unless
    /// already subscribed to exactly these with this login.
    pub fn follow(&self, namespace: &str, name: &str, mut sentinels: Vec<String>, login: &Login) {
        sentinels.sort();
        let key = (namespace.to_string(), name.to_string());
        let mut followed = self.followed.lock().unwrap_or_else(|e| e.into_inner());
        if followed
            .get(&key)
            .is_some_and(|f| f.sentinels == sentinels && f.login.same_as(login))
        {
            return;
        }
        let tasks = sentinels
            .iter()
            .map(|ip| {
                tokio::spawn(listen(
                    ip.clone(),
                    login.clone(),
                    name.to_string(),
                    self.trigger.clone(),
                ))
            })
            .collect();
        followed.insert(
            key,
            Followed {
                sentinels,
                login: login.clone(),
                tasks,
            },
        );
    }

    /// Stops following a group that is gone.
    pub fn forget(&self, namespace: &str, name: &str) {
        self.followed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(namespace.to_string(), name.to_string()));
    }
}

/// Subscribes to one sentinel's `+switch-master` for ever, reconnecting after any failure;
/// a message about `name` wakes its reconcile.
async fn listen(ip: String, login: Login, name: String, trigger: mpsc::UnboundedSender<()>) {
    loop {
        let config = login.config(&ip, SENTINEL_PORT);
        let connection = ConnectionConfig {
            connection_timeout: Duration::from_secs(5),
            max_command_attempts: 1,
            ..Default::default()
        };
        let client = fred::prelude::Client::new(config, None, Some(connection), None);
        let mut messages = client.message_rx();
        // fred's connection task holds the client too: aborted when this task is (the
        // sentinels changed, the group is gone), or the socket would stay open.
        let mut task = None;
        let subscribed = async {
            task = Some(AbortOnDrop(client.init().await?));
            client.subscribe(SWITCH_CHANNEL).await
        };
        match subscribed.await {
            Ok(()) => loop {
                tokio::select! {
                    message = messages.recv() => match message {
                        Ok(m) => {
                            let text = m.value.as_string().unwrap_or_default();
                            if text.split(' ').next() == Some(name.as_str()) {
                                tracing::info!(sentinel = %ip, switch = %text, "sentinel announces a new primary");
                                if trigger.send(()).is_err() {
                                    return; // the controller is gone
                                }
                            }
                        }
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                            let _ = trigger.send(());
                        }
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                    },
                    () = tokio::time::sleep(RETRY) => {
                        if !client.is_connected() {
                            break;
                        }
                    }
                }
            },
            Err(e) => {
                tracing::debug!(sentinel = %ip, error = %e, "cannot subscribe to the sentinel")
            }
        }
        let _ = client.quit().await;
        drop(task);
        tokio::time::sleep(RETRY).await;
    }
}

/// Aborts fred's connection task when dropped.
struct AbortOnDrop(fred::types::ConnectHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
