//! The start-up guard of a memory-only data node (`memoryOnly`): a member that restarts
//! comes back empty, and must never serve as the primary of data another member holds.
//!
//! Valkey has no such guard. A replica reconnects to its primary's address about once a
//! second, and a server that answers there, empty, sends it a full sync of nothing: measured
//! with Valkey 8.0 (a cluster primary killed and started again empty at its address, with its
//! nodes.conf or without it), its replica held 0 of its 100 keys 8 s later. The same holds
//! for a group's replicas. So a memory-only member does not start its server while a peer
//! still depends on its address:
//!
//! - **A cluster member** ([`cluster_start`]) asks its shard's other members (the cluster
//!   context, `/etc/valkey/cluster`, and the nodes its nodes.conf still lists) whether one
//!   replicates from its address. While one does, this pod's old server, which it replaces,
//!   is provably gone, so it asks the most caught-up of them to take over
//!   (`CLUSTER FAILOVER FORCE`, which needs the other primaries' votes; `TAKEOVER` if that
//!   has not happened 10 s later, as in a cluster of one shard nobody can vote), and starts
//!   only once none replicates from it. A member that was a primary with replicas (those it
//!   asked, or those its nodes.conf lists) then starts as a new node (its nodes.conf gone),
//!   which topology-controller attaches to the new primary: its old identity, starting with
//!   its slots, would take writes until gossip told it of the failover, and lose them. A
//!   primary nobody replicated from keeps its identity and slots: there was no other copy.
//! - **A group's data node** ([`group_guard`]) keeps [`super::scripts::data_role`]'s rules
//!   and adds one: it never starts as primary while another data node answers holding keys.
//!   It waits instead for the sentinels to name a primary.
//!
//! Either way a memory-only node starts empty: any dataset file left in /data (a replica's
//! last sync, written when `repl-diskless-load` is `disabled`) is removed first, so a stale
//! copy is never loaded and served.

/// Removes what a server would load at start.
const START_EMPTY: &str = r#"rm -rf /data/dump.rdb /data/appendonlydir /data/appendonly.aof
"#;

/// `peer_cli <host> <args>`: asks another member, as the operator user when there is one.
const PEER_CLI: &str = r#"peer_cli() {
  host=$1; shift
  REDISCLI_AUTH="${VALKEY_OPERATOR_PASSWORD:-${REDISCLI_AUTH-}}" timeout 2 valkey-cli \
    --no-auth-warning -h "$host" -p 6379 ${VALKEY_OPERATOR_PASSWORD:+--user operator} --raw "$@"
}
"#;

/// The cluster member's guard, run before the server starts (see the module docs).
pub fn cluster_start() -> String {
    format!("{START_EMPTY}{PEER_CLI}{CLUSTER_GUARD}")
}

const CLUSTER_GUARD: &str = r#"ctx=/etc/valkey/cluster
self="${POD_IP-}" peers=
if [ -r "$ctx" ]; then
  while read -r key value; do
    case "$key" in
      self) self=$value ;;
      peer) peers="$peers $value" ;;
    esac
  done < "$ctx"
fi
followed=
if [ -f /data/nodes.conf ]; then
  peers="$peers $(awk '$2 ~ /@/ && $2 !~ /^:/ && $3 !~ /myself/ { sub(/:.*/, "", $2); print $2 }' /data/nodes.conf)"
  # A primary holding slots that some node replicated from when the file was last saved.
  me=$(awk '$3 ~ /myself/ && $3 ~ /master/ && NF >= 9 { print $1 }' /data/nodes.conf)
  [ -z "$me" ] || followed=$(awk -v me="$me" '$4 == me { print $1 }' /data/nodes.conf)
