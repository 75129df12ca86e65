//! Container environment: env/envFrom resolution, downward API field values
//! and Kubernetes `$(VAR)` expansion.

use agent_services::quantity;
use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{
    ConfigMap, Container, ObjectFieldSelector, Pod, ResourceFieldSelector, Secret,
};

/// ConfigMaps and Secrets fetched for one pod; `None` = not found.
#[derive(Debug, Default, Clone)]
pub struct ObjectCache {
    pub config_maps: HashMap<String, Option<ConfigMap>>,
    pub secrets: HashMap<String, Option<Secret>>,
}

impl ObjectCache {
    /// Value of a ConfigMap key (data or binaryData).
    pub fn config_map_key(&self, name: &str, key: &str) -> Lookup<Vec<u8>> {
        match self.config_maps.get(name) {
            Some(Some(cm)) => {
                if let Some(v) = cm.data.as_ref().and_then(|d| d.get(key)) {
                    Lookup::Found(v.clone().into_bytes())
                } else if let Some(v) = cm.binary_data.as_ref().and_then(|d| d.get(key)) {
                    Lookup::Found(v.0.clone())
                } else {
                    Lookup::MissingKey
                }
            }
            _ => Lookup::MissingObject,
        }
    }

    pub fn secret_key(&self, name: &str, key: &str) -> Lookup<Vec<u8>> {
        match self.secrets.get(name) {
            Some(Some(s)) => {
                if let Some(v) = s.data.as_ref().and_then(|d| d.get(key)) {
                    Lookup::Found(v.0.clone())
                } else if let Some(v) = s.string_data.as_ref().and_then(|d| d.get(key)) {
                    Lookup::Found(v.clone().into_bytes())
                } else {
                    Lookup::MissingKey
                }
            }
            _ => Lookup::MissingObject,
        }
    }

    /// All entries of a ConfigMap as bytes, sorted by key.
    pub fn config_map_all(&self, name: &str) -> Option<BTreeMap<String, Vec<u8>>> {
        let cm = self.config_maps.get(name)?.as_ref()?;
        let mut out = BTreeMap::new();
        for (k, v) in cm.data.iter().flatten() {
            out.insert(k.clone(), v.clone().into_bytes());
        }
        for (k, v) in cm.binary_data.iter().flatten() {
            out.insert(k.clone(), v.0.clone());
        }
        Some(out)
    }

