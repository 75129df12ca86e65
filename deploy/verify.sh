#!/usr/bin/env bash
# Render and sanity-check the kustomize deployment manifests.
#
# For every overlay in deploy/overlays/*:
#   * `kustomize build` must succeed;
#   * no Role/ClusterRole rule may contain "*" in apiGroups, resources, verbs,
#     resourceNames or nonResourceURLs (least privilege, no wildcards), nor grant
#     nodes/proxy (its GET allows exec into any pod through the kubelet);
#   * every Deployment must carry the "restricted" security settings: pod
#     runAsNonRoot=true, runAsUser=runAsGroup=65532, seccompProfile
#     RuntimeDefault; per container allowPrivilegeEscalation=false,
#     readOnlyRootFilesystem=true, capabilities.drop [ALL], no added
#     capabilities, not privileged.
# deploy/crds and deploy/samples are built too (build errors only).
#
# Usage (from the repository root): deploy/verify.sh
#
# Environment:
#   KUSTOMIZE          kustomize binary to use. Default: `kustomize` on PATH,
#                      else `kubectl kustomize`.
#   VERIFY_NO_PYYAML=1 skip python3+PyYAML and use the line-based fallback
#                      checks (used automatically when PyYAML is missing).
#
# Exits non-zero on any failure.
set -euo pipefail

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo_root="$(cd "${script_dir}/.." && pwd)"
cd "${repo_root}"

die() {
  echo "verify: error: $*" >&2
  exit 1
}

# --- pick a kustomize -------------------------------------------------------
if [[ -n "${KUSTOMIZE:-}" ]]; then
  command -v "${KUSTOMIZE}" >/dev/null 2>&1 ||
    die "KUSTOMIZE=${KUSTOMIZE} is not an executable"
  kbuild=("${KUSTOMIZE}" build)
elif command -v kustomize >/dev/null 2>&1; then
  kbuild=(kustomize build)
elif command -v kubectl >/dev/null 2>&1; then
  kbuild=(kubectl kustomize)
else
  die "no kustomize found: install kustomize (or kubectl), or set KUSTOMIZE"
fi
if [[ "${kbuild[0]}" == kubectl ]]; then
  kversion="$(kubectl version --client 2>/dev/null | grep -i kustomize || true)"
else
  kversion="$("${kbuild[0]}" version 2>/dev/null | head -n 1 || true)"
fi
echo "verify: using '${kbuild[*]}' (${kversion:-unknown version})"

# --- pick a checker ---------------------------------------------------------
checker=fallback
if [[ "${VERIFY_NO_PYYAML:-0}" != 1 ]] &&
  command -v python3 >/dev/null 2>&1 &&
  python3 -c 'import yaml' >/dev/null 2>&1; then
  checker=python
else
  echo "verify: python3 with PyYAML not available; using line-based fallback checks"
fi

tmp="$(mktemp -d)"
trap 'rm -rf "${tmp}"' EXIT

