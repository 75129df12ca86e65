//! The password look: wakes the reconciles of one kind of topology within a `period` (10 s)
//! of a change of a topology's default password Secret (and a ValkeyReplication's
//! sentinels' password Secret), so a rotation (see
//! [`topology_controller::shared::default_password`]) starts at once rather than at the idle look
//! (300 s). The Secret is looked at, not watched: a watch would take list and watch on every
//! Secret of the namespace. One task per topology GETs its Secret from the API server's
//! cache (`resourceVersion=0`) and compares each password's SHA-256 with the last one seen;
//! nothing else, so an idle topology costs one cached read per period instead of a full look.
//! (A wake reconciles every topology of the kind, as the pulse's do: changes are rare.)

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use crd_types::template::SecretKeyRef;
use futures::Stream;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::GetParams;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use topology_controller::shared::acl::sha256_hex;

/// How often a followed Secret is read.
pub const PERIOD: Duration = topology_controller::shared::users::USERS_LOOK;

/// The looks of every followed topology of one kind.
pub struct PasswordLook {
    trigger: mpsc::UnboundedSender<()>,
    followed: Mutex<HashMap<(String, String), Followed>>,
}

/// One topology's look, and the Secrets it reads.
struct Followed {
    secrets: Vec<SecretKeyRef>,
    task: JoinHandle<()>,
}

impl Drop for Followed {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What a Secret's key held at one look: its SHA-256, or `None` when unreadable.
type Seen = Option<String>;

fn seen(secret: Option<&Secret>, key: &str) -> Seen {
    let value = secret?.data.as_ref()?.get(key)?;
    Some(sha256_hex(&value.0))
}

impl PasswordLook {
    /// The look, and the stream of wake-ups (for `Controller::reconcile_all_on`).
    pub fn new() -> (Self, impl Stream<Item = ()> + Send + Sync + 'static) {
        let (trigger, mut wakes) = mpsc::unbounded_channel();
        let look = Self {
            trigger,
            followed: Mutex::default(),
        };
        (
            look,
            futures::stream::poll_fn(move |cx| wakes.poll_recv(cx)),
        )
    }

    /// Follows the password Secrets of topology `namespace/name`, each with what the
    /// reconcile just read from it, unless already following those.
    pub fn follow(
        &self,
        secrets: &Api<Secret>,
        namespace: &str,
        name: &str,
        passwords: Vec<(SecretKeyRef, Option<&str>)>,
    ) {
        let key = (namespace.to_string(), name.to_string());
        let mut followed = self.followed.lock().unwrap_or_else(|e| e.into_inner());
        let refs: Vec<SecretKeyRef> = passwords.iter().map(|(r, _)| r.clone()).collect();
        if followed.get(&key).is_some_and(|f| f.secrets == refs) {
            return;
        }
        let first = passwords
            .into_iter()
            .map(|(r, p)| (r, p.map(|p| sha256_hex(p.as_bytes()))))
            .collect();
        let task = tokio::spawn(look(secrets.clone(), first, self.trigger.clone()));
        followed.insert(
            key,
            Followed {
                secrets: refs,
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

/// Reads each Secret of `followed` every [`PERIOD`], for ever; wakes the reconciles when
/// what one holds differs from the look before. A failed read is no change, so it wakes
/// nobody.
async fn look(
    secrets: Api<Secret>,
    mut followed: Vec<(SecretKeyRef, Seen)>,
    trigger: mpsc::UnboundedSender<()>,
) {
    let mut tick = tokio::time::interval(PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await; // the first tick is now: the reconcile has just read them
    loop {
        tick.tick().await;
        for (secret, last) in &mut followed {
            let read = secrets.get_with(&secret.name, &GetParams::any()).await;
            let now = match read {
                Ok(s) => seen(Some(&s), &secret.key),
                Err(kube::Error::Api(e)) if e.code == 404 => None,
                Err(e) => {
                    tracing::debug!(secret = %secret.name, error = %e, "password Secret not read");
                    continue;
                }
            };
            if now != *last {
                tracing::info!(secret = %secret.name, "a password Secret changed");
                if trigger.send(()).is_err() {
                    return; // the controller is gone
                }
                *last = now;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::ByteString;

    use super::*;

    #[test]
    fn what_is_seen_is_the_keys_hash_or_nothing() {
        let secret = Secret {
            data: Some(BTreeMap::from([(
                "password".to_string(),
                ByteString(b"s3cret".to_vec()),
            )])),
            ..Default::default()
        };
        assert_eq!(seen(Some(&secret), "password"), Some(sha256_hex("s3cret")));
        assert_eq!(seen(Some(&secret), "other"), None);
        assert_eq!(seen(None, "password"), None);
    }
}
