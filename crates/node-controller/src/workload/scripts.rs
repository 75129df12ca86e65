//! The shell a member of a ValkeyReplication runs before Valkey or Sentinel starts, so a pod
//! that restarts comes back in the right role with the operator down. Both read the
//! replication context (`/etc/valkey/replication`, see [`crate::config::replication`]) and
//! ask the group's sentinels (as the `operator` user, 2 s each) which address they name
//! primary (`SENTINEL GET-MASTER-ADDR-BY-NAME`), taking the answer of a majority of those
//! that answer.
//!
//! - A data node ([`data_role`]) starts as a replica of the named primary, with
//!   `replica-priority 0` until its first sync completes (see [`RESTORE_PRIORITY`]). When
//!   the sentinels name the node itself, it is restarting while they still count it
//!   primary. If it stopped cleanly (its shutdown save is newer than every append-only file,
//!   and its preStop hook did not hand over) it holds every write it acknowledged and starts
//!   as primary at once. Otherwise its replicas may hold writes it lost, so it waits (not
//!   serving) until they fail over and name another, or until a failover is evidently not
//!   coming (twice down-after-milliseconds plus 30 s, or a group with one data node) and
//!   then starts as primary. When no sentinel names anyone (none answers, or none monitors
//!   the group yet), it follows the primary the operator last saw (15 s later once the group
//!   is monitored, at once before), starting as primary if that is itself. The rule and its
//!   reasons: docs/replication.md, "A full restart".
//! - A sentinel's init container ([`SENTINEL_INIT`]) carries its state over from
//!   /data/sentinel.conf; a sentinel without state (a new pod) in a monitored group monitors
//!   the primary its peers name (or the last one seen) with the spec's options and every
//!   other data node as a known replica, so it can fail over even if the primary never
//!   comes back. Its main container adds its users and the login to the data nodes
//!   (see [`crate::config::sentinel_auth_script`]).

use crd_types::template::OPERATOR_USER;

use super::memory_only::GROUP_GUARD;
use crate::config::{OPERATOR_PASSWORD_ENV, POD_IP_ENV};

/// Where the replication context is mounted.
pub const CONTEXT_PATH: &str = "/etc/valkey/replication";

/// Reads the context into shell variables, and `named`: the address a majority of the
/// answering sentinels name primary (nothing when none does).
const READ_CONTEXT: &str = r#"ctx=/etc/valkey/replication
name= self="${POD_IP-}" primary= monitored=no quorum=2 down=5000 failover=60000 syncs=1
sentinels= data= data_count=0
if [ -r "$ctx" ]; then
  while read -r key value; do
    case "$key" in
      name) name=$value ;;
      self) self=$value ;;
      primary) primary=$value ;;
      monitored) monitored=$value ;;
      quorum) quorum=$value ;;
      down-after-milliseconds) down=$value ;;
      failover-timeout) failover=$value ;;
      parallel-syncs) syncs=$value ;;
      sentinel) sentinels="$sentinels $value" ;;
      data) data="$data $value"; data_count=$((data_count + 1)) ;;
    esac
  done < "$ctx"
fi
named() {
  answers=
  for s in $sentinels; do
    a=$(REDISCLI_AUTH="${VALKEY_OPERATOR_PASSWORD-}" timeout 2 valkey-cli --no-auth-warning \
      -h "$s" -p 26379 ${VALKEY_OPERATOR_PASSWORD:+--user operator} --raw \
      SENTINEL GET-MASTER-ADDR-BY-NAME "$name" 2>/dev/null | head -n 1) || a=
    case "$a" in ''|*[!0-9a-fA-F.:]*) ;; *) answers="$answers $a" ;; esac
  done
  total=$(echo $answers | wc -w)
  for a in $answers; do
    n=$(echo $answers | tr ' ' '\n' | grep -cx "$a")
    if [ $((n * 2)) -gt "$total" ]; then echo "$a"; return; fi
  done
}
"#;

/// Shell lines setting `op` to the operator password: from `file` (the mounted Secret, see
/// [`crate::config::OPERATOR_PASSWORD_FILE`]) when it is readable and not empty, since the
/// password may have been rotated after the container started; else from the env, as it was then. The file
/// may also be ahead of the server (a rotation that has not reached it yet, the operator
/// down): when the server on `port` refuses it, the env's. Empty without an operator user.
pub(super) fn read_operator_password(file: &str, port: i32) -> String {
    format!(
        r#"op=$(cat '{file}' 2>/dev/null) || op=
[ -n "$op" ] || op="${{{OPERATOR_PASSWORD_ENV}-}}"
if [ "$op" != "${{{OPERATOR_PASSWORD_ENV}-}}" ] && REDISCLI_AUTH="$op" timeout 3 valkey-cli --no-auth-warning --user {OPERATOR_USER} -h "${{{POD_IP_ENV}-}}" -p {port} PING 2>&1 | grep -q WRONGPASS; then
  op="${{{OPERATOR_PASSWORD_ENV}-}}"
fi
"#
    )
}

