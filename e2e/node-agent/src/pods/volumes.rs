//! Pod volumes: materialising them as host directories under the pod's state
//! dir, and planning where they are bound inside each container.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

use agent_services::quantity;
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{
    Container, DownwardAPIVolumeFile, KeyToPath, PersistentVolume, PersistentVolumeClaim, Pod,
    ServiceAccount,
};
use kube::Api;
use kube::api::PostParams;

use super::env::{self, ObjectCache, PodFacts};
use crate::container_exec::MountSpec;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VolKind {
    EmptyDir,
    /// configMap, secret, downwardAPI, projected: always read-only.
    Rendered,
    Pvc {
        claim: String,
        capacity_bytes: u64,
    },
    HostPath,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Materialized {
    pub name: String,
    pub path: PathBuf,
    pub kind: VolKind,
    pub read_only: bool,
}

/// One file of a rendered (configMap-like) volume.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FileEntry {
    pub path: String,
    pub data: Vec<u8>,
    pub mode: u32,
}

/// Plans the bind mounts of one container from its volumeMounts.
pub fn plan_mounts(
    container: &Container,
    volumes: &HashMap<String, Materialized>,
    env: &[(String, String)],
) -> Result<Vec<MountSpec>, String> {
    let mut out = Vec::new();
    for vm in container.volume_mounts.iter().flatten() {
        let mat = volumes
            .get(&vm.name)
            .ok_or_else(|| format!("volumeMount {:?} refers to an unknown volume", vm.name))?;
        let sub = match (&vm.sub_path, &vm.sub_path_expr) {
            (Some(sp), _) if !sp.is_empty() => sp.clone(),
            (_, Some(expr)) if !expr.is_empty() => {
                let map: HashMap<&str, &str> =
                    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                env::expand(expr, &|n| map.get(n).map(|v| v.to_string()))
            }
            _ => String::new(),
        };
        let sub_path = Path::new(&sub);
        if sub_path.is_absolute()
            || sub_path
                .components()
                .any(|c| matches!(c, Component::ParentDir))
        {
            return Err(format!(
                "subPath {sub:?} must be a relative path without '..'"
            ));
        }
        out.push(MountSpec {
            source: if sub.is_empty() {
                mat.path.clone()
            } else {
                mat.path.join(sub_path)
            },
            target: vm.mount_path.clone(),
            read_only: vm.read_only == Some(true) || mat.read_only,
        });
    }
    Ok(out)
}

fn check_rel(path: &str) -> Result<(), String> {
    let p = Path::new(path);
    if path.is_empty()
        || p.is_absolute()
        || p.components().any(|c| matches!(c, Component::ParentDir))
        || path.starts_with("..")
    {
        return Err(format!("invalid volume file path {path:?}"));
    }
    Ok(())
}

/// Files of a configMap/secret volume: all keys, or just `items`.
pub fn render_key_files(
    entries: Option<BTreeMap<String, Vec<u8>>>,
    what: &str,
    items: Option<&Vec<KeyToPath>>,
    optional: bool,
    default_mode: u32,
) -> Result<Vec<FileEntry>, String> {
    let Some(entries) = entries else {
        return if optional {
            Ok(vec![])
        } else {
            Err(format!("{what} not found"))
        };
    };
    let mut out = Vec::new();
    match items {
        Some(items) if !items.is_empty() => {
            for it in items {
                check_rel(&it.path)?;
                match entries.get(&it.key) {
                    Some(data) => out.push(FileEntry {
                        path: it.path.clone(),
                        data: data.clone(),
                        mode: it.mode.map(|m| m as u32).unwrap_or(default_mode),
                    }),
                    None if optional => {}
                    None => return Err(format!("{what}: key {:?} not found", it.key)),
                }
            }
        }
        _ => {
            for (k, data) in entries {
                out.push(FileEntry {
                    path: k,
                    data,
                    mode: default_mode,
                });
            }
        }
    }
    Ok(out)
}

/// Files of a downwardAPI volume (or projection).
pub fn render_downward(
    pod: &Pod,
    facts: &PodFacts,
    items: &[DownwardAPIVolumeFile],
    default_mode: u32,
) -> Result<Vec<FileEntry>, String> {
    let mut out = Vec::new();
    for it in items {
        check_rel(&it.path)?;
        let value = if let Some(f) = &it.field_ref {
            env::field_value(pod, facts, f)?
        } else if let Some(r) = &it.resource_field_ref {
            env::resource_value(pod, None, r)?
        } else {
            return Err(format!("downwardAPI item {:?} has no source", it.path));
        };
        out.push(FileEntry {
            path: it.path.clone(),
            data: value.into_bytes(),
            mode: it.mode.map(|m| m as u32).unwrap_or(default_mode),
        });
    }
    Ok(out)
}

