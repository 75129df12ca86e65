#!/usr/bin/env bash
# prometheus-operator's own CRDs (PodMonitor, ServiceMonitor, PrometheusRule), taken from its
# Go module through the Go module proxy and checked against the digests below, so the e2e can
# install the real schemas (a PodMonitor topology-controller makes is admitted, pruned and
# validated by them). Prints the directory holding them on stdout; cached.
#
# Usage: hack/prometheus-operator-crds.sh
set -euo pipefail

version=v0.85.0
module=github.com/prometheus-operator/prometheus-operator
declare -A digests=(
  [monitoring.coreos.com_podmonitors.yaml]=8ce88c52c51209993511cae093089c9525f5552def88119e3f559123ee9d454b
  [monitoring.coreos.com_servicemonitors.yaml]=1dae27b7189b5ce7b9ab764656c18b4c75a45cde1e6f3af6a5e84c4317628919
  [monitoring.coreos.com_prometheusrules.yaml]=98fd16c9ab79fba8dcd6ef62c957c98cd6546ab74ce0a4ecf09ddf2fda03020e
)

cache="${VALKEY_OPERATOR_CACHE:-$HOME/.cache/valkey-operator}"
out="$cache/prometheus-operator/$version"

fresh() {
  for file in "${!digests[@]}"; do
    [[ -f "$out/$file" ]] || return 1
    [[ "$(sha256sum "$out/$file" | cut -d' ' -f1)" == "${digests[$file]}" ]] || return 1
  done
}

if ! fresh; then
  echo "prometheus-operator-crds: fetching $module@$version" >&2
  modcache="$(mktemp -d)"
  trap 'chmod -R u+w "$modcache" && rm -rf "$modcache"' EXIT
  dir="$(cd "$modcache" && GOMODCACHE="$modcache" GOFLAGS=-mod=mod \
    go mod download -json "$module@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  [[ -d "$dir" ]] || { echo "prometheus-operator-crds: $module@$version not downloaded" >&2; exit 1; }
  mkdir -p "$out"
  for file in "${!digests[@]}"; do
    cp "$dir/example/prometheus-operator-crd/$file" "$out/$file"
    chmod u+w "$out/$file"
  done
  fresh || { echo "prometheus-operator-crds: a CRD does not match its digest" >&2; exit 1; }
fi
echo "$out"
