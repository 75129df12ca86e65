#!/usr/bin/env bash
# Builds the local OCI registry (e2e/registry/main.go, a wrapper around
# go-containerregistry's pkg/registry fetched through the Go module proxy) and
# prints the path of the binary on stdout.
#
# Usage: e2e/registry/build.sh
#
# - The binary goes to
#   ${VALKEY_OPERATOR_CACHE:-$HOME/.cache/valkey-operator}/registry/<fingerprint>/registry
#   where <fingerprint> hashes go.mod, go.sum, main.go and `go env GOVERSION`.
#   A warm run builds nothing (one `go env GOVERSION` call only).
# - Progress goes to stderr; stdout is only the binary path.
#
# Run it: "$(e2e/registry/build.sh)" --listen 127.0.0.1:0 --blobs DIR --addr-file FILE
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${VALKEY_OPERATOR_CACHE:-$HOME/.cache/valkey-operator}"

go_version="$(go env GOVERSION)"
fp="$({ cat "$here/go.mod" "$here/go.sum" "$here/main.go"; echo "$go_version"; } | sha256sum | cut -c1-16)"
dir="$cache/registry/$fp"
bin="$dir/registry"

if [[ ! -x "$bin" ]]; then
  mkdir -p "$cache/registry"
  # Serialise concurrent callers; re-check under the lock.
  exec 9>"$cache/registry/.build.lock"
  flock 9
  if [[ ! -x "$bin" ]]; then
    echo "building registry ($go_version)..." >&2
    start=$SECONDS
    mkdir -p "$dir"
    tmp="$dir/.registry.tmp.$$"
    (cd "$here" && CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags "-s -w" -o "$tmp" .) \
      || { rm -f "$tmp"; exit 1; }
    mv -f "$tmp" "$bin"
    echo "built registry in $((SECONDS - start))s -> $bin" >&2
  fi
fi

echo "$bin"
