#!/usr/bin/env python3
"""Where e2e time went, from a log of `just test` (or `.ci/run`): per test binary, its wall
time (hack/e2e-lanes.sh's "took" lines) and, for the suites on TestRun, the time spent
starting clusters with the operator, in the tests themselves and clearing namespaces
(e2e/e2e-kit/src/test_run.rs's "test-run:" lines).

Usage: hack/e2e-times.py LOG
"""

import re
import sys
from collections import defaultdict

LANE = re.compile(r"^\[(\w+)\] (.*)$")
TOOK = re.compile(r"e2e-lanes: (\S+) took (\d+)s")
STARTED = re.compile(r"test-run: local cluster with the operator started in ([\d.]+)s")
READY = re.compile(r"test-run: (\S+): (shared|own) cluster ready in ([\d.]+)s")
ENDED = re.compile(r"test-run: (\S+): test took ([\d.]+)s, (namespace cleared|own cluster stopped) in ([\d.]+)s")


def main(path):
    pending = defaultdict(list)  # lane -> test-run lines of the binary running in it
    rows = []
    for raw in open(path, errors="replace"):
        match = LANE.match(raw.rstrip("\n"))
        lane, line = match.groups() if match else ("", raw.rstrip("\n"))
        took = TOOK.search(line)
        if took:
            rows.append((took.group(1), int(took.group(2)), pending.pop(lane, [])))
        elif "test-run:" in line:
            pending[lane].append(line)
    print("| binary | wall | tests (own cluster) | cluster starts | in tests | clearing |")
    print("|---|---|---|---|---|---|")
    for name, wall, lines in rows:
        starts = [float(m.group(1)) for m in map(STARTED.search, lines) if m]
        ready = [m for m in map(READY.search, lines) if m]
        ended = [m for m in map(ENDED.search, lines) if m]
        own = sum(1 for m in ready if m.group(2) == "own")
        in_tests = sum(float(m.group(2)) for m in ended)
        clearing = sum(float(m.group(4)) for m in ended)
        if not ready:
            print(f"| {name} | {wall} s | | | | |")
            continue
        print(
            f"| {name} | {wall} s | {len(ready)} ({own}) | {len(starts)}: {sum(starts):.0f} s "
            f"| {in_tests:.0f} s | {clearing:.0f} s |"
        )


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
