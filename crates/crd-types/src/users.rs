//! `users`: the ACL users of a topology's data nodes besides the operator's own, applied live
//! by topology-controller (`ACL SETUSER`) and kept across restarts through the
//! `<topology>-users` Secret its members read at start (see [`crate::node::ValkeyNodeSpec`]'s
//! `usersSecretName`). Sentinels get none: clients only ask them where the primary is.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use crate::template::SecretKeyRef;

/// Names the operator's own users have on data nodes: `spec.users` cannot take them.
pub const RESERVED_USER_NAMES: [&str; 5] =
    ["default", "operator", "replication", "monitoring", "probe"];

/// The key of a users Secret holding its `user` lines.
pub const USERS_KEY: &str = "users.acl";

/// Rule tokens the operator writes itself (the user's state and password): a rule naming
/// one would let the spec switch a user off, drop its password or set one in clear.
const OWNED_TOKENS: &str = "['on', 'off', 'reset', 'nopass', 'resetpass']";

/// One ACL user.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct User {
    /// The user name (`AUTH <name> <password>`): lower-case letters, digits and '-'; not
    /// default, operator, replication, monitoring or probe, which the operator keeps for itself.
    #[schemars(length(min = 1, max = 63))]
    #[x_kube(
        validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')").message("users[].name is lower-case letters, digits and '-', starting and ending with a letter or digit"),
        validation = Rule::new(format!("!(self in {RESERVED:?})", RESERVED = RESERVED_USER_NAMES)).message("users[].name cannot be default, operator, replication, monitoring or probe: the operator keeps those users for itself")
    )]
    pub name: String,
    /// ACL rules, one per item, as `ACL SETUSER` takes them: `~app:*`, `&news.*`,
    /// `+@read`, `-flushall`, `%R~cache:*`. The operator adds `reset resetchannels on` and
    /// the password's hash; selectors (rules in parentheses) are not supported. Each server
    /// version the topology runs checks the rules before any member gets them.
    #[serde(default)]
    #[schemars(length(max = 64), inner(length(max = 512)))]
    #[x_kube(
        validation = Rule::new("self.all(r, r.matches('^[!-~]+$') && !r.matches('[()\"\\']'))").message("users[].rules: each rule is one token of printable ASCII without spaces, quotes or parentheses (selectors are not supported), at most 512 characters"),
        validation = Rule::new(format!("self.all(r, !(r.lowerAscii() in {OWNED_TOKENS}) && !r.matches('^[<>#!]'))")).message("users[].rules cannot hold on, off, reset, nopass, resetpass or a password (>, <, #, !): the operator sets the user's state and its password from passwordSecretRef")
    )]
    pub rules: Vec<String>,
    /// The user's password. Absent: generated into the Secret `<topology>-user-<name>`
    /// (key `password`). Changing the Secret's value (or naming another) changes the password
    /// on every member without a restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_secret_ref: Option<SecretKeyRef>,
    /// After a password change, how long the previous password keeps working next to the
    /// new one (seconds), so clients can move over without failing; 0 drops it at once.
    #[serde(default = "default_password_overlap")]
    #[x_kube(validation = Rule::new("self >= 0 && self <= 604800").message("users[].passwordOverlapSeconds is 0 to 604800 (a week)"))]
    pub password_overlap_seconds: i64,
}

fn default_password_overlap() -> i64 {
    300
}

/// The CEL rule on a `users` list: each name once.
pub const UNIQUE_NAMES: &str = "self.all(u, self.exists_one(v, v.name == u.name))";
/// Its message.
pub const UNIQUE_NAMES_MESSAGE: &str = "users: each name may appear only once";
