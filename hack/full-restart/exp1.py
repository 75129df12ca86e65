#!/usr/bin/env python3
"""Exp 1: what a node reports after a graceful restart when it loads its AOF; RDB aux fields."""
import sys, time, subprocess, os
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rig import *

def checkrdb(i):
    d = ddir(i)
    if not os.path.exists(os.path.join(d, "dump.rdb")):
        return "no dump.rdb"
    out = subprocess.run(["unshare", "-m", "--propagation", "private", "--", "sh", "-c",
        'mount --bind "$1" "$2/tmp" && exec chroot "$2" /usr/bin/valkey-check-rdb /tmp/dump.rdb', "sh", d, ROOT],
        capture_output=True, text=True)
    return "\n".join(l for l in out.stdout.splitlines() if "AUX" in l or "Checking" in l or "OK" in l)

fresh_run()
try:
    start_data(0); start_data(1, replicaof=0); start_data(2, replicaof=0)
    for i in range(1000):
        cmd(DPORT[0], "SET", f"k{i}", "v")
    print("WAIT ->", cmd(DPORT[0], "WAIT", 2, 1000))
    for i in range(3): print("before", i, repl_summary(i))
    # 1a: graceful restart of replica n1
    stop("n1")
    print("n1 stopped; dump.rdb of n1:\n" + checkrdb(1))
    start_data(1, replicaof=0)
    print("n1 right after start:", repl_summary(1))
    time.sleep(2)
    print("n1 2s after start:", repl_summary(1))
    print("n1 log:", grep_log(ddir(1)+"/valkey.log", "PSYNC|Partial|full sync|FULL|append only|RDB|cached")[-12:])
    print("n0 log:", grep_log(ddir(0)+"/valkey.log", "Partial|full resync|FULL|Full resync")[-6:])
    # 1b: whole set: stop replicas then primary, restart all standalone (no replicaof)
    for i in range(100): cmd(DPORT[0], "SET", f"m{i}", "v")
    cmd(DPORT[0], "WAIT", 2, 1000)
    for i in range(3): print("before full stop", i, repl_summary(i))
    stop("n1"); stop("n2"); stop("n0")
    for i in range(3): print(f"dump.rdb n{i}:\n" + checkrdb(i))
    start_data(0); start_data(1, replicaof=0, wait=False); start_data(2, replicaof=0, wait=False)
    # replicas started as replicas of n0 (which is up): fetch quickly
    for i in range(3): print("after full restart", i, repl_summary(i))
    time.sleep(2)
    for i in range(3): print("after 2s", i, repl_summary(i))
    # 1c: restart replicas with the primary DOWN (what sentinel sees at election time)
    stop("n1"); stop("n2"); stop("n0")
    start_data(1, replicaof=0); start_data(2, replicaof=0)
    time.sleep(1)
    for i in (1, 2): print("replica with primary down", i, repl_summary(i), info(DPORT[i]).get("master_link_down_since_seconds"))
    print("n1 log tail:", grep_log(ddir(1)+"/valkey.log", "")[-8:])
    # 1d: same, but load the RDB (appendonly no at start), then CONFIG SET appendonly yes
    stop("n1"); stop("n2")
    start_data(1, replicaof=0, appendonly="no"); start_data(2, replicaof=0, appendonly="no")
    time.sleep(1)
    for i in (1, 2): print("replica from RDB, primary down", i, repl_summary(i))
    print("n1 log tail:", grep_log(ddir(1)+"/valkey.log", "")[-8:])
    print("n1 DBSIZE", cmd(DPORT[1], "DBSIZE"))
finally:
    stop_all()
