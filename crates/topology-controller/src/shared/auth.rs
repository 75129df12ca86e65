//! Object builders (layer 3): the password Secrets of a topology, named, built and read.
//! Two Secrets for every topology: the default user's (`spec.auth.passwordSecretRef`, or
//! `<name>-auth`) and the `operator` ACL user's (`spec.auth.operatorSecretRef`, or
//! `<name>-operator`); a ValkeyReplication's sentinels have a third, their own password
//! (`spec.sentinel.passwordSecretRef`, or `<name>-sentinel-auth`); each user of `spec.users`
//! has one too (see [`user_secret`]). The controller logs in as
//! `operator` and replication does too, so the default user's password can change without
//! breaking either. A generated Secret is created once and never rewritten: its value lives
//! in running servers.

use std::collections::BTreeMap;

use crd_types::names::{self, labels};
use crd_types::template::{Auth, SecretKeyRef};
use crd_types::users::User;
use crd_types::{ValkeyCluster, ValkeyReplication};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource, ResourceExt};

/// The key a generated Secret keeps its password under.
pub const GENERATED_KEY: &str = "password";
/// Random bytes in a generated password (hex-encoded, so 64 characters).
pub const PASSWORD_BYTES: usize = 32;

/// One of a topology's password Secrets, and whether the controller generates it (the spec
/// names no Secret of its own).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopologySecret {
    pub reference: SecretKeyRef,
    pub generated: bool,
}

/// The Secret the spec names, else the generated one of that name.
fn pick(named: Option<SecretKeyRef>, generated_name: String) -> TopologySecret {
    match named {
        Some(reference) => TopologySecret {
            reference,
            generated: false,
        },
        None => TopologySecret {
            reference: SecretKeyRef {
                name: generated_name,
                key: GENERATED_KEY.into(),
            },
            generated: true,
        },
    }
}

/// The default user's Secret and the operator user's, of the topology `name` with `auth`.
pub fn topology_secrets(name: &str, auth: Option<&Auth>) -> (TopologySecret, TopologySecret) {
    let given = auth.cloned().unwrap_or_default();
    (
        pick(
            given.password_secret_ref,
            names::generated_auth_secret_name(name),
        ),
        pick(
            given.operator_secret_ref,
            names::generated_operator_secret_name(name),
        ),
    )
}

/// A cluster's default user's Secret and operator user's.
pub fn cluster_secrets(cluster: &ValkeyCluster) -> (TopologySecret, TopologySecret) {
    topology_secrets(&cluster.name_any(), cluster.spec.common.auth.as_ref())
}

/// The password Secret of `user` of `spec.users` of the topology `name`: the one it names,
/// or `<name>-user-<user>`. Unlike the others, a generated one may be created at any time:
/// a new one is a new password, which rotates like any other change.
pub fn user_secret(name: &str, user: &User) -> TopologySecret {
    pick(
        user.password_secret_ref.clone(),
        names::generated_user_secret_name(name, &user.name),
    )
}

/// The Secret of a ValkeyReplication's sentinels' own password.
pub fn sentinel_secret(replication: &ValkeyReplication) -> TopologySecret {
    pick(
        replication.spec.sentinel.password_secret_ref.clone(),
        names::generated_sentinel_secret_name(&replication.name_any()),
    )
}

/// Both Secrets the members of topology `name` use, with the generated ones filled in.
pub fn topology_member_auth(name: &str, auth: Option<&Auth>) -> Auth {
    let (password, operator) = topology_secrets(name, auth);
    Auth {
        password_secret_ref: Some(password.reference),
        operator_secret_ref: Some(operator.reference),
        ..Default::default()
    }
}

/// Both Secrets a cluster's members use.
pub fn member_auth(cluster: &ValkeyCluster) -> Auth {
    topology_member_auth(&cluster.name_any(), cluster.spec.common.auth.as_ref())
}

/// A generated Secret holding `password`, owned by `topology` (labelled `label_key=<name>`)
/// so it goes when the topology does.
pub fn generated_secret<K: Resource<DynamicType = ()>>(
    topology: &K,
    label_key: &str,
    secret: &str,
    password: &str,
) -> Secret {
    owned_secret(topology, label_key, secret, GENERATED_KEY, password)
}

