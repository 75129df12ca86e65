//! The Markdown tables bench-nodes prints.

use anyhow::{Context, Result};

use crate::audit::AuditEvent;
use crate::controllers::{Controller, mib};
use crate::idle::{IdleCost, idle_cost, reviews};
use crate::latency::{print_latency, steps};
use crate::{BATCH, Figures, SEQUENTIAL, SIZED, TOTAL, VOLUME, WATCH_TIMEOUT_SECS};

/// Every table: create to Ready, idle API requests, kubelet requests, memory.
pub(crate) fn print(
    figures: &Figures,
    measured: &[Controller],
    events: &[AuditEvent],
    audit_bytes: u64,
) -> Result<()> {
    let users = (measured[0].username.as_str(), measured[1].username.as_str());
    println!("## Create to Ready\n");
    print_latency(
        &format!("{SEQUENTIAL} nodes one at a time"),
        &steps(events, &figures.sequential, users)?,
    );
    print_latency(
        &format!("{BATCH} nodes at once"),
        &steps(events, &figures.batch, users)?,
    );
    println!(
        "{} more nodes at once: all {TOTAL} WorkloadReady {:.1} s after the first create\n",
        TOTAL - SEQUENTIAL - BATCH,
        figures.scale_up.as_secs_f64()
    );
    let window = figures
        .window_end
        .duration_since(figures.window_start)
        .as_secs_f64();
    print_idle_requests(figures, measured, events, audit_bytes, window);
    print_kubelet_requests(figures, events, window);
    print_memory(figures, measured)
}

/// Each measured controller's requests in the idle window, per hour.
fn print_idle_requests(
    figures: &Figures,
    measured: &[Controller],
    events: &[AuditEvent],
    audit_bytes: u64,
    window: f64,
) {
    let Figures {
        before,
        after,
        ready_after,
        pod_count,
        window_start,
        window_end,
        ..
    } = figures;
    println!("## Idle API requests\n");
    let reconciles: Vec<String> = measured
        .iter()
        .zip(before.iter().zip(after))
        .map(|(c, (b, a))| format!("{} {}", c.name, a.reconciles - b.reconciles))
        .collect();
    println!(
        "Window {window:.0} s with {ready_after} of {TOTAL} nodes WorkloadReady ({pod_count} pods, \
         {VOLUME} `{SIZED}` volume each, autoResize on); reconciles in the window: {}; \
         audit log {} MiB\n",
        reconciles.join(", "),
        audit_bytes / (1 << 20)
    );
    let costs: Vec<IdleCost> = measured
        .iter()
        .map(|c| idle_cost(c, events, *window_start, *window_end))
        .collect();
    println!(
        "Per hour: WATCH = open streams x 3600 / {WATCH_TIMEOUT_SECS:.0} s; the rest = window \
         count x 3600 / {window:.0} s (per node: divided by {TOTAL})\n"
    );
    println!(
        "| controller | WATCH requests (any node count) | Lease requests (any node count) | other requests, {TOTAL} nodes | per idle node |"
    );
    println!("|---|---|---|---|---|");
    for (controller, cost) in measured.iter().zip(&costs) {
        println!(
            "| {} | {:.0} ({} streams) | {:.0} | {:.0} | {:.1} |",
            controller.name,
            cost.watches,
            cost.watches_open,
            cost.leases,
            cost.others,
            cost.per_node
        );
    }
    println!();
}

/// pvc-resizer's kubelet stats calls in the idle window, and the reviews they cost.
fn print_kubelet_requests(figures: &Figures, events: &[AuditEvent], window: f64) {
    let Figures {
        before,
        after,
        kube_nodes,
        window_start,
        window_end,
        ..
    } = figures;
    println!("## Kubelet requests (pvc-resizer)\n");
    let (b, a) = (&before[2], &after[2]);
    let calls = a.stats_calls - b.stats_calls;
    let failures = a.stats_failures - b.stats_failures;
    let per_hour = |count: u64| count as f64 * 3600.0 / window;
    println!(
        "GET /stats/summary in the window: {calls} ({failures} failed) to the {} Nodes running \
         the {TOTAL} nodes' pods ({}); per hour {:.0}, per Node-hour {:.1}, per node-hour {:.2}\n",
        kube_nodes.len(),
        kube_nodes.iter().cloned().collect::<Vec<_>>().join(", "),
        per_hour(calls),
        per_hour(calls) / kube_nodes.len().max(1) as f64,
        per_hour(calls) / TOTAL as f64
    );
    let reviews = reviews(events, *window_start, *window_end);
    println!(
        "| review (by the kubelet API) | in the window | per hour | per stats call | at (s into the window) |"
    );
    println!("|---|---|---|---|---|");
    for (resource, (users, at)) in &reviews {
        let by: Vec<&str> = users.iter().map(String::as_str).collect();
        println!(
            "| {resource} by {} | {} | {:.0} | {:.2} | {} |",
            if by.is_empty() {
                "-".into()
            } else {
                by.join(", ")
            },
            at.len(),
            per_hour(at.len() as u64),
            at.len() as f64 / calls.max(1) as f64,
            at.iter()
                .map(|t| format!("{t:.1}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    println!();
}

/// Each measured controller's VmRSS with one node and with [`TOTAL`].
fn print_memory(figures: &Figures, measured: &[Controller]) -> Result<()> {
    println!("## Memory (VmRSS)\n");
    let one = figures.rss_one.as_ref().context("no first node")?;
    println!("| controller | 1 node | {TOTAL} nodes |");
    println!("|---|---|---|");
    for (i, controller) in measured.iter().enumerate() {
        println!(
            "| {} | {:.1} MiB | {:.1} MiB |",
            controller.name,
            mib(one[i]),
            mib(figures.rss_hundred[i])
        );
    }
    Ok(())
}
