//! What a reconcile read about one ValkeyNode: the input of [`crate::plan`] and
//! [`crate::report`]. The binary's fetch stage fills it; nothing here reads the API.

use crd_types::ValkeyNode;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod};

use crate::status;
use crate::workload::Workload;

/// The node and every object it owns, as just read.
#[derive(Debug, Clone)]
pub struct Live {
    /// The node, read again rather than taken from the watch cache: the cache may lag behind
    /// the status this controller (or service-controller, with the ClusterIP) applied a
    /// moment ago.
    pub node: ValkeyNode,
    /// `<node>-config`.
    pub config_map: Option<ConfigMap>,
    /// `<node>-data`; `None` without persistence or before it is created.
    pub claim: Option<PersistentVolumeClaim>,
    /// The workload of the kind the spec asks for.
    pub workload: Option<Workload>,
    /// Every pod labelled `valkey.rs/node=<node>`: the current one, and any still terminating.
    pub pods: Vec<Pod>,
    /// The StorageClass of a claim that is not Bound does not exist (only looked up then,
    /// see [`crate::pvc::class_to_check`]).
    pub storage_class_missing: bool,
}

impl Live {
    /// The pod that is the node right now (see [`status::current_pod`]).
    pub fn current_pod(&self) -> Option<&Pod> {
        status::current_pod(&self.pods)
    }
}
