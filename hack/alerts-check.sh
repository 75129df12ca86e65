#!/usr/bin/env bash
# Checks the alert rules, deploy/monitoring/alerts.yaml:
#   * `promtool check rules` (syntax, PromQL, templates);
#   * every rule has `for`, a severity label (warning or critical), summary, description and
#     a runbook_url pointing at a heading of docs/monitoring.md named after the alert;
#   * every alert has a unit test case where it fires and one where it does not, and
#     `promtool test rules` passes for every file in deploy/monitoring/tests;
#   * the PrometheusRule of deploy/components/monitoring is what alerts.yaml generates, and
#     kustomize renders it with the same groups;
#   * the dashboard (deploy/monitoring/dashboard/valkey.json) is what its queries make
#     (hack/dashboard.py), and every query parses;
#   * the chart's copies (charts/valkey-operator/files/monitoring/) are alerts.yaml and the
#     component's PodMonitor, and the chart's PrometheusRule (metrics.prometheusRule.enabled)
#     has the same groups.
# Usage: hack/alerts-check.sh [--write]. --write regenerates the PrometheusRule from
# alerts.yaml and copies it into the chart first. Needs promtool ($PROMTOOL, else on PATH,
# else e2e/images/prometheus.sh, as root), kustomize, helm and python3 with PyYAML.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
rules="$root/deploy/monitoring/alerts.yaml"
tests="$root/deploy/monitoring/tests"
component="$root/deploy/components/monitoring"
generated="$component/prometheusrule.yaml"
chart="$root/charts/valkey-operator"
runbook="$root/docs/monitoring.md"
say() { printf 'alerts-check: %s\n' "$*"; }
die() { say "error: $*"; exit 1; }

promtool="${PROMTOOL:-}"
if [[ -z "$promtool" ]]; then
  if command -v promtool >/dev/null 2>&1; then
    promtool=promtool
  else
    promtool="$(bash "$root/e2e/images/prometheus.sh")/promtool"
  fi
fi
for tool in kustomize helm python3; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool not found (hack/install-tools.sh installs kustomize and helm)"
done

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# The PrometheusRule: alerts.yaml's groups under spec, indented as they are (block scalars
# keep their meaning when every line moves right by the same amount).
render() {
  cat <<'EOF'
# Generated from deploy/monitoring/alerts.yaml by `hack/alerts-check.sh --write`: edit that
# file, then run it. The alert rules as a prometheus-operator PrometheusRule.
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: valkey-operator-alerts
  namespace: valkey-operator-system
  labels:
    app.kubernetes.io/name: valkey-operator
    app.kubernetes.io/component: monitoring
    app.kubernetes.io/part-of: valkey-operator
spec:
EOF
  sed -n '/^groups:/,$p' "$rules" | sed 's/^\(.\)/  \1/'
}
if [[ "${1:-}" == --write ]]; then
  render >"$generated"
  cp "$rules" "$component/podmonitor.yaml" "$chart/files/monitoring/"
  say "wrote ${generated#"$root"/}; copied alerts.yaml and podmonitor.yaml into the chart"
fi
for source in "$rules" "$component/podmonitor.yaml"; do
  copy="$chart/files/monitoring/$(basename "$source")"
  cmp -s "$source" "$copy" ||
    die "${copy#"$root"/} is not ${source#"$root"/}: run 'hack/alerts-check.sh --write'"
done
render >"$tmp/prometheusrule.yaml"
cmp -s "$tmp/prometheusrule.yaml" "$generated" ||
  die "${generated#"$root"/} is not what ${rules#"$root"/} generates: run 'hack/alerts-check.sh --write'"

"$promtool" check rules "$rules" >"$tmp/check" 2>&1 || { cat "$tmp/check"; die "promtool check rules failed"; }
say "ok   promtool check rules: $(grep -o '[0-9]* rules found' "$tmp/check")"

# kustomize renders the component (from an overlay that includes it) with the same groups.
mkdir "$tmp/overlay"
printf '%s\n' 'apiVersion: kustomize.config.k8s.io/v1beta1' 'kind: Kustomization' \
  'components:' "  - $(realpath --relative-to="$tmp/overlay" "$component")" >"$tmp/overlay/kustomization.yaml"
kustomize build "$tmp/overlay" >"$tmp/rendered.yaml" 2>"$tmp/kustomize" ||
  { cat "$tmp/kustomize"; die "kustomize cannot build ${component#"$root"/}"; }