fn fingerprint(files: &[FileEntry], gid: Option<u32>) -> String {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    files.hash(&mut h);
    gid.hash(&mut h);
    format!("{:016x}", h.finish())
}

/// Writes rendered files the way the kubelet does: into a timestamped
/// directory swapped in via the `..data` symlink, with top-level links, so
/// updates appear atomically in running containers. Returns whether anything
/// changed.
pub fn write_atomic(dir: &Path, files: &[FileEntry], gid: Option<u32>) -> std::io::Result<bool> {
    std::fs::create_dir_all(dir)?;
    let fp = fingerprint(files, gid);
    let fp_path = dir.join("..fingerprint");
    if std::fs::read_to_string(&fp_path).ok().as_deref() == Some(fp.as_str())
        && dir.join("..data").exists()
    {
        return Ok(false);
    }
    let stamp = format!(
        "..{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos()
    );
    let ts_dir = dir.join(&stamp);
    std::fs::create_dir(&ts_dir)?;
    std::fs::set_permissions(&ts_dir, std::fs::Permissions::from_mode(0o755))?;
    for f in files {
        let p = ts_dir.join(&f.path);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&p, &f.data)?;
        let mut mode = f.mode & 0o7777;
        if let Some(g) = gid {
            std::os::unix::fs::lchown(&p, None, Some(g))?;
            // Group-readable for a non-root user in fsGroup.
            mode |= 0o040;
        }
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode))?;
    }
    let old = std::fs::read_link(dir.join("..data")).ok();
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(&stamp, &tmp)?;
    std::fs::rename(&tmp, dir.join("..data"))?;
    let mut top: Vec<String> = files
        .iter()
        .filter_map(|f| f.path.split('/').next().map(str::to_string))
        .collect();
    top.sort();
    top.dedup();
    for name in &top {
        let link = dir.join(name);
        let want = PathBuf::from("..data").join(name);
        if std::fs::read_link(&link).ok().as_ref() != Some(&want) {
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(&want, &link)?;
        }
    }
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with("..") && !top.contains(&name) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    if let Some(old) = old
        && old != Path::new(&stamp)
    {
        let _ = std::fs::remove_dir_all(dir.join(old));
    }
    std::fs::write(&fp_path, fp)?;
    Ok(true)
}

/// Cached service account tokens, refreshed at 80% of their lifetime.
#[derive(Default)]
pub struct TokenCache {
    tokens: HashMap<(String, i64), (String, Instant, Duration)>,
}

pub struct VolumeCtx<'a> {
    pub client: &'a kube::Client,
    pub pod: &'a Pod,
    pub facts: &'a PodFacts,
    pub objects: &'a ObjectCache,
    pub pod_dir: &'a Path,
    pub tokens: &'a mut TokenCache,
}

impl VolumeCtx<'_> {
    fn ns(&self) -> String {
        self.pod.metadata.namespace.clone().unwrap_or_default()
    }

    async fn token(&mut self, audience: Option<&str>, expiration: i64) -> Result<String, String> {
        let key = (audience.unwrap_or_default().to_string(), expiration);
        if let Some((tok, at, ttl)) = self.tokens.tokens.get(&key)
            && at.elapsed() < ttl.mul_f32(0.8)
        {
            return Ok(tok.clone());
        }
        let sa = self
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_else(|| "default".into());
        let req = TokenRequest {
            spec: TokenRequestSpec {
                audiences: audience.map(|a| vec![a.to_string()]).unwrap_or_default(),
                expiration_seconds: Some(expiration),
                bound_object_ref: Some(BoundObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    name: self.pod.metadata.name.clone(),
                    uid: self.pod.metadata.uid.clone(),
                }),
            },
            ..Default::default()
        };
        let api: Api<ServiceAccount> = Api::namespaced(self.client.clone(), &self.ns());
        let resp = api
            .create_token_request(&sa, &PostParams::default(), &req)
            .await
            .map_err(|e| format!("requesting token for service account {sa:?}: {e}"))?;
        let token = resp.status.map(|s| s.token).unwrap_or_default();
        self.tokens.tokens.insert(
            key,
            (
                token.clone(),
                Instant::now(),
                Duration::from_secs(expiration.max(600) as u64),
            ),
        );
        Ok(token)
    }

    async fn pvc_path(&self, claim: &str) -> Result<(PathBuf, u64), String> {
        let ns = self.ns();
        let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), &ns);
        let pvc = pvcs
            .get_opt(claim)
            .await
            .map_err(|e| format!("reading PVC {ns}/{claim}: {e}"))?
            .ok_or_else(|| format!("persistentvolumeclaim {claim:?} not found"))?;
        let phase = pvc
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default();
        let pv_name = pvc
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.clone())
            .filter(|n| !n.is_empty());
        let (Some(pv_name), "Bound") = (pv_name, phase.as_str()) else {
            return Err(format!("waiting for PVC {ns}/{claim} to be bound"));
        };
        let pvs: Api<PersistentVolume> = Api::all(self.client.clone());
        let pv = pvs
            .get(&pv_name)
            .await
            .map_err(|e| format!("reading PV {pv_name}: {e}"))?;
        let spec = pv.spec.unwrap_or_default();
        let path = spec
            .host_path
            .map(|h| h.path)
            .or(spec.local.map(|l| l.path))
            .ok_or_else(|| format!("PV {pv_name} has neither hostPath nor local path"))?;
        let capacity = spec
            .capacity
            .as_ref()
            .and_then(|c| c.get("storage"))
            .and_then(|q| quantity::whole_units(&q.0).ok())
            .map_or(0, |bytes| u64::try_from(bytes).unwrap_or(u64::MAX));
        let path = PathBuf::from(path);
        std::fs::create_dir_all(&path).map_err(|e| format!("creating {}: {e}", path.display()))?;
        Ok((path, capacity))
    }
}

