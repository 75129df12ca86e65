//! The node's ConfigMap `<node>-config`.
//!
//! Each rendered config is stored under a key naming its own hash (`valkey-<hash>.conf`) and
//! the pod template mounts that key as `/etc/valkey/valkey.conf`. A changed config therefore
//! changes the template (and its revision), and while the roll gate holds a template, the
//! held pod keeps its own config even across a crash restart: editing one shared key in place
//! would let any restart bypass the gate.

use std::collections::BTreeMap;

use crd_types::ValkeyNode;
use crd_types::names;
use k8s_openapi::api::core::v1::{ConfigMap, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

use crate::config::LIVE_FILE;
use crate::config::RenderedConfig;
use crate::config::cluster_context::CLUSTER_CONTEXT_KEY;
use crate::config::replication::CONTEXT_KEY;
use crate::{meta, revision};

/// Name of the pod volume that mounts the ConfigMap.
pub const CONFIG_VOLUME: &str = "config";

/// The ConfigMap key of `rendered`: `valkey-<hash>.conf` or `sentinel-<hash>.conf`.
pub fn config_key(rendered: &RenderedConfig) -> String {
    let stem = rendered
        .file_name
        .strip_suffix(".conf")
        .unwrap_or(rendered.file_name);
    format!(
        "{stem}-{}.conf",
        revision::short_hash(rendered.text.as_bytes())
    )
}

/// The ConfigMap keys a (live) pod spec mounts through the config volume.
pub fn referenced_keys(pod: &PodSpec) -> Vec<String> {
    pod.volumes
        .iter()
        .flatten()
        .filter(|v| v.name == CONFIG_VOLUME)
        .filter_map(|v| v.config_map.as_ref())
        .flat_map(|cm| cm.items.iter().flatten())
        .map(|item| item.key.clone())
        .collect()
}

/// The ConfigMap to apply: the desired config under its key, plus every key still mounted by
/// a live template or pod (`keep`, from [`referenced_keys`]) with its live content. Anything
/// else is dropped, so old configs are collected once no pod can start from them.
pub fn config_map(
    node: &ValkeyNode,
    rendered: &RenderedConfig,
    live: Option<&ConfigMap>,
    keep: &[String],
) -> ConfigMap {
    let mut data = BTreeMap::new();
    if let Some(live_data) = live.and_then(|cm| cm.data.as_ref()) {
        for key in keep {
            if let Some(text) = live_data.get(key) {
                data.insert(key.clone(), text.clone());
            }
        }
    }
    data.insert(config_key(rendered), rendered.text.clone());
    // Under fixed keys, always the current content: they are no part of any revision.
    match &rendered.replication {
        Some(context) => {
            data.insert(CONTEXT_KEY.to_string(), context.clone());
        }
        None => {
            data.remove(CONTEXT_KEY);
        }
    }
    match &rendered.cluster {
        Some(context) => {
            data.insert(CLUSTER_CONTEXT_KEY.to_string(), context.clone());
        }
        None => {
            data.remove(CLUSTER_CONTEXT_KEY);
        }
    }
    // Likewise: live directives are set on the running server, not rolled. Kept while a
    // template still mounts the key, or its pod could not start.
    match &rendered.live {
        Some(live) => {
            data.insert(LIVE_FILE.to_string(), live.clone());
        }
        None if !keep.iter().any(|k| k == LIVE_FILE) => {
            data.remove(LIVE_FILE);
        }
        None => {}
    }
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(names::config_map_name(&node.name_any())),
            namespace: node.namespace(),
            labels: Some(meta::labels(node)),
            owner_references: meta::owner_reference(node).map(|o| vec![o]),
            ..Default::default()
        },
        data: Some(data),
        ..Default::default()
    }
}

