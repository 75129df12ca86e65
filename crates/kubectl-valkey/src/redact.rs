//! Scrubbing a report: every known password (in clear and as Kubernetes encodes Secret data),
//! and the values of directives and commands that carry one, whatever the password is.

use k8s_openapi::ByteString;

/// What a scrubbed secret reads as.
pub const REDACTED: &str = "[REDACTED]";

/// Words after which a line carries a password (config, ACL and command forms).
const PASSWORD_WORDS: [&str; 4] = ["requirepass", "masterauth", "auth-pass", "AUTH"];

/// The passwords to scrub.
#[derive(Clone, Debug, Default)]
pub struct Redactor {
    secrets: Vec<String>,
}

impl Redactor {
    /// Scrubs each of `values` (too short ones are left: they would scrub ordinary text),
    /// each line of a multi-line value too, and their base64 forms.
    pub fn new<I: IntoIterator<Item = String>>(values: I) -> Self {
        let mut secrets = Vec::new();
        for value in values {
            let lines = value.lines().map(str::to_string);
            for candidate in std::iter::once(value.clone()).chain(lines) {
                let candidate = candidate.trim().to_string();
                if candidate.len() < 6 {
                    continue;
                }
                secrets.push(base64(candidate.as_bytes()));
                secrets.push(candidate);
            }
        }
        // Longest first, so a password that holds another is scrubbed whole.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        Self { secrets }
    }

    /// The values of every Secret's data.
    pub fn from_secret_data<'a, I>(data: I) -> Self
    where
        I: IntoIterator<Item = &'a ByteString>,
    {
        Self::new(
            data.into_iter()
                .map(|v| String::from_utf8_lossy(&v.0).into_owned()),
        )
    }

    /// `text` with every known password, and whatever follows a password word, replaced.
    pub fn scrub(&self, text: &str) -> String {
        let mut out = text.to_string();
        for secret in &self.secrets {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), REDACTED);
            }
        }
        out.lines()
            .map(scrub_password_words)
            .collect::<Vec<_>>()
            .join("\n")
            + if out.ends_with('\n') { "\n" } else { "" }
    }
}

/// `requirepass x`, `masterauth x`, `sentinel auth-pass <name> x`, `AUTH [user] x` and ACL
/// `>x` tokens: the password part replaced.
fn scrub_password_words(line: &str) -> String {
    let words: Vec<&str> = line.split(' ').collect();
    let mut out: Vec<String> = Vec::with_capacity(words.len());
    let mut hide_rest = false;
    for word in &words {
        if hide_rest && !word.is_empty() {
            out.push(REDACTED.into());
            continue;
        }
        if word.len() > 1 && word.starts_with('>') {
            out.push(format!(">{REDACTED}"));
            continue;
        }
        out.push(word.to_string());
        let bare = word.trim_matches(|c: char| c == '"' || c == '\'');
        if PASSWORD_WORDS.contains(&bare) {
            hide_rest = true;
        }
    }
    // A password word alone at the end of a line (a header, a command name) hides nothing.
    out.join(" ")
}

/// Standard base64, as Kubernetes shows Secret data.
pub fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_standard() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
    }

    #[test]
    fn known_passwords_are_scrubbed_in_clear_and_encoded() {
        let r = Redactor::new(["s3cr3t-pass".to_string(), "abc".to_string()]);
        let text = format!(
            "login with s3cr3t-pass\ndata: {}\nabc stays\n",
            base64(b"s3cr3t-pass")
        );
        let scrubbed = r.scrub(&text);
        assert_eq!(
            scrubbed,
            "login with [REDACTED]\ndata: [REDACTED]\nabc stays\n"
        );
    }

    #[test]
    fn each_line_of_a_multi_line_value_is_a_password() {
        // The applied operator Secret keeps passwords a rotation went toward, a line each.
        let r = Redactor::new(["first-password\nsecond-password".to_string()]);
        assert_eq!(
            r.scrub("a second-password b first-password"),
            "a [REDACTED] b [REDACTED]"
        );
    }

    #[test]
    fn a_longer_password_holding_a_shorter_one_goes_whole() {
        let r = Redactor::new(["secret".to_string(), "secret-and-more".to_string()]);
        assert_eq!(r.scrub("x secret-and-more"), "x [REDACTED]");
    }

    #[test]
    fn password_words_hide_what_follows_whatever_it_is() {
        let r = Redactor::default();
        assert_eq!(
            r.scrub("requirepass unknownpw\nmasterauth \"x y\"\nsentinel auth-pass g pw"),
            "requirepass [REDACTED]\nmasterauth [REDACTED] [REDACTED]\nsentinel auth-pass [REDACTED] [REDACTED]"
        );
        assert_eq!(
            r.scrub("ACL SETUSER app on >hunter2 ~*"),
            "ACL SETUSER app on >[REDACTED] ~*"
        );
        assert_eq!(r.scrub("AUTH operator pw"), "AUTH [REDACTED] [REDACTED]");
        assert_eq!(
            r.scrub("# Replication\nrole:master"),
            "# Replication\nrole:master"
        );
    }
}