    pub fn secret_all(&self, name: &str) -> Option<BTreeMap<String, Vec<u8>>> {
        let s = self.secrets.get(name)?.as_ref()?;
        let mut out = BTreeMap::new();
        for (k, v) in s.string_data.iter().flatten() {
            out.insert(k.clone(), v.clone().into_bytes());
        }
        for (k, v) in s.data.iter().flatten() {
            out.insert(k.clone(), v.0.clone());
        }
        Some(out)
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum Lookup<T> {
    Found(T),
    MissingKey,
    MissingObject,
}

/// Runtime facts the downward API can expose.
#[derive(Debug, Clone)]
pub struct PodFacts {
    pub pod_ip: String,
    pub host_ip: String,
    pub node_name: String,
}

/// Names of ConfigMaps and Secrets referenced by env, envFrom and volumes.
pub fn referenced_objects(pod: &Pod) -> (Vec<String>, Vec<String>) {
    let mut cms = Vec::new();
    let mut secrets = Vec::new();
    let Some(spec) = &pod.spec else {
        return (cms, secrets);
    };
    let containers = spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter());
    for c in containers {
        for e in c.env.iter().flatten() {
            if let Some(vf) = &e.value_from {
                if let Some(r) = &vf.config_map_key_ref {
                    cms.push(r.name.clone());
                }
                if let Some(r) = &vf.secret_key_ref {
                    secrets.push(r.name.clone());
                }
            }
        }
        for ef in c.env_from.iter().flatten() {
            if let Some(r) = &ef.config_map_ref {
                cms.push(r.name.clone());
            }
            if let Some(r) = &ef.secret_ref {
                secrets.push(r.name.clone());
            }
        }
    }
    for v in spec.volumes.iter().flatten() {
        if let Some(cm) = &v.config_map {
            cms.push(cm.name.clone());
        }
        if let Some(s) = &v.secret {
            secrets.extend(s.secret_name.clone());
        }
        if let Some(p) = &v.projected {
            for src in p.sources.iter().flatten() {
                if let Some(cm) = &src.config_map {
                    cms.push(cm.name.clone());
                }
                if let Some(s) = &src.secret {
                    secrets.push(s.name.clone());
                }
            }
        }
    }
    cms.sort();
    cms.dedup();
    secrets.sort();
    secrets.dedup();
    (cms, secrets)
}

/// Kubernetes `$(VAR)` expansion: `$$` escapes, unknown or unterminated
/// references are left as written.
pub fn expand(input: &str, lookup: &dyn Fn(&str) -> Option<String>) -> String {
    let b = input.as_bytes();
    let mut out: Vec<u8> = Vec::with_capacity(b.len());
    let mut checkpoint = 0;
    let mut cursor = 0;
    while cursor < b.len() {
        if b[cursor] == b'$' && cursor + 1 < b.len() {
            out.extend_from_slice(&b[checkpoint..cursor]);
            let rest = &b[cursor + 1..];
            let advance = match rest[0] {
                b'$' => {
                    out.push(b'$');
                    1
                }
                b'(' => match rest.iter().position(|&c| c == b')') {
                    Some(end) => {
                        let name = String::from_utf8_lossy(&rest[1..end]);
                        match lookup(&name) {
                            Some(v) => out.extend_from_slice(v.as_bytes()),
                            None => out.extend_from_slice(format!("$({name})").as_bytes()),
                        }
                        end + 1
                    }
                    None => {
                        out.extend_from_slice(b"$(");
                        1
                    }
                },
                other => {
                    out.push(b'$');
                    out.push(other);
                    1
                }
            };
            cursor += advance;
            checkpoint = cursor + 1;
        }
        cursor += 1;
    }
    out.extend_from_slice(&b[checkpoint.min(b.len())..]);
    String::from_utf8_lossy(&out).into_owned()
}

/// Value of a downward API fieldRef.
pub fn field_value(
    pod: &Pod,
    facts: &PodFacts,
    sel: &ObjectFieldSelector,
) -> Result<String, String> {
    let path = sel.field_path.as_str();
    let meta = &pod.metadata;
    let spec = pod.spec.as_ref();
    let map_key = |prefix: &str| -> Option<String> {
        let rest = path.strip_prefix(prefix)?.strip_prefix("['")?;
        Some(rest.strip_suffix("']")?.to_string())
    };
    Ok(match path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_default(),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "metadata.labels" => format_map(meta.labels.as_ref()),
        "metadata.annotations" => format_map(meta.annotations.as_ref()),
        "spec.nodeName" => facts.node_name.clone(),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_else(|| "default".into()),
        "status.podIP" | "status.podIPs" => facts.pod_ip.clone(),
        "status.hostIP" | "status.hostIPs" => facts.host_ip.clone(),
        _ => {
            if let Some(k) = map_key("metadata.labels") {
                meta.labels
                    .as_ref()
                    .and_then(|l| l.get(&k))
                    .cloned()
                    .unwrap_or_default()
            } else if let Some(k) = map_key("metadata.annotations") {
                meta.annotations
                    .as_ref()
                    .and_then(|l| l.get(&k))
                    .cloned()
                    .unwrap_or_default()
            } else {
                return Err(format!("unsupported fieldRef {path:?}"));
            }
        }
    })
}

/// Downward API rendering of labels/annotations: sorted `key="value"` lines.
pub fn format_map(m: Option<&BTreeMap<String, String>>) -> String {
    let mut out = String::new();
    for (k, v) in m.into_iter().flatten() {
        out.push_str(&format!("{k}={}\n", go_quote(v)));
    }
    out
}

fn go_quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Node defaults used when a container sets no limit (as the kubelet does).
pub const NODE_CPU: &str = "2";
pub const NODE_MEMORY: &str = "24Gi";

/// Best-effort resourceFieldRef: the container's limit/request, node
/// allocatable for unset limits, divided by the divisor and rounded up.
pub fn resource_value(
    pod: &Pod,
    default_container: Option<&str>,
    sel: &ResourceFieldSelector,
) -> Result<String, String> {
    let spec = pod.spec.as_ref().ok_or("pod has no spec")?;
    let cname = sel
        .container_name
        .as_deref()
        .filter(|n| !n.is_empty())
        .or(default_container)
        .ok_or("resourceFieldRef needs containerName")?;
    let c = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .find(|c| c.name == cname)
        .ok_or_else(|| format!("no container {cname:?}"))?;
    let (kind, res) = sel
        .resource
        .split_once('.')
        .ok_or_else(|| format!("bad resource {:?}", sel.resource))?;
    let res_map = c.resources.as_ref().and_then(|r| match kind {
        "limits" => r.limits.as_ref(),
        _ => r.requests.as_ref(),
    });
    let raw = res_map.and_then(|m| m.get(res)).map(|q| q.0.clone());
    let raw = match (raw, kind, res) {
        (Some(v), _, _) => v,
        (None, "limits", "cpu") => NODE_CPU.into(),
        (None, "limits", "memory") => NODE_MEMORY.into(),
        (None, _, _) => "0".into(),
    };
    let nano =
        |q: &str, what: &str| quantity::nano_units(q).map_err(|e| format!("bad {what}: {e}"));
    let value = nano(&raw, "quantity")?;
    let divisor = match &sel.divisor {
        Some(d) => nano(&d.0, "divisor")?,
        None => 1_000_000_000,
    };
    if divisor == 0 {
        return Err("divisor must be positive".into());
    }
    Ok(value.div_ceil(divisor).to_string())
}

