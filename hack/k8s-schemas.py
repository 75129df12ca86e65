#!/usr/bin/env python3
"""Kubernetes' own JSON schemas for kubeconform, from the PyPI package kubernetes-validate
(hack/kubeconform-check.sh).

k8s-schemas.py WHEEL OUT_DIR VERSION...
    Writes OUT_DIR/v<VERSION>-local-strict/<kind>-<group>-<version>.json for each Kubernetes
    version. kubernetes-validate's schemas point into a shared "/api/_definitions.json",
    which only its own resolver finds; each file written here carries the definitions it
    needs under its own $defs, so kubeconform can read it alone.
"""

import json
import os
import re
import sys
import zipfile

PREFIX = "kubernetes_validate/kubernetes-json-schema/"
REF = re.compile(r'"(?:/api/_definitions\.json)?#/\$defs/([^"]+)"')


def needed(text, defs):
    """Every definition `text` refers to, directly or through another definition."""
    seen, todo = set(), REF.findall(text)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo.extend(REF.findall(json.dumps(defs[name])))
    return seen


def main(wheel, out, versions):
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        for version in versions:
            folder = f"v{version}-local-strict"
            defs = json.loads(z.read(f"{PREFIX}{folder}/_definitions.json"))["$defs"]
            os.makedirs(f"{out}/{folder}", exist_ok=True)
            count = 0
            for name in names:
                if not name.startswith(f"{PREFIX}{folder}/") or name.endswith("/_definitions.json") \
                        or not name.endswith(".json"):
                    continue
                text = z.read(name).decode()
                schema = json.loads(REF.sub(lambda m: f'"#/$defs/{m.group(1)}"', text))
                schema["$defs"] = {n: json.loads(REF.sub(lambda m: f'"#/$defs/{m.group(1)}"',
                                                         json.dumps(defs[n])))
                                   for n in needed(text, defs)}
                with open(f"{out}/{folder}/{os.path.basename(name)}", "w") as f:
                    json.dump(schema, f)
                count += 1
            print(f"k8s-schemas: {count} schemas for Kubernetes {version}", file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
