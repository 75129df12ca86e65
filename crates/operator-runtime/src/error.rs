//! One vocabulary for a failed API call: what the controller was doing ([`Op`]), to which
//! object ([`ObjectName`]) and why (the `kube::Error`). Every controller wraps its API calls
//! with [`ApiResultExt::on`], so messages and the failure metric's label read the same in
//! all of them.

use std::borrow::Cow;
use std::fmt;

use kube::Resource;

/// What the controller was doing with the API server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    Read,
    List,
    Apply,
    ApplyStatus,
    Create,
    Delete,
    Publish,
}

impl Op {
    /// How a message says it: "cannot <verb> <object>".
    fn verb(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::List => "list",
            Op::Apply => "apply",
            Op::ApplyStatus => "write the status of",
            Op::Create => "create",
            Op::Delete => "delete",
            Op::Publish => "publish an Event about",
        }
    }

    /// The first half of the metric label.
    fn label(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::List => "list",
            Op::Apply => "apply",
            Op::ApplyStatus => "apply_status",
            Op::Create => "create",
            Op::Delete => "delete",
            Op::Publish => "publish_event",
        }
    }
}

/// The object an API call was about. For a list, the name is what the list was for (the
/// parent whose members were listed, say).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectName {
    pub kind: Cow<'static, str>,
    pub namespace: Option<String>,
    pub name: String,
}

impl ObjectName {
    /// `K` named `name` in `namespace`.
    pub fn new<K: Resource<DynamicType = ()>>(namespace: &str, name: &str) -> Self {
        Self {
            kind: K::kind(&()),
            namespace: Some(namespace.to_string()),
            name: name.to_string(),
        }
    }

    /// The cluster-scoped `K` named `name`.
    pub fn cluster<K: Resource<DynamicType = ()>>(name: &str) -> Self {
        Self {
            kind: K::kind(&()),
            namespace: None,
            name: name.to_string(),
        }
    }

    /// Where `object` is.
    pub fn of<K: Resource<DynamicType = ()>>(object: &K) -> Self {
        let meta = object.meta();
        Self {
            kind: K::kind(&()),
            namespace: meta.namespace.clone(),
            name: meta.name.clone().unwrap_or_default(),
        }
    }
}

impl fmt::Display for ObjectName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(namespace) => write!(f, "{} {namespace}/{}", self.kind, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// An API call that failed.
#[derive(Debug, thiserror::Error)]
#[error("cannot {} {object}", .op.verb())]
pub struct ApiError {
    pub op: Op,
    pub object: ObjectName,
    #[source]
    pub source: Box<kube::Error>,
}

impl ApiError {
    /// The failure metric's label: operation and kind, e.g. `apply_statefulset`. Bounded:
    /// a controller touches a fixed set of kinds.
    pub fn metric_label(&self) -> String {
        format!("{}_{}", self.op.label(), self.object.kind.to_lowercase())
    }

    /// The API server answered with this HTTP status code (topology-controller's tests of its
    /// Kubernetes half tell a refusal from a conflict by it).
    pub fn status_code(&self) -> Option<u16> {
        match self.source.as_ref() {
            kube::Error::Api(status) => Some(status.code),
            _ => None,
        }
    }
}

/// `.on(op, object)` on the result of an API call.
pub trait ApiResultExt<T> {
    /// Names the call and its object, so the error says what failed where.
    fn on(self, op: Op, object: ObjectName) -> Result<T, ApiError>;
}

impl<T> ApiResultExt<T> for Result<T, kube::Error> {
    fn on(self, op: Op, object: ObjectName) -> Result<T, ApiError> {
        self.map_err(|source| ApiError {
            op,
            object,
            source: Box::new(source),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::StatefulSet;
    use k8s_openapi::api::storage::v1::StorageClass;

    fn failed(op: Op, object: ObjectName) -> ApiError {
        Err::<(), _>(kube::Error::LinesCodecMaxLineLengthExceeded)
            .on(op, object)
            .unwrap_err()
    }

    #[test]
    fn messages_name_the_call_and_the_object() {
        let e = failed(Op::Apply, ObjectName::new::<StatefulSet>("prod", "cache"));
        assert_eq!(e.to_string(), "cannot apply StatefulSet prod/cache");
        assert_eq!(e.metric_label(), "apply_statefulset");
        let e = failed(Op::Read, ObjectName::cluster::<StorageClass>("fast"));
        assert_eq!(e.to_string(), "cannot read StorageClass fast");
        assert_eq!(e.metric_label(), "read_storageclass");
        let e = failed(
            Op::ApplyStatus,
            ObjectName::new::<StatefulSet>("prod", "cache"),
        );
        assert_eq!(
            e.to_string(),
            "cannot write the status of StatefulSet prod/cache"
        );
        assert_eq!(e.metric_label(), "apply_status_statefulset");
        assert_eq!(e.status_code(), None);
    }

    #[test]
    fn an_object_names_itself() {
        let mut sts = StatefulSet::default();
        sts.metadata.name = Some("cache".into());
        sts.metadata.namespace = Some("prod".into());
        assert_eq!(ObjectName::of(&sts).to_string(), "StatefulSet prod/cache");
    }
}
