//! `spec.tls` for one topology (see [`topology_controller::shared::tls`]): reads the Secret the
//! members serve into the client side of the operator's connections, and has members load
//! it again once it is renewed. The kubelet replaces the mounted files up to a minute after
//! the Secret changes; Valkey reads them only when a TLS directive is set, so a member still
//! serving another certificate is told `CONFIG SET tls-cert-file` (the same path: every
//! TLS file is read again) until a new handshake shows the Secret's certificate.

use std::fmt::Debug;

use crd_types::ValkeyNode;
use crd_types::rotation::CaReplacement;
use crd_types::template::{OPERATOR_USER, TLS_CERT_KEY, TLS_DIR, TlsAuthClients, TopologyTls};
use k8s_openapi::api::core::v1::{ObjectReference, Pod, Secret};
use kube::api::EvictParams;
use kube::{Api, Resource, ResourceExt};
use operator_runtime::{ApiResultExt, Context, EventReason, ObjectName, Op};
use topology_controller::shared::auth::{AppliedOperator, PasswordError};
use topology_controller::shared::ca_replacement;
use topology_controller::shared::cert_expiry::{self, Expiry};
use topology_controller::shared::commands::Server;
use topology_controller::shared::connections::Connections;
use topology_controller::shared::tls::{self, Client, FilesError, SecretError};

use crate::driver::shared::error::Error;
use crate::driver::shared::member_certs::{self, CaUnusable};
use crate::driver::shared::valkey::{Conn, Login};

/// The topology whose `spec.tls` [`read`] reads.
pub struct Reading<'a, K> {
    pub topology: &'a K,
    pub spec: Option<&'a TopologyTls>,
    /// Its label on the Secrets the operator makes.
    pub label_key: &'a str,
    /// Its members as stored (those with a ClusterIP get a certificate when the operator
    /// issues them).
    pub members: &'a [ValkeyNode],
    /// The members form a cluster (whose bus always asks for client certificates).
    pub bus: bool,
}