helm template valkey-operator "$chart" --set metrics.prometheusRule.enabled=true \
  --show-only templates/prometheusrule.yaml >"$tmp/chart.yaml"

python3 - "$rules" "$tmp/rendered.yaml" "$runbook" "$tests" "$tmp/chart.yaml" <<'PY' || die "the rules, the component or the chart fail the checks above"
import glob
import os
import re
import sys

import yaml

rules_path, rendered_path, runbook_path, tests_dir, chart_path = sys.argv[1:]
problems = []
with open(rules_path) as f:
    groups = yaml.safe_load(f)["groups"]
for what, path in (("the component", rendered_path), ("the chart", chart_path)):
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    found = [d for d in docs if d.get("kind") == "PrometheusRule"]
    if len(found) != 1:
        problems.append(f"{what} renders {len(found)} PrometheusRules, want 1")
    elif found[0].get("spec", {}).get("groups") != groups:
        problems.append(f"{what}'s PrometheusRule's groups differ from alerts.yaml's")


# GitHub's anchor of a heading: lower case, punctuation but - and _ dropped, spaces to -.
def anchor(heading):
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


anchors = set()
if os.path.exists(runbook_path):
    with open(runbook_path) as f:
        anchors = {anchor(m.group(1)) for m in re.finditer(r"^#+ (.*)$", f.read(), re.M)}
else:
    problems.append(f"{runbook_path} is missing")

alerts = []
for group in groups:
    for rule in group["rules"]:
        name = rule.get("alert")
        if not name:
            continue
        alerts.append(name)
        if not rule.get("for"):
            problems.append(f"{name}: no `for`")
        if (rule.get("labels") or {}).get("severity") not in ("warning", "critical"):
            problems.append(f"{name}: severity label must be warning or critical")
        notes = rule.get("annotations") or {}
        for key in ("summary", "description", "runbook_url"):
            if not notes.get(key):
                problems.append(f"{name}: no {key} annotation")
        url = notes.get("runbook_url", "")
        want = f"docs/monitoring.md#{name.lower()}"
        if not url.endswith(want):
            problems.append(f"{name}: runbook_url {url!r} should end with {want}")
        if name.lower() not in anchors:
            problems.append(f"{name}: docs/monitoring.md has no heading {name}")
if len(set(alerts)) != len(alerts):
    problems.append("an alert name is used twice")

firing, quiet = set(), set()
files = sorted(glob.glob(os.path.join(tests_dir, "*.yaml")))
if not files:
    problems.append(f"no tests in {tests_dir}")
for path in files:
    with open(path) as f:
        suite = yaml.safe_load(f)
    for test in suite.get("tests") or []:
        for case in test.get("alert_rule_test") or []:
            (firing if case.get("exp_alerts") else quiet).add(case["alertname"])
for name in alerts:
    if name not in firing:
        problems.append(f"{name}: no test case where it fires")
    if name not in quiet:
        problems.append(f"{name}: no test case where it does not fire")
for name in (firing | quiet) - set(alerts):
    problems.append(f"tests name {name}, which alerts.yaml lacks")

for p in problems:
    print(f"  - {p}", file=sys.stderr)
if problems:
    sys.exit(1)
print(f"{len(alerts)} alerts, each with for, severity, summary, description, a runbook section, "
      f"a firing and a quiet test; the component and the chart render the same groups")
PY
say "ok   rules and component"

# The dashboard: valkey.json is what its queries make, and every query parses.
python3 "$root/hack/dashboard.py" --check
python3 "$root/hack/dashboard.py" --rules "$tmp/dashboard-rules.json"
"$promtool" check rules "$tmp/dashboard-rules.json" >"$tmp/check" 2>&1 ||
  { cat "$tmp/check"; die "a dashboard query does not parse"; }
say "ok   dashboard queries parse: $(grep -o '[0-9]* rules found' "$tmp/check")"

(cd "$tests" && "$promtool" test rules ./*.yaml) >"$tmp/test" 2>&1 ||
  { cat "$tmp/test"; die "promtool test rules failed"; }
say "ok   promtool test rules: $(grep -c SUCCESS "$tmp/test") of $(find "$tests" -maxdepth 1 -name '*.yaml' | wc -l) test files pass"
