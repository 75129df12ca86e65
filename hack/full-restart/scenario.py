#!/usr/bin/env python3
"""Exp 2/3: acked-write loss after a full restart, baseline and candidate fixes.

P = n0 (primary), R0 = n1 (stopped first), R1 = n2.
Usage: scenario.py MODE [runs]
  base     : restart sentinels (from their rewritten configs) + R0, R1 as replicas of P (AOF load);
             P waits (as DATA_ROLE does) until the sentinels name another, then starts as its replica.
  a:D      : P starts as primary D seconds after the sentinels (R0, R1 as its replicas at once).
  b[:D]    : replicas start with replica-priority 0 (restored by CONFIG SET after their first
             completed sync); P waits like base, up to 40 s (patience), then starts as primary;
             D = 'never' => P never returns (report after 40 s).
  c[:L]    : every data node loads dump.rdb (appendonly no at start, CONFIG SET appendonly yes after);
             P waits like base. L = delay (s) before R1 starts (R0 starts at once).
  ac:D     : a + c (P starts as primary after D s, all nodes load their RDB).
"""
import sys, time, threading, socket, json, os
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rig import *
from rig import _read

mode = sys.argv[1]
runs = int(sys.argv[2]) if len(sys.argv) > 2 else 1
kind, _, arg = mode.partition(":")
P, R0, R1 = 0, 1, 2


