//! The valkey container's preStop hook: a cluster primary that is about to stop (its pod
//! deleted, evicted or drained) first hands its slots to its most caught-up replica.
//!
//! `CLUSTER FAILOVER` without FORCE is Valkey's coordinated hand-over: the primary pauses
//! writes, the replica waits until it has every write the primary acknowledged, then wins
//! the election and the old primary turns into its replica. So no acknowledged write is
//! lost, and the shard takes writes again once the election is through, instead of waiting
//! for the stopped server to come back (or for node-timeout and an unplanned failover).
//!
//! The hook is best effort and never blocks a stop for long: without an online replica,
//! slots, or an answer within [`HAND_OVER_WAIT_SECONDS`], the server just stops as before.
//! A ValkeyReplication data node hands over through Sentinel instead
//! ([`super::scripts::data_pre_stop`]); a sentinel and a standalone node have no hook.

use crd_types::node::Mode;
use k8s_openapi::api::core::v1::{ExecAction, Lifecycle, LifecycleHandler};

use super::layout::main_port;
use crate::config::{OPERATOR_PASSWORD_FILE, POD_IP_ENV};
use crd_types::template::OPERATOR_USER;

/// How long the hook waits for the old primary to report the replica role. A manual
/// failover gives up after 5 s in Valkey (CLUSTER_MF_TIMEOUT); the election that follows
/// needs a few node-to-node round trips. Well inside the pod's termination grace period.
pub const HAND_OVER_WAIT_SECONDS: u32 = 10;

