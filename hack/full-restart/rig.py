#!/usr/bin/env python3
"""Plain-process rig for issue 42: 3 Valkey 8.1 data nodes + 3 sentinels on 127.0.0.1.

Servers run chrooted in the project's Debian 8.1 root filesystem (as hack/marker-shapes.sh
does): each in its own mount namespace with its dir bind-mounted at /tmp in the chroot.
Every process started is recorded in RUN/pids and stopped by PID (stop_all()).
"""
import os, socket, subprocess, time, glob, signal, re, shutil, sys

ROOT = glob.glob(os.path.expanduser("~/.cache/valkey-operator/images/rootfs/valkey-8.1-*"))
ROOT = [r for r in ROOT if os.path.isdir(r)][0]
RUN = os.environ.get("RUN", "/tmp/full-restart-rig")
DPORT = [7401, 7402, 7403]      # data nodes n0 n1 n2
SPORT = [27401, 27402, 27403]   # sentinels
NAME = "g"
procs = {}                      # key -> Popen
allprocs = []                   # every Popen started


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, flush=True)


def cmd(port, *args, timeout=3.0):
    """One RESP command over a raw socket; returns decoded reply (str/int/list/Exception)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = str(a).encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        s.sendall(out)
        f = s.makefile("rb")
        return _read(f)
    finally:
        s.close()


def _read(f):
    line = f.readline()
    if not line:
        raise ConnectionError("closed")
    t, rest = line[:1], line[1:-2]
    if t == b"+":
        return rest.decode()
    if t == b"-":
        return RuntimeError(rest.decode())
    if t == b":":
        return int(rest)
    if t == b"$":
        n = int(rest)
        if n < 0:
            return None
        d = f.read(n + 2)[:-2]
        return d.decode(errors="replace")
    if t == b"*":
        n = int(rest)
        return None if n < 0 else [_read(f) for _ in range(n)]
    raise ValueError(line)


def try_cmd(port, *args, timeout=1.0):
    try:
        return cmd(port, *args, timeout=timeout)
    except Exception as e:
        return e


def info(port, section="replication"):
    r = try_cmd(port, "INFO", section)
    if not isinstance(r, str):
        return {"error": repr(r)}
    return dict(l.split(":", 1) for l in r.splitlines() if ":" in l)


def launch(key, d, sentinel=False):
    script = 'mount --bind "$1" "$2/tmp" && exec chroot "$2" /usr/bin/valkey-server /tmp/valkey.conf' + (
        " --sentinel" if sentinel else "")
    p = subprocess.Popen(["unshare", "-m", "--propagation", "private", "--", "sh", "-c", script, "sh", d, ROOT],
                         stdout=open(os.path.join(d, "stdout"), "ab"), stderr=subprocess.STDOUT)
    old = procs.get(key)
    if old is not None and old.poll() is None:
        raise RuntimeError(f'{key} still running (pid {old.pid})')
    procs[key] = p
    allprocs.append(p)
    with open(os.path.join(RUN, "pids"), "a") as f:
        f.write(f"{p.pid} {key}\n")
    return p


def wait_port(port, t=10):
    end = time.time() + t
    while time.time() < end:
        r = try_cmd(port, "PING", timeout=0.5)
        if r == "PONG" or (isinstance(r, Exception) and "LOADING" in str(r)):
            return True
        time.sleep(0.05)
    return False


def ddir(i):
    return os.path.join(RUN, f"n{i}")


def sdir(j):
    return os.path.join(RUN, f"s{j}")


def start_data(i, replicaof=None, priority=None, appendonly="yes", wait=True, extra=""):
    d = ddir(i)
    os.makedirs(d, exist_ok=True)
    conf = f"""port {DPORT[i]}
bind 127.0.0.1
protected-mode no
dir /tmp
logfile /tmp/valkey.log
appendonly {appendonly}
appendfsync everysec
repl-diskless-sync-delay 0
shutdown-on-sigterm force
"""
    if replicaof is not None:
        conf += f"replicaof 127.0.0.1 {DPORT[replicaof]}\n"
    if priority is not None:
        conf += f"replica-priority {priority}\n"
    conf += extra
    with open(os.path.join(d, "valkey.conf"), "w") as f:
        f.write(conf)
    with open(os.path.join(d, "valkey.log"), "a") as f:
        f.write(f"\n==== START {time.strftime('%H:%M:%S')} replicaof={replicaof} prio={priority} aof={appendonly}\n")
    launch(f"n{i}", d)
    if wait:
        wait_port(DPORT[i])


def start_sentinel(j, primary=None, fresh=False):
    d = sdir(j)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "valkey.conf")
    if fresh or not os.path.exists(path):
        conf = f"""port {SPORT[j]}
bind 127.0.0.1
protected-mode no
dir /tmp
logfile /tmp/sentinel.log
sentinel monitor {NAME} 127.0.0.1 {DPORT[primary]} 2
sentinel down-after-milliseconds {NAME} 5000
sentinel failover-timeout {NAME} 60000
sentinel parallel-syncs {NAME} 1
"""
        with open(path, "w") as f:
            f.write(conf)
    with open(os.path.join(d, "sentinel.log"), "a") as f:
        f.write(f"\n==== START {time.strftime('%H:%M:%S')}\n")
    launch(f"s{j}", d, sentinel=True)
    wait_port(SPORT[j])


def stop(key, sig=signal.SIGTERM, wait=True, t=15):
    p = procs.get(key)
    if p is None or p.poll() is not None:
        return
    os.kill(p.pid, sig)
    if wait:
        try:
            p.wait(t)
        except subprocess.TimeoutExpired:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()


def stop_all():
    for p in allprocs:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGTERM)
    for p in allprocs:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()


def named():
    out = []
    for p in SPORT:
        r = try_cmd(p, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", NAME)
        out.append(int(r[1]) if isinstance(r, list) and r else None)
    return out


def port_index(port):
    return DPORT.index(port) if port in DPORT else None


def repl_summary(i):
    x = info(DPORT[i])
    s = info(DPORT[i], "server")
    keys = ("role", "master_replid", "master_repl_offset", "slave_repl_offset", "master_link_status",
            "master_port", "slave_priority", "replica_priority")
    r = {k: x[k] for k in keys if k in x}
    if "run_id" in s:
        r["run_id"] = s["run_id"][:8]
    if "error" in x:
        r["error"] = x["error"]
    return r


def fresh_run():
    if os.path.exists(RUN):
        shutil.rmtree(RUN)
    os.makedirs(RUN)


def grep_log(path, pat):
    try:
        return [l.rstrip() for l in open(path, errors="replace") if re.search(pat, l)]
    except FileNotFoundError:
        return []
