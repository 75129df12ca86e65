# valkey-operator tasks. `just` lists them.

set shell := ["bash", "-euo", "pipefail", "-c"]

controllers := "node-controller service-controller topology-controller pvc-resizer"

default:
    @just --list

# Build every controller binary (debug).
build:
    cargo build --workspace --bins

# Build release binaries.
build-release:
    cargo build --workspace --bins --release

# Everything a release publishes, into dist/: the image (OCI layout) with its digest, install
# manifests pinned by tag and digest, the Helm chart, the image's SBOM and checksums.
release VERSION *ARGS:
    bash hack/release.sh {{VERSION}} {{ARGS}}

# Format all Rust code.
fmt:
    cargo fmt --all

# Fail when code is not formatted.
fmt-check:
    cargo fmt --all -- --check

# Clippy on everything, warnings are errors.
lint:
    cargo clippy --workspace --all-targets -- -D warnings

# Unit tests and CEL rule tests (no cluster needed).
unit:
    cargo test --workspace --exclude local-cluster

# valkey-cli for the tests (Debian backports), the upstream Kubernetes binaries and the
# local registry (all cached). The Valkey images are built by the local cluster on start.
e2e-deps:
    bash e2e/setup-valkey.sh
    bash e2e/k8s/build.sh >/dev/null
    bash e2e/registry/build.sh >/dev/null
    bash hack/prometheus-operator-crds.sh >/dev/null

# The operator image the e2e tests and `just up` run, without a Docker daemon: static binaries
# (cargo profile image-test; a release builds with `release`) in an OCI layout.
image:
    bash hack/operator-image.sh

# End-to-end tests on the local cluster: real API server, real Valkey images, our RBAC.
# Two lanes of test binaries at once, each on its own local cluster (hack/e2e-lanes.sh).
e2e: e2e-deps build image previous-image
    bash hack/e2e-lanes.sh

# The operator image of the release named in release/previous, for the upgrade e2e (built once
# per release, in its own target directory under the cache).
previous-image:
    bash hack/previous-image.sh >/dev/null

# Start the local cluster with the operator and a sample (stays up; `just down` stops it).
up: e2e-deps build image
    cargo run --quiet -p local-cluster -- up

# Local cluster figures (start time, pod start latency, agent RSS) for docs/benchmarks.md.
bench-local: e2e-deps
    cargo build --quiet --release -p node-agent -p local-cluster -p bench -p oci-image
    cargo run --quiet --release -p bench --bin bench-local

# ValkeyNode figures (create to Ready, idle API and kubelet requests, controller RSS) for docs/benchmarks.md.
bench-nodes: e2e-deps
    cargo build --quiet --release --workspace --bins
    cargo run --quiet --release -p bench --bin bench-nodes

# ValkeyCluster figures (apply to Ready, slot migration, failover) next to valkey-cli's.
bench-cluster *ARGS: e2e-deps
    cargo build --quiet --release --workspace --bins
    cargo run --quiet --release -p bench --bin bench-cluster -- {{ARGS}}

# How soon ValkeyCluster Ready follows a frozen primary, and the idle cost of watching, with the pulse and with 30 s looks.
bench-pulse: e2e-deps
    cargo build --quiet --release --workspace --bins
    cargo run --quiet --release -p bench --bin bench-pulse

# ValkeyReplication figures (apply to Ready, failover, switchover) next to hand-wired Sentinel's.
bench-replication: e2e-deps
    cargo build --quiet --release --workspace --bins
    cargo run --quiet --release -p bench --bin bench-replication

# Acknowledged writes lost over full restarts of a ValkeyReplication under writers (issue 42).
full-restart-loop ITERATIONS="20" FAULT="behind": e2e-deps build
    cargo run --quiet -p bench --bin full-restart-loop -- {{ITERATIONS}} {{FAULT}}

# Image sizes, push and pull/unpack times (Valkey images and the operator image).
bench-images: e2e-deps build
    bash hack/bench-images.sh

# Every benchmark.
bench: bench-local bench-images bench-nodes bench-cluster bench-pulse bench-replication

# Stop everything `just up` started, by PID.
down:
    cargo run --quiet -p local-cluster -- down

# Regenerate deploy/crds from crates/crd-types.
crds:
    cargo run --quiet -p crd-types --bin crdgen -- deploy/crds
    cp deploy/crds/valkey*.yaml charts/valkey-operator/files/crds/

# Fail when deploy/crds differs from a fresh generation.
crds-check:
    cargo run --quiet -p crd-types --bin crdgen -- --check deploy/crds

# Build every kustomize overlay; check RBAC has no wildcard and pods are restricted; the Helm
# chart renders the same objects as each overlay; every manifest passes kubeconform's strict
# schemas; the forge's release workflow passes actionlint; the alert rules pass promtool's
# checks and their unit tests, and the monitoring component holds the same rules.
deploy-check:
    deploy/verify.sh
    hack/chart-check.sh
    hack/kubeconform-check.sh
    actionlint -shellcheck= -pyflakes= .github/workflows/*.yaml
    hack/alerts-check.sh

# Each controller, started with no reachable cluster, must exit non-zero with one clear line:
# once with no kubeconfig at all, once with one pointing at a closed loopback port.
smoke: build
    #!/usr/bin/env bash
    set -euo pipefail
    target="${CARGO_TARGET_DIR:-target}/debug"
    tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
    printf '%s\n' 'apiVersion: v1' 'kind: Config' 'current-context: closed' \
      'clusters: [{name: closed, cluster: {server: "https://127.0.0.1:1"}}]' \
      'users: [{name: u, user: {token: t}}]' \
      'contexts: [{name: closed, context: {cluster: closed, user: u}}]' > "$tmp/closed.kubeconfig"
    for c in {{controllers}}; do
      "$target/$c" --help >/dev/null
      for kubeconfig in "$tmp/missing.kubeconfig" "$tmp/closed.kubeconfig"; do
        set +e
        out=$(env -u KUBERNETES_SERVICE_HOST KUBECONFIG="$kubeconfig" HTTP_ADDR=127.0.0.1:0 \
          timeout 60 "$target/$c" 2>&1 >/dev/null); code=$?
        set -e
        lines=$(printf '%s\n' "$out" | grep -c . || true)
        if [ "$code" -eq 0 ] || [ "$code" -eq 124 ] || [ "$lines" -ne 1 ]; then
          echo "smoke: $c exited $code with $lines stderr lines:"; printf '%s\n' "$out"; exit 1
        fi
        echo "smoke: $c ($(basename "$kubeconfig")) exits $code: $out"
      done
    done

# The dependency graph against deny.toml: licences, bans, duplicate versions, sources, and
# advisories where RustSec's database can be fetched.
deny:
    hack/deny.sh

# Everything CI runs: the README's test command.
test: fmt-check lint deny unit crds-check deploy-check smoke e2e

# Alias kept for muscle memory.
ci: test