fi
peers=$(echo $peers | tr ' ' '\n' | sort -u | grep -vx "$self")
# Peers replicating from this address: "<offset> <peer>" each.
followers() {
  for p in $peers; do
    info=$(peer_cli "$p" INFO replication 2>/dev/null | tr -d '\r')
    echo "$info" | grep -qx "master_host:$self" || continue
    echo "$(echo "$info" | sed -n 's/^slave_repl_offset://p') $p"
  done
}
asked= forced= since= said=
while f=$(followers) && [ -n "$f" ]; do
  best=$(echo "$f" | sort -rn | head -n 1 | cut -d' ' -f2)
  now=$(date +%s)
  if [ -z "$asked" ]; then
    answer=$(peer_cli "$best" CLUSTER FAILOVER FORCE 2>&1)
    asked=$best since=$now
    echo "memory-only: restarted empty while $(echo $f | wc -w | awk '{ print $1 / 2 }') member(s) replicate from $self; the most caught-up, $best, takes over (CLUSTER FAILOVER FORCE: $answer)" >&2
  elif [ -z "$forced" ] && [ $((now - since)) -ge 10 ]; then
    answer=$(peer_cli "$asked" CLUSTER FAILOVER TAKEOVER 2>&1)
    forced=yes
    echo "memory-only: $asked has not taken over within 10 s (no majority of primaries voted): CLUSTER FAILOVER TAKEOVER: $answer" >&2
  elif [ "$f" != "$said" ]; then
    echo "memory-only: waiting: still replicating from $self (offset, member): $(echo $f)" >&2
  fi
  said=$f
  sleep 1
done
if [ -n "$asked" ] || [ -n "$followed" ]; then
  echo "memory-only: no member replicates from $self any more: starting as a new node, so this empty server never claims the slots its old identity held" >&2
  rm -f /data/nodes.conf
fi
"#;

/// Lines for [`super::scripts::data_role`]'s loop, placed before each of its "starting as
/// primary" decisions: while another data node answers holding keys, this empty node waits
/// for the sentinels instead (`continue`s the loop).
pub const GROUP_GUARD: &str = r#"    if held=$(held_elsewhere); then
      [ "$held" = "$said_held" ] || echo "memory-only: this node restarted empty and $held: it never leads them; waiting for the sentinels to name a primary" >&2
      said_held=$held
      sleep 1
      continue
    fi
"#;

/// Defines `held_elsewhere`, which names the first other data node that answers holding
/// keys, and starts the node empty.
pub fn group_prelude() -> String {
    format!("{START_EMPTY}{PEER_CLI}{HELD_ELSEWHERE}")
}

const HELD_ELSEWHERE: &str = r#"said_held=
held_elsewhere() {
  for d in $data; do
    [ "$d" = "$self" ] && continue
    keys=$(peer_cli "$d" INFO keyspace 2>/dev/null | tr -d '\r' |
      sed -n 's/^db[0-9]*:keys=\([0-9]*\),.*/\1/p' | awk '{ n += $1 } END { print n + 0 }')
    if [ "${keys:-0}" -gt 0 ]; then echo "$d holds $keys keys"; return 0; fi
  done
  return 1
}
"#;

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::process::Command;

    /// A `valkey-cli` whose INFO answers come from `<dir>/info.<host>` files, and whose
    /// CLUSTER FAILOVER calls are appended to `<dir>/calls`; a FAILOVER makes the asked host
    /// a primary (its info file is replaced by `role:master`) once `promote` says so.
    fn fake_cli(dir: &Path, promote: bool) {
        let cli = format!(
            r#"#!/bin/sh
dir={dir}
while [ $# -gt 0 ]; do case "$1" in -h) host=$2; shift ;; --raw) shift; break ;; esac; shift; done
case "$1" in
  INFO) [ ! -f "$dir/after-info" ] || sh "$dir/after-info"
    cat "$dir/info.$host" 2>/dev/null || exit 1 ;;
  SENTINEL) cat "$dir/sentinel.$host" 2>/dev/null || exit 1 ;;
  CLUSTER) echo "$host $*" >> "$dir/calls"
    if [ {promote} = true ] || [ "$3" = TAKEOVER ]; then
      printf 'role:master\r\n' > "$dir/info.$host"
      for f in "$dir"/info.*; do sed -i "s/^master_host:.*/master_host:$host\r/" "$f"; done
    fi
    echo OK ;;
