use super::*;

use crd_types::template::{Auth, Exporter, SecretKeyRef, derived_password};

fn with_auth(mode: Mode, password: bool, operator: bool) -> ValkeyNodeSpec {
    let secret = |name: &str| SecretKeyRef {
        name: name.into(),
        key: "password".into(),
    };
    let mut s = ValkeyNodeSpec {
        mode,
        ..Default::default()
    };
    s.auth = Some(Auth {
        password_secret_ref: password.then(|| secret("app")),
        operator_secret_ref: operator.then(|| secret("op")),
        ..Default::default()
    });
    s
}

fn with_exporter(mut s: ValkeyNodeSpec) -> ValkeyNodeSpec {
    s.template.exporter = Some(Exporter {
        image: "oliver006/redis_exporter:v1.86.0".into(),
        port: 9121,
        resources: None,
    });
    s
}

/// Runs `script` with `env` in a temporary directory standing for `/tmp` and `/run`, with
/// a server program that says it is Valkey `version`; returns what it wrote to `file`,
/// or its stderr when it failed.
fn run(script: &str, env: &[(&str, &str)], version: &str, file: &str) -> Result<String, String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out");
    let server = dir.path().join("valkey-server");
    crate::test_support::write_executable(
        &server,
        &format!("#!/bin/sh\necho 'Valkey server v={version} sha=00000000:0 bits=64'\n"),
    );
    use std::os::unix::fs::PermissionsExt;
    let script = script
        .replace(file, path.to_str().unwrap())
        .replace(EXPORTER_AUTH_DIR, dir.path().to_str().unwrap());
    let out = std::process::Command::new("sh")
        .args(["-c", &script, server.to_str().unwrap()])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o077, 0, "owner-only: {mode:o}");
    Ok(std::fs::read_to_string(&path).unwrap())
}

/// What the start-up lines write to the auth file, with a server that is Valkey 8.0.1.
fn auth_file(spec: &ValkeyNodeSpec, env: &[(&str, &str)]) -> String {
    auth_file_of(spec, env, "8.0.1")
}

fn auth_file_of(spec: &ValkeyNodeSpec, env: &[(&str, &str)], version: &str) -> String {
    run(&auth_file_script(spec).unwrap(), env, version, AUTH_FILE).unwrap()
}

#[test]
fn the_auth_file_quotes_every_password_for_the_config_parser() {
    let tricky = r#"s3cret "with" \x41 'quotes' and spaces"#;
    let op = r#"--op-pass'"\"#;
    let text = auth_file(
        &with_auth(Mode::Cluster, true, true),
        &[("REDISCLI_AUTH", tricky), ("VALKEY_OPERATOR_PASSWORD", op)],
    );
    assert_eq!(
        text,
        concat!(
            // The clients' user: its password, every command but the admin ones.
            r#"user default on ">s3cret \"with\" \\x41 'quotes' and spaces" ~* &* +@all -@admin "#,
            "+role +lastsave +cluster|replicas +cluster|slaves +client|list +slowlog|get ",
            "+slowlog|len +latency|latest +latency|history\n",
            // The readiness probe's user: PING only, no password.
            "user probe on nopass resetchannels -@all +ping\n",
            r#"user operator on ">--op-pass'\"\\" ~* &* +@all"#,
            "\n",
            // The replication user's password: the hex SHA-256 of the prefix and the
            // operator password (the same value topology-controller derives).
            "user replication on \">e090f2b28e1b43e4d33ea0938ac4eee7606a383382c2d418d0061db80c5eb981\" \
             resetchannels -@all +psync +sync +replconf +ping\n",
            "masteruser replication\n",
            "masterauth \"e090f2b28e1b43e4d33ea0938ac4eee7606a383382c2d418d0061db80c5eb981\"\n",
        )
    );
    assert_eq!(
        derived_password(REPLICATION_PASSWORD_PREFIX, op),
        "e090f2b28e1b43e4d33ea0938ac4eee7606a383382c2d418d0061db80c5eb981"
    );
    // A 9.x cluster member's replication user may also replay atomic slot migrations;
    // a 9.x standalone server's may not.
    let env = [("VALKEY_OPERATOR_PASSWORD", "s3cret")];
    let user_line = |mode: Mode, version: &str| {
        let text = auth_file_of(&with_auth(mode, false, true), &env, version);
        text.lines()
            .find(|l| l.starts_with("user replication"))
            .unwrap()
            .to_string()
    };
    let base = "user replication on \">531fc8f0713e57921711ee9ca8dcb9fb089f1efdd993e40079586904a2dd3fa1\" \
                resetchannels -@all +psync +sync +replconf +ping";
    assert_eq!(user_line(Mode::Cluster, "8.1.1"), base);
    assert_eq!(user_line(Mode::Standalone, "9.1.2"), base);
    assert_eq!(
        user_line(Mode::Cluster, "9.1.2"),
        format!("{base} +cluster|syncslots +select ~* +@write -flushall -flushdb -swapdb")
    );
    // Without an operator user, replicas log in with the default password.
    let text = auth_file(
        &with_auth(Mode::Standalone, true, false),
        &[("REDISCLI_AUTH", "a-b")],
    );
    assert_eq!(
        text,
        "requirepass \"a-b\"\nuser probe on nopass resetchannels -@all +ping\nmasterauth \"a-b\"\n"
    );
}

