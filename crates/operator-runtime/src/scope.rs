//! Which namespaces the controllers watch (`WATCH_NAMESPACES`), and the watches over them.
//!
//! All namespaces, or one, is one watch, as kube-runtime makes it. A list of namespaces is
//! one watch per namespace (a namespaced install is granted nothing cluster-wide, so it
//! cannot list across namespaces): their touched objects merge into one trigger stream,
//! and the main resource's cache is the union of each namespace's list ([`union_reflector`]).

use std::collections::HashMap;
use std::fmt::Debug;

use futures::stream::{self, BoxStream, Stream, StreamExt};
use k8s_openapi::NamespaceResourceScope;
use kube::runtime::reflector::{ObjectRef, store::Writer};
use kube::runtime::watcher::{self, Event};
use kube::runtime::{Controller, WatchStreamExt};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;

/// A namespaced kind a controller watches: what kube-runtime's watches and caches need of it.
pub trait Watched:
    Resource<Scope = NamespaceResourceScope, DynamicType = ()>
    + Clone
    + DeserializeOwned
    + Debug
    + Send
    + Sync
    + 'static
{
}

impl<K> Watched for K where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static
{
}

/// The namespaces watched: every one, or those listed (sorted, without duplicates, never
/// empty).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    All,
    Namespaces(Vec<String>),
}

impl Scope {
    /// From a comma-separated list; empty (or only commas and spaces) means all namespaces.
    pub fn parse(list: &str) -> Self {
        let mut names: Vec<String> = list
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(str::to_owned)
            .collect();
        names.sort();
        names.dedup();
        if names.is_empty() {
            Scope::All
        } else {
            Scope::Namespaces(names)
        }
    }

    /// Whether objects of `namespace` are watched.
    pub fn includes(&self, namespace: &str) -> bool {
        match self {
            Scope::All => true,
            Scope::Namespaces(names) => names.iter().any(|n| n == namespace),
        }
    }

    /// One `Api` per watched namespace, or one for all of them.
    pub fn apis<K>(&self, client: &Client) -> Vec<Api<K>>
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>,
    {
        match self {
            Scope::All => vec![Api::all(client.clone())],
            Scope::Namespaces(names) => names
                .iter()
                .map(|n| Api::namespaced(client.clone(), n))
                .collect(),
        }
    }

    /// Every watched namespace's objects of `K` that `config` selects, as they change
    /// (created, updated, deleted, relisted): what `Controller::owns_stream` and
    /// `watches_stream` take.
    pub fn touched<K: Watched>(
        &self,
        client: &Client,
        config: watcher::Config,
    ) -> BoxStream<'static, Result<K, watcher::Error>> {
        let watches = self.apis::<K>(client).into_iter().map(|api| {
            watcher::watcher(api, config.clone())
                .touched_objects()
                .boxed()
        });
        stream::select_all(watches).boxed()
    }

    /// The controller of the main resource `K`: kube-runtime's own for all namespaces or
    /// one; for several, one watch per namespace into a cache that is their union.
    pub fn controller<K: Watched>(
        &self,
        client: &Client,
        config: watcher::Config,
    ) -> Controller<K> {
        let mut apis = self.apis::<K>(client);
        if apis.len() == 1 {
            return Controller::new(apis.remove(0), config);
        }
        let writer = Writer::<K>::new(());
        let reader = writer.as_reader();
        let watches = apis
            .into_iter()
            .map(|api| watcher::watcher(api, config.clone()).boxed())
            .collect();
        Controller::for_stream(union_reflector(watches, writer), reader)
    }
}

/// One namespace's part of the union: its last complete list with the changes since, and
/// the list in progress while it relists.
struct Part<K: Resource<DynamicType = ()>> {
    listed: Option<HashMap<ObjectRef<K>, K>>,
    relisting: Option<HashMap<ObjectRef<K>, K>>,
}

/// Feeds `writer` the union of `watches` (one per namespace) and yields what each applies,
/// as `reflector(..).applied_objects()` does for one watch. A store takes one list at a
/// time (its `Init` starts over, its `InitDone` replaces everything), so the namespaces'
/// lists are kept here, and each time one completes the store gets the whole union as one
/// list; until every namespace has listed once it gets none, so it is not ready and the
/// controller reconciles nothing from half a view. Applies and deletes go straight in.
pub fn union_reflector<K>(
    watches: Vec<BoxStream<'static, Result<Event<K>, watcher::Error>>>,
    writer: Writer<K>,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    let parts: Vec<Part<K>> = watches
        .iter()
        .map(|_| Part {
            listed: None,
            relisting: None,
        })
        .collect();
    let tagged = stream::select_all(
        watches
            .into_iter()
            .enumerate()
            .map(|(i, watch)| watch.map(move |event| (i, event)).boxed()),
    );
    let (mut parts, mut writer) = (parts, writer);
    tagged.filter_map(move |(i, event)| {
        futures::future::ready(match event {
            Ok(event) => apply(&mut parts, &mut writer, i, event).map(Ok),
            Err(error) => Some(Err(error)),
        })
    })
}