/// A Secret holding `value` under `key`, owned by `topology` (labelled `label_key=<name>`)
/// so it goes when the topology does.
pub fn owned_secret<K: Resource<DynamicType = ()>>(
    topology: &K,
    label_key: &str,
    secret: &str,
    key: &str,
    value: &str,
) -> Secret {
    let topology_name = topology.meta().name.clone().unwrap_or_default();
    Secret {
        metadata: ObjectMeta {
            name: Some(secret.to_string()),
            namespace: topology.meta().namespace.clone(),
            labels: Some(BTreeMap::from([
                (label_key.to_string(), topology_name.clone()),
                (labels::PART_OF.to_string(), topology_name),
                (
                    labels::MANAGED_BY.to_string(),
                    labels::MANAGED_BY_VALUE.to_string(),
                ),
            ])),
            owner_references: topology.controller_owner_ref(&()).map(|o| vec![o]),
            ..Default::default()
        },
        type_: Some("Opaque".into()),
        data: Some(BTreeMap::from([(
            key.to_string(),
            ByteString(value.as_bytes().to_vec()),
        )])),
        ..Default::default()
    }
}

/// Why a Secret of a name the operator gives cannot be used, or written, for a topology.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UnusableSecret {
    #[error("Secret {secret} is being deleted")]
    BeingDeleted { secret: String },
    /// Another object (an earlier topology of the same name, say) controls it.
    #[error(
        "Secret {secret} belongs to {owner_kind} {owner_name} ({owner_uid}), not this {kind}; \
         delete it or wait for it to be collected"
    )]
    ControlledByAnother {
        secret: String,
        owner_kind: String,
        owner_name: String,
        owner_uid: String,
        kind: String,
    },
    /// Nothing controls it (made by hand): read as it is, never written over.
    #[error(
        "Secret {secret} exists and is not this {kind}'s; the operator does not take it over: \
         delete or rename it"
    )]
    NotControlled { secret: String, kind: String },
}

/// Why a Secret with a generated name cannot be used by `topology`: it is being deleted, or
/// another object controls it (an earlier topology of the same name, not yet collected).
pub fn not_this_topologys<K: Resource<DynamicType = ()>>(
    secret: &Secret,
    topology: &K,
) -> Option<UnusableSecret> {
    let name = secret.name_any();
    if secret.metadata.deletion_timestamp.is_some() {
        return Some(UnusableSecret::BeingDeleted { secret: name });
    }
    let uid = topology.meta().uid.as_ref();
    let other = secret
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true) && Some(&o.uid) != uid)?;
    Some(UnusableSecret::ControlledByAnother {
        secret: name,
        owner_kind: other.kind.clone(),
        owner_name: other.name.clone(),
        owner_uid: other.uid.clone(),
        kind: K::kind(&()).into_owned(),
    })
}

/// Why the operator may not write `secret` for `topology`: it is not controlled by the
/// topology (made by hand, or another object's), or it is being deleted. Stricter than
/// [`not_this_topologys`]: a Secret the operator rewrites is never taken over, or applying
/// would make the topology its owner and the topology's deletion would delete it.
pub fn not_written_for<K: Resource<DynamicType = ()>>(
    secret: &Secret,
    topology: &K,
) -> Option<UnusableSecret> {
    if let Some(why) = not_this_topologys(secret, topology) {
        return Some(why);
    }
    let uid = topology.meta().uid.as_ref();
    let ours = secret
        .owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && Some(&o.uid) == uid);
    (!ours).then(|| UnusableSecret::NotControlled {
        secret: secret.name_any(),
        kind: K::kind(&()).into_owned(),
    })
}

/// A password from random bytes: lower-case hex, safe in any config line or shell.
pub fn password_from_random(random: &[u8]) -> String {
    random.iter().map(|b| format!("{b:02x}")).collect()
}