/// Failure to build a container's environment; the container waits with
/// reason CreateContainerConfigError like on a real kubelet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvError(pub String);

/// Resolves a container's environment in Kubernetes order: envFrom first,
/// then env entries, each expanded against the variables defined before it.
pub fn resolve_env(
    pod: &Pod,
    container: &Container,
    facts: &PodFacts,
    objects: &ObjectCache,
) -> Result<Vec<(String, String)>, EnvError> {
    let mut order: Vec<String> = Vec::new();
    let mut vars: HashMap<String, String> = HashMap::new();
    let set = |order: &mut Vec<String>, vars: &mut HashMap<String, String>, k: String, v| {
        if !vars.contains_key(&k) {
            order.push(k.clone());
        }
        vars.insert(k, v);
    };
    for ef in container.env_from.iter().flatten() {
        let prefix = ef.prefix.clone().unwrap_or_default();
        let (entries, optional, what) = if let Some(r) = &ef.config_map_ref {
            (
                objects.config_map_all(&r.name),
                r.optional == Some(true),
                format!("configmap {:?}", r.name),
            )
        } else if let Some(r) = &ef.secret_ref {
            (
                objects.secret_all(&r.name),
                r.optional == Some(true),
                format!("secret {:?}", r.name),
            )
        } else {
            continue;
        };
        match entries {
            Some(entries) => {
                for (k, v) in entries {
                    set(
                        &mut order,
                        &mut vars,
                        format!("{prefix}{k}"),
                        String::from_utf8_lossy(&v).into_owned(),
                    );
                }
            }
            None if optional => {}
            None => return Err(EnvError(format!("{what} not found"))),
        }
    }
    for e in container.env.iter().flatten() {
        let value = if let Some(v) = &e.value {
            let snapshot = vars.clone();
            Some(expand(v, &|name| snapshot.get(name).cloned()))
        } else if let Some(vf) = &e.value_from {
            if let Some(f) = &vf.field_ref {
                Some(field_value(pod, facts, f).map_err(EnvError)?)
            } else if let Some(r) = &vf.resource_field_ref {
                Some(resource_value(pod, Some(&container.name), r).map_err(EnvError)?)
            } else if let Some(r) = &vf.config_map_key_ref {
                match objects.config_map_key(&r.name, &r.key) {
                    Lookup::Found(v) => Some(String::from_utf8_lossy(&v).into_owned()),
                    _ if r.optional == Some(true) => None,
                    Lookup::MissingKey => {
                        return Err(EnvError(format!(
                            "couldn't find key {} in ConfigMap {}",
                            r.key, r.name
                        )));
                    }
                    Lookup::MissingObject => {
                        return Err(EnvError(format!("configmap {:?} not found", r.name)));
                    }
                }
            } else if let Some(r) = &vf.secret_key_ref {
                match objects.secret_key(&r.name, &r.key) {
                    Lookup::Found(v) => Some(String::from_utf8_lossy(&v).into_owned()),
                    _ if r.optional == Some(true) => None,
                    Lookup::MissingKey => {
                        return Err(EnvError(format!(
                            "couldn't find key {} in Secret {}",
                            r.key, r.name
                        )));
                    }
                    Lookup::MissingObject => {
                        return Err(EnvError(format!("secret {:?} not found", r.name)));
                    }
                }
            } else {
                None
            }
        } else {
            Some(String::new())
        };
        if let Some(v) = value {
            set(&mut order, &mut vars, e.name.clone(), v);
        }
    }
    Ok(order
        .into_iter()
        .map(|k| {
            let v = vars[&k].clone();
            (k, v)
        })
        .collect())
}

