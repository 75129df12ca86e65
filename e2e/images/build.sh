#!/usr/bin/env bash
# Builds OCI image layouts of Valkey (one per version) from the Debian root
# filesystems of valkey-rootfs.sh, with the `oci-image` CLI.
#
# Usage: e2e/images/build.sh [VERSION...]     (default: 8.0 8.1 9.1; run as root)
#
# stdout: one line per image, "valkey/valkey:<VERSION> <layout dir>"; progress on stderr.
# Layouts land in
#   ${VALKEY_OPERATOR_CACHE:-$HOME/.cache/valkey-operator}/images/layouts/valkey-<VERSION>-<key>/
# (<key> hashes the rootfs directory name, the image config, this script and the
# oci-image binary) and are skipped when present; <layout>.digest holds the
# manifest digest oci-image printed. oci-image is taken from $OCI_IMAGE, else PATH.
#
# The image config mirrors the official valkey/valkey image: ENTRYPOINT
# ["docker-entrypoint.sh"] (see valkey-rootfs.sh), CMD ["valkey-server"],
# WORKDIR /data, EXPOSE 6379/tcp, the usual PATH, no USER (root; pods set
# runAsUser 999, the valkey user in /etc/passwd).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
self="$here/build.sh"
cache="${VALKEY_OPERATOR_CACHE:-$HOME/.cache/valkey-operator}"
say() { printf 'images: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

if (($#)); then versions=("$@"); else versions=(8.0 8.1 9.1); fi
for v in "${versions[@]}"; do
  case "$v" in 8.0 | 8.1 | 9.1) ;; *) die "unknown VERSION '$v' (want 8.0, 8.1 or 9.1)" ;; esac
done

oci_image="${OCI_IMAGE:-oci-image}"
oci_image_path=""

layouts="$cache/images/layouts"
mkdir -p "$layouts"

for v in "${versions[@]}"; do
  rootfs="$("$here/valkey-rootfs.sh" "$v")"
  pkg_version="$(cat "$rootfs.version")"
  suite="$(cat "$rootfs.suite")"
  ref="valkey/valkey:$v"

  args=(
    --rootfs "$rootfs"
    --tag "$ref"
    --entrypoint '["docker-entrypoint.sh"]'
    --cmd '["valkey-server"]'
    --workdir /data
    --expose 6379/tcp
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
    --label "org.opencontainers.image.version=$pkg_version"
    --label "org.opencontainers.image.source=Debian $suite valkey-server $pkg_version"
  )

  if [[ -z "$oci_image_path" ]]; then
    oci_image_path="$(command -v "$oci_image")" \
      || die "oci-image not found (set OCI_IMAGE or put it on PATH); the rootfs is ready at $rootfs"
    oci_image_sum="$(sha256sum "$oci_image_path" | cut -d' ' -f1)"
  fi

  key="$({ basename "$rootfs"; printf '%s\n' "${args[@]}"; echo "$oci_image_sum"; cat "$self"; } \
    | sha256sum | cut -c1-12)"
  out="$layouts/valkey-$v-$key"

  if [[ ! -d "$out" ]]; then
    exec 9>"$layouts/.valkey-$v.lock"
    flock 9
    if [[ ! -d "$out" ]]; then
      tmp="$layouts/.tmp-valkey-$v-$key-$$"
      rm -rf "$tmp"
      say "building $ref from $(basename "$rootfs") (valkey-server $pkg_version, $suite)..."
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
