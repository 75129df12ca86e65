//! The report's tarball: files under one top directory, every one scrubbed before it is
//! written, gzipped.

use std::io::Write;

use anyhow::Result;
use flate2::Compression;
use flate2::write::GzEncoder;

use crate::redact::Redactor;

/// The files of a report, in the order they were added.
#[derive(Default)]
pub struct Report {
    files: Vec<(String, String)>,
}

impl Report {
    pub fn add(&mut self, path: impl Into<String>, text: impl Into<String>) {
        self.files.push((path.into(), text.into()));
    }

    pub fn paths(&self) -> Vec<&str> {
        self.files.iter().map(|(p, _)| p.as_str()).collect()
    }

    /// The gzipped tar: each file under `top/`, scrubbed by `redactor`, dated `mtime`.
    pub fn tar_gz(&self, top: &str, redactor: &Redactor, mtime: u64) -> Result<Vec<u8>> {
        let mut tar = tar::Builder::new(GzEncoder::new(Vec::new(), Compression::default()));
        for (path, text) in &self.files {
            let scrubbed = redactor.scrub(text);
            let mut header = tar::Header::new_gnu();
            header.set_size(scrubbed.len() as u64);
            header.set_mode(0o644);
            header.set_mtime(mtime);
            header.set_cksum();
            tar.append_data(&mut header, format!("{top}/{path}"), scrubbed.as_bytes())?;
        }
        let mut gz = tar.into_inner()?;
        gz.flush()?;
        Ok(gz.finish()?)
    }
}

/// A name safe as one path component (pod and container names already are; this keeps a
/// `/` or `..` from anything else out).
pub fn component(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if cleaned.is_empty() || cleaned.chars().all(|c| c == '.') {
        "_".into()
    } else {
        cleaned
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::read::GzDecoder;
    use std::io::Read;

    #[test]
    fn files_are_scrubbed_under_one_directory() {
        let mut report = Report::default();
        report.add("topology.yaml", "name: orders\n");
        report.add("logs/pod/c.log", "logged in with hunter22 as operator\n");
        let redactor = Redactor::new(["hunter22".to_string()]);
        let bytes = report.tar_gz("orders-report", &redactor, 0).unwrap();
        let mut archive = tar::Archive::new(GzDecoder::new(bytes.as_slice()));
        let mut seen = Vec::new();
        for entry in archive.entries().unwrap() {
            let mut entry = entry.unwrap();
            let path = entry.path().unwrap().display().to_string();
            let mut text = String::new();
            entry.read_to_string(&mut text).unwrap();
            seen.push((path, text));
        }
        assert_eq!(
            seen,
            [
                (
                    "orders-report/topology.yaml".to_string(),
                    "name: orders\n".to_string()
                ),
                (
                    "orders-report/logs/pod/c.log".to_string(),
                    "logged in with [REDACTED] as operator\n".to_string()
                ),
            ]
        );
        assert_eq!(report.paths(), ["topology.yaml", "logs/pod/c.log"]);
    }

    #[test]
    fn components_cannot_climb() {
        assert_eq!(component("orders-0-1"), "orders-0-1");
        assert_eq!(component("../x"), ".._x");
        assert_eq!(component(".."), "_");
        assert_eq!(component("a/b"), "a_b");
    }
}
