//! The idle window: each controller's requests, and the reviews the kubelet API makes.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::jiff::Timestamp;

use crate::audit::AuditEvent;
use crate::controllers::Controller;
use crate::{TOTAL, WATCH_TIMEOUT_SECS};

/// One controller's idle cost, per hour.
pub(crate) struct IdleCost {
    pub(crate) watches_open: usize,
    pub(crate) watches: f64,
    pub(crate) leases: f64,
    /// Every request but WATCH and Lease.
    pub(crate) others: f64,
    /// Those about a node, divided by the node count.
    pub(crate) per_node: f64,
}

/// What `controller` asked the API server in [start, end): WATCH requests apart (the
/// streams it keeps open, how many it opened in the window, how long those that ended
/// lasted), Lease renewals apart, and every other request by verb and resource and per
/// node. Prints the detail and returns the per-hour figures.
pub(crate) fn idle_cost(
    controller: &Controller,
    events: &[AuditEvent],
    start: Timestamp,
    end: Timestamp,
) -> IdleCost {
    let window = end.duration_since(start).as_secs_f64();
    let per_hour = |count: usize| count as f64 * 3600.0 / window;
    let all: Vec<&AuditEvent> = events
        .iter()
        .filter(|e| e.user == controller.username)
        .collect();
    // Every resource it ever watched: one stream each, re-issued when the server ends it.
    let mut watched: Vec<String> = all
        .iter()
        .filter(|e| e.verb == "watch")
        .map(|e| e.what())
        .collect();
    watched.sort();
    watched.dedup();
    let ours: Vec<&AuditEvent> = all
        .into_iter()
        .filter(|e| e.at >= start && e.at < end)
        .collect();
    let opened = ours
        .iter()
        .filter(|e| e.verb == "watch" && e.stage == "ResponseStarted")
        .count();
    let lengths: Vec<f64> = ours
        .iter()
        .filter(|e| e.verb == "watch" && e.stage == "ResponseComplete")
        .map(|e| e.at.duration_since(e.received).as_secs_f64())
        .collect();
    let requests: Vec<&AuditEvent> = ours
        .into_iter()
        .filter(|e| e.verb != "watch" && e.stage == "ResponseComplete")
        .collect();
    let (leases, others): (Vec<&AuditEvent>, Vec<&AuditEvent>) =
        requests.into_iter().partition(|e| e.resource == "leases");

    let mut lease_verbs: BTreeMap<&str, usize> = BTreeMap::new();
    for e in &leases {
        *lease_verbs.entry(e.verb.as_str()).or_default() += 1;
    }
    let mut by_kind: BTreeMap<String, usize> = BTreeMap::new();
    let mut per_node: HashMap<String, usize> = HashMap::new();
    let mut unattributed = 0;
    for e in &others {
        *by_kind
            .entry(format!("{} {} ({})", e.verb, e.what(), e.code))
            .or_default() += 1;
        match e.node() {
            Some(node) => *per_node.entry(node).or_default() += 1,
            None => unattributed += 1,
        }
    }
    let about_nodes: usize = per_node.values().sum();

    println!("### {}\n", controller.name);
    let lasted = match lengths.len() {
        0 => "none ended in the window".to_string(),
        n => format!(
            "the {n} that ended lasted {:.1} s on average",
            lengths.iter().sum::<f64>() / n as f64
        ),
    };
    println!(
        "- WATCH: {} streams ({}); {opened} opened in the window, {lasted}",
        watched.len(),
        watched.join(", "),
    );
    println!("- Lease: {} requests {lease_verbs:?}", leases.len());
    println!(
        "- everything else: {} requests ({about_nodes} about a node, {unattributed} about \
         none); {} nodes had requests, at most {} each",
        others.len(),
        per_node.len(),
        per_node.values().max().copied().unwrap_or(0)
    );
    for (kind, count) in &by_kind {
        println!("  - {kind}: {count}");
    }
    println!();
    IdleCost {
        watches_open: watched.len(),
        watches: watched.len() as f64 * 3600.0 / WATCH_TIMEOUT_SECS,
        leases: per_hour(leases.len()),
        others: per_hour(others.len()),
        per_node: per_hour(about_nodes) / TOTAL as f64,
    }
}

/// Per review resource (`tokenreviews`, `subjectaccessreviews`), who created them in
/// [start, end) and when (seconds into the window). Only the node agent's kubelet API
/// makes reviews here (the API server's node proxy presents a certificate), and in the
/// idle window only pvc-resizer calls it, so these are the price of its stats calls.
pub(crate) fn reviews(
    events: &[AuditEvent],
    start: Timestamp,
    end: Timestamp,
) -> BTreeMap<&'static str, (BTreeSet<String>, Vec<f64>)> {
    let mut found = BTreeMap::new();
    for resource in ["tokenreviews", "subjectaccessreviews"] {
        let mut users = BTreeSet::new();
        let mut at = Vec::new();
        for e in events
            .iter()
            .filter(|e| e.resource == resource && e.completed() && e.at >= start && e.at < end)
        {
            users.insert(e.user.clone());
            at.push(e.at.duration_since(start).as_secs_f64());
        }
        found.insert(resource, (users, at));
    }
    found
}
