#!/usr/bin/env bash
# Validates every manifest a release ships against strict schemas, offline: each kustomize
# overlay, deploy/crds, the samples, and the Helm chart rendered with its defaults, with each
# overlay's values and with every switch on. Kubernetes' own kinds against the strict schemas
# of the oldest Kubernetes the operator supports (1.30) and of the local cluster's (1.36),
# from the PyPI package kubernetes-validate; ours against schemas made from deploy/crds
# (hack/crd-schemas.py). A field that is misspelt, misplaced or of the wrong type fails.
# Kinds with no schema here fail too, except ServiceMonitor and PrometheusRule
# (prometheus-operator's CRDs are not ours to ship; the chart renders a ServiceMonitor only
# when asked, deploy/components/monitoring the rules; hack/alerts-check.sh checks those).
# Usage: hack/kubeconform-check.sh. Needs kubeconform, kustomize, helm (hack/install-tools.sh)
# and python3 with PyYAML.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${VALKEY_OPERATOR_CACHE:-$HOME/.cache/valkey-operator}"
validate_version=1.37.0
kube_versions=(1.30.0 1.36.0)
say() { printf 'kubeconform-check: %s\n' "$*"; }

schemas="$cache/schemas/kubernetes-validate-$validate_version"
if [[ ! -d "$schemas/v${kube_versions[-1]}-local-strict" ]]; then
  say "fetching the schemas (PyPI kubernetes-validate $validate_version, once)"
  wheel="$(mktemp -d)"
  python3 -m pip download --quiet --no-deps --dest "$wheel" "kubernetes-validate==$validate_version"
  rm -rf "$schemas.partial"
  mkdir -p "$schemas.partial"
  python3 "$root/hack/k8s-schemas.py" "$wheel"/kubernetes_validate-*.whl "$schemas.partial" "${kube_versions[@]}"
  rm -rf "$wheel" "$schemas"
  mv "$schemas.partial" "$schemas"
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 "$root/hack/crd-schemas.py" "$tmp/crds" "$root"/deploy/crds/valkey*.yaml

mkdir -p "$tmp/in"
for dir in "$root"/deploy/overlays/*/ "$root/deploy/crds" "$root/deploy/samples"; do
  kustomize build "$dir" >"$tmp/in/kustomize-$(basename "$dir").yaml"
done
chart="$root/charts/valkey-operator"
helm template valkey-operator "$chart" --namespace valkey-operator-system >"$tmp/in/chart-defaults.yaml"
for values in "$chart"/ci/*-values.yaml; do
  helm template valkey-operator "$chart" --namespace valkey-operator-system -f "$values" \
    >"$tmp/in/chart-$(basename "$values" .yaml).yaml"
done
helm template valkey-operator "$chart" --namespace valkey-operator-system -f "$chart/ci/every-switch.yaml" \
  >"$tmp/in/chart-everything.yaml"

for version in "${kube_versions[@]}"; do
  kubeconform -strict -summary -output text \
    -kubernetes-version "$version" \
    -schema-location "$schemas/{{ .NormalizedKubernetesVersion }}-local-strict/{{ .ResourceKind }}{{ .KindSuffix }}.json" \
    -schema-location "$tmp/crds/{{ .ResourceKind }}{{ .KindSuffix }}.json" \
    -skip ServiceMonitor,PodMonitor,PrometheusRule \
    "$tmp"/in/*.yaml | sed "s/^/  [$version] /"
  say "ok   every manifest against Kubernetes $version"
done
