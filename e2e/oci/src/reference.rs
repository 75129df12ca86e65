//! Docker-style image references, normalised the way Docker and containerd do it.

use std::fmt;

use crate::digest::Digest;

pub const DOCKER_HUB: &str = "docker.io";

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Reference {
    pub registry: String,
    pub repository: String,
    pub tag: Option<String>,
    pub digest: Option<Digest>,
}

#[derive(Debug, thiserror::Error)]
#[error("invalid image reference {input:?}: {reason}")]
pub struct InvalidReference {
    pub input: String,
    pub reason: String,
}

impl Reference {
    pub fn parse(s: &str) -> Result<Reference, InvalidReference> {
        let bad = |reason: &str| InvalidReference {
            input: s.to_string(),
            reason: reason.to_string(),
        };
        if s.is_empty() || s.len() > 4096 {
            return Err(bad("empty or too long"));
        }
        let (rest, digest) = match s.split_once('@') {
            Some((r, d)) => (
                r,
                Some(d.parse::<Digest>().map_err(|e| bad(&e.to_string()))?),
            ),
            None => (s, None),
        };
        // A ':' after the last '/' starts the tag; one before it belongs to a registry port.
        let (name, tag) = match rest.rfind(':') {
            Some(i) if !rest[i..].contains('/') => (&rest[..i], Some(&rest[i + 1..])),
            _ => (rest, None),
        };
        if let Some(t) = tag
            && !valid_tag(t)
        {
            return Err(bad("tag must match [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"));
        }
        // Like Docker: the first component is a registry host only if it looks like one.
        let (registry, repository) = match name.split_once('/') {
            Some((host, path))
                if host.contains('.') || host.contains(':') || host == "localhost" =>
            {
                (host.to_string(), path.to_string())
            }
            _ => (DOCKER_HUB.to_string(), name.to_string()),
        };
        let registry = if registry == "index.docker.io" {
            DOCKER_HUB.to_string()
        } else {
            registry
        };
        if !valid_host(&registry) {
            return Err(bad("invalid registry host"));
        }
        let repository = if registry == DOCKER_HUB && !repository.contains('/') {
            format!("library/{repository}")
        } else {
            repository
        };
        if !repository.split('/').all(valid_component) {
            return Err(bad(
                "repository path components must be lowercase letters and digits separated by '.', '_', '__' or '-'",
            ));
        }
        let tag = match (tag, &digest) {
            (None, None) => Some("latest".to_string()),
            (t, _) => t.map(str::to_string),
        };
        Ok(Reference {
            registry,
            repository,
            tag,
            digest,
        })
    }

    /// What goes in `/v2/<repository>/manifests/<reference>`: the digest wins over the tag.
    pub fn reference(&self) -> String {
        match (&self.digest, &self.tag) {
            (Some(d), _) => d.to_string(),
            (None, Some(t)) => t.clone(),
            (None, None) => "latest".to_string(),
        }
    }
}

fn valid_tag(t: &str) -> bool {
    let mut b = t.bytes();
    matches!(b.next(), Some(c) if c.is_ascii_alphanumeric() || c == b'_')
        && t.len() <= 128
        && b.all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'))
}

fn valid_host(h: &str) -> bool {
    let (host, port) = match h.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (h, None),
    };
    !host.is_empty()
        && host
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'-'))
        && port
            .is_none_or(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|c| c.is_ascii_digit()))
}

/// `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*`
fn valid_component(c: &str) -> bool {
    let b = c.as_bytes();
    let alnum = |x: u8| x.is_ascii_lowercase() || x.is_ascii_digit();
    if b.is_empty() || !alnum(b[0]) || !alnum(b[b.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if alnum(b[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && !alnum(b[i]) {
            i += 1;
        }
        let sep = &c[start..i];
        if !(sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|x| x == b'-')) {
            return false;
        }
    }
    true
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.repository)?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    #[test]
    fn parse_table() {
        let d = format!("sha256:{HEX}");
        // (input, registry, repository, tag, digest)
        type Case<'a> = (String, &'a str, &'a str, Option<&'a str>, Option<&'a str>);
        let cases: Vec<Case> = vec![
            (
                "valkey/valkey:8.1".into(),
                "docker.io",
                "valkey/valkey",
                Some("8.1"),
                None,
            ),
            (
                "redis".into(),
                "docker.io",
                "library/redis",
                Some("latest"),
                None,
            ),
            (
                "docker.io/redis:7".into(),
                "docker.io",
                "library/redis",
                Some("7"),
                None,
            ),
            (
                "index.docker.io/library/redis".into(),
                "docker.io",
                "library/redis",
                Some("latest"),
                None,
            ),
            ("ghcr.io/a/b:1".into(), "ghcr.io", "a/b", Some("1"), None),
            ("localhost/x".into(), "localhost", "x", Some("latest"), None),
            (
                "localhost:5000/x:y".into(),
                "localhost:5000",
                "x",
                Some("y"),
                None,
            ),
            (
                format!("127.0.0.1:5000/x/y@{d}"),
                "127.0.0.1:5000",
                "x/y",
                None,
                Some(&d),
            ),
            (
                format!("registry.example:443/a/b-c_d.e:v1.2-rc@{d}"),
                "registry.example:443",
                "a/b-c_d.e",
                Some("v1.2-rc"),
                Some(&d),
            ),
            (
                "a__b/c--d".into(),
                "docker.io",
                "a__b/c--d",
                Some("latest"),
                None,
            ),
        ];
        for (input, reg, repo, tag, dig) in cases {
            let r = Reference::parse(&input).unwrap_or_else(|e| panic!("{input}: {e}"));
            assert_eq!(r.registry, reg, "{input}");
            assert_eq!(r.repository, repo, "{input}");
            assert_eq!(r.tag.as_deref(), tag, "{input}");
            assert_eq!(
                r.digest.as_ref().map(|d| d.to_string()).as_deref(),
                dig,
                "{input}"
            );
            // The canonical form parses back to the same thing.
            assert_eq!(Reference::parse(&r.to_string()).unwrap(), r, "{input}");
        }
    }

    #[test]
    fn reference_and_display() {
        let r = Reference::parse("valkey/valkey:8.1").unwrap();
        assert_eq!(r.reference(), "8.1");
        assert_eq!(r.to_string(), "docker.io/valkey/valkey:8.1");
        let r = Reference::parse(&format!("ghcr.io/a/b:1@sha256:{HEX}")).unwrap();
        assert_eq!(r.reference(), format!("sha256:{HEX}"));
        assert_eq!(r.to_string(), format!("ghcr.io/a/b:1@sha256:{HEX}"));
    }

    #[test]
    fn invalid_names() {
        for bad in [
            "",
            "Valkey/valkey",
            "valkey/valkey:",
            "valkey/valkey:-x",
            "valkey//valkey",
            "valkey/valkey@sha256:abc",
            "valkey/valkey@md5:00",
            "/valkey",
            "valkey/",
            "a/b:c:d",
            "a b",
            "ghcr.io:99999999/a",
            "x/-y",
            "x/y..z",
        ] {
            assert!(Reference::parse(bad).is_err(), "{bad:?} should be invalid");
        }
    }
}
