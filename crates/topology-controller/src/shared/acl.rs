//! The `replication` ACL user (layer 1): its password, derived from the operator's, and a
//! member's account of it (`ACL GETUSER`). Members render the user at start; one whose
//! running config predates it (an operator upgrade, before the roll reaches it) gets it live,
//! so a rolled replica can log in to a primary that has not rolled yet.

use std::fmt;

use crd_types::template::{
    ATOMIC_MIGRATION_RULES, REPLICATION_PASSWORD_PREFIX, REPLICATION_USER_RULES, derived_password,
};
use sha2::{Digest, Sha256};

/// The `replication` user's password and its hash as `ACL GETUSER` lists it. Never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct ReplicationPassword {
    password: String,
    hash: String,
    /// During a rotation of the operator password, the hashes of the replication passwords
    /// members may hold instead: a member with one is not lacking (the rotation brings it
    /// the new one; recreating the user would cut replicas that log in with it).
    previous_hashes: Vec<String>,
}

impl fmt::Debug for ReplicationPassword {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ReplicationPassword(<redacted>)")
    }
}

impl ReplicationPassword {
    /// Derived from the operator password as node-controller's start script derives it.
    pub fn from_operator(operator_password: &str) -> Self {
        let password = derived_password(REPLICATION_PASSWORD_PREFIX, operator_password);
        let hash = sha256_hex(&password);
        Self {
            password,
            hash,
            previous_hashes: Vec::new(),
        }
    }

    /// [`Self::from_operator`], admitting too the replication passwords derived from
    /// `previous`, the operator passwords members may hold during a rotation.
    pub fn rotating_from(operator_password: &str, previous: &[String]) -> Self {
        let previous_hashes = previous
            .iter()
            .map(|p| sha256_hex(derived_password(REPLICATION_PASSWORD_PREFIX, p)))
            .collect();
        Self {
            previous_hashes,
            ..Self::from_operator(operator_password)
        }
    }

    /// `ACL SETUSER replication` arguments making the user exactly what members render; with
    /// `atomic_migration` (a cluster member on 9.0+) it may also replay slot migrations.
    pub fn setuser_rules(&self, atomic_migration: bool) -> Vec<String> {
        let extra = if atomic_migration {
            ATOMIC_MIGRATION_RULES
        } else {
            ""
        };
        ["reset", "on"]
            .into_iter()
            .map(String::from)
            .chain([format!(">{}", self.password)])
            .chain(
                REPLICATION_USER_RULES
                    .split_whitespace()
                    .chain(extra.split_whitespace())
                    .map(String::from),
            )
            .collect()
    }

    /// Whether `user` (a member's account) can log in with this password.
    pub fn admits(&self, user: Option<&AclUser>) -> bool {
        let takes = |u: &AclUser, hash: &String| u.password_hashes.contains(hash);
        user.is_some_and(|u| {
            u.enabled && (takes(u, &self.hash) || self.previous_hashes.iter().any(|h| takes(u, h)))
        })
    }
}

/// What `ACL GETUSER` reports of a user that exists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AclUser {
    /// `on` among its flags.
    pub enabled: bool,
    /// SHA-256 of each of its passwords, hex.
    pub password_hashes: Vec<String>,
}

/// One member as [`lacking_replication_user`] reads it: its name, its account of the user
/// (`None` when not read, `Some(None)` when it has none), and whether it is a cluster member
/// on 9.0+ (see [`ReplicationPassword::setuser_rules`]).
pub type UserReport<'a> = (&'a str, Option<Option<&'a AclUser>>, bool);

/// The members whose `replication` user is missing, disabled or lacks `password`, each with
/// whether it gets the atomic migration rules. Only the password and `on` are compared: the
/// rules are what members render, and only an admin can change them.
pub fn lacking_replication_user<'a>(
    password: &ReplicationPassword,
    members: impl IntoIterator<Item = UserReport<'a>>,
) -> Vec<(String, bool)> {
    members
        .into_iter()
        .filter_map(|(name, read, atomic)| Some((name, read?, atomic)))
        .filter(|(_, user, _)| !password.admits(*user))
        .map(|(name, _, atomic)| (name.to_string(), atomic))
        .collect()
}

