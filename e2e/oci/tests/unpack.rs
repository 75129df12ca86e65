use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::Path;

use oci_image::build::blob_path;
use oci_image::unpack::{apply_tar, unpack_image};
use oci_image::{ImageConfig, build_layout, read_layout};

enum E<'a> {
    Dir(&'a str),
    File(&'a str, &'a [u8]),
    Link(&'a str, &'a str),
}

fn layer(entries: &[E]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for e in entries {
        let mut h = tar::Header::new_gnu();
        h.set_mtime(0);
        h.set_uid(0);
        h.set_gid(0);
        match e {
            E::Dir(p) => {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_mode(0o755);
                h.set_size(0);
                b.append_data(&mut h, p, std::io::empty()).unwrap();
            }
            E::File(p, data) => {
                h.set_mode(0o640);
                h.set_size(data.len() as u64);
                b.append_data(&mut h, p, *data).unwrap();
            }
            E::Link(p, target) => {
                h.set_entry_type(tar::EntryType::Symlink);
                h.set_mode(0o777);
                h.set_size(0);
                b.append_link(&mut h, p, target).unwrap();
            }
        }
    }
    b.into_inner().unwrap()
}

/// A tar with a raw name, bypassing the builder's own path checks.
fn raw_layer(name: &str) -> Vec<u8> {
    let mut h = tar::Header::new_gnu();
    h.as_gnu_mut().unwrap().name[..name.len()].copy_from_slice(name.as_bytes());
    h.set_mode(0o644);
    h.set_size(4);
    h.set_cksum();
    let mut b = tar::Builder::new(Vec::new());
    b.append(&h, &b"evil"[..]).unwrap();
    b.into_inner().unwrap()
}

#[test]
fn layers_with_whiteouts_and_opaque_dirs() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    fs::create_dir(&root).unwrap();
    apply_tar(
        &layer(&[
            E::Dir("etc"),
            E::File("etc/keep", b"k"),
            E::File("etc/gone", b"g"),
            E::Dir("opt"),
            E::File("opt/old", b"o"),
            E::Dir("opt/sub"),
            E::File("opt/sub/deep", b"d"),
            E::Dir("var"),
            E::Dir("var/lib"),
            E::File("var/lib/x", b"x"),
            E::Link("bin", "usr/bin"),
        ])[..],
        &root,
    )
    .unwrap();
    apply_tar(
        &layer(&[
            E::File("etc/.wh.gone", b""),
            E::File("opt/new", b"n"),
            E::File("opt/.wh..wh..opq", b""),
            E::File("opt/sub2/implicit", b"i"),
            E::File(".wh.var", b""),
            // A file where a symlink was, and a dir where a file was.
            E::File("bin", b"now a file"),
            E::Dir("etc/keep"),
        ])[..],
        &root,
    )
    .unwrap();

    assert!(!root.join("etc/gone").exists());
    assert!(root.join("etc/keep").is_dir());
    assert!(!root.join("var").exists());
    // Opaque: lower-layer contents gone, this layer's kept (even those written before the marker).
    assert!(!root.join("opt/old").exists());
    assert!(!root.join("opt/sub").exists());
    assert_eq!(fs::read(root.join("opt/new")).unwrap(), b"n");
    assert_eq!(fs::read(root.join("opt/sub2/implicit")).unwrap(), b"i");
    let bin = fs::symlink_metadata(root.join("bin")).unwrap();
    assert!(bin.is_file());
    assert_eq!(
        fs::metadata(root.join("opt/new"))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777,
        0o640
    );
}

#[test]
fn symlinks_stay_symlinks() {
    let tmp = tempfile::tempdir().unwrap();
    apply_tar(
        &layer(&[E::Link("sh", "/bin/busybox"), E::Link("rel", "../x")])[..],
        tmp.path(),
    )
    .unwrap();
    assert_eq!(
        fs::read_link(tmp.path().join("sh")).unwrap(),
        Path::new("/bin/busybox")
    );
    assert_eq!(
        fs::read_link(tmp.path().join("rel")).unwrap(),
        Path::new("../x")
    );
}

#[test]
fn path_traversal_refused() {
    for name in ["../escape", "a/../../escape", "/abs"] {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        fs::create_dir(&root).unwrap();
        let err = apply_tar(&raw_layer(name)[..], &root).unwrap_err();
        assert!(
            format!("{err:#}").contains("escapes the root"),
            "{name}: {err:#}"
        );
        assert!(!tmp.path().join("escape").exists());
    }
}

#[test]
fn writes_through_symlinks_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let outside = tmp.path().join("outside");
    fs::create_dir_all(&root).unwrap();
    fs::create_dir_all(&outside).unwrap();
    fs::write(outside.join("victim"), b"v").unwrap();
    symlink(&outside, root.join("link")).unwrap();
    assert!(apply_tar(&layer(&[E::File("link/new", b"x")])[..], &root).is_err());
    assert!(!outside.join("new").exists());
    assert!(apply_tar(&layer(&[E::File("link/.wh.victim", b"")])[..], &root).is_err());
    assert!(outside.join("victim").exists());
}

fn built_image(tmp: &Path) -> (std::path::PathBuf, oci_image::Manifest) {
    let rootfs = tmp.join("src");
    fs::create_dir_all(rootfs.join("usr/bin")).unwrap();
    fs::write(rootfs.join("usr/bin/tool"), b"tool").unwrap();
    fs::set_permissions(
        rootfs.join("usr/bin/tool"),
        fs::Permissions::from_mode(0o4755),
    )
    .unwrap();
    symlink("tool", rootfs.join("usr/bin/alias")).unwrap();
    let layout = tmp.join("layout");
    build_layout(&rootfs, &ImageConfig::default(), &layout, "t").unwrap();
    let (_, manifest) = read_layout(&layout).unwrap();
    (layout, manifest)
}

#[test]
fn unpack_image_round_trip() {
    let tmp = tempfile::tempdir().unwrap();
    let (layout, manifest) = built_image(tmp.path());
    let dest = tmp.path().join("rootfs/abc");
    unpack_image(&layout, &manifest.layers, &dest).unwrap();
    assert_eq!(fs::read(dest.join("usr/bin/tool")).unwrap(), b"tool");
    let meta = fs::metadata(dest.join("usr/bin/tool")).unwrap();
    assert_eq!(meta.mode() & 0o7777, 0o4755);
    assert_eq!(
        fs::read_link(dest.join("usr/bin/alias")).unwrap(),
        Path::new("tool")
    );
    assert_eq!(fs::metadata(&dest).unwrap().mode() & 0o777, 0o755);
    // No temp dirs left beside it.
    assert_eq!(fs::read_dir(tmp.path().join("rootfs")).unwrap().count(), 1);
}

#[test]
fn corrupted_layer_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (layout, manifest) = built_image(tmp.path());
    let blob = blob_path(&layout, &manifest.layers[0].digest);
    let mut bytes = fs::read(&blob).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x01;
    fs::set_permissions(&blob, fs::Permissions::from_mode(0o644)).unwrap();
    fs::write(&blob, bytes).unwrap();
    let dest = tmp.path().join("rootfs/abc");
    let err = unpack_image(&layout, &manifest.layers, &dest).unwrap_err();
    let msg = format!("{err:#}");
    assert!(msg.contains("digest mismatch"), "{msg}");
    assert!(
        msg.contains(&manifest.layers[0].digest.to_string()),
        "{msg}"
    );
    assert!(!dest.exists());
    assert_eq!(fs::read_dir(tmp.path().join("rootfs")).unwrap().count(), 0);
}
