//! Just enough resource.Quantity parsing to compare storage sizes.

/// Parse a Kubernetes quantity into whole units (bytes for storage),
/// rounding fractions up. Supports binary (Ki..Ei), decimal (n, u, m, k..E)
/// suffixes and exponents (`1e9`). Negative or malformed values → None.
pub fn parse_quantity(s: &str) -> Option<u128> {
    let s = s.trim();
    let s = s.strip_prefix('+').unwrap_or(s);
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, suffix) = s.split_at(end);
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    let digits: u128 = format!("{int}{frac}").parse().ok()?;
    let pow10 = |e: u32| 10u128.checked_pow(e);
    let mut den = pow10(u32::try_from(frac.len()).ok()?)?;
    let mul: u128 = match suffix {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        "Pi" => 1 << 50,
        "Ei" => 1 << 60,
        "n" => {
            den = den.checked_mul(pow10(9)?)?;
            1
        }
        "u" => {
            den = den.checked_mul(pow10(6)?)?;
            1
        }
        "m" => {
            den = den.checked_mul(pow10(3)?)?;
            1
        }
        "k" => pow10(3)?,
        "M" => pow10(6)?,
        "G" => pow10(9)?,
        "T" => pow10(12)?,
        "P" => pow10(15)?,
        "E" => pow10(18)?,
        exp if exp.starts_with(['e', 'E']) => {
            let e: i32 = exp[1..].parse().ok()?;
            if e >= 0 {
                pow10(e.unsigned_abs())?
            } else {
                den = den.checked_mul(pow10(e.unsigned_abs())?)?;
                1
            }
        }
        _ => return None,
    };
    Some(digits.checked_mul(mul)?.div_ceil(den))
}

#[cfg(test)]
mod tests {
    use super::parse_quantity as q;

    #[test]
    fn parses_common_forms() {
        assert_eq!(q("1Gi"), Some(1 << 30));
        assert_eq!(q("1.5Gi"), Some(3 << 29));
        assert_eq!(q("500Mi"), Some(500 << 20));
        assert_eq!(q("2G"), Some(2_000_000_000));
        assert_eq!(q("1k"), Some(1000));
        assert_eq!(q("123"), Some(123));
        assert_eq!(q("1e3"), Some(1000));
        assert_eq!(q("1E3"), Some(1000));
        assert_eq!(q("1E"), Some(10u128.pow(18)));
        assert_eq!(q("1500m"), Some(2)); // rounds up
        assert_eq!(q(".5Ki"), Some(512));
        assert_eq!(q("+1Ki"), Some(1024));
        for bad in ["", "Gi", "-1Gi", "1Xi", "1.2.3", "abc"] {
            assert_eq!(q(bad), None, "{bad}");
        }
    }
}
