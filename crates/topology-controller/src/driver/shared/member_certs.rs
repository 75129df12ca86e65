//! `spec.tls` without a Secret: topology-controller keeps a CA per topology and issues each
//! member its own certificate (see [`topology_controller::shared::issuer`]).
//!
//! - `<topology>-ca-key` holds the CA (`ca.crt`, `ca.key`) and the certificate the operator
//!   presents (`tls.crt`, `tls.key`). It is created only while the topology has no member:
//!   running members trust the CA they started with, so a new one would cut them off; a
//!   deleted one is reported instead. Members are not created while there is none.
//! - `<topology>-ca` holds `ca.crt` alone, for applications to trust: readable without
//!   the key.
//! - `<member>-tls` (cert-manager's layout) is written once the member's Service has its
//!   ClusterIP, and again when its certificate is due for renewal, names another address,
//!   or the Secret is damaged. Its pod waits for it to mount; a renewed one is loaded like
//!   a user's ([`crate::driver::shared::member_tls::reload`]). One member's trouble is reported and the
//!   others go on.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::time::SystemTime;

use crd_types::ValkeyNode;
use crd_types::names::{self, annotations, labels};
use crd_types::node::Mode;
use crd_types::rotation::CaReplacement;
use crd_types::template::{TLS_CA_KEY, TLS_CERT_KEY, TLS_KEY_KEY};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::ObjectMeta;
use kube::{Resource, ResourceExt};
use operator_runtime::{ApiResultExt, ObjectName, Op};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use topology_controller::shared::auth;
use topology_controller::shared::ca_replacement::{
    self, Cas, NEXT_CA_CERT_KEY, NEXT_CA_KEY_KEY, Next, PHASE_ANNOTATION, Phase,
};
use topology_controller::shared::cert_expiry::{self, Expiry};
use topology_controller::shared::issuer::{
    Authority, Held, IssueError, Leaf, Request, SecretOwner, Verdict, member_secret_owner,
};
use topology_controller::shared::tls::{self, Client, TlsFiles, Wanted};

use crate::driver::shared::error::Error;
use crate::driver::shared::secret_store::SecretStore;

mod errors;
#[cfg(test)]
mod tests;

pub use errors::{CaSecretProblem, CaUnusable, NotOwned, SecretNotWritten};

/// The CA's key in `<topology>-ca-key` (its certificate is `ca.crt`).
const CA_KEY_KEY: &str = "ca.key";

/// What [`prepare`] did and found.
pub struct Prepared {
    /// The client side of the operator's connections, or why there is none.
    pub client: Result<Client, CaUnusable>,
    /// Certificates issued at this reconcile: `<member>: <why>`.
    pub issued: Vec<String>,
    /// Members (or the public CA Secret) the operator could not write, and why: a member
    /// waits (its pod cannot start without its Secret), the others go on.
    pub refused: Vec<String>,
    /// When the first of the members' certificates (or the CA) expires; `None` without a
    /// usable CA.
    pub expiry: Option<Expiry>,
}

