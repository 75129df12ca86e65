#!/usr/bin/env bash
# Builds the operator image without a Docker daemon: the four controllers, statically
# linked (glibc with crt-static), in an OCI image layout whose file tree and config come from
# the Dockerfile's own declarations (--bin list, COPY destination, USER, EXPOSE, LABEL), so the
# two cannot drift apart. Then runs every binary from the image's root and checks its version
# output.
#
# Usage: hack/operator-image.sh [--no-build] [--push REGISTRY_URL] [--tag TAG] [--profile P]
#   Prints one line: <image name>:<tag>@<manifest digest> <layout dir>
#   --no-build takes the binaries a previous run built (the local cluster passes it: `just
#   up` and `just e2e` build first, and a cargo started from a test would see the test's
#   environment and could rebuild everything).
#   With --push, the image is pushed to REGISTRY_URL (e.g. http://127.0.0.1:5000) under the
#   same repository path, as a registry mirror would serve it.
#   --tag names the image (a release's version); default <version>-<commit>[-dirty].
#   --profile is cargo's: `release` for a release (hack/release.sh); default `image-test`,
#   the image the e2e tests and `just up` run (Cargo.toml says how it differs).
# Environment: OCI_IMAGE (the oci-image binary; default: built with cargo), CARGO_TARGET_DIR.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${VALKEY_OPERATOR_CACHE:-$HOME/.cache/valkey-operator}"
target_dir="${CARGO_TARGET_DIR:-$root/target}"
triple=x86_64-unknown-linux-gnu
say() { printf 'operator-image: %s\n' "$*" >&2; }

push=""
build=1
tag=""
profile=image-test
while (($#)); do
  case "$1" in
    --push) push="${2:?--push needs a registry URL}"; shift 2 ;;
    --no-build) build=0; shift ;;
    --tag) tag="${2:?--tag needs a tag}"; shift 2 ;;
    --profile) profile="${2:?--profile needs a cargo profile}"; shift 2 ;;
    *) echo "usage: $0 [--no-build] [--push REGISTRY_URL] [--tag TAG] [--profile P]" >&2; exit 2 ;;
  esac
done

dockerfile="$root/Dockerfile"
# The Dockerfile's declarations.
mapfile -t bins < <(sed -n 's/^[[:space:]]*--bin \([a-z-]*\) .*/\1/p' "$dockerfile")
dest="$(sed -n 's|^COPY --from=builder /out/ \(/[^ ]*[^/]\)/*$|\1|p' "$dockerfile")"
user="$(sed -n 's/^USER \([0-9:]*\)$/\1/p' "$dockerfile")"
mapfile -t exposed < <(sed -n 's/^EXPOSE \([0-9]*\)$/\1/p' "$dockerfile")
((${#bins[@]} == 4)) && [[ -n "$dest" && -n "$user" && ${#exposed[@]} -ge 1 ]] || {
  say "cannot read the binaries, COPY destination, USER and EXPOSE from $dockerfile"
  exit 1
}

version="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/Cargo.toml" | head -n1)"
revision="$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)"
[[ -z "$(git -C "$root" status --porcelain 2>/dev/null)" ]] || revision="$revision-dirty"
if [[ -z "$tag" ]]; then
  tag="$version-${revision:0:12}"
  [[ "$revision" == *-dirty ]] && tag="$tag-dirty"
fi

# LABEL lines of the final stage, with VERSION and REVISION filled in.
mapfile -t labels < <(
  awk '/^LABEL /{on=1} on{print} on && !/\\$/{on=0}' "$dockerfile" \
    | sed -e 's/^LABEL //' -e 's/\\$//' -e 's/^[[:space:]]*//' -e '/^$/d' \
    | sed -e "s/\${VERSION}/$version/" -e "s/\${REVISION}/$revision/" \
    | sed -e 's/="\(.*\)"[[:space:]]*$/=\1/'
)

out="$target_dir/$triple/$profile"
oci_image="${OCI_IMAGE:-$target_dir/debug/oci-image}"
if ((build)); then
  say "building ${bins[*]} with profile $profile ($triple, crt-static)"
  (
    cd "$root"
    CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS="-C target-feature=+crt-static" \
      cargo build --quiet --profile "$profile" --locked --target "$triple" $(printf -- '--bin %s ' "${bins[@]}")
    [[ -n "${OCI_IMAGE:-}" ]] || cargo build --quiet -p oci-image --bin oci-image
  )
fi
for b in "${bins[@]}"; do
  [[ -x "$out/$b" ]] || { say "no $out/$b: run 'just image' first"; exit 1; }
done
[[ -x "$oci_image" ]] || { say "no $oci_image: run 'just build' first"; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
rootfs="$work/rootfs"
# distroless/static's nonroot tree: users, a writable /tmp and the nonroot home.
mkdir -p "$rootfs/etc" "$rootfs/tmp" "$rootfs/home/nonroot" "$rootfs$dest"
chmod 1777 "$rootfs/tmp"
chown 65532:65532 "$rootfs/home/nonroot"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$rootfs/etc/passwd"
printf 'root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n' >"$rootfs/etc/group"
for b in "${bins[@]}"; do
  if ! ldd "$out/$b" 2>&1 | grep -qE 'statically linked|not a dynamic executable'; then
    say "$out/$b is dynamically linked; the image needs static binaries"
    exit 1
  fi
  install -m 0755 "$out/$b" "$rootfs$dest/$b"
done

# Each binary runs from the image's root (no libc there) and reports this version.
for b in "${bins[@]}"; do
  got="$(chroot --userspec="$user" "$rootfs" "$dest/$b" --version)"
  [[ "$got" == "$b $version" ]] || { say "$b --version printed '$got', want '$b $version'"; exit 1; }
done

args=(build --rootfs "$rootfs" --out "$work/layout" --tag "$tag" --user "$user")
for p in "${exposed[@]}"; do args+=(--expose "$p/tcp"); done
for l in "${labels[@]}"; do args+=(--label "$l"); done
digest="$("$oci_image" "${args[@]}")"
# Keyed by digest and never replaced in place: the e2e lanes assemble the image at the same
# time and push from this directory, so it is renamed into place whole, once.
layouts="$cache/images/layouts"
layout="$layouts/operator-$tag-${digest:7:12}"
mkdir -p "$layouts"
if [[ ! -d "$layout" ]]; then
  partial="$layout.partial.$$"
  mv "$work/layout" "$partial"
  mv -T "$partial" "$layout" 2>/dev/null || rm -rf "$partial"
  # Older builds of this tag (a dirty tree rebuilt) are stale.
  for old in "$layouts/operator-$tag-"????????????; do
    [[ "$old" == "$layout" || "$old" == *.partial.* ]] || rm -rf "$old"
  done
fi

name=ghcr.io/valkey-operator/valkey-operator
if [[ -n "$push" ]]; then
  "$oci_image" push --layout "$layout" --registry "$push" \
    --repository valkey-operator/valkey-operator --tag "$tag" >/dev/null
fi
echo "$name:$tag@$digest $layout"
