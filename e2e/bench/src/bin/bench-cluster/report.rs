//! The Markdown tables bench-cluster prints.

use std::time::Duration;

use anyhow::Result;

use crate::faults::{Departure, Freeze};
use crate::migration::Scaled;
use crate::upgrade::Upgrade;
use crate::{Faults, FirstFigures, On91, SLOT_MIGRATION, V80, V81, V91};

/// Every table: formation and migration next to their floors and the faults, the faults
/// before and after, the scale-outs and the upgrade on 9.1.
pub(crate) fn print(keys: usize, first: &FirstFigures, faults: &Faults, on_91: &On91) {
    print_first(keys, first, &faults.frozen);
    print_departures(&[
        (
            "a primary's pod deleted (its preStop hook hands over)",
            &faults.deleted,
        ),
        (
            "a primary's server killed at every start (crash loop; forced failover)",
            &faults.crashed,
        ),
    ]);
    print_before_after(
        &Ok(faults.frozen.clone()),
        &faults.failover_before,
        &[
            (
                "a primary's pod deleted",
                &faults.killed_before,
                &faults.deleted,
            ),
            (
                "a primary's server killed at every start (crash loop)",
                &faults.crashed_before,
                &faults.crashed,
            ),
        ],
    );
    print_scale_out_on_9(keys, &on_91.atomic, &on_91.classic, &on_91.cli);
    print_upgrade(keys, &on_91.upgraded);
}

/// The first table: formation and migration next to their floors, and the failover.
fn print_first(keys: usize, first: &FirstFigures, frozen: &Freeze) {
    println!("| measurement | operator | floor |");
    println!("|---|---|---|");
    println!(
        "| 3 x 1: apply to Ready | {:.1} s | {:.1} s (6 ValkeyNodes Ready {:.1} s + `valkey-cli --cluster create` to a consistent cluster {:.1} s) |",
        secs(first.operator_ready),
        secs(first.floor.nodes_ready + first.floor.formed),
        secs(first.floor.nodes_ready),
        secs(first.floor.formed)
    );
    println!(
        "| loading {keys} keys (fred, MSET per slot, 64 in flight) | {:.1} s | |",
        secs(first.load)
    );
    let (floor_total, floor_rate) = match &first.cli_migration {
        Ok(m) => (
            format!(
                "{:.1} s (`add-node` until every node knows the new one and it reports cluster_state:ok {:.1} s, then `rebalance` {:.1} s)",
                secs(m.migration.total),
                secs(m.joined),
                secs(m.rebalance)
            ),
            format!(
                "{} keys / {:.1} s = {:.0} keys/s",
                m.migration.moved_keys,
                secs(m.migration.moving),
                rate(m.migration.moved_keys, m.migration.moving)
            ),
        ),
        Err(e) => {
            let why = format!("not measured: {}", first_line(&format!("{e:#}")));
            (why.clone(), why)
        }
    };
    println!(
        "| 3 -> 4 shards: new primary Ready to 4096 slots, none open | {:.1} s | {floor_total} |",
        secs(first.operator_migration.total)
    );
    println!(
        "| 3 -> 4 shards: keys moved / time slots were moving | {} keys / {:.1} s = {:.0} keys/s | {floor_rate} |",
        first.operator_migration.moved_keys,
        secs(first.operator_migration.moving),
        rate(
            first.operator_migration.moved_keys,
            first.operator_migration.moving
        ),
    );
    println!(
        "| failover: primary frozen to the first write accepted on its slots (cluster-node-timeout 15 s) | {:.1} s | |",
        secs(frozen.write_accepted)
    );
}

/// A departure's cell: the shard's longest refusal and pause, and what was lost.
fn departure_cell(measured: &Result<Departure>) -> String {
    match measured {
        Ok(d) => format!(
            "no write accepted for {:.1} s; none acknowledged by a replica for {:.1} s; {} acknowledged lost",
            secs(d.refusal),
            secs(d.pause),
            d.lost
        ),
        Err(e) => format!("not measured: {}", first_line(&format!("{e:#}"))),
    }
}

fn print_departures(rows: &[(&str, &Result<Departure>)]) {
    for (what, measured) in rows {
        println!(
            "| {what}, under a WAIT-acked writer | {} | |",
            departure_cell(measured)
        );
    }
}

/// The second table: each fault with topology-controller as before ([`BEFORE`]; the pod
/// deleted with grace 0, so no hook runs) and as it is.
fn print_before_after(
    frozen_after: &Result<Freeze>,
    frozen_before: &Result<Freeze>,
    departures: &[(&str, &Result<Departure>, &Result<Departure>)],
) {
    let frozen = |f: &Result<Freeze>| match f {
        Ok(f) => format!(
            "first write accepted after {:.1} s; Ready False after {}",
            secs(f.write_accepted),
            f.ready_false
                .map_or("(not before that write)".into(), |d| format!(
                    "{:.1} s",
                    secs(d)
                ))
        ),
        Err(e) => format!("not measured: {}", first_line(&format!("{e:#}"))),
    };
    println!();
    println!(
        "| fault, under a WAIT-acked writer | before: no hook (grace 0), no forced failover, no pulse, 30 s looks | after: as built |"
    );
    println!("|---|---|---|");
    println!(
        "| a primary frozen (SIGSTOP; Valkey's own failover either way) | {} | {} |",
        frozen(frozen_before),
        frozen(frozen_after)
    );
    for (what, before, after) in departures {
        println!(
            "| {what} | {} | {} |",
            departure_cell(before),
            departure_cell(after)
        );
    }
}

