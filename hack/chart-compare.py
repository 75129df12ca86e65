#!/usr/bin/env python3
"""Compares a kustomize overlay's objects with the Helm chart's (hack/chart-check.sh).

chart-compare.py OVERLAY.yaml CHART.yaml
    Same objects, field for field, once the two differences by design are taken out: the
    overlay's Namespace (Helm installs into the release's namespace) and the chart's
    helm.sh/resource-policy annotation on CRDs. Prints each difference; exit 1 if any.
chart-compare.py --check-everything CHART.yaml
    A render with every switch on: the switches show up where they should and the pods
    stay restricted.
chart-compare.py --check-watched NS1,NS2,... CHART.yaml
    A render watching those namespaces: each controller's role bound by a RoleBinding in
    each of them, by no ClusterRoleBinding, and WATCH_NAMESPACES listing them.
"""

import difflib
import sys

import yaml

KEEP = "helm.sh/resource-policy"


def load(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if isinstance(d, dict)]


def key(doc):
    meta = doc.get("metadata") or {}
    return (doc.get("kind"), meta.get("namespace") or "", meta.get("name"))


def by_key(docs, what):
    out = {}
    for doc in docs:
        k = key(doc)
        if k in out:
            sys.exit(f"{what} renders {k} twice")
        out[k] = doc
    return out


def without_keep(doc):
    annotations = (doc.get("metadata") or {}).get("annotations") or {}
    if doc.get("kind") == "CustomResourceDefinition":
        if annotations.get(KEEP) != "keep":
            print(f"  - chart CRD {key(doc)[2]} lacks {KEEP}: keep")
            return None
        del annotations[KEEP]
        if not annotations:
            del doc["metadata"]["annotations"]
    return doc


def compare(overlay_path, chart_path):
    overlay = by_key([d for d in load(overlay_path) if d.get("kind") != "Namespace"], "overlay")
    chart = by_key(load(chart_path), "chart")
    problems = 0
    for k in sorted(set(overlay) | set(chart), key=str):
        if k not in chart:
            print(f"  - only in the overlay: {k}")
            problems += 1
            continue
        if k not in overlay:
            print(f"  - only in the chart: {k}")
            problems += 1
            continue
        theirs = without_keep(chart[k])
        if theirs is None:
            problems += 1
            continue
        if overlay[k] != theirs:
            a = yaml.safe_dump(overlay[k], sort_keys=True).splitlines()
            b = yaml.safe_dump(theirs, sort_keys=True).splitlines()
            print(f"  - {k} differs:")
            for line in difflib.unified_diff(a, b, "overlay", "chart", lineterm="", n=2):
                print(f"      {line}")
            problems += 1
    print(f"  {len(overlay)} objects compared, {problems} difference(s)")
    return problems == 0


def check_everything(chart_path):
    docs = load(chart_path)
    problems = []
    deployments = [d for d in docs if d.get("kind") == "Deployment"]
    monitors = [d for d in docs if d.get("kind") == "ServiceMonitor"]
    if len(deployments) != 4:
        problems.append(f"{len(deployments)} Deployments, want 4")
    if len(monitors) != 4:
        problems.append(f"{len(monitors)} ServiceMonitors, want 4")
    for d in deployments:
        name = d["metadata"]["name"]
        pod = d["spec"]["template"]["spec"]
        c = pod["containers"][0]
        if not c["image"].endswith("@sha256:" + "0" * 64) or c.get("imagePullPolicy") != "Always":
            problems.append(f"{name}: image {c['image']!r} not pinned by the digest asked for")
        if pod.get("imagePullSecrets") != [{"name": "registry"}]:
            problems.append(f"{name}: imagePullSecrets missing")
        psc = pod.get("securityContext") or {}
        if not (psc.get("runAsNonRoot") and psc.get("runAsUser") == 65532
                and (psc.get("seccompProfile") or {}).get("type") == "RuntimeDefault"):
            problems.append(f"{name}: pod securityContext not restricted")
        csc = c.get("securityContext") or {}
        if csc.get("allowPrivilegeEscalation") is not False or csc.get("readOnlyRootFilesystem") is not True \
                or (csc.get("capabilities") or {}).get("drop") != ["ALL"]:
            problems.append(f"{name}: container securityContext not restricted")
        env = {e["name"]: e for e in c.get("env") or []}
        if name.endswith("pvc-resizer"):
            mounts = {m["name"]: m for m in c.get("volumeMounts") or []}
            volumes = {v["name"]: v for v in pod.get("volumes") or []}
            ca = env.get("KUBELET_CA_FILE", {}).get("value", "")
            mount = mounts.get("kubelet-ca", {}).get("mountPath", "")
            if not ca or not mount or not ca.startswith(mount + "/") \
                    or volumes.get("kubelet-ca", {}).get("configMap", {}).get("name") != "kubelet-ca":
                problems.append(f"{name}: kubelet CA not mounted where KUBELET_CA_FILE points")
        if name.endswith("topology-controller") and pod.get("priorityClassName") != "system-cluster-critical":
            problems.append(f"{name}: priorityClassName missing")
        if name.endswith("node-controller") and pod.get("tolerations") != [{"operator": "Exists"}]:
            problems.append(f"{name}: tolerations missing")
        if name.endswith("service-controller") and env.get("EXTRA", {}).get("value") != "x":
            problems.append(f"{name}: extraEnv missing")
    for p in problems:
        print(f"  - {p}")
    print(f"chart-check: {'ok  ' if not problems else 'FAIL'} every switch on: "
          f"{len(docs)} objects, {len(problems)} problem(s)")
    return not problems


CONTROLLERS = ["node-controller", "service-controller", "topology-controller", "pvc-resizer"]


def check_watched(namespaces, chart_path):
    docs = load(chart_path)
    problems = []
    bound = {(d["metadata"]["namespace"], d["roleRef"]["name"])
             for d in docs if d.get("kind") == "RoleBinding"}
    cluster_bound = {d["roleRef"]["name"] for d in docs if d.get("kind") == "ClusterRoleBinding"}
    for c in CONTROLLERS:
        role = f"valkey-operator-{c}"
        for ns in namespaces:
            if (ns, role) not in bound:
                problems.append(f"{role} not bound in {ns}")
        if role in cluster_bound:
            problems.append(f"{role} bound cluster-wide")
    for d in docs:
        if d.get("kind") != "Deployment":
            continue
        env = {e["name"]: e.get("value") for e in d["spec"]["template"]["spec"]["containers"][0].get("env") or []}
        if env.get("WATCH_NAMESPACES") != ",".join(namespaces):
            problems.append(f"{d['metadata']['name']}: WATCH_NAMESPACES {env.get('WATCH_NAMESPACES')!r}")
    for p in problems:
        print(f"  - {p}")
    return not problems


if __name__ == "__main__":
    if sys.argv[1:2] == ["--check-everything"]:
        sys.exit(0 if check_everything(sys.argv[2]) else 1)
    if sys.argv[1:2] == ["--check-watched"]:
        sys.exit(0 if check_watched(sys.argv[2].split(","), sys.argv[3]) else 1)
    sys.exit(0 if compare(sys.argv[1], sys.argv[2]) else 1)