# check_python FILE: structural checks with PyYAML. Prints one summary line on
# stdout, one line per problem on stderr; exit status 1 on problems.
check_python() {
  python3 - "$1" <<'PY'
import sys
import yaml

path = sys.argv[1]
with open(path) as f:
    docs = [d for d in yaml.safe_load_all(f) if isinstance(d, dict)]

problems = []
roles = rules = deployments = 0


def ident(doc):
    meta = doc.get("metadata") or {}
    ns = meta.get("namespace")
    name = meta.get("name", "?")
    return f"{doc.get('kind')} {ns + '/' if ns else ''}{name}"


for doc in docs:
    kind = doc.get("kind")
    if kind in ("Role", "ClusterRole"):
        roles += 1
        for i, rule in enumerate(doc.get("rules") or []):
            rules += 1
            for field in ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"):
                for value in rule.get(field) or []:
                    if "*" in str(value):
                        problems.append(f"{ident(doc)}: rules[{i}].{field} contains wildcard {value!r}")
            # nodes/proxy GET is exec into any pod through the kubelet.
            if "nodes/proxy" in (rule.get("resources") or []):
                problems.append(f"{ident(doc)}: rules[{i}] grants nodes/proxy (exec into any pod); use nodes/stats or nodes/log")
    elif kind == "Deployment":
        deployments += 1
        pod = ((doc.get("spec") or {}).get("template") or {}).get("spec") or {}
        psc = pod.get("securityContext") or {}
        expect = {
            "runAsNonRoot": True,
            "runAsUser": 65532,
            "runAsGroup": 65532,
        }
        for key, want in expect.items():
            if psc.get(key) != want:
                problems.append(f"{ident(doc)}: pod securityContext.{key} is {psc.get(key)!r}, want {want!r}")
        seccomp = (psc.get("seccompProfile") or {}).get("type")
        if seccomp != "RuntimeDefault":
            problems.append(f"{ident(doc)}: pod securityContext.seccompProfile.type is {seccomp!r}, want 'RuntimeDefault'")
        containers = (pod.get("initContainers") or []) + (pod.get("containers") or [])
        if not pod.get("containers"):
            problems.append(f"{ident(doc)}: no containers")
        for c in containers:
            where = f"{ident(doc)}: container {c.get('name', '?')}"
            csc = c.get("securityContext") or {}
            if csc.get("allowPrivilegeEscalation") is not False:
                problems.append(f"{where}: securityContext.allowPrivilegeEscalation must be false")
            if csc.get("readOnlyRootFilesystem") is not True:
                problems.append(f"{where}: securityContext.readOnlyRootFilesystem must be true")
            if csc.get("privileged"):
                problems.append(f"{where}: securityContext.privileged must not be true")
            caps = csc.get("capabilities") or {}
            if "ALL" not in (caps.get("drop") or []):
                problems.append(f"{where}: securityContext.capabilities.drop must contain ALL")
            if caps.get("add"):
                problems.append(f"{where}: securityContext.capabilities.add must be empty")

for p in problems:
    print(f"  - {p}", file=sys.stderr)
print(f"{len(docs)} objects, {deployments} Deployments, {roles} Roles/ClusterRoles ({rules} rules)")
sys.exit(1 if problems else 0)
PY
}