/// Rows of the 3 -> 4 scale-outs on Valkey 9.1: the operator atomic and classic, and
/// valkey-cli 9.1.
fn print_scale_out_on_9(
    keys: usize,
    atomic: &Result<Scaled>,
    classic: &Result<Scaled>,
    cli: &Result<Scaled>,
) {
    let all = [atomic, classic, cli];
    let cells = |f: &dyn Fn(&Scaled) -> String| -> String {
        all.iter()
            .map(|r| match r {
                Ok(s) => f(s),
                Err(e) => format!("not measured: {}", first_line(&format!("{e:#}"))),
            })
            .collect::<Vec<_>>()
            .join(" | ")
    };
    println!();
    println!(
        "| 3 x 0 -> 4 shards on {V91} with {keys} keys | operator, atomic slot migration (default) | operator, classic (`{SLOT_MIGRATION}: classic`) | valkey-cli {V91}: `add-node` + `rebalance --cluster-use-empty-masters` |"
    );
    println!("|---|---|---|---|");
    println!(
        "| new primary Ready to 4096 slots, none open | {} |",
        cells(&|s| match s.cli {
            None => format!("{:.1} s", secs(s.migration.total)),
            Some((joined, rebalance)) => format!(
                "{:.1} s (`add-node` until the new node can take slots {:.1} s, then `rebalance` {:.1} s)",
                secs(s.migration.total),
                secs(joined),
                secs(rebalance)
            ),
        })
    );
    println!(
        "| keys moved (DBSIZE of the new primary) / that total | {} |",
        cells(&|s| format!(
            "{} keys / {:.1} s = {:.0} keys/s",
            s.migration.moved_keys,
            secs(s.migration.total),
            rate(s.migration.moved_keys, s.migration.total)
        ))
    );
    println!(
        "| operator: patch of `spec.shards` to the new primary Ready (where the total starts) / slots it held at the first look after | {} |",
        cells(&|s| match &s.migration.operator {
            Some(o) => format!(
                "{:.1} s / {} slots",
                secs(o.ready_after_patch),
                o.held_at_start
            ),
            None => String::new(),
        })
    );
    println!(
        "| atomic slot migration jobs on the new primary (`CLUSTER GETSLOTMIGRATIONS`) | {} |",
        cells(&|s| s.jobs.clone())
    );
}

/// Rows of the 8.0 -> 8.1 -> 9.1 upgrade under the writer.
fn print_upgrade(keys: usize, upgraded: &Result<Upgrade>) {
    println!();
    println!(
        "| upgrade of 3 x 1 with {keys} keys, a writer (per shard: SET + WAIT 1) running throughout | operator |"
    );
    println!("|---|---|");
    let u = match upgraded {
        Ok(u) => u,
        Err(e) => {
            println!(
                "| {V80} -> {V81} -> {V91} | not measured: {} |",
                first_line(&format!("{e:#}"))
            );
            return;
        }
    };
    for step in &u.steps {
        let gates = if step.gates_on_primaries.is_empty() {
            String::new()
        } else {
            format!("; gates opened on primaries: {:?}", step.gates_on_primaries)
        };
        println!(
            "| {} -> {}: patch to Ready with every member on {} ({} members, at most {} rolling at once{gates}) | {:.1} s = {:.1} s per member |",
            step.from,
            step.to,
            step.to,
            step.members,
            step.max_rolling,
            secs(step.took),
            secs(step.took) / step.members.max(1) as f64
        );
    }
    let report = &u.report;
    let unacknowledged: u64 = report.streams.iter().map(|s| s.unacknowledged).sum();
    let failed: u64 = report.streams.iter().map(|s| s.failed).sum();
    println!(
        "| writer: acknowledged writes (and writes not acknowledged in 1 s, failed) | {} ({unacknowledged}, {failed}) |",
        report.acked()
    );
    let lost = match &u.lost {
        Ok(lost) if lost.is_empty() => "0".to_string(),
        Ok(lost) => format!(
            "**{} of {} acknowledged writes LOST**, e.g. {:?}",
            lost.len(),
            report.acked(),
            &lost[..lost.len().min(5)]
        ),
        Err(e) => format!("**not checked**: {}", first_line(&format!("{e:#}"))),
    };
    println!("| writer: acknowledged writes lost (read back after both steps) | {lost} |");
    let missing = match &u.missing {
        Ok(missing) if missing.is_empty() => "0".to_string(),
        Ok(missing) => format!(
            "**{} of {keys} MISSING**, e.g. {:?}",
            missing.len(),
            &missing[..missing.len().min(5)]
        ),
        Err(e) => format!("**not checked**: {}", first_line(&format!("{e:#}"))),
    };
    println!("| keys loaded on {V80} that do not read back on {V91} | {missing} |");
    let mut streams: Vec<_> = report.streams.iter().collect();
    streams.sort_by_key(|s| s.shard);
    for stream in streams {
        println!(
            "| writer: longest time without an acknowledged write, shard {} (slot {}) | {:.1} s |",
            stream.shard,
            stream.slot,
            secs(stream.longest_pause)
        );
    }
    if let Err(e) = &u.progressed {
        println!(
            "| writer: after both steps | **did not progress**: {} |",
            first_line(&format!("{e:#}"))
        );
    }
}

pub(crate) fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

pub(crate) fn rate(keys: usize, d: Duration) -> f64 {
    keys as f64 / d.as_secs_f64().max(0.001)
}

pub(crate) fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}
