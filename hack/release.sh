#!/usr/bin/env bash
# Makes everything a release publishes, into dist/ (git-ignored):
#   valkey-operator-VERSION.oci.tar   the operator image, an OCI layout (tar), and
#   image.txt                         its name: repository:VERSION@sha256:...
#   install.yaml                      CRDs and the `all` overlay, the image pinned by tag and digest
#   install-<overlay>.yaml            each other overlay, pinned the same way
#   crds.yaml                         the CRDs alone
#   monitoring.yaml                   the PodMonitor and the alerts' PrometheusRule (the
#                                     monitoring component); alerts.yaml, the same rules plain
#   dashboard.json                    the Grafana dashboard
#   valkey-operator-VERSION.tgz       the Helm chart, its image pinned the same way
#   kubectl-valkey-VERSION-linux-amd64.tar.gz
#                                     the kubectl plugin, a static binary (glibc with
#                                     crt-static, as the controllers are built)
#   sbom.cdx.json                     the image's SBOM (CycloneDX, from cargo metadata)
#   checksums.txt                     sha256 of each file above
# Usage: hack/release.sh VERSION [--image REPOSITORY:TAG@DIGEST]
#   VERSION is the workspace version in Cargo.toml (a leading v is dropped).
#   --image pins a pushed image instead of building one (the forge's workflow builds amd64
#   and arm64 with buildx and passes its digest); no OCI tar is written then.
# A tree with uncommitted changes is refused: a release names one commit.
# Environment: RELEASE_ALLOW_DIRTY=1 builds from a dirty tree anyway (for trying this script;
# the image and files then say -dirty and are not a release).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
say() { printf 'release: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

version="${1:-}"
shift || true
pushed=""
while (($#)); do
  case "$1" in
    --image) pushed="${2:?--image needs REPOSITORY:TAG@DIGEST}"; shift 2 ;;
    *) die "unknown argument $1" ;;
  esac
done
[[ -n "$version" ]] || die "usage: just release VERSION (e.g. $(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1))"
version="${version#v}"
[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] || die "$version is not a semantic version"
workspace="$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)"
[[ "$version" == "$workspace" ]] ||
  die "Cargo.toml says version $workspace: set [workspace.package] version to $version and commit first (the binaries report it)"
tag="$version"
if [[ -n "$(git status --porcelain)" ]]; then
  [[ "${RELEASE_ALLOW_DIRTY:-0}" == 1 ]] || die "uncommitted changes: a release names one commit (RELEASE_ALLOW_DIRTY=1 to try anyway)"
  tag="$version-dirty"
fi
PATH="$(bash hack/install-tools.sh --release):$PATH"
command -v python3 >/dev/null 2>&1 || die "python3 not found"

dist="$root/dist"
rm -rf "$dist"
mkdir -p "$dist"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

if [[ -n "$pushed" ]]; then
  image="$pushed"
else
  say "building the operator image $tag"
  read -r image layout < <(bash hack/operator-image.sh --tag "$tag" --profile release)
  tar -C "$layout" -cf "$dist/valkey-operator-$tag.oci.tar" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner .
fi
digest="${image##*@}"
repository="${image%@*}"
repository="${repository%:*}"
[[ "$image" == "$repository:$tag@sha256:"* && ${#digest} == 71 ]] || die "$image is not REPOSITORY:$tag@sha256:<64 hex>"
echo "$image" >"$dist/image.txt"

# Manifests: the overlays as they are, their one image pinned by tag and digest.
built=ghcr.io/valkey-operator/valkey-operator
pin() {
  local out="$1"
  sed "s|image: $built:latest\$|image: $image|" >"$out"
  grep -q "image: $image" "$out" || die "$(basename "$out"): no operator image to pin"
  ! grep -q "image: $built:latest" "$out" || die "$(basename "$out"): an image is still :latest"
}
kustomize build deploy/overlays/all | pin "$dist/install.yaml"
for dir in deploy/overlays/*/; do
  overlay="$(basename "$dir")"
  [[ "$overlay" == all ]] && continue
  kustomize build "$dir" | pin "$dist/install-$overlay.yaml"
done
kustomize build deploy/crds >"$dist/crds.yaml"
# A Component builds only from a Kustomization that includes it.
mkdir -p "$work/monitoring"
printf '%s\n' 'apiVersion: kustomize.config.k8s.io/v1beta1' 'kind: Kustomization' 'components:' \
  "  - $(realpath --relative-to="$work/monitoring" deploy/components/monitoring)" \
  >"$work/monitoring/kustomization.yaml"
kustomize build "$work/monitoring" >"$dist/monitoring.yaml"
cp deploy/monitoring/alerts.yaml "$dist/alerts.yaml"
cp deploy/monitoring/dashboard/valkey.json "$dist/dashboard.json"

# The chart, its version and image those of this release.
cp -r charts/valkey-operator "$work/chart"
sed -i -e "s/^version: .*/version: $version/" -e "s/^appVersion: .*/appVersion: $version/" "$work/chart/Chart.yaml"
sed -i -e "s|^  repository: .*|  repository: $repository|" -e "s|^  tag: \"\"|  tag: \"$tag\"|" \
  -e "s|^  digest: \"\"|  digest: \"$digest\"|" "$work/chart/values.yaml"
grep -q "^  digest: \"$digest\"" "$work/chart/values.yaml" || die "could not pin the chart's image digest"
helm lint --quiet --strict "$work/chart" >/dev/null
helm package "$work/chart" --destination "$dist" >/dev/null
[[ -f "$dist/valkey-operator-$version.tgz" ]] || die "helm package made no valkey-operator-$version.tgz"
rendered="$(helm template valkey-operator "$dist/valkey-operator-$version.tgz" --namespace valkey-operator-system)"
grep -q "image: $image" <<<"$rendered" || die "the packaged chart does not render $image"

# The kubectl plugin: built like the controllers (hack/operator-image.sh), statically linked
# so it runs on any x86_64 Linux, and checked to run before it is packed.
say "building the kubectl plugin"
triple=x86_64-unknown-linux-gnu
target_dir="${CARGO_TARGET_DIR:-$root/target}"
CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS="-C target-feature=+crt-static" \
  cargo build --quiet --release --locked --target "$triple" -p kubectl-valkey --bin kubectl-valkey
plugin="$target_dir/$triple/release/kubectl-valkey"
ldd "$plugin" 2>&1 | grep -qE 'statically linked|not a dynamic executable' || die "kubectl-valkey is not statically linked"
[[ "$("$plugin" --version)" == "kubectl valkey $version" ]] || die "kubectl-valkey --version does not say $version"
mkdir -p "$work/plugin"
cp "$plugin" "$work/plugin/kubectl-valkey"
tar -C "$work/plugin" -czf "$dist/kubectl-valkey-$version-linux-amd64.tar.gz" --sort=name --mtime=@0 \
  --owner=0 --group=0 --numeric-owner .

# The SBOM of what the image holds: the four controller binaries and every crate they link
# (build-time dependencies left out), for the image's target.
say "writing the SBOM"
find crates e2e -name '*_bin.cdx.json' -delete
SOURCE_DATE_EPOCH="$(git log -1 --format=%ct)" cargo cyclonedx --format json --spec-version 1.5 \
  --describe binaries --no-build-deps --target x86_64-unknown-linux-gnu -qq >&2
boms=()
for bin in node-controller service-controller topology-controller pvc-resizer; do
  boms+=("crates/$bin/${bin}_bin.cdx.json")
done
python3 hack/release-sbom.py "$dist/sbom.cdx.json" "$image" "$root" "${boms[@]}"
find crates e2e -name '*_bin.cdx.json' -delete

(cd "$dist" && sha256sum -- * | grep -v ' checksums.txt$' >checksums.txt)
say "dist/ holds $(ls "$dist" | wc -l) files for $image"
ls -l "$dist" >&2