/// One namespace's event into the union; the object it applies, if any.
fn apply<K>(parts: &mut [Part<K>], writer: &mut Writer<K>, i: usize, event: Event<K>) -> Option<K>
where
    K: Resource<DynamicType = ()> + Clone,
{
    let part = &mut parts[i];
    match event {
        Event::Apply(object) => {
            for map in [part.listed.as_mut(), part.relisting.as_mut()]
                .into_iter()
                .flatten()
            {
                map.insert(ObjectRef::from_obj(&object), object.clone());
            }
            writer.apply_watcher_event(&Event::Apply(object.clone()));
            Some(object)
        }
        Event::Delete(object) => {
            let key = ObjectRef::from_obj(&object);
            for map in [part.listed.as_mut(), part.relisting.as_mut()]
                .into_iter()
                .flatten()
            {
                map.remove(&key);
            }
            writer.apply_watcher_event(&Event::Delete(object));
            None
        }
        Event::Init => {
            part.relisting = Some(HashMap::new());
            None
        }
        Event::InitApply(object) => {
            part.relisting
                .get_or_insert_with(HashMap::new)
                .insert(ObjectRef::from_obj(&object), object.clone());
            Some(object)
        }
        Event::InitDone => {
            part.listed = Some(part.relisting.take().unwrap_or_default());
            if parts.iter().all(|p| p.listed.is_some()) {
                writer.apply_watcher_event(&Event::Init);
                for object in parts
                    .iter()
                    .flat_map(|p| p.listed.iter().flat_map(|l| l.values()))
                {
                    writer.apply_watcher_event(&Event::InitApply(object.clone()));
                }
                writer.apply_watcher_event(&Event::InitDone);
            }
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;
    use kube::runtime::reflector::{self, Store};

    fn cm(namespace: &str, name: &str, value: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                namespace: Some(namespace.into()),
                name: Some(name.into()),
                ..Default::default()
            },
            data: Some([("v".to_string(), value.to_string())].into()),
            ..Default::default()
        }
    }

    fn names(store: &Store<ConfigMap>) -> Vec<String> {
        let mut all: Vec<String> = store
            .state()
            .iter()
            .map(|c| {
                let v = c.data.as_ref().unwrap()["v"].clone();
                format!(
                    "{}/{}={v}",
                    c.metadata.namespace.as_deref().unwrap(),
                    c.metadata.name.as_deref().unwrap()
                )
            })
            .collect();
        all.sort();
        all
    }

    #[test]
    fn a_list_of_namespaces_parses_sorted_and_without_duplicates() {
        assert_eq!(Scope::parse(""), Scope::All);
        assert_eq!(Scope::parse(" , ,"), Scope::All);
        assert_eq!(
            Scope::parse("team-b, team-a,team-b,"),
            Scope::Namespaces(vec!["team-a".into(), "team-b".into()])
        );
        let scope = Scope::parse("team-a");
        assert!(scope.includes("team-a") && !scope.includes("team-c"));
        assert!(Scope::All.includes("anything"));
    }

    #[test]
    fn the_store_holds_the_union_once_every_namespace_has_listed() {
        let (store, mut writer) = reflector::store::<ConfigMap>();
        let mut parts: Vec<Part<ConfigMap>> = (0..2)
            .map(|_| Part {
                listed: None,
                relisting: None,
            })
            .collect();
        let mut feed = |i: usize, e: Event<ConfigMap>| apply(&mut parts, &mut writer, i, e);
        feed(0, Event::Init);
        assert_eq!(
            feed(0, Event::InitApply(cm("a", "x", "1")))
                .unwrap()
                .metadata
                .name
                .as_deref(),
            Some("x")
        );
        feed(1, Event::Init);
        feed(0, Event::InitDone);
        // One namespace listed: the store is not ready and holds nothing yet.
        assert!(names(&store).is_empty());
        feed(1, Event::InitApply(cm("b", "y", "1")));
        feed(1, Event::InitDone);
        assert_eq!(names(&store), ["a/x=1", "b/y=1"]);

        // Changes go straight in.
        feed(1, Event::Apply(cm("b", "y", "2")));
        feed(0, Event::Apply(cm("a", "z", "1")));
        assert_eq!(names(&store), ["a/x=1", "a/z=1", "b/y=2"]);

        // A namespace relists (its watch fell behind): what it no longer lists goes, the
        // other namespace's objects stay, also while the relist is in progress.
        feed(0, Event::Init);
        feed(0, Event::InitApply(cm("a", "z", "2")));
        feed(1, Event::Delete(cm("b", "y", "2")));
        feed(1, Event::Apply(cm("b", "w", "1")));
        assert_eq!(names(&store), ["a/x=1", "a/z=1", "b/w=1"]);
        feed(0, Event::InitDone);
        assert_eq!(names(&store), ["a/z=2", "b/w=1"]);
    }

    #[tokio::test]
    async fn the_stream_yields_what_each_watch_applies() {
        let (store, writer) = reflector::store::<ConfigMap>();
        let a = stream::iter(vec![
            Ok(Event::Init),
            Ok(Event::InitApply(cm("a", "x", "1"))),
            Ok(Event::InitDone),
        ])
        .boxed();
        let b = stream::iter(vec![
            Ok(Event::Init),
            Ok(Event::InitApply(cm("b", "y", "1"))),
            Ok(Event::InitDone),
            Ok(Event::Delete(cm("b", "y", "1"))),
        ])
        .boxed();
        let yielded: Vec<String> = union_reflector(vec![a, b], writer)
            .map(|r| r.unwrap().metadata.name.unwrap())
            .collect()
            .await;
        let mut sorted = yielded.clone();
        sorted.sort();
        assert_eq!(sorted, ["x", "y"], "applies only, as applied_objects");
        assert_eq!(names(&store), ["a/x=1"]);
    }
}