/// The topology's CA (created while it has no member), the members' certificates (issued
/// or renewed as needed), and the client the operator connects with: its own certificate,
/// trusting the CA, wanting each member to serve the certificate of its Secret.
pub async fn prepare<S, K>(
    secrets: &S,
    topology: &K,
    label_key: &str,
    members: &[ValkeyNode],
    client_auth: bool,
    overlap: std::time::Duration,
    field_manager: &str,
) -> Result<Prepared, Error>
where
    S: SecretStore,
    K: Resource<DynamicType = ()> + Debug,
{
    let now = SystemTime::now();
    let mut issued = Vec::new();
    let mut refused = Vec::new();
    let members_exist = !members.is_empty();
    let ca = authority(
        secrets,
        topology,
        label_key,
        members_exist,
        field_manager,
        now,
    )
    .await?;
    let (cas, operator) = match ca {
        Ok((cas, operator, why)) => {
            issued.extend(why);
            (cas, operator)
        }
        Err(why) => {
            return Ok(Prepared {
                client: Err(why),
                issued,
                refused,
                expiry: None,
            });
        }
    };
    let public = publish_ca(secrets, topology, label_key, &cas, field_manager);
    refused.extend(public.await.err().map(|why| why.to_string()));
    let mut wanted = BTreeMap::new();
    for node in members {
        let name = node.name_any();
        match member(secrets, &cas, node, field_manager, now).await {
            Ok((cert, why)) => {
                wanted.extend(cert.map(|c| (name.clone(), c)));
                issued.extend(why.map(|w| format!("{name}: {w}")));
            }
            Err(why) => refused.push(format!("{name}: {why}")),
        }
    }
    // As written at this reconcile: a member that has not loaded a renewed one yet serves
    // an older certificate until its reload.
    let served = wanted
        .values()
        .filter_map(|cert| cert_expiry::der_not_after(cert));
    let expiry = cert_expiry::earliest(served, Some(cas.current.not_after()), true);
    let files = TlsFiles {
        ca: cas.trusted().into_bytes(),
        cert: operator.cert_pem.into_bytes(),
        key: operator.key_pem.into_bytes(),
    };
    let secret = names::topology_ca_key_secret_name(&topology.name_any());
    let client = tls::client(&files, client_auth)
        .map(|client| Client {
            wanted: Wanted::PerMember(wanted),
            replacement: cas.replacement(overlap),
            ..client
        })
        .map_err(|source| CaUnusable::OperatorCertificateUnusable { secret, source });
    Ok(Prepared {
        client,
        issued,
        refused,
        expiry,
    })
}

type Ca = (Cas, Leaf, Option<String>);

/// The CAs and the operator's certificate from `<topology>-ca-key` (a replacement started
/// and the certificate renewed when due; `Some` says what was done), or why they cannot be
/// used.
async fn authority<S, K>(
    secrets: &S,
    topology: &K,
    label_key: &str,
    members_exist: bool,
    field_manager: &str,
    now: SystemTime,
) -> Result<Result<Ca, CaUnusable>, Error>
where
    S: SecretStore,
    K: Resource<DynamicType = ()> + Debug,
{
    let name = names::topology_ca_key_secret_name(&topology.name_any());
    let secret = match ca_secret(secrets, topology, label_key, members_exist, now).await? {
        Ok(secret) => secret,
        Err(why) => return Ok(Err(why)),
    };
    let current = match current_ca(&secret) {
        Ok(current) => current,
        Err(problem) => {
            return Ok(Err(CaUnusable::Content {
                secret: name,
                problem,
            }));
        }
    };
    let mut done = Vec::new();
    let replacing = next_authority(secrets, topology, secret, &current, field_manager, now);
    let (next, secret) = match replacing.await? {
        Ok((next, secret, started)) => {
            done.extend(started);
            (next, secret)
        }
        Err(why) => return Ok(Err(why)),
    };
    let cas = Cas { current, next };
    let own = operator_certificate(secrets, topology, &cas, &secret, field_manager, now);
    let leaf = match own.await? {
        Ok((leaf, renewed)) => {
            done.extend(renewed);
            leaf
        }
        Err(why) => return Ok(Err(why)),
    };
    Ok(Ok((cas, leaf, (!done.is_empty()).then(|| done.join("; ")))))
}

/// `<topology>-ca-key`, created with a new CA while the topology has no member (if another
/// writer created it first, theirs is the CA); or why it cannot be used: gone while members
/// run, or not this topology's.
async fn ca_secret<S, K>(
    secrets: &S,
    topology: &K,
    label_key: &str,
    members_exist: bool,
    now: SystemTime,
) -> Result<Result<Secret, CaUnusable>, Error>
where
    S: SecretStore,
    K: Resource<DynamicType = ()> + Debug,
{
    let namespace = topology.namespace().unwrap_or_default();
    let name = names::topology_ca_key_secret_name(&topology.name_any());
    let object = || ObjectName::new::<Secret>(&namespace, &name);
    let mut secret = secrets.get_opt(&name).await.on(Op::Read, object())?;
    if secret.is_none() {
        if members_exist {
            return Ok(Err(CaUnusable::GoneWhileMembersRun { secret: name }));
        }
        let made = match new_ca_secret(topology, label_key, &name, now) {
            Ok(made) => made,
            Err(why) => return Ok(Err(CaUnusable::NotGenerated(why))),
        };
        // Another writer (a previous leader) created it first: theirs is the CA.
        secret = match secrets.create(&made).await {
            Err(kube::Error::Api(e)) if e.code == 409 => {
                secrets.get_opt(&name).await.on(Op::Read, object())?
            }
            created => {
                let created = created.on(Op::Create, object())?;
                tracing::info!(topology = %topology.name_any(), secret = %name, "generated a CA");
                Some(created)
            }
        };
    }
    let Some(secret) = secret else {
        return Ok(Err(CaUnusable::Missing { secret: name }));
    };
    if let Some(why) = not_owned_by(&secret, topology) {
        return Ok(Err(why.into()));
    }
    Ok(Ok(secret))
}