/// Expands `$(VAR)` in command/args with the container's final environment.
pub fn expand_all(items: &[String], env: &[(String, String)]) -> Vec<String> {
    let map: HashMap<&str, &str> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    items
        .iter()
        .map(|s| expand(s, &|n| map.get(n).map(|v| v.to_string())))
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    fn lookup(name: &str) -> Option<String> {
        match name {
            "A" => Some("alpha".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn expansion_rules() {
        assert_eq!(expand("$(A)", &lookup), "alpha");
        assert_eq!(expand("x-$(A)-y", &lookup), "x-alpha-y");
        assert_eq!(expand("$$(A)", &lookup), "$(A)");
        assert_eq!(expand("$$$(A)", &lookup), "$alpha");
        assert_eq!(expand("$(B)", &lookup), "$(B)");
        assert_eq!(expand("$(A", &lookup), "$(A");
        assert_eq!(expand("$A", &lookup), "$A");
        assert_eq!(expand("a$", &lookup), "a$");
        assert_eq!(expand("$(EMPTY)x", &lookup), "x");
        assert_eq!(expand("$()", &lookup), "$()");
        assert_eq!(expand("ü$(A)ü", &lookup), "üalphaü");
    }

    pub(crate) fn fixture() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "web-0", "namespace": "ns1", "uid": "u-1",
                "labels": {"app": "web", "tier": "db \"x\""},
                "annotations": {"note": "hi"}
            },
            "spec": {
                "serviceAccountName": "sa1",
                "containers": [{
                    "name": "main",
                    "image": "valkey/valkey:8.1",
                    "resources": {"limits": {"memory": "1Gi", "cpu": "500m"}},
                    "envFrom": [
                        {"configMapRef": {"name": "cm"}, "prefix": "CM_"},
                        {"secretRef": {"name": "missing", "optional": true}}
                    ],
                    "env": [
                        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                        {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
                        {"name": "ADDR", "value": "$(POD_IP):6379 $(UNKNOWN) $$(POD_IP)"},
                        {"name": "PASS", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "password"}}},
                        {"name": "OPT", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "nope", "optional": true}}},
                        {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
                        {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
                        {"name": "SA", "valueFrom": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}}},
                        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
                    ]
                }]
            }
        }))
        .unwrap()
    }

    pub(crate) fn objects() -> ObjectCache {
        let mut o = ObjectCache::default();
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "cm"}, "data": {"mode": "cluster", "conf": "port 6379\n"}
        }))
        .unwrap();
        o.config_maps.insert("cm".into(), Some(cm));
        let sec = Secret {
            data: Some([("password".to_string(), ByteString(b"s3cret".to_vec()))].into()),
            ..Default::default()
        };
        o.secrets.insert("sec".into(), Some(sec));
        o.secrets.insert("missing".into(), None);
        o
    }

    pub(crate) fn facts() -> PodFacts {
        PodFacts {
            pod_ip: "127.64.0.9".into(),
            host_ip: "127.0.0.1".into(),
            node_name: "local-node-0".into(),
        }
    }

    #[test]
    fn resolves_env_from_fixture() {
        let pod = fixture();
        let c = &pod.spec.as_ref().unwrap().containers[0];
        let env = resolve_env(&pod, c, &facts(), &objects()).unwrap();
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("CM_mode"), Some("cluster"));
        assert_eq!(get("CM_conf"), Some("port 6379\n"));
        assert_eq!(get("POD_NAME"), Some("web-0"));
        assert_eq!(get("POD_IP"), Some("127.64.0.9"));
        assert_eq!(get("APP"), Some("web"));
        assert_eq!(get("ADDR"), Some("127.64.0.9:6379 $(UNKNOWN) $(POD_IP)"));
        assert_eq!(get("PASS"), Some("s3cret"));
        assert_eq!(get("OPT"), None);
        assert_eq!(get("MEM"), Some("1024"));
        assert_eq!(get("CPU"), Some("1"));
        assert_eq!(get("SA"), Some("sa1"));
        assert_eq!(get("NODE"), Some("local-node-0"));
        // envFrom entries come first, in key order.
        assert_eq!(env[0].0, "CM_conf");
        let args = expand_all(&["--announce-ip".into(), "$(POD_IP)".into()], &env);
        assert_eq!(args[1], "127.64.0.9");
    }

    #[test]
    fn missing_required_key_is_a_config_error() {
        let mut pod = fixture();
        let c = &mut pod.spec.as_mut().unwrap().containers[0];
        c.env.as_mut().unwrap()[4] = serde_json::from_value(serde_json::json!(
            {"name": "PASS", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "other"}}}
        ))
        .unwrap();
        let c = pod.spec.as_ref().unwrap().containers[0].clone();
        let err = resolve_env(&pod, &c, &facts(), &objects()).unwrap_err();
        assert_eq!(err.0, "couldn't find key other in Secret sec");
    }

    #[test]
    fn downward_maps_are_sorted_and_quoted() {
        let pod = fixture();
        let sel = ObjectFieldSelector {
            field_path: "metadata.labels".into(),
            ..Default::default()
        };
        assert_eq!(
            field_value(&pod, &facts(), &sel).unwrap(),
            "app=\"web\"\ntier=\"db \\\"x\\\"\"\n"
        );
    }

    #[test]
    fn referenced_objects_are_collected() {
        let (cms, secrets) = referenced_objects(&fixture());
        assert_eq!(cms, vec!["cm".to_string()]);
        assert_eq!(secrets, vec!["missing".to_string(), "sec".to_string()]);
    }
}
