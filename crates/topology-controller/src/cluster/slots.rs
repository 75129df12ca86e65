//! Hash-slot planning: the initial even split, and the moves that rebalance a cluster when
//! primaries join or leave. Generic over how a primary is named (a node id, a shard index...).

use std::collections::{BTreeMap, BTreeSet};

/// Number of hash slots in a Valkey cluster.
pub const SLOTS: u16 = 16384;

/// An inclusive range of slots, `(first, last)`; a single slot is `(n, n)`.
pub type SlotRange = (u16, u16);

/// The contiguous split `valkey-cli --cluster create` assigns to `shards` primaries, so a
/// cluster we create looks like one made by hand. For 3 shards: 0-5460, 5461-10922,
/// 10923-16383. Each shard gets one range, sizes within one slot of each other.
pub fn even_split(shards: usize) -> Vec<Vec<SlotRange>> {
    // valkey-cli accumulates the per-node share in single precision and rounds each boundary;
    // the same float arithmetic reproduces its output exactly.
    let slots_per_shard = f32::from(SLOTS) / shards as f32;
    let mut cursor = 0.0_f32;
    let mut first = 0_u32;
    let mut split = Vec::with_capacity(shards);
    for shard in 0..shards {
        if first >= u32::from(SLOTS) {
            // More shards than slots: the rest stay empty.
            split.push(Vec::new());
            continue;
        }
        let rounded = (cursor + slots_per_shard - 1.0).round() as u32;
        let last = if shard == shards - 1 {
            u32::from(SLOTS) - 1
        } else {
            rounded.clamp(first, u32::from(SLOTS) - 1)
        };
        split.push(vec![(first as u16, last as u16)]);
        first = last + 1;
        cursor += slots_per_shard;
    }
    split
}

/// Number of slots in `ranges`.
pub fn slot_count(ranges: &[SlotRange]) -> usize {
    ranges
        .iter()
        .map(|&(first, last)| usize::from(last - first) + 1)
        .sum()
}

/// Compresses slots (any order, duplicates allowed) into sorted, maximal ranges.
pub fn ranges_from_slots(slots: impl IntoIterator<Item = u16>) -> Vec<SlotRange> {
    let mut slots: Vec<u16> = slots.into_iter().collect();
    slots.sort_unstable();
    slots.dedup();
    let mut ranges: Vec<SlotRange> = Vec::new();
    for slot in slots {
        match ranges.last_mut() {
            Some((_, last)) if *last + 1 == slot => *last = slot,
            _ => ranges.push((slot, slot)),
        }
    }
    ranges
}

/// `"0-5460"`, or `"123"` for a single slot: the form Valkey prints and
/// `ShardStatus.slots` holds.
pub fn format_range((first, last): SlotRange) -> String {
    if first == last {
        first.to_string()
    } else {
        format!("{first}-{last}")
    }
}

/// [`format_range`] for each range.
pub fn format_ranges(ranges: &[SlotRange]) -> Vec<String> {
    ranges.iter().copied().map(format_range).collect()
}

/// The slots no primary in `ownership` owns.
pub fn unassigned<P>(ownership: &BTreeMap<P, Vec<SlotRange>>) -> Vec<SlotRange> {
    let mut owned = vec![false; usize::from(SLOTS)];
    for &(first, last) in ownership.values().flatten() {
        for slot in first..=last.min(SLOTS - 1) {
            owned[usize::from(slot)] = true;
        }
    }
    ranges_from_slots((0..SLOTS).filter(|&slot| !owned[usize::from(slot)]))
}

/// Slots to migrate from one primary to another (`CLUSTER SETSLOT ... IMPORTING/MIGRATING`,
/// `MIGRATE`, `SETSLOT ... NODE`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Move<P> {
    pub slots: SlotRange,
    pub from: P,
    pub to: P,
}

/// Unowned slots to give a primary (`CLUSTER ADDSLOTSRANGE`); they hold no keys, so nothing
/// migrates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assignment<P> {
    pub slots: SlotRange,
    pub to: P,
}

/// What it takes to reach an even split.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RebalancePlan<P> {
    /// Unassigned slots to add, grouped by receiving primary.
    pub assignments: Vec<Assignment<P>>,
    /// Migrations, grouped by receiving primary, then by donor.
    pub moves: Vec<Move<P>>,
}

