//! Assemble an OCI image layout from a root filesystem directory, reproducibly.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use flate2::Compression;
use flate2::write::GzEncoder;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::json;

use crate::digest::{Digest, HashingWriter, digest_file};
use crate::manifest::{
    Descriptor, Index, Manifest, OCI_CONFIG, OCI_INDEX, OCI_LAYER_GZIP, OCI_MANIFEST,
    REF_NAME_ANNOTATION,
};

/// The `config` section of an OCI image configuration; serialised with the spec's field names so
/// it can be read straight out of a pulled image's config blob.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ImageConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    // Real images write `null` for empty lists, hence `nullable`.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub env: Vec<String>,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub entrypoint: Vec<String>,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub cmd: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub labels: BTreeMap<String, String>,
    // The spec's form is a map from "port/proto" to an empty object.
    #[serde(default, with = "ports", skip_serializing_if = "Vec::is_empty")]
    pub exposed_ports: Vec<String>,
}

fn nullable<'de, D: Deserializer<'de>, T: Default + Deserialize<'de>>(d: D) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

mod ports {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(v: &[String], s: S) -> Result<S::Ok, S::Error> {
        let m: BTreeMap<&str, serde_json::Map<String, serde_json::Value>> =
            v.iter().map(|p| (p.as_str(), Default::default())).collect();
        m.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
        let m = Option::<BTreeMap<String, serde_json::Value>>::deserialize(d)?;
        Ok(m.unwrap_or_default().into_keys().collect())
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Built {
    pub manifest: Digest,
    pub config: Digest,
    pub layers: Vec<Digest>,
    /// Compressed layer bytes.
    pub size: u64,
}

/// Writes an OCI image layout at `out` holding one image: a single gzip layer made from `rootfs`,
/// tagged `tag` in `index.json`. The same tree (and SOURCE_DATE_EPOCH) gives the same digests.
pub fn build_layout(
    rootfs: &Path,
    config: &ImageConfig,
    out: &Path,
    tag: &str,
) -> anyhow::Result<Built> {
    let epoch = source_date_epoch()?;
    let blobs = out.join("blobs/sha256");
    fs::create_dir_all(&blobs).with_context(|| format!("creating {}", blobs.display()))?;

    let (layer, diff_id) = write_layer(rootfs, &blobs, epoch)
        .with_context(|| format!("building a layer from {}", rootfs.display()))?;

    let created = rfc3339(epoch);
    let config_json = json!({
        "created": created,
        "architecture": "amd64",
        "os": "linux",
        "config": config,
        "rootfs": { "type": "layers", "diff_ids": [diff_id] },
        "history": [{ "created": created, "created_by": "oci-image build" }],
    });
    let config_desc = write_json_blob(&blobs, OCI_CONFIG, &config_json)?;

    let manifest = Manifest {
        media_type: OCI_MANIFEST.to_string(),
        config: config_desc.clone(),
        layers: vec![layer.clone()],
    };
    let mut manifest_desc = write_json_blob(&blobs, OCI_MANIFEST, &manifest)?;
    manifest_desc.annotations = Some(BTreeMap::from([(
        REF_NAME_ANNOTATION.to_string(),
        tag.to_string(),
    )]));

    let index = Index {
        schema_version: 2,
        media_type: Some(OCI_INDEX.to_string()),
        manifests: vec![manifest_desc.clone()],
    };
    write_atomic(
        &out.join("oci-layout"),
        br#"{"imageLayoutVersion":"1.0.0"}"#,
    )?;
    write_atomic(&out.join("index.json"), &serde_json::to_vec(&index)?)?;

    Ok(Built {
        manifest: manifest_desc.digest,
        config: config_desc.digest,
        layers: vec![layer.digest],
        size: layer.size,
    })
}

/// Reads back the single image of a layout written by [`build_layout`], checking the manifest
/// blob against its digest.
pub fn read_layout(out: &Path) -> anyhow::Result<(Digest, Manifest)> {
    let index_path = out.join("index.json");
    let index: Index = serde_json::from_slice(
        &fs::read(&index_path).with_context(|| format!("reading {}", index_path.display()))?,
    )
    .with_context(|| format!("parsing {}", index_path.display()))?;
    let [desc] = index.manifests.as_slice() else {
        bail!(
            "{} lists {} manifests, expected exactly one",
            index_path.display(),
            index.manifests.len()
        );
    };
    let path = blob_path(out, &desc.digest);
    let bytes = fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    let actual = Digest::of(&bytes);
    if actual != desc.digest {
        bail!("manifest blob {} has digest {actual}", desc.digest);
    }
    let manifest = serde_json::from_slice(&bytes)
        .with_context(|| format!("parsing manifest {}", desc.digest))?;
    Ok((desc.digest.clone(), manifest))
}

/// Where a layout (or an image store, which uses the same scheme) keeps a blob.
pub fn blob_path(root: &Path, digest: &Digest) -> PathBuf {
    root.join("blobs/sha256").join(digest.hex())
}

fn source_date_epoch() -> anyhow::Result<u64> {
    match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(s) if !s.is_empty() => s
            .trim()
            .parse()
            .with_context(|| format!("SOURCE_DATE_EPOCH={s:?} is not a number of seconds")),
        _ => Ok(0),
    }
}

fn write_json_blob(
    blobs: &Path,
    media_type: &str,
    value: &impl Serialize,
) -> anyhow::Result<Descriptor> {
    let bytes = serde_json::to_vec(value)?;
    let digest = Digest::of(&bytes);
    write_atomic(&blobs.join(digest.hex()), &bytes)?;
    Ok(Descriptor {
        media_type: media_type.to_string(),
        digest,
        size: bytes.len() as u64,
        platform: None,
        annotations: None,
    })
}

/// Temp file + fsync + rename, so a crash never leaves a truncated file under its final name.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Tars and gzips `rootfs` into a blob; returns its descriptor and the diff_id (the digest of the
/// uncompressed tar).
fn write_layer(rootfs: &Path, blobs: &Path, mtime: u64) -> anyhow::Result<(Descriptor, Digest)> {
    let tmp = tempfile::NamedTempFile::new_in(blobs)?;
    let compressed = HashingWriter::new(tmp);
    let gz = GzEncoder::new(compressed, Compression::default());
    let mut tar = tar::Builder::new(HashingWriter::new(gz));

    let mut paths = Vec::new();
    collect(rootfs, Path::new(""), &mut paths)?;
    // Sorting by bytes makes the archive independent of readdir order.
    paths.sort_by(|a, b| {
        a.as_os_str()
            .as_encoded_bytes()
            .cmp(b.as_os_str().as_encoded_bytes())
    });
    for rel in &paths {
        append(&mut tar, rootfs, rel, mtime)
            .with_context(|| format!("adding {}", rel.display()))?;
    }

    let (gz, diff_id, _) = tar.into_inner()?.finish();
    let (tmp, digest, size) = gz.finish()?.finish();
    tmp.as_file().sync_all()?;
    tmp.persist(blobs.join(digest.hex())).map_err(|e| e.error)?;
    let desc = Descriptor {
        media_type: OCI_LAYER_GZIP.to_string(),
        digest,
        size,
        platform: None,
        annotations: None,
    };
    Ok((desc, diff_id))
}

fn collect(root: &Path, rel: &Path, out: &mut Vec<PathBuf>) -> io::Result<()> {
    for entry in fs::read_dir(root.join(rel))? {
        let entry = entry?;
        let rel = rel.join(entry.file_name());
        let is_dir = entry.file_type()?.is_dir();
        out.push(rel.clone());
        if is_dir {
            collect(root, &rel, out)?;
        }
    }
    Ok(())
}

fn append<W: Write>(
    tar: &mut tar::Builder<W>,
    root: &Path,
    rel: &Path,
    mtime: u64,
) -> anyhow::Result<()> {
    let path = root.join(rel);
    let meta = fs::symlink_metadata(&path)?;
    let ft = meta.file_type();
    let mut h = tar::Header::new_gnu();
    h.set_mtime(mtime);
    h.set_uid(meta.uid().into());
    h.set_gid(meta.gid().into());
    h.set_mode(meta.mode() & 0o7777);
    if ft.is_dir() {
        h.set_entry_type(tar::EntryType::Directory);
        h.set_size(0);
        tar.append_data(&mut h, rel, io::empty())?;
    } else if ft.is_symlink() {
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_size(0);
        tar.append_link(&mut h, rel, fs::read_link(&path)?)?;
    } else if ft.is_file() {
        // Hard links become independent regular files: simpler, and still correct content.
        h.set_entry_type(tar::EntryType::Regular);
        h.set_size(meta.len());
        tar.append_data(&mut h, rel, fs::File::open(&path)?)?;
    } else if ft.is_socket() || ft.is_fifo() || ft.is_block_device() || ft.is_char_device() {
        tracing::warn!(path = %path.display(), "skipping a special file: images do not need them");
    }
    Ok(())
}

/// Seconds since the epoch as `YYYY-MM-DDTHH:MM:SSZ` (civil-from-days, proleptic Gregorian).
fn rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Checks a blob file against a descriptor's digest and size.
pub(crate) fn verify_blob(path: &Path, desc: &Descriptor) -> anyhow::Result<()> {
    let (actual, size) =
        digest_file(path).with_context(|| format!("reading blob {}", path.display()))?;
    if actual != desc.digest {
        bail!(
            "blob {} is corrupt: digest mismatch, expected {} but the content hashes to {actual}",
            path.display(),
            desc.digest
        );
    }
    if size != desc.size {
        bail!(
            "blob {} has {size} bytes, its descriptor says {}",
            desc.digest,
            desc.size
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::fs::{PermissionsExt, symlink};

    fn tree(dir: &Path) {
        fs::create_dir_all(dir.join("usr/bin")).unwrap();
        fs::create_dir_all(dir.join("data")).unwrap();
        fs::write(dir.join("usr/bin/valkey-server"), b"#!/bin/sh\necho hi\n").unwrap();
        fs::set_permissions(
            dir.join("usr/bin/valkey-server"),
            fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        fs::write(dir.join("etc"), b"not a dir").unwrap();
        symlink("valkey-server", dir.join("usr/bin/valkey-sentinel")).unwrap();
        fs::hard_link(dir.join("etc"), dir.join("etc2")).unwrap();
        let long = "x".repeat(120);
        fs::create_dir_all(dir.join(&long).join(&long)).unwrap();
        fs::write(dir.join(&long).join(&long).join("f"), b"long").unwrap();
    }

    fn config() -> ImageConfig {
        ImageConfig {
            user: Some("999:999".into()),
            env: vec!["PATH=/usr/bin".into()],
            entrypoint: vec!["valkey-server".into()],
            cmd: vec!["--port".into(), "6379".into()],
            working_dir: Some("/data".into()),
            labels: BTreeMap::from([("a".into(), "b".into())]),
            exposed_ports: vec!["6379/tcp".into()],
        }
    }

    #[test]
    fn deterministic_build_and_round_trip() {
        let tmp = tempfile::tempdir().unwrap();
        let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
        tree(&a);
        tree(&b);
        let built_a = build_layout(&a, &config(), &tmp.path().join("out-a"), "v1").unwrap();
        let built_b = build_layout(&b, &config(), &tmp.path().join("out-b"), "v1").unwrap();
        assert_eq!(built_a, built_b);

        let out = tmp.path().join("out-a");
        let (digest, manifest) = read_layout(&out).unwrap();
        assert_eq!(digest, built_a.manifest);
        assert_eq!(manifest.media_type, OCI_MANIFEST);
        assert_eq!(manifest.config.digest, built_a.config);
        assert_eq!(manifest.layers.len(), 1);
        assert_eq!(manifest.layers[0].media_type, OCI_LAYER_GZIP);
        assert_eq!(manifest.layers[0].size, built_a.size);

        // The diff_id is the sha256 of the uncompressed tar.
        let mut tar_bytes = Vec::new();
        flate2::read::GzDecoder::new(fs::File::open(blob_path(&out, &built_a.layers[0])).unwrap())
            .read_to_end(&mut tar_bytes)
            .unwrap();
        let cfg: serde_json::Value =
            serde_json::from_slice(&fs::read(blob_path(&out, &built_a.config)).unwrap()).unwrap();
        assert_eq!(
            cfg["rootfs"]["diff_ids"][0],
            Digest::of(&tar_bytes).to_string()
        );
        assert_eq!(cfg["rootfs"]["type"], "layers");
        assert_eq!(cfg["architecture"], "amd64");
        assert_eq!(cfg["os"], "linux");
        assert_eq!(cfg["config"]["User"], "999:999");
        assert_eq!(cfg["config"]["Entrypoint"], json!(["valkey-server"]));
        assert_eq!(cfg["config"]["Cmd"], json!(["--port", "6379"]));
        assert_eq!(cfg["config"]["ExposedPorts"], json!({"6379/tcp": {}}));
        let back: ImageConfig = serde_json::from_value(cfg["config"].clone()).unwrap();
        assert_eq!(back, config());

        let index: serde_json::Value =
            serde_json::from_slice(&fs::read(out.join("index.json")).unwrap()).unwrap();
        assert_eq!(
            index["manifests"][0]["annotations"][REF_NAME_ANNOTATION],
            "v1"
        );
        assert!(out.join("oci-layout").exists());

        // Entries sorted, mtime fixed, symlink kept, hard link stored as a regular file.
        let mut archive = tar::Archive::new(tar_bytes.as_slice());
        let mut names = Vec::new();
        for e in archive.entries().unwrap() {
            let e = e.unwrap();
            let name = e.path().unwrap().to_string_lossy().into_owned();
            assert_eq!(e.header().mtime().unwrap(), 0);
            match name.as_str() {
                "usr/bin/valkey-sentinel" => {
                    assert_eq!(e.header().entry_type(), tar::EntryType::Symlink);
                    assert_eq!(
                        e.link_name().unwrap().unwrap().to_str(),
                        Some("valkey-server")
                    );
                }
                "etc2" => assert_eq!(e.header().entry_type(), tar::EntryType::Regular),
                "usr/bin/valkey-server" => assert_eq!(e.header().mode().unwrap(), 0o755),
                _ => {}
            }
            names.push(name);
        }
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
        assert!(names.contains(&"usr/bin".to_string()));
        assert!(names.iter().any(|n| n.ends_with("/f") && n.len() > 240));
    }

    #[test]
    fn null_lists_in_real_configs() {
        let c: ImageConfig = serde_json::from_str(
            r#"{"Env":null,"Entrypoint":null,"Cmd":["x"],"Labels":null,"ExposedPorts":null}"#,
        )
        .unwrap();
        assert_eq!(c.cmd, vec!["x"]);
        assert!(c.env.is_empty() && c.entrypoint.is_empty() && c.labels.is_empty());
    }

    #[test]
    fn dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
    }
}
