//! Content digests (`sha256:<hex>`) and a writer that computes one while copying.

use std::fmt;
use std::io::{self, Write};
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest as _, Sha256};

/// A validated `sha256:<64 lowercase hex>` digest. Only sha256 is supported: it is what every
/// registry and image we deal with uses, and refusing the rest keeps paths like
/// `blobs/sha256/<hex>` safe to build from a digest.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(String);

#[derive(Debug, thiserror::Error)]
#[error("invalid digest {0:?}: expected sha256:<64 lowercase hex digits>")]
pub struct InvalidDigest(pub String);

impl Digest {
    pub fn of(bytes: &[u8]) -> Digest {
        Self::from_hasher(Sha256::new_with_prefix(bytes))
    }

    fn from_hasher(h: Sha256) -> Digest {
        Digest(format!("sha256:{}", hex(&h.finalize())))
    }

    /// The hex part, used as a file name.
    pub fn hex(&self) -> &str {
        &self.0["sha256:".len()..]
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl FromStr for Digest {
    type Err = InvalidDigest;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let ok = s.strip_prefix("sha256:").is_some_and(|h| {
            h.len() == 64
                && h.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        });
        if ok {
            Ok(Digest(s.to_string()))
        } else {
            Err(InvalidDigest(s.to_string()))
        }
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({})", self.0)
    }
}

impl Serialize for Digest {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Digest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Hashes and counts everything written through it, so a blob can be written once and named by
/// its digest afterwards.
pub struct HashingWriter<W> {
    inner: W,
    hasher: Sha256,
    len: u64,
}

impl<W: Write> HashingWriter<W> {
    pub fn new(inner: W) -> Self {
        HashingWriter {
            inner,
            hasher: Sha256::new(),
            len: 0,
        }
    }

    pub fn finish(self) -> (W, Digest, u64) {
        (self.inner, Digest::from_hasher(self.hasher), self.len)
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Incremental hashing for async code that cannot use a `Write`.
#[derive(Default)]
pub(crate) struct Hasher(Sha256);

impl Hasher {
    pub(crate) fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    pub(crate) fn finish(self) -> Digest {
        Digest::from_hasher(self.0)
    }
}

/// Hashes a file without loading it whole.
pub fn digest_file(path: &std::path::Path) -> io::Result<(Digest, u64)> {
    let mut f = std::fs::File::open(path)?;
    let mut w = HashingWriter::new(io::sink());
    io::copy(&mut f, &mut w)?;
    let (_, d, n) = w.finish();
    Ok((d, n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_digest_and_parsing() {
        let d = Digest::of(b"");
        assert_eq!(
            d.to_string(),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(d.to_string().parse::<Digest>().unwrap(), d);
        assert_eq!(d.hex().len(), 64);
        for bad in [
            "",
            "sha256:",
            "sha512:00",
            "sha256:E3B0",
            &format!("md5:{}", d.hex()),
        ] {
            assert!(bad.parse::<Digest>().is_err(), "{bad}");
        }
        let json = serde_json::to_string(&d).unwrap();
        assert_eq!(serde_json::from_str::<Digest>(&json).unwrap(), d);
        assert!(serde_json::from_str::<Digest>("\"sha256:zz\"").is_err());
    }

    #[test]
    fn hashing_writer_matches() {
        let mut w = HashingWriter::new(Vec::new());
        w.write_all(b"hello ").unwrap();
        w.write_all(b"world").unwrap();
        let (buf, d, n) = w.finish();
        assert_eq!(d, Digest::of(b"hello world"));
        assert_eq!(n, 11);
        assert_eq!(buf, b"hello world");
    }
}