impl<P> RebalancePlan<P> {
    /// Nothing to do: the ownership is already balanced.
    pub fn is_empty(&self) -> bool {
        self.assignments.is_empty() && self.moves.is_empty()
    }

    /// Slots that migrate (with their keys), the cost of the plan (only tests weigh it).
    #[cfg(test)]
    pub fn moved_slot_count(&self) -> usize {
        self.moves.iter().map(|m| slot_count(&[m.slots])).sum()
    }
}

/// Why the ownership handed to [`plan_rebalance`] cannot be planned from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("no primaries to spread the slots over")]
    NoPrimaries,
    #[error("slot range {} is not within 0-{}", format_range(*.0), SLOTS - 1)]
    InvalidRange(SlotRange),
    #[error("slot {0} has more than one owner")]
    SlotOwnedTwice(u16),
}

/// Plans how to go from `ownership` (each primary's slots) to an even split over `primaries`:
/// every one of them ends with 16384/n slots or one more, and owners not in `primaries` end
/// with none. Unassigned slots are handed out first, since they carry no keys; then donors
/// (above their target) give their highest slots to receivers (below it), so each donor keeps
/// one end of what it had and the fewest possible slots migrate. Primaries holding the most
/// today keep the spare slots of an uneven division, again to move less. The plan depends only
/// on its inputs, ordered by `P`.
pub fn plan_rebalance<P: Ord + Clone>(
    ownership: &BTreeMap<P, Vec<SlotRange>>,
    primaries: &BTreeSet<P>,
) -> Result<RebalancePlan<P>, PlanError> {
    if primaries.is_empty() {
        return Err(PlanError::NoPrimaries);
    }
    let held = slots_by_owner(ownership)?;
    let count_of = |p: &P| held.get(p).map_or(0, Vec::len);

    let targets = targets(primaries, count_of);
    let target_of = |p: &P| targets.get(p).copied().unwrap_or(0);

    // Every owner and every future primary, in `P` order.
    let everyone: BTreeSet<&P> = held.keys().copied().chain(primaries).collect();

    // Slots donors give up, each donor's highest, in donor order.
    let mut donated: Vec<(u16, &P)> = Vec::new();
    for &donor in &everyone {
        let (count, target) = (count_of(donor), target_of(donor));
        if count > target {
            donated.extend(held[donor][target..].iter().map(|&slot| (slot, donor)));
        }
    }
    let free: Vec<u16> = unassigned(ownership)
        .into_iter()
        .flat_map(|(first, last)| first..=last)
        .collect();

    let (mut free, mut donated) = (free.into_iter(), donated.into_iter());
    let mut plan = RebalancePlan {
        assignments: Vec::new(),
        moves: Vec::new(),
    };
    for &receiver in &everyone {
        let mut wanted = target_of(receiver).saturating_sub(count_of(receiver));
        let from_free: Vec<u16> = free.by_ref().take(wanted).collect();
        wanted -= from_free.len();
        for slots in ranges_from_slots(from_free) {
            plan.assignments.push(Assignment {
                slots,
                to: receiver.clone(),
            });
        }
        for (slot, donor) in donated.by_ref().take(wanted) {
            match plan.moves.last_mut() {
                Some(last)
                    if last.to == *receiver && last.from == *donor && last.slots.1 + 1 == slot =>
                {
                    last.slots.1 = slot
                }
                _ => plan.moves.push(Move {
                    slots: (slot, slot),
                    from: donor.clone(),
                    to: receiver.clone(),
                }),
            }
        }
    }
    Ok(plan)
}

/// Each owner's slots, ascending; refuses out-of-range slots and slots owned twice.
fn slots_by_owner<P: Ord>(
    ownership: &BTreeMap<P, Vec<SlotRange>>,
) -> Result<BTreeMap<&P, Vec<u16>>, PlanError> {
    let mut owned = vec![false; usize::from(SLOTS)];
    let mut held = BTreeMap::new();
    for (owner, ranges) in ownership {
        let mut slots = Vec::new();
        for &(first, last) in ranges {
            if first > last || last >= SLOTS {
                return Err(PlanError::InvalidRange((first, last)));
            }
            for slot in first..=last {
                if std::mem::replace(&mut owned[usize::from(slot)], true) {
                    return Err(PlanError::SlotOwnedTwice(slot));
                }
                slots.push(slot);
            }
        }
        slots.sort_unstable();
        held.insert(owner, slots);
    }
    Ok(held)
}