/// The CA `<topology>-ca-key` holds, or why it cannot be used.
fn current_ca(secret: &Secret) -> Result<Authority, CaSecretProblem> {
    match (value(secret, TLS_CA_KEY), value(secret, CA_KEY_KEY)) {
        (Some(cert), Some(key)) => {
            Authority::from_pem(&cert, &key).map_err(CaSecretProblem::Current)
        }
        _ => Err(CaSecretProblem::Incomplete),
    }
}

/// The next CA, `secret` as it is after it, and what was started (`Some` when a replacement
/// starts now).
type Replacing = (Option<Next>, Secret, Option<String>);

/// The CA replacing `current`, if any: the one `secret` holds, or a new one when a
/// replacement is due (asked for, or `current` nears its end), kept in `secret` first; or
/// why the one held cannot be used.
async fn next_authority<S, K>(
    secrets: &S,
    topology: &K,
    secret: Secret,
    current: &Authority,
    field_manager: &str,
    now: SystemTime,
) -> Result<Result<Replacing, CaUnusable>, Error>
where
    S: SecretStore,
    K: Resource<DynamicType = ()> + Debug,
{
    let namespace = topology.namespace().unwrap_or_default();
    let name = names::topology_ca_key_secret_name(&topology.name_any());
    match next_ca(&secret) {
        Some(Ok(next)) => return Ok(Ok((Some(next), secret, None))),
        Some(Err(problem)) => {
            return Ok(Err(CaUnusable::Content {
                secret: name,
                problem,
            }));
        }
        None => {}
    }
    let requested = topology.annotations().get(annotations::REPLACE_CA);
    let answered = secret.annotations().get(annotations::REPLACE_CA);
    let due = ca_replacement::due(
        requested.map(String::as_str),
        answered.map(String::as_str),
        current,
        now,
    );
    let Some(why) = due else {
        return Ok(Ok((None, secret, None)));
    };
    let made = match Authority::generate(&namespace, &topology.name_any(), now) {
        Ok(made) => made,
        Err(e) => return Ok(Err(CaUnusable::NextNotGenerated(e))),
    };
    let (next, written) = start_replacement(secrets, made, &secret, requested, field_manager)
        .await
        .on(Op::Apply, ObjectName::new::<Secret>(&namespace, &name))?;
    tracing::info!(topology = %topology.name_any(), %why, "replacing the CA");
    let started = format!(
        "replacing the CA ({why}): {TLS_CA_KEY} of {} holds both",
        names::topology_ca_secret_name(&topology.name_any())
    );
    Ok(Ok((Some(next), written, Some(started))))
}

