//! `persistence.autoResize` read once into numbers: sizes in bytes, the increase as bytes or
//! a percentage, the cooldown as a duration.

use std::time::Duration;

use crd_types::quantity;
use crd_types::template::AutoResize;

/// Sizes are rounded up to whole MiB: no storage allocates less, and a claim of an odd byte
/// count reads badly.
pub const MIB: u128 = 1 << 20;

/// How much one growth adds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Increase {
    Bytes(u128),
    /// Of the claim's current size.
    Percent(u32),
}

/// `autoResize` as numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Grow once used space reaches this percentage of capacity.
    pub threshold_percent: u8,
    pub increase: Increase,
    /// The smallest growth.
    pub min_increase: u128,
    /// Never request more than this.
    pub limit: u128,
    /// The least time between two growths.
    pub cooldown: Duration,
}

impl Policy {
    /// Reads `auto_resize`; `Err` says which field pvc-resizer cannot use (admission checks
    /// the forms, but a quantity can still be out of range, and old objects predate rules).
    pub fn parse(auto_resize: &AutoResize) -> Result<Self, String> {
        let bytes = |field: &str, q: &str| {
            quantity::parse(q)
                .map(|a| a.whole_units())
                .map_err(|e| format!("autoResize.{field}: {e}"))
        };
        let threshold_percent = u8::try_from(auto_resize.used_percent_threshold)
            .ok()
            .filter(|t| (1..=99).contains(t))
            .ok_or_else(|| {
                format!(
                    "autoResize.usedPercentThreshold {} is not between 1 and 99",
                    auto_resize.used_percent_threshold
                )
            })?;
        let increase = match auto_resize.increase.strip_suffix('%') {
            Some(percent) => {
                Increase::Percent(percent.parse().ok().filter(|p| *p > 0).ok_or_else(|| {
                    format!(
                        "autoResize.increase {:?} is not a percentage",
                        auto_resize.increase
                    )
                })?)
            }
            None => Increase::Bytes(bytes("increase", &auto_resize.increase)?),
        };
        let cooldown = u64::try_from(auto_resize.cooldown_seconds)
            .map(Duration::from_secs)
            .map_err(|_| "autoResize.cooldownSeconds is negative".to_string())?;
        Ok(Self {
            threshold_percent,
            increase,
            min_increase: bytes("minIncrease", &auto_resize.min_increase)?,
            limit: bytes("limit", &auto_resize.limit)?,
            cooldown,
        })
    }

    /// The size one growth from `current` asks for: the increase, at least the minimum step,
    /// rounded up to whole MiB, never above the limit (and never below `current`).
    pub fn grown(&self, current: u128) -> u128 {
        let step = match self.increase {
            Increase::Bytes(b) => b,
            Increase::Percent(p) => (current * u128::from(p)).div_ceil(100),
        };
        let wanted = round_up_mib(current.saturating_add(step.max(self.min_increase)));
        wanted.min(self.limit).max(current)
    }
}

/// `bytes` rounded up to a whole MiB.
pub fn round_up_mib(bytes: u128) -> u128 {
    bytes.div_ceil(MIB).saturating_mul(MIB)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GI: u128 = 1 << 30;

    fn auto(threshold: i32, increase: &str, min: &str, limit: &str) -> AutoResize {
        AutoResize {
            used_percent_threshold: threshold,
            increase: increase.into(),
            limit: limit.into(),
            min_increase: min.into(),
            cooldown_seconds: 300,
        }
    }

    #[test]
    fn quantities_in_every_unit() {
        for (limit, bytes) in [
            ("100Gi", 100 * GI),
            ("107374182400", 100 * GI),
            ("102400Mi", 100 * GI),
            ("100G", 100_000_000_000),
            ("1e11", 100_000_000_000),
            ("0.5Ti", 512 * GI),
            ("100000M", 100_000_000_000),
        ] {
            let p = Policy::parse(&auto(80, "20%", "1Gi", limit)).unwrap();
            assert_eq!(p.limit, bytes, "{limit}");
        }
        let p = Policy::parse(&auto(80, "1.5Gi", "1k", "1Ti")).unwrap();
        assert_eq!(p.increase, Increase::Bytes(3 * GI / 2));
        assert_eq!(p.min_increase, 1000);
        assert_eq!(p.cooldown, Duration::from_secs(300));
    }

    #[test]
    fn what_cannot_be_used_is_named() {
        let bad = [
            (auto(0, "20%", "1Gi", "10Gi"), "usedPercentThreshold"),
            (auto(100, "20%", "1Gi", "10Gi"), "usedPercentThreshold"),
            (auto(80, "0%", "1Gi", "10Gi"), "increase"),
            (auto(80, "x%", "1Gi", "10Gi"), "increase"),
            (auto(80, "lots", "1Gi", "10Gi"), "increase"),
            (auto(80, "20%", "1Gi", "1e99"), "limit"),
            (auto(80, "20%", "?", "10Gi"), "minIncrease"),
        ];
        for (a, field) in bad {
            let e = Policy::parse(&a).unwrap_err();
            assert!(e.contains(field), "{e}");
        }
        let mut negative = auto(80, "20%", "1Gi", "10Gi");
        negative.cooldown_seconds = -1;
        assert!(Policy::parse(&negative).unwrap_err().contains("cooldown"));
    }

    #[test]
    fn growth_is_the_increase_at_least_the_minimum_rounded_and_capped() {
        let p =
            |inc: &str, min: &str, limit: &str| Policy::parse(&auto(80, inc, min, limit)).unwrap();
        // 20 % of 10Gi.
        assert_eq!(p("20%", "1Gi", "100Gi").grown(10 * GI), 12 * GI);
        // 20 % of 1Gi is 205Mi: the minimum step of 1Gi wins.
        assert_eq!(p("20%", "1Gi", "100Gi").grown(GI), 2 * GI);
        // 100 % doubles.
        assert_eq!(p("100%", "1Mi", "1Gi").grown(16 * MIB), 32 * MIB);
        // A quantity increase, in decimal units, rounded up to a MiB.
        assert_eq!(p("1G", "1Mi", "100Gi").grown(GI), GI + 954 * MIB);
        // 1 % of 10Mi is 102.4KiB: rounded up to the next MiB.
        assert_eq!(p("1%", "1", "1Gi").grown(10 * MIB), 11 * MIB);
        // Capped at the limit, even when the limit is not a whole MiB.
        assert_eq!(p("100%", "1Mi", "50Mi").grown(32 * MIB), 50 * MIB);
        assert_eq!(p("100%", "1Mi", "50000000").grown(32 * MIB), 50_000_000);
        // At (or above) the limit: no growth, never a shrink.
        assert_eq!(p("100%", "1Mi", "50Mi").grown(50 * MIB), 50 * MIB);
        assert_eq!(p("100%", "1Mi", "50Mi").grown(60 * MIB), 60 * MIB);
    }
}
