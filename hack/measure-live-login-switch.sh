#!/usr/bin/env bash
# Measures, on a real Valkey build, what rotating the operator and replication passwords
# would rely on (docs/operator-password-rotation.md): a primary, a replica and a sentinel
# start with password A; the new hashes are added live (ACL SETUSER), the replica's
# masterauth and the sentinel's auth-pass and sentinel-pass switched live, the old hashes
# dropped, and the links killed so that each logs in again. Prints what each step answered
# and whether the replica resynced partially with the new password only.
#
# Usage: hack/measure-live-login-switch.sh ROOTFS
#   ROOTFS: a Valkey root the local cluster unpacked (~/.cache/valkey-operator/images/rootfs/
#   valkey-<version>-<hash>). Its servers run chrooted there (its own libc), as root, on
#   127.0.0.1 ports 27001-27003; each is stopped by its PID.
set -euo pipefail

root=${1:?usage: $0 ROOTFS}
work=/tmp/live-login-switch.$$
mkdir -p "$root$work"
pids=()
stop() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "${root:?}$work"
}
trap stop EXIT

hash() { printf %s "$1" | sha256sum | cut -c1-64; }
rules='resetchannels -@all +psync +sync +replconf +ping'
# No snapshot: a server whose final save fails ignores SIGTERM.
common="save \"\"
user operator on #$(hash opA) ~* &* +@all"
printf '%s\n' "port 27001" "repl-diskless-sync-delay 0" "$common" \
  "user replication on #$(hash repA) $rules" "requirepass def" > "$root$work/p.conf"
printf '%s\n' "port 27002" "$common" "user replication on #$(hash repA) $rules" \
  "requirepass def" "masteruser replication" "masterauth repA" "replicaof 127.0.0.1 27001" \
  > "$root$work/r.conf"
printf '%s\n' "port 27003" "$common" "sentinel sentinel-user operator" \
  "sentinel sentinel-pass opA" "sentinel monitor g 127.0.0.1 27001 1" \
  "sentinel auth-user g operator" "sentinel auth-pass g opA" > "$root$work/s.conf"

start() {
  chroot "$root" sh -c "cd $work && exec /usr/bin/valkey-server $*" > "$root$work/$1.log" 2>&1 &
  pids+=($!)
}
start p.conf
start r.conf
start s.conf --sentinel
op() {
  local port=$1
  shift
  REDISCLI_AUTH=$password chroot "$root" /usr/bin/valkey-cli --no-auth-warning --user operator \
    -p "$port" "$@"
}
password=opA
for _ in $(seq 50); do
  op 27002 INFO replication 2>/dev/null | grep -q master_link_status:up && break
  sleep 0.2
done
chroot "$root" /usr/bin/valkey-server --version
echo "linked: $(op 27002 INFO replication | grep master_link_status)"
op 27001 SET k v > /dev/null

# ACL SETUSER on each of PORTS (a space-separated list), saying WHAT: acl WHAT PORTS USER ARG...
acl() {
  local what=$1 ports=$2
  shift 2
  for port in $ports; do echo "$what on $port: $(op "$port" ACL SETUSER "$@")"; done
}
acl "add operator B" "27001 27002 27003" operator "#$(hash opB)"
acl "add replication B" "27001 27002" replication "#$(hash repB)"
echo "replica masterauth B: $(op 27002 CONFIG SET masterauth repB)"
echo "sentinel auth-pass B: $(op 27003 SENTINEL SET g auth-pass opB)"
echo "sentinel sentinel-pass B: $(op 27003 SENTINEL CONFIG SET sentinel-pass opB)"
password=opB
acl "drop operator A" "27001 27002 27003" operator resetpass "#$(hash opB)"
acl "drop replication A" "27001 27002" replication resetpass "#$(hash repB)"
echo "still linked before re-login: $(op 27002 INFO replication | grep master_link_status)"
op 27001 CLIENT KILL TYPE replica > /dev/null
op 27001 CLIENT KILL USER operator > /dev/null
sleep 3
echo "after re-login: $(op 27002 INFO replication | grep master_link_status), k=$(op 27002 GET k)"
grep -h 'partial resynchronization\|Full resync' "$root$work/r.conf.log" | tail -n 1
echo "sentinel sees the primary: $(op 27003 SENTINEL MASTER g | paste - - | grep -E '^flags')"
echo "old operator password: $(REDISCLI_AUTH=opA chroot "$root" /usr/bin/valkey-cli \
  --no-auth-warning --user operator -p 27001 PING 2>&1)"
grep -h 'auth-pass\|sentinel-pass' "$root$work/s.conf"
