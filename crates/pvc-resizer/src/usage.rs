//! Volume usage: every interval, one `/stats/summary` call per Node that runs a ValkeyNode
//! with autoResize (not one per claim), kept in a [`Book`] that reconciles read. A node
//! whose usage moved by a whole percent, or whose Node became (un)readable, is woken.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crd_types::ValkeyNode;
use futures::StreamExt;
use futures::channel::mpsc::UnboundedSender;
use k8s_openapi::api::core::v1::Node;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use operator_runtime::Shutdown;
use operator_runtime::controller::Guarded;
use operator_runtime::scope::Scope;
use pvc_resizer::decide::Usage;
use pvc_resizer::stats::{self, VolumeUsage};

use crate::kubelet::Kubelets;
use crate::metrics::ResizerMetrics;

/// Kubelets asked at once.
const PARALLEL_READS: usize = 8;

type ClaimKey = (String, String);
type NodeRead = Result<HashMap<ClaimKey, VolumeUsage>, String>;
type NodeRef = ObjectRef<Guarded<ValkeyNode>>;
/// Per Kubernetes Node, the claims to read there and the ValkeyNode each belongs to.
type Wanted = BTreeMap<String, Vec<(ClaimKey, NodeRef)>>;

/// The last read of each Node.
#[derive(Default)]
pub struct Book {
    nodes: Mutex<HashMap<String, NodeRead>>,
}

impl Book {
    /// The usage of `namespace/claim`, whose pod runs on `node`.
    pub fn usage(&self, node: Option<&str>, namespace: &str, claim: &str) -> Usage {
        let nodes = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        view(
            node.and_then(|n| nodes.get(n).map(|r| (n, r))),
            namespace,
            claim,
        )
    }
}

fn view(read: Option<(&str, &NodeRead)>, namespace: &str, claim: &str) -> Usage {
    match read {
        None => Usage::Unread,
        Some((node, Err(error))) => Usage::Unreadable(format!(
            "cannot read the volume stats of Node {node}: {error}"
        )),
        Some((_, Ok(claims))) => claims
            .get(&(namespace.to_string(), claim.to_string()))
            .map_or(Usage::Unread, |u| Usage::Known(*u)),
    }
}

/// Whether a reconcile would see something new: usage by whole percent or capacity, or a
/// change between known, unknown and unreadable.
fn moved(before: &Usage, after: &Usage) -> bool {
    match (before, after) {
        (Usage::Known(a), Usage::Known(b)) => {
            a.used_percent() != b.used_percent() || a.capacity_bytes != b.capacity_bytes
        }
        (Usage::Unreadable(_), Usage::Unreadable(_)) | (Usage::Unread, Usage::Unread) => false,
        _ => true,
    }
}

/// Reads the kubelets until shutdown.
pub struct Reader {
    pub client: Client,
    pub kubelets: Kubelets,
    /// The controller's ValkeyNode store.
    pub nodes: Store<Guarded<ValkeyNode>>,
    pub book: Arc<Book>,
    pub metrics: ResizerMetrics,
    pub wake: UnboundedSender<NodeRef>,
    pub interval: Duration,
    /// Ready once the ValkeyNode store has listed.
    pub readiness: operator_runtime::Readiness,
    /// The watched namespaces: a kubelet's summary covers every pod of its Node, and the
    /// claims of other namespaces are dropped as read.
    pub scope: Scope,
}