/// Materialises every volume of the pod; Err means "not yet" (the pod waits
/// in ContainerCreating with the message and the agent retries).
pub async fn materialize_all(
    ctx: &mut VolumeCtx<'_>,
    fs_group: Option<u32>,
) -> Result<HashMap<String, Materialized>, String> {
    let mut out = HashMap::new();
    let volumes = ctx
        .pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.clone())
        .unwrap_or_default();
    let base = ctx.pod_dir.join("volumes");
    for v in &volumes {
        let dir = base.join(&v.name);
        let mk = |kind: VolKind, path: PathBuf, read_only: bool| Materialized {
            name: v.name.clone(),
            path,
            kind,
            read_only,
        };
        let m = if v.empty_dir.is_some() {
            std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
            // emptyDir is world-writable like the kubelet's.
            let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777));
            mk(VolKind::EmptyDir, dir, false)
        } else if let Some(cm) = &v.config_map {
            let files = render_key_files(
                ctx.objects.config_map_all(&cm.name),
                &format!("configmap {:?}", cm.name),
                cm.items.as_ref(),
                cm.optional == Some(true),
                cm.default_mode.unwrap_or(0o644) as u32,
            )?;
            write_atomic(&dir, &files, fs_group).map_err(|e| e.to_string())?;
            mk(VolKind::Rendered, dir, true)
        } else if let Some(s) = &v.secret {
            let name = s.secret_name.clone().unwrap_or_default();
            let files = render_key_files(
                ctx.objects.secret_all(&name),
                &format!("secret {name:?}"),
                s.items.as_ref(),
                s.optional == Some(true),
                s.default_mode.unwrap_or(0o644) as u32,
            )?;
            write_atomic(&dir, &files, fs_group).map_err(|e| e.to_string())?;
            mk(VolKind::Rendered, dir, true)
        } else if let Some(d) = &v.downward_api {
            let files = render_downward(
                ctx.pod,
                ctx.facts,
                d.items.as_deref().unwrap_or_default(),
                d.default_mode.unwrap_or(0o644) as u32,
            )?;
            write_atomic(&dir, &files, fs_group).map_err(|e| e.to_string())?;
            mk(VolKind::Rendered, dir, true)
        } else if let Some(p) = &v.projected {
            let mode = p.default_mode.unwrap_or(0o644) as u32;
            let mut files = Vec::new();
            for src in p.sources.iter().flatten() {
                if let Some(cm) = &src.config_map {
                    files.extend(render_key_files(
                        ctx.objects.config_map_all(&cm.name),
                        &format!("configmap {:?}", cm.name),
                        cm.items.as_ref(),
                        cm.optional == Some(true),
                        mode,
                    )?);
                } else if let Some(s) = &src.secret {
                    files.extend(render_key_files(
                        ctx.objects.secret_all(&s.name),
                        &format!("secret {:?}", s.name),
                        s.items.as_ref(),
                        s.optional == Some(true),
                        mode,
                    )?);
                } else if let Some(d) = &src.downward_api {
                    files.extend(render_downward(
                        ctx.pod,
                        ctx.facts,
                        d.items.as_deref().unwrap_or_default(),
                        mode,
                    )?);
                } else if let Some(t) = &src.service_account_token {
                    check_rel(&t.path)?;
                    let token = ctx
                        .token(t.audience.as_deref(), t.expiration_seconds.unwrap_or(3600))
                        .await?;
                    files.push(FileEntry {
                        path: t.path.clone(),
                        data: token.into_bytes(),
                        mode,
                    });
                }
            }
            write_atomic(&dir, &files, fs_group).map_err(|e| e.to_string())?;
            mk(VolKind::Rendered, dir, true)
        } else if let Some(pvc) = &v.persistent_volume_claim {
            let (path, capacity_bytes) = ctx.pvc_path(&pvc.claim_name).await?;
            mk(
                VolKind::Pvc {
                    claim: pvc.claim_name.clone(),
                    capacity_bytes,
                },
                path,
                pvc.read_only == Some(true),
            )
        } else if v.ephemeral.is_some() {
            // Generic ephemeral volumes are PVCs named <pod>-<volume>.
            let claim = format!(
                "{}-{}",
                ctx.pod.metadata.name.as_deref().unwrap_or_default(),
                v.name
            );
            let (path, capacity_bytes) = ctx.pvc_path(&claim).await?;
            mk(
                VolKind::Pvc {
                    claim,
                    capacity_bytes,
                },
                path,
                false,
            )
        } else if let Some(h) = &v.host_path {
            let path = PathBuf::from(&h.path);
            if matches!(h.type_.as_deref(), Some("DirectoryOrCreate")) {
                std::fs::create_dir_all(&path).map_err(|e| e.to_string())?;
            }
            mk(VolKind::HostPath, path, false)
        } else {
            return Err(format!(
                "volume {:?} has a type the node agent does not support",
                v.name
            ));
        };
        out.insert(v.name.clone(), m);
    }
    Ok(out)
}