/// A data node's role at start; appended to its start command before the `exec`, it adds
/// `--replicaof <primary> 6379` to the server's arguments when it starts as a replica.
pub fn data_role() -> String {
    format!("{READ_CONTEXT}{RESTORE_PRIORITY}{DATA_ROLE}")
}

/// [`data_role`] for a memory-only data node: it starts empty, and never as primary while
/// another data node holds keys (see [`super::memory_only`]).
pub fn memory_only_data_role() -> String {
    let guarded = DATA_ROLE
        .replace(
            LEADS_AS_LAST_SEEN,
            &format!("{GROUP_GUARD}{LEADS_AS_LAST_SEEN}"),
        )
        .replace(LEADS_UNFAILED, &format!("{GROUP_GUARD}{LEADS_UNFAILED}"));
    let prelude = super::memory_only::group_prelude();
    format!("{READ_CONTEXT}{RESTORE_PRIORITY}{prelude}{guarded}")
}

/// [`DATA_ROLE`]'s decisions to start as primary, which [`memory_only_data_role`] guards.
const LEADS_AS_LAST_SEEN: &str =
    "          echo \"no sentinel names a primary: starting as primary, the last seen\" >&2\n";
const LEADS_UNFAILED: &str = "      echo \"the sentinels still name this node primary and fail nobody over: starting as primary\" >&2\n";

/// A replica starts with `replica-priority 0`, so Sentinel cannot elect it while what it
/// holds is unknown (after a restart that loaded its append-only file every member reports
/// the same offset, and Sentinel would pick by run id). In the background it gets the
/// configured priority back once its first sync completed (or it is primary), or, so a
/// primary that never comes back can still be failed over, after `$patience`.
const RESTORE_PRIORITY: &str = r#"self_cli() {
  # As the operator user when there is one, else the default user, as the probes do.
  REDISCLI_AUTH="${VALKEY_OPERATOR_PASSWORD:-${REDISCLI_AUTH-}}" timeout 2 valkey-cli \
    --no-auth-warning -h "${POD_IP-}" -p 6379 ${VALKEY_OPERATOR_PASSWORD:+--user operator} --raw "$@"
}
restore_priority() {
  want=$(awk '$1 == "replica-priority" { p = $2 } END { print p }' /etc/valkey/valkey.conf 2>/dev/null | tr -d '"')
  case "$want" in ''|*[!0-9]*) want=100 ;; esac
  since=$(date +%s)
  while sleep 1; do
    info=$(self_cli INFO replication 2>/dev/null | tr -d '\r')
    case "$info" in
      *master_link_status:up*) why="its first sync completed" ;;
      *role:master*) why="it is primary" ;;
      *) [ $(( $(date +%s) - since )) -ge "$patience" ] || continue
         why="no sync within ${patience}s" ;;
    esac
    set=$(self_cli CONFIG SET replica-priority "$want" 2>/dev/null)
    [ "$set" = OK ] || continue
    echo "replica-priority $want restored: $why" >&2
    return
  done
}
"#;