/// The hook for the valkey container of a cluster member or a replication data node.
pub fn valkey_lifecycle(mode: Mode, replication: bool) -> Option<Lifecycle> {
    let script = match mode {
        Mode::Cluster => hand_over_script(),
        Mode::Standalone if replication => super::scripts::data_pre_stop(),
        Mode::Standalone | Mode::Sentinel => return None,
    };
    Some(Lifecycle {
        pre_stop: Some(LifecycleHandler {
            exec: Some(ExecAction {
                command: Some(vec!["sh".into(), "-c".into(), script]),
            }),
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// The preStop shell. It logs in as the operator user when there is one (the default user
/// may have been narrowed by the application), else with REDISCLI_AUTH as the probes do.
pub fn hand_over_script() -> String {
    hand_over_script_reading(OPERATOR_PASSWORD_FILE)
}

/// [`hand_over_script`] reading the operator password from `file` (tests use their own).
fn hand_over_script_reading(file: &str) -> String {
    let (port, _) = main_port(Mode::Cluster);
    format!(
        r#"{read}if [ -n "$op" ]; then
  export REDISCLI_AUTH="$op" login="--user {OPERATOR_USER}"
else
  login=
fi
cli() {{ host=$1 port=$2; shift 2; timeout 3 valkey-cli --no-auth-warning $login -h "$host" -p "$port" --raw "$@"; }}
self="${POD_IP_ENV}"
role() {{ cli "$self" {port} ROLE 2>/dev/null | head -n 1; }}
[ "$(role)" = master ] || exit 0
slots=$(cli "$self" {port} CLUSTER NODES 2>/dev/null | awk '$3 ~ /myself/ {{ print NF - 8 }}')
if [ "${{slots:-0}}" -le 0 ]; then echo "prestop: a primary without slots: nothing to hand over"; exit 0; fi
best=$(cli "$self" {port} INFO replication 2>/dev/null | tr -d '\r' |
  sed -n 's/^slave[0-9]*:ip=\([^,]*\),port=\([0-9]*\),state=online,offset=\([0-9]*\).*/\3 \1 \2/p' |
  sort -n | tail -n 1)
if [ -z "$best" ]; then echo "prestop: no online replica: stopping without a hand-over"; exit 0; fi
set -- $best
echo "prestop: handing the primary role to $2:$3 (offset $1)"
answer=$(cli "$2" "$3" CLUSTER FAILOVER 2>&1)
if [ "$answer" != OK ]; then echo "prestop: CLUSTER FAILOVER refused: $answer"; exit 0; fi
waited=0
while [ "$waited" -lt {tenths} ]; do
  if [ "$(role)" = slave ]; then echo "prestop: handed over"; exit 0; fi
  sleep 0.1
  waited=$((waited + 1))
done
echo "prestop: no hand-over within {HAND_OVER_WAIT_SECONDS}s: stopping anyway"
"#,
        read = super::scripts::read_operator_password(file, port),
        tenths = HAND_OVER_WAIT_SECONDS * 10,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::path::Path;
    use std::process::Command;

    #[test]
    fn cluster_members_and_replication_data_nodes_hand_over() {
        let command = |hook: Lifecycle| hook.pre_stop.unwrap().exec.unwrap().command.unwrap();
        let hook = valkey_lifecycle(Mode::Cluster, false).unwrap();
        assert!(hook.post_start.is_none());
        assert_eq!(command(hook), ["sh", "-c", &hand_over_script()]);
        let data = valkey_lifecycle(Mode::Standalone, true).unwrap();
        assert_eq!(command(data)[2], super::super::scripts::data_pre_stop());
        assert!(valkey_lifecycle(Mode::Standalone, false).is_none());
        assert!(valkey_lifecycle(Mode::Sentinel, true).is_none());
    }

    /// A fake `valkey-cli` answering from files in `dir`: `<host>-<first word>` for the
    /// command, `role-after-failover` once CLUSTER FAILOVER has been asked; a login with
    /// the password in `refuses` fails as valkey-cli says it. Every call is appended to
    /// `calls`, with the password it was given (`auth=`).
    fn fake_cli(dir: &Path) {
        let script = format!(
            r#"#!/bin/sh
dir={dir}
echo "$* auth=${{REDISCLI_AUTH-}}" >> "$dir/calls"
if [ -n "${{REDISCLI_AUTH-}}" ] && [ "$(cat "$dir/refuses" 2>/dev/null)" = "$REDISCLI_AUTH" ]; then
  echo "AUTH failed: WRONGPASS invalid username-password pair or user is disabled." >&2
fi
while [ "$1" != "-h" ]; do shift; done
host=$2; shift 4
[ "$1" = --raw ] && shift
if [ "$1 $2" = "CLUSTER FAILOVER" ]; then
  [ -f "$dir/$host-failover" ] && cat "$dir/$host-failover" && touch "$dir/failed-over"
  exit 0
fi
if [ "$1" = ROLE ] && [ -f "$dir/failed-over" ] && [ -f "$dir/role-after-failover" ]; then
  cat "$dir/role-after-failover"; exit 0
fi
cat "$dir/$host-$1" 2>/dev/null
"#,
            dir = dir.display()
        );
        let path = dir.join("valkey-cli");
        crate::test_support::write_executable(&path, &script);
    }

    struct Run {
        stdout: String,
        calls: Vec<String>,
    }

    /// Runs the hook with the operator password file at `dir/operator-password`.
    fn run_hook(dir: &Path, env: &[(&str, &str)]) -> Run {
        fake_cli(dir);
        let path = format!("{}:{}", dir.display(), std::env::var("PATH").unwrap());
        let file = dir.join("operator-password");
        let out = Command::new("sh")
            .args(["-c", &hand_over_script_reading(file.to_str().unwrap())])
            .env_clear()
            .env("PATH", path)
            .env("POD_IP", "10.0.0.1")
            .envs(env.iter().copied())
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let calls = std::fs::read_to_string(dir.join("calls")).unwrap_or_default();
        Run {
            stdout: String::from_utf8(out.stdout).unwrap(),
            calls: calls.lines().map(str::to_owned).collect(),
        }
    }

    fn write(dir: &Path, file: &str, text: &str) {
        std::fs::write(dir.join(file), text).unwrap();
    }

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "node-controller-prestop-{}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    const MYSELF_WITH_SLOTS: &str = "abc 10.0.0.1:6379@16379 myself,master - 0 0 1 connected 0-5460\n\
        def 10.0.0.2:6379@16379 slave abc 0 0 1 connected\n";
    const TWO_REPLICAS: &str = "# Replication\r\nrole:master\r\nconnected_slaves:2\r\n\
        slave0:ip=10.0.0.2,port=6379,state=online,offset=900,lag=0\r\n\
        slave1:ip=10.0.0.3,port=6379,state=online,offset=1000,lag=0\r\n\
        slave2:ip=10.0.0.4,port=6379,state=wait_bgsave,offset=5000,lag=0\r\n";

    /// A primary with slots whose replica at 10.0.0.3 takes over.
    fn handing_over(dir: &Path) {
        write(dir, "10.0.0.1-ROLE", "master\n0\n");
        write(dir, "10.0.0.1-CLUSTER", MYSELF_WITH_SLOTS);
        write(dir, "10.0.0.1-INFO", TWO_REPLICAS);
        write(dir, "10.0.0.3-failover", "OK\n");
        write(dir, "role-after-failover", "slave\n10.0.0.3\n");
    }

    #[test]
    fn the_hook_reads_the_mounted_operator_password_over_the_env() {
        // The env keeps the password the container started with; the file follows the
        // Secret, so it has the rotated one. Absent or empty, the env is all there is.
        for (file, expected) in [
            (Some("n3w\n"), "n3w"),
            (Some(""), "s3cret"),
            (None, "s3cret"),
        ] {
            let dir = scratch("password-file");
            handing_over(&dir);
            if let Some(text) = file {
                write(&dir, "operator-password", text);
            }
            let run = run_hook(&dir, &[("VALKEY_OPERATOR_PASSWORD", "s3cret")]);
            assert!(run.stdout.contains("handed over"), "{}", run.stdout);
            assert!(run.calls.len() > 3, "{:?}", run.calls);
            for call in &run.calls {
                assert!(call.contains("--user operator"), "{call}");
                assert!(
                    call.ends_with(&format!(" auth={expected}")),
                    "{file:?}: {call}"
                );
            }
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }

    #[test]
    fn a_mounted_password_the_server_refuses_gives_way_to_the_env() {
        // The Secret changed, but no rotation reached the server yet.
        let dir = scratch("password-ahead");
        handing_over(&dir);
        write(&dir, "operator-password", "n3w");
        write(&dir, "refuses", "n3w");
        let run = run_hook(&dir, &[("VALKEY_OPERATOR_PASSWORD", "s3cret")]);
        assert!(run.stdout.contains("handed over"), "{}", run.stdout);
        let (check, rest) = run.calls.split_first().unwrap();
        assert!(check.contains("PING auth=n3w"), "{check}");
        assert!(rest.len() > 3, "{:?}", run.calls);
        for call in rest {
            assert!(call.ends_with(" auth=s3cret"), "{call}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_hook_reads_the_password_file_the_pod_mounts() {
        let first = hand_over_script().lines().next().unwrap().to_owned();
        assert_eq!(
            first,
            "op=$(cat '/etc/valkey-operator/operator/password' 2>/dev/null) || op="
        );
    }

    #[test]
    fn a_primary_hands_over_to_its_most_caught_up_online_replica() {
        let dir = scratch("hands-over");
        handing_over(&dir);
        let run = run_hook(&dir, &[("VALKEY_OPERATOR_PASSWORD", "s3cret")]);
        assert!(run.stdout.contains("handed over"), "{}", run.stdout);
        let failover: Vec<_> = run
            .calls
            .iter()
            .filter(|c| c.contains("CLUSTER FAILOVER"))
            .collect();
        assert_eq!(failover.len(), 1, "{:?}", run.calls);
        assert!(
            failover[0].contains("-h 10.0.0.3 -p 6379"),
            "the replica at offset 1000, not the one still syncing: {failover:?}"
        );
        assert!(
            run.calls.iter().all(|c| c.contains("--user operator")),
            "{:?}",
            run.calls
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_replica_a_primary_without_slots_or_replicas_just_stops() {
        let dir = scratch("replica");
        write(&dir, "10.0.0.1-ROLE", "slave\n10.0.0.2\n");
        let run = run_hook(&dir, &[]);
        assert_eq!(run.calls.len(), 1, "only ROLE: {:?}", run.calls);
        assert!(!run.calls[0].contains("--user"), "{:?}", run.calls);
        std::fs::remove_dir_all(&dir).unwrap();

        let dir = scratch("no-slots");
        write(&dir, "10.0.0.1-ROLE", "master\n0\n");
        write(
            &dir,
            "10.0.0.1-CLUSTER",
            "abc 10.0.0.1:6379@16379 myself,master - 0 0 1 connected\n",
        );
        write(&dir, "10.0.0.1-INFO", TWO_REPLICAS);
        let run = run_hook(&dir, &[]);
        assert!(run.stdout.contains("without slots"), "{}", run.stdout);
        assert!(!run.calls.iter().any(|c| c.contains("FAILOVER")));
        std::fs::remove_dir_all(&dir).unwrap();

        let dir = scratch("no-replica");
        write(&dir, "10.0.0.1-ROLE", "master\n0\n");
        write(&dir, "10.0.0.1-CLUSTER", MYSELF_WITH_SLOTS);
        write(
            &dir,
            "10.0.0.1-INFO",
            "role:master\r\nconnected_slaves:0\r\n",
        );
        let run = run_hook(&dir, &[]);
        assert!(run.stdout.contains("no online replica"), "{}", run.stdout);
        assert!(!run.calls.iter().any(|c| c.contains("FAILOVER")));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_refused_failover_stops_without_waiting() {
        let dir = scratch("refused");
        write(&dir, "10.0.0.1-ROLE", "master\n0\n");
        write(&dir, "10.0.0.1-CLUSTER", MYSELF_WITH_SLOTS);
        write(&dir, "10.0.0.1-INFO", TWO_REPLICAS);
        write(
            &dir,
            "10.0.0.3-failover",
            "ERR Master is down or failed, please use CLUSTER FAILOVER FORCE\n",
        );
        let run = run_hook(&dir, &[]);
        assert!(run.stdout.contains("refused"), "{}", run.stdout);
        assert_eq!(
            run.calls.iter().filter(|c| c.contains("ROLE")).count(),
            1,
            "{:?}",
            run.calls
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
