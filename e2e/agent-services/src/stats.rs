//! Usage of a directory-backed volume, as the node agent's kubelet
//! `/stats/summary` reports it for PVC volumes.

use std::path::Path;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VolumeStats {
    pub capacity_bytes: u64,
    pub used_bytes: u64,
    /// `capacity_bytes - used_bytes`, saturating at 0 (the directory does
    /// not enforce its capacity, so usage can exceed it).
    pub available_bytes: u64,
    pub inodes_used: u64,
}

/// Walk `path` without following symlinks.
///
/// `used_bytes` is the sum of the *apparent* sizes (`st_size`) of regular
/// files, not allocated blocks: it is deterministic across filesystems, and
/// lets e2e tests fill a volume instantly with a sparse file
/// (`truncate -s 900M`) to drive pvc-resizer. `inodes_used` counts every
/// entry below `path` (files, directories, symlinks, ...), not `path`
/// itself. Entries that vanish or cannot be read during the walk are skipped.
///
/// A volume that is a file system of its own (a `local-sized` tmpfs) is measured like a
/// real kubelet measures one: statvfs, so capacity follows a growth at once and usage is
/// what the file system holds.
pub fn volume_stats(path: &Path, capacity_bytes: u64) -> VolumeStats {
    if crate::storage::is_mount_point(path)
        && let Ok(fs) = nix::sys::statvfs::statvfs(path)
    {
        let block = fs.fragment_size();
        let capacity = fs.blocks() * block;
        return VolumeStats {
            capacity_bytes: capacity,
            used_bytes: (fs.blocks() - fs.blocks_free()) * block,
            available_bytes: fs.blocks_available() * block,
            inodes_used: fs.files() - fs.files_free(),
        };
    }
    let (mut used, mut inodes) = (0u64, 0u64);
    let mut stack = vec![path.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.path().symlink_metadata() else {
                continue;
            };
            inodes += 1;
            if meta.is_dir() {
                stack.push(entry.path());
            } else if meta.is_file() {
                used = used.saturating_add(meta.len());
            }
        }
    }
    VolumeStats {
        capacity_bytes,
        used_bytes: used,
        available_bytes: capacity_bytes.saturating_sub(used),
        inodes_used: inodes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_files_recursively() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), vec![0u8; 1000]).unwrap();
        std::fs::create_dir_all(dir.path().join("sub/deeper")).unwrap();
        std::fs::write(dir.path().join("sub/b"), vec![1u8; 2345]).unwrap();
        std::fs::write(dir.path().join("sub/deeper/c"), b"").unwrap();
        // A sparse file counts at its apparent size.
        let f = std::fs::File::create(dir.path().join("sparse")).unwrap();
        f.set_len(10_000).unwrap();
        // Symlinks are counted as entries but not followed.
        std::os::unix::fs::symlink("/usr", dir.path().join("link")).unwrap();

        let s = volume_stats(dir.path(), 20_000);
        assert_eq!(s.used_bytes, 1000 + 2345 + 10_000);
        assert_eq!(s.available_bytes, 20_000 - 13_345);
        assert_eq!(s.capacity_bytes, 20_000);
        // a, sub, sub/deeper, sub/b, sub/deeper/c, sparse, link
        assert_eq!(s.inodes_used, 7);

        let full = volume_stats(dir.path(), 100);
        assert_eq!(full.available_bytes, 0);
    }

    #[test]
    fn missing_dir_is_empty() {
        let s = volume_stats(Path::new("/nonexistent/agent-services"), 5);
        assert_eq!(
            s,
            VolumeStats {
                capacity_bytes: 5,
                used_bytes: 0,
                available_bytes: 5,
                inodes_used: 0
            }
        );
    }
}
