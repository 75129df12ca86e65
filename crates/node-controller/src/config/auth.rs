//! The users and passwords a data node starts with, written by its container's start-up
//! shell (never in the ConfigMap or the pod spec): the default user's password and the
//! readiness probe's `probe` user (PING only, no password), the `operator` user, the `replication` user replicas log in as and, next to an exporter, the
//! read-only `monitoring` user (a sentinel's go into its own config, see
//! [`sentinel_auth_script`]). The two derived passwords are computed in the pod from the
//! operator's (see [`derived_password`]), so they need no Secret of their own.

use crd_types::ValkeyNodeSpec;
use crd_types::names::ports;
use crd_types::node::Mode;
#[cfg(doc)]
use crd_types::template::derived_password;
use crd_types::template::{
    ATOMIC_MIGRATION_RULES, COMMANDLOG_RULES, DEFAULT_USER_RULES, MONITORING_PASSWORD_PREFIX,
    MONITORING_USER, MONITORING_USER_RULES, OPERATOR_USER, PROBE_USER, PROBE_USER_RULES,
    REPLICATION_PASSWORD_PREFIX, REPLICATION_USER, REPLICATION_USER_RULES,
    SENTINEL_DEFAULT_USER_RULES, SENTINEL_MONITORING_USER_RULES,
};

use super::{AUTH_FILE, OPERATOR_PASSWORD_ENV, PASSWORD_ENV, POD_IP_ENV};

/// Where the exporter finds its password file (an in-memory emptyDir the `exporter-auth`
/// init container fills).
pub const EXPORTER_AUTH_DIR: &str = "/run/valkey-exporter";
/// The exporter's password file: redis_exporter's JSON map from address to password.
pub const EXPORTER_PASSWORD_FILE: &str = "/run/valkey-exporter/passwords.json";
/// The monitoring user's password as the `exporter-auth` init container derived it at the
/// pod's start: a server container restarted later takes it from here, so it matches the
/// exporter's file even after the operator password rotated.
pub const MONITORING_PASSWORD_FILE: &str = "/run/valkey-exporter/monitoring";

/// Shell lines setting `mp` to the monitoring user's password: the one the pod's exporter
/// has ([`MONITORING_PASSWORD_FILE`]), else derived from `base` as the init container does.
fn monitoring_password(base: &str) -> String {
    monitoring_password_in(MONITORING_PASSWORD_FILE, base)
}

/// [`monitoring_password`] reading `file` (tests use their own).
fn monitoring_password_in(file: &str, base: &str) -> String {
    format!(
        "mp=$(cat {file} 2>/dev/null) || mp=\nif [ ${{#mp}} -ne 64 ]; then\n{}\nfi",
        derive("mp", MONITORING_PASSWORD_PREFIX, base)
    )
}

/// Shell lines setting `var` to [`derived_password`]`(prefix, $base)`, or exiting when
/// `sha256sum` fails (an empty password would let anyone in as that user).
fn derive(var: &str, prefix: &str, base: &str) -> String {
    format!(
        "{var}=$(printf '%s%s' '{prefix}' \"{base}\" | sha256sum | cut -c1-64)\n\
         [ ${{#{var}}} -eq 64 ] || {{ echo 'cannot derive a password ({var}): sha256sum failed' >&2; exit 1; }}"
    )
}

/// The password the monitoring user's is derived from: the operator's when there is an
/// operator user (it does not change with the default user's), else the default user's.
/// `None` without passwords or exporter.
fn monitoring_base(spec: &ValkeyNodeSpec) -> Option<String> {
    let auth = spec.auth.as_ref()?;
    spec.template.exporter.as_ref()?;
    if auth.operator_secret_ref.is_some() {
        Some(format!("${OPERATOR_PASSWORD_ENV}"))
    } else if auth.password_secret_ref.is_some() {
        Some(format!("${PASSWORD_ENV}"))
    } else {
        None
    }
}

