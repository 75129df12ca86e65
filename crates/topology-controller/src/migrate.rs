//! Moving slots between primaries with the classic protocol, several slots at a time.

use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::future::join_all;
use topology_controller::model::Address;
use topology_controller::slots::Move;

use crate::valkey::{Conn, SlotState};

/// Slot moves stop after this long so status and the rest of the plan get a turn.
const BUDGET: Duration = Duration::from_secs(20);
/// Keys per GETKEYSINSLOT / MIGRATE batch.
const BATCH: u32 = 500;
/// Slots in flight at once. Each slot's own commands stay in order; interleaving slots hides
/// the round trips, which dominate when most slots hold few keys.
const SLOTS_IN_FLIGHT: usize = 16;

/// A member that answered, as one end of a move.
pub struct End<'a> {
    pub name: &'a str,
    pub conn: &'a Conn,
    pub id: &'a str,
    pub address: &'a Address,
    pub primary: bool,
}

/// Moves the slots of `moves`. Stops after [`BUDGET`]; a slot cut off midway (here or by a
/// crash) stays open and the planner's FixOpenSlot step finishes it. Returns the number of
/// slots moved.
pub async fn migrate(moves: &[Move<String>], ends: &[End<'_>]) -> Result<usize, String> {
    let end = |name: &str| {
        ends.iter()
            .find(|e| e.name == name)
            .ok_or_else(|| format!("{name} does not answer"))
    };
    let primaries: Vec<&Conn> = ends.iter().filter(|e| e.primary).map(|e| e.conn).collect();
    let started = Instant::now();
    let mut moved = 0;
    for m in moves {
        let (source, target) = (end(&m.from)?, end(&m.to)?);
        let slots = (m.slots.0..=m.slots.1).take_while(|_| started.elapsed() < BUDGET);
        let mut results = futures::stream::iter(slots)
            .map(|slot| move_slot(slot, source, target, &primaries))
            .buffer_unordered(SLOTS_IN_FLIGHT);
        while let Some(result) = results.next().await {
            result?;
            moved += 1;
        }
        if started.elapsed() >= BUDGET {
            break;
        }
    }
    Ok(moved)
}

/// One slot: IMPORTING on the target, MIGRATING on the source, the keys in batches with
/// MIGRATE, then the new owner on the target, the source and every other primary.
async fn move_slot(
    slot: u16,
    source: &End<'_>,
    target: &End<'_>,
    primaries: &[&Conn],
) -> Result<(), String> {
    let at = |what: &str, e: fred::error::Error| {
        format!(
            "slot {slot} {} -> {}: {what}: {e}",
            source.name, target.name
        )
    };
    target
        .conn
        .set_slot(slot, SlotState::Importing(source.id))
        .await
        .map_err(|e| at("SETSLOT IMPORTING", e))?;
    source
        .conn
        .set_slot(slot, SlotState::Migrating(target.id))
        .await
        .map_err(|e| at("SETSLOT MIGRATING", e))?;
    loop {
        let keys = source
            .conn
            .keys_in_slot(slot, BATCH)
            .await
            .map_err(|e| at("GETKEYSINSLOT", e))?;
        if keys.is_empty() {
            break;
        }
        source
            .conn
            .migrate(&target.address.ip, target.address.port, keys)
            .await
            .map_err(|e| at("MIGRATE", e))?;
    }
    // Target first: once it owns the slot, the source's redirects point at it.
    target
        .conn
        .set_slot(slot, SlotState::Node(target.id))
        .await
        .map_err(|e| at("SETSLOT NODE on the target", e))?;
    // A source that gave away its last slot may already have turned into a replica of the
    // target (cluster-allow-replica-migration) and refuse SETSLOT: it knows anyway.
    if let Err(e) = source.conn.set_slot(slot, SlotState::Node(target.id)).await
        && !e.details().contains("only with masters")
    {
        return Err(at("SETSLOT NODE on the source", e));
    }
    // Best effort, all at once: gossip spreads the new owner anyway.
    join_all(
        primaries
            .iter()
            .map(|other| other.set_slot(slot, SlotState::Node(target.id))),
    )
    .await;
    Ok(())
}