#[test]
fn the_default_user_loses_the_admin_commands_only_next_to_an_operator_user() {
    let env = [("VALKEY_OPERATOR_PASSWORD", "s3cret")];
    let default_line = |spec: &ValkeyNodeSpec| {
        auth_file(spec, &env)
            .lines()
            .find(|l| l.starts_with("user default") || l.starts_with("requirepass"))
            .map(String::from)
    };
    // No default password: still no admin commands for whoever connects.
    assert_eq!(
        default_line(&with_auth(Mode::Standalone, false, true)),
        Some(format!("user default on nopass {DEFAULT_USER_RULES}"))
    );
    // Without an operator user the default user is the only admin: left whole.
    let alone = auth_file(
        &with_auth(Mode::Standalone, true, false),
        &[("REDISCLI_AUTH", "a-b")],
    );
    assert!(!alone.contains("user default"), "{alone}");
}

#[test]
fn a_password_that_comes_out_empty_stops_the_start() {
    // What a missing `sed` would make of every quoted value.
    let script = auth_file_script(&with_auth(Mode::Standalone, true, false))
        .unwrap()
        .replace("| sed ", "| false ");
    let err = run(&script, &[("REDISCLI_AUTH", "a-b")], "8.1.1", AUTH_FILE).unwrap_err();
    assert!(err.contains("came out empty"), "{err}");
    // A password ending in a quote is not mistaken for an empty one.
    let text = auth_file(
        &with_auth(Mode::Standalone, true, false),
        &[("REDISCLI_AUTH", "a\"")],
    );
    assert_eq!(
        text,
        "requirepass \"a\\\"\"\nuser probe on nopass resetchannels -@all +ping\nmasterauth \"a\\\"\"\n"
    );
}

#[test]
fn the_monitoring_user_exists_only_next_to_an_exporter() {
    let env = [
        ("REDISCLI_AUTH", "app-pw"),
        ("VALKEY_OPERATOR_PASSWORD", "s3cret"),
    ];
    let monitoring_line = |spec: &ValkeyNodeSpec, version: &str| {
        auth_file_of(spec, &env, version)
            .lines()
            .find(|l| l.starts_with("user monitoring"))
            .map(String::from)
    };
    assert_eq!(
        monitoring_line(&with_auth(Mode::Cluster, true, true), "8.1.1"),
        None
    );
    // Derived from the operator password when there is an operator user.
    let mp = derived_password(MONITORING_PASSWORD_PREFIX, "s3cret");
    let base = format!(
        "user monitoring on \">{mp}\" resetchannels -@all +ping +info +client|setname \
         +command|info +latency|latest +latency|histogram +slowlog|len +cluster|info"
    );
    let spec = with_exporter(with_auth(Mode::Cluster, true, true));
    assert_eq!(monitoring_line(&spec, "8.0.1"), Some(base.clone()));
    for version in ["8.1.1", "9.1.2"] {
        assert_eq!(
            monitoring_line(&spec, version),
            Some(format!("{base} +commandlog|len")),
            "{version}"
        );
    }
    // Else from the default user's.
    let spec = with_exporter(with_auth(Mode::Standalone, true, false));
    let mp = derived_password(MONITORING_PASSWORD_PREFIX, "app-pw");
    assert!(
        monitoring_line(&spec, "8.0.1")
            .unwrap()
            .starts_with(&format!("user monitoring on \">{mp}\" resetchannels -@all"))
    );
    // An operator user alone is enough.
    let spec = with_exporter(with_auth(Mode::Standalone, false, true));
    assert!(exporter_logs_in_as_monitoring(&spec));
    let mp = derived_password(MONITORING_PASSWORD_PREFIX, "s3cret");
    assert!(
        monitoring_line(&spec, "9.1.2")
            .unwrap()
            .starts_with(&format!("user monitoring on \">{mp}\" resetchannels -@all"))
    );
    // No passwords, no users; sentinels have no auth file.
    let mut open = with_exporter(with_auth(Mode::Standalone, false, false));
    assert_eq!(auth_file_script(&open), None);
    open.auth = None;
    assert_eq!(exporter_password_file_script(&open), None);
    let sentinel = with_exporter(with_auth(Mode::Sentinel, true, true));
    assert_eq!(auth_file_script(&sentinel), None);
    assert!(exporter_logs_in_as_monitoring(&sentinel));
    assert_eq!(
        sentinel_auth_script(&spec, "/data/sentinel.conf"),
        None,
        "data nodes use the auth file"
    );
}