impl Reader {
    pub async fn run(self, shutdown: Shutdown) {
        let (kube_nodes, writer) = reflector::store::<Node>();
        let watch = reflector::reflector(
            writer,
            watcher(
                Api::<Node>::all(self.client.clone()),
                watcher::Config::default(),
            ),
        )
        .default_backoff()
        .for_each(|_| futures::future::ready(()));
        let watching = tokio::spawn(watch);
        // The first round waits for both lists, so the first reconciles already see usage.
        while !self.readiness.is_ready() {
            tokio::select! {
                () = shutdown.wait() => return watching.abort(),
                () = tokio::time::sleep(Duration::from_millis(250)) => {}
            }
        }
        let _ = tokio::time::timeout(Duration::from_secs(10), kube_nodes.wait_until_ready()).await;
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = shutdown.wait() => break,
                _ = tick.tick() => {}
            }
            self.read_once(&kube_nodes).await;
        }
        watching.abort();
    }

    /// One round: every Node that runs a ValkeyNode with autoResize, read once.
    async fn read_once(&self, kube_nodes: &Store<Node>) {
        let wanted = wanted(&self.nodes.state());
        let reads = futures::stream::iter(wanted.keys().cloned())
            .map(|name| async move {
                let read = match kube_nodes.get(&ObjectRef::new(&name)) {
                    None => Err(format!("Node {name} does not exist")),
                    Some(node) => self.read(&node).await,
                };
                (name, read)
            })
            .buffer_unordered(PARALLEL_READS)
            .collect::<Vec<_>>()
            .await;
        let mut book = self.book.nodes.lock().unwrap_or_else(|e| e.into_inner());
        for (name, read) in reads {
            if let Err(error) = &read {
                tracing::warn!(node = %name, %error, "cannot read volume stats");
            }
            let before = book.insert(name.clone(), read);
            let after = book.get(&name);
            for (key, node_ref) in &wanted[&name] {
                let old = view(before.as_ref().map(|r| (name.as_str(), r)), &key.0, &key.1);
                let new = view(after.map(|r| (name.as_str(), r)), &key.0, &key.1);
                if moved(&old, &new) {
                    let _ = self.wake.unbounded_send(node_ref.clone());
                }
            }
        }
        book.retain(|name, _| wanted.contains_key(name));
    }

    async fn read(&self, node: &Node) -> NodeRead {
        self.metrics.stats_calls.inc();
        let read = match self.kubelets.summary(node).await {
            Ok(body) => stats::claim_usage(body.as_bytes())
                .map(|claims| {
                    claims
                        .into_iter()
                        .filter(|c| self.scope.includes(&c.namespace))
                        .map(|c| ((c.namespace, c.claim), c.usage))
                        .collect()
                })
                .map_err(|e| format!("unreadable /stats/summary: {e}")),
            Err(error) => Err(error),
        };
        if read.is_err() {
            self.metrics.stats_failures.inc();
        }
        read
    }
}

/// Per Kubernetes Node, the claims of ValkeyNodes with autoResize whose pod runs there.
fn wanted(nodes: &[Arc<Guarded<ValkeyNode>>]) -> Wanted {
    let mut wanted: BTreeMap<String, Vec<_>> = BTreeMap::new();
    for guarded in nodes {
        let Ok(node) = &guarded.0 else { continue };
        let auto_resize = node
            .spec
            .template
            .persistence
            .as_ref()
            .is_some_and(|p| p.auto_resize.is_some());
        let on = node
            .status
            .as_ref()
            .and_then(|s| s.workload.as_ref())
            .and_then(|w| w.node_name.clone());
        let (true, Some(on), Some(namespace)) = (auto_resize, on, node.namespace()) else {
            continue;
        };
        let name = node.name_any();
        let claim = crd_types::names::pvc_name(&name);
        wanted.entry(on).or_default().push((
            (namespace.clone(), claim),
            ObjectRef::new(&name).within(&namespace),
        ));
    }
    wanted
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(used: u64, capacity: u64) -> Usage {
        Usage::Known(VolumeUsage {
            used_bytes: used,
            capacity_bytes: capacity,
            available_bytes: capacity - used,
        })
    }

    #[test]
    fn only_a_whole_percent_or_a_new_kind_of_answer_wakes() {
        assert!(!moved(&known(100, 1000), &known(105, 1000)));
        assert!(moved(&known(100, 1000), &known(110, 1000)));
        assert!(moved(&known(100, 1000), &known(200, 2000)));
        assert!(moved(&Usage::Unread, &known(1, 10)));
        assert!(moved(&known(1, 10), &Usage::Unreadable("x".into())));
        assert!(!moved(
            &Usage::Unreadable("x".into()),
            &Usage::Unreadable("y".into())
        ));
        assert!(!moved(&Usage::Unread, &Usage::Unread));
    }

    #[test]
    fn the_book_answers_per_claim() {
        let book = Book::default();
        let claims = HashMap::from([(
            ("prod".to_string(), "a-data".to_string()),
            VolumeUsage {
                used_bytes: 1,
                capacity_bytes: 10,
                available_bytes: 9,
            },
        )]);
        book.nodes.lock().unwrap().insert("n1".into(), Ok(claims));
        book.nodes
            .lock()
            .unwrap()
            .insert("n2".into(), Err("403 Forbidden".into()));
        assert_eq!(book.usage(Some("n1"), "prod", "a-data"), known(1, 10));
        assert_eq!(book.usage(Some("n1"), "prod", "b-data"), Usage::Unread);
        assert_eq!(book.usage(None, "prod", "a-data"), Usage::Unread);
        assert_eq!(book.usage(Some("n3"), "prod", "a-data"), Usage::Unread);
        let Usage::Unreadable(why) = book.usage(Some("n2"), "prod", "a-data") else {
            panic!()
        };
        assert!(why.contains("Node n2") && why.contains("403"), "{why}");
    }
}