/// Why the operator has no client for a topology's TLS members.
#[derive(Debug, thiserror::Error)]
pub enum TlsUnusable {
    /// The CA the operator keeps (`spec.tls` names no Secret).
    #[error(transparent)]
    Issued(#[from] CaUnusable),
    /// The Secret `spec.tls` names.
    #[error(transparent)]
    Secret(#[from] SecretError),
    #[error("TLS Secret {secret}: {source}")]
    Files { secret: String, source: FilesError },
}

/// What [`read`] found of a topology with `spec.tls`.
pub struct Read {
    /// The client, or why it cannot be had.
    pub client: Result<Client, TlsUnusable>,
    /// When the certificates members serve expire; `None` while the TLS cannot be used.
    pub expiry: Option<Expiry>,
}

/// The client side of the topology's TLS and when its certificates expire: `None` without
/// `spec.tls`. With a Secret the user names, from that Secret; without, from the
/// CA the operator keeps, issuing members' certificates first ([`crate::driver::shared::member_certs`]).
/// Told with `reasons` (issued, refused): certificates issued, members refused, and why
/// the TLS cannot be used, when it cannot.
pub async fn read<K, R>(
    ctx: &Context,
    secrets: &Api<Secret>,
    field_manager: &str,
    of: Reading<'_, K>,
    reasons: (R, R),
) -> Result<Option<Read>, Error>
where
    K: Resource<DynamicType = ()> + Debug,
    R: EventReason + Copy,
{
    let Some(spec) = of.spec else {
        return Ok(None);
    };
    let (issued, refused) = reasons;
    let client_auth = of.bus || spec.auth_clients != TlsAuthClients::Never;
    let (client, expiry) = match &spec.secret_name {
        None => {
            let prepared = member_certs::prepare(
                secrets,
                of.topology,
                of.label_key,
                of.members,
                client_auth,
                spec.ca_overlap_seconds
                    .map(|s| std::time::Duration::from_secs(s.into()))
                    .unwrap_or(ca_replacement::DEFAULT_OVERLAP),
                field_manager,
            )
            .await?;
            if !prepared.issued.is_empty() {
                let note = format!("issued certificates: {}", prepared.issued.join("; "));
                tracing::info!(topology = %of.topology.name_any(), %note);
                ctx.events.publish(of.topology, issued, note, None).await;
            }
            if !prepared.refused.is_empty() {
                let note = format!(
                    "no certificate issued, the member waits: {}",
                    prepared.refused.join("; ")
                );
                tracing::warn!(topology = %of.topology.name_any(), %note);
                ctx.events.publish(of.topology, refused, note, None).await;
            }
            (prepared.client.map_err(TlsUnusable::from), prepared.expiry)
        }
        Some(name) => {
            let namespace = of.topology.namespace().unwrap_or_default();
            let secret = secrets
                .get_opt(name)
                .await
                .on(Op::Read, ObjectName::new::<Secret>(&namespace, name))?;
            match tls::files_in(secret.as_ref(), name) {
                Ok(files) => {
                    let client =
                        tls::client(&files, client_auth).map_err(|source| TlsUnusable::Files {
                            secret: name.clone(),
                            source,
                        });
                    let served = cert_expiry::not_after(&files.cert);
                    (client, cert_expiry::earliest(served, None, false))
                }
                Err(why) => (Err(why.into()), None),
            }
        }
    };
    // The status says it too (`TlsSecretUnusable`), but a Secret is input CEL cannot
    // judge, and such input gets an Event; repeated at each look, one series.
    if let Err(why) = &client {
        let note = format!("{why}; nothing is asked of the members until it is fixed");
        ctx.events.publish(of.topology, refused, note, None).await;
    }
    // Unusable, its files are not what members serve: no expiry (the Event says why).
    let expiry = expiry.filter(|_| client.is_ok());
    Ok(Some(Read { client, expiry }))
}

/// Whether no member may be created yet: the operator issues the certificates and has no
/// usable CA. Members created now could never start, and would keep a CA from being made
/// later (it is made only while the topology has no member).
pub fn holds_new_members(
    spec: Option<&TopologyTls>,
    tls: Option<&Result<Client, TlsUnusable>>,
    owned: &[ValkeyNode],
) -> bool {
    let issued = spec.is_some_and(|s| s.secret_name.is_none());
    issued && matches!(tls, Some(Err(_))) && owned.is_empty()
}

/// How the operator logs in to the members (with `tls`, the client of a topology with
/// `spec.tls`): `None` while the operator password cannot be used (the guard then says why
/// and nothing is asked). During a rotation of the operator password, a member that
/// refuses the Secret's is asked with those it may hold instead (`applied`).
pub fn login(
    operator_password: &Result<String, PasswordError>,
    applied: Option<&AppliedOperator>,
    tls: Option<Client>,
) -> Option<Login> {
    operator_password.as_ref().ok().map(|password| Login {
        user: OPERATOR_USER.to_string(),
        password: password.clone(),
        fallbacks: applied.map(|a| a.fallbacks(password)).unwrap_or_default(),
        tls,
    })
}

/// Tells (Warning `reason`) which of `members` served a certificate the operator refused
/// at this reconcile's handshakes, and why: another CA (the CA changed without a bundle of
/// both), or an expired one (a sentinel that could not be restarted in time, say).
pub async fn report_untrusted<K, R>(
    ctx: &Context,
    topology: &K,
    login: &Login,
    members: &[Member<'_>],
    reason: R,
) where
    K: Resource<DynamicType = ()> + Debug,
    R: EventReason,
{
    let Some(client) = login.tls.as_ref() else {
        return;
    };
    let untrusted: Vec<String> = members
        .iter()
        .filter_map(|m| Some(format!("{}: {}", m.name, client.served.refusal(m.ip)?)))
        .collect();
    if untrusted.is_empty() {
        return;
    }
    let note = format!(
        "the operator refuses the certificate some members serve ({}). While a CA changes, \
         ca.crt must hold the previous and the new CA until every member serves a \
         certificate of the new one (members check each other the same way); a sentinel \
         holding an expired certificate must be restarted by hand",
        untrusted.join("; ")
    );
    tracing::warn!(topology = %topology.name_any(), %note);
    ctx.events.publish(topology, reason, note, None).await;
}

/// A member as the reload needs it: its name, the address it was dialled at and its port.
pub struct Member<'a> {
    pub name: &'a str,
    pub ip: &'a str,
    pub port: u16,
}

/// Has every member that served another certificate at this reconcile's handshake load the
/// Secret again, and tells (`reasons`: reloaded, refused) who now serves it and who refused.
/// Nothing fails the reconcile: a member whose files the kubelet has not replaced yet is
/// simply tried again at the next look.
pub async fn reload<K, R>(
    ctx: &Context,
    topology: &K,
    login: &Login,
    members: &[Member<'_>],
    connections: &Connections<Conn>,
    reasons: (R, R),
) where
    K: Resource<DynamicType = ()> + Debug,
    R: EventReason,
{
    let Some(client) = login.tls.as_ref() else {
        return;
    };
    let stale = tls::stale(client, members.iter().map(|m| (m.name, m.ip)));
    if stale.is_empty() {
        return;
    }
    // Each call is bounded by the connection's own timeouts: no timeout around the pass,
    // which would leave a cancelled connection's task behind.
    let (mut reloaded, mut refused) = (Vec::new(), Vec::new());
    for member in members.iter().filter(|m| stale.contains(&m.name)) {
        let Some(conn) = connections.find(member.name) else {
            continue;
        };
        let path = format!("{TLS_DIR}/{TLS_CERT_KEY}");
        if let Err(e) = conn.config_set("tls-cert-file", &path).await {
            refused.push(format!("{}: {e}", member.name));
            continue;
        }
        // A new handshake tells whether the files were the renewed ones already.
        if let Ok(fresh) = Conn::connect(member.ip, member.port, login).await {
            fresh.close().await;
        }
        if tls::stale(client, [(member.name, member.ip)]).is_empty() {
            reloaded.push(member.name);
        }
    }
    let (reloaded_reason, refused_reason) = reasons;
    if !reloaded.is_empty() {
        let note = format!(
            "{} now serve the renewed certificate (loaded without a restart)",
            reloaded.join(", ")
        );
        tracing::info!(topology = %topology.name_any(), %note);
        ctx.events
            .publish(topology, reloaded_reason, note, None)
            .await;
    }
    if !refused.is_empty() {
        let note = format!(
            "kept serving their certificate, the renewed files were refused: {}",
            refused.join("; ")
        );
        tracing::warn!(topology = %topology.name_any(), %note);
        ctx.events
            .publish(topology, refused_reason, note, None)
            .await;
    }
}

/// Takes the next step of a replacement of the operator's CA, if one is under way and may
/// ([`member_certs::advance`]), and tells it (`reasons`: done, refused); returns what the
/// topology's status says of it. `members`: every member, by name, with the address it was
/// dialled at this reconcile ([`dialled`]). Nothing fails the reconcile: the step is judged
/// again at the next look.
pub async fn advance_ca<K, R>(
    ctx: &Context,
    secrets: &Api<Secret>,
    field_manager: &str,
    topology: &K,
    login: &Login,
    members: &[(&str, Option<&str>)],
    reasons: (R, R),
) -> Option<CaReplacement>
where
    K: Resource<DynamicType = ()> + Debug,
    R: EventReason,
{
    let client = login.tls.as_ref()?;
    let (done, refused) = reasons;
    match member_certs::advance(secrets, topology, client, members, field_manager).await {
        Ok(advanced) => {
            if let Some(note) = advanced.done {
                ctx.events
                    .publish(topology, done, format!("replacing the CA: {note}"), None)
                    .await;
            }
            advanced.status
        }
        Err(e) => {
            let note = format!("replacing the CA: its Secret was not written: {e}");
            tracing::warn!(topology = %topology.name_any(), %note);
            ctx.events
                .publish(topology, refused, note.clone(), None)
                .await;
            let replacement = client.replacement.as_ref()?;
            ca_replacement::status(replacement, &ca_replacement::Step::Wait(note))
        }
    }
}

/// Every member of `owned` by name, with the address `reached` says it was dialled at.
pub fn dialled<'a>(
    owned: &'a [ValkeyNode],
    reached: &[Member<'a>],
) -> Vec<(&'a str, Option<&'a str>)> {
    owned
        .iter()
        .filter_map(|node| node.metadata.name.as_deref())
        .map(|name| {
            let address = reached.iter().find(|m| m.name == name).map(|m| m.ip);
            (name, address)
        })
        .collect()
}

/// A sentinel, its pod and its ValkeyNode (the Event's related object).
pub struct SentinelPod<'a> {
    pub state: tls::SentinelState<'a>,
    pub pod: Option<&'a str>,
    pub node: Option<ObjectReference>,
}

/// The annotation `key` of pod `name`, or `None` when the pod or the annotation is missing
/// or the read fails (logged: the caller then treats the pod as an older one).
pub async fn pod_annotation(pods: &Api<Pod>, name: &str, key: &str) -> Option<String> {
    match pods.get_opt(name).await {
        Ok(pod) => pod?.metadata.annotations?.remove(key),
        Err(e) => {
            tracing::warn!(pod = %name, error = %e, "pod not read");
            None
        }
    }
}

/// Evicts `sentinel` (the one [`tls::sentinel_to_restart`] names): its pod comes back with
/// the current Secret. An eviction, not a delete, so the sentinels' PodDisruptionBudget
/// (one at a time) is honoured too. Told with `reason`; nothing fails the reconcile.
pub async fn evict_sentinel<K, R>(
    ctx: &Context,
    group: &K,
    sentinel: &SentinelPod<'_>,
    pods: &Api<Pod>,
    reason: R,
) where
    K: Resource<DynamicType = ()> + Debug,
    R: EventReason,
{
    let name = sentinel.state.name;
    let Some(pod) = sentinel.pod else {
        tracing::warn!(group = %group.name_any(), sentinel = %name, "no pod to evict");
        return;
    };
    // The sentinel's readiness (from its ValkeyNode's status) lags its pod: a pod evicted a
    // moment ago still looks ready and stale to the next reconcile.
    if let Ok(Some(current)) = pods.get_opt(pod).await
        && current.metadata.deletion_timestamp.is_some()
    {
        tracing::info!(group = %group.name_any(), sentinel = %name, %pod, "sentinel's pod already going");
        return;
    }
    match pods.evict(pod, &EvictParams::default()).await {
        Ok(_) => {
            let note = format!(
                "evicted {name}'s pod {pod}: it serves an older certificate, and Sentinel \
                 reads its TLS files only at start"
            );
            tracing::info!(group = %group.name_any(), %note);
            // Related to the sentinel: the recorder would fold one group's Events that
            // differ only in their notes into one series.
            let related = sentinel.node.clone();
            ctx.events.publish(group, reason, note, related).await;
        }
        // 429: the budget lets no sentinel go now; the next look tries again.
        Err(kube::Error::Api(e)) if e.code == 429 => {
            tracing::info!(group = %group.name_any(), sentinel = %name, "sentinel not evicted: its budget says wait")
        }
        Err(e) => {
            tracing::warn!(group = %group.name_any(), sentinel = %name, error = %e, "sentinel not evicted")
        }
    }
}
