#!/usr/bin/env bash
# Builds the root filesystem of a redis_exporter image from Debian forky's
# prometheus-redis-exporter package and prints its directory on stdout (progress on
# stderr). Run as root (ownership).
#
# Debian builds upstream's release with its Go; the binary links glibc only, so the
# root holds libc6 and the exporter, as /redis_exporter like the upstream image's, plus
# /etc/passwd with the upstream image's user (59000) and /tmp. Of the package's closure
# only those two packages are unpacked: the rest serves its maintainer scripts.
#
# Cached at ${VALKEY_OPERATOR_CACHE:-$HOME/.cache/valkey-operator}/images/rootfs/
# exporter-<key>/ (<key> hashes the .deb file names and this script), with
# <dir>.version (the upstream version, e.g. 1.86.0) and <dir>.suite next to it.
set -euo pipefail

say() { printf 'exporter-rootfs: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }
# A command that fails outside a test ends the script (set -e): say which, never silently.
set -E
trap 'say "failed (exit $?) at line $LINENO: $BASH_COMMAND"' ERR

[[ "$(id -u)" -eq 0 ]] || die "needs root (files owned by root)"
self="$(readlink -f "${BASH_SOURCE[0]}")"
cache="${VALKEY_OPERATOR_CACHE:-$HOME/.cache/valkey-operator}"
suite=forky
# shellcheck source=debian.sh
. "$(dirname "$self")/debian.sh"
debian_closure "$suite" "$suite" prometheus-redis-exporter
exporter_deb="$(printf '%s\n' "${debs[@]}" | grep '^prometheus-redis-exporter_')" \
  || die "closure lacks prometheus-redis-exporter"
libc_deb="$(printf '%s\n' "${debs[@]}" | grep '^libc6_')" || die "closure lacks libc6"
# 1.86.0-1 -> 1.86.0 (the Debian revision and any epoch dropped).
version="$(sed 's/^prometheus-redis-exporter_\(.*\)_[^_]*\.deb$/\1/; s/^[0-9]*%3a//; s/-[^-]*$//' <<<"$exporter_deb")"

key="$({ echo "$exporter_deb"; echo "$libc_deb"; cat "$self"; } | sha256sum | cut -c1-12)"
out="$cache/images/rootfs/exporter-$key"
if [[ -d "$out" ]]; then
  say "cached: redis_exporter $version ($suite)"
  echo "$out"
  exit 0
fi
debian_download

mkdir -p "$cache/images/rootfs"
tmp="$(mktemp -d "$cache/images/rootfs/.tmp-exporter-XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
root="$tmp/root"
t0=$SECONDS
mkdir -p "$root"/usr/{bin,lib,lib64}
for l in bin lib lib64; do ln -s "usr/$l" "$root/$l"; done
for d in "$libc_deb" "$exporter_deb"; do
  dpkg-deb --fsys-tarfile "$archives/$d" | tar -x --keep-directory-symlink -C "$root"
done
if [[ ! -e "$root/usr/lib64/ld-linux-x86-64.so.2" ]]; then
  ln -sf ../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$root/usr/lib64/ld-linux-x86-64.so.2"
fi
ln -s usr/bin/prometheus-redis-exporter "$root/redis_exporter"
mkdir -p "$root/etc" "$root/tmp"
printf '%s\n' 'root:x:0:0:root:/:/nonexistent' 'exporter:x:59000:59000:redis_exporter:/:/nonexistent' >"$root/etc/passwd"
printf '%s\n' 'root:x:0:' 'exporter:x:59000:' >"$root/etc/group"
chmod 0644 "$root/etc/passwd" "$root/etc/group"
chmod 1777 "$root/tmp"
rm -rf "$root"/usr/share/{doc,man,info,locale,lintian,bug} "$root"/usr/lib/systemd \
  "$root"/etc/{systemd,init.d,default,logrotate.d}

got="$(chroot "$root" /redis_exporter --version 2>&1)" || die "redis_exporter does not run in the new rootfs: $got"
[[ "$got" == *"Exporter $version"* ]] || die "expected redis_exporter $version, got: $got"

printf '%s\n' "$version" >"$tmp/version"
printf '%s\n' "$suite" >"$tmp/suite"
mv -f "$tmp/version" "$out.version"
mv -f "$tmp/suite" "$out.suite"
mv -T "$root" "$out" 2>/dev/null || [[ -d "$out" ]] || die "cannot move rootfs into $out"
say "built $out in $((SECONDS - t0))s ($(du -sh "$out" | cut -f1)): $got"
echo "$out"