/// Gives a non-root container write access to its writable volumes: group
/// fsGroup with g+rwX (setgid dirs) like the kubelet, or the runAsUser as
/// owner when no fsGroup is set. Skipped when the root already matches.
pub fn apply_ownership(
    path: &Path,
    uid: Option<u32>,
    fs_group: Option<u32>,
) -> std::io::Result<()> {
    let meta = std::fs::metadata(path)?;
    let needs = match (fs_group, uid) {
        (Some(g), _) => meta.gid() != g,
        (None, Some(u)) => meta.uid() != u,
        (None, None) => false,
    };
    if !needs {
        return Ok(());
    }
    walk(path, &mut |p, m| {
        match fs_group {
            Some(g) => {
                std::os::unix::fs::lchown(p, None, Some(g))?;
                if !m.file_type().is_symlink() {
                    let extra = if m.is_dir() { 0o2070 } else { 0o060 };
                    std::fs::set_permissions(
                        p,
                        std::fs::Permissions::from_mode((m.mode() & 0o7777) | extra),
                    )?;
                }
            }
            None => std::os::unix::fs::lchown(p, uid, None)?,
        }
        Ok(())
    })
}

fn walk(
    path: &Path,
    f: &mut dyn FnMut(&Path, &std::fs::Metadata) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let meta = std::fs::symlink_metadata(path)?;
    f(path, &meta)?;
    if meta.is_dir() {
        for e in std::fs::read_dir(path)? {
            walk(&e?.path(), f)?;
        }
    }
    Ok(())
}

