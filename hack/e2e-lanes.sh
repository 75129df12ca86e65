#!/usr/bin/env bash
# Runs the e2e test binaries (e2e/local-cluster/tests) in two lanes at once. Each local
# cluster takes a slot of its own (ports, pod and Service addresses, network namespace), so
# two run side by side; the lanes hold about the same time of tests. A binary's tests run
# one at a time, but for the topology suites': they share a cluster per binary (e2e-kit's
# test_run), E2E_SHARED_TESTS of them at once on it (default 2), each in its own
# namespace. Every binary's time is printed ("took"), and hack/e2e-times.py tabulates a
# log. A lane stops at its first failing binary; the other finishes.
# Every binary runs: lane "replication" takes the ones named below, lane "cluster" the
# rest, found from the tests directory, so a new suite cannot be left out.
set -euo pipefail
cd "$(dirname "$0")/.."

# Measured on the CI of bc9cfc8 (docs/benchmarks.md): valkey_replication 866 s,
# operator_as_pods 518 s, pvc_resizer 53 s, namespaced_install 44 s; valkey_cluster 1148 s
# and the other small binaries about 350 s in the other.
replication_lane=(valkey_replication operator_as_pods pvc_resizer namespaced_install)
# The suites on e2e-kit's TestRun, whose tests may share their cluster at once.
shared_suites=" valkey_cluster valkey_replication "
export E2E_SHARED_TESTS="${E2E_SHARED_TESTS:-2}"

cluster_lane=()
for path in e2e/local-cluster/tests/*.rs e2e/local-cluster/tests/*/main.rs; do
    name="${path#e2e/local-cluster/tests/}"
    name="${name%/main.rs}"
    name="${name%.rs}"
    case " ${replication_lane[*]} " in
        *" $name "*) ;;
        *) cluster_lane+=("$name") ;;
    esac
done
for name in "${replication_lane[@]}"; do
    [ -e "e2e/local-cluster/tests/$name.rs" ] || [ -e "e2e/local-cluster/tests/$name/main.rs" ] || {
        echo "e2e-lanes: no test binary $name" >&2
        exit 1
    }
done

# Build once, so the lanes do not wait on each other for cargo's lock.
cargo test -p local-cluster --no-run
# The crate's own unit tests first (no cluster).
cargo test -p local-cluster --lib --bins

run_lane() {
    for name in "$@"; do
        local began=$(date +%s) threads=1
        case "$shared_suites" in *" $name "*) threads="$E2E_SHARED_TESTS" ;; esac
        cargo test -p local-cluster --test "$name" -- --test-threads="$threads" || {
            echo "e2e-lanes: $name failed after $(( $(date +%s) - began ))s" >&2
            return 1
        }
        echo "e2e-lanes: $name took $(( $(date +%s) - began ))s"
    done
}

started=$(date +%s)
(run_lane "${cluster_lane[@]}" 2>&1 | sed -u 's/^/[cluster] /'; exit "${PIPESTATUS[0]}") &
cluster_pid=$!
(run_lane "${replication_lane[@]}" 2>&1 | sed -u 's/^/[replication] /'; exit "${PIPESTATUS[0]}") &
replication_pid=$!

status=0
wait "$cluster_pid" || { echo "e2e-lanes: lane cluster failed" >&2; status=1; }
wait "$replication_pid" || { echo "e2e-lanes: lane replication failed" >&2; status=1; }
echo "e2e-lanes: ${cluster_lane[*]} | ${replication_lane[*]}: $(( $(date +%s) - started ))s, status $status"
exit "$status"