/// Why a password cannot be had from its Secret.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PasswordError {
    #[error("Secret {} does not exist", .0.name)]
    SecretMissing(SecretKeyRef),
    #[error("Secret {} has no key {}", .0.name, .0.key)]
    NoKey(SecretKeyRef),
    #[error("Secret {} key {} is not UTF-8", .0.name, .0.key)]
    NotUtf8(SecretKeyRef),
    #[error("Secret {} key {} is empty", .0.name, .0.key)]
    Empty(SecretKeyRef),
    /// A generated Secret gone once members run with its password: a new one would lock
    /// them out.
    #[error(
        "Secret {} does not exist but the members already run (it was deleted, or they \
         predate generated passwords); a new password would lock them out, so restore it (a \
         member container's REDISCLI_AUTH holds the default user's, its \
         VALKEY_OPERATOR_PASSWORD the operator's)",
        .0.name
    )]
    GeneratedGone(SecretKeyRef),
    #[error(transparent)]
    Unusable(#[from] UnusableSecret),
}

/// The password under `key` in `secret` (`None`: the Secret does not exist), or why there
/// is none, for status.
pub fn password_in(
    secret: Option<&Secret>,
    reference: &SecretKeyRef,
) -> Result<String, PasswordError> {
    let Some(secret) = secret else {
        return Err(PasswordError::SecretMissing(reference.clone()));
    };
    let value = secret
        .data
        .as_ref()
        .and_then(|d| d.get(&reference.key))
        .map(|v| v.0.clone())
        .or_else(|| {
            let s = secret.string_data.as_ref()?.get(&reference.key)?;
            Some(s.as_bytes().to_vec())
        })
        .ok_or_else(|| PasswordError::NoKey(reference.clone()))?;
    let password =
        String::from_utf8(value).map_err(|_| PasswordError::NotUtf8(reference.clone()))?;
    if password.is_empty() {
        return Err(PasswordError::Empty(reference.clone()));
    }
    Ok(password)
}

/// The key of `<topology>-operator-applied` listing the operator passwords rotations went
/// toward since the last settled one, one per line (passwords have no line break).
pub const ROTATING_KEY: &str = "rotating";

/// The operator passwords members hold, as topology-controller keeps them in
/// `<topology>-operator-applied`: `password`, which every member took when the last
/// rotation settled, and `rotating`, every password a rotation went toward since then
/// (a member restarted meanwhile may hold one of those alone). Never printed.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct AppliedOperator {
    pub password: String,
    pub rotating: Vec<String>,
}

impl std::fmt::Debug for AppliedOperator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "AppliedOperator(<redacted>, {} rotating)",
            self.rotating.len()
        )
    }
}

impl AppliedOperator {
    /// Read from the kept Secret; `None` without a usable `password`.
    pub fn read(secret: &Secret) -> Option<Self> {
        let key = |key: &str| SecretKeyRef {
            name: secret.name_any(),
            key: key.into(),
        };
        let password = password_in(Some(secret), &key(GENERATED_KEY)).ok()?;
        let rotating = password_in(Some(secret), &key(ROTATING_KEY))
            .map(|r| r.lines().map(str::to_string).collect())
            .unwrap_or_default();
        Some(Self { password, rotating })
    }

    /// The Secret keeping it, owned by `topology`.
    pub fn secret<K: Resource<DynamicType = ()>>(
        &self,
        topology: &K,
        label_key: &str,
        name: &str,
    ) -> Secret {
        let mut secret = generated_secret(topology, label_key, name, &self.password);
        if let Some(data) = secret.data.as_mut() {
            let rotating = self.rotating.join("\n");
            data.insert(ROTATING_KEY.into(), ByteString(rotating.into_bytes()));
        }
        secret
    }

    /// Whether members are settled on `wanted` (the Secret's): no pass is needed.
    pub fn settled_on(&self, wanted: &str) -> bool {
        self.password == wanted && self.rotating.is_empty()
    }

    /// What to keep before a rotation toward `wanted` adds it anywhere, if that changes
    /// anything: from then on a member may hold it alone.
    pub fn toward(&self, wanted: &str) -> Option<Self> {
        if self.password == wanted || self.rotating.iter().any(|r| r == wanted) {
            return None;
        }
        let mut next = self.clone();
        next.rotating.push(wanted.to_string());
        Some(next)
    }

