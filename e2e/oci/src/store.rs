//! A node's image store: pull each image once per manifest digest and keep it unpacked.
//!
//! Layout of the store directory:
//! - `blobs/sha256/<hex>`: manifests, configs and layers, each verified before it got its name;
//! - `rootfs/<manifest hex>/`: the unpacked image; if it exists it is complete;
//! - `refs/<escaped reference>`: the manifest digest a reference resolved to, so that
//!   IfNotPresent and Never find a tag pulled before without asking the registry.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::Context;

use crate::build::{ImageConfig, blob_path, write_atomic};
use crate::client::{RegistryClient, parse_config};
use crate::digest::Digest;
use crate::manifest::Manifest;
use crate::reference::Reference;
use crate::unpack::unpack_image;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PulledImage {
    pub reference: Reference,
    pub manifest: Digest,
    pub rootfs: PathBuf,
    pub config: ImageConfig,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PullPolicy {
    Always,
    IfNotPresent,
    Never,
}

/// Each variant maps onto a kubelet waiting reason (noted beside it).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PullError {
    /// InvalidImageName
    #[error("{0}")]
    InvalidName(String),
    /// ErrImageNeverPull
    #[error("{0}")]
    NeverPull(String),
    /// ErrImagePull
    #[error("{0}")]
    Pull(String),
}

pub struct ImageStore {
    dir: PathBuf,
    client: RegistryClient,
    // One lock per manifest digest, so the same image is never fetched and unpacked twice at once
    // while different images proceed in parallel.
    locks: Mutex<HashMap<Digest, Arc<tokio::sync::Mutex<()>>>>,
}

impl ImageStore {
    /// `mirror` serves every registry host, with the same repository paths (like a containerd
    /// mirror), e.g. `http://127.0.0.1:5000`.
    pub fn new(dir: PathBuf, mirror: String) -> Self {
        ImageStore {
            dir,
            client: RegistryClient::new(&mirror),
            locks: Mutex::default(),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Makes `image` available locally according to `policy`.
    pub async fn ensure(&self, image: &str, policy: PullPolicy) -> Result<PulledImage, PullError> {
        let reference = Reference::parse(image).map_err(|e| {
            PullError::InvalidName(format!("Failed to apply default image tag {image:?}: {e}"))
        })?;
        if policy != PullPolicy::Always
            && let Some(pulled) = self.local(&reference).await
        {
            return Ok(pulled);
        }
        if policy == PullPolicy::Never {
            return Err(PullError::NeverPull(format!(
                "Container image {image:?} is not present with pull policy of Never"
            )));
        }
        self.pull(&reference).await.map_err(|e| {
            PullError::Pull(format!(
                "failed to pull image {image:?} ({reference}) from {}: {e:#}",
                self.client.base()
            ))
        })
    }

    /// The image as found in the store, without the registry.
    async fn local(&self, reference: &Reference) -> Option<PulledImage> {
        let digest = match &reference.digest {
            Some(d) => d.clone(),
            None => tokio::fs::read_to_string(self.ref_path(reference))
                .await
                .ok()?
                .trim()
                .parse()
                .ok()?,
        };
        let dir = self.dir.clone();
        let reference = reference.clone();
        tokio::task::spawn_blocking(move || {
            let rootfs = dir.join("rootfs").join(digest.hex());
            if !rootfs.is_dir() {
                return None;
            }
            let manifest: Manifest =
                serde_json::from_slice(&std::fs::read(blob_path(&dir, &digest)).ok()?).ok()?;
            let config =
                parse_config(&std::fs::read(blob_path(&dir, &manifest.config.digest)).ok()?)
                    .ok()?;
            Some(PulledImage {
                reference,
                manifest: digest,
                rootfs,
                config,
            })
        })
        .await
        .ok()
        .flatten()
    }

    async fn pull(&self, reference: &Reference) -> anyhow::Result<PulledImage> {
        let repo = &reference.repository;
        let (digest, raw, manifest) = self
            .client
            .resolve_raw(repo, &reference.reference())
            .await?;
        let lock = self.lock_for(&digest);
        let _guard = lock.lock().await;

        let rootfs = self.dir.join("rootfs").join(digest.hex());
        let manifest_path = blob_path(&self.dir, &digest);
        tokio::fs::create_dir_all(manifest_path.parent().context("no blob dir")?).await?;
        write_blocking(manifest_path, raw.to_vec()).await?;

        let config_path = blob_path(&self.dir, &manifest.config.digest);
        if !config_path.exists() {
            self.client
                .blob_to_file(repo, &manifest.config.digest, &config_path)
                .await?;
        }
        let config = parse_config(&tokio::fs::read(&config_path).await?)
            .with_context(|| format!("parsing config {}", manifest.config.digest))?;

        if !rootfs.is_dir() {
            for layer in &manifest.layers {
                let path = blob_path(&self.dir, &layer.digest);
                // A blob only gets its name once verified, so one that exists is good.
                if !path.exists() {
                    self.client.blob_to_file(repo, &layer.digest, &path).await?;
                }
            }
            let (dir, layers, dest) = (self.dir.clone(), manifest.layers.clone(), rootfs.clone());
            tokio::task::spawn_blocking(move || unpack_image(&dir, &layers, &dest)).await??;
            tracing::info!(image = %reference, manifest = %digest, "pulled and unpacked");
        }

        let ref_path = self.ref_path(reference);
        tokio::fs::create_dir_all(ref_path.parent().context("no refs dir")?).await?;
        write_blocking(ref_path, digest.to_string().into_bytes()).await?;
        Ok(PulledImage {
            reference: reference.clone(),
            manifest: digest,
            rootfs,
            config,
        })
    }

    fn lock_for(&self, digest: &Digest) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        locks.entry(digest.clone()).or_default().clone()
    }

    fn ref_path(&self, reference: &Reference) -> PathBuf {
        self.dir.join("refs").join(escape(&reference.to_string()))
    }
}

async fn write_blocking(path: PathBuf, bytes: Vec<u8>) -> anyhow::Result<()> {
    tokio::task::spawn_blocking(move || write_atomic(&path, &bytes))
        .await?
        .map_err(Into::into)
}

/// A reference as one file name: everything but `[a-z0-9.-]` becomes `_XX` (hex), so distinct
/// references never collide and none can climb out of `refs/`.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_lowercase()
            || b.is_ascii_digit()
            || b == b'-'
            || (b == b'.' && !out.is_empty())
        {
            out.push(b as char);
        } else {
            out.push_str(&format!("_{b:02x}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn escaping_is_injective_and_flat() {
        assert_eq!(escape("docker.io/a_b:1"), "docker.io_2fa_5fb_3a1");
        assert_ne!(escape("a/b"), escape("a_b"));
        assert!(!escape("..").starts_with('.'));
        assert!(!escape("x/../y").contains('/'));
    }
}
