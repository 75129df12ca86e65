//! Kubernetes Events (events.k8s.io/v1) from every controller through one [`Publisher`] on
//! the shared [`Context`](crate::Context), with typed reasons: each controller declares its
//! reasons once with [`event_reasons!`](crate::event_reasons) and publishes them with
//! [`Publisher::publish`].
//!
//! The Recorder behind it folds a repeated Event (same object, reason and action) into one
//! Event with a growing count, so a condition that keeps failing does not flood the
//! namespace.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource};

use crate::error::{ApiError, ApiResultExt, ObjectName, Op};

/// The events.k8s.io limit on a note.
const NOTE_LIMIT: usize = 1024;

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
    recorder: Recorder,
}

impl Publisher {
    pub fn new(client: Client, controller: &str) -> Self {
        let reporter = Reporter {
            controller: controller.into(),
            instance: std::env::var("POD_NAME").ok().filter(|n| !n.is_empty()),
        };
        Self {
            recorder: Recorder::new(client, reporter),
        }
    }

    /// An Event about `object`, optionally naming a `related` object (the workload a roll
    /// touched, say).
    pub async fn publish<K, R>(
        &self,
        object: &K,
        reason: R,
        note: impl Into<String>,
        related: Option<ObjectReference>,
    ) -> Result<(), ApiError>
    where
        K: Resource<DynamicType = ()>,
        R: EventReason,
    {
        self.publish_as(object, reason, "Reconcile", note.into(), related)
            .await
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
        self.recorder
            .publish(&event, &object.object_ref(&()))
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

    #[test]
    fn long_notes_are_cut_at_a_character_boundary() {
        assert_eq!(truncate("short".into()), "short");
        let long = "é".repeat(800);
        let cut = truncate(long);
        assert!(cut.len() <= NOTE_LIMIT, "{}", cut.len());
        assert!(cut.ends_with("..."));
    }
}