# check_fallback FILE: the same checks on kustomize's normalised YAML output
# (block style, one `---` between documents, `kind:` at column 0) without a
# YAML library. Coarser than the python checks: any "*" inside a Role or
# ClusterRole `rules:` block fails, and per-container settings are counted
# against the number of `image:` lines of each Deployment.
check_fallback() {
  awk '
    function flush() {
      if (kind == "Deployment") {
        deployments++
        if (n_nonroot < 1)  problem("pod securityContext.runAsNonRoot must be true")
        if (n_user < 1)     problem("pod securityContext.runAsUser must be 65532")
        if (n_group < 1)    problem("pod securityContext.runAsGroup must be 65532")
        if (n_seccomp < 1)  problem("pod securityContext.seccompProfile.type must be RuntimeDefault")
        if (n_images < 1)   problem("no containers")
        if (n_ape < n_images)  problem("every container needs securityContext.allowPrivilegeEscalation: false")
        if (n_rofs < n_images) problem("every container needs securityContext.readOnlyRootFilesystem: true")
        if (n_dropall < n_images) problem("every container needs securityContext.capabilities.drop: [ALL]")
        if (n_priv > 0)    problem("securityContext.privileged must not be true")
        if (n_capadd > 0)  problem("securityContext.capabilities.add must be empty")
      }
      if (kind != "") objects++
      kind = ""; name = ""; ns = ""; in_rules = 0; in_meta = 0
      n_nonroot = n_user = n_group = n_seccomp = n_images = 0
      n_ape = n_rofs = n_dropall = n_priv = n_capadd = 0
    }
    function problem(msg) {
      printf "  - %s %s%s: %s\n", kind, (ns != "" ? ns "/" : ""), name, msg > "/dev/stderr"
      failed = 1
    }
    BEGIN { kind = ""; failed = 0 }
    /^---[[:space:]]*$/ { flush(); next }
    {
      line = $0
      sub(/[[:space:]]+#.*$/, "", line)        # trailing comments
      if (line ~ /^[[:space:]]*#/) next          # comment lines
      if (line ~ /^[^[:space:]-]/) {             # top-level key
        in_rules = (line ~ /^rules:/)
        in_meta = (line ~ /^metadata:/)
      }
      if (line ~ /^kind:[[:space:]]/) {
        kind = line; sub(/^kind:[[:space:]]*/, "", kind); gsub(/["\047[:space:]]/, "", kind)
        if (kind == "Role" || kind == "ClusterRole") roles++
      }
      if (in_meta && line ~ /^  name:[[:space:]]/) { name = line; sub(/^  name:[[:space:]]*/, "", name) }
      if (in_meta && line ~ /^  namespace:[[:space:]]/) { ns = line; sub(/^  namespace:[[:space:]]*/, "", ns) }
      # kustomize prints kind: and metadata: before rules:, so kind and name
      # are known by the time a rule line is seen.
      if ((kind == "Role" || kind == "ClusterRole") && in_rules) {
        if (line ~ /^-[[:space:]]/) rules++
        if (index(line, "*") > 0) problem("wildcard in rules: " line)
        if (index(line, "nodes/proxy") > 0) problem("grants nodes/proxy (exec into any pod): " line)
      }
      if (kind == "Deployment") {
        if (line ~ /^[[:space:]]+runAsNonRoot:[[:space:]]*true$/) n_nonroot++
        if (line ~ /^[[:space:]]+runAsUser:[[:space:]]*65532$/) n_user++
        if (line ~ /^[[:space:]]+runAsGroup:[[:space:]]*65532$/) n_group++
        if (line ~ /^[[:space:]]+type:[[:space:]]*RuntimeDefault$/) n_seccomp++
        if (line ~ /^[[:space:]]+(-[[:space:]]+)?image:[[:space:]]/) n_images++
        if (line ~ /^[[:space:]]+allowPrivilegeEscalation:[[:space:]]*false$/) n_ape++
        if (line ~ /^[[:space:]]+readOnlyRootFilesystem:[[:space:]]*true$/) n_rofs++
        if (line ~ /^[[:space:]]+-[[:space:]]+["\047]?ALL["\047]?$/) n_dropall++
        if (line ~ /^[[:space:]]+drop:[[:space:]]*\[[[:space:]]*["\047]?ALL["\047]?[[:space:]]*\]$/) n_dropall++
        if (line ~ /^[[:space:]]+privileged:[[:space:]]*true$/) n_priv++
        if (line ~ /^[[:space:]]+add:[[:space:]]*$/ || line ~ /^[[:space:]]+add:[[:space:]]*\[[^\]]/) n_capadd++
      }
    }
    END {
      flush()
      printf "%d objects, %d Deployments, %d Roles/ClusterRoles (%d rules)\n", objects, deployments, roles, rules
      exit failed
    }
  ' "$1"
}

failures=0

# build NAME DIR OUT: kustomize build with a clear error message.
build() {
  local name="$1" dir="$2" out="$3"
  if ! "${kbuild[@]}" "${dir}" >"${out}" 2>"${tmp}/stderr"; then
    echo "FAIL ${name}: '${kbuild[*]} ${dir}' failed:"
    sed 's/^/  | /' "${tmp}/stderr"
    local missing=()
    local f
    for f in deploy/crds/valkeynodes.yaml deploy/crds/valkeyclusters.yaml deploy/crds/valkeyreplications.yaml; do
      [[ -f "${f}" ]] || missing+=("${f}")
    done
    if ((${#missing[@]})); then
      echo "  hint: missing generated CRD file(s): ${missing[*]} (run the crdgen binary first)"
    fi
    failures=$((failures + 1))
    return 1
  fi
}

shopt -s nullglob
overlays=()
for dir in deploy/overlays/*/; do
  dir="${dir%/}"
  if [[ -f "${dir}/kustomization.yaml" || -f "${dir}/kustomization.yml" || -f "${dir}/Kustomization" ]]; then
    overlays+=("${dir}")
  fi
done
((${#overlays[@]})) || die "no overlays found under deploy/overlays"

for dir in "${overlays[@]}"; do
  name="${dir#deploy/}"
  out="${tmp}/$(basename "${dir}").yaml"
  build "${name}" "${dir}" "${out}" || continue
  if summary="$(check_"${checker}" "${out}" 2>"${tmp}/problems")"; then
    echo "ok   ${name}: ${summary}"
  else
    echo "FAIL ${name}: ${summary}"
    cat "${tmp}/problems"
    failures=$((failures + 1))
  fi
done

# Build-only checks for the CRDs on their own and the samples.
for dir in deploy/crds deploy/samples; do
  out="${tmp}/$(basename "${dir}")-only.yaml"
  build "${dir#deploy/}" "${dir}" "${out}" || continue
  echo "ok   ${dir#deploy/}: $(grep -c '^kind:' "${out}" || true) objects (build only)"
done

if ((failures)); then
  echo "verify: ${failures} failure(s)" >&2
  exit 1
fi
echo "verify: all checks passed"
