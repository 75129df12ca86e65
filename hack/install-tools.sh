#!/usr/bin/env bash
# Installs the tools `just test` needs, into a cache outside the clone so a warm run installs
# nothing: rustfmt and clippy (rustup), just and cargo-deny (crates.io), kustomize, helm,
# actionlint and kubeconform (Go module proxy), promtool and prometheus (Debian forky's
# packages, through e2e/images/prometheus.sh; needs root), and kubectl (built from the pinned Kubernetes sources)
# when the machine has none within one minor version of the local cluster's API server. With
# --release, also what `just release` needs: cargo-cyclonedx (crates.io).
# Prints the directory to put on PATH. Idempotent.
set -euo pipefail

cache="${VALKEY_OPERATOR_CACHE:-$HOME/.cache/valkey-operator}"
bin="$cache/bin"
just_version="1.43.1"
kustomize_version="v5.7.1"
helm_version="v4.3.2"
actionlint_version="v1.7.12"
kubeconform_version="v0.7.0"
cyclonedx_version="0.5.9"
deny_version="0.20.2"
mkdir -p "$bin"

say() { printf 'install-tools: %s\n' "$*" >&2; }

if command -v rustup >/dev/null 2>&1; then
  missing=()
  rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || missing+=(rustfmt)
  rustup component list --installed 2>/dev/null | grep -q '^clippy' || missing+=(clippy)
  if [ ${#missing[@]} -gt 0 ]; then
    say "adding rust components: ${missing[*]}"
    rustup component add "${missing[@]}" >&2
  fi
fi

if ! PATH="$bin:$PATH" command -v just >/dev/null 2>&1; then
  say "building just $just_version (about two minutes, once)"
  cargo install --locked --quiet --root "$cache" just --version "$just_version" >&2
fi

if ! PATH="$bin:$PATH" command -v kustomize >/dev/null 2>&1; then
  say "building kustomize $kustomize_version (about a minute, once)"
  GOBIN="$bin" GOFLAGS=-mod=mod go install "sigs.k8s.io/kustomize/kustomize/v5@$kustomize_version" >&2
fi

# A helm built by `go install` reports only its minor version; its module says which.
if ! go version -m "$bin/helm" 2>/dev/null | grep -q "mod[[:space:]]*helm.sh/helm/v4[[:space:]]*$helm_version"; then
  say "building helm $helm_version (a few minutes, once)"
  GOBIN="$bin" GOFLAGS=-mod=mod go install "helm.sh/helm/v4/cmd/helm@$helm_version" >&2
fi

if ! go version -m "$bin/actionlint" 2>/dev/null | grep -q "mod[[:space:]]*github.com/rhysd/actionlint[[:space:]]*$actionlint_version"; then
  say "building actionlint $actionlint_version (about a minute, once)"
  GOBIN="$bin" GOFLAGS=-mod=mod go install "github.com/rhysd/actionlint/cmd/actionlint@$actionlint_version" >&2
fi

if ! go version -m "$bin/kubeconform" 2>/dev/null | grep -q "mod[[:space:]]*github.com/yannh/kubeconform[[:space:]]*$kubeconform_version"; then
  say "building kubeconform $kubeconform_version (about a minute, once)"
  GOBIN="$bin" GOFLAGS=-mod=mod go install "github.com/yannh/kubeconform/cmd/kubeconform@$kubeconform_version" >&2
fi

# promtool for hack/alerts-check.sh, prometheus for the e2e: the script caches them by its
# packages' names (a warm run resolves from the cached index and unpacks nothing).
prometheus_dir="$(bash "$(dirname "$0")/../e2e/images/prometheus.sh")"
ln -sfn "$prometheus_dir/promtool" "$bin/promtool"
ln -sfn "$prometheus_dir/prometheus" "$bin/prometheus"

if ! PATH="$bin:$PATH" cargo deny --version 2>/dev/null | grep -qx "cargo-deny $deny_version"; then
  say "building cargo-deny $deny_version (several minutes, once)"
  cargo install --locked --quiet --root "$cache" cargo-deny --version "$deny_version" >&2
fi

if [[ "${1:-}" == --release ]] && ! PATH="$bin:$PATH" command -v cargo-cyclonedx >/dev/null 2>&1; then
  say "building cargo-cyclonedx $cyclonedx_version (a few minutes, once)"
  cargo install --locked --quiet --root "$cache" cargo-cyclonedx --version "$cyclonedx_version" >&2
fi

# kubectl for people poking at `just up`: one within a minor version of the local cluster's
# API server (kubectl's supported skew), else built from the pinned Kubernetes sources.
server_minor="$(sed -n 's|^[[:space:]]*k8s\.io/kubernetes v1\.\([0-9]*\)\..*|\1|p' \
  "$(dirname "$0")/../e2e/k8s/kubernetes/go.mod" | head -n1)"
kubectl_minor() {
  "$1" version --client -o json 2>/dev/null \
    | sed -n 's/.*"minor": *"\([0-9]*\).*/\1/p' | head -n1
}
current="$(PATH="$bin:$PATH" command -v kubectl || true)"
minor="$([ -n "$current" ] && kubectl_minor "$current" || true)"
if [ -z "$minor" ] || [ "$minor" -lt $((server_minor - 1)) ]; then
  say "building kubectl 1.$server_minor from the pinned Kubernetes sources (a few minutes, once; found ${current:-none}${minor:+ 1.$minor})"
  k8s_bin="$(bash "$(dirname "$0")/../e2e/k8s/build.sh" kubectl)"
  ln -sf "$k8s_bin/kubectl" "$bin/kubectl"
fi

echo "$bin"
