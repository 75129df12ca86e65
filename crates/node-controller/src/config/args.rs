//! Values of `spec.config` as valkey.conf reads them: a port of Valkey's `sdssplitargs`
//! lexer ([`split_args`]) and the quoting that writes an argument back so it reads the same
//! ([`quote`]). Rendering splits every user value and re-quotes each argument on one line,
//! so no value can inject a second directive.

/// Splits a `config` value into arguments exactly as Valkey's `sdssplitargs` splits a
/// valkey.conf line, so users write values as they would in valkey.conf
/// (`client-output-buffer-limit: normal 0 0 0`, `save: ""`, `rename-command: "FLUSHALL" ""`).
/// Every argument is then re-quoted by [`quote`] on one line, so no value can inject a
/// second directive.
pub fn split_args(value: &str) -> Result<Vec<String>, String> {
    let b = value.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        while i < b.len() && is_c_space(b[i]) {
            i += 1;
        }
        if i >= b.len() {
            return Ok(out);
        }
        let mut cur = Vec::new();
        let mut in_double = false;
        let mut in_single = false;
        loop {
            if in_double {
                match b.get(i) {
                    None => return Err("unbalanced double quotes".into()),
                    Some(b'\\')
                        if i + 3 < b.len()
                            && b[i + 1] == b'x'
                            && b[i + 2].is_ascii_hexdigit()
                            && b[i + 3].is_ascii_hexdigit() =>
                    {
                        let hex = std::str::from_utf8(&b[i + 2..i + 4]).unwrap_or("0");
                        cur.push(u8::from_str_radix(hex, 16).unwrap_or(0));
                        i += 3;
                    }
                    Some(b'\\') if i + 1 < b.len() => {
                        i += 1;
                        cur.push(match b[i] {
                            b'n' => b'\n',
                            b'r' => b'\r',
                            b't' => b'\t',
                            b'b' => 0x08,
                            b'a' => 0x07,
                            c => c,
                        });
                    }
                    Some(b'"') => {
                        if b.get(i + 1).is_some_and(|c| !is_c_space(*c)) {
                            return Err("a closing quote must be followed by a space".into());
                        }
                        i += 1;
                        break;
                    }
                    Some(c) => cur.push(*c),
                }
            } else if in_single {
                match b.get(i) {
                    None => return Err("unbalanced single quotes".into()),
                    Some(b'\\') if b.get(i + 1) == Some(&b'\'') => {
                        i += 1;
                        cur.push(b'\'');
                    }
                    Some(b'\'') => {
                        if b.get(i + 1).is_some_and(|c| !is_c_space(*c)) {
                            return Err("a closing quote must be followed by a space".into());
                        }
                        i += 1;
                        break;
                    }
                    Some(c) => cur.push(*c),
                }
            } else {
                match b.get(i) {
                    None | Some(b' ' | b'\n' | b'\r' | b'\t') => break,
                    Some(b'"') => in_double = true,
                    Some(b'\'') => in_single = true,
                    Some(c) => cur.push(*c),
                }
            }
            i += 1;
        }
        match String::from_utf8(cur) {
            Ok(s) => out.push(s),
            Err(_) => return Err("a \\x escape makes the value invalid UTF-8".into()),
        }
    }
}

fn is_c_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

/// One argument as valkey.conf reads it back unchanged: bare when it is plain printable
/// ASCII, double-quoted with escapes otherwise.
pub fn quote(arg: &str) -> String {
    let plain = !arg.is_empty()
        && arg
            .bytes()
            .all(|c| c.is_ascii_graphic() && !matches!(c, b'"' | b'\'' | b'\\'));
    if plain {
        return arg.to_string();
    }
    let mut out = String::from("\"");
    for ch in arg.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_ascii_control() => out.push_str(&format!("\\x{:02x}", c as u8)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_args_follows_sdssplitargs() {
        let ok = |v: &str| split_args(v).unwrap();
        assert_eq!(ok(""), Vec::<String>::new());
        assert_eq!(ok("  a  b\t c "), ["a", "b", "c"]);
        assert_eq!(ok("\"a b\" 'c d'"), ["a b", "c d"]);
        assert_eq!(ok("\"\\x41\\n\\t\\\\\""), ["A\n\t\\"]);
        assert_eq!(ok("'it\\'s'"), ["it's"]);
        assert_eq!(ok("a\"b c\""), ["ab c"]);
        assert_eq!(ok("\"\""), [""]);
        assert!(split_args("\"a").is_err());
        assert!(split_args("'a").is_err());
        assert!(split_args("\"a\"b").is_err());
        assert!(split_args("\"\\xff\"").is_err());
    }

    #[test]
    fn quote_round_trips_through_split_args() {
        for arg in [
            "plain",
            "",
            "a b",
            "q\"uote",
            "back\\slash",
            "nl\n",
            "tab\t",
            "\u{1}",
            "ü",
            "'",
        ] {
            let quoted = quote(arg);
            assert_eq!(split_args(&quoted).unwrap(), [arg], "{quoted}");
        }
        assert_eq!(quote("1gb"), "1gb");
        assert_eq!(quote("a b"), "\"a b\"");
    }
}
