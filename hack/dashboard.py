#!/usr/bin/env python3
"""The Grafana dashboard, deploy/monitoring/dashboard/valkey.json, made from the folder of
PromQL queries next to it (one panel a file: `# title:`, `# type:`, `# unit:` and an
optional `# legend:` header, then the query).

  hack/dashboard.py --write     writes valkey.json
  hack/dashboard.py --check     fails when valkey.json is not what the queries make
  hack/dashboard.py --rules F   writes every query, variables filled in, as recording
                                rules into F, for `promtool check rules` to parse
  hack/dashboard.py --queries   prints each query as `<file>\t<query>`, variables filled in
                                (namespace, name and the rate interval of the e2e)
"""

import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
FOLDER = ROOT / "deploy/monitoring/dashboard"
QUERIES = FOLDER / "queries"
DASHBOARD = FOLDER / "valkey.json"
PANEL_TYPES = {"stat", "timeseries", "barchart"}


def panels():
    found = []
    for path in sorted(QUERIES.glob("*.promql")):
        header, query = {}, []
        for line in path.read_text().splitlines():
            if line.startswith("# ") and ":" in line and not query:
                key, value = line[2:].split(":", 1)
                header[key.strip()] = value.strip()
            elif line.strip():
                query.append(line.strip())
        for key in ("title", "type", "unit"):
            if key not in header:
                sys.exit(f"dashboard: {path.name} has no `# {key}:` line")
        if header["type"] not in PANEL_TYPES:
            sys.exit(f"dashboard: {path.name}: type {header['type']!r} is not one of {sorted(PANEL_TYPES)}")
        if not query:
            sys.exit(f"dashboard: {path.name} has no query")
        found.append((path.name, header, " ".join(query)))
    if not found:
        sys.exit(f"dashboard: no queries in {QUERIES}")
    return found


def variable(name, label, query):
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "query": {"query": query, "refId": name},
        "refresh": 2,
        "sort": 1,
    }


def dashboard():
    grid = []
    for index, (_, header, query) in enumerate(panels()):
        width = 8 if header["type"] == "stat" else 12
        target = {"expr": query, "refId": "A"}
        if "legend" in header:
            target["legendFormat"] = header["legend"]
        grid.append(
            {
                "id": index + 1,
                "title": header["title"],
                "type": header["type"],
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "fieldConfig": {"defaults": {"unit": header["unit"]}, "overrides": []},
                "targets": [target],
                "gridPos": {"w": width, "h": 8, "x": 0, "y": 0},
            }
        )
    # Rows of 24 columns, in file order.
    x = y = 0
    for panel in grid:
        w = panel["gridPos"]["w"]
        if x + w > 24:
            x, y = 0, y + 8
        panel["gridPos"].update({"x": x, "y": y})
        x += w
    return {
        "title": "Valkey topology",
        "uid": "valkey-operator-topology",
        "description": "A ValkeyCluster or ValkeyReplication: status, members, traffic, "
        "replication, steps, certificates, volumes, and the operator. Made by "
        "hack/dashboard.py from deploy/monitoring/dashboard/queries.",
        "tags": ["valkey", "valkey-operator"],
        "schemaVersion": 39,
        "editable": True,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "templating": {
            "list": [
                {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus"},
                variable("namespace", "Namespace", "label_values(valkey_operator_topology_ready, namespace)"),
                variable("name", "Topology", 'label_values(valkey_operator_topology_ready{namespace="$namespace"}, name)'),
            ]
        },
        "panels": grid,
    }


def filled(query, namespace="default", name="watched", interval="1m"):
    return (
        query.replace("$namespace", namespace)
        .replace("$name", name)
        .replace("$__rate_interval", interval)
    )


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "--check"
    text = json.dumps(dashboard(), indent=2) + "\n"
    if mode == "--write":
        DASHBOARD.write_text(text)
        print(f"dashboard: wrote {DASHBOARD.relative_to(ROOT)}")
    elif mode == "--check":
        if not DASHBOARD.exists() or DASHBOARD.read_text() != text:
            sys.exit(f"dashboard: {DASHBOARD.relative_to(ROOT)} is not what the queries make: run 'hack/dashboard.py --write'")
        print(f"dashboard: {len(panels())} panels, valkey.json up to date")
    elif mode == "--rules":
        rules = [
            {"record": f"dashboard:{name.split('.')[0].replace('-', '_')}", "expr": filled(query)}
            for name, _, query in panels()
        ]
        pathlib.Path(sys.argv[2]).write_text(json.dumps({"groups": [{"name": "dashboard", "rules": rules}]}))
    elif mode == "--queries":
        for name, _, query in panels():
            print(f"{name}\t{filled(query)}")
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