/// /data/sentinel.conf as Sentinel 8.1.1 rewrote it (`SENTINEL FLUSHCONFIG`) after
/// starting with the default password `a"b c\d` and the operator's `o"p q\r`, both
/// quoted: its `requirepass`, `auth-pass` and `sentinel-pass` lines no longer parse
/// (8.0.1 writes the last two the same way; 9.1.2 quotes all three), and a later rewrite
/// comments out such lines as `# ???`. Plus a group `other` someone monitors by hand.
const REWRITTEN_BY_8_1: &str = r#"port 26379
dir "/data"
sentinel monitor other 10.96.0.20 6379 2
sentinel monitor grp 10.96.0.10 6379 2
user default on sanitize-payload #fc1c1b336bd3e21eec7af5d8efd93d3d175199a32b0b2bb0d52654adf3400746 ~* &* +@all
sentinel sentinel-user operator
sentinel auth-user grp operator
sentinel auth-user other admin
user operator on sanitize-payload #c45052c3f9684dc6993f8c65f419e803ab806fbfa907a2c800153fd76a79e195 ~* &* +@all
sentinel myid f4d73e0d22c113a79679868b6865c67862b2c83c
sentinel current-epoch 0
# ??? sentinel sentinel-pass old"pw
requirepass "a"b c\d"
sentinel auth-pass grp o"p q\r
sentinel auth-pass other theirs
Sentinel Sentinel-Pass o"p q\r
"#;

/// Runs a sentinel's start-up lines on `conf` (a file holding `before`), as the start
/// does with /data/sentinel.conf; returns the file after, or stderr when they failed.
fn sentinel_start(
    spec: &ValkeyNodeSpec,
    env: &[(&str, &str)],
    before: &str,
) -> Result<String, String> {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("sentinel.conf");
    std::fs::write(&conf, before).unwrap();
    let script = sentinel_auth_script(spec, conf.to_str().unwrap()).unwrap();
    // What Sentinel would create next, with the umask the lines leave it.
    let script = format!("{script}\n: > {}.next", conf.to_str().unwrap());
    let out = std::process::Command::new("sh")
        .args(["-c", &script, "valkey-sentinel"])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    use std::os::unix::fs::PermissionsExt;
    for file in [conf.clone(), conf.with_extension("conf.next")] {
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "{file:?} owner-only: {mode:o}");
    }
    let left = std::fs::read_dir(dir.path()).unwrap().count();
    assert_eq!(left, 2, "no scratch file left");
    Ok(std::fs::read_to_string(&conf).unwrap())
}

