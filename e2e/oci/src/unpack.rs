//! Applying verified image layers to a directory, with OCI whiteouts. Synchronous: run it on
//! `spawn_blocking`.

use std::collections::HashSet;
use std::fs;
use std::io::{self, BufReader, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use anyhow::{Context, bail};

use crate::build::{blob_path, verify_blob};
use crate::manifest::{
    DOCKER_LAYER_GZIP, DOCKER_LAYER_TAR, Descriptor, OCI_LAYER_GZIP, OCI_LAYER_TAR,
};

const WHITEOUT: &str = ".wh.";
const OPAQUE: &str = ".wh..wh..opq";

/// Unpacks `layers` (blobs under `store/blobs/sha256`) in order into `dest`, which must not exist
/// yet. Works in a temp dir next to `dest` and renames it at the end, so `dest` existing means it
/// is complete.
pub fn unpack_image(store: &Path, layers: &[Descriptor], dest: &Path) -> anyhow::Result<()> {
    let parent = dest.parent().context("destination has no parent")?;
    fs::create_dir_all(parent)?;
    let tmp = tempfile::Builder::new()
        .prefix(".unpack-")
        .tempdir_in(parent)?;
    // A container's root is world-readable, unlike a fresh temp dir.
    fs::set_permissions(tmp.path(), fs::Permissions::from_mode(0o755))?;
    for layer in layers {
        let path = blob_path(store, &layer.digest);
        verify_blob(&path, layer)?;
        apply_layer(&path, &layer.media_type, tmp.path())
            .with_context(|| format!("unpacking layer {}", layer.digest))?;
    }
    let tmp = tmp.keep();
    if let Err(e) = fs::rename(&tmp, dest) {
        let _ = fs::remove_dir_all(&tmp);
        // Someone else finished the same image first: theirs is as good as ours.
        if !dest.is_dir() {
            return Err(e).with_context(|| format!("renaming into {}", dest.display()));
        }
    }
    Ok(())
}

/// Applies one layer blob on top of `root`.
pub fn apply_layer(blob: &Path, media_type: &str, root: &Path) -> anyhow::Result<()> {
    let file = BufReader::new(fs::File::open(blob)?);
    let reader: Box<dyn Read> = match media_type {
        OCI_LAYER_GZIP | DOCKER_LAYER_GZIP => Box::new(flate2::read::GzDecoder::new(file)),
        OCI_LAYER_TAR | DOCKER_LAYER_TAR => Box::new(file),
        other => bail!("unsupported layer media type {other}"),
    };
    apply_tar(reader, root)
}

/// Applies an uncompressed layer tar stream on top of `root`.
pub fn apply_tar(reader: impl Read, root: &Path) -> anyhow::Result<()> {
    let mut archive = tar::Archive::new(reader);
    archive.set_preserve_permissions(true);
    archive.set_preserve_ownerships(true);
    archive.set_unpack_xattrs(false);
    archive.set_overwrite(true);
    // Paths this layer wrote: an opaque marker hides lower layers, not its own siblings.
    let mut written: HashSet<PathBuf> = HashSet::new();
    for entry in archive.entries()? {
        let mut entry = entry?;
        let rel = relative(&entry.path()?)?;
        let Some(name) = rel.file_name().and_then(|n| n.to_str()).map(str::to_string) else {
            // The root itself ("./"): nothing to create.
            continue;
        };
        let dir = rel.parent().unwrap_or(Path::new("")).to_path_buf();
        if name == OPAQUE {
            make_opaque(root, &dir, &written)?;
            continue;
        }
        if let Some(hidden) = name.strip_prefix(WHITEOUT) {
            remove_inside(root, &dir.join(hidden))?;
            continue;
        }
        let kind = entry.header().entry_type();
        if kind.is_character_special() || kind.is_block_special() || kind.is_fifo() {
            // A rootfs for a process needs no device nodes; /dev is provided at run time.
            continue;
        }
        // Overlay semantics: a new entry replaces whatever a lower layer had at that path, except
        // that a directory over a directory merges.
        let target = root.join(&rel);
        if let Ok(old) = fs::symlink_metadata(&target)
            && !(old.is_dir() && kind.is_dir())
        {
            remove_inside(root, &rel)?;
        }
        if !entry.unpack_in(root)? {
            bail!("entry {} escapes the root", rel.display());
        }
        written.insert(rel);
    }
    Ok(())
}

/// A tar path as a plain relative path; `..` and absolute paths are refused, not skipped, since a
/// layer carrying them is hostile or broken.
fn relative(path: &Path) -> anyhow::Result<PathBuf> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(p) => out.push(p),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                bail!("refusing entry {}: it escapes the root", path.display())
            }
        }
    }
    Ok(out)
}

/// Removes `root/rel` (recursively), after checking that its parent, with symlinks resolved, is
/// still inside `root`: a lower layer's symlink must not turn a whiteout into a host deletion.
fn remove_inside(root: &Path, rel: &Path) -> anyhow::Result<()> {
    let target = root.join(rel);
    let Ok(meta) = fs::symlink_metadata(&target) else {
        return Ok(());
    };
    let parent = target.parent().context("no parent")?;
    if !parent.canonicalize()?.starts_with(root.canonicalize()?) {
        bail!(
            "refusing to remove {}: it resolves outside the root",
            rel.display()
        );
    }
    if meta.is_dir() {
        fs::remove_dir_all(&target)
    } else {
        fs::remove_file(&target)
    }
    .with_context(|| format!("removing {}", target.display()))
}

fn make_opaque(root: &Path, dir: &Path, written: &HashSet<PathBuf>) -> anyhow::Result<()> {
    let children = match fs::read_dir(root.join(dir)) {
        Ok(c) => c,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    for child in children {
        let rel = dir.join(child?.file_name());
        // Keep what this layer put there, including parents it created only implicitly.
        if !written.iter().any(|w| w.starts_with(&rel)) {
            remove_inside(root, &rel)?;
        }
    }
    Ok(())
}