/// How many slots each primary should end with: 16384/n, plus one for the `16384 % n`
/// primaries holding the most now (ties by `P` order).
fn targets<P: Ord>(primaries: &BTreeSet<P>, count_of: impl Fn(&P) -> usize) -> BTreeMap<&P, usize> {
    let base = usize::from(SLOTS) / primaries.len();
    let spare = usize::from(SLOTS) % primaries.len();
    let mut by_holding: Vec<&P> = primaries.iter().collect();
    // Stable sort: equal holdings stay in `P` order.
    by_holding.sort_by_key(|&p| std::cmp::Reverse(count_of(p)));
    by_holding
        .into_iter()
        .enumerate()
        .map(|(rank, p)| (p, base + usize::from(rank < spare)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ownership(entries: &[(&str, &[SlotRange])]) -> BTreeMap<String, Vec<SlotRange>> {
        entries
            .iter()
            .map(|(p, ranges)| (p.to_string(), ranges.to_vec()))
            .collect()
    }

    fn primaries(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|p| p.to_string()).collect()
    }

    /// The ownership after carrying out `plan`; panics if a move takes slots the donor does
    /// not own or an assignment gives slots someone owns, which is what the tests check.
    fn apply(
        ownership: &BTreeMap<String, Vec<SlotRange>>,
        plan: &RebalancePlan<String>,
    ) -> BTreeMap<String, Vec<SlotRange>> {
        let mut owner: Vec<Option<String>> = vec![None; usize::from(SLOTS)];
        for (p, ranges) in ownership {
            for &(first, last) in ranges {
                for slot in first..=last {
                    owner[usize::from(slot)] = Some(p.clone());
                }
            }
        }
        for a in &plan.assignments {
            for slot in a.slots.0..=a.slots.1 {
                let current = owner[usize::from(slot)].replace(a.to.clone());
                assert_eq!(current, None, "assignment of owned slot {slot}");
            }
        }
        for m in &plan.moves {
            for slot in m.slots.0..=m.slots.1 {
                let current = owner[usize::from(slot)].replace(m.to.clone());
                assert_eq!(current.as_ref(), Some(&m.from), "move of slot {slot}");
            }
        }
        let mut after: BTreeMap<String, Vec<u16>> = BTreeMap::new();
        for (slot, p) in owner.into_iter().enumerate() {
            let p = p.unwrap_or_else(|| panic!("slot {slot} has no owner after the plan"));
            after.entry(p).or_default().push(slot as u16);
        }
        after
            .into_iter()
            .map(|(p, slots)| (p, ranges_from_slots(slots)))
            .collect()
    }

    /// Every slot has one owner, only `primaries` own slots, and each owns 16384/n or one more.
    fn assert_balanced(after: &BTreeMap<String, Vec<SlotRange>>, primaries: &BTreeSet<String>) {
        let total: usize = after.values().map(|r| slot_count(r)).sum();
        assert_eq!(total, usize::from(SLOTS));
        let base = usize::from(SLOTS) / primaries.len();
        for (p, ranges) in after {
            assert!(primaries.contains(p), "{p} still owns {ranges:?}");
        }
        for p in primaries {
            let count = after.get(p).map_or(0, |r| slot_count(r));
            assert!(count == base || count == base + 1, "{p} owns {count} slots");
        }
    }

    fn split_strings(shards: usize) -> Vec<String> {
        even_split(shards)
            .iter()
            .map(|ranges| format_ranges(ranges).join(" "))
            .collect()
    }

    #[test]
    fn even_split_matches_valkey_cli_create() {
        // What valkey-cli 8.0's allocation loop, compiled from its source, prints for these
        // counts (3 shards also checked against a real `--cluster create`).
        assert_eq!(split_strings(1), ["0-16383"]);
        assert_eq!(split_strings(2), ["0-8191", "8192-16383"]);
        assert_eq!(split_strings(3), ["0-5460", "5461-10922", "10923-16383"]);
        assert_eq!(
            split_strings(5),
            [
                "0-3276",
                "3277-6553",
                "6554-9829",
                "9830-13106",
                "13107-16383"
            ]
        );
        assert_eq!(
            split_strings(7),
            [
                "0-2340",
                "2341-4680",
                "4681-7021",
                "7022-9361",
                "9362-11702",
                "11703-14042",
                "14043-16383"
            ]
        );
        let hundred = split_strings(100);
        assert_eq!(hundred[..4], ["0-163", "164-327", "328-491", "492-654"]);
        assert_eq!(hundred[99], "16220-16383");
        let five_hundred = split_strings(500);
        assert_eq!(five_hundred[..3], ["0-32", "33-65", "66-97"]);
        assert_eq!(five_hundred[499], "16351-16383");
    }

    #[test]
    fn even_split_covers_every_slot_once_in_near_equal_ranges() {
        for shards in 1..=500 {
            let split = even_split(shards);
            assert_eq!(split.len(), shards);
            let mut next = 0_u32;
            for ranges in &split {
                let [(first, last)] = ranges[..] else {
                    panic!("{shards} shards: {ranges:?} is not one range");
                };
                assert_eq!(u32::from(first), next, "{shards} shards");
                let size = slot_count(ranges);
                let base = usize::from(SLOTS) / shards;
                assert!(size == base || size == base + 1, "{shards} shards: {size}");
                next = u32::from(last) + 1;
            }
            assert_eq!(next, u32::from(SLOTS));
        }
    }

    #[test]
    fn even_split_of_nothing_is_empty() {
        assert!(even_split(0).is_empty());
    }

    #[test]
    fn ranges_compress_sorted_or_not() {
        assert_eq!(
            ranges_from_slots([5, 1, 2, 3, 9, 2, 16383, 10]),
            [(1, 3), (5, 5), (9, 10), (16383, 16383)]
        );
        assert_eq!(ranges_from_slots([]), []);
        assert_eq!(ranges_from_slots(0..SLOTS), [(0, 16383)]);
    }

    #[test]
    fn ranges_format_like_valkey() {
        assert_eq!(format_range((0, 5460)), "0-5460");
        assert_eq!(format_range((123, 123)), "123");
        assert_eq!(format_ranges(&[(0, 99), (100, 100)]), ["0-99", "100"]);
        assert_eq!(slot_count(&[(0, 99), (100, 100)]), 101);
    }

    #[test]
    fn unassigned_slots_are_the_gaps() {
        let owned = ownership(&[("a", &[(0, 5460)]), ("b", &[(5462, 10922), (16383, 16383)])]);
        assert_eq!(unassigned(&owned), [(5461, 5461), (10923, 16382)]);
        assert_eq!(unassigned(&BTreeMap::<String, _>::new()), [(0, 16383)]);
        let all = ownership(&[("a", &[(0, 16383)])]);
        assert!(unassigned(&all).is_empty());
    }

    #[test]
    fn balanced_ownership_needs_nothing() {
        let owned = ownership(&[
            ("a", &[(0, 5460)]),
            ("b", &[(5461, 10922)]),
            ("c", &[(10923, 16383)]),
        ]);
        let plan = plan_rebalance(&owned, &primaries(&["a", "b", "c"])).unwrap();
        assert!(plan.is_empty(), "{plan:?}");
    }

    #[test]
    fn balanced_but_scattered_ownership_needs_nothing() {
        // Counts are what matter: no slot moves just to tidy ranges up.
        let owned = ownership(&[
            ("a", &[(0, 100), (200, 5559)]),
            ("b", &[(101, 199), (5560, 10922)]),
            ("c", &[(10923, 16383)]),
        ]);
        let plan = plan_rebalance(&owned, &primaries(&["a", "b", "c"])).unwrap();
        assert!(plan.is_empty(), "{plan:?}");
    }

    #[test]
    fn only_the_surplus_moves() {
        let owned = ownership(&[
            ("a", &[(0, 4000), (10923, 12382)]),
            ("b", &[(4001, 10922)]),
            ("c", &[(12383, 16383)]),
        ]);
        let counts: Vec<usize> = owned.values().map(|r| slot_count(r)).collect();
        assert_eq!(counts, [5461, 6922, 4001]);
        let plan = plan_rebalance(&owned, &primaries(&["a", "b", "c"])).unwrap();
        // b keeps the spare slot (5462) and gives the other 1460 to c; a is left alone.
        assert_eq!(
            plan.moves,
            [Move {
                slots: (9463, 10922),
                from: "b".to_string(),
                to: "c".to_string()
            }]
        );
        assert_balanced(&apply(&owned, &plan), &primaries(&["a", "b", "c"]));
    }

    #[test]
    fn scaling_three_to_four_moves_a_quarter_of_the_slots() {
        let owned: BTreeMap<String, Vec<SlotRange>> = ["a", "b", "c"]
            .into_iter()
            .map(String::from)
            .zip(even_split(3))
            .collect();
        let four = primaries(&["a", "b", "c", "d"]);
        let plan = plan_rebalance(&owned, &four).unwrap();

        assert!(plan.assignments.is_empty());
        assert_eq!(plan.moved_slot_count(), 4096);
        assert_eq!(
            plan.moves,
            [
                Move {
                    slots: (4096, 5460),
                    from: "a".to_string(),
                    to: "d".to_string()
                },
                Move {
                    slots: (9557, 10922),
                    from: "b".to_string(),
                    to: "d".to_string()
                },
                Move {
                    slots: (15019, 16383),
                    from: "c".to_string(),
                    to: "d".to_string()
                },
            ]
        );
        let after = apply(&owned, &plan);
        assert_balanced(&after, &four);
        assert_eq!(after["a"], [(0, 4095)], "donors keep one contiguous range");
    }

    #[test]
    fn scaling_four_to_three_drains_the_leaving_primary() {
        let owned: BTreeMap<String, Vec<SlotRange>> = ["a", "b", "c", "d"]
            .into_iter()
            .map(String::from)
            .zip(even_split(4))
            .collect();
        let three = primaries(&["a", "b", "c"]);
        let plan = plan_rebalance(&owned, &three).unwrap();

        assert_eq!(plan.moved_slot_count(), 4096, "only d's slots move");
        assert!(plan.moves.iter().all(|m| m.from == "d"));
        // 16384 = 3 * 5461 + 1: the spare slot goes to the first of the equals.
        let received: Vec<(String, SlotRange)> =
            plan.moves.iter().map(|m| (m.to.clone(), m.slots)).collect();
        assert_eq!(
            received,
            [
                ("a".to_string(), (12288, 13653)),
                ("b".to_string(), (13654, 15018)),
                ("c".to_string(), (15019, 16383)),
            ]
        );
        let after = apply(&owned, &plan);
        assert_balanced(&after, &three);
        assert!(!after.contains_key("d"));
    }

    #[test]
    fn the_spare_slot_stays_where_it_is() {
        // Scaling 3 -> 4 -> 3 should not move slots for the uneven remainder: the primary
        // already holding one slot more than its peers keeps it.
        let owned = ownership(&[
            ("a", &[(0, 5460)]),
            ("b", &[(5461, 10922)]),
            ("c", &[(10923, 16383)]),
        ]);
        assert_eq!(slot_count(&owned["b"]), 5462);
        let plan = plan_rebalance(&owned, &primaries(&["a", "b", "c"])).unwrap();
        assert!(plan.is_empty());
    }

    #[test]
    fn replacing_a_primary_moves_only_its_slots() {
        let owned: BTreeMap<String, Vec<SlotRange>> = ["a", "b", "c"]
            .into_iter()
            .map(String::from)
            .zip(even_split(3))
            .collect();
        let target = primaries(&["a", "b", "z"]);
        let plan = plan_rebalance(&owned, &target).unwrap();
        assert_eq!(
            plan.moves,
            [Move {
                slots: (10923, 16383),
                from: "c".to_string(),
                to: "z".to_string()
            }]
        );
        assert_balanced(&apply(&owned, &plan), &target);
    }

    #[test]
    fn unassigned_slots_are_assigned_before_any_move() {
        // A half-finished create: slots 10923-16383 were never added.
        let owned = ownership(&[("a", &[(0, 5460)]), ("b", &[(5461, 10922)])]);
        let three = primaries(&["a", "b", "c"]);
        let plan = plan_rebalance(&owned, &three).unwrap();
        assert!(plan.moves.is_empty(), "{:?}", plan.moves);
        assert_eq!(
            plan.assignments,
            [Assignment {
                slots: (10923, 16383),
                to: "c".to_string()
            }]
        );
        assert_balanced(&apply(&owned, &plan), &three);
    }

    #[test]
    fn an_empty_cluster_gets_the_whole_range_spread() {
        let owned = BTreeMap::new();
        let three = primaries(&["a", "b", "c"]);
        let plan = plan_rebalance(&owned, &three).unwrap();
        assert!(plan.moves.is_empty());
        assert_eq!(plan.assignments.len(), 3);
        assert_balanced(&apply(&owned, &plan), &three);
    }

    #[test]
    fn uneven_and_fragmented_ownership_is_balanced_minimally() {
        let owned = ownership(&[
            ("a", &[(0, 9999)]),
            ("b", &[(10000, 10010), (12000, 12000)]),
            ("c", &[(10011, 11999), (12001, 15000)]),
            ("leaving", &[(15001, 16000)]),
        ]);
        // 16001-16383 unassigned.
        let target = primaries(&["a", "b", "c", "new"]);
        let plan = plan_rebalance(&owned, &target).unwrap();
        // a holds 10000 and must end with 4096; c holds 4989; leaving holds 1000: their
        // surplus is all that may migrate.
        assert_eq!(
            plan.moved_slot_count(),
            (10000 - 4096) + (4989 - 4096) + 1000
        );
        assert_eq!(plan.assignments[0].slots, (16001, 16383));
        assert_balanced(&apply(&owned, &plan), &target);
    }

    #[test]
    fn plans_are_balanced_for_every_shard_count_change() {
        for from in 1..=12 {
            let names: Vec<String> = (0..from).map(|i| format!("p{i:02}")).collect();
            let owned: BTreeMap<String, Vec<SlotRange>> =
                names.iter().cloned().zip(even_split(from)).collect();
            for to in 1..=12 {
                let target: BTreeSet<String> = (0..to).map(|i| format!("p{i:02}")).collect();
                let plan = plan_rebalance(&owned, &target).unwrap();
                assert_eq!(plan, plan_rebalance(&owned, &target).unwrap());
                let after = apply(&owned, &plan);
                assert_balanced(&after, &target);
                // Moving fewer is impossible: every owner above its final count had to give.
                let must_give: usize = owned
                    .iter()
                    .map(|(p, r)| {
                        slot_count(r).saturating_sub(after.get(p).map_or(0, |a| slot_count(a)))
                    })
                    .sum();
                assert_eq!(plan.moved_slot_count(), must_give, "{from} -> {to}");
            }
        }
    }

    #[test]
    fn plans_work_with_any_ordered_identifier() {
        let owned: BTreeMap<u32, Vec<SlotRange>> = (0..2).zip(even_split(2)).collect();
        let plan = plan_rebalance(&owned, &(0..4).collect()).unwrap();
        assert_eq!(plan.moved_slot_count(), 8192);
        assert!(plan.moves.iter().all(|m| m.to >= 2));
    }

    #[test]
    fn malformed_ownership_is_refused() {
        let three = primaries(&["a", "b", "c"]);
        let overlapping = ownership(&[("a", &[(0, 100)]), ("b", &[(100, 200)])]);
        assert_eq!(
            plan_rebalance(&overlapping, &three),
            Err(PlanError::SlotOwnedTwice(100))
        );
        let beyond = ownership(&[("a", &[(16000, 16384)])]);
        assert_eq!(
            plan_rebalance(&beyond, &three),
            Err(PlanError::InvalidRange((16000, 16384)))
        );
        let reversed = ownership(&[("a", &[(9, 3)])]);
        assert_eq!(
            plan_rebalance(&reversed, &three).unwrap_err().to_string(),
            "slot range 9-3 is not within 0-16383"
        );
        assert_eq!(
            plan_rebalance(&overlapping, &BTreeSet::new()),
            Err(PlanError::NoPrimaries)
        );
    }
}