/// The certificate the operator presents, from `secret` (`<topology>-ca-key`): issued again
/// and written there when due (`Some` says why), or why it cannot be had.
async fn operator_certificate<S, K>(
    secrets: &S,
    topology: &K,
    cas: &Cas,
    secret: &Secret,
    field_manager: &str,
    now: SystemTime,
) -> Result<Result<(Leaf, Option<String>), CaUnusable>, Error>
where
    S: SecretStore,
    K: Resource<DynamicType = ()> + Debug,
{
    let namespace = topology.namespace().unwrap_or_default();
    let name = names::topology_ca_key_secret_name(&topology.name_any());
    let request = Request::operator(&topology.name_any());
    let (cert, key) = (value(secret, TLS_CERT_KEY), value(secret, TLS_KEY_KEY));
    let trusted = cas.trusted();
    // The operator's certificate is judged like a member's whose ca.crt is right: it lives
    // beside the CA, not with a copy of it.
    let held = Held {
        cert: cert.as_deref(),
        key: key.as_deref(),
        ca: Some(&trusted),
    };
    let unusable = |problem| CaUnusable::Content {
        secret: name.clone(),
        problem,
    };
    let why = match cas.judge(&held, &request, now) {
        Verdict::Keep => {
            let leaf = Leaf {
                cert_pem: cert.unwrap_or_default(),
                key_pem: key.unwrap_or_default(),
            };
            return Ok(Ok((leaf, None)));
        }
        Verdict::Refuse(why) => {
            return Ok(Err(unusable(CaSecretProblem::OperatorCertificateForeign(
                why,
            ))));
        }
        Verdict::Issue(why) => why,
    };
    let leaf = match cas.issuing().issue(&request, now) {
        Ok(leaf) => leaf,
        Err(e) => {
            return Ok(Err(unusable(
                CaSecretProblem::OperatorCertificateNotIssued(e),
            )));
        }
    };
    let data = [(TLS_CERT_KEY, &leaf.cert_pem), (TLS_KEY_KEY, &leaf.key_pem)];
    patch_data(secrets, secret, &data, &[], field_manager)
        .await
        .on(Op::Apply, ObjectName::new::<Secret>(&namespace, &name))?;
    Ok(Ok((
        leaf,
        Some(format!("the operator's own certificate: {why}")),
    )))
}

/// The next CA `<topology>-ca-key` holds during a replacement, if any, or why it cannot be
/// used.
fn next_ca(secret: &Secret) -> Option<Result<Next, CaSecretProblem>> {
    let cert = value(secret, NEXT_CA_CERT_KEY);
    let key = value(secret, NEXT_CA_KEY_KEY);
    if cert.is_none() && key.is_none() {
        return None;
    }
    let (Some(cert), Some(key)) = (cert, key) else {
        return Some(Err(CaSecretProblem::NextIncomplete));
    };
    let phase = ca_replacement::phase_from_annotation(
        secret
            .annotations()
            .get(PHASE_ANNOTATION)
            .map(|s| s.as_str()),
    );
    Some(
        Authority::from_pem(&cert, &key)
            .map(|authority| Next { authority, phase })
            .map_err(CaSecretProblem::Next),
    )
}

/// Keeps `authority` in `<topology>-ca-key` as the next CA, with the value of the topology's
/// `valkey.rs/replace-ca` it answers (only if the Secret is still the version read: two
/// leaders cannot both start one).
async fn start_replacement<S: SecretStore>(
    secrets: &S,
    authority: Authority,
    secret: &Secret,
    requested: Option<&String>,
    field_manager: &str,
) -> Result<(Next, Secret), kube::Error> {
    let patch = serde_json::json!({
        "metadata": {
            "resourceVersion": secret.resource_version(),
            "annotations": {
                annotations::REPLACE_CA: requested,
                PHASE_ANNOTATION: null,
            },
        },
        "data": {
            NEXT_CA_CERT_KEY: bytes(&authority.cert_pem),
            NEXT_CA_KEY_KEY: bytes(&authority.key_pem),
        },
    });
    let written = secrets
        .merge_patch(&secret.name_any(), &patch, field_manager)
        .await?;
    let next = Next {
        authority,
        phase: Phase::Trusting,
    };
    Ok((next, written))
}

/// What [`advance`] did, and what the topology's status says of the replacement after it.
#[derive(Default)]
pub struct Advanced {
    /// The step taken, for an Event.
    pub done: Option<String>,
    pub status: Option<CaReplacement>,
}

