//! Repairs a cluster member's `nodes.conf` before the server reads it.
//!
//! Valkey 8.0 and 8.1 refuse, at every start, a `nodes.conf` in which a replica's persisted
//! `shard-id` differs from its primary's ("corrupted cluster config file", valkey-io/valkey#2171).
//! A running server can save such a file: it keeps a diverging shard id it was told and then
//! rejects ("Shard id ... diverges from existing primary shard id ..., rejecting!"). The member
//! then crash-loops until someone edits the file. Valkey fixed it at load (#2174: a replica
//! takes its primary's shard id), not in the Debian builds we run. [`shard_id_repair_script`]
//! does the same edit from the start shell, so any image comes back.

use super::CLUSTER_CONFIG_FILE;

/// Two passes over the file (given twice): the first notes each primary's shard id, the second
/// prints every line, a replica's with its primary's shard id when the two differ (and says so
/// on stderr). Exits 3 when nothing needed a change. A line's flags are its third field; its
/// primary, the fourth; its shard id sits among the address's aux fields (the second). No
/// apostrophe: the program is single-quoted in the shell.
const REPAIR: &str = r#"function replica() { return $3 ~ /(^|,)(slave|replica)(,|$)/ }
function shard() { return match($2, /,shard-id=[0-9a-f]+/) ? substr($2, RSTART + 10, RLENGTH - 10) : "" }
FNR == NR { if (!replica() && shard() != "") primary[$1] = shard(); next }
replica() && ($4 in primary) && shard() != "" && shard() != primary[$4] {
  printf "nodes.conf: replica %s had shard id %s, its primary %s has %s: the replica takes it (valkey-io/valkey#2171)\n", $1, shard(), $4, primary[$4] > "/dev/stderr"
  sub(/,shard-id=[0-9a-f]+/, ",shard-id=" primary[$4])
  changed = 1
}
{ print }
END { exit changed ? 0 : 3 }"#;

/// The shell lines with which a cluster member's container repairs [`CLUSTER_CONFIG_FILE`]
/// (see the module): the repaired copy is written next to it, flushed, and renamed over it,
/// so a crash leaves the old file or the new one. A file that needs nothing, or that cannot be
/// read or copied, is left as it is for the server to judge.
pub fn shard_id_repair_script() -> String {
    let conf = CLUSTER_CONFIG_FILE;
    format!(
        "if [ -s {conf} ]; then\n  \
         LC_ALL=C awk '{REPAIR}' {conf} {conf} > {conf}.repair\n  \
         if [ $? -eq 0 ]; then sync {conf}.repair 2>/dev/null || sync; mv -f {conf}.repair {conf}; \
         else rm -f {conf}.repair; fi\n\
         fi"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const PRIMARY: &str = "ea43db49fc079ab7a7adbfdabe5b0c0204bfb47a";
    const REPLICA: &str = "62c962afe2202084aa0be74cef7d4055c1c817a9";
    const SHARD: &str = "255b465b2dc6af1ef6fe8e37c248901a250327f4";
    const STRAY: &str = "230d424a00000000000000000000000000000001";

    /// A replica's `nodes.conf` as Valkey 8.0.1 saved it (primary and replica on 127.0.0.1),
    /// the replica's own line carrying `replica_shard`, in the order Valkey wrote it (the
    /// replica first) or the other.
    fn nodes_conf(replica_shard: &str, replica_first: bool) -> String {
        let replica = format!(
            "{REPLICA} 127.0.0.1:17402@27402,,tls-port=0,shard-id={replica_shard} myself,slave \
             {PRIMARY} 0 0 0 connected\n"
        );
        let primary = format!(
            "{PRIMARY} 127.0.0.1:17401@27401,,tls-port=0,shard-id={SHARD} master - 0 \
             1796461056870 0 disconnected 0-16383\n"
        );
        let (first, second) = match replica_first {
            true => (replica, primary),
            false => (primary, replica),
        };
        format!("{first}{second}vars currentEpoch 1 lastVoteEpoch 0\n")
    }

    /// Runs the script on `file` (`None`: no file) in a temporary directory standing for
    /// /data; returns the file afterwards, stderr, and whether a `.repair` copy was left.
    fn run(file: Option<&str>) -> (Option<String>, String, bool) {
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("nodes.conf");
        if let Some(text) = file {
            std::fs::write(&conf, text).unwrap();
        }
        let script = shard_id_repair_script().replace(CLUSTER_CONFIG_FILE, conf.to_str().unwrap());
        let out = std::process::Command::new("sh")
            .args(["-c", &format!("{script}\necho started"), "valkey-server"])
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "started\n");
        let left = dir.path().join("nodes.conf.repair").exists();
        (
            std::fs::read_to_string(&conf).ok(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
            left,
        )
    }

    #[test]
    fn a_replica_in_another_shard_than_its_primary_takes_its_primarys_shard() {
        for replica_first in [true, false] {
            let (file, stderr, left) = run(Some(&nodes_conf(STRAY, replica_first)));
            assert_eq!(file.as_deref(), Some(&*nodes_conf(SHARD, replica_first)));
            assert_eq!(
                stderr,
                format!(
                    "nodes.conf: replica {REPLICA} had shard id {STRAY}, its primary {PRIMARY} \
                     has {SHARD}: the replica takes it (valkey-io/valkey#2171)\n"
                )
            );
            assert!(!left);
        }
    }

    #[test]
    fn a_consistent_file_is_left_as_it_is() {
        let good = nodes_conf(SHARD, true);
        assert_eq!(run(Some(&good)), (Some(good), String::new(), false));
        // A replica whose primary has no line, or a line without a shard id (written before
        // shard ids), has nothing to follow; a missing or empty file is the server's to make.
        let unknown = nodes_conf(STRAY, true).replace(&format!("{PRIMARY} 127"), "0000 127");
        assert_eq!(run(Some(&unknown)).0, Some(unknown));
        let old = nodes_conf(STRAY, true).replace(&format!(",shard-id={SHARD}"), "");
        assert_eq!(run(Some(&old)).0, Some(old));
        assert_eq!(run(None), (None, String::new(), false));
        assert_eq!(run(Some("")), (Some(String::new()), String::new(), false));
    }

    #[test]
    fn every_replica_of_a_shard_follows_and_other_shards_stay() {
        // Two replicas of the first shard astray (one written by a 9.x server, which says
        // `replica`), and a second shard that is consistent.
        let file = format!(
            "{}\
             3333333333333333333333333333333333333333 127.0.0.1:17403@27403,,tls-port=0,shard-id={STRAY} replica,fail {PRIMARY} 0 0 0 disconnected\n\
             1111111111111111111111111111111111111111 127.0.0.1:17404@27404,,tls-port=0,shard-id=2222222222222222222222222222222222222222 master - 0 0 2 connected 16000\n\
             4444444444444444444444444444444444444444 127.0.0.1:17405@27405,,tls-port=0,shard-id=2222222222222222222222222222222222222222 slave 1111111111111111111111111111111111111111 0 0 2 connected\n\
             vars currentEpoch 2 lastVoteEpoch 0\n",
            nodes_conf(STRAY, false).replace("vars currentEpoch 1 lastVoteEpoch 0\n", "")
        );
        let (repaired, stderr, _) = run(Some(&file));
        assert_eq!(repaired, Some(file.replace(STRAY, SHARD)));
        assert_eq!(stderr.lines().count(), 2, "{stderr}");
    }
}
