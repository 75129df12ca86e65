#!/usr/bin/env bash
# Checks the Helm chart against the kustomize overlays so the two cannot drift:
#   * `helm lint` with the defaults and with each overlay's values;
#   * for each overlay in deploy/overlays, `helm template` with charts/valkey-operator/ci/
#     <overlay>-values.yaml must render the same objects as `kustomize build` of it, field
#     for field. Two differences are by design and taken out before comparing: the chart
#     renders no Namespace (Helm installs into the release's), and its CRDs carry
#     helm.sh/resource-policy: keep (uninstall must not delete every Valkey object);
#   * a render with every switch on must build and pass deploy/verify.sh's pod checks.
# Usage (from anywhere): hack/chart-check.sh. Needs helm, kustomize and python3 with PyYAML.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
chart="$root/charts/valkey-operator"
namespace=valkey-operator-system
say() { printf 'chart-check: %s\n' "$*"; }
for tool in helm kustomize python3; do
  command -v "$tool" >/dev/null 2>&1 || { say "error: $tool not found (hack/install-tools.sh installs helm and kustomize)"; exit 1; }
done

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# The chart's CRDs are deploy/crds; `just crds` writes both.
for crd in "$root"/deploy/crds/valkey*.yaml; do
  cmp -s "$crd" "$chart/files/crds/$(basename "$crd")" ||
    { say "error: $chart/files/crds/$(basename "$crd") differs from deploy/crds: run 'just crds'"; exit 1; }
done

helm lint --quiet --strict "$chart" >"$tmp/lint" 2>&1 || { cat "$tmp/lint"; say "error: helm lint failed"; exit 1; }
say "ok   helm lint (defaults)"

failures=0
for values in "$chart"/ci/*-values.yaml; do
  overlay="$(basename "$values" -values.yaml)"
  [[ -d "$root/deploy/overlays/$overlay" ]] || { say "error: $values names no overlay deploy/overlays/$overlay"; exit 1; }
  helm lint --quiet --strict "$chart" -f "$values" >"$tmp/lint" 2>&1 ||
    { cat "$tmp/lint"; say "FAIL helm lint with ci/$(basename "$values")"; failures=$((failures + 1)); continue; }
  helm template valkey-operator "$chart" --namespace "$namespace" -f "$values" >"$tmp/chart.yaml"
  kustomize build "$root/deploy/overlays/$overlay" >"$tmp/overlay.yaml"
  if python3 "$root/hack/chart-compare.py" "$tmp/overlay.yaml" "$tmp/chart.yaml"; then
    say "ok   chart with ci/$(basename "$values") renders deploy/overlays/$overlay"
  else
    say "FAIL chart with ci/$(basename "$values") differs from deploy/overlays/$overlay (above)"
    failures=$((failures + 1))
  fi
done

# Every switch on: it must render, and the pods stay restricted.
helm template valkey-operator "$chart" --namespace "$namespace" -f "$chart/ci/every-switch.yaml" \
  >"$tmp/everything.yaml"
python3 "$root/hack/chart-compare.py" --check-everything "$tmp/everything.yaml" || failures=$((failures + 1))

# A list of namespaces (and the older single watchNamespace, added to it): each
# controller's role bound in each namespace, none cluster-wide, and the list in its env.
helm template valkey-operator "$chart" --namespace "$namespace" \
  --set 'watchNamespaces={team-b,team-a}' --set watchNamespace=team-c >"$tmp/listed.yaml"
if python3 "$root/hack/chart-compare.py" --check-watched team-a,team-b,team-c "$tmp/listed.yaml"; then
  say "ok   watchNamespaces binds every controller in each namespace only"
else
  say "FAIL watchNamespaces (above)"; failures=$((failures + 1))
fi

# values.schema.json: a misspelt or malformed value is refused by name.
refused() {
  local want="$1"; shift
  if helm template valkey-operator "$chart" "$@" >/dev/null 2>"$tmp/err"; then
    say "FAIL $* rendered"; failures=$((failures + 1))
  elif ! grep -qF "$want" "$tmp/err"; then
    cat "$tmp/err"; say "FAIL $*: not refused for $want"; failures=$((failures + 1))
  else
    say "ok   $* is refused ($want)"
  fi
}
refused "additional properties 'watchNamespce' not allowed" --set watchNamespce=apps
refused "/image/digest" --set image.digest=abc
refused "/topologyController/replicas" --set topologyController.replicas=0

((failures == 0)) || { say "$failures failure(s)"; exit 1; }
say "all checks passed"