/// The passwords the sentinels below start with, as in [`REWRITTEN_BY_8_1`].
const SENTINEL_ENV: [(&str, &str); 2] = [
    ("REDISCLI_AUTH", r#"a"b c\d"#),
    ("VALKEY_OPERATOR_PASSWORD", r#"o"p q\r"#),
];

/// A sentinel's config before it monitors anything.
const FRESH: &str = "port 26379\ndir \"/data\"\n";

/// The lines a sentinel with both passwords ([`SENTINEL_ENV`]) gets for its users, quoted.
fn sentinel_users() -> String {
    format!(
        "{}{SENTINEL_DEFAULT_USER_RULES}\n{}",
        r#"user default on ">a\"b c\\d" "#,
        concat!(
            "user probe on nopass resetchannels -@all +ping\n",
            r#"user operator on ">o\"p q\\r" ~* &* +@all"#,
            "\n",
            "sentinel sentinel-user operator\n",
            r#"sentinel sentinel-pass "o\"p q\\r""#,
            "\n",
        )
    )
}

/// A sentinel of the ValkeyReplication `grp`, with both passwords.
fn replication_sentinel() -> ValkeyNodeSpec {
    let mut member = with_auth(Mode::Sentinel, true, true);
    member.replication = Some(crd_types::node::NodeReplication {
        primary_name: "grp".into(),
        ..Default::default()
    });
    member
}

#[test]
fn a_sentinel_gets_its_users_quoted_in_its_config_in_place_of_what_it_wrote_back() {
    let env = SENTINEL_ENV;
    let kept = "port 26379\ndir \"/data\"\nsentinel monitor other 10.96.0.20 6379 2\n\
                sentinel monitor grp 10.96.0.10 6379 2\n\
                sentinel auth-user other admin\n\
                sentinel myid f4d73e0d22c113a79679868b6865c67862b2c83c\n\
                sentinel current-epoch 0\nsentinel auth-pass other theirs\n";
    let users = sentinel_users();
    // A replication member's sentinel also logs in to its group's data nodes; a group
    // monitored by hand keeps its own login.
    let member = replication_sentinel();
    let after = sentinel_start(&member, &env, REWRITTEN_BY_8_1).unwrap();
    assert_eq!(
        after,
        format!(
            "{kept}{users}sentinel auth-user grp operator\n{}\n",
            r#"sentinel auth-pass grp "o\"p q\\r""#
        )
    );
    // Idempotent: a container restart runs the lines again on their own output.
    assert_eq!(sentinel_start(&member, &env, &after).unwrap(), after);
    // Before it monitors its group there is nothing to log in to.
    let fresh = FRESH;
    assert_eq!(
        sentinel_start(&member, &env, fresh).unwrap(),
        format!("{fresh}{users}")
    );
}

#[test]
fn a_sentinel_made_by_hand_keeps_every_login_its_user_set() {
    let users = sentinel_users();
    let by_hand = with_auth(Mode::Sentinel, true, true);
    let after = sentinel_start(&by_hand, &SENTINEL_ENV, REWRITTEN_BY_8_1).unwrap();
    assert_eq!(
        after,
        format!(
            "port 26379\ndir \"/data\"\nsentinel monitor other 10.96.0.20 6379 2\n\
             sentinel monitor grp 10.96.0.10 6379 2\n\
             sentinel auth-user grp operator\nsentinel auth-user other admin\n\
             sentinel myid f4d73e0d22c113a79679868b6865c67862b2c83c\n\
             sentinel current-epoch 0\nsentinel auth-pass grp o\"p q\\r\n\
             sentinel auth-pass other theirs\n{users}"
        )
    );
}

#[test]
fn a_sentinel_next_to_an_exporter_gets_the_monitoring_user() {
    // With an exporter, the monitoring user, its password derived from the operator's.
    let watched = with_exporter(with_auth(Mode::Sentinel, false, true));
    let after = sentinel_start(&watched, &SENTINEL_ENV, FRESH).unwrap();
    let mp = derived_password(MONITORING_PASSWORD_PREFIX, r#"o"p q\r"#);
    assert!(
        after.ends_with(&format!(
            "user monitoring on \">{mp}\" {SENTINEL_MONITORING_USER_RULES}\n"
        )),
        "{after}"
    );
    assert!(!after.contains("requirepass"), "{after}");
    // Its default user has no password, and a client's rights still.
    assert!(
        after.contains(&format!(
            "user default on nopass {SENTINEL_DEFAULT_USER_RULES}\n"
        )),
        "{after}"
    );
}

#[test]
fn a_sentinel_start_that_cannot_write_its_users_stops_and_leaves_its_config_alone() {
    let env = SENTINEL_ENV;
    let fresh = FRESH;
    // No passwords, nothing to write.
    let open = with_auth(Mode::Sentinel, false, false);
    assert_eq!(sentinel_start_script(&open), None);
    // A config that cannot be read stops the start, leaving nothing behind.
    let member = replication_sentinel();
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("sentinel.conf");
    let script = sentinel_auth_script(&member, conf.to_str().unwrap()).unwrap();
    let out = std::process::Command::new("sh")
        .args(["-c", &script, "valkey-sentinel"])
        .envs(env)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("sentinel.conf"));
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    // A quoted value that came out empty stops the start and leaves the file alone.
    let spec = with_auth(Mode::Sentinel, true, false);
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("sentinel.conf");
    std::fs::write(&conf, fresh).unwrap();
    let script = sentinel_auth_script(&spec, conf.to_str().unwrap())
        .unwrap()
        .replace("| sed ", "| false ");
    let out = std::process::Command::new("sh")
        .args(["-c", &script, "valkey-sentinel"])
        .env("REDISCLI_AUTH", "a-b")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("came out empty"));
    assert_eq!(std::fs::read_to_string(&conf).unwrap(), fresh);
}

fn sentinel_start_script(spec: &ValkeyNodeSpec) -> Option<String> {
    sentinel_auth_script(spec, "/data/sentinel.conf")
}

#[test]
fn a_sentinel_exporters_password_file_names_the_sentinel_port() {
    let spec = with_exporter(with_auth(Mode::Sentinel, true, true));
    let mp = derived_password(MONITORING_PASSWORD_PREFIX, "s3cret");
    // Its exporter's password file names the sentinel port.
    let env = [
        ("POD_IP", "10.244.0.9"),
        ("VALKEY_OPERATOR_PASSWORD", "s3cret"),
    ];
    let file = run(
        &exporter_password_file_script(&spec).unwrap(),
        &env,
        "9.1.2",
        EXPORTER_PASSWORD_FILE,
    )
    .unwrap();
    assert!(
        file.contains(&format!(
            "\"redis://monitoring@10.244.0.9:26379\": \"{mp}\""
        )),
        "{file}"
    );
}

#[test]
fn the_exporter_password_file_matches_the_monitoring_user() {
    let spec = with_exporter(with_auth(Mode::Cluster, true, true));
    let script = exporter_password_file_script(&spec).unwrap();
    let env = [
        ("POD_IP", "10.244.0.7"),
        ("REDISCLI_AUTH", "app-pw"),
        ("VALKEY_OPERATOR_PASSWORD", r#"--op-pass'"\"#),
    ];
    let text = run(&script, &env, "9.1.2", EXPORTER_PASSWORD_FILE).unwrap();
    let map: std::collections::BTreeMap<String, String> = serde_json::from_str(&text).unwrap();
    let mp = derived_password(MONITORING_PASSWORD_PREFIX, r#"--op-pass'"\"#);
    assert_eq!(
        map,
        [
            ("redis://monitoring@10.244.0.7:6379".to_string(), mp.clone()),
            ("redis://10.244.0.7:6379".to_string(), mp.clone()),
        ]
        .into()
    );
    let users = auth_file_of(&spec, &env, "9.1.2");
    assert!(
        users.contains(&format!("user monitoring on \">{mp}\" ")),
        "{users}"
    );
}

#[test]
fn with_tls_the_exporter_password_file_is_keyed_by_rediss() {
    // The exporter dials rediss://, and redis_exporter looks the password up by the
    // exact address (measured with 1.86.0: a redis:// key leaves it logged out).
    let spec = with_exporter(with_auth(Mode::Cluster, true, true));
    let env = [("POD_IP", "10.244.0.7"), ("VALKEY_OPERATOR_PASSWORD", "op")];
    let mut tls = spec;
    tls.tls = Some(crd_types::template::Tls {
        secret_name: "orders-tls".into(),
        auth_clients: Default::default(),
        plain_text_clients: false,
    });
    let script = exporter_password_file_script(&tls).unwrap();
    let text = run(&script, &env, "9.1.2", EXPORTER_PASSWORD_FILE).unwrap();
    let map: std::collections::BTreeMap<String, String> = serde_json::from_str(&text).unwrap();
    assert_eq!(
        map.into_keys().collect::<Vec<_>>(),
        [
            "rediss://10.244.0.7:6379",
            "rediss://monitoring@10.244.0.7:6379"
        ]
    );
}

#[test]
fn a_restarted_server_takes_the_monitoring_password_its_exporter_has() {
    let dir = std::env::temp_dir().join(format!("node-controller-mp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("monitoring");
    let script = format!(
        "{}\nprintf '%s' \"$mp\"",
        monitoring_password_in(file.to_str().unwrap(), "$VALKEY_OPERATOR_PASSWORD")
    );
    let mp = |env_password: &str| {
        let out = std::process::Command::new("sh")
            .args(["-c", &script])
            .env("VALKEY_OPERATOR_PASSWORD", env_password)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    // No file (a pod without an exporter's init container): derived from the env.
    let started_with = derived_password(MONITORING_PASSWORD_PREFIX, "old");
    assert_eq!(mp("old"), started_with);
    // The init container wrote it at the pod's start; the operator password rotated
    // since, and the container restarted with the new one in its env.
    std::fs::write(&file, &started_with).unwrap();
    assert_eq!(mp("new"), started_with);
    std::fs::remove_dir_all(&dir).unwrap();
}