/// The shell lines with which a data node's container writes its password directives to
/// [`AUTH_FILE`] before the server starts, each value quoted for Valkey's config parser
/// (`\` and `"` escaped). Not on the command line: Valkey 8.1 rebuilds its arguments into
/// config lines without escaping them, so a password with `"` stops the start and one with
/// `\` is silently changed (measured on 8.1.1; 8.0.1 and 9.1.2 keep them). With an operator
/// user, replication logs in as the `replication` user (password derived from the
/// operator's, see [`REPLICATION_PASSWORD_PREFIX`]): a change of the default user's password
/// cannot break it mid-roll, and the default user is a client's, without the admin
/// commands ([`DEFAULT_USER_RULES`]). With an exporter, the `monitoring` user it logs in as. `None` for sentinels and for nodes without
/// passwords.
pub fn auth_file_script(spec: &ValkeyNodeSpec) -> Option<String> {
    let auth = spec.auth.as_ref().filter(|_| spec.mode != Mode::Sentinel)?;
    let (password, operator) = (
        auth.password_secret_ref.is_some(),
        auth.operator_secret_ref.is_some(),
    );
    if !password && !operator {
        return None;
    }
    let monitoring = monitoring_base(spec);
    let quoted = |value: &str| format!("\"$(valkey_quote \"{value}\")\"");
    // Derived before the file is written: an empty one would be a passwordless user.
    let mut derive_lines = Vec::new();
    let mut lines = vec![
        VALKEY_QUOTE.to_string(),
        // Owner-only, without changing the umask the server inherits.
        "(umask 077; {".to_string(),
    ];
    let pw = format!("${PASSWORD_ENV}");
    let op = format!("${OPERATOR_PASSWORD_ENV}");
    lines.extend(
        default_user_line(password, operator, DEFAULT_USER_RULES).map(|l| format!("  {l}")),
    );
    if password {
        // The readiness probe's: PING without the default password, which may change.
        lines.push(format!(
            "  printf 'user {PROBE_USER} on {PROBE_USER_RULES}\\n'"
        ));
    }
    if operator {
        lines.push(format!(
            "  printf 'user {OPERATOR_USER} on %s ~* &* +@all\\n' {}",
            quoted(&format!(">{op}"))
        ));
        lines.push(format!(
            "  printf 'user {REPLICATION_USER} on %s %s\\n' {} \"$rr\"",
            quoted(">$rp")
        ));
        lines.push(format!("  printf 'masteruser {REPLICATION_USER}\\n'"));
        lines.push(format!("  printf 'masterauth %s\\n' {}", quoted("$rp")));
        derive_lines.push(derive("rp", REPLICATION_PASSWORD_PREFIX, &op));
        derive_lines.push(format!("rr='{REPLICATION_USER_RULES}'"));
        if spec.mode == Mode::Cluster {
            // Atomic slot migration (9.0+) replays writes on the target as this user; older
            // servers refuse its command as unknown.
            derive_lines.push(format!(
                "case \"$version\" in *' v=7.'*|*' v=8.'*|'') ;; *) rr=\"$rr {ATOMIC_MIGRATION_RULES}\";; esac"
            ));
        }
    } else {
        lines.push(format!("  printf 'masterauth %s\\n' {}", quoted(&pw)));
    }
    if let Some(base) = &monitoring {
        lines.push(format!(
            "  printf 'user {MONITORING_USER} on %s %s\\n' {} \"$mr\"",
            quoted(">$mp")
        ));
        derive_lines.push(monitoring_password(base));
        derive_lines.push(format!("mr='{MONITORING_USER_RULES}'"));
        // COMMANDLOG is 8.1+; 8.0 refuses the rule as an unknown command.
        derive_lines.push(format!(
            "case \"$version\" in *' v=7.'*|*' v=8.0.'*|'') ;; *) mr=\"$mr {COMMANDLOG_RULES}\";; esac"
        ));
    }
    lines.push(format!("}} > {AUTH_FILE}) || exit 1"));
    // A quoted value that came out empty (no `sed`, say) would be no password at all.
    lines.push(format!(
        "if grep -Eq '(^| )\"\"( |$)' {AUTH_FILE}; {}",
        refuse_empty_quoted(AUTH_FILE)
    ));
    if !derive_lines.is_empty() {
        // `$0` is the server program.
        derive_lines.insert(0, "version=\"$(\"$0\" --version 2>/dev/null)\"".into());
        lines.insert(1, derive_lines.join("\n"));
    }
    Some(lines.join("\n"))
}

