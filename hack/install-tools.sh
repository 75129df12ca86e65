#!/usr/bin/env bash
# Installs the tools `just test` needs, into a cache outside the clone so a warm run installs
# nothing: rustfmt and clippy (rustup), just (crates.io), kustomize (Go module proxy), and
# kubectl (built from the pinned Kubernetes sources) when the machine has none within one
# minor version of the local cluster's API server.
# Prints the directory to put on PATH. Idempotent.
set -euo pipefail

cache="${VALKEY_OPERATOR_CACHE:-$HOME/.cache/valkey-operator}"
bin="$cache/bin"
just_version="1.43.1"
kustomize_version="v5.7.1"
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
