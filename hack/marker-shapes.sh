#!/usr/bin/env bash
# Which command sequence sent to a PRIMARY clears a stale slot marker on its REPLICA?
#
# For each Valkey version this starts plain valkey-server processes (no Kubernetes), builds a
# stale-marker "shape" on a fresh 4-node cluster, tries one method on it, and prints one
# table row per (version, shape, method). Every (shape, method) pair gets a fresh cluster.
#
# Usage (as root: the servers run chrooted in the Debian root filesystems of
# e2e/images/valkey-rootfs.sh, each in its own mount namespace):
#   hack/marker-shapes.sh [-j] [VERSION...]     VERSION: 8.0 8.1 9.1 (default: all three)
#     -j   run the versions side by side (one port block each) instead of one after another
#   Env: MARKER_SHAPES_ONLY="shape,..."   only these shapes; MARKER_SHAPES_METHODS="a,b"
#        only these methods; MARKER_SHAPES_KEEP=1 keeps the server dirs (logs) for a look.
#
# Cluster (per test): P 0-5460, A 5461-10922, D 10923-16383 (primaries, 127.0.0.1, ports
# base+1..3), R replica of P (base+4); base = 7100 + 10*index of the version.
# cluster-node-timeout 5000, appendonly no, save "". CLUSTER SET-CONFIG-EPOCH gives P, A, D, R
# the epochs 1, 2, 3, 4 before they meet (R is a primary until CLUSTER REPLICATE), as an
# operator-built cluster where every node starts as a primary has distinct epochs too.
#
# How a stale marker is made on R (P ends without the marker, R keeps it):
#   1. open the slot with R online (CLUSTER SETSLOT on P is replicated to R);
#   2. force a full resync of R whose RDB is forked while the slot is still open (the RDB
#      carries P's open slots in the "cluster-slot-states" aux field): P gets
#      repl-backlog-size 16384, diskless sync with delay 0 and rdb-key-save-delay (so the
#      fork child runs for ~2 s); R is SIGSTOPped, P kills its replica link
#      (CLIENT KILL TYPE replica), more than the backlog is written to P, R is SIGCONTed;
#   3. once P's fork child runs (R is not "online", so P does not replicate SETSLOT to R),
#      the slot is closed on P (and on the other side of the migration), ownership changes
#      reach R by gossip before it loads the RDB;
#   4. R loads the RDB, which sets the old marker again. The shape is checked (R's marker,
#      P without a marker for the slot, slot owner as expected in every node's view) before
#      any method is tried; a row says "shape not built" otherwise.
#
# Shapes (slot s; markers as in R's CLUSTER NODES myself line):
#   imp-own-P   R [s-<-A], s owned by P (P finished importing s from A, R missed the close)
#   imp-own-A   R [s-<-A], s owned by A (P aborted its import with STABLE; the reported bug)
#   mig-own-P   R [s->-A], s owned by P (P aborted its migration to A with STABLE)
#   imp-drain-D R [s-<-D], s owned by D which is being drained into P (D keeps [s->-P]);
#               P's import marker was dropped (STABLE) while D still migrates
#   mig-moved-D R [s->-D], s owned by D (P migrated s to D and both closed it)
#   each with "-0" (no keys in s) and "-k" (3 keys in s, on the slot's owner, and on R when
#   P owns s).
# Methods (sent to P; R's myself line is read after):
#   a  CLUSTER SETSLOT s NODE <owner>
#   b  CLUSTER SETSLOT s STABLE
#   c  re-open then close: P does not own s: SETSLOT s IMPORTING <owner>; SETSLOT s STABLE
#                          P owns s:         SETSLOT s MIGRATING <A or D>; SETSLOT s STABLE
#   d  on R: CLUSTER RESET SOFT; CLUSTER MEET <P>; CLUSTER REPLICATE <P id>; wait for sync
# Columns: R.before/R.after = R's markers; cleared = the stale marker is gone from R's myself
# line; others = markers on P, A and D afterwards (new = not there before the method);
# owner = owner of s in all four views (agree = all four views agree on every slot);
# keys = GET of the slot's keys on the owner (and on R with READONLY when P owns s);
# R.role = R is a replica of P with master_link_status up.
# Note: CLUSTER NODES prints only one marker per slot (migrating wins over importing).
#
# Every server is stopped by its PID at the end of each test and again on EXIT (trap).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
say() { printf 'marker-shapes: %s\n' "$*" >&2; }

