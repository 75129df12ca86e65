//! The ACL users a data node takes from its users Secret (`spec.usersSecretName`, see
//! [`crd_types::users`]) at start, so a restarted member serves them before topology-controller
//! sets them again. The Secret is mounted at [`USERS_DIR`]; the container's start-up shell
//! copies its `user` lines into [`USERS_FILE`], which the rendered config includes. Apart from
//! [`super::auth_file_script`], which a node without passwords does not run. Sentinels take
//! none.

use crd_types::ValkeyNodeSpec;
use crd_types::node::Mode;
use crd_types::users::{RESERVED_USER_NAMES, USERS_KEY};

use super::{USERS_DIR, USERS_FILE};

/// The users Secret a node mounts: a data node's `usersSecretName`; `None` for sentinels.
pub fn users_secret(spec: &ValkeyNodeSpec) -> Option<&str> {
    spec.users_secret_name
        .as_deref()
        .filter(|_| spec.mode != Mode::Sentinel)
}

/// Keeps a Secret's `user` lines that Valkey can take next to the auth file, each name once,
/// and says on stderr which others it skips and why. Valkey stops at start on a duplicate
/// `user` line, and the operator's own users are in the auth file. Names as `spec.users`
/// allows them (the Secret may be edited by hand). A quote is refused: the config parser reads
/// it as the start of a quoted word, so a rule holding one (allowed live) breaks the line.
/// Comments and blank lines go silently. `RESERVED` is filled in by [`users_file_script`].
const FILTER: &str = r#"function skip(why) { printf "%s line %d: %s; skipped\n", FILENAME, FNR, why > "/dev/stderr" }
BEGIN { n = split("RESERVED", r, " "); for (i = 1; i <= n; i++) reserved[r[i]] = 1 }
{ sub(/\r$/, "") }
/^[ \t]*(#|$)/ { next }
$1 != "user" { skip("not a user line"); next }
$2 !~ /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/ { skip("not a user name of lower-case letters, digits and -"); next }
$2 in reserved { skip("user " $2 " is kept by the operator"); next }
$2 in seen { skip("user " $2 " again, its first line is kept"); next }
/["\047]/ { skip("user " $2 " has a quote, which breaks a config line"); next }
{ seen[$2] = 1; print }"#;

/// The shell lines with which a data node's container writes [`USERS_FILE`] (owner-only)
/// before the server starts: the kept lines of the mounted Secret (see [`FILTER`]), or
/// nothing while the Secret or its key is missing. Always written, as a missing include stops
/// the server. `None` without a users Secret and for sentinels.
pub fn users_file_script(spec: &ValkeyNodeSpec) -> Option<String> {
    users_secret(spec)?;
    let source = format!("{USERS_DIR}/{USERS_KEY}");
    let filter = FILTER.replace("RESERVED", &RESERVED_USER_NAMES.join(" "));
    Some(format!(
        "(umask 077; if [ -r {source} ]; then LC_ALL=C awk '{filter}' {source}; fi > {USERS_FILE}) || \
         {{ echo 'cannot write the users from {source} to {USERS_FILE}' >&2; exit 1; }}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_users(mode: Mode, secret: Option<&str>) -> ValkeyNodeSpec {
        ValkeyNodeSpec {
            mode,
            users_secret_name: secret.map(String::from),
            ..Default::default()
        }
    }

    /// Runs the users script in a temporary directory standing for the Secret's mount and
    /// /tmp, with the Secret's key holding `secret` (`None`: missing). Returns the users file
    /// and stderr, or stderr when it failed.
    fn run(spec: &ValkeyNodeSpec, secret: Option<&str>) -> Result<(String, String), String> {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join(USERS_KEY);
        let out = dir.path().join("users.conf");
        if let Some(text) = secret {
            std::fs::write(&source, text).unwrap();
        }
        let script = users_file_script(spec)
            .unwrap()
            .replace(
                &format!("{USERS_DIR}/{USERS_KEY}"),
                source.to_str().unwrap(),
            )
            .replace(USERS_FILE, out.to_str().unwrap());
        let result = std::process::Command::new("sh")
            .args(["-c", &script, "valkey-server"])
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&result.stderr).into_owned();
        if !result.status.success() {
            return Err(stderr);
        }
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&out).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "owner-only: {mode:o}");
        Ok((std::fs::read_to_string(&out).unwrap(), stderr))
    }

    const HASH: &str = "#9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

    #[test]
    fn the_users_file_keeps_each_valid_user_once_and_none_of_the_operators() {
        let spec = with_users(Mode::Cluster, Some("orders-users"));
        let secret = format!(
            "# Rendered by valkey-operator (topology-controller) from spec.users; hashes only.\n\
             # rotating app since 2026-12-04T10:00:00Z\n\
             user app reset resetchannels on {HASH} ~app:* +@read\n\
             user default on nopass ~* +@all\n\
             user operator on nopass ~* +@all\n\
             user app reset resetchannels on {HASH} +@all\n\
             user App_1 on {HASH} +@all\n\
             user -app on {HASH} +@all\n\
             user\n\
             user quoted on {HASH} ~a\"b\n\
             requirepass hijack\n\
             USER loud on\n\
             \n\
             user reports reset resetchannels on {HASH} ~rep:* +@read\r\n\
             user\tbare\n"
        );
        let (file, stderr) = run(&spec, Some(&secret)).unwrap();
        assert_eq!(
            file,
            format!(
                "user app reset resetchannels on {HASH} ~app:* +@read\n\
                 user reports reset resetchannels on {HASH} ~rep:* +@read\n\
                 user\tbare\n"
            )
        );
        let skipped: Vec<&str> = stderr
            .lines()
            .map(|l| l.split_once(" line ").unwrap().1)
            .collect();
        assert_eq!(
            skipped,
            [
                "4: user default is kept by the operator; skipped",
                "5: user operator is kept by the operator; skipped",
                "6: user app again, its first line is kept; skipped",
                "7: not a user name of lower-case letters, digits and -; skipped",
                "8: not a user name of lower-case letters, digits and -; skipped",
                "9: not a user name of lower-case letters, digits and -; skipped",
                "10: user quoted has a quote, which breaks a config line; skipped",
                "11: not a user line; skipped",
                "12: not a user line; skipped",
            ]
        );
        // No hash or password reaches the log.
        assert!(
            !stderr.contains('#') && !stderr.contains("hijack"),
            "{stderr}"
        );
    }

    #[test]
    fn a_missing_or_empty_secret_gives_an_empty_users_file() {
        let spec = with_users(Mode::Standalone, Some("orders-users"));
        assert_eq!(run(&spec, None).unwrap(), (String::new(), String::new()));
        assert_eq!(
            run(&spec, Some("")).unwrap(),
            (String::new(), String::new())
        );
        // A file that cannot be read is missing too (the volume is optional).
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("users.conf");
        let script = users_file_script(&spec)
            .unwrap()
            .replace(
                &format!("{USERS_DIR}/{USERS_KEY}"),
                dir.path().join("absent/users.acl").to_str().unwrap(),
            )
            .replace(USERS_FILE, out.to_str().unwrap());
        let status = std::process::Command::new("sh")
            .args(["-c", &script])
            .status()
            .unwrap();
        assert!(status.success());
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "");
    }

    #[test]
    fn a_users_file_that_cannot_be_written_stops_the_start() {
        let spec = with_users(Mode::Cluster, Some("orders-users"));
        let script = users_file_script(&spec)
            .unwrap()
            .replace(USERS_FILE, "/nonexistent-dir/users.conf");
        let out = std::process::Command::new("sh")
            .args(["-c", &format!("{script}\necho started")])
            .output()
            .unwrap();
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stdout).is_empty());
        assert!(String::from_utf8_lossy(&out.stderr).contains("cannot write the users"));
    }

    #[test]
    fn only_data_nodes_naming_a_users_secret_take_users() {
        for mode in [Mode::Standalone, Mode::Cluster] {
            assert_eq!(users_secret(&with_users(mode, Some("u"))), Some("u"));
            assert!(users_file_script(&with_users(mode, Some("u"))).is_some());
            assert_eq!(users_file_script(&with_users(mode, None)), None);
        }
        // The filter goes inside the shell's single quotes.
        assert!(!FILTER.contains('\''));
        let sentinel = with_users(Mode::Sentinel, Some("u"));
        assert_eq!(users_secret(&sentinel), None);
        assert_eq!(users_file_script(&sentinel), None);
    }
}
