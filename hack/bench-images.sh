#!/usr/bin/env bash
# Image figures for docs/benchmarks.md: per image, its compressed and unpacked size, the time
# to push it to an empty local registry, and the time the node agent's store takes to pull,
# verify and unpack it (cold: empty store; warm: already unpacked).
#
# Usage: hack/bench-images.sh   (after `just build`; builds the release image; prints a
# markdown table)
# Environment: OCI_IMAGE (default: the debug oci-image of CARGO_TARGET_DIR or target/).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target_dir="${CARGO_TARGET_DIR:-$root/target}"
oci_image="${OCI_IMAGE:-$target_dir/debug/oci-image}"
[[ -x "$oci_image" ]] || { echo "no $oci_image: run 'just build' first" >&2; exit 1; }
export OCI_IMAGE="$oci_image"

work="$(mktemp -d)"
registry_pid=""
cleanup() {
  [[ -n "$registry_pid" ]] && kill "$registry_pid" 2>/dev/null && wait "$registry_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

registry_bin="$(bash "$root/e2e/registry/build.sh")"
"$registry_bin" --listen 127.0.0.1:0 --blobs "$work/blobs" --addr-file "$work/addr" --quiet \
  2>"$work/registry.log" &
registry_pid=$!
for _ in $(seq 100); do [[ -s "$work/addr" ]] && break; sleep 0.1; done
url="http://$(cat "$work/addr")"

# name layout repository tag
images=()
while read -r ref layout; do
  images+=("$ref $layout ${ref%:*} ${ref##*:}")
done < <(bash "$root/e2e/images/build.sh")
# The image a release ships (hack/release.sh builds it so), not the e2e tests' build.
read -r op_ref op_layout < <(bash "$root/hack/operator-image.sh" --profile release)
op_name="${op_ref%@*}"
images+=("$op_name $op_layout valkey-operator/valkey-operator ${op_name##*:}")

now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

echo "| image | layer (gzip) | unpacked | push to an empty registry | cold pull + verify + unpack | warm (already unpacked) |"
echo "|---|---|---|---|---|---|"
for entry in "${images[@]}"; do
  read -r name layout repo tag <<<"$entry"
  layer_bytes=0
  for blob in "$layout"/blobs/sha256/*; do
    # The layer is the largest blob; config and manifest are a few hundred bytes.
    size=$(stat -c %s "$blob")
    ((size > layer_bytes)) && layer_bytes=$size
  done
  t0=$(now)
  "$oci_image" push --layout "$layout" --registry "$url" --repository "$repo" --tag "$tag" >/dev/null
  t1=$(now)
  store="$work/store-${repo//\//_}-$tag"
  rootfs="$("$oci_image" pull --registry "$url" --store "$store" "$repo:$tag")"
  t2=$(now)
  "$oci_image" pull --registry "$url" --store "$store" "$repo:$tag" >/dev/null
  t3=$(now)
  unpacked="$(du -sm "$rootfs" | cut -f1)"
  printf '| %s | %.1f MB | %s MB | %s s | %s s | %s s |\n' "$name" \
    "$(awk -v b="$layer_bytes" 'BEGIN { print b / 1e6 }')" "$unpacked" \
    "$(secs "$t0" "$t1")" "$(secs "$t1" "$t2")" "$(secs "$t2" "$t3")"
done