const DATA_ROLE: &str = r#"if [ -n "$name" ]; then
  started=$(date +%s)
  patience=$((down / 1000 * 2 + 30))
  clean=no
  if [ -e /data/handed-over ]; then
    echo "this node handed the primary role over when it last stopped" >&2
  elif [ -f /data/dump.rdb ] && [ -d /data/appendonlydir ]; then
    clean=yes
    for f in /data/appendonlydir/*; do
      if [ "$f" -nt /data/dump.rdb ]; then clean=no; fi
    done
  fi
  rm -f /data/handed-over
  follow=
  while :; do
    now=$(named)
    waited=$(( $(date +%s) - started ))
    if [ -n "$now" ] && [ "$now" != "$self" ]; then
      echo "the sentinels name $now primary: starting as its replica" >&2
      follow=$now
      break
    elif [ -z "$now" ]; then
      if [ "$monitored" != yes ] || [ "$waited" -ge 15 ]; then
        if [ -n "$primary" ] && [ "$primary" != "$self" ]; then
          echo "no sentinel names a primary: starting as a replica of $primary, the last seen" >&2
          follow=$primary
        else
          echo "no sentinel names a primary: starting as primary, the last seen" >&2
        fi
        break
      fi
    elif [ "$clean" = yes ]; then
      echo "the sentinels still name this node primary and it stopped cleanly (its shutdown save is newer than its append-only file): starting as primary" >&2
      break
    elif [ "$data_count" -le 1 ] || [ "$waited" -ge "$patience" ]; then
      echo "the sentinels still name this node primary and fail nobody over: starting as primary" >&2
      break
    else
      echo "the sentinels still name this restarting node primary: waiting for a failover" >&2
    fi
    sleep 1
  done
  if [ -n "$follow" ]; then
    set -- "$@" --replicaof "$follow" 6379 --replica-priority 0
    restore_priority &
  fi
fi
"#;

/// A data node's preStop hook: a primary about to stop hands over through Sentinel first,
/// the way topology-controller's hand-over does (see docs/replication.md): the replication
/// PING out of reach (so no PING leaves a replica ahead of the new primary), writes paused,
/// every replica online at the primary's offset (up to 5 s), `SENTINEL FAILOVER` through a
/// sentinel that names this node primary, then once that sentinel names another (up to
/// 10 s) `REPLICAOF` it and `CLIENT KILL TYPE normal`, so paused clients reconnect to the new
/// primary. Best effort: on any miss the server just stops, still paused, and the sentinels
/// fail over after down-after-milliseconds as before. Nothing is restored: the server stops.
pub fn data_pre_stop() -> String {
    data_pre_stop_reading(crate::config::OPERATOR_PASSWORD_FILE)
}

/// [`data_pre_stop`] reading the operator password from `file` (tests use their own).
fn data_pre_stop_reading(file: &str) -> String {
    let read = read_operator_password(file, crd_types::names::ports::VALKEY);
    format!("{READ_CONTEXT}{read}{DATA_PRE_STOP}")
}

/// `$op` is the operator password, read at the hook's start (see
/// [`read_operator_password`]).
const DATA_PRE_STOP: &str = r#"[ -n "$name" ] || exit 0
if [ -n "$op" ]; then
  export REDISCLI_AUTH="$op" login="--user operator"
else
  login=
fi
own() { timeout 3 valkey-cli --no-auth-warning $login -h "${POD_IP-}" -p 6379 --raw "$@"; }
guide() {
  host=$1; shift
  REDISCLI_AUTH="$op" timeout 3 valkey-cli --no-auth-warning     -h "$host" -p 26379 ${op:+--user operator} --raw "$@"
}
[ "$(own ROLE 2>/dev/null | head -n 1)" = master ] || exit 0
# The context file reaches a running pod only at the kubelet's next volume sync, so a pod
# started before the sentinels had addresses may not list them yet: then they are learnt
# from the hello each one publishes on this server every 2 s (before the pause, which
# holds PUBLISH too).
if [ -z "$sentinels" ]; then
  sentinels=$(timeout 3 valkey-cli --no-auth-warning $login -h "${POD_IP-}" -p 6379 --raw \
    SUBSCRIBE __sentinel__:hello 2>/dev/null |
    awk -F, -v n="$name" 'NF >= 8 && $5 == n { print $1 }' | sort -u)
fi
own CONFIG SET repl-ping-replica-period 2147483647 >/dev/null
own CLIENT PAUSE 10000 WRITE >/dev/null
waited=0
while :; do
  info=$(own INFO replication 2>/dev/null | tr -d '\r')
  at=$(echo "$info" | sed -n 's/^master_repl_offset://p')
  total=$(echo "$info" | grep -c '^slave[0-9]*:')
  behind=$(echo "$info" | grep '^slave[0-9]*:' | grep -vc "state=online,offset=$at,")
  if [ "$total" -gt 0 ] && [ "$behind" -eq 0 ]; then break; fi
  if [ "$waited" -ge 50 ]; then
    echo "prestop: no replica caught up within 5s: stopping without a hand-over"; exit 0
  fi
  sleep 0.1
  waited=$((waited + 1))
done
# Kept only if a failover started: at its next start this node must not take the primary
# role back on its own (see DATA_ROLE), the new primary may hold writes it lacks.
touch /data/handed-over
via= why=
for s in $sentinels; do
  named=$(guide "$s" SENTINEL GET-MASTER-ADDR-BY-NAME "$name" 2>/dev/null | head -n 1)
  if [ "$named" != "$self" ]; then why="$why $s names ${named:-nothing};"; continue; fi
  answer=$(guide "$s" SENTINEL FAILOVER "$name" 2>&1)
  if [ "$answer" = OK ]; then via=$s; break; fi
  why="$why $s: $answer;"
done
if [ -z "$via" ]; then
  rm -f /data/handed-over
  echo "prestop: no sentinel started a failover ($why ): stopping"; exit 0
fi
waited=0
while [ "$waited" -lt 100 ]; do
  now=$(guide "$via" SENTINEL GET-MASTER-ADDR-BY-NAME "$name" 2>/dev/null | head -n 1)
  if [ -n "$now" ] && [ "$now" != "$self" ]; then
    own REPLICAOF "$now" 6379 >/dev/null
    own CLIENT KILL TYPE normal >/dev/null
    echo "prestop: handed over to $now"
    exit 0
  fi
  sleep 0.1
  waited=$((waited + 1))
done
echo "prestop: no promotion within 10s: stopping anyway"
"#;

/// A sentinel's init container: the rendered sentinel.conf, the state it had, and, for a
/// sentinel without state in a monitored group, what to monitor.
pub fn sentinel_init() -> String {
    format!("set -eu\n{READ_CONTEXT}{SENTINEL_INIT}")
}

/// Sentinel rewrites its config file (it refuses to start on a read-only one, so the copy is
/// made writable, for its owner only: Sentinel writes passwords into it) and keeps its
/// state there (myid, monitored primaries, known replicas and sentinels, epochs), so it runs
/// from a copy in /data. Each start takes the fresh operator-rendered file and carries over
/// the `sentinel` state lines the fresh file does not set; `announce-ip` is never carried:
/// it comes from the fresh file or the command line. This runs in an init container so the
/// main container execs valkey-sentinel directly and SIGTERM reaches it (a shell wrapper
/// would have to forward signals).
pub const SENTINEL_INIT: &str = r#"new=/data/sentinel.conf.new
cat /etc/valkey/sentinel.conf > "$new"
chmod 600 "$new"
if [ -f /data/sentinel.conf ]; then
  awk 'NR == FNR { if ($1 == "sentinel") seen[$2] = 1; next }
       $1 == "sentinel" && !($2 in seen) && $2 != "announce-ip"' \
    /etc/valkey/sentinel.conf /data/sentinel.conf >> "$new"
fi
if [ -n "$name" ] && [ "$monitored" = yes ] && ! grep -q "^sentinel monitor $name " "$new"; then
  now=$(named)
  [ -n "$now" ] || now=$primary
  if [ -n "$now" ]; then
    echo "no state: monitoring $now, named by the other sentinels or last seen" >&2
    {
      echo "sentinel monitor $name $now 6379 $quorum"
      echo "sentinel down-after-milliseconds $name $down"
      echo "sentinel failover-timeout $name $failover"
      echo "sentinel parallel-syncs $name $syncs"
      echo "sentinel auth-user $name operator"
      for d in $data; do
        [ "$d" = "$now" ] || echo "sentinel known-replica $name $d 6379"
      done
    } >> "$new"
  fi
fi
mv "$new" /data/sentinel.conf
"#;

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::process::Command;

    /// A `valkey-cli` on PATH that answers GET-MASTER-ADDR-BY-NAME as `answers` says, by
    /// host: `host=address`, one per line, or `host=` for a sentinel that does not know the
    /// group; hosts not listed do not answer. A host's answers may be a `,`-list, used in
    /// turn (the last one sticks).
    fn fake_cli(dir: &Path, answers: &str) {
        std::fs::write(dir.join("answers"), answers).unwrap();
        let cli = format!(
            r#"#!/bin/sh
while [ $# -gt 0 ]; do case "$1" in -h) host=$2; shift ;; esac; shift; done
line=$(grep "^$host=" {dir}/answers) || exit 1
list=${{line#*=}}
n=$(cat {dir}/count.$host 2>/dev/null || echo 1)
echo $((n + 1)) > {dir}/count.$host
a=$(echo "$list" | tr ',' '\n' | sed -n "${{n}}p")
[ -n "$a" ] || a=$(echo "$list" | tr ',' '\n' | tail -n 1)
[ -z "$a" ] || printf '%s\n6379\n' "$a"
"#,
            dir = dir.display()
        );
        let path = dir.join("valkey-cli");
        crate::test_support::write_executable(&path, &cli);
    }

    /// Runs `script` (the context path pointed at `dir`) as `sh -c script echo started`:
    /// what it passes to the program, and what it said.
    fn run(dir: &Path, script: &str, context: &str) -> (String, String) {
        std::fs::write(dir.join("replication"), context).unwrap();
        // The priority loop runs in the background: tested on its own.
        let script = script
            .replace(CONTEXT_PATH, dir.join("replication").to_str().unwrap())
            .replace("restore_priority &", "");
        let script = format!("{script}exec \"$0\" \"$@\"");
        let path = format!("{}:{}", dir.display(), std::env::var("PATH").unwrap());
        let out = Command::new("sh")
            .args(["-c", &script, "echo", "started"])
            .env("PATH", path)
            .env("VALKEY_OPERATOR_PASSWORD", "pw")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        (
            String::from_utf8_lossy(&out.stdout).trim().to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    }

    /// A `valkey-cli` for the preStop hook: the node itself at 10.9.9.9:6379 answers from
    /// `own-<first word>` files; a sentinel names `named` until it was asked to fail over,
    /// then 10.0.0.3. Every call is appended to `calls`, with the password it was given
    /// (`auth=`).
    fn fake_hook_cli(dir: &Path, named: &str) {
        let cli = format!(
            r#"#!/bin/sh
dir={dir}
echo "$* auth=${{REDISCLI_AUTH-}}" >> $dir/calls
while [ "$1" != "-h" ]; do shift; done
host=$2 port=$4; shift 4
while :; do case "$1" in --raw) shift ;; --user) shift 2 ;; *) break ;; esac; done
if [ "$port" = 26379 ]; then
  case "$2" in
    FAILOVER) touch $dir/failed-over; echo OK ;;
    GET-MASTER-ADDR-BY-NAME)
      if [ -f $dir/failed-over ]; then printf '10.0.0.3\n6379\n'; else printf '{named}\n6379\n'; fi ;;
  esac
  exit 0
fi
cat $dir/own-$1 2>/dev/null || echo OK
"#,
            dir = dir.display()
        );
        let path = dir.join("valkey-cli");
        crate::test_support::write_executable(&path, &cli);
    }

    fn run_hook(dir: &Path) -> (String, Vec<String>) {
        run_hook_with(dir, CONTEXT)
    }

    /// Runs the hook with the operator password file at `dir/operator-password`.
    fn run_hook_with(dir: &Path, context: &str) -> (String, Vec<String>) {
        std::fs::write(dir.join("replication"), context).unwrap();
        let file = dir.join("operator-password");
        let script = data_pre_stop_reading(file.to_str().unwrap())
            .replace(CONTEXT_PATH, dir.join("replication").to_str().unwrap())
            .replace("/data/", &format!("{}/", dir.display()));
        let path = format!("{}:{}", dir.display(), std::env::var("PATH").unwrap());
        let out = Command::new("sh")
            .args(["-c", &script])
            .env("PATH", path)
            .env("POD_IP", "10.9.9.9")
            .env("VALKEY_OPERATOR_PASSWORD", "pw")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let calls = std::fs::read_to_string(dir.join("calls")).unwrap_or_default();
        (
            String::from_utf8_lossy(&out.stdout).trim().to_string(),
            calls.lines().map(str::to_owned).collect(),
        )
    }

    /// A primary (10.0.0.2 in [`CONTEXT`]) whose replicas are caught up.
    fn primary_handing_over(dir: &Path) {
        fake_hook_cli(dir, "10.0.0.2");
        std::fs::write(dir.join("own-ROLE"), "master\n0\n").unwrap();
        std::fs::write(
            dir.join("own-INFO"),
            "role:master\r\nconnected_slaves:2\r\n\
             slave0:ip=10.0.0.1,port=6379,state=online,offset=500,lag=0\r\n\
             slave1:ip=10.0.0.3,port=6379,state=online,offset=500,lag=0\r\n\
             master_repl_offset:500\r\n",
        )
        .unwrap();
    }

    #[test]
    fn the_hook_reads_the_mounted_operator_password_over_the_env() {
        // The env keeps the password the container started with ("pw"); the file follows
        // the Secret, so it has the rotated one. Absent or empty, the env is all there is.
        for (file, expected) in [(Some("n3w\n"), "n3w"), (Some(""), "pw"), (None, "pw")] {
            let dir = tempfile::tempdir().unwrap();
            primary_handing_over(dir.path());
            if let Some(text) = file {
                std::fs::write(dir.path().join("operator-password"), text).unwrap();
            }
            let (said, calls) = run_hook(dir.path());
            assert_eq!(said, "prestop: handed over to 10.0.0.3", "{calls:?}");
            // Both the node's own calls and the sentinels'.
            for port in ["-p 6379 ", "-p 26379 "] {
                assert!(calls.iter().any(|c| c.contains(port)), "{calls:?}");
            }
            for call in &calls {
                assert!(call.contains("--user operator"), "{call}");
                assert!(
                    call.ends_with(&format!(" auth={expected}")),
                    "{file:?}: {call}"
                );
            }
        }
    }

    #[test]
    fn the_hook_reads_the_password_file_the_pod_mounts() {
        let hook = data_pre_stop();
        let read = READ_CONTEXT.len();
        assert_eq!(
            hook[read..].lines().next().unwrap(),
            "op=$(cat '/etc/valkey-operator/operator/password' 2>/dev/null) || op="
        );
    }

    #[test]
    fn a_stopping_primary_hands_over_through_sentinel_with_writes_paused() {
        let dir = tempfile::tempdir().unwrap();
        primary_handing_over(dir.path());
        let (said, calls) = run_hook(dir.path());
        assert_eq!(said, "prestop: handed over to 10.0.0.3", "{calls:?}");
        let at = |what: &str| {
            calls
                .iter()
                .position(|c| c.contains(what))
                .unwrap_or_else(|| panic!("no {what} in {calls:?}"))
        };
        assert!(at("repl-ping-replica-period 2147483647") < at("CLIENT PAUSE 10000 WRITE"));
        assert!(at("CLIENT PAUSE") < at("INFO replication"));
        assert!(at("INFO replication") < at("SENTINEL FAILOVER g"));
        assert!(calls[at("SENTINEL FAILOVER g")].contains("-h 10.1.0.1 -p 26379"));
        assert!(at("SENTINEL FAILOVER g") < at("REPLICAOF 10.0.0.3 6379"));
        assert!(at("REPLICAOF") < at("CLIENT KILL TYPE normal"));
        // Its next start must not take the primary role back on its own.
        assert!(dir.path().join("handed-over").exists());
        assert!(
            calls.iter().all(|c| c.contains("--user operator")),
            "{calls:?}"
        );
    }

    #[test]
    fn a_primary_whose_context_lists_no_sentinel_yet_learns_them_from_their_hello() {
        let dir = tempfile::tempdir().unwrap();
        fake_hook_cli(dir.path(), "10.0.0.2");
        std::fs::write(dir.path().join("own-ROLE"), "master\n0\n").unwrap();
        std::fs::write(
            dir.path().join("own-INFO"),
            "slave0:ip=10.0.0.3,port=6379,state=online,offset=9,lag=0\nmaster_repl_offset:9\n",
        )
        .unwrap();
        // valkey-cli --raw SUBSCRIBE: the confirmation, then each message's three lines.
        std::fs::write(
            dir.path().join("own-SUBSCRIBE"),
            "subscribe\n__sentinel__:hello\n1\n\
             message\n__sentinel__:hello\n10.1.0.7,26379,a1,3,g,10.0.0.2,6379,3\n\
             message\n__sentinel__:hello\n10.1.0.8,26379,b2,1,other,10.5.0.1,6379,1\n",
        )
        .unwrap();
        let context: String = CONTEXT
            .lines()
            .filter(|l| !l.starts_with("sentinel "))
            .map(|l| format!("{l}\n"))
            .collect();
        let (said, calls) = run_hook_with(dir.path(), &context);
        assert_eq!(said, "prestop: handed over to 10.0.0.3", "{calls:?}");
        let at = |what: &str| calls.iter().position(|c| c.contains(what)).unwrap();
        assert!(at("SUBSCRIBE __sentinel__:hello") < at("CLIENT PAUSE"));
        assert!(calls[at("SENTINEL FAILOVER g")].contains("-h 10.1.0.7 -p 26379"));
        assert!(!calls.iter().any(|c| c.contains("10.1.0.8")), "{calls:?}");
    }

    #[test]
    fn a_replica_or_a_primary_no_sentinel_names_just_stops() {
        let dir = tempfile::tempdir().unwrap();
        fake_hook_cli(dir.path(), "10.0.0.2");
        std::fs::write(dir.path().join("own-ROLE"), "slave\n10.0.0.1\n").unwrap();
        let (said, calls) = run_hook(dir.path());
        assert_eq!((said.as_str(), calls.len()), ("", 1), "{calls:?}");

        let dir = tempfile::tempdir().unwrap();
        fake_hook_cli(dir.path(), "10.0.0.1");
        std::fs::write(dir.path().join("own-ROLE"), "master\n0\n").unwrap();
        std::fs::write(
            dir.path().join("own-INFO"),
            "slave0:ip=10.0.0.1,port=6379,state=online,offset=9,lag=0\nmaster_repl_offset:9\n",
        )
        .unwrap();
        let (said, calls) = run_hook(dir.path());
        assert!(said.contains("no sentinel started a failover"), "{said}");
        assert!(!dir.path().join("handed-over").exists());
        assert!(
            !calls
                .iter()
                .any(|c| c.contains("FAILOVER") || c.contains("REPLICAOF"))
        );
    }

    const CONTEXT: &str = "name g\nself 10.0.0.2\nprimary 10.0.0.1\nmonitored yes\n\
                           down-after-milliseconds 1000\nsentinel 10.1.0.1\nsentinel 10.1.0.2\n\
                           sentinel 10.1.0.3\ndata 10.0.0.1\ndata 10.0.0.2\ndata 10.0.0.3\n";

    #[test]
    fn a_data_node_follows_the_primary_a_majority_of_sentinels_names() {
        let dir = tempfile::tempdir().unwrap();
        fake_cli(
            dir.path(),
            "10.1.0.1=10.0.0.3\n10.1.0.2=10.0.0.3\n10.1.0.3=10.0.0.1\n",
        );
        let (args, said) = run(dir.path(), &data_role(), CONTEXT);
        assert_eq!(
            args, "started --replicaof 10.0.0.3 6379 --replica-priority 0",
            "{said}"
        );
    }

    #[test]
    fn a_restarting_primary_waits_until_the_sentinels_fail_over() {
        let dir = tempfile::tempdir().unwrap();
        // The sentinels name this node (10.0.0.2) once, then the replica they promoted.
        fake_cli(
            dir.path(),
            "10.1.0.1=10.0.0.2,10.0.0.3\n10.1.0.2=10.0.0.2,10.0.0.3\n",
        );
        let (args, said) = run(dir.path(), &data_role(), CONTEXT);
        assert_eq!(
            args, "started --replicaof 10.0.0.3 6379 --replica-priority 0",
            "{said}"
        );
        assert!(said.contains("waiting for a failover"), "{said}");
        // A lone data node has nobody to fail over to: it starts as primary at once.
        let dir = tempfile::tempdir().unwrap();
        fake_cli(dir.path(), "10.1.0.1=10.0.0.2\n");
        let lone = CONTEXT
            .replace("data 10.0.0.1\n", "")
            .replace("data 10.0.0.3\n", "");
        let (args, _) = run(dir.path(), &data_role(), &lone);
        assert_eq!(args, "started");
    }

    /// [`run`] with `/data` at `dir/data`, which `files` fills (name, mtime offset in
    /// seconds from now); the background priority loop is left out.
    fn run_with_data(dir: &Path, files: &[(&str, i64)], context: &str) -> (String, String) {
        let data = dir.join("data");
        std::fs::create_dir_all(data.join("appendonlydir")).unwrap();
        for (name, age) in files {
            let path = data.join(name);
            std::fs::write(&path, "x").unwrap();
            let at = std::time::SystemTime::now() - std::time::Duration::from_secs(100)
                + std::time::Duration::from_secs((100 + age) as u64);
            std::fs::File::options()
                .write(true)
                .open(&path)
                .unwrap()
                .set_modified(at)
                .unwrap();
        }
        let script = data_role().replace("/data/", &format!("{}/", data.display()));
        run(dir, &script, context)
    }

    #[test]
    fn a_named_primary_that_stopped_cleanly_starts_as_primary_at_once() {
        // The sentinels name this node (10.0.0.2) and would until a failover.
        let named_self = "10.1.0.1=10.0.0.2\n10.1.0.2=10.0.0.2\n";
        let aof = "appendonlydir/appendonly.aof.1.incr.aof";
        let dir = tempfile::tempdir().unwrap();
        fake_cli(dir.path(), named_self);
        let (args, said) = run_with_data(dir.path(), &[(aof, -10), ("dump.rdb", -5)], CONTEXT);
        assert_eq!(args, "started", "{said}");
        assert!(said.contains("it stopped cleanly"), "{said}");
        assert!(!said.contains("waiting"), "{said}");

        // Killed: its append-only file is newer than its last save. It waits for the
        // failover (then follows the promoted replica).
        let dir = tempfile::tempdir().unwrap();
        fake_cli(
            dir.path(),
            "10.1.0.1=10.0.0.2,10.0.0.3\n10.1.0.2=10.0.0.2,10.0.0.3\n",
        );
        let (args, said) = run_with_data(dir.path(), &[("dump.rdb", -10), (aof, -5)], CONTEXT);
        assert_eq!(
            args,
            "started --replicaof 10.0.0.3 6379 --replica-priority 0"
        );
        assert!(said.contains("waiting for a failover"), "{said}");

        // Its hook started a hand-over: the new primary may hold writes it lacks.
        let dir = tempfile::tempdir().unwrap();
        fake_cli(
            dir.path(),
            "10.1.0.1=10.0.0.2,10.0.0.3\n10.1.0.2=10.0.0.2,10.0.0.3\n",
        );
        let files = [(aof, -10), ("dump.rdb", -5), ("handed-over", -5)];
        let (args, said) = run_with_data(dir.path(), &files, CONTEXT);
        assert_eq!(
            args,
            "started --replicaof 10.0.0.3 6379 --replica-priority 0"
        );
        assert!(said.contains("handed the primary role over"), "{said}");
        // The marker holds for one start only.
        assert!(!dir.path().join("data/handed-over").exists());
    }

    /// Runs [`RESTORE_PRIORITY`]'s loop against a fake server whose `INFO replication`
    /// answers come from `info` in turn (the last one sticks): what it set, and what it said.
    fn restore(info: &[&str], patience: u32, config: &str) -> (Vec<String>, String) {
        restore_as(info, patience, config, None)
    }

    /// [`restore`] with the default user's password `dflt` and, if given, the operator's.
    fn restore_as(
        info: &[&str],
        patience: u32,
        config: &str,
        operator: Option<&str>,
    ) -> (Vec<String>, String) {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display();
        for (n, answer) in info.iter().enumerate() {
            std::fs::write(dir.path().join(format!("info.{}", n + 1)), answer).unwrap();
        }
        let cli = format!(
            r#"#!/bin/sh
as=default
while [ "$1" != --raw ]; do [ "$1" = --user ] && as=$2; shift; done; shift
case "$1" in
  INFO) n=$(cat {d}/n 2>/dev/null || echo 1); echo $((n + 1)) > {d}/n
        cat {d}/info.$n 2>/dev/null || cat $(ls {d}/info.* | sort -t. -k2 -n | tail -n 1) ;;
  CONFIG) echo "$* as $as:${{REDISCLI_AUTH-}}" >> {d}/set; echo OK ;;
esac
"#
        );
        crate::test_support::write_executable(&dir.path().join("valkey-cli"), &cli);
        std::fs::write(dir.path().join("valkey.conf"), config).unwrap();
        let script = format!(
            "{}patience={patience}\nrestore_priority\n",
            RESTORE_PRIORITY.replace("/etc/valkey/valkey.conf", &format!("{d}/valkey.conf"))
        );
        let path = format!("{d}:{}", std::env::var("PATH").unwrap());
        let mut command = Command::new("sh");
        command
            .args(["-c", &script])
            .env("PATH", path)
            .env("REDISCLI_AUTH", "dflt")
            .env_remove("VALKEY_OPERATOR_PASSWORD");
        if let Some(password) = operator {
            command.env("VALKEY_OPERATOR_PASSWORD", password);
        }
        let out = command.output().unwrap();
        assert!(out.status.success(), "{out:?}");
        let set = std::fs::read_to_string(dir.path().join("set")).unwrap_or_default();
        (
            set.lines().map(str::to_owned).collect(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    }

    #[test]
    fn a_replica_gets_its_priority_back_after_its_first_sync() {
        let syncing = "role:slave\r\nmaster_link_status:down\r\n";
        let synced = "role:slave\r\nmaster_link_status:up\r\n";
        let (set, said) = restore(&[syncing, syncing, synced], 60, "replica-priority \"7\"\n");
        assert_eq!(
            set,
            ["CONFIG SET replica-priority 7 as default:dflt"],
            "{said}"
        );
        assert!(said.contains("its first sync completed"), "{said}");
        // Valkey's default when the config sets none; as the operator user when there is one.
        let (set, _) = restore_as(&[synced], 60, "port 6379\n", Some("op"));
        assert_eq!(set, ["CONFIG SET replica-priority 100 as operator:op"]);
    }

    #[test]
    fn a_replica_whose_primary_never_returns_gets_its_priority_back_after_the_patience() {
        let syncing = "role:slave\r\nmaster_link_status:down\r\n";
        let (set, said) = restore(&[syncing], 2, "");
        assert_eq!(
            set,
            ["CONFIG SET replica-priority 100 as default:dflt"],
            "{said}"
        );
        assert!(said.contains("no sync within 2s"), "{said}");
    }

    #[test]
    fn with_no_sentinel_knowing_the_group_the_last_primary_seen_is_followed() {
        let dir = tempfile::tempdir().unwrap();
        fake_cli(dir.path(), "10.1.0.1=\n10.1.0.2=\n10.1.0.3=\n");
        let new = CONTEXT.replace("monitored yes", "monitored no");
        let (args, said) = run(dir.path(), &data_role(), &new);
        assert_eq!(
            args, "started --replicaof 10.0.0.1 6379 --replica-priority 0",
            "{said}"
        );
        // The last primary seen is this node: it starts as primary.
        let first = new.replace("self 10.0.0.2", "self 10.0.0.1");
        assert_eq!(run(dir.path(), &data_role(), &first).0, "started");
        // No context: nothing added.
        let (args, _) = run(dir.path(), &data_role(), "");
        assert_eq!(args, "started");
    }

    #[test]
    fn a_sentinel_without_state_monitors_what_its_peers_name() {
        let dir = tempfile::tempdir().unwrap();
        fake_cli(dir.path(), "10.1.0.1=10.0.0.3\n10.1.0.2=10.0.0.3\n");
        let data = dir.path().join("data");
        std::fs::create_dir(&data).unwrap();
        std::fs::write(dir.path().join("sentinel.conf"), "port 26379\n").unwrap();
        let script = sentinel_init()
            .replace("/data/", &format!("{}/", data.display()))
            .replace(
                "/etc/valkey/sentinel.conf",
                dir.path().join("sentinel.conf").to_str().unwrap(),
            );
        run(
            dir.path(),
            &script,
            &CONTEXT.replace("down-after-milliseconds 1000\n", ""),
        );
        let written = std::fs::read_to_string(data.join("sentinel.conf")).unwrap();
        assert_eq!(
            written,
            "port 26379\nsentinel monitor g 10.0.0.3 6379 2\n\
             sentinel down-after-milliseconds g 5000\nsentinel failover-timeout g 60000\n\
             sentinel parallel-syncs g 1\nsentinel auth-user g operator\n\
             sentinel known-replica g 10.0.0.1 6379\nsentinel known-replica g 10.0.0.2 6379\n"
        );
        // Restarted with its state, it keeps what it had.
        std::fs::write(
            data.join("sentinel.conf"),
            "sentinel monitor g 10.0.0.1 6379 2\nsentinel myid abc\nsentinel announce-ip 1.1.1.1\n",
        )
        .unwrap();
        run(dir.path(), &script, CONTEXT);
        let kept = std::fs::read_to_string(data.join("sentinel.conf")).unwrap();
        assert_eq!(
            kept,
            "port 26379\nsentinel monitor g 10.0.0.1 6379 2\nsentinel myid abc\n"
        );
    }
}