class Writer(threading.Thread):
    def __init__(self, port, prefix):
        super().__init__(daemon=True)
        self.port, self.prefix, self.acked, self.sent, self.stopflag = port, prefix, [], 0, False

    def run(self):
        s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        f = s.makefile("rb")
        i = 0
        while not self.stopflag:
            k = f"{self.prefix}{i}"
            try:
                s.sendall(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$1\r\nv\r\n" % (len(k), k.encode()))
                _read(f)
                s.sendall(b"*3\r\n$4\r\nWAIT\r\n$1\r\n1\r\n$4\r\n1000\r\n")
                n = _read(f)
            except Exception as e:
                log("writer stopped:", e); break
            self.sent += 1
            if isinstance(n, int) and n >= 1:
                self.acked.append(k)
            i += 1
            time.sleep(0.002)
        s.close()


def settle_sentinels(t=20):
    end = time.time() + t
    while time.time() < end:
        ok = True
        for p in SPORT:
            r = try_cmd(p, "SENTINEL", "REPLICAS", NAME)
            s = try_cmd(p, "SENTINEL", "SENTINELS", NAME)
            if not (isinstance(r, list) and len(r) == 2 and isinstance(s, list) and len(s) == 2):
                ok = False
        if ok:
            return True
        time.sleep(0.5)
    return False


def wait_synced(i, t=20):
    end = time.time() + t
    while time.time() < end:
        x = info(DPORT[i])
        if x.get("master_link_status") == "up":
            return True
        time.sleep(0.2)
    return False


def priority_restorer(idx, stop_evt):
    """fix b: restore replica-priority 100 once the replica completed a sync (link up)."""
    while not stop_evt.is_set():
        x = info(DPORT[idx])
        if x.get("master_link_status") == "up":
            try_cmd(DPORT[idx], "CONFIG", "SET", "replica-priority", "100")
            log(f"fix b: n{idx} synced with :{x.get('master_port')}; replica-priority restored")
            return
        time.sleep(0.2)


def one_run(n):
    fresh_run()
    res = {"mode": mode, "run": n}
    start_data(P); start_data(R0, replicaof=P); start_data(R1, replicaof=P)
    for j in range(3):
        start_sentinel(j, primary=P, fresh=True)
    assert settle_sentinels(), "sentinels did not discover replicas/peers"
    w = Writer(DPORT[P], "k"); w.start()
    time.sleep(1.0)
    stop(f"n{R0}"); log("R0 stopped")
    time.sleep(0.7)
    w.stopflag = True; w.join()
    res["acked"], res["sent"] = len(w.acked), w.sent
    pre = {f"n{i}": repl_summary(i) for i in (P, R1)}
    log("before stop:", pre)
    stop(f"n{R1}"); stop(f"n{P}")
    for j in range(3):
        stop(f"s{j}")
    log("all stopped; acked", len(w.acked), "of", w.sent)
    dbs = {}
    # ---- restart ----
    use_rdb = kind in ("c", "ac")
    aof = "no" if use_rdb else "yes"
    prio = 0 if kind == "b" else None
    t0 = time.time()
    for j in range(3):
        start_sentinel(j)
    restorers = []
    stop_evt = threading.Event()
    p_started = False
    if kind in ("a", "ac") and float(arg or 0) == 0:
        start_data(P, appendonly=aof); p_started = True
    start_data(R0, replicaof=P, priority=prio, appendonly=aof)
    r1_delay = float(arg) if (kind == "c" and arg) else 0
    r1_started = False
    if r1_delay == 0:
        start_data(R1, replicaof=P, priority=prio, appendonly=aof); r1_started = True
    after = {}
    for i in (R0, R1):
        if (i == R1 and not r1_started):
            continue
        after[f"n{i}"] = repl_summary(i)
        after[f"n{i}"]["dbsize"] = try_cmd(DPORT[i], "DBSIZE")
    if p_started:
        after[f"n{P}"] = repl_summary(P); after[f"n{P}"]["dbsize"] = try_cmd(DPORT[P], "DBSIZE")
    log("right after restart:", after)
    res["after_restart"] = after
    if use_rdb:
        for i in (R0, R1) + ((P,) if p_started else ()):
            if i == R1 and not r1_started: continue
            try_cmd(DPORT[i], "CONFIG", "SET", "appendonly", "yes")
    if kind == "b":
        for i in (R0, R1):
            th = threading.Thread(target=priority_restorer, args=(i, stop_evt), daemon=True); th.start()
    # P's start policy
    patience = 40
    new_primary = None
    time.sleep(3)
    rep = try_cmd(SPORT[0], "SENTINEL", "REPLICAS", NAME)
    view = []
    if isinstance(rep, list):
        for r in rep:
            d = dict(zip(r[::2], r[1::2]))
            view.append({k: d.get(k) for k in ("port", "run-id", "slave-repl-offset", "slave-priority", "master-link-down-time", "flags")})
    log("sentinel s0 view of replicas:", view)
    res["sentinel_view"] = view
    while True:
        el = time.time() - t0
        if not r1_started and el >= r1_delay:
            start_data(R1, replicaof=P, appendonly=aof); r1_started = True
            if use_rdb: try_cmd(DPORT[R1], "CONFIG", "SET", "appendonly", "yes")
            log("R1 started late:", repl_summary(R1))
        if kind in ("a", "ac"):
            if not p_started and el >= float(arg):
                start_data(P, appendonly=aof); p_started = True
                if use_rdb: try_cmd(DPORT[P], "CONFIG", "SET", "appendonly", "yes")
                log("P started as primary at", round(el, 1), repl_summary(P))
            if el > 25:
                break
        else:
            nm = named()
            others = [x for x in nm if x is not None and x != DPORT[P]]
            if len(others) >= 2 and not p_started:
                new_primary = port_index(others[0])
                log(f"sentinels name n{new_primary} after {el:.1f}s; P starts as its replica")
                if arg != "never":
                    start_data(P, replicaof=new_primary, appendonly=aof); p_started = True
                    if use_rdb: try_cmd(DPORT[P], "CONFIG", "SET", "appendonly", "yes")
                break
            if el >= patience and not p_started:
                if arg == "never":
                    log("P never returns; sentinels name", nm); break
                log(f"patience over after {el:.1f}s: P starts as primary")
                start_data(P, appendonly=aof); p_started = True
                if use_rdb: try_cmd(DPORT[P], "CONFIG", "SET", "appendonly", "yes")
            if p_started and el > patience + 15:
                break
        time.sleep(0.5)
    time.sleep(3)
    nm = named()
    res["named"] = [port_index(x) for x in nm]
    prim = [i for i in range(3) if info(DPORT[i]).get("role") == "master"]
    res["masters"] = prim
    log("sentinels name", res["named"], "masters", prim)
    for i in range(3):
        if i in (P,) and not p_started: continue
        wait_synced(i, 15) if i not in prim else None
    final = {f"n{i}": repl_summary(i) for i in range(3)}
    log("final:", final)
    # lost acked keys: check on the named primary
    tgt = res["named"][0] if res["named"][0] is not None else (prim[0] if prim else None)
    lost = None
    if tgt is not None:
        s = socket.create_connection(("127.0.0.1", DPORT[tgt])); f = s.makefile("rb")
        for k in w.acked:
            s.sendall(b"*2\r\n$6\r\nEXISTS\r\n$%d\r\n%s\r\n" % (len(k), k.encode()))
        lost = sum(1 for _ in w.acked if _read(f) == 0)
        s.close()
    res["lost_acked"] = lost
    res["primary_after"] = tgt
    for j in range(3):
        res[f"s{j}_log"] = grep_log(sdir(j) + "/sentinel.log",
            r"selected-slave|failover-abort|try-failover|elected-leader|\+sdown master|\+odown|switch-master|no-good|promoted-slave|\+convert-to-slave|\+reboot")[-12:]
    stop_evt.set()
    stop_all()
    procs.clear()
    return res


results = []
try:
    for n in range(runs):
        r = one_run(n)
        results.append(r)
        print("RESULT", json.dumps({k: v for k, v in r.items() if not k.endswith("_log")}), flush=True)
        for j in range(3):
            for l in r[f"s{j}_log"]:
                print(f"  s{j}:", l)
finally:
    stop_all()
print("SUMMARY", mode, [(r["acked"], r["lost_acked"], r["primary_after"]) for r in results])
