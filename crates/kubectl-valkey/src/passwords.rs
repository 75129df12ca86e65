//! Which Secret holds a topology's password (the spec's, else the generated one; the same
//! choice as topology-controller's shared/auth), the new password, and what the operator
//! does with it (docs/credentials.md).

use anyhow::{Result, bail};
use crd_types::names;
use crd_types::template::{DEFAULT_PASSWORD_OVERLAP_SECONDS, SecretKeyRef};
use serde_json::{Value, json};

use crate::topology::Topology;

/// The key a generated Secret keeps its password under.
const GENERATED_KEY: &str = "password";

/// Whose password to rotate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Which {
    /// The data nodes' default user.
    Default,
    /// A ValkeyReplication's sentinels' own password.
    Sentinel,
    /// The `operator` ACL user's (every member).
    Operator,
    /// A user of `spec.users`.
    User(String),
}

impl Which {
    pub fn parse(text: &str) -> Result<Which, String> {
        match text {
            "default" => Ok(Which::Default),
            "sentinel" => Ok(Which::Sentinel),
            "operator" => Ok(Which::Operator),
            _ => match text.strip_prefix("user:") {
                Some(user) if !user.is_empty() => Ok(Which::User(user.to_string())),
                _ => Err(format!(
                    "{text:?}: expected default, sentinel, operator or user:<name>"
                )),
            },
        }
    }
}

/// The Secret and key `which` password of `topology` is read from.
pub fn secret_of(topology: &Topology, which: &Which) -> Result<SecretKeyRef> {
    let name = topology.name();
    let auth = topology.common().auth.clone().unwrap_or_default();
    let generated = |secret: String| SecretKeyRef {
        name: secret,
        key: GENERATED_KEY.into(),
    };
    Ok(match which {
        Which::Default => auth
            .password_secret_ref
            .unwrap_or_else(|| generated(names::generated_auth_secret_name(&name))),
        Which::Operator => auth
            .operator_secret_ref
            .unwrap_or_else(|| generated(names::generated_operator_secret_name(&name))),
        Which::Sentinel => match topology {
            Topology::Replication(r) => r
                .spec
                .sentinel
                .password_secret_ref
                .clone()
                .unwrap_or_else(|| generated(names::generated_sentinel_secret_name(&name))),
            Topology::Cluster(_) => {
                bail!("{name} is a ValkeyCluster: only a ValkeyReplication has sentinels")
            }
        },
        Which::User(user) => {
            let users = topology.common().users.clone().unwrap_or_default();
            let Some(found) = users.iter().find(|u| &u.name == user) else {
                let listed: Vec<&str> = users.iter().map(|u| u.name.as_str()).collect();
                bail!("{name} has no user {user:?} in spec.users (it lists {listed:?})");
            };
            found
                .password_secret_ref
                .clone()
                .unwrap_or_else(|| generated(names::generated_user_secret_name(&name, user)))
        }
    })
}

/// Every Secret holding a password of `topology`: the default user's, the operator's (and
/// the copy the controller keeps of it), the sentinels', each user's. A report scrubs their
/// values.
pub fn password_secrets(topology: &Topology) -> Vec<String> {
    let mut whiches = vec![Which::Default, Which::Operator];
    if matches!(topology, Topology::Replication(_)) {
        whiches.push(Which::Sentinel);
    }
    for user in topology.common().users.iter().flatten() {
        whiches.push(Which::User(user.name.clone()));
    }
    let mut secrets: Vec<String> = whiches
        .iter()
        .filter_map(|w| secret_of(topology, w).ok())
        .map(|r| r.name)
        .collect();
    secrets.push(names::applied_operator_secret_name(&topology.name()));
    secrets.sort();
    secrets.dedup();
    secrets
}

/// A new password: `bytes` random bytes, hex (what the controller generates: no `-` first,
/// no line break, nothing a shell or a URL must quote).
pub fn new_password(random: &[u8]) -> String {
    random.iter().map(|b| format!("{b:02x}")).collect()
}

/// 32 random bytes from the kernel.
pub fn random_bytes() -> Result<[u8; 32]> {
    use std::io::Read;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes)
}

/// The patch writing `password` under `key`, only on the version read (a Secret changed
/// meanwhile is refused, not overwritten).
pub fn secret_patch(key: &str, password: &str, resource_version: Option<&str>) -> Value {
    let mut patch = json!({"stringData": {(key): password}});
    if let Some(version) = resource_version {
        patch["metadata"] = json!({"resourceVersion": version});
    }
    patch
}

