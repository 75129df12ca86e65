//! Replacing the CA the operator keeps for a topology (`valkey.rs/replace-ca`), as both
//! kinds' tests ask for it and check each step. What differs stays in the tests: which
//! members serve TLS on which ports, the writer, what is sampled meanwhile.

use anyhow::Result;
use crd_types::names::annotations::REPLACE_CA;
use crd_types::rotation::{CaReplacement, CaReplacementPhase};
use crd_types::template::{TlsAuthClients, TopologyTls};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use serde_json::json;

use super::{Progress, Topology, TopologyApis, TopologyStatus};
use crate::valkey_tls::{ClientTls, members_without_ca, not_serving_own};

/// TLS with operator-issued certificates, clients given `overlap_seconds` to trust a new CA.
pub fn operator_tls(overlap_seconds: u32) -> TopologyTls {
    TopologyTls {
        secret_name: None,
        auth_clients: TlsAuthClients::Never,
        plain_text_clients: false,
        ca_overlap_seconds: Some(overlap_seconds),
    }
}

/// The merge patch that asks for a new CA, `reason` being why (the annotation's value).
pub fn ask(reason: &str) -> serde_json::Value {
    json!({"metadata": {"annotations": {REPLACE_CA: reason}}})
}

/// The merge patch that sets the clients' overlap.
pub fn overlap(seconds: u32) -> serde_json::Value {
    json!({"spec": {"tls": {"caOverlapSeconds": seconds}}})
}

/// The CA that follows `old_ca` in `bundle` (`<name>-ca` while both are trusted), which
/// must hold the old one first.
pub fn next_ca(bundle: &str, old_ca: &str) -> String {
    let old = old_ca.trim_end();
    assert!(bundle.starts_with(old), "the old CA first: {bundle}");
    bundle[old.len()..].trim_start().to_string()
}

/// The replacement once status says every member trusts both CAs and waits for the
/// clients' overlap to end.
pub async fn trusting_both<T: Topology>(
    apis: &TopologyApis<T>,
    name: &str,
) -> Result<Progress<CaReplacement>> {
    let status = apis.status(name).await?;
    Ok(status
        .ca_replacement()
        .filter(|r| r.phase == CaReplacementPhase::Trusting && r.clients_until.is_some())
        .filter(|r| {
            r.waiting_for
                .as_ref()
                .is_some_and(|w| w.contains("clientsUntil"))
        })
        .cloned()
        .ok_or_else(|| format!("not yet: {:?}", status.ca_replacement())))
}

/// Done once status holds no replacement.
pub async fn none_under_way<T: Topology>(
    apis: &TopologyApis<T>,
    name: &str,
) -> Result<Progress<()>> {
    let status = apis.status(name).await?;
    Ok(status
        .ca_replacement()
        .map_or(Ok(()), |r| Err(format!("{r:?}"))))
}

/// A member as the CA checks reach it: its name, its address, the ports it serves TLS on.
pub struct TlsMember<'a> {
    pub name: &'a str,
    pub ip: &'a str,
    pub ports: &'a [u16],
}

/// Done once every one of `members` holds `ca` in its Secret and serves that Secret's
/// certificate on each of its ports, as `tls` sees it (checking its address).
pub async fn serving_own(
    secrets: &Api<Secret>,
    tls: &ClientTls,
    members: &[TlsMember<'_>],
    ca: &str,
) -> Result<Progress<()>> {
    let mut behind = Vec::new();
    for m in members {
        behind.extend(not_serving_own(secrets, tls, (m.name, m.ip), m.ports, ca).await?);
    }
    Ok(behind.is_empty().then_some(()).ok_or(behind.join("; ")))
}

/// Done once the Secret of every member in `names` holds `ca` alone.
pub async fn trusting_alone<'a>(
    secrets: &Api<Secret>,
    names: impl IntoIterator<Item = &'a str>,
    ca: &str,
) -> Result<Progress<()>> {
    let behind = members_without_ca(secrets, names, ca).await?;
    Ok(behind
        .is_empty()
        .then_some(())
        .ok_or(format!("not yet: {behind:?}")))
}

/// A client trusting the old CA alone is refused by the member at `ip`.
pub async fn assert_old_ca_refused(old_only: &ClientTls, ip: &str, port: u16) {
    let refused = old_only.served_as(ip, port, ip).await;
    let refused = format!("{:#}", refused.expect_err("the old CA is trusted no more"));
    assert!(refused.contains("UnknownIssuer"), "{ip}:{port}: {refused}");
}

/// topology-controller reported each step (asked, both CAs trusted, the new CA in place)
/// and refused no certificate on the way.
pub async fn assert_steps_reported<T: Topology>(apis: &TopologyApis<T>, name: &str) {
    let refused = apis.events_about(name, Some("CertificateRefused")).await;
    assert_eq!(refused.unwrap().len(), 0, "a certificate was refused");
    let steps: Vec<String> = apis
        .events_about(name, Some("CertificateIssued"))
        .await
        .unwrap()
        .into_iter()
        .filter_map(|e| e.note)
        .filter(|n| n.contains("replacing the CA"))
        .collect();
    for step in [
        "the topology asks for it",
        "every member trusts both CAs",
        "it is now the CA",
    ] {
        assert!(steps.iter().any(|s| s.contains(step)), "{step}: {steps:?}");
    }
}