    /// The passwords to log in with where a member refuses `wanted`, kept first.
    pub fn fallbacks(&self, wanted: &str) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for p in std::iter::once(&self.password).chain(&self.rotating) {
            if p != wanted && !out.contains(p) {
                out.push(p.clone());
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crd_types::ValkeyClusterSpec;
    use crd_types::topology::TopologySpec;

    /// The Secrets the controller must create when absent: those the spec does not name.
    fn generated_secret_names(cluster: &ValkeyCluster) -> Vec<String> {
        let (password, operator) = cluster_secrets(cluster);
        [password, operator]
            .into_iter()
            .filter(|s| s.generated)
            .map(|s| s.reference.name)
            .collect()
    }

    #[test]
    fn the_kept_operator_passwords_name_every_login_a_member_may_hold() {
        let kept = AppliedOperator {
            password: "a".into(),
            rotating: Vec::new(),
        };
        assert!(kept.settled_on("a") && !kept.settled_on("b"));
        assert_eq!(kept.toward("a"), None);
        let toward_b = kept.toward("b").unwrap();
        assert_eq!(toward_b.rotating, ["b"]);
        assert!(!toward_b.settled_on("a"), "a -> b -> a is not settled");
        assert_eq!(toward_b.toward("b"), None);
        let toward_c = toward_b.toward("c").unwrap();
        assert_eq!(toward_c.fallbacks("c"), ["a", "b"]);
        assert_eq!(toward_c.fallbacks("a"), ["b", "c"]);
        // Through the Secret and back.
        let secret = toward_c.secret(
            &cluster(None),
            "valkey.rs/cluster",
            "orders-operator-applied",
        );
        assert_eq!(AppliedOperator::read(&secret), Some(toward_c));
        let settled = kept.secret(
            &cluster(None),
            "valkey.rs/cluster",
            "orders-operator-applied",
        );
        assert_eq!(AppliedOperator::read(&settled), Some(kept));
        assert_eq!(
            format!("{:?}", toward_b),
            "AppliedOperator(<redacted>, 1 rotating)"
        );
    }

    fn cluster(auth: Option<Auth>) -> ValkeyCluster {
        let mut c = ValkeyCluster::new(
            "orders",
            ValkeyClusterSpec {
                shards: 3,
                common: TopologySpec {
                    auth,
                    ..Default::default()
                },
                ..Default::default()
            },
        );
        c.metadata.namespace = Some("prod".into());
        c.metadata.uid = Some("uid-orders".into());
        c
    }

    fn secret_ref(name: &str, key: &str) -> SecretKeyRef {
        SecretKeyRef {
            name: name.into(),
            key: key.into(),
        }
    }

    #[test]
    fn without_auth_both_secrets_are_generated() {
        let c = cluster(None);
        assert_eq!(
            member_auth(&c),
            Auth {
                password_secret_ref: Some(secret_ref("orders-auth", "password")),
                operator_secret_ref: Some(secret_ref("orders-operator", "password")),
                ..Default::default()
            }
        );
        assert_eq!(
            generated_secret_names(&c),
            ["orders-auth", "orders-operator"]
        );
    }

    #[test]
    fn named_secrets_are_used_and_never_generated() {
        let c = cluster(Some(Auth {
            password_secret_ref: Some(secret_ref("app-pass", "pw")),
            operator_secret_ref: None,
            ..Default::default()
        }));
        let auth = member_auth(&c);
        assert_eq!(auth.password_secret_ref, Some(secret_ref("app-pass", "pw")));
        assert_eq!(generated_secret_names(&c), ["orders-operator"]);
        let c = cluster(Some(Auth {
            password_secret_ref: Some(secret_ref("a", "p")),
            operator_secret_ref: Some(secret_ref("o", "p")),
            ..Default::default()
        }));
        assert!(generated_secret_names(&c).is_empty());
    }

    #[test]
    fn a_generated_secret_is_owned_by_the_cluster() {
        let s = generated_secret(&cluster(None), labels::CLUSTER, "orders-operator", "abc");
        assert_eq!(s.metadata.namespace.as_deref(), Some("prod"));
        let owner = &s.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("ValkeyCluster", "uid-orders")
        );
        assert_eq!(s.data.as_ref().unwrap()["password"].0, b"abc");
        assert_eq!(
            s.metadata.labels.as_ref().unwrap()[labels::CLUSTER],
            "orders"
        );
    }

    #[test]
    fn a_secret_of_another_or_a_dying_cluster_is_not_used() {
        let c = cluster(None);
        let mine = generated_secret(&c, labels::CLUSTER, "orders-auth", "p");
        assert_eq!(not_this_topologys(&mine, &c), None);
        let mut older = cluster(None);
        older.metadata.uid = Some("uid-old".into());
        let theirs = generated_secret(&older, labels::CLUSTER, "orders-auth", "p");
        let why = not_this_topologys(&theirs, &c).unwrap();
        assert!(
            matches!(&why, UnusableSecret::ControlledByAnother { owner_uid, .. } if owner_uid == "uid-old"),
            "{why}"
        );
        assert!(
            why.to_string()
                .contains("belongs to ValkeyCluster orders (uid-old)")
        );
        // A Secret someone made by hand (no owner) is used as it is, never rewritten.
        let mut hand_made = mine.clone();
        hand_made.metadata.owner_references = None;
        assert_eq!(not_this_topologys(&hand_made, &c), None);
        assert_eq!(not_written_for(&mine, &c), None);
        let taken = not_written_for(&hand_made, &c).unwrap();
        assert!(
            matches!(&taken, UnusableSecret::NotControlled { .. }),
            "{taken}"
        );
        assert!(
            taken.to_string().contains("is not this ValkeyCluster's"),
            "{taken}"
        );
        assert_eq!(not_written_for(&theirs, &c), Some(why));
        let mut dying = mine;
        dying.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::from_second(1).unwrap(),
            ));
        let why = not_this_topologys(&dying, &c).unwrap();
        assert!(matches!(why, UnusableSecret::BeingDeleted { .. }), "{why}");
        assert!(why.to_string().contains("being deleted"));
    }

    #[test]
    fn a_replication_has_a_third_secret_for_its_sentinels() {
        let mut r = ValkeyReplication::new("sessions", Default::default());
        assert_eq!(
            sentinel_secret(&r),
            TopologySecret {
                reference: secret_ref("sessions-sentinel-auth", "password"),
                generated: true,
            }
        );
        r.spec.sentinel.password_secret_ref = Some(secret_ref("mine", "pw"));
        assert!(!sentinel_secret(&r).generated);
        let auth = topology_member_auth("sessions", None);
        assert_eq!(
            auth.operator_secret_ref,
            Some(secret_ref("sessions-operator", "password"))
        );
    }

    #[test]
    fn passwords_are_hex_of_the_random_bytes() {
        assert_eq!(password_from_random(&[0, 15, 255]), "000fff");
        assert_eq!(password_from_random(&[7; PASSWORD_BYTES]).len(), 64);
    }

    #[test]
    fn a_password_is_read_or_explained() {
        let r = secret_ref("app", "pw");
        let why = password_in(None, &r).unwrap_err();
        assert_eq!(why, PasswordError::SecretMissing(r.clone()));
        assert_eq!(why.to_string(), "Secret app does not exist");
        let mut s = Secret::default();
        let why = password_in(Some(&s), &r).unwrap_err();
        assert_eq!(why, PasswordError::NoKey(r.clone()));
        assert_eq!(why.to_string(), "Secret app has no key pw");
        s.data = Some(BTreeMap::from([("pw".into(), ByteString(vec![]))]));
        let why = password_in(Some(&s), &r).unwrap_err();
        assert_eq!(why, PasswordError::Empty(r.clone()));
        assert_eq!(why.to_string(), "Secret app key pw is empty");
        s.data = Some(BTreeMap::from([("pw".into(), ByteString(b"x y".to_vec()))]));
        assert_eq!(password_in(Some(&s), &r).unwrap(), "x y");
    }
}