/// What the operator does once the Secret changed.
pub fn what_next(topology: &Topology, which: &Which) -> String {
    let overlap = topology
        .common()
        .auth
        .as_ref()
        .and_then(|a| a.password_overlap_seconds)
        .unwrap_or(DEFAULT_PASSWORD_OVERLAP_SECONDS);
    let kind = topology.kind().as_str();
    let name = topology.name();
    match which {
        Which::Default => format!(
            "every data node of {kind} {name} takes the new password within seconds, with no restart, and keeps the previous one for {overlap}s after the last has it (status.passwordRotations, user default, shows the progress)"
        ),
        Which::Sentinel => format!(
            "every sentinel of {kind} {name} takes the new password within seconds and keeps the previous one for {overlap}s after the last has it (status.passwordRotations, user sentinels/default)"
        ),
        Which::Operator => format!(
            "every member of {kind} {name} takes the new operator password live and switches its own logins to it; the previous one goes after the overlap, at least 120s (status.passwordRotations, user operator)"
        ),
        Which::User(user) => {
            let overlap = topology
                .common()
                .users
                .iter()
                .flatten()
                .find(|u| &u.name == user)
                .map(|u| u.password_overlap_seconds)
                .unwrap_or(DEFAULT_PASSWORD_OVERLAP_SECONDS);
            format!(
                "every data node of {kind} {name} takes user {user}'s new password within about 10s, and the previous one keeps working for {overlap}s (condition UsersReady, Event UsersApplied)"
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crd_types::template::Auth;
    use crd_types::users::User;
    use crd_types::{ValkeyCluster, ValkeyReplication};

    fn cluster(auth: Option<Auth>, users: Vec<User>) -> Topology {
        let mut c: ValkeyCluster =
            serde_json::from_value(json!({"metadata": {"name": "orders"}, "spec": {"shards": 3}}))
                .unwrap();
        c.spec.common.auth = auth;
        c.spec.common.users = (!users.is_empty()).then_some(users);
        Topology::Cluster(Box::new(c))
    }

    fn replication() -> Topology {
        let r: ValkeyReplication = serde_json::from_value(
            json!({"metadata": {"name": "sessions"}, "spec": {"replicas": 3}}),
        )
        .unwrap();
        Topology::Replication(Box::new(r))
    }

    fn reference(name: &str, key: &str) -> SecretKeyRef {
        SecretKeyRef {
            name: name.into(),
            key: key.into(),
        }
    }

    #[test]
    fn which_reads_like_the_flag() {
        assert_eq!(Which::parse("default"), Ok(Which::Default));
        assert_eq!(Which::parse("sentinel"), Ok(Which::Sentinel));
        assert_eq!(Which::parse("operator"), Ok(Which::Operator));
        assert_eq!(Which::parse("user:app"), Ok(Which::User("app".into())));
        assert!(Which::parse("user:").is_err());
        assert!(Which::parse("root").is_err());
    }

    #[test]
    fn generated_secrets_when_the_spec_names_none() {
        let c = cluster(None, vec![]);
        assert_eq!(
            secret_of(&c, &Which::Default).unwrap(),
            reference("orders-auth", "password")
        );
        assert_eq!(
            secret_of(&c, &Which::Operator).unwrap(),
            reference("orders-operator", "password")
        );
        assert!(secret_of(&c, &Which::Sentinel).is_err());
        assert_eq!(
            secret_of(&replication(), &Which::Sentinel).unwrap(),
            reference("sessions-sentinel-auth", "password")
        );
    }

    #[test]
    fn the_spec_s_secret_wins() {
        let auth = Auth {
            password_secret_ref: Some(reference("mine", "pw")),
            operator_secret_ref: Some(reference("ops", "key")),
            password_overlap_seconds: Some(60),
        };
        let user: User = serde_json::from_value(json!({
            "name": "app", "rules": ["+@read"],
            "passwordSecretRef": {"name": "app-pw", "key": "k"}
        }))
        .unwrap();
        let plain: User = serde_json::from_value(json!({"name": "etl", "rules": []})).unwrap();
        let c = cluster(Some(auth), vec![user, plain]);
        assert_eq!(
            secret_of(&c, &Which::Default).unwrap(),
            reference("mine", "pw")
        );
        assert_eq!(
            secret_of(&c, &Which::Operator).unwrap(),
            reference("ops", "key")
        );
        assert_eq!(
            secret_of(&c, &Which::User("app".into())).unwrap(),
            reference("app-pw", "k")
        );
        assert_eq!(
            secret_of(&c, &Which::User("etl".into())).unwrap(),
            reference("orders-user-etl", "password")
        );
        let unknown = secret_of(&c, &Which::User("x".into()))
            .unwrap_err()
            .to_string();
        assert!(unknown.contains("no user \"x\""), "{unknown}");
        assert_eq!(
            password_secrets(&c),
            [
                "app-pw",
                "mine",
                "ops",
                "orders-operator-applied",
                "orders-user-etl"
            ]
        );
        assert!(what_next(&c, &Which::Default).contains("60s"));
    }

    #[test]
    fn passwords_are_hex_of_the_random_bytes() {
        assert_eq!(new_password(&[0, 1, 0xab, 0xff]), "0001abff");
        let random = random_bytes().unwrap();
        assert_eq!(new_password(&random).len(), 64);
    }

    #[test]
    fn the_secret_patch_is_guarded_by_the_version_read() {
        assert_eq!(
            secret_patch("password", "p", Some("12")),
            json!({"stringData": {"password": "p"}, "metadata": {"resourceVersion": "12"}})
        );
        assert_eq!(
            secret_patch("k", "p", None),
            json!({"stringData": {"k": "p"}})
        );
    }

    #[test]
    fn what_next_names_the_status_to_follow() {
        let r = replication();
        assert!(what_next(&r, &Which::Default).contains("300s"));
        assert!(what_next(&r, &Which::Sentinel).contains("sentinels/default"));
        assert!(what_next(&r, &Which::Operator).contains("user operator"));
    }
}
