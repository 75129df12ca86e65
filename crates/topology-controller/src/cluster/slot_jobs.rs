//! Atomic slot migration's facts (Valkey 9.0+): which versions have it, and
//! `CLUSTER GETSLOTMIGRATIONS` read: the jobs a node sends or receives, finished ones
//! included. The planner and the fakes read them here; [`crate::cluster::atomic`] moves the slots.

use crate::shared::commands::Fields;
use crd_types::versions::Version;

/// The first version with atomic slot migration.
pub const SINCE: Version = Version::new(9, 0);

/// Whether both ends of every move run a version with atomic slot migration.
pub fn all_support(versions: impl IntoIterator<Item = Option<Version>>) -> bool {
    versions.into_iter().all(|v| v.is_some_and(|v| v >= SINCE))
}

/// One slot migration job as `CLUSTER GETSLOTMIGRATIONS` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotJob {
    /// The job's id, the same on source and target.
    pub name: String,
    /// This node sends the slots (`EXPORT`), rather than receiving them (`IMPORT`).
    pub export: bool,
    /// The ranges as Valkey prints them (`0-99 200-299`).
    pub slot_ranges: String,
    pub source: String,
    pub target: String,
    pub state: String,
    /// Why it failed; empty otherwise.
    pub message: String,
}

impl SlotJob {
    /// A job from its fields; `None` when one is missing.
    pub fn parse(fields: &Fields) -> Option<SlotJob> {
        let get = |k: &str| fields.get(k).cloned();
        Some(SlotJob {
            name: get("name")?,
            export: get("operation")? == "EXPORT",
            slot_ranges: get("slot_ranges")?,
            source: get("source_node")?,
            target: get("target_node")?,
            state: get("state")?,
            message: get("message").unwrap_or_default(),
        })
    }

    /// Still running: neither `success`, `failed` nor `cancelled`.
    pub fn in_flight(&self) -> bool {
        !matches!(self.state.as_str(), "success" | "failed" | "cancelled")
    }

    /// How many slots it moves.
    pub fn slots(&self) -> usize {
        self.slot_ranges
            .split_whitespace()
            .map(|r| {
                let (start, end) = r.split_once('-').unwrap_or((r, r));
                match (start.parse::<usize>(), end.parse::<usize>()) {
                    (Ok(s), Ok(e)) if e >= s => e - s + 1,
                    _ => 0,
                }
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_from_getslotmigrations_fields() {
        // As 9.1.2 answered (RESP2 pairs), shortened ids.
        let fields: Fields = [
            ("name", "4dc0"),
            ("operation", "EXPORT"),
            ("slot_ranges", "0-99 200-299 512"),
            ("target_node", "f242"),
            ("source_node", "bdec"),
            ("create_time", "1796173531"),
            ("state", "snapshotting"),
            ("message", ""),
            ("cow_size", "0"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let job = SlotJob::parse(&fields).unwrap();
        assert!(job.export && job.in_flight());
        assert_eq!(job.slots(), 201);
        assert_eq!((job.source.as_str(), job.target.as_str()), ("bdec", "f242"));
        for (state, in_flight) in [
            ("waiting-to-snapshot", true),
            ("failover-granted", true),
            ("success", false),
            ("failed", false),
            ("cancelled", false),
        ] {
            let job = SlotJob {
                state: state.into(),
                ..job.clone()
            };
            assert_eq!(job.in_flight(), in_flight, "{state}");
        }
        let mut partial = fields.clone();
        partial.remove("state");
        assert_eq!(SlotJob::parse(&partial), None);
    }
}
