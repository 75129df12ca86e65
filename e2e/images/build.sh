#!/usr/bin/env bash
# Builds OCI image layouts of Valkey (one per version) from the Debian root
# filesystems of valkey-rootfs.sh, and of redis_exporter from exporter-rootfs.sh, with
# the `oci-image` CLI.
#
# Usage: e2e/images/build.sh [IMAGE...]  (default: 8.0 8.1 9.1 8.1-alpine exporter; run as root)
#
# stdout: one line per image, "<reference> <layout dir>" (valkey/valkey:<VERSION>,
# oliver006/redis_exporter:v<upstream version>); progress on stderr.
# Layouts land in
#   ${VALKEY_OPERATOR_CACHE:-$HOME/.cache/valkey-operator}/images/layouts/<name>-<key>/
# (<key> hashes the rootfs directory name, the image config, this script and the
# oci-image binary) and are skipped when present; <layout>.digest holds the
# manifest digest oci-image printed. oci-image is taken from $OCI_IMAGE, else PATH.
#
# The image config mirrors the official valkey/valkey image: ENTRYPOINT
# ["docker-entrypoint.sh"] (see valkey-rootfs.sh), CMD ["valkey-server"],
# WORKDIR /data, EXPOSE 6379/tcp, the usual PATH, no USER (root; pods set
# runAsUser 999, the valkey user in /etc/passwd). The exporter's mirrors the upstream
# image's: ENTRYPOINT ["/redis_exporter"], USER 59000:59000, EXPOSE 9121/tcp.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
self="$here/build.sh"
cache="${VALKEY_OPERATOR_CACHE:-$HOME/.cache/valkey-operator}"
say() { printf 'images: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }
# A command that fails outside a test ends the script (set -e): say which, never silently.
set -E
trap 'say "failed (exit $?) at line $LINENO: $BASH_COMMAND"' ERR

if (($#)); then versions=("$@"); else versions=(8.0 8.1 9.1 8.1-alpine exporter); fi
for v in "${versions[@]}"; do
  case "$v" in 8.0 | 8.1 | 9.1 | 8.1-alpine | exporter) ;; *) die "unknown IMAGE '$v' (want 8.0, 8.1, 9.1, 8.1-alpine or exporter)" ;; esac
done

oci_image="${OCI_IMAGE:-oci-image}"
oci_image_path=""

layouts="$cache/images/layouts"
mkdir -p "$layouts"

for v in "${versions[@]}"; do
  if [[ "$v" == exporter ]]; then
    rootfs="$("$here/exporter-rootfs.sh")"
    pkg_version="$(cat "$rootfs.version")"
    suite="$(cat "$rootfs.suite")"
    ref="oliver006/redis_exporter:v$pkg_version"
    name=exporter
    args=(
      --rootfs "$rootfs"
      --tag "$ref"
      --entrypoint '["/redis_exporter"]'
      --user 59000:59000
      --expose 9121/tcp
      --label "org.opencontainers.image.version=v$pkg_version"
      --label "org.opencontainers.image.source=Debian $suite prometheus-redis-exporter $pkg_version"
    )
  else
    rootfs="$("$here/valkey-rootfs.sh" "$v")"
    pkg_version="$(cat "$rootfs.version")"
    suite="$(cat "$rootfs.suite")"
    ref="valkey/valkey:$v"
    name="valkey-$v"
    userland=""
    [[ "$v" == *-alpine ]] && userland=", busybox userland"
    args=(
      --rootfs "$rootfs"
      --tag "$ref"
      --entrypoint '["docker-entrypoint.sh"]'
      --cmd '["valkey-server"]'
      --workdir /data
      --expose 6379/tcp
      --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
      --label "org.opencontainers.image.version=$pkg_version"
      --label "org.opencontainers.image.source=Debian $suite valkey-server $pkg_version$userland"
    )
  fi

  if [[ -z "$oci_image_path" ]]; then
    oci_image_path="$(command -v "$oci_image")" \
      || die "oci-image not found (set OCI_IMAGE or put it on PATH); the rootfs is ready at $rootfs"
    oci_image_sum="$(sha256sum "$oci_image_path" | cut -d' ' -f1)"
  fi

  key="$({ basename "$rootfs"; printf '%s\n' "${args[@]}"; echo "$oci_image_sum"; cat "$self"; } \
    | sha256sum | cut -c1-12)"
  out="$layouts/$name-$key"

  if [[ ! -d "$out" ]]; then
    exec 9>"$layouts/.$name.lock"
    flock 9
    if [[ ! -d "$out" ]]; then
      tmp="$layouts/.tmp-$name-$key-$$"
      rm -rf "$tmp"
      say "building $ref from $(basename "$rootfs") ($pkg_version, $suite)..."
      start=$SECONDS
      digest="$("$oci_image_path" build --out "$tmp" "${args[@]}")" \
        || { rm -rf "$tmp"; die "oci-image build failed for $ref"; }
      [[ -d "$tmp" ]] || die "oci-image build did not create $tmp"
      printf '%s\n' "$digest" >"$tmp.digest"
      mv -f "$tmp.digest" "$out.digest"
      mv -T "$tmp" "$out"
      say "built $ref in $((SECONDS - start))s: $digest"
    fi
    exec 9>&-
  else
    say "cached: $ref ($(cat "$out.digest" 2>/dev/null || echo '?'))"
  fi
  echo "$ref $out"
done
