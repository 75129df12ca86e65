//! Kubernetes Events (events.k8s.io/v1) from every controller through one [`Publisher`] on
//! the shared [`Context`](crate::Context), with typed reasons: each controller declares its
//! reasons once with [`event_reasons!`](crate::event_reasons) and publishes them with
//! [`Publisher::publish`].
//!
//! A repeated Event (same object, reason, action and note) is folded into one Event with a
//! growing count, so a condition that keeps failing does not flood the namespace. kube's
//! Recorder folds by object, reason and action only and keeps the first note, so "grew 16Mi
//! to 32Mi" then "32Mi to 64Mi" would read as the first twice: an Event with a new note
//! therefore starts a new series.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource};

use crate::error::{ApiError, ApiResultExt, ObjectName, Op};
use crate::metrics::EventObject;

/// The events.k8s.io limit on a note.
const NOTE_LIMIT: usize = 1024;
/// How long a series stays open: kube's Recorder forgets an Event after 6 minutes too.
const SERIES_TTL: Duration = Duration::from_secs(360);

/// A controller's Event reason: CamelCase, and whether it reports a problem.
pub trait EventReason: Copy {
    fn as_str(self) -> &'static str;
    fn is_warning(self) -> bool;
}

/// Declares a controller's Event reasons as an enum implementing [`EventReason`]: each
/// variant is `Name: Normal` or `Name: Warning`, and its name is the reason.
///
/// ```
/// operator_runtime::event_reasons! {
///     /// Events about a ValkeyNode.
///     pub enum NodeEvent {
///         /// The StatefulSet or Deployment was created.
///         WorkloadCreated: Normal,
///         /// spec.config cannot be rendered.
///         ConfigInvalid: Warning,
///     }
/// }
/// use operator_runtime::events::EventReason;
/// assert_eq!(NodeEvent::ConfigInvalid.as_str(), "ConfigInvalid");
/// assert!(NodeEvent::ConfigInvalid.is_warning());
/// ```
#[macro_export]
macro_rules! event_reasons {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident: $type_:ident, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $name {
            /// Every reason, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
        }

        impl $crate::events::EventReason for $name {
            fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => stringify!($variant),)+
                }
            }

            fn is_warning(self) -> bool {
                match self {
                    $($name::$variant => $crate::event_reasons!(@warning $type_),)+
                }
            }
        }
    };
    (@warning Normal) => { false };
    (@warning Warning) => { true };
}

/// The reasons operator-runtime itself publishes, for any controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuntimeEvent {
    /// A reconcile returned an error; it is retried with a growing delay.
    ReconcileFailed,
    /// The object cannot be read as the controller's type; it is left alone until it changes.
    InvalidObject,
}

impl EventReason for RuntimeEvent {
    fn as_str(self) -> &'static str {
        match self {
            RuntimeEvent::ReconcileFailed => "ReconcileFailed",
            RuntimeEvent::InvalidObject => "InvalidObject",
        }
    }

    fn is_warning(self) -> bool {
        true
    }
}

/// Publishes Events as one controller (`reportingController`), from this pod
/// (`reportingInstance`: `POD_NAME`).
#[derive(Clone)]
pub struct Publisher {
    client: Client,
    reporter: Reporter,
    /// Where each published Event is counted, when set ([`Publisher::counted_in`]).
    metrics: Option<Arc<crate::Metrics>>,
    /// The open series: per (object, reason, action), its note and the Recorder that folds
    /// repeats of it.
    series: Arc<Mutex<HashMap<SeriesKey, Series>>>,
}

