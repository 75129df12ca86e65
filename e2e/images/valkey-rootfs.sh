#!/usr/bin/env bash
# Builds a minimal Valkey root filesystem from Debian packages and prints its
# directory on stdout (progress on stderr).
#
# Usage: e2e/images/valkey-rootfs.sh VERSION      (run as root: chroot, ownership)
#   VERSION     Debian suite           valkey-server
#   8.0         bookworm-backports     8.0.x
#   8.1         trixie                 8.1.x
#   9.1         forky                  9.1.x
#   8.1-alpine  trixie                 8.1.x, with busybox as the whole userland
#
# 8.1-alpine stands in for the official Alpine variant (valkey/valkey:8.1-alpine): the
# same Valkey binaries, but sh, awk, sed, grep, timeout, sha256sum and the rest are
# busybox applets (no dash, bash, coreutils, grep, sed, mawk or findutils), so the
# operator's scripts are proven to need nothing GNU-only (docs/images.md). Its libc stays
# glibc: what differs for the scripts is the userland, not the C library.
#
# How: a private apt state per suite (never the host's) under
#   ${VALKEY_OPERATOR_CACHE:-$HOME/.cache/valkey-operator}/images/apt/<suite>/
# resolves the dependency closure of valkey-server, valkey-sentinel, valkey-tools
# and a small shell userland against an empty dpkg status, downloads it
# (--download-only), and unpacks every .deb with dpkg-deb into a merged-/usr tree.
# Maintainer scripts do not run; what they would have set up (sh, awk, loader
# link, the valkey user, /data, /tmp) is created here. Docs, man pages, locales
# and systemd units are dropped.
#
# The index is refreshed at most once a day (stamp file), so warm runs need no
# network. The result is cached at
#   ${cache}/images/rootfs/valkey-<VERSION>-<key>/
# with <key> hashing the sorted .deb file names (they carry versions) and this
# script; sidecar files <dir>.version (valkey-server package version), <dir>.suite
# and <dir>.packages sit next to it. A warm run with an existing key prints the
# path without extracting anything.
set -euo pipefail

say() { printf 'valkey-rootfs: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }
# A command that fails outside a test ends the script (set -e): say which, never silently.
set -E
trap 'say "failed (exit $?) at line $LINENO: $BASH_COMMAND"' ERR

(($# == 1)) || die "usage: $0 VERSION   (8.0, 8.1, 9.1 or 8.1-alpine)"
version="$1"
flavor=debian
case "$version" in 8.1-alpine) flavor=busybox; version=8.1 ;; esac
# hints: packages that steer apt to the small alternative of an "A | B" dependency
# (bookworm: usr-is-merged instead of usrmerge, which pulls in all of perl; forky:
# standalone sysusers/tmpfiles instead of the whole of systemd).
case "$version" in
  8.0) suite=bookworm-backports; suites="bookworm bookworm-backports"; hints=(usr-is-merged) ;;
  8.1) suite=trixie; suites="trixie"; hints=() ;;
  9.1) suite=forky; suites="forky"; hints=(systemd-standalone-sysusers systemd-standalone-tmpfiles) ;;
  *) die "unknown VERSION '$version' (want 8.0, 8.1 or 9.1)" ;;
esac
[[ "$(id -u)" -eq 0 ]] || die "needs root (files owned by root and 999, chroot checks)"

self="$(readlink -f "${BASH_SOURCE[0]}")"
cache="${VALKEY_OPERATOR_CACHE:-$HOME/.cache/valkey-operator}"
# libc-bin: ldconfig and the C.UTF-8 locale (valkey-server exits with "Failed to
# configure LOCALE" when LANG names a locale the image lacks, e.g. LANG=C.UTF-8).
userland=(dash bash coreutils grep sed mawk findutils)
if [[ "$flavor" == busybox ]]; then
  pkgs=(valkey-server valkey-sentinel valkey-tools busybox libc-bin "${hints[@]}")
else
  pkgs=(valkey-server valkey-sentinel valkey-tools "${userland[@]}" libc-bin "${hints[@]}")
fi

# --- The packages (e2e/images/debian.sh: private apt state, closure, download) ------
# shellcheck source=debian.sh
. "$(dirname "$self")/debian.sh"
debian_closure "$suite" "$suites" "${pkgs[@]}"
[[ " ${debs[*]} " == *" libc6_"* ]] || die "closure lacks libc6: ${debs[*]}"
server_deb="$(printf '%s\n' "${debs[@]}" | grep '^valkey-server_')" || die "closure lacks valkey-server"
pkg_version="$(sed 's/^valkey-server_\(.*\)_[^_]*\.deb$/\1/; s/%3a/:/g' <<<"$server_deb")"

name="valkey-$version"
[[ "$flavor" == busybox ]] && name="valkey-$version-alpine"
key="$({ printf '%s\n' "${debs[@]}" "$flavor"; cat "$self"; } | sha256sum | cut -c1-12)"
out="$cache/images/rootfs/$name-$key"
if [[ -d "$out" ]]; then
  say "cached: valkey-server $pkg_version ($suite)"
  echo "$out"
  exit 0
fi

debian_download

