#!/usr/bin/env python3
"""One CycloneDX SBOM for the operator image from cargo-cyclonedx's per-binary ones.

release-sbom.py OUT IMAGE ROOT BOM...
    OUT    the SBOM to write (CycloneDX 1.5 JSON)
    IMAGE  repository:tag@sha256:digest, the image the SBOM describes
    ROOT   the checkout the BOMs were made in: its path is taken out of references, so the
           SBOM does not depend on where the release was built
    BOM    cargo-cyclonedx output, one per binary the image carries

The image is the SBOM's subject (a container); each binary is an application component it
depends on; the crates are the union of the binaries' components, their dependency edges
merged.
"""

import json
import sys


def main(out, image, root, boms):
    repository_tag, digest = image.split("@", 1)
    repository, tag = repository_tag.rsplit(":", 1)
    prefix = "file://" + root.rstrip("/") + "/"

    def local(value):
        return value.replace(prefix, "file://./") if isinstance(value, str) else value

    def clean(obj):
        if isinstance(obj, dict):
            return {k: clean(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [clean(v) for v in obj]
        return local(obj)

    components, edges, binaries, timestamp, tools = {}, {}, [], None, None
    for path in boms:
        with open(path) as f:
            bom = clean(json.load(f))
        meta = bom["metadata"]
        timestamp = timestamp or meta.get("timestamp")
        tools = tools or meta.get("tools")
        binary = meta["component"]
        binaries.append(binary)
        components.setdefault(binary["bom-ref"], binary)
        for c in bom.get("components", []):
            components.setdefault(c["bom-ref"], c)
        for d in bom.get("dependencies", []):
            edges.setdefault(d["ref"], set()).update(d.get("dependsOn", []))

    name = repository.rsplit("/", 1)[-1]
    subject_ref = f"pkg:oci/{name}@{digest.replace(':', '%3A')}?repository_url={repository}&tag={tag}"
    subject = {
        "type": "container",
        "bom-ref": subject_ref,
        "name": repository,
        "version": tag,
        "hashes": [{"alg": "SHA-256", "content": digest.split(":", 1)[1]}],
        "purl": subject_ref,
    }
    edges[subject_ref] = {b["bom-ref"] for b in binaries}
    for ref in list(edges):
        missing = [r for r in edges[ref] if r not in components and r != subject_ref]
        if missing:
            sys.exit(f"release-sbom: {ref} depends on {missing[:3]}, which no BOM lists")

    sbom = {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "version": 1,
        "metadata": {"timestamp": timestamp, "tools": tools, "component": subject},
        "components": sorted(components.values(), key=lambda c: c["bom-ref"]),
        "dependencies": [
            {"ref": ref, "dependsOn": sorted(deps)} for ref, deps in sorted(edges.items())
        ],
    }
    with open(out, "w") as f:
        json.dump(sbom, f, indent=2, sort_keys=True)
        f.write("\n")
    print(f"release-sbom: {len(components)} components, {len(binaries)} binaries, {out}", file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:])