/// Whether `live` already is `desired`: every field held and the same config keys (a key
/// dropped from `desired` must be applied away, which a field-by-field check misses).
pub fn is_current(desired: &ConfigMap, live: &ConfigMap) -> bool {
    let keys = |cm: &ConfigMap| {
        cm.data
            .as_ref()
            .map(|d| d.keys().cloned().collect::<Vec<_>>())
            .unwrap_or_default()
    };
    keys(desired) == keys(live) && operator_runtime::is_applied(desired, live)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::fixtures;
    use crd_types::ValkeyNodeSpec;
    use k8s_openapi::api::core::v1::{ConfigMapVolumeSource, KeyToPath, Volume};

    fn rendered(text: &str) -> RenderedConfig {
        RenderedConfig {
            file_name: "valkey.conf",
            text: text.into(),
            args: vec![],
            replication: None,
            cluster: None,
            live: None,
        }
    }

    #[test]
    fn live_directives_sit_under_their_fixed_key_and_go_when_unused() {
        let node = fixtures::node("cache", ValkeyNodeSpec::default());
        let mut r = rendered("port 6379\n");
        r.live = Some("maxmemory 1gb\n".into());
        let cm = config_map(&node, &r, None, &[]);
        assert_eq!(cm.data.as_ref().unwrap()[LIVE_FILE], "maxmemory 1gb\n");
        r.live = None;
        let mounted = config_map(&node, &r, Some(&cm), &[LIVE_FILE.to_string()]);
        assert_eq!(mounted.data.unwrap()[LIVE_FILE], "maxmemory 1gb\n");
        let unused = config_map(&node, &r, Some(&cm), &[]);
        assert!(!unused.data.unwrap().contains_key(LIVE_FILE));
    }

    #[test]
    fn key_names_the_content() {
        let a = config_key(&rendered("port 6379\n"));
        assert!(a.starts_with("valkey-") && a.ends_with(".conf"), "{a}");
        assert_eq!(a.len(), "valkey-".len() + 10 + ".conf".len());
        assert_eq!(a, config_key(&rendered("port 6379\n")));
        assert_ne!(a, config_key(&rendered("port 6379\nhz 20\n")));
        let s = RenderedConfig {
            file_name: "sentinel.conf",
            ..rendered("x")
        };
        assert!(config_key(&s).starts_with("sentinel-"));
    }

    #[test]
    fn new_config_map_holds_the_desired_key() {
        let node = fixtures::node("cache", ValkeyNodeSpec::default());
        let r = rendered("port 6379\n");
        let cm = config_map(&node, &r, None, &[]);
        assert_eq!(cm.metadata.name.as_deref(), Some("cache-config"));
        assert_eq!(cm.metadata.owner_references.as_ref().unwrap().len(), 1);
        assert_eq!(
            cm.data.unwrap(),
            BTreeMap::from([(config_key(&r), "port 6379\n".to_string())])
        );
    }

    #[test]
    fn held_keys_are_kept_others_collected() {
        let node = fixtures::node("cache", ValkeyNodeSpec::default());
        let live = ConfigMap {
            data: Some(BTreeMap::from([
                ("valkey-held.conf".to_string(), "old\n".to_string()),
                ("valkey-stale.conf".to_string(), "older\n".to_string()),
            ])),
            ..Default::default()
        };
        let r = rendered("new\n");
        let keep = vec![
            "valkey-held.conf".to_string(),
            "valkey-gone.conf".to_string(),
        ];
        let data = config_map(&node, &r, Some(&live), &keep).data.unwrap();
        assert_eq!(
            data,
            BTreeMap::from([
                ("valkey-held.conf".to_string(), "old\n".to_string()),
                (config_key(&r), "new\n".to_string()),
            ])
        );
    }

    #[test]
    fn the_replication_context_is_always_current_under_its_own_key() {
        let node = fixtures::node("cache", ValkeyNodeSpec::default());
        let mut r = rendered("port 6379\n");
        r.replication = Some("primary 10.0.0.1\n".into());
        let live = config_map(&node, &r, None, &[]);
        r.replication = Some("primary 10.0.0.2\n".into());
        let keep = vec![config_key(&r), CONTEXT_KEY.to_string()];
        let data = config_map(&node, &r, Some(&live), &keep).data.unwrap();
        assert_eq!(data[CONTEXT_KEY], "primary 10.0.0.2\n");
        assert_eq!(data.len(), 2);
        r.replication = None;
        let data = config_map(&node, &r, Some(&live), &keep).data.unwrap();
        assert!(!data.contains_key(CONTEXT_KEY));
    }

    #[test]
    fn referenced_keys_come_from_the_config_volume() {
        let item = |k: &str| KeyToPath {
            key: k.into(),
            path: "valkey.conf".into(),
            mode: None,
        };
        let pod = PodSpec {
            volumes: Some(vec![
                Volume {
                    name: CONFIG_VOLUME.into(),
                    config_map: Some(ConfigMapVolumeSource {
                        name: "cache-config".into(),
                        items: Some(vec![item("valkey-abc.conf")]),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                Volume {
                    name: "other".into(),
                    config_map: Some(ConfigMapVolumeSource {
                        items: Some(vec![item("not-ours")]),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        };
        assert_eq!(referenced_keys(&pod), ["valkey-abc.conf"]);
        assert!(referenced_keys(&PodSpec::default()).is_empty());
    }

    #[test]
    fn a_live_config_map_is_current_only_with_the_same_keys() {
        let n = fixtures::node("cache", ValkeyNodeSpec::default());
        let desired = config_map(&n, &rendered("port 6379\n"), None, &[]);
        let mut live = desired.clone();
        live.metadata.uid = Some("u".into());
        assert!(is_current(&desired, &live));
        live.data
            .as_mut()
            .unwrap()
            .insert("valkey-old.conf".into(), "x".into());
        assert!(!is_current(&desired, &live), "the old key must be dropped");
        let changed = config_map(&n, &rendered("port 6380\n"), None, &[]);
        assert!(!is_current(&changed, &desired));
    }
}
