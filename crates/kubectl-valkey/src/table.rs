//! Tables as kubectl prints them: upper-case headers, columns padded to their widest cell,
//! three spaces between.

/// Renders `rows` under `headers`; a row shorter than the headers is padded with blanks.
pub fn render(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate().take(widths.len()) {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let last = cells.len().saturating_sub(1);
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            out.push_str(cell);
            if i < last {
                let pad = widths[i] - cell.chars().count() + 3;
                out.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.trim_end().to_string() + "\n"
    };
    let mut out = line(headers.to_vec());
    for row in rows {
        let cells = (0..headers.len())
            .map(|i| row.get(i).map(String::as_str).unwrap_or(""))
            .collect();
        out.push_str(&line(cells));
    }
    out
}

/// A duration as kubectl's AGE column shows it: 45s, 12m, 3h, 2d.
pub fn age(seconds: i64) -> String {
    let s = seconds.max(0);
    match s {
        0..=119 => format!("{s}s"),
        120..=7199 => format!("{}m", s / 60),
        7200..=172_799 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// Bytes as a short binary size: 512B, 3.2Ki, 64.0Mi, 1.5Gi.
pub fn bytes(n: i64) -> String {
    const UNITS: [&str; 5] = ["Ki", "Mi", "Gi", "Ti", "Pi"];
    if n.abs() < 1024 {
        return format!("{n}B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value.abs() >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1}{}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_line_up() {
        let table = render(
            &["NAME", "ROLE", "READY"],
            &[
                vec!["orders-0-0".into(), "Primary".into(), "true".into()],
                vec!["o-1".into(), "".into()],
            ],
        );
        assert_eq!(
            table,
            "NAME         ROLE      READY\n\
             orders-0-0   Primary   true\n\
             o-1\n"
        );
    }

    #[test]
    fn ages_and_sizes_read_like_kubectls() {
        assert_eq!(age(-3), "0s");
        assert_eq!(age(45), "45s");
        assert_eq!(age(600), "10m");
        assert_eq!(age(3 * 3600), "3h");
        assert_eq!(age(5 * 86_400), "5d");
        assert_eq!(bytes(512), "512B");
        assert_eq!(bytes(64 * 1024 * 1024), "64.0Mi");
        assert_eq!(bytes(1536 * 1024 * 1024), "1.5Gi");
    }
}