/// Bytes used (allocated blocks) and inodes of a directory tree.
pub fn dir_usage(path: &Path) -> (u64, u64) {
    let mut bytes = 0u64;
    let mut inodes = 0u64;
    let _ = walk(path, &mut |_, m| {
        bytes += m.blocks() * 512;
        inodes += 1;
        Ok(())
    });
    (bytes, inodes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container() -> Container {
        serde_json::from_value(serde_json::json!({
            "name": "valkey",
            "volumeMounts": [
                {"name": "data", "mountPath": "/data"},
                {"name": "conf", "mountPath": "/etc/valkey/valkey.conf", "subPath": "valkey.conf"},
                {"name": "scratch", "mountPath": "/scratch", "readOnly": true},
                {"name": "scratch", "mountPath": "/per-pod", "subPathExpr": "$(POD_NAME)/x"}
            ]
        }))
        .unwrap()
    }

    fn volumes() -> HashMap<String, Materialized> {
        let mut m = HashMap::new();
        for (name, kind, ro) in [
            (
                "data",
                VolKind::Pvc {
                    claim: "data-web-0".into(),
                    capacity_bytes: 1 << 30,
                },
                false,
            ),
            ("conf", VolKind::Rendered, true),
            ("scratch", VolKind::EmptyDir, false),
        ] {
            m.insert(
                name.to_string(),
                Materialized {
                    name: name.into(),
                    path: PathBuf::from(format!("/v/{name}")),
                    kind,
                    read_only: ro,
                },
            );
        }
        m
    }

    #[test]
    fn plans_mounts_with_subpaths_and_read_only() {
        let env = vec![("POD_NAME".to_string(), "web-0".to_string())];
        let plan = plan_mounts(&container(), &volumes(), &env).unwrap();
        let got: Vec<(String, String, bool)> = plan
            .iter()
            .map(|m| {
                (
                    m.source.display().to_string(),
                    m.target.clone(),
                    m.read_only,
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("/v/data".into(), "/data".into(), false),
                (
                    "/v/conf/valkey.conf".into(),
                    "/etc/valkey/valkey.conf".into(),
                    true
                ),
                ("/v/scratch".into(), "/scratch".into(), true),
                ("/v/scratch/web-0/x".into(), "/per-pod".into(), false),
            ]
        );
    }

    #[test]
    fn rejects_escaping_subpaths_and_unknown_volumes() {
        let mut c = container();
        c.volume_mounts.as_mut().unwrap()[1].sub_path = Some("../etc".into());
        assert!(plan_mounts(&c, &volumes(), &[]).is_err());
        let mut c = container();
        c.volume_mounts.as_mut().unwrap()[0].name = "nope".into();
        assert!(plan_mounts(&c, &volumes(), &[]).is_err());
    }

    #[test]
    fn renders_items_and_optional() {
        let entries: BTreeMap<String, Vec<u8>> = [
            ("a".to_string(), b"1".to_vec()),
            ("b".to_string(), b"2".to_vec()),
        ]
        .into();
        let all = render_key_files(Some(entries.clone()), "cm", None, false, 0o644).unwrap();
        assert_eq!(all.len(), 2);
        let items = vec![KeyToPath {
            key: "b".into(),
            path: "sub/b.txt".into(),
            mode: Some(0o600),
        }];
        let some =
            render_key_files(Some(entries.clone()), "cm", Some(&items), false, 0o644).unwrap();
        assert_eq!(
            some,
            vec![FileEntry {
                path: "sub/b.txt".into(),
                data: b"2".to_vec(),
                mode: 0o600
            }]
        );
        assert!(render_key_files(None, "cm", None, false, 0o644).is_err());
        assert!(
            render_key_files(None, "cm", None, true, 0o644)
                .unwrap()
                .is_empty()
        );
        let bad = vec![KeyToPath {
            key: "a".into(),
            path: "../x".into(),
            mode: None,
        }];
        assert!(render_key_files(Some(entries), "cm", Some(&bad), false, 0o644).is_err());
    }

    #[test]
    fn downward_files() {
        let pod = super::env::tests::fixture();
        let items: Vec<DownwardAPIVolumeFile> = serde_json::from_value(serde_json::json!([
            {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
            {"path": "ns", "fieldRef": {"fieldPath": "metadata.namespace"}},
            {"path": "mem", "resourceFieldRef": {"containerName": "main", "resource": "limits.memory", "divisor": "1Mi"}}
        ]))
        .unwrap();
        let files = render_downward(&pod, &super::env::tests::facts(), &items, 0o644).unwrap();
        assert_eq!(files[0].data, b"app=\"web\"\ntier=\"db \\\"x\\\"\"\n");
        assert_eq!(files[1].data, b"ns1");
        assert_eq!(files[2].data, b"1024");
    }

    #[test]
    fn atomic_writes_swap_data_and_links() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("vol");
        let f1 = vec![
            FileEntry {
                path: "a".into(),
                data: b"1".to_vec(),
                mode: 0o644,
            },
            FileEntry {
                path: "b".into(),
                data: b"2".to_vec(),
                mode: 0o600,
            },
        ];
        assert!(write_atomic(&d, &f1, None).unwrap());
        assert_eq!(std::fs::read(d.join("a")).unwrap(), b"1");
        assert!(!write_atomic(&d, &f1, None).unwrap(), "unchanged");
        let f2 = vec![FileEntry {
            path: "a".into(),
            data: b"3".to_vec(),
            mode: 0o644,
        }];
        assert!(write_atomic(&d, &f2, None).unwrap());
        assert_eq!(std::fs::read(d.join("a")).unwrap(), b"3");
        assert!(!d.join("b").exists());
        let ts_dirs = std::fs::read_dir(&d)
            .unwrap()
            .filter(|e| {
                let n = e
                    .as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .into_owned();
                n.starts_with("..1")
            })
            .count();
        assert_eq!(ts_dirs, 1, "old data dir removed");
    }
}