/// Takes the replacement's next step, if it may: what members served to `client` at this
/// reconcile (`members`: every member's name and the address it was dialled at, `None` when
/// not reached) decides.
pub async fn advance<S, K>(
    secrets: &S,
    topology: &K,
    client: &Client,
    members: &[(&str, Option<&str>)],
    field_manager: &str,
) -> Result<Advanced, kube::Error>
where
    S: SecretStore,
    K: Resource<DynamicType = ()>,
{
    let Some(replacement) = client.replacement.as_ref() else {
        return Ok(Advanced::default());
    };
    let states: Vec<ca_replacement::MemberCa<'_>> = members
        .iter()
        .map(|(name, address)| ca_replacement::MemberCa {
            name,
            secret_done: client.wanted.of(name).is_some(),
            serving: address.and_then(|a| tls::serves_wanted(client, name, a)),
        })
        .collect();
    let step = ca_replacement::step(replacement, &states, SystemTime::now());
    let topology_name = topology.name_any();
    let name = names::topology_ca_key_secret_name(&topology_name);
    // The Secret changed since it was read: the phase stays as it was until the next look.
    let unchanged = || Advanced {
        done: None,
        status: ca_replacement::status(
            replacement,
            &ca_replacement::Step::Wait(
                "the CA Secret changed meanwhile; judged again at the next look".into(),
            ),
        ),
    };
    let secret = match &step {
        // At each look (every 10 s) for as long as the overlap lasts: not for the info log.
        ca_replacement::Step::Wait(why) => {
            tracing::debug!(topology = %topology_name, %why, "replacing the CA");
            return Ok(Advanced {
                done: None,
                status: ca_replacement::status(replacement, &step),
            });
        }
        _ => secrets.get(&name).await?,
    };
    // Written only to the Secret that still holds the next CA this step was judged on.
    if value(&secret, NEXT_CA_CERT_KEY).as_deref() != Some(replacement.next_cert_pem.as_str()) {
        return Ok(unchanged());
    }
    let version = secret.resource_version();
    let (patch, done) = match &step {
        ca_replacement::Step::Wait(_) => return Ok(unchanged()),
        ca_replacement::Step::Switch => (
            serde_json::json!({
                "metadata": {
                    "resourceVersion": version,
                    "annotations": {PHASE_ANNOTATION: ca_replacement::SWITCHING},
                },
            }),
            "every member trusts both CAs: members are issued certificates of the next one",
        ),
        ca_replacement::Step::Promote => {
            let Some(key) = value(&secret, NEXT_CA_KEY_KEY) else {
                return Ok(unchanged());
            };
            let patch = serde_json::json!({
                "metadata": {
                    "resourceVersion": version,
                    "annotations": {PHASE_ANNOTATION: null},
                },
                "data": {
                    TLS_CA_KEY: bytes(&replacement.next_cert_pem),
                    CA_KEY_KEY: bytes(&key),
                    NEXT_CA_CERT_KEY: null,
                    NEXT_CA_KEY_KEY: null,
                },
            });
            let done = "every member serves a certificate of the next CA: it is now the CA, \
                        and the previous one is trusted no more";
            (patch, done)
        }
    };
    secrets.merge_patch(&name, &patch, field_manager).await?;
    tracing::info!(topology = %topology_name, done, "replacing the CA");
    Ok(Advanced {
        done: Some(done.to_string()),
        status: ca_replacement::status(replacement, &step),
    })
}

/// Why `secret`, of a name the operator gives a topology's CA, is not `topology`'s to use.
fn not_owned_by<K: Resource<DynamicType = ()>>(secret: &Secret, topology: &K) -> Option<NotOwned> {
    if let Some(why) = auth::not_this_topologys(secret, topology) {
        return Some(why.into());
    }
    let uid = topology.meta().uid.as_ref();
    let owned = secret
        .owner_references()
        .iter()
        .any(|o| Some(&o.uid) == uid);
    (!owned).then(|| NotOwned::NotOwnedByTopology {
        secret: secret.name_any(),
    })
}

