#!/usr/bin/env bash
# Builds a local Kubernetes control plane (kube-apiserver, kube-controller-manager,
# kube-scheduler, etcd) from upstream sources fetched through the Go module proxy,
# and prints the directory holding the binaries on stdout.
#
# Usage: e2e/k8s/build.sh [BINARY...]
#   BINARY is any of kube-apiserver kube-controller-manager kube-scheduler etcd
#   (default: all four). Only the named binaries are checked/built.
#
# - If KUBEBUILDER_ASSETS is set and already holds the requested binaries, that
#   directory is printed and nothing is built.
# - Otherwise binaries go to
#   ${VALKEY_OPERATOR_CACHE:-$HOME/.cache/valkey-operator}/k8s/<k8s-version>/bin
#   and are rebuilt only when missing or when their inputs (wrapper go.mod/go.sum,
#   Go version, flags) changed. A warm run does not invoke the go command at all
#   beyond one `go env GOVERSION`.
# - Progress goes to stderr; stdout is only the bin dir.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
all=(kube-apiserver kube-controller-manager kube-scheduler etcd)
if (($#)); then wanted=("$@"); else wanted=("${all[@]}"); fi
for b in "${wanted[@]}"; do
  case "$b" in
    kube-apiserver | kube-controller-manager | kube-scheduler | etcd | kubectl) ;;
    *) echo "build.sh: unknown binary '$b' (want one of: ${all[*]} kubectl)" >&2; exit 2 ;;
  esac
done

# 1. Pre-provisioned assets (e.g. a CI image or a developer's envtest download).
if [[ -n "${KUBEBUILDER_ASSETS:-}" ]]; then
  ok=1
  for b in "${wanted[@]}"; do [[ -x "$KUBEBUILDER_ASSETS/$b" ]] || ok=0; done
  if ((ok)); then
    echo "using KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS" >&2
    echo "$KUBEBUILDER_ASSETS"
    exit 0
  fi
  echo "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS lacks some of: ${wanted[*]}; building them instead" >&2
fi

# 2. Versions come from the committed wrapper modules (single source of truth).
k8s_mod="$here/kubernetes"
etcd_mod="$here/etcd"
k8s_version="$(sed -n 's/^[[:space:]]*k8s\.io\/kubernetes \(v[0-9][^[:space:]]*\).*/\1/p' "$k8s_mod/go.mod" | head -n1)"
etcd_version="$(sed -n 's/^[[:space:]]*go\.etcd\.io\/etcd\/server\/v3 \(v[0-9][^[:space:]]*\).*/\1/p' "$etcd_mod/go.mod" | head -n1)"
[[ -n "$k8s_version" && -n "$etcd_version" ]] || { echo "build.sh: cannot read versions from $k8s_mod/go.mod / $etcd_mod/go.mod" >&2; exit 1; }

cache="${VALKEY_OPERATOR_CACHE:-$HOME/.cache/valkey-operator}"
bin="$cache/k8s/$k8s_version/bin"
mkdir -p "$bin"

# Input fingerprint of one binary: its wrapper module, the Go toolchain and the flags.
go_version="$(go env GOVERSION)"
fingerprint() { # name module_dir ldflags
  { cat "$2/go.mod" "$2/go.sum"; echo "$go_version|$1|$3"; } | sha256sum | cut -d' ' -f1
}
is_fresh() { # name fingerprint
  [[ -x "$bin/$1" && -f "$bin/.$1.stamp" && "$(cat "$bin/.$1.stamp")" == "$2" ]]
}

# Version stamping, as upstream's hack/lib/version.sh does (module zips carry no
# git metadata, so gitCommit is "unknown"; buildDate is fixed for reproducibility).
k8s_minor="${k8s_version#v1.}"; k8s_minor="${k8s_minor%%.*}"
k8s_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  k8s_ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$k8s_minor"
  k8s_ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.gitCommit=unknown -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
etcd_ldflags="-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=unknown"

declare -A pkg_of=(
  [kube-apiserver]=k8s.io/kubernetes/cmd/kube-apiserver
  [kube-controller-manager]=k8s.io/kubernetes/cmd/kube-controller-manager
  [kube-scheduler]=k8s.io/kubernetes/cmd/kube-scheduler
  [kubectl]=k8s.io/kubernetes/cmd/kubectl
  [etcd]=go.etcd.io/etcd/server/v3
)

todo=()
declare -A fp_of=()
for b in "${wanted[@]}"; do
  if [[ $b == etcd ]]; then fp_of[$b]="$(fingerprint "$b" "$etcd_mod" "$etcd_ldflags")"
  else fp_of[$b]="$(fingerprint "$b" "$k8s_mod" "$k8s_ldflags")"; fi
  is_fresh "$b" "${fp_of[$b]}" || todo+=("$b")
done

if ((${#todo[@]})); then
  # Serialise concurrent callers (parallel test binaries); re-check under the lock.
  exec 9>"$cache/k8s/.build.lock"
  flock 9
  for b in "${todo[@]}"; do
    fp="${fp_of[$b]}"
    is_fresh "$b" "$fp" && continue
    if [[ $b == etcd ]]; then dir="$etcd_mod" ver="$etcd_version" ldf="$etcd_ldflags"
    else dir="$k8s_mod" ver="$k8s_version" ldf="$k8s_ldflags"; fi
    echo "building $b $ver (cold builds take several minutes)..." >&2
    start=$SECONDS
    tmp="$bin/.$b.tmp.$$"
    (cd "$dir" && CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags "$ldf" -o "$tmp" "${pkg_of[$b]}") || { rm -f "$tmp"; exit 1; }
    mv -f "$tmp" "$bin/$b"
    echo "$fp" >"$bin/.$b.stamp"
    echo "built $b $ver in $((SECONDS - start))s -> $bin/$b" >&2
  done
fi

echo "$bin"