/// What `ACL SETUSER` with `rules` makes of `user`, as far as [`AclUser`] shows (the fakes').
#[cfg(test)]
pub(crate) fn set_user(user: Option<AclUser>, rules: &[String]) -> AclUser {
    let mut user = user.unwrap_or(AclUser {
        enabled: false,
        password_hashes: Vec::new(),
    });
    for rule in rules {
        match rule.as_str() {
            "reset" => {
                user.enabled = false;
                user.password_hashes.clear();
            }
            "on" => user.enabled = true,
            "off" => user.enabled = false,
            "resetpass" | "nopass" => user.password_hashes.clear(),
            _ => {
                if let Some(password) = rule.strip_prefix('>') {
                    let hash = sha256_hex(password);
                    if !user.password_hashes.contains(&hash) {
                        user.password_hashes.push(hash);
                    }
                }
            }
        }
    }
    user
}

pub fn sha256_hex(text: impl AsRef<[u8]>) -> String {
    Sha256::digest(text.as_ref())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_password_is_derived_as_the_start_script_derives_it() {
        // The vector node-controller's auth file test expects for the same operator password.
        let p = ReplicationPassword::from_operator(r#"--op-pass'"\"#);
        assert_eq!(
            p.password,
            "e090f2b28e1b43e4d33ea0938ac4eee7606a383382c2d418d0061db80c5eb981"
        );
        assert_eq!(p.hash, sha256_hex(&p.password));
        assert_eq!(format!("{p:?}"), "ReplicationPassword(<redacted>)");
    }

    #[test]
    fn setuser_resets_the_user_to_what_members_render() {
        let p = ReplicationPassword::from_operator("s3cret");
        assert_eq!(
            p.setuser_rules(false),
            [
                "reset",
                "on",
                ">531fc8f0713e57921711ee9ca8dcb9fb089f1efdd993e40079586904a2dd3fa1",
                "resetchannels",
                "-@all",
                "+psync",
                "+sync",
                "+replconf",
                "+ping",
            ]
        );
        assert_eq!(
            p.setuser_rules(true)[9..],
            [
                "+cluster|syncslots",
                "+select",
                "~*",
                "+@write",
                "-flushall",
                "-flushdb",
                "-swapdb"
            ]
        );
    }

    #[test]
    fn during_a_rotation_the_previous_replication_password_is_not_lacking() {
        let user = |operator: &str| AclUser {
            enabled: true,
            password_hashes: vec![ReplicationPassword::from_operator(operator).hash],
        };
        let rotating = ReplicationPassword::rotating_from("new", &["old".to_string()]);
        assert!(rotating.admits(Some(&user("old"))) && rotating.admits(Some(&user("new"))));
        assert!(!rotating.admits(Some(&user("other"))));
        // Once settled, only the new one.
        let settled = ReplicationPassword::rotating_from("new", &[]);
        assert!(!settled.admits(Some(&user("old"))));
        assert_eq!(settled, ReplicationPassword::from_operator("new"));
    }

    #[test]
    fn members_without_a_usable_user_lack_it_and_unread_ones_are_left_alone() {
        let p = ReplicationPassword::from_operator("s3cret");
        let good = AclUser {
            enabled: true,
            password_hashes: vec!["other".into(), p.hash.clone()],
        };
        let off = AclUser {
            enabled: false,
            ..good.clone()
        };
        let stale = AclUser {
            enabled: true,
            password_hashes: vec!["other".into()],
        };
        let lacking = lacking_replication_user(
            &p,
            [
                ("rendered", Some(Some(&good)), false),
                ("disabled", Some(Some(&off)), false),
                ("old-password", Some(Some(&stale)), true),
                ("absent", Some(None), false),
                ("silent", None, false),
            ],
        );
        assert_eq!(
            lacking,
            [
                ("disabled".to_string(), false),
                ("old-password".to_string(), true),
                ("absent".to_string(), false)
            ]
        );
    }
}