/// A new CA for `topology`, with the operator's certificate, as its Secret.
fn new_ca_secret<K: Resource<DynamicType = ()>>(
    topology: &K,
    label_key: &str,
    name: &str,
    now: SystemTime,
) -> Result<Secret, IssueError> {
    let namespace = topology.meta().namespace.clone().unwrap_or_default();
    let topology_name = topology.meta().name.clone().unwrap_or_default();
    let authority = Authority::generate(&namespace, &topology_name, now)?;
    let operator = authority.issue(&Request::operator(&topology_name), now)?;
    let mut secret = auth::owned_secret(topology, label_key, name, TLS_CA_KEY, &authority.cert_pem);
    // A replacement asked for before the CA existed is answered by this one.
    if let Some(asked) = topology
        .meta()
        .annotations
        .as_ref()
        .and_then(|a| a.get(annotations::REPLACE_CA))
    {
        (secret
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new))
        .insert(annotations::REPLACE_CA.into(), asked.clone());
    }
    let data = secret.data.get_or_insert_with(BTreeMap::new);
    data.insert(CA_KEY_KEY.into(), bytes(&authority.key_pem));
    data.insert(TLS_CERT_KEY.into(), bytes(&operator.cert_pem));
    data.insert(TLS_KEY_KEY.into(), bytes(&operator.key_pem));
    Ok(secret)
}

/// Keeps `<topology>-ca` holding what members trust alone (both CAs during a replacement);
/// or says why it cannot.
async fn publish_ca<S, K>(
    secrets: &S,
    topology: &K,
    label_key: &str,
    cas: &Cas,
    field_manager: &str,
) -> Result<(), SecretNotWritten>
where
    S: SecretStore,
    K: Resource<DynamicType = ()> + Debug,
{
    let trusted = cas.trusted();
    let name = names::topology_ca_secret_name(&topology.name_any());
    let failed = |source| SecretNotWritten::Api {
        secret: name.clone(),
        source,
    };
    let Some(secret) = secrets.get_opt(&name).await.map_err(failed)? else {
        let made = auth::owned_secret(topology, label_key, &name, TLS_CA_KEY, &trusted);
        return match secrets.create(&made).await {
            // Created meanwhile: looked at again at the next reconcile.
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
            other => other.map(drop).map_err(failed),
        };
    };
    if let Some(why) = not_owned_by(&secret, topology) {
        return Err(why.into());
    }
    let only_the_ca = secret.data.as_ref().is_some_and(|d| d.len() == 1)
        && value(&secret, TLS_CA_KEY).as_deref() == Some(trusted.as_str());
    if only_the_ca {
        return Ok(());
    }
    let data = [(TLS_CA_KEY, &trusted)];
    let others: Vec<&str> = (secret.data.iter().flatten())
        .map(|(k, _)| k.as_str())
        .filter(|k| *k != TLS_CA_KEY)
        .collect();
    patch_data(secrets, &secret, &data, &others, field_manager)
        .await
        .map(drop)
        .map_err(failed)
}

/// Sets `set` and removes `remove` in `secret`'s data, only if it is still the version read:
/// two leaders cannot both write it.
async fn patch_data<S: SecretStore>(
    secrets: &S,
    secret: &Secret,
    set: &[(&str, &String)],
    remove: &[&str],
    field_manager: &str,
) -> Result<Secret, kube::Error> {
    let mut data = serde_json::Map::new();
    for (key, value) in set {
        let value = serde_json::to_value(bytes(value)).map_err(kube::Error::SerdeError)?;
        data.insert(key.to_string(), value);
    }
    for key in remove {
        data.insert(key.to_string(), serde_json::Value::Null);
    }
    let patch = serde_json::json!({
        "metadata": {"resourceVersion": secret.resource_version()},
        "data": data,
    });
    secrets
        .merge_patch(&secret.name_any(), &patch, field_manager)
        .await
}

