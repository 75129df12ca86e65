//! The local cluster's images: an OCI registry on loopback (`e2e/registry`) holding one
//! Valkey image per supported version and redis_exporter's ([`exporter_image`]), built
//! from Debian packages (`e2e/images`) and pushed on every start. The node agent pulls every image from this registry, whatever registry
//! host the image name gives, as a node with a registry mirror would.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use crate::{LocalCluster, run_script, workspace_binary};

/// Valkey versions the local cluster has an image for: `valkey/valkey:<version>`.
pub const VALKEY_VERSIONS: &[&str] = &["8.0", "8.1", "9.1"];

/// The stand-in for the official Alpine variant: Valkey 8.1 with busybox as its whole
/// userland (`e2e/images/valkey-rootfs.sh`), for the image contract of docs/images.md.
pub const BUSYBOX_IMAGE: &str = "valkey/valkey:8.1-alpine";

/// The cache shared by every run: `$VALKEY_OPERATOR_CACHE` or ~/.cache/valkey-operator.
pub fn cache_dir() -> PathBuf {
    std::env::var_os("VALKEY_OPERATOR_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into()))
                .join(".cache/valkey-operator")
        })
}

/// Where node agents keep pulled blobs and unpacked roots (content-addressed, so runs share it).
pub fn image_store_dir() -> PathBuf {
    cache_dir().join("images/store")
}

/// An image to push: repository, tag and its OCI layout on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalImage {
    pub repository: String,
    pub tag: String,
    pub layout: PathBuf,
}

/// Builds what is missing and lists the image layouts (`e2e/images/build.sh`): Valkey's
/// and the exporter's.
pub fn local_images() -> Result<Vec<LocalImage>> {
    let mut which = VALKEY_VERSIONS.to_vec();
    which.push(BUSYBOX_IMAGE.trim_start_matches("valkey/valkey:"));
    which.push("exporter");
    build_images(&which)
}

/// The exporter image the local cluster has: Debian forky's build of redis_exporter under
/// upstream's name, `oliver006/redis_exporter:v<version>` (Debian's version decides it).
pub fn exporter_image() -> Result<String> {
    let image = build_images(&["exporter"])?
        .pop()
        .context("e2e/images/build.sh printed no exporter image")?;
    Ok(format!("{}:{}", image.repository, image.tag))
}

fn build_images(which: &[&str]) -> Result<Vec<LocalImage>> {
    let oci_image = workspace_binary("oci-image")?;
    let out = run_script("e2e/images/build.sh", which, &[("OCI_IMAGE", &oci_image)])?;
    parse_build_output(&out)
}

/// Lines of `<repository>:<tag> <layout dir>`.
fn parse_build_output(out: &str) -> Result<Vec<LocalImage>> {
    out.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let (name, layout) = line
                .split_once(' ')
                .with_context(|| format!("unexpected build output line {line:?}"))?;
            let (repository, tag) = name
                .rsplit_once(':')
                .with_context(|| format!("image {name:?} has no tag"))?;
            Ok(LocalImage {
                repository: repository.into(),
                tag: tag.into(),
                layout: PathBuf::from(layout.trim()),
            })
        })
        .collect()
}

/// The registry binary (`e2e/registry/build.sh` builds it once per input fingerprint).
fn registry_binary() -> Result<PathBuf> {
    Ok(PathBuf::from(
        run_script("e2e/registry/build.sh", &[], &[])?.trim(),
    ))
}

impl LocalCluster {
    /// Starts the registry and pushes the images; returns its base URL.
    pub(crate) async fn start_registry(&mut self) -> Result<String> {
        let binary = registry_binary()?;
        let images = local_images()?;
        let addr_file = self.layout.run_dir.join("registry.addr");
        let _ = std::fs::remove_file(&addr_file);
        // Blobs are content-addressed: every run shares them, so a warm push sends manifests only.
        let blobs = cache_dir().join("registry/blobs");
        std::fs::create_dir_all(&blobs)?;
        let mut command = Command::new(binary);
        command
            .arg("--listen=127.0.0.1:0")
            .arg(format!("--blobs={}", blobs.display()))
            .arg(format!("--addr-file={}", addr_file.display()));
        self.spawn("registry", &mut command)?;
        let addr = wait_for_file(&addr_file, self).await?;
        let url = format!("http://{}", addr.trim());
        let client = oci_image::RegistryClient::new(&url);
        for image in &images {
            client
                .push_layout(&image.layout, &image.repository, &image.tag)
                .await
                .with_context(|| format!("pushing {}:{} to {url}", image.repository, image.tag))?;
        }
        Ok(url)
    }
}

async fn wait_for_file(path: &Path, cluster: &LocalCluster) -> Result<String> {
    cluster
        .wait_for("the registry", || async move {
            Ok(std::fs::read_to_string(path).is_ok_and(|s| !s.trim().is_empty()))
        })
        .await?;
    // The registry writes it atomically once it listens.
    Ok(std::fs::read_to_string(path)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_output_lines() {
        let images = parse_build_output(
            "valkey/valkey:8.0 /c/layouts/valkey-8.0-ab\nvalkey/valkey:9.1 /c/layouts/valkey-9.1-cd\n\n",
        )
        .unwrap();
        assert_eq!(
            images,
            vec![
                LocalImage {
                    repository: "valkey/valkey".into(),
                    tag: "8.0".into(),
                    layout: "/c/layouts/valkey-8.0-ab".into()
                },
                LocalImage {
                    repository: "valkey/valkey".into(),
                    tag: "9.1".into(),
                    layout: "/c/layouts/valkey-9.1-cd".into()
                },
            ]
        );
        assert!(parse_build_output("valkey/valkey /x").is_err());
        assert!(parse_build_output("no-layout").is_err());
    }
}
