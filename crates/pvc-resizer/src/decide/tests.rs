use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

const MI: u128 = 1 << 20;
const GI: u128 = 1 << 30;

fn at(second: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + second).unwrap()
}

fn auto(threshold: i32, increase: &str, min: &str, limit: &str, cooldown: i32) -> AutoResize {
    AutoResize {
        used_percent_threshold: threshold,
        increase: increase.into(),
        limit: limit.into(),
        min_increase: min.into(),
        cooldown_seconds: cooldown,
    }
}

fn claim(requested: u128, capacity: u128) -> ClaimState {
    ClaimState {
        requested: Some(requested),
        capacity: Some(capacity),
        bound: true,
        storage_class: Some("fast".into()),
        ..Default::default()
    }
}

fn used(used: u64, capacity: u64) -> Usage {
    Usage::Known(VolumeUsage {
        used_bytes: used,
        capacity_bytes: capacity,
        available_bytes: capacity.saturating_sub(used),
    })
}

/// One row: the decision for these inputs at `at(0)`.
fn row(
    spec: &str,
    auto_resize: Option<AutoResize>,
    claim: Option<ClaimState>,
    usage: Usage,
    expandable: Option<bool>,
) -> Decision {
    decide(&Inputs {
        spec_size: spec,
        auto_resize: auto_resize.as_ref(),
        claim: claim.as_ref(),
        usage: &usage,
        expandable,
        last_resize: None,
        now: at(0),
    })
}

fn reason(d: &Decision) -> Option<StorageReady> {
    match d {
        Decision::Hold { reason, .. } => Some(*reason),
        Decision::Grow { .. } => None,
    }
}

fn grows_to(d: &Decision) -> Option<u128> {
    match d {
        Decision::Grow { to, .. } => Some(*to),
        Decision::Hold { .. } => None,
    }
}

