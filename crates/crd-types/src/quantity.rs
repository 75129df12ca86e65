//! Kubernetes quantities (`10Gi` = `10240Mi`): parsed exactly enough to compare sizes and
//! never shrink a volume. Shared by every controller and the test infrastructure.

use std::cmp::Ordering;

/// A non-negative quantity in nano-units, rounded up: exact for every storage size, and a
/// sub-nano remainder only ever makes a value compare larger (so "never shrink" holds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Amount(u128);

/// Parses a quantity such as `10Gi`, `1.5G`, `500M`, `1e9` or `100m`.
pub fn parse(q: &str) -> Result<Amount, String> {
    let s = q.trim();
    let s = s.strip_prefix('+').unwrap_or(s);
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(end);
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if (int.is_empty() && frac.is_empty()) || frac.contains('.') {
        return Err(format!("{q:?} is not a quantity"));
    }
    let digits: u128 = format!("{int}{frac}")
        .parse()
        .map_err(|_| format!("{q:?} is too large"))?;
    let (binary_shift, decimal_exp): (u32, i32) = match suffix {
        "" => (0, 0),
        "Ki" => (10, 0),
        "Mi" => (20, 0),
        "Gi" => (30, 0),
        "Ti" => (40, 0),
        "Pi" => (50, 0),
        "Ei" => (60, 0),
        "n" => (0, -9),
        "u" => (0, -6),
        "m" => (0, -3),
        "k" => (0, 3),
        "M" => (0, 6),
        "G" => (0, 9),
        "T" => (0, 12),
        "P" => (0, 15),
        "E" => (0, 18),
        exp => match exp.strip_prefix(['e', 'E']).map(str::parse::<i32>) {
            Some(Ok(e)) if (-40..=40).contains(&e) => (0, e),
            _ => return Err(format!("{q:?} has an unknown suffix {suffix:?}")),
        },
    };
    let too_large = || format!("{q:?} is too large");
    let scaled = digits.checked_shl(binary_shift).ok_or_else(too_large)?;
    // nano-units: value * 10^9, and the fraction digits divide by 10^len.
    let exp = decimal_exp + 9 - frac.len() as i32;
    let value = if exp >= 0 {
        10u128
            .checked_pow(exp as u32)
            .and_then(|m| scaled.checked_mul(m))
            .ok_or_else(too_large)?
    } else {
        match 10u128.checked_pow((-exp) as u32) {
            Some(d) => scaled.div_ceil(d),
            None => u128::from(scaled > 0),
        }
    };
    Ok(Amount(value))
}

impl Amount {
    /// The value in billionths of a unit.
    pub fn nano_units(self) -> u128 {
        self.0
    }

    /// The value in whole units (bytes, for storage), rounded up.
    pub fn whole_units(self) -> u128 {
        self.0.div_ceil(1_000_000_000)
    }
}

/// `bytes` as a storage quantity: in the largest binary unit that holds it exactly (`3Gi`,
/// `1536Mi`), else plain bytes.
pub fn format_bytes(bytes: u128) -> String {
    const UNITS: [(&str, u32); 6] = [
        ("Ei", 60),
        ("Pi", 50),
        ("Ti", 40),
        ("Gi", 30),
        ("Mi", 20),
        ("Ki", 10),
    ];
    if bytes == 0 {
        return "0".into();
    }
    for (suffix, shift) in UNITS {
        if bytes.trailing_zeros() >= shift {
            return format!("{}{suffix}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// Compares two quantities by value.
pub fn compare(a: &str, b: &str) -> Result<Ordering, String> {
    Ok(parse(a)?.cmp(&parse(b)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_values_in_different_units() {
        assert_eq!(compare("10Gi", "10240Mi"), Ok(Ordering::Equal));
        assert_eq!(compare("1G", "1000M"), Ok(Ordering::Equal));
        assert_eq!(compare("1G", "1e9"), Ok(Ordering::Equal));
        assert_eq!(compare("1.5Gi", "1536Mi"), Ok(Ordering::Equal));
        assert_eq!(compare("1k", "1000"), Ok(Ordering::Equal));
        assert_eq!(compare("500m", "0.5"), Ok(Ordering::Equal));
        assert_eq!(compare("+1Ki", "1024"), Ok(Ordering::Equal));
        assert_eq!(compare("1E", "1e18"), Ok(Ordering::Equal));
    }

    #[test]
    fn orders_values() {
        assert_eq!(compare("1Gi", "1G"), Ok(Ordering::Greater));
        assert_eq!(compare("10Gi", "11Gi"), Ok(Ordering::Less));
        assert_eq!(compare("1Ti", "999Gi"), Ok(Ordering::Greater));
        assert_eq!(compare(".5", "1"), Ok(Ordering::Less));
        assert_eq!(compare("8Ei", "8Ei"), Ok(Ordering::Equal));
    }

    #[test]
    fn sub_nano_rounds_up() {
        assert_eq!(compare("1e-10", "0"), Ok(Ordering::Greater));
        assert_eq!(compare("0.0000000001", "1n"), Ok(Ordering::Equal));
    }

    #[test]
    fn whole_units_round_up() {
        assert_eq!(parse("1Gi").unwrap().whole_units(), 1 << 30);
        assert_eq!(parse("1500m").unwrap().whole_units(), 2);
        assert_eq!(parse("0").unwrap().whole_units(), 0);
    }

    #[test]
    fn bytes_format_in_the_largest_exact_unit() {
        assert_eq!(format_bytes(0), "0");
        assert_eq!(format_bytes(1 << 30), "1Gi");
        assert_eq!(format_bytes(3 << 29), "1536Mi");
        assert_eq!(format_bytes(1000), "1000");
        assert_eq!(format_bytes(5 << 40), "5Ti");
        for q in ["7Gi", "12Mi", "3Ki", "999"] {
            assert_eq!(format_bytes(parse(q).unwrap().whole_units()), q);
        }
    }

    #[test]
    fn rejects_garbage() {
        for bad in ["", "Gi", "abc", "10GB", "1.2.3", "10 Gi", "-1Gi", "1e99"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