/// The `exporter-auth` init container's script: writes the monitoring user's password to
/// [`EXPORTER_PASSWORD_FILE`] as redis_exporter's password file, keyed by the address the
/// exporter scrapes (`REDIS_ADDR`): with `REDIS_USER` in it, as v1.69.0+ looks it up, and
/// without, as older releases do (both then log in as `REDIS_USER`). `None` where the
/// exporter logs in otherwise (see [`exporter_logs_in_as_monitoring`]).
pub fn exporter_password_file_script(spec: &ValkeyNodeSpec) -> Option<String> {
    let base = monitoring_base(spec)?;
    let port = match spec.mode {
        Mode::Sentinel => ports::SENTINEL,
        Mode::Standalone | Mode::Cluster => ports::VALKEY,
    };
    // Keyed by REDIS_ADDR's scheme too: `rediss` with TLS.
    let scheme = super::tls::exporter_scheme(spec.tls.as_ref());
    Some(format!(
        "{}\n(umask 077; printf '{{\"{scheme}://{MONITORING_USER}@%s:{port}\": \"%s\", \"{scheme}://%s:{port}\": \"%s\"}}\\n' \
         \"${POD_IP_ENV}\" \"$mp\" \"${POD_IP_ENV}\" \"$mp\" > {EXPORTER_PASSWORD_FILE} && \
         printf '%s' \"$mp\" > {MONITORING_PASSWORD_FILE}) || exit 1",
        derive("mp", MONITORING_PASSWORD_PREFIX, &base),
    ))
}

/// Whether the exporter logs in as the monitoring user (a node with passwords and an
/// exporter); otherwise there is no password to log in with.
pub fn exporter_logs_in_as_monitoring(spec: &ValkeyNodeSpec) -> bool {
    monitoring_base(spec).is_some()
}

/// The shell function quoting `$1` for Valkey's config parser (`\` and `"` escaped).
const VALKEY_QUOTE: &str =
    r#"valkey_quote() { printf '"%s"' "$(printf '%s' "$1" | sed 's/[\\"]/\\&/g')"; }"#;

/// The shell line printing the default user's config line. Next to an `operator` user it is
/// a client's, with `rules`; its `user default` line replaces what `requirepass` would set,
/// so it holds the password (quoted, from the environment) or says `nopass`. Without one it
/// keeps every command (it is the only admin) and takes `requirepass`. `None` with neither.
fn default_user_line(password: bool, operator: bool, rules: &str) -> Option<String> {
    let quoted = format!("\"$(valkey_quote \">${PASSWORD_ENV}\")\"");
    match (operator, password) {
        (true, true) => Some(format!("printf 'user default on %s {rules}\\n' {quoted}")),
        (true, false) => Some(format!("printf 'user default on nopass {rules}\\n'")),
        (false, true) => Some(format!(
            "printf 'requirepass %s\\n' \"$(valkey_quote \"${PASSWORD_ENV}\")\""
        )),
        (false, false) => None,
    }
}

/// Refuses to start when a quoted password came out empty (no `sed`, say): `requirepass ""`
/// would mean no password at all.
fn refuse_empty_quoted(what: &str) -> String {
    format!("then echo 'a password came out empty in {what}: refusing to start' >&2; exit 1; fi")
}