esac
"#,
            dir = dir.display()
        );
        crate::test_support::write_executable(&dir.join("valkey-cli"), &cli);
    }

    /// Runs `script` with /data and the cluster context in `dir`: what it said.
    fn run(dir: &Path, script: &str) -> String {
        let script = script
            .replace("/data/", &format!("{}/data/", dir.display()))
            .replace("/etc/valkey/cluster", dir.join("cluster").to_str().unwrap())
            .replace("sleep 1", "sleep 0.01")
            .replace("-ge 10 ]", "-ge 0 ]");
        let out = sh(dir, &script, &[]);
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stderr).to_string()
    }

    /// `sh -c script args…` with the fake `valkey-cli` of `dir` first on PATH.
    fn sh(dir: &Path, script: &str, args: &[&str]) -> std::process::Output {
        let path = format!("{}:{}", dir.display(), std::env::var("PATH").unwrap());
        Command::new("sh")
            .args(["-c", script])
            .args(args)
            .env("PATH", path)
            .output()
            .unwrap()
    }

    fn member_dir(followers: &[(&str, u64)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir(d.join("data")).unwrap();
        std::fs::write(d.join("data/dump.rdb"), "stale").unwrap();
        std::fs::write(d.join("data/nodes.conf"), "a 10.0.0.1:6379@16379 myself,master - 0 0 1 connected 0-100\nb 10.0.0.4:6379@16379 master - 0 0 2 connected 101-200\nc :0@0 slave,fail,noaddr b 0 0 2 disconnected\nvars currentEpoch 2 lastVoteEpoch 0\n").unwrap();
        let mut context = "self 10.0.0.1\n".to_string();
        for (peer, offset) in followers {
            context.push_str(&format!("peer {peer}\n"));
            std::fs::write(
                d.join(format!("info.{peer}")),
                format!("role:slave\r\nmaster_host:10.0.0.1\r\nslave_repl_offset:{offset}\r\n"),
            )
            .unwrap();
        }
        // A peer of 10.0.0.10, whose address starts like this member's.
        std::fs::write(
            d.join("info.10.0.0.4"),
            "role:slave\r\nmaster_host:10.0.0.10\r\n",
        )
        .unwrap();
        std::fs::write(d.join("cluster"), context).unwrap();
        dir
    }

    #[test]
    fn a_cluster_member_back_empty_starts_once_its_most_caught_up_replica_took_over() {
        let dir = member_dir(&[("10.0.0.2", 500), ("10.0.0.3", 700)]);
        fake_cli(dir.path(), true);
        let said = run(dir.path(), &cluster_start());
        let calls = std::fs::read_to_string(dir.path().join("calls")).unwrap();
        assert_eq!(calls, "10.0.0.3 CLUSTER FAILOVER FORCE\n", "{said}");
        assert!(
            said.contains("the most caught-up, 10.0.0.3, takes over"),
            "{said}"
        );
        assert!(said.contains("starting as a new node"), "{said}");
        let data = dir.path().join("data");
        assert!(!data.join("nodes.conf").exists() && !data.join("dump.rdb").exists());
    }

    #[test]
    fn without_votes_the_replica_takes_over_unilaterally() {
        let dir = member_dir(&[("10.0.0.2", 500)]);
        fake_cli(dir.path(), false);
        let said = run(dir.path(), &cluster_start());
        let calls = std::fs::read_to_string(dir.path().join("calls")).unwrap();
        assert_eq!(
            calls, "10.0.0.2 CLUSTER FAILOVER FORCE\n10.0.0.2 CLUSTER FAILOVER TAKEOVER\n",
            "{said}"
        );
    }

    #[test]
    fn a_primary_its_replicas_left_already_starts_as_a_new_node() {
        let dir = member_dir(&[]);
        let conf = dir.path().join("data/nodes.conf");
        let listed = std::fs::read_to_string(&conf).unwrap()
            + "d 10.0.0.5:6379@16379 slave a 0 0 1 connected\n";
        std::fs::write(&conf, listed).unwrap();
        fake_cli(dir.path(), true);
        let said = run(dir.path(), &cluster_start());
        assert!(said.contains("starting as a new node"), "{said}");
        assert!(
            !dir.path().join("calls").exists(),
            "nobody replicates from it now"
        );
        assert!(!conf.exists());
    }

    #[test]
    fn a_member_nobody_replicates_from_starts_at_once_with_its_nodes_conf() {
        let dir = member_dir(&[]);
        fake_cli(dir.path(), true);
        let said = run(dir.path(), &cluster_start());
        assert_eq!(said, "");
        assert!(!dir.path().join("calls").exists());
        let data = dir.path().join("data");
        assert!(
            data.join("nodes.conf").exists(),
            "a replica-less primary keeps its slots"
        );
        assert!(
            !data.join("dump.rdb").exists(),
            "it starts empty all the same"
        );
    }

    /// Runs [`group_prelude`] and `held_elsewhere` with data nodes `data`.
    fn held(dir: &Path, data: &str) -> (bool, String) {
        let script = format!(
            "self=10.0.0.1 data='{data}'\n{}if held=$(held_elsewhere); then echo \"$held\"; else echo none; fi",
            group_prelude().replace("/data/", &format!("{}/data/", dir.display()))
        );
        let out = sh(dir, &script, &[]);
        let said = String::from_utf8_lossy(&out.stdout).trim().to_string();
        (said != "none", said)
    }

    #[test]
    fn a_group_member_back_empty_finds_the_data_node_that_holds_keys() {
        let dir = tempfile::tempdir().unwrap();
        fake_cli(dir.path(), false);
        let d = dir.path();
        std::fs::write(d.join("info.10.0.0.2"), "# Keyspace\r\n").unwrap();
        std::fs::write(
            d.join("info.10.0.0.3"),
            "# Keyspace\r\ndb0:keys=40,expires=0,avg_ttl=0\r\ndb2:keys=2,expires=0,avg_ttl=0\r\n",
        )
        .unwrap();
        assert_eq!(
            held(d, "10.0.0.1 10.0.0.2 10.0.0.3"),
            (true, "10.0.0.3 holds 42 keys".into())
        );
        // Empty, or not answering: nothing to lose.
        assert_eq!(
            held(d, "10.0.0.1 10.0.0.2 10.0.0.9"),
            (false, "none".into())
        );
    }

    #[test]
    fn a_group_member_back_empty_waits_for_the_sentinels_while_another_holds_keys() {
        let script = crate::workload::scripts::memory_only_data_role();
        assert_eq!(
            script.matches(GROUP_GUARD).count(),
            2,
            "both decisions to lead"
        );

        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        fake_cli(d, false);
        std::fs::create_dir(d.join("data")).unwrap();
        std::fs::write(d.join("data/dump.rdb"), "stale").unwrap();
        // The last primary seen was this node and no sentinel names one yet; 10.0.0.2 holds
        // keys. Once asked, the sentinel names 10.0.0.2.
        std::fs::write(
            d.join("info.10.0.0.2"),
            "db0:keys=7,expires=0,avg_ttl=0\r\n",
        )
        .unwrap();
        std::fs::write(
            d.join("after-info"),
            format!(
                "printf '10.0.0.2\\n6379\\n' > {}/sentinel.10.1.0.1",
                d.display()
            ),
        )
        .unwrap();
        let context = "name g\nself 10.0.0.1\nprimary 10.0.0.1\nmonitored no\n\
                       sentinel 10.1.0.1\ndata 10.0.0.1\ndata 10.0.0.2\n";
        std::fs::write(d.join("replication"), context).unwrap();
        let script = script
            .replace("/data/", &format!("{}/data/", d.display()))
            .replace(
                crate::workload::scripts::CONTEXT_PATH,
                d.join("replication").to_str().unwrap(),
            )
            .replace("restore_priority &", "");
        let script = format!("{script}echo \"$@\"");
        let out = sh(d, &script, &["valkey-server"]);
        let (args, said) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(
            said.contains("restarted empty and 10.0.0.2 holds 7 keys: it never leads them"),
            "{said}"
        );
        assert_eq!(
            args.trim(),
            "--replicaof 10.0.0.2 6379 --replica-priority 0",
            "{said}"
        );
        assert!(!d.join("data/dump.rdb").exists());
    }
}