/// One table row: its name, the decision, the size it grows to and the reason it holds with.
type Case = (&'static str, Decision, Option<u128>, Option<StorageReady>);

/// Checks every row, and that no growth shrinks the claim (rule 5).
#[track_caller]
fn check(cases: Vec<Case>) {
    for (name, decision, to, held) in cases {
        assert_eq!(grows_to(&decision), to, "{name}: {decision:?}");
        assert_eq!(reason(&decision), held, "{name}: {decision:?}");
        if let Decision::Grow { from, to, .. } = decision {
            assert!(to > from, "{name}: never shrinks");
        }
    }
}

/// autoResize at 50 %, doubling, up to 64Mi, no cooldown.
fn half() -> Option<AutoResize> {
    Some(auto(50, "100%", "1Mi", "64Mi", 0))
}

/// autoResize at 80 %, by 20 % but at least 1Gi, up to 10Gi, a 5-minute cooldown.
fn tiny() -> Option<AutoResize> {
    Some(auto(80, "20%", "1Gi", "10Gi", 300))
}

#[test]
fn a_claim_missing_or_not_bound_holds() {
    check(vec![
        // No claim yet, not bound.
        (
            "no claim",
            row("16Mi", half(), None, Usage::Unread, None),
            None,
            Some(StorageReady::ClaimMissing),
        ),
        (
            "unbound",
            row(
                "16Mi",
                half(),
                Some(ClaimState {
                    bound: false,
                    ..claim(16 * MI, 16 * MI)
                }),
                Usage::Unread,
                None,
            ),
            None,
            Some(StorageReady::ClaimNotBound),
        ),
    ]);
}

#[test]
fn usage_grows_the_claim_a_step_at_a_time_up_to_the_limit() {
    check(vec![
        // Idle, with and without autoResize.
        (
            "idle",
            row(
                "16Mi",
                None,
                Some(claim(16 * MI, 16 * MI)),
                Usage::Unread,
                None,
            ),
            None,
            Some(StorageReady::VolumeReady),
        ),
        (
            "below threshold",
            row(
                "16Mi",
                half(),
                Some(claim(16 * MI, 16 * MI)),
                used(7 << 20, 16 << 20),
                None,
            ),
            None,
            Some(StorageReady::VolumeReady),
        ),
        // The threshold is inclusive: 50 % of the kubelet's capacity.
        (
            "at threshold",
            row(
                "16Mi",
                half(),
                Some(claim(16 * MI, 16 * MI)),
                used(8 << 20, 16 << 20),
                None,
            ),
            Some(32 * MI),
            None,
        ),
        // The second step, then the limit (4x).
        (
            "second step",
            row(
                "16Mi",
                half(),
                Some(claim(32 * MI, 32 * MI)),
                used(20 << 20, 32 << 20),
                None,
            ),
            Some(64 * MI),
            None,
        ),
        (
            "at limit",
            row(
                "16Mi",
                half(),
                Some(claim(64 * MI, 64 * MI)),
                used(40 << 20, 64 << 20),
                None,
            ),
            None,
            Some(StorageReady::LimitReached),
        ),
        (
            "at limit, below threshold",
            row(
                "16Mi",
                half(),
                Some(claim(64 * MI, 64 * MI)),
                used(10 << 20, 64 << 20),
                None,
            ),
            None,
            Some(StorageReady::VolumeReady),
        ),
    ]);
}

#[test]
fn a_usage_step_is_at_least_the_minimum_and_at_most_the_limit() {
    check(vec![
        // 20 % of 1Gi is 205Mi; the minimum step makes it 1Gi.
        (
            "minimum step",
            row(
                "1Gi",
                tiny(),
                Some(claim(GI, GI)),
                used(900 << 20, 1 << 30),
                None,
            ),
            Some(2 * GI),
            None,
        ),
        // A step above the limit stops at the limit.
        (
            "capped",
            row(
                "1Gi",
                Some(auto(80, "20%", "1Gi", "1536Mi", 0)),
                Some(claim(GI, GI)),
                used(900 << 20, 1 << 30),
                None,
            ),
            Some(1536 * MI),
            None,
        ),
        // A zero increase with a one-byte minimum still moves a whole MiB.
        (
            "smallest step",
            row(
                "16Mi",
                Some(auto(50, "0", "1", "64Mi", 0)),
                Some(claim(16 * MI, 16 * MI)),
                used(15 << 20, 16 << 20),
                None,
            ),
            Some(17 * MI),
            None,
        ),
    ]);
}

#[test]
fn a_reading_from_before_the_last_growth_is_not_used() {
    check(vec![
        // A reading from before the last growth reached the file system is not used.
        (
            "stale reading",
            row(
                "16Mi",
                half(),
                Some(ClaimState {
                    capacity_before_resize: Some(16 << 20),
                    ..claim(32 * MI, 32 * MI)
                }),
                used(9 << 20, 16 << 20),
                None,
            ),
            None,
            Some(StorageReady::Resizing),
        ),
        (
            "fresh reading",
            row(
                "16Mi",
                half(),
                Some(ClaimState {
                    capacity_before_resize: Some(16 << 20),
                    ..claim(32 * MI, 32 * MI)
                }),
                used(9 << 20, 32 << 20),
                None,
            ),
            None,
            Some(StorageReady::VolumeReady),
        ),
    ]);
}

#[test]
fn the_spec_grows_the_claim_and_nothing_shrinks_it() {
    check(vec![
        // The spec: grows past the threshold logic, without autoResize, beyond the limit.
        (
            "spec grows",
            row("2Gi", None, Some(claim(GI, GI)), Usage::Unread, None),
            Some(2 * GI),
            None,
        ),
        (
            "spec in other units",
            row(
                "2048Mi",
                None,
                Some(claim(2 * GI, 2 * GI)),
                Usage::Unread,
                None,
            ),
            None,
            Some(StorageReady::VolumeReady),
        ),
        (
            "spec beyond limit",
            row(
                "128Mi",
                half(),
                Some(claim(64 * MI, 64 * MI)),
                used(1, 64 << 20),
                None,
            ),
            Some(128 * MI),
            None,
        ),
        // Spec and usage both ask: the larger wins.
        (
            "spec and usage",
            row(
                "20Mi",
                half(),
                Some(claim(16 * MI, 16 * MI)),
                used(15 << 20, 16 << 20),
                None,
            ),
            Some(32 * MI),
            None,
        ),
        (
            "spec larger than usage step",
            row(
                "48Mi",
                half(),
                Some(claim(16 * MI, 16 * MI)),
                used(15 << 20, 16 << 20),
                None,
            ),
            Some(48 * MI),
            None,
        ),
        // Never shrinks: a claim above the spec stays.
        (
            "never shrinks",
            row(
                "16Mi",
                None,
                Some(claim(32 * MI, 32 * MI)),
                Usage::Unread,
                None,
            ),
            None,
            Some(StorageReady::VolumeReady),
        ),
    ]);
}

#[test]
fn one_growth_is_in_flight_at_a_time() {
    check(vec![
        // One growth in flight at a time.
        (
            "in flight",
            row(
                "32Mi",
                half(),
                Some(claim(32 * MI, 16 * MI)),
                used(15 << 20, 16 << 20),
                None,
            ),
            None,
            Some(StorageReady::Resizing),
        ),
        (
            "resizing condition",
            row(
                "32Mi",
                half(),
                Some(ClaimState {
                    resizing: true,
                    ..claim(32 * MI, 32 * MI)
                }),
                used(1, 32 << 20),
                None,
            ),
            None,
            Some(StorageReady::Resizing),
        ),
        (
            "fs pending",
            row(
                "32Mi",
                half(),
                Some(ClaimState {
                    file_system_resize_pending: true,
                    ..claim(32 * MI, 32 * MI)
                }),
                used(30 << 20, 32 << 20),
                None,
            ),
            None,
            Some(StorageReady::FileSystemResizePending),
        ),
        (
            "driver error",
            row(
                "32Mi",
                half(),
                Some(ClaimState {
                    resize_error: Some("NodeResizeError: x".into()),
                    ..claim(32 * MI, 16 * MI)
                }),
                Usage::Unread,
                None,
            ),
            None,
            Some(StorageReady::ResizeFailed),
        ),
    ]);
}

#[test]
fn a_storage_class_without_volume_expansion_holds_a_growth() {
    check(vec![
        // The StorageClass.
        (
            "not expandable",
            row("2Gi", None, Some(claim(GI, GI)), Usage::Unread, Some(false)),
            None,
            Some(StorageReady::NotExpandable),
        ),
        (
            "not expandable, nothing to do",
            row("1Gi", None, Some(claim(GI, GI)), Usage::Unread, Some(false)),
            None,
            Some(StorageReady::VolumeReady),
        ),
        (
            "expandable",
            row("2Gi", None, Some(claim(GI, GI)), Usage::Unread, Some(true)),
            Some(2 * GI),
            None,
        ),
    ]);
}

#[test]
fn unreadable_usage_and_unusable_auto_resize_grow_nothing_by_usage() {
    check(vec![
        // Usage cannot be read.
        (
            "stats unreadable",
            row(
                "16Mi",
                half(),
                Some(claim(16 * MI, 16 * MI)),
                Usage::Unreadable("connection refused".into()),
                None,
            ),
            None,
            Some(StorageReady::UsageUnknown),
        ),
        (
            "stats unreadable, spec grows",
            row(
                "32Mi",
                half(),
                Some(claim(16 * MI, 16 * MI)),
                Usage::Unreadable("x".into()),
                None,
            ),
            Some(32 * MI),
            None,
        ),
        (
            "zero capacity",
            row(
                "16Mi",
                half(),
                Some(claim(16 * MI, 16 * MI)),
                used(5, 0),
                None,
            ),
            None,
            Some(StorageReady::VolumeReady),
        ),
        // autoResize pvc-resizer cannot use.
        (
            "invalid",
            row(
                "16Mi",
                Some(auto(50, "lots", "1Mi", "64Mi", 0)),
                Some(claim(16 * MI, 16 * MI)),
                used(15 << 20, 16 << 20),
                None,
            ),
            None,
            Some(StorageReady::InvalidAutoResize),
        ),
    ]);
}

#[test]
fn the_cause_names_what_asked() {
    let half = auto(50, "100%", "1Mi", "64Mi", 0);
    let d = row(
        "16Mi",
        Some(half.clone()),
        Some(claim(16 * MI, 16 * MI)),
        used(12 << 20, 16 << 20),
        None,
    );
    assert_eq!(
        d,
        Decision::Grow {
            from: 16 * MI,
            to: 32 * MI,
            cause: Cause::Usage {
                used_percent: 75,
                threshold: 50
            },
            capacity_before: Some(16 << 20),
        }
    );
    let d = row(
        "48Mi",
        Some(half),
        Some(claim(16 * MI, 16 * MI)),
        used(12 << 20, 16 << 20),
        None,
    );
    assert!(matches!(
        d,
        Decision::Grow {
            cause: Cause::Spec,
            ..
        }
    ));
}

#[test]
fn the_cooldown_counts_from_the_last_growth() {
    let policy = auto(50, "100%", "1Mi", "64Mi", 60);
    let usage = used(20 << 20, 32 << 20);
    let decide_at = |last: Option<Timestamp>, now: Timestamp| {
        let c = ClaimState {
            last_resize: last,
            ..claim(32 * MI, 32 * MI)
        };
        decide(&Inputs {
            spec_size: "16Mi",
            auto_resize: Some(&policy),
            claim: Some(&c),
            usage: &usage,
            expandable: Some(true),
            last_resize: None,
            now,
        })
    };
    assert_eq!(
        reason(&decide_at(Some(at(0)), at(59))),
        Some(StorageReady::CoolingDown)
    );
    assert_eq!(grows_to(&decide_at(Some(at(0)), at(60))), Some(64 * MI));
    assert_eq!(grows_to(&decide_at(None, at(1))), Some(64 * MI));
    // The spec is not held by the cooldown.
    let c = ClaimState {
        last_resize: Some(at(0)),
        ..claim(32 * MI, 32 * MI)
    };
    let spec = decide(&Inputs {
        spec_size: "40Mi",
        auto_resize: Some(&policy),
        claim: Some(&c),
        usage: &usage,
        expandable: None,
        last_resize: None,
        now: at(1),
    });
    assert_eq!(grows_to(&spec), Some(40 * MI));
}

#[test]
fn a_refused_size_waits_before_it_is_asked_again() {
    let c = claim(GI, GI);
    let refused = |result, size: &str, when| LastResize {
        time: Time(when),
        size: size.into(),
        result,
    };
    let decide_with = |last: &LastResize, now| {
        decide(&Inputs {
            spec_size: "2Gi",
            auto_resize: None,
            claim: Some(&c),
            usage: &Usage::Unread,
            expandable: Some(true),
            last_resize: Some(last),
            now,
        })
    };
    let quota = refused(ResizeResult::QuotaExceeded, "2048Mi", at(0));
    assert_eq!(
        reason(&decide_with(&quota, at(299))),
        Some(StorageReady::QuotaExceeded)
    );
    assert_eq!(grows_to(&decide_with(&quota, at(300))), Some(2 * GI));
    let other = refused(ResizeResult::Refused, "2Gi", at(0));
    assert_eq!(
        reason(&decide_with(&other, at(10))),
        Some(StorageReady::ResizeRefused)
    );
    // Another size (the spec changed again) is asked for at once.
    let smaller = refused(ResizeResult::QuotaExceeded, "1536Mi", at(0));
    assert_eq!(grows_to(&decide_with(&smaller, at(1))), Some(2 * GI));
    // A granted request is no refusal.
    let granted = refused(ResizeResult::Requested, "2Gi", at(0));
    assert_eq!(grows_to(&decide_with(&granted, at(1))), Some(2 * GI));
}

#[test]
fn the_class_is_read_only_before_a_growth() {
    let half = auto(50, "100%", "1Mi", "64Mi", 0);
    let idle = claim(16 * MI, 16 * MI);
    let inputs = |usage: &'static Usage| Inputs {
        spec_size: "16Mi",
        auto_resize: Some(&half),
        claim: Some(&idle),
        usage,
        expandable: None,
        last_resize: None,
        now: at(0),
    };
    static LOW: Usage = Usage::Unread;
    assert_eq!(class_to_check(&inputs(&LOW)), None);
    let high = Box::leak(Box::new(used(12 << 20, 16 << 20)));
    assert_eq!(class_to_check(&inputs(high)), Some("fast"));
}