/// The shell lines with which a sentinel's container puts its users and passwords into
/// `conf`, the copy of its config it runs from, before Sentinel starts: each value quoted,
/// replacing whatever lines of these the file holds. Not arguments: Valkey 8.1 re-reads its
/// arguments as config lines without escaping them. And not left to the file: Sentinel
/// 8.0 and 8.1 rewrite `sentinel-pass` and `auth-pass` unquoted (8.1 `requirepass` too), so
/// a password with a `"`, `\` or space written back by Sentinel stops its next start (both
/// measured; 9.1 quotes them). Lines replaced: `requirepass`, every `user`, `sentinel
/// sentinel-user|sentinel-pass`, for a replication member its group's `sentinel
/// auth-user|auth-pass` (the login to the data nodes, as `operator`), and the `# ???`
/// comments 8.0 and 8.1 turn their own unparsable lines into (old passwords, in clear).
/// Users: the default one (see [`default_user_line`], with
/// [`SENTINEL_DEFAULT_USER_RULES`]), the readiness probe's `probe` user (PING only, no
/// password), `operator` (sentinels log in to each other as it too) and next to an exporter
/// the read-only `monitoring` user. The umask is set for Sentinel too, which writes the
/// file (passwords included) with it. `None` for data nodes
/// (see [`auth_file_script`]) and sentinels without passwords.
pub fn sentinel_auth_script(spec: &ValkeyNodeSpec, conf: &str) -> Option<String> {
    if spec.mode != Mode::Sentinel {
        return None;
    }
    let auth = spec.auth.as_ref()?;
    let (password, operator) = (
        auth.password_secret_ref.is_some(),
        auth.operator_secret_ref.is_some(),
    );
    if !password && !operator {
        return None;
    }
    // A replication member's group (its name is a Kubernetes name: safe in shell and awk).
    let group = spec
        .replication
        .as_ref()
        .filter(|_| operator)
        .map(|r| r.primary_name.as_str());
    let quoted = |value: &str| format!("\"$(valkey_quote \"{value}\")\"");
    let op = format!("${OPERATOR_PASSWORD_ENV}");
    let mut lines = vec!["umask 077".to_string(), VALKEY_QUOTE.to_string()];
    let mut users = Vec::new();
    users.extend(default_user_line(
        password,
        operator,
        SENTINEL_DEFAULT_USER_RULES,
    ));
    if password {
        // The readiness probe's, as on a data node: the password above may rotate live.
        users.push(format!(
            "printf 'user {PROBE_USER} on {PROBE_USER_RULES}\\n'"
        ));
    }
    if operator {
        users.push(format!(
            "printf 'user {OPERATOR_USER} on %s ~* &* +@all\\n' {}",
            quoted(&format!(">{op}"))
        ));
        users.push(format!(
            "printf 'sentinel sentinel-user {OPERATOR_USER}\\n'"
        ));
        users.push(format!(
            "printf 'sentinel sentinel-pass %s\\n' {}",
            quoted(&op)
        ));
    }
    if let Some(base) = monitoring_base(spec) {
        lines.push(monitoring_password(&base));
        users.push(format!(
            "printf 'user {MONITORING_USER} on %s %s\\n' {} '{SENTINEL_MONITORING_USER_RULES}'",
            quoted(">$mp")
        ));
    }
    // Valkey reads directive names in any case.
    let mut replaced = "$1 == \"#\" && $2 == \"???\" || \
         tolower($1) == \"requirepass\" || tolower($1) == \"user\" || \
         tolower($1) == \"sentinel\" && (tolower($2) == \"sentinel-user\" || tolower($2) == \"sentinel-pass\""
        .to_string();
    if let Some(group) = group {
        // Only once it monitors the group (the init container's or Sentinel's own line,
        // both lower case); appended after it, as `auth-pass` must be.
        users.push(format!(
            "if grep -q '^sentinel monitor {group} ' {conf}; then printf 'sentinel auth-user {group} {OPERATOR_USER}\\nsentinel auth-pass {group} %s\\n' {}; fi",
            quoted(&op)
        ));
        replaced.push_str(&format!(
            " || (tolower($2) == \"auth-user\" || tolower($2) == \"auth-pass\") && $3 == \"{group}\""
        ));
    }
    replaced.push(')');
    lines.push(format!(
        "users=$({{\n  {}\n}}) || exit 1",
        users.join("\n  ")
    ));
    lines.push(format!(
        "if printf '%s\\n' \"$users\" | grep -Eq '(^| )\"\"( |$)'; {}",
        refuse_empty_quoted(conf)
    ));
    lines.push(format!(
        "(awk '{replaced} {{ next }} {{ print }}' {conf} > {conf}.auth && \
         printf '%s\\n' \"$users\" >> {conf}.auth && mv {conf}.auth {conf}) || {{ rm -f {conf}.auth; exit 1; }}"
    ));
    Some(lines.join("\n"))
}

#[cfg(test)]
mod tests;