/// (object uid or kind/namespace/name, reason, action).
type SeriesKey = (String, &'static str, String);

struct Series {
    note: String,
    recorder: Recorder,
    last: Instant,
}

impl Publisher {
    pub fn new(client: Client, controller: &str) -> Self {
        let reporter = Reporter {
            controller: controller.into(),
            instance: std::env::var("POD_NAME").ok().filter(|n| !n.is_empty()),
        };
        Self {
            client,
            reporter,
            metrics: None,
            series: Arc::default(),
        }
    }

    /// Counts every Event it publishes in `metrics` (`valkey_operator_events_total`).
    pub fn counted_in(mut self, metrics: Arc<crate::Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Drops the Event counts of an object that is gone.
    pub fn forget<K: Resource<DynamicType = ()>>(&self, namespace: &str, name: &str) {
        if let Some(metrics) = &self.metrics {
            let kind = K::kind(&());
            let object = EventObject {
                namespace,
                kind: &kind,
                name,
            };
            metrics.forget_events_of(&self.reporter.controller, &object);
        }
    }

    /// The Recorder for this Event: the open series' when it carries the same note, else a
    /// fresh one, which creates a new Event (then `true`).
    fn recorder_for(&self, key: SeriesKey, note: &str) -> (Recorder, bool) {
        let mut series = self.series.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        series.retain(|_, s| now.duration_since(s.last) < SERIES_TTL);
        match series.get_mut(&key) {
            Some(open) if open.note == note => {
                open.last = now;
                (open.recorder.clone(), false)
            }
            _ => {
                let recorder = Recorder::new(self.client.clone(), self.reporter.clone());
                let opened = Series {
                    note: note.to_string(),
                    recorder: recorder.clone(),
                    last: now,
                };
                series.insert(key, opened);
                (recorder, true)
            }
        }
    }

    /// An Event about `object`, optionally naming a `related` object (the workload a roll
    /// touched, say). One policy everywhere: an Event that cannot be published is logged and
    /// the reconcile goes on. It tells what already happened; failing the reconcile for it
    /// would only redo work that succeeded.
    pub async fn publish<K, R>(
        &self,
        object: &K,
        reason: R,
        note: impl Into<String>,
        related: Option<ObjectReference>,
    ) where
        K: Resource<DynamicType = ()>,
        R: EventReason,
    {
        let said = reason.as_str();
        if let Err(error) = self
            .publish_as(object, reason, "Reconcile", note.into(), related)
            .await
        {
            tracing::warn!(object = %ObjectName::of(object), reason = said, %error, "Event not published");
        }
    }

    /// As [`publish`](Self::publish) with another `action`: the Recorder folds repeats by
    /// object, reason and action, so a distinct action keeps distinct failures apart.
    pub(crate) async fn publish_as<K, R>(
        &self,
        object: &K,
        reason: R,
        action: &str,
        note: String,
        related: Option<ObjectReference>,
    ) -> Result<(), ApiError>
    where
        K: Resource<DynamicType = ()>,
        R: EventReason,
    {
        let event = Event {
            type_: if reason.is_warning() {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.as_str().into(),
            note: Some(truncate(note)),
            action: action.into(),
            secondary: related,
        };
        let reference = object.object_ref(&());
        let about = reference.uid.clone().unwrap_or_else(|| {
            let namespace = reference.namespace.as_deref().unwrap_or_default();
            format!(
                "{}/{namespace}/{}",
                K::kind(&()),
                object.meta().name.as_deref().unwrap_or_default()
            )
        });
        if let Some(metrics) = &self.metrics {
            let kind = K::kind(&());
            let object = EventObject {
                namespace: reference.namespace.as_deref().unwrap_or_default(),
                kind: &kind,
                name: object.meta().name.as_deref().unwrap_or_default(),
            };
            metrics.event_published(&self.reporter.controller, &object, reason.as_str());
        }
        let note = event.note.as_deref().unwrap_or_default();
        let (recorder, _) = self.recorder_for((about, reason.as_str(), action.to_string()), note);
        recorder
            .publish(&event, &reference)
            .await
            .on(Op::Publish, ObjectName::of(object))
    }
}

/// `note` cut to what the API accepts, at a character boundary.
fn truncate(mut note: String) -> String {
    if note.len() > NOTE_LIMIT {
        let mut end = NOTE_LIMIT - 3;
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
        note.push_str("...");
    }
    note
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::event_reasons! {
        enum Sample {
            Done: Normal,
            Broken: Warning,
        }
    }

    #[test]
    fn declared_reasons_are_their_names_with_their_type() {
        assert_eq!(Sample::Done.as_str(), "Done");
        assert!(!Sample::Done.is_warning());
        assert!(Sample::Broken.is_warning());
        assert_eq!(Sample::ALL, &[Sample::Done, Sample::Broken]);
    }

    #[tokio::test]
    async fn a_repeated_note_continues_its_series_and_a_new_note_starts_one() {
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let publisher = Publisher::new(Client::try_from(config).unwrap(), "test");
        let key = || ("uid-1".to_string(), "Resized", "Reconcile".to_string());
        let opens = |key, note: &str| publisher.recorder_for(key, note).1;
        assert!(opens(key(), "16Mi to 32Mi"));
        assert!(
            !opens(key(), "16Mi to 32Mi"),
            "the same note folds into its series"
        );
        assert!(opens(key(), "32Mi to 64Mi"), "a new note is a new Event");
        let other = ("uid-2".to_string(), "Resized", "Reconcile".to_string());
        assert!(
            opens(other, "32Mi to 64Mi"),
            "another object has its own series"
        );
        assert_eq!(publisher.series.lock().unwrap().len(), 2);
    }

    #[test]
    fn long_notes_are_cut_at_a_character_boundary() {
        assert_eq!(truncate("short".into()), "short");
        let long = "é".repeat(800);
        let cut = truncate(long);
        assert!(cut.len() <= NOTE_LIMIT, "{}", cut.len());
        assert!(cut.ends_with("..."));
    }
}
