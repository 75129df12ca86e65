#!/usr/bin/env bash
# Builds the operator image of the release named in release/previous, for the upgrade e2e:
# a checkout of that commit (from this clone's history) under the cache, its four controllers
# built in a target directory of their own (so a warm run builds nothing), and its own
# hack/operator-image.sh run there, so the image holds that release's code.
# Prints one line: <version> <image name>:<tag>@<digest> <layout dir> <checkout dir>
# Usage: hack/previous-image.sh [--no-build]
#   --no-build takes what an earlier run built (the e2e test passes it: `just e2e` builds
#   first, and a cargo started from a test would see the test's environment).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${VALKEY_OPERATOR_CACHE:-$HOME/.cache/valkey-operator}"
say() { printf 'previous-image: %s\n' "$*" >&2; }

read -r version commit < <(grep -v '^#' "$root/release/previous" | grep -v '^[[:space:]]*$' | head -n1)
[[ -n "${commit:-}" ]] || { say "release/previous names no commit"; exit 1; }
git -C "$root" cat-file -e "$commit^{commit}" 2>/dev/null ||
  { say "commit $commit of release $version is not in this clone's history"; exit 1; }

dir="$cache/previous/$version-${commit:0:12}"
src="$dir/src"
if [[ "$(git -C "$src" rev-parse HEAD 2>/dev/null)" != "$commit" ]]; then
  say "checking out $version ($commit)"
  rm -rf "$src"
  mkdir -p "$dir"
  git clone --quiet --no-checkout "$root" "$src"
  git -C "$src" checkout --quiet --detach "$commit"
fi

build=()
if [[ "${1:-}" == --no-build ]]; then
  build=(--no-build)
else
  say "building $version's controllers for release (once per release)"
fi
# Its own script, its own target directory: the binaries of this checkout stay untouched.
# The upgrade test checks that release's behaviour, not its code generation, so its release
# profile is built like image-test, without link-time optimisation, and dependencies at
# opt-level 1 too (they are built only here): the cold build of a new machine takes a third
# of the time (docs/benchmarks.md). The image tool is this checkout's (e2e/oci has not
# changed since 0.1.0; `just build` made it), so the old tree's is not built as well.
oci_image="${OCI_IMAGE:-${CARGO_TARGET_DIR:-$root/target}/debug/oci-image}"
[[ -x "$oci_image" ]] || { say "no $oci_image: run 'just build' first"; exit 1; }
line="$(cd "$src" && CARGO_TARGET_DIR="$dir/target" OCI_IMAGE="$oci_image" \
  CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_OPT_LEVEL=1 \
  CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 \
  bash hack/operator-image.sh "${build[@]}")"
echo "$version $line $src"
