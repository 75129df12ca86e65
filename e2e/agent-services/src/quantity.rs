//! Kubernetes quantities (`10Gi`, `1.5G`, `500M`, `1e9`, `100m`) as the stand-ins read them:
//! a PVC's size in bytes, a downward API resource value. The stand-ins keep their own parser
//! rather than take the operator's CRD crate for it; a value is held in nano-units, rounded
//! up, so every storage size is exact.

/// The quantity `q` in billionths of a unit, rounded up.
pub fn nano_units(q: &str) -> Result<u128, String> {
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
    let too_large = || format!("{q:?} is too large");
    let digits: u128 = format!("{int}{frac}").parse().map_err(|_| too_large())?;
    let (binary_shift, decimal_exp) =
        scale(suffix).ok_or_else(|| format!("{q:?} has an unknown suffix {suffix:?}"))?;
    let scaled = digits.checked_shl(binary_shift).ok_or_else(too_large)?;
    // Nano-units: the value times 10^9, the fraction's digits divided out.
    let exp = decimal_exp + 9 - frac.len() as i32;
    if exp >= 0 {
        return 10u128
            .checked_pow(exp as u32)
            .and_then(|m| scaled.checked_mul(m))
            .ok_or_else(too_large);
    }
    Ok(match 10u128.checked_pow((-exp) as u32) {
        Some(d) => scaled.div_ceil(d),
        None => u128::from(scaled > 0),
    })
}

/// The quantity `q` in whole units (bytes, for storage), rounded up.
pub fn whole_units(q: &str) -> Result<u128, String> {
    Ok(nano_units(q)?.div_ceil(1_000_000_000))
}

/// A suffix's binary shift and decimal exponent.
fn scale(suffix: &str) -> Option<(u32, i32)> {
    Some(match suffix {
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
            _ => return None,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_suffixes() {
        assert_eq!(whole_units("1Gi"), Ok(1 << 30));
        assert_eq!(whole_units("10Gi"), whole_units("10240Mi"));
        assert_eq!(whole_units("1.5Gi"), whole_units("1536Mi"));
        assert_eq!(whole_units("1G"), Ok(1_000_000_000));
        assert_eq!(whole_units("1G"), whole_units("1e9"));
        assert_eq!(whole_units("+1Ki"), Ok(1024));
        assert_eq!(whole_units("1E"), whole_units("1e18"));
        assert_eq!(whole_units("8Ei"), Ok(8 << 60));
        assert_eq!(nano_units("500m"), Ok(500_000_000));
        assert_eq!(nano_units(".5"), nano_units("500m"));
        assert_eq!(nano_units("1k"), Ok(1_000_000_000_000));
        assert_eq!(whole_units("0"), Ok(0));
    }

    #[test]
    fn fractions_round_up() {
        assert_eq!(whole_units("1500m"), Ok(2));
        assert_eq!(nano_units("1e-10"), Ok(1));
        assert_eq!(nano_units("0.0000000001"), nano_units("1n"));
    }

    #[test]
    fn rejects_garbage() {
        for bad in ["", "Gi", "abc", "10GB", "1.2.3", "10 Gi", "-1Gi", "1e99"] {
            assert!(nano_units(bad).is_err(), "{bad}");
        }
    }
}