type Issued = (Option<CertificateDer<'static>>, Option<String>);

/// Member `node`'s certificate: the one its Secret holds (written first if it needed to be
/// issued; `Some` says why), `None` while its Service has no ClusterIP; or why its Secret
/// cannot be had.
async fn member<S: SecretStore>(
    secrets: &S,
    cas: &Cas,
    node: &ValkeyNode,
    field_manager: &str,
    now: SystemTime,
) -> Result<Issued, SecretNotWritten> {
    let Some(tls) = node.spec.tls.as_ref() else {
        return Ok((None, None));
    };
    let name = &tls.secret_name;
    let namespace = node.namespace().unwrap_or_default();
    let endpoint = node.status.as_ref().and_then(|s| s.endpoint.as_ref());
    let service = endpoint.and_then(|e| e.service_name.as_deref());
    let cluster_ip = endpoint.and_then(|e| e.cluster_ip.as_deref());
    let (Some(service), Some(cluster_ip)) = (service, cluster_ip) else {
        return Ok((None, None));
    };
    let request = Request::member(service, &namespace, cluster_ip, &shared_services(node))?;
    let failed = |source| SecretNotWritten::Api {
        secret: name.clone(),
        source,
    };
    let secret = secrets.get_opt(name).await.map_err(failed)?;
    let uid = node.meta().uid.clone().unwrap_or_default();
    let owner = secret
        .as_ref()
        .map(|s| member_secret_owner(s.owner_references(), &node.name_any(), &uid));
    match owner {
        None | Some(SecretOwner::Member) => {}
        Some(SecretOwner::EarlierMember) => {
            return Err(SecretNotWritten::EarlierMembers {
                secret: name.clone(),
            });
        }
        Some(SecretOwner::Other) => {
            return Err(SecretNotWritten::NotTheMembers {
                secret: name.clone(),
            });
        }
    }
    let (cert, key, ca) = match &secret {
        Some(s) => (
            value(s, TLS_CERT_KEY),
            value(s, TLS_KEY_KEY),
            value(s, TLS_CA_KEY),
        ),
        None => (None, None, None),
    };
    let held = Held {
        cert: cert.as_deref(),
        key: key.as_deref(),
        ca: ca.as_deref(),
    };
    let (cert_pem, why) = match cas.judge(&held, &request, now) {
        Verdict::Keep => (cert.unwrap_or_default(), None),
        Verdict::Refuse(why) => return Err(why.into()),
        Verdict::Issue(why) => {
            let leaf = cas.issuing().issue(&request, now)?;
            let trusted = cas.trusted();
            let data = [
                (TLS_CA_KEY, &trusted),
                (TLS_CERT_KEY, &leaf.cert_pem),
                (TLS_KEY_KEY, &leaf.key_pem),
            ];
            match &secret {
                // Created, never applied over: a Secret made meanwhile by someone else is
                // not taken over (409: looked at again at the next reconcile).
                None => {
                    let built = member_secret(node, name, &data);
                    secrets.create(&built).await.map_err(failed)?;
                }
                Some(s) => {
                    patch_data(secrets, s, &data, &[], field_manager)
                        .await
                        .map_err(failed)?;
                }
            }
            let why = match secret {
                None => "a new member".to_string(),
                Some(_) => why,
            };
            (leaf.cert_pem, Some(why))
        }
    };
    let cert = CertificateDer::from_pem_slice(cert_pem.as_bytes()).ok();
    Ok((cert, why))
}

/// The topology's client Services that may lead to `node`: a group's read-write and
/// read-only Services for a data node (its role changes), its sentinel Service for a
/// sentinel. A cluster's clients follow redirections to each member's own address.
fn shared_services(node: &ValkeyNode) -> Vec<String> {
    let Some(group) = node.labels().get(labels::REPLICATION) else {
        return Vec::new();
    };
    match node.spec.mode {
        Mode::Sentinel => vec![names::sentinel_service_name(group)],
        _ => vec![
            names::primary_service_name(group),
            names::replicas_service_name(group),
        ],
    }
}

/// Member `node`'s Secret, in cert-manager's layout; deleted with the member.
fn member_secret(node: &ValkeyNode, name: &str, data: &[(&str, &String)]) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: node.namespace(),
            labels: Some(BTreeMap::from([
                (
                    labels::MANAGED_BY.to_string(),
                    labels::MANAGED_BY_VALUE.to_string(),
                ),
                (labels::NODE.to_string(), node.name_any()),
            ])),
            owner_references: node.owner_ref(&()).map(|o| vec![o]),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), bytes(v)))
                .collect(),
        ),
        ..Default::default()
    }
}

fn value(secret: &Secret, key: &str) -> Option<String> {
    let v = secret.data.as_ref()?.get(key)?;
    String::from_utf8(v.0.clone())
        .ok()
        .filter(|s| !s.is_empty())
}

fn bytes(text: &str) -> ByteString {
    ByteString(text.as_bytes().to_vec())
}