parallel=0
if [[ "${1:-}" == "-j" ]]; then parallel=1; shift; fi
if (($#)); then versions=("$@"); else versions=(8.0 8.1 9.1); fi
[[ "$(id -u)" -eq 0 ]] || { say "needs root (chroot into the Valkey root filesystems)"; exit 1; }
command -v unshare >/dev/null || { say "needs unshare (util-linux)"; exit 1; }

roots=()
for v in "${versions[@]}"; do
  if root="$("$repo/e2e/images/valkey-rootfs.sh" "$v")"; then
    roots+=("$v=$root")
  else
    say "no root filesystem for $v (valkey-rootfs.sh failed); version skipped"
  fi
done
((${#roots[@]})) || { say "no version to run"; exit 1; }

work="$(mktemp -d /tmp/marker-shapes.XXXXXX)"
pidfile="$work/pids"
: >"$pidfile"
cleanup() {
  local pid
  # Only PIDs this run started and that still run valkey-server.
  while read -r pid; do
    [[ -n "$pid" ]] || continue
    if grep -qa valkey-server "/proc/$pid/cmdline" 2>/dev/null; then kill "$pid" 2>/dev/null || true; fi
  done <"$pidfile"
  sleep 0.5
  while read -r pid; do
    [[ -n "$pid" ]] || continue
    if grep -qa valkey-server "/proc/$pid/cmdline" 2>/dev/null; then kill -9 "$pid" 2>/dev/null || true; fi
  done <"$pidfile"
  if [[ "${MARKER_SHAPES_KEEP:-0}" == 1 ]]; then say "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

python3 - "$work" "$pidfile" "$parallel" "${roots[@]}" <<'PY'
import binascii, os, re, signal, socket, subprocess, sys, threading, time

work, pidfile, parallel = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
roots = [a.split("=", 1) for a in sys.argv[4:]]
ONLY = [s for s in os.environ.get("MARKER_SHAPES_ONLY", "").split(",") if s]
METHODS = [m for m in os.environ.get("MARKER_SHAPES_METHODS", "a,b,c,d").split(",") if m]
KEEP = os.environ.get("MARKER_SHAPES_KEEP") == "1"

RANGES = {"P": (0, 5460), "A": (5461, 10922), "D": (10923, 16383)}
SLOT = {"P": 100, "A": 6000, "D": 12000}
ORDER = ["P", "A", "D", "R"]

live_lock = threading.Lock()
live = set()

def write_pids():
    with open(pidfile + ".tmp", "w") as f:
        f.write("".join(f"{p}\n" for p in sorted(live)))
    os.replace(pidfile + ".tmp", pidfile)

def log(*a):
    print("marker-shapes:", *a, file=sys.stderr, flush=True)

def keyslot(key):
    s = key.find("{")
    if s >= 0:
        e = key.find("}", s + 1)
        if e > s + 1:
            key = key[s + 1:e]
    return binascii.crc_hqx(key.encode(), 0) % 16384

def tag_for_slot(slot):
    i = 0
    while True:
        t = f"t{i}"
        if keyslot(t) == slot:
            return t
        i += 1

def tags_in_range(lo, hi, n, avoid):
    out, i = [], 0
    while len(out) < n:
        t = f"p{i}"
        if lo <= keyslot(t) <= hi and keyslot(t) not in avoid:
            out.append(t)
        i += 1
    return out

class Err(str):
    pass

class Conn:
    def __init__(self, port):
        self.port = port
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=15)
        self.buf = b""

    def _line(self):
        while b"\r\n" not in self.buf:
            d = self.sock.recv(65536)
            if not d:
                raise ConnectionError("closed")
            self.buf += d
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _read(self):
        line = self._line()
        t, rest = line[:1], line[1:]
        if t == b"+":
            return rest.decode()
        if t == b"-":
            return Err(rest.decode())
        if t == b":":
            return int(rest)
        if t in (b"$", b"="):
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                d = self.sock.recv(65536)
                if not d:
                    raise ConnectionError("closed")
                self.buf += d
            data, self.buf = self.buf[:n], self.buf[n + 2:]
            return data.decode(errors="replace")
        if t in (b"*", b"~", b">"):
            n = int(rest)
            return None if n < 0 else [self._read() for _ in range(n)]
        if t == b"_":
            return None
        raise ValueError(f"unexpected reply {line!r}")

    def cmd(self, *args):
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = str(a).encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        self.sock.sendall(out)
        return self._read()

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

def must(r, what):
    if isinstance(r, Err):
        raise RuntimeError(f"{what}: {r}")
    return r

def short(r):
    if isinstance(r, Err):
        return "ERR:" + str(r)[:60]
    return str(r)

class Node:
    def __init__(self, cl, label, port):
        self.cl, self.label, self.port = cl, label, port
        self.dir = os.path.join(cl.dir, label)
        os.makedirs(self.dir)
        with open(os.path.join(self.dir, "valkey.conf"), "w") as f:
            f.write("\n".join([
                f"port {port}", "bind 127.0.0.1", "protected-mode no", "daemonize no",
                "cluster-enabled yes", "cluster-config-file nodes.conf",
                "cluster-node-timeout 5000", "appendonly no", 'save ""', "dir /tmp",
                "logfile /tmp/valkey.log", "repl-diskless-sync-delay 0",
                "enable-debug-command yes", ""]))
        script = 'mount --bind "$1" "$2/tmp" && exec chroot "$2" /usr/bin/valkey-server /tmp/valkey.conf'
        self.proc = subprocess.Popen(
            ["unshare", "-m", "--propagation", "private", "--", "sh", "-c", script, "sh", self.dir, cl.root],
            stdin=subprocess.DEVNULL, stdout=open(os.path.join(self.dir, "stdout"), "w"),
            stderr=subprocess.STDOUT)
        with live_lock:
            live.add(self.proc.pid)
            write_pids()
        self.c = None
        self.id = None

    def connect(self):
        deadline = time.time() + 10
        while True:
            try:
                self.c = Conn(self.port)
                if self.c.cmd("PING") == "PONG":
                    break
            except OSError:
                pass
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"{self.label} ({self.port}) did not start; see {self.dir}")
            time.sleep(0.05)
        self.id = self.c.cmd("CLUSTER", "MYID")

    def cmd(self, *a):
        try:
            return self.c.cmd(*a)
        except (OSError, ConnectionError):
            # reconnect once (e.g. after a stop/continue)
            self.c = Conn(self.port)
            return self.c.cmd(*a)

    def info(self, section):
        txt = self.cmd("INFO", section)
        return dict(l.split(":", 1) for l in txt.splitlines() if ":" in l)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.c:
            self.c.close()
        with live_lock:
            live.discard(self.proc.pid)
            write_pids()

MARK = re.compile(r"\[(\d+)-([<>])-([0-9a-f]{40})\]")

def parse_nodes(txt):
    """-> (myself markers [(slot, kind, peer id)], {slot: owner id}, {id: (flags, master)})"""
    markers, owners, nodes = [], {}, {}
    for line in txt.splitlines():
        f = line.split()
        if len(f) < 8:
            continue
        nid, flags, master = f[0], f[2], f[3]
        nodes[nid] = (flags, master, f[7])
        for tok in f[8:]:
            if tok.startswith("["):
                if "myself" in flags.split(","):
                    m = MARK.fullmatch(tok)
                    if m:
                        markers.append((int(m.group(1)), m.group(2), m.group(3)))
                continue
            if "-" in tok:
                lo, hi = tok.split("-")
            else:
                lo = hi = tok
            for s in range(int(lo), int(hi) + 1):
                owners[s] = nid
    return markers, owners, nodes

class Cluster:
    def __init__(self, vidx, version, root, name):
        self.version, self.root = version, root
        self.dir = os.path.join(work, f"{version}-{name}")
        os.makedirs(self.dir)
        base = 7100 + 10 * vidx
        self.n = {}
        try:
            for i, lab in enumerate(ORDER):
                self.n[lab] = Node(self, lab, base + 1 + i)
            for lab in ORDER:
                self.n[lab].connect()
        except Exception:
            self.stop()
            raise
        self.lab = {self.n[l].id: l for l in ORDER}

    def stop(self):
        for node in self.n.values():
            node.stop()
        if not KEEP:
            subprocess.run(["rm", "-rf", self.dir])

    def name(self, nid):
        return self.lab.get(nid, nid[:8])

    def views(self):
        return {l: parse_nodes(self.n[l].cmd("CLUSTER", "NODES")) for l in ORDER}

    def wait(self, pred, what, timeout=15):
        deadline = time.time() + timeout
        while True:
            r = pred()
            if r:
                return r
            if time.time() > deadline:
                raise RuntimeError(f"timeout waiting for {what}")
            time.sleep(0.1)

    def converged(self):
        v = self.views()
        ids = {self.n[l].id for l in ORDER}
        for lab, (_, owners, nodes) in v.items():
            if set(nodes) != ids or len(owners) != 16384:
                return False
            if any(("handshake" in fl or "fail" in fl or "noaddr" in fl or lk != "connected")
                   for nid, (fl, _, lk) in nodes.items() if "myself" not in fl):
                return False
        o = [v[l][1] for l in ORDER]
        if not all(x == o[0] for x in o):
            return False
        # a new primary stays in cluster_state:fail for ~2 s after start (writes get CLUSTERDOWN)
        return all("cluster_state:ok" in self.n[l].cmd("CLUSTER", "INFO") for l in ORDER)

    def replica_ok(self):
        P, R = self.n["P"], self.n["R"]
        ri = R.info("replication")
        if ri.get("role") != "slave" or ri.get("master_link_status") != "up":
            return False
        pi = P.info("replication")
        if "state=online" not in pi.get("slave0", ""):
            return False
        for lab, (_, _, nodes) in self.views().items():
            fl, master, _ = nodes.get(R.id, ("", "", ""))
            if "slave" not in fl or master != P.id:
                return False
        return True

    def build(self):
        n = self.n
        for lab, (lo, hi) in RANGES.items():
            n[lab].cmd("CLUSTER", "ADDSLOTSRANGE", lo, hi)
        for i, lab in enumerate(ORDER):
            n[lab].cmd("CLUSTER", "SET-CONFIG-EPOCH", i + 1)
        for lab in ORDER[1:]:
            n["P"].cmd("CLUSTER", "MEET", "127.0.0.1", n[lab].port)
        self.wait(self.converged, "cluster convergence")
        r = n["R"].cmd("CLUSTER", "REPLICATE", n["P"].id)
        if r != "OK":
            raise RuntimeError(f"CLUSTER REPLICATE: {r}")
        self.wait(self.replica_ok, "R online as replica of P")
        # pad keys on P so a fork child with rdb-key-save-delay takes a while
        for t in tags_in_range(0, 5460, 6, set(SLOT.values())):
            must(n["P"].cmd("SET", "{%s}pad" % t, "x"), "SET pad")

# ---------------------------------------------------------------- shapes

KEYS = 3

def keys_for(slot):
    t = tag_for_slot(slot)
    return ["{%s}k%d" % (t, i) for i in range(KEYS)]

def setslot(node, slot, *rest):
    return node.cmd("CLUSTER", "SETSLOT", slot, *rest)

# Each shape: slot, initial owner, final owner, expected R marker (kind, peer), expected
# non-R markers after the shape is built, open(cl, keys), close(cl).
def shape_defs():
    S = {}

    def imp_own_P(cl, ks, phase):
        P, A, s = cl.n["P"], cl.n["A"], SLOT["A"]
        if phase == "open":
            out = [setslot(P, s, "IMPORTING", A.id), setslot(A, s, "MIGRATING", P.id)]
            if ks:
                out.append(A.cmd("MIGRATE", "127.0.0.1", P.port, "", 0, 5000, "KEYS", *ks))
            return out
        return [setslot(P, s, "NODE", P.id), setslot(A, s, "NODE", P.id)]
    S["imp-own-P"] = dict(slot=SLOT["A"], keys_on="A", owner="P", mark=("<", "A"), others=set(), fn=imp_own_P)

    def imp_own_A(cl, ks, phase):
        P, A, s = cl.n["P"], cl.n["A"], SLOT["A"]
        if phase == "open":
            return [setslot(P, s, "IMPORTING", A.id)]
        return [setslot(P, s, "STABLE")]
    S["imp-own-A"] = dict(slot=SLOT["A"], keys_on="A", owner="A", mark=("<", "A"), others=set(), fn=imp_own_A)

    def mig_own_P(cl, ks, phase):
        P, A, s = cl.n["P"], cl.n["A"], SLOT["P"]
        if phase == "open":
            return [setslot(P, s, "MIGRATING", A.id)]
        return [setslot(P, s, "STABLE")]
    S["mig-own-P"] = dict(slot=SLOT["P"], keys_on="P", owner="P", mark=(">", "A"), others=set(), fn=mig_own_P)

    def imp_drain_D(cl, ks, phase):
        P, D, s = cl.n["P"], cl.n["D"], SLOT["D"]
        if phase == "open":
            return [setslot(P, s, "IMPORTING", D.id), setslot(D, s, "MIGRATING", P.id)]
        return [setslot(P, s, "STABLE")]
    S["imp-drain-D"] = dict(slot=SLOT["D"], keys_on="D", owner="D", mark=("<", "D"),
                            others={("D", SLOT["D"], ">", "P")}, fn=imp_drain_D)

    def mig_moved_D(cl, ks, phase):
        P, D, s = cl.n["P"], cl.n["D"], SLOT["P"]
        if phase == "open":
            out = [setslot(P, s, "MIGRATING", D.id), setslot(D, s, "IMPORTING", P.id)]
            if ks:
                out.append(P.cmd("MIGRATE", "127.0.0.1", D.port, "", 0, 5000, "KEYS", *ks))
            return out
        return [setslot(D, s, "NODE", D.id), setslot(P, s, "NODE", D.id)]
    S["mig-moved-D"] = dict(slot=SLOT["P"], keys_on="P", owner="D", mark=(">", "D"), others=set(), fn=mig_moved_D)
    return S

SHAPES = shape_defs()

def all_markers(cl, views=None):
    views = views or cl.views()
    out = set()
    for lab in ORDER:
        for (s, k, peer) in views[lab][0]:
            out.add((lab, s, k, cl.name(peer)))
    return out

def fmt_marks(ms, who=None):
    ms = sorted(m for m in ms if who is None or m[0] in who)
    if not ms:
        return "none"
    return " ".join(f"{m[0]}:[{m[1]}-{m[2]}-{m[3]}]" if who is None or len(who) > 1 else f"[{m[1]}-{m[2]}-{m[3]}]"
                    for m in ms)

def proc_state(pid):
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]

def make_stale(cl, sh, ks):
    """Open, force a full sync whose RDB is forked while open, close during the sync."""
    P, R = cl.n["P"], cl.n["R"]
    notes = []
    if ks:
        owner0 = cl.n[sh["keys_on"]]
        for k in ks:
            must(owner0.cmd("SET", k, "v-" + k), "SET key")
    opened = sh["fn"](cl, ks, "open")
    if any(isinstance(r, Err) for r in opened):
        raise RuntimeError("open: " + ",".join(map(short, opened)))
    want = (sh["slot"], sh["mark"][0], sh["mark"][1])
    got = {(s, k, cl.name(p)) for (s, k, p) in cl.views()["R"][0]}
    if want not in got:
        notes.append("open not seen on R")
    for kv in (("repl-backlog-size", 16384), ("repl-diskless-sync", "yes"),
               ("repl-diskless-sync-delay", 0), ("rdb-key-save-delay", 300000)):
        r = P.cmd("CONFIG", "SET", *kv)
        if r != "OK":
            raise RuntimeError(f"CONFIG SET {kv}: {r}")
    R.proc.send_signal(signal.SIGSTOP)
    try:
        # SIGSTOP is asynchronous: make sure R is stopped before its link is killed
        cl.wait(lambda: proc_state(R.proc.pid) == "T", "R stopped", timeout=5)
        P.cmd("CLIENT", "KILL", "TYPE", "replica")
        blob = "f" * 4000
        fill = "{%s}fill" % tags_in_range(0, 5460, 1, set(SLOT.values()))[0]
        for _ in range(12):
            must(P.cmd("SET", fill, blob), "SET fill")
    finally:
        R.proc.send_signal(signal.SIGCONT)
    cl.wait(lambda: P.info("persistence").get("rdb_bgsave_in_progress") == "1",
            "P fork child for R's full sync", timeout=10)
    closed = sh["fn"](cl, ks, "close")
    if any(isinstance(r, Err) for r in closed):
        raise RuntimeError("close: " + ",".join(map(short, closed)))
    cl.wait(cl.replica_ok, "R back online after full sync", timeout=30)
    P.cmd("CONFIG", "SET", "rdb-key-save-delay", 0)
    full = int(P.info("stats").get("sync_full", "0"))
    # shape check, after gossip settles
    time.sleep(0.5)
    try:
        cl.wait(cl.converged, "slot map agreement after close", timeout=10)
    except RuntimeError as e:
        notes.append(str(e))
    v = cl.views()
    rm = {(s, k, cl.name(p)) for (s, k, p) in v["R"][0]}
    others = {m for m in all_markers(cl, v) if m[0] != "R"}
    owner = {cl.name(v[l][1].get(sh["slot"], "-")) for l in ORDER}
    ok = (want in rm and others == sh["others"] and owner == {sh["owner"]} and full >= 2)
    if not ok:
        notes.append(f"shape not built: R={sorted(rm)} others={sorted(others)} owner={owner} sync_full={full}")
    return ok, notes

def method_cmds(cl, sh, m):
    P, R = cl.n["P"], cl.n["R"]
    s, owner = sh["slot"], cl.n[sh["owner"]]
    if m == "a":
        return [("P", ("CLUSTER", "SETSLOT", s, "NODE", owner.id))]
    if m == "b":
        return [("P", ("CLUSTER", "SETSLOT", s, "STABLE"))]
    if m == "c":
        if sh["owner"] == "P":
            other = cl.n["A" if sh["mark"][1] != "D" else "D"]
            return [("P", ("CLUSTER", "SETSLOT", s, "MIGRATING", other.id)),
                    ("P", ("CLUSTER", "SETSLOT", s, "STABLE"))]
        return [("P", ("CLUSTER", "SETSLOT", s, "IMPORTING", owner.id)),
                ("P", ("CLUSTER", "SETSLOT", s, "STABLE"))]
    raise ValueError(m)

METHOD_TEXT = {"a": "SETSLOT NODE <owner>", "b": "SETSLOT STABLE", "c": "reopen+STABLE",
               "d": "R: RESET SOFT+MEET+REPLICATE"}

def run_method(cl, sh, m):
    P, R = cl.n["P"], cl.n["R"]
    replies = []
    if m in ("a", "b", "c"):
        for lab, args in method_cmds(cl, sh, m):
            replies.append(short(cl.n[lab].cmd(*args)))
    else:
        replies.append(short(R.cmd("CLUSTER", "RESET", "SOFT")))
        replies.append(short(R.cmd("CLUSTER", "MEET", "127.0.0.1", P.port)))
        try:
            cl.wait(lambda: P.id in parse_nodes(R.cmd("CLUSTER", "NODES"))[2]
                    and "handshake" not in parse_nodes(R.cmd("CLUSTER", "NODES"))[2][P.id][0],
                    "R to know P after MEET", timeout=10)
        except RuntimeError as e:
            replies.append(str(e))
        replies.append(short(R.cmd("CLUSTER", "REPLICATE", P.id)))
        try:
            cl.wait(cl.replica_ok, "R online after REPLICATE", timeout=20)
        except RuntimeError as e:
            replies.append(str(e))
    time.sleep(1.0)
    try:
        cl.wait(cl.converged, "agreement", timeout=5)
    except RuntimeError:
        pass
    return replies

def read_keys(cl, sh, ks):
    if not ks:
        return "-"
    v = cl.views()
    owner = cl.name(v["P"][1].get(sh["slot"], "-"))
    if owner not in cl.n:
        return f"no owner"
    o = cl.n[owner]
    good = sum(1 for k in ks if o.cmd("GET", k) == "v-" + k)
    out = f"{owner}:{good}/{len(ks)}"
    if owner == "P":
        R = cl.n["R"]
        R.cmd("READONLY")
        rg = sum(1 for k in ks if R.cmd("GET", k) == "v-" + k)
        out += f" R:{rg}/{len(ks)}"
    return out

COLS = ["version", "shape", "method", "replies", "R.before", "R.after", "cleared",
        "others.after", "new", "owner", "agree", "keys", "R.role"]

def run_one(vidx, version, root, shape_name, keys, m):
    sh = SHAPES[shape_name]
    ks = keys_for(sh["slot"]) if keys else []
    row = dict(version=version, shape=f"{shape_name}-{'k' if keys else '0'}",
               method=f"{m} {METHOD_TEXT[m]}")
    cl = Cluster(vidx, version, root, f"{shape_name}-{'k' if keys else '0'}-{m}")
    try:
        cl.build()
        ok, notes = make_stale(cl, sh, ks)
        v = cl.views()
        before_r = {(s, k, cl.name(p)) for (s, k, p) in v["R"][0]}
        row["R.before"] = fmt_marks({("R",) + x for x in before_r}, who={"R"})
        before_o = {x for x in all_markers(cl, v) if x[0] != "R"}
        if not ok:
            row["replies"] = "; ".join(notes)
            return row
        replies = run_method(cl, sh, m)
        v = cl.views()
        after_r = {(s, k, cl.name(p)) for (s, k, p) in v["R"][0]}
        after_o = {x for x in all_markers(cl, v) if x[0] != "R"}
        want = (sh["slot"], sh["mark"][0], sh["mark"][1])
        row["replies"] = ",".join(replies)
        row["R.after"] = fmt_marks({("R",) + x for x in after_r}, who={"R"})
        row["cleared"] = "no" if want in after_r else ("yes" if not any(x[0] == sh["slot"] for x in after_r) else "changed")
        row["others.after"] = fmt_marks(after_o)
        new = after_o - before_o
        row["new"] = fmt_marks(new) if new else "-"
        owners = {cl.name(v[l][1].get(sh["slot"], "-")) for l in ORDER}
        row["owner"] = "/".join(sorted(owners))
        maps = [v[l][1] for l in ORDER]
        row["agree"] = "yes" if all(mp == maps[0] for mp in maps) and len(maps[0]) == 16384 else "NO"
        row["keys"] = read_keys(cl, sh, ks)
        ri = cl.n["R"].info("replication")
        fl, master, _ = v["P"][2].get(cl.n["R"].id, ("?", "?", "?"))
        row["R.role"] = ("replica-of-P" if ri.get("role") == "slave" and ri.get("master_link_status") == "up"
                         and master == cl.n["P"].id else f"{ri.get('role')}/{ri.get('master_link_status')}")
        return row
    except Exception as e:
        row["replies"] = f"error: {e}"
        return row
    finally:
        cl.stop()

rows = []
rows_lock = threading.Lock()

def fmt_row(r):
    return " | ".join(str(r.get(c, "")) for c in COLS)

def run_version(vidx, version, root):
    for shape_name in SHAPES:
        if ONLY and shape_name not in ONLY:
            continue
        for keys in (False, True):
            for m in METHODS:
                t0 = time.time()
                r = run_one(vidx, version, root, shape_name, keys, m)
                log(f"{version} {r['shape']} {m}: {time.time() - t0:.1f}s")
                with rows_lock:
                    rows.append(r)
                    if not parallel:
                        print(fmt_row(r), flush=True)

def main():
    ver = {}
    for vidx, (version, root) in enumerate(roots):
        out = subprocess.run(["chroot", root, "/usr/bin/valkey-server", "--version"], capture_output=True, text=True)
        ver[version] = out.stdout.strip()
        log(f"{version}: {ver[version]} ({root})")
    print("# " + " | ".join(f"{k}: {v.split()[2] if len(v.split()) > 2 else v}" for k, v in ver.items()))
    print(" | ".join(COLS), flush=True)
    if parallel:
        ts = [threading.Thread(target=run_version, args=(i, v, r)) for i, (v, r) in enumerate(roots)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        order = {v: i for i, (v, _) in enumerate(roots)}
        sk = list(SHAPES)
        rows.sort(key=lambda r: (order[r["version"]], sk.index(r["shape"][:-2]), r["shape"][-1] == "k", r["method"]))
        for r in rows:
            print(fmt_row(r))
    else:
        for i, (v, r) in enumerate(roots):
            run_version(i, v, r)

try:
    main()
except KeyboardInterrupt:
    sys.exit(130)
PY