# --- Unpack into a temp dir, then rename into place -------------------------------
mkdir -p "$cache/images/rootfs"
tmp="$(mktemp -d "$cache/images/rootfs/.tmp-valkey-$version-XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
root="$tmp/root"
say "unpacking ${#debs[@]} packages (valkey-server $pkg_version, $suite)..."
t0=$SECONDS
mkdir -p "$root"/usr/{bin,sbin,lib,lib64}
for l in bin sbin lib lib64; do ln -s "usr/$l" "$root/$l"; done
# The debian userland (and the tools of the packages that pull it in: adduser, passwd,
# debianutils) is left out of the busybox flavour, so no GNU tool hides behind an applet.
skip=" ${userland[*]} adduser passwd debianutils "
for d in "${debs[@]}"; do
  if [[ "$flavor" == busybox && "$skip" == *" ${d%%_*} "* ]]; then continue; fi
  dpkg-deb --fsys-tarfile "$archives/$d" | tar -x --keep-directory-symlink -C "$root"
done

# What maintainer scripts / alternatives would have created.
if [[ "$flavor" == busybox ]]; then
  # Every applet as a link, as Alpine's busybox package installs them.
  for applet in $(chroot "$root" /usr/bin/busybox --list); do
    [[ -e "$root/usr/bin/$applet" || -e "$root/usr/sbin/$applet" ]] || ln -s busybox "$root/usr/bin/$applet"
  done
fi
[[ -e "$root/usr/bin/sh" ]] || ln -s dash "$root/usr/bin/sh"
[[ -e "$root/usr/bin/awk" ]] || ln -s mawk "$root/usr/bin/awk"
if [[ ! -e "$root/usr/lib64/ld-linux-x86-64.so.2" ]]; then
  ln -sf ../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$root/usr/lib64/ld-linux-x86-64.so.2"
fi
mkdir -p "$root/etc" "$root/data" "$root/tmp" "$root/root" "$root/run" "$root/var/tmp" "$root/dev"
cat >"$root/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
valkey:x:999:999:Valkey:/data:/usr/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
EOF
cat >"$root/etc/group" <<'EOF'
root:x:0:
valkey:x:999:
nogroup:x:65534:
EOF
[[ -e "$root/usr/sbin/nologin" ]] || sed -i 's|/usr/sbin/nologin$|/bin/false|' "$root/etc/passwd"
chmod 0644 "$root/etc/passwd" "$root/etc/group"
chown 999:999 "$root/data" && chmod 0755 "$root/data"
chmod 1777 "$root/tmp" "$root/var/tmp"
chmod 0700 "$root/root"

# The official image's entrypoint contract: options or a config file as the first argument
# run valkey-server with them; a 0022 umask becomes 0077. (Its drop from root to the valkey
# user is left out: no setpriv here, and the operator's pods run as 999 already.)
mkdir -p "$root/usr/local/bin"
printf '%s\n' '#!/bin/sh' 'set -e' \
  'if [ "${1#-}" != "$1" ] || [ "${1%.conf}" != "$1" ]; then' \
  '	set -- valkey-server "$@"' 'fi' \
  "if [ \"\$(umask)\" = '0022' ]; then" '	umask 0077' 'fi' 'exec "$@"' \
  >"$root/usr/local/bin/docker-entrypoint.sh"
chmod 0755 "$root/usr/local/bin/docker-entrypoint.sh"

# Slim down: docs, man/info pages, locales, systemd units and SysV init scripts.
rm -rf "$root"/usr/share/{doc,man,info,locale,lintian,bug} \
  "$root"/usr/lib/systemd "$root"/etc/systemd "$root"/etc/init.d
# A loader cache, as libc-bin's trigger would build (libs also resolve without it).
if [[ -x "$root/usr/sbin/ldconfig" ]]; then chroot "$root" /usr/sbin/ldconfig || true; fi

# Sanity checks before publishing.
got="$(chroot "$root" /usr/bin/valkey-server --version)" || die "valkey-server does not run in the new rootfs"
[[ "$got" == *"v=$version."* ]] || die "expected valkey $version.x, got: $got"
chroot "$root" /bin/sh -c 'valkey-cli --version >/dev/null && echo x | awk "{print}" >/dev/null' \
  || die "shell/valkey-cli/awk do not work in the new rootfs"
if [[ "$flavor" == busybox ]]; then
  for tool in sh awk sed grep timeout sha256sum date sort head tr wc cut cat tee sleep; do
    [[ "$(readlink -f "$root/usr/bin/$tool")" == "$root/usr/bin/busybox" ]] \
      || die "$tool is not busybox's in the busybox rootfs: $(readlink -f "$root/usr/bin/$tool")"
  done
  for gnu in bash dash mawk gawk; do
    [[ ! -e "$root/usr/bin/$gnu" ]] || die "the busybox rootfs has $gnu"
  done
fi

printf '%s\n' "$pkg_version" >"$tmp/version"
printf '%s\n' "$suite" >"$tmp/suite"
printf '%s\n' "${debs[@]}" >"$tmp/packages"
mv -f "$tmp/version" "$out.version"
mv -f "$tmp/suite" "$out.suite"
mv -f "$tmp/packages" "$out.packages"
mv -T "$root" "$out" 2>/dev/null || [[ -d "$out" ]] || die "cannot move rootfs into $out"
say "built $out in $((SECONDS - t0))s ($(du -sh "$out" | cut -f1), $flavor userland): $got"
echo "$out"
