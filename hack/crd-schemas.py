#!/usr/bin/env python3
"""JSON schemas for kubeconform from our CRDs (hack/kubeconform-check.sh).

crd-schemas.py OUT_DIR CRD.yaml...
    Writes <kind>-<group's first label>-<version>.json per served version, the file name
    kubeconform's {{.ResourceKind}}{{.KindSuffix}} template asks for. Strict, like the API
    server's pruning: an object with properties takes no others (unless it preserves unknown
    fields), so a misspelt field fails the check instead of vanishing at apply.
"""

import json
import os
import sys

import yaml


def strict(schema):
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    for key in ("properties", "patternProperties"):
        if key in schema:
            out[key] = {name: strict(s) for name, s in schema[key].items()}
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            out[key] = strict(schema[key])
    for key in ("allOf", "anyOf", "oneOf"):
        if key in schema:
            out[key] = [strict(s) for s in schema[key]]
    if ("properties" in schema and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


def main(out_dir, paths):
    os.makedirs(out_dir, exist_ok=True)
    written = 0
    for path in paths:
        with open(path) as f:
            crd = yaml.safe_load(f)
        group = crd["spec"]["group"]
        kind = crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            if not version.get("served"):
                continue
            schema = strict(version["schema"]["openAPIV3Schema"])
            props = schema.setdefault("properties", {})
            props.setdefault("apiVersion", {"type": "string", "enum": [f"{group}/{version['name']}"]})
            props.setdefault("kind", {"type": "string", "enum": [kind]})
            props.setdefault("metadata", {"type": "object"})
            name = f"{kind.lower()}-{group.split('.')[0]}-{version['name']}.json"
            with open(os.path.join(out_dir, name), "w") as f:
                json.dump(schema, f)
            written += 1
    print(f"crd-schemas: {written} schemas in {out_dir}", file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2:])
