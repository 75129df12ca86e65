//! The OCI distribution API over plain HTTP: enough to push a layout and pull an image. The test
//! registry listens on loopback only, so there is no TLS and no auth.

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::io::AsyncWriteExt;

use crate::build::{ImageConfig, blob_path, read_layout};
use crate::digest::{Digest, Hasher};
use crate::manifest::{
    DOCKER_MANIFEST, DOCKER_MANIFEST_LIST, Index, Manifest, OCI_INDEX, OCI_MANIFEST,
};

const ACCEPT_MANIFESTS: &str = "application/vnd.oci.image.manifest.v1+json, \
    application/vnd.oci.image.index.v1+json, \
    application/vnd.docker.distribution.manifest.v2+json, \
    application/vnd.docker.distribution.manifest.list.v2+json";
// Manifests and configs are small; a registry sending more is broken.
const MAX_DOCUMENT: usize = 16 << 20;
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
const MAX_REDIRECTS: usize = 5;

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("registry answered 404 Not Found for {what}: {message}")]
    NotFound { what: String, message: String },
    #[error("registry answered {} for {what}: {message}", status_line(*.status))]
    Http {
        status: u16,
        what: String,
        message: String,
    },
    #[error("cannot reach the registry: {0}")]
    Connect(String),
    #[error("digest mismatch: expected {expected}, the content hashes to {actual}")]
    DigestMismatch { expected: Digest, actual: Digest },
    /// A broken layout or an answer we cannot use; the message says which.
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

fn status_line(status: u16) -> String {
    let reason = StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason());
    match reason {
        Some(r) => format!("{status} {r}"),
        None => status.to_string(),
    }
}

#[derive(Clone)]
pub struct RegistryClient {
    base: String,
    http: Client<HttpConnector, Full<Bytes>>,
}

impl RegistryClient {
    /// `base` like `http://127.0.0.1:5000`.
    pub fn new(base: &str) -> Self {
        RegistryClient {
            base: base.trim_end_matches('/').to_string(),
            http: Client::builder(TokioExecutor::new()).build_http(),
        }
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    /// Pushes the image of an OCI layout as `repository:tag`: uploads the blobs the registry lacks,
    /// then the manifest. Returns the manifest digest.
    pub async fn push_layout(
        &self,
        layout: &Path,
        repository: &str,
        tag: &str,
    ) -> Result<Digest, RegistryError> {
        let (digest, manifest) = read_layout(layout)
            .map_err(|e| RegistryError::Invalid(format!("bad image layout: {e:#}")))?;
        for desc in std::iter::once(&manifest.config).chain(&manifest.layers) {
            let what = format!("{repository}@{}", desc.digest);
            let url = format!("{}/v2/{repository}/blobs/{}", self.base, desc.digest);
            let resp = self.send(Method::HEAD, &url, &[], Bytes::new()).await?;
            match resp.status() {
                s if s.is_success() => continue,
                StatusCode::NOT_FOUND => {}
                _ => return Err(error_from(resp, &what).await),
            }
            let bytes = tokio::fs::read(blob_path(layout, &desc.digest)).await?;
            self.upload_blob(repository, &desc.digest, bytes.into())
                .await?;
        }
        let raw = tokio::fs::read(blob_path(layout, &digest)).await?;
        let url = format!("{}/v2/{repository}/manifests/{tag}", self.base);
        let headers = [(header::CONTENT_TYPE, manifest.media_type.as_str())];
        let resp = self.send(Method::PUT, &url, &headers, raw.into()).await?;
        if !resp.status().is_success() {
            return Err(error_from(resp, &format!("{repository}:{tag}")).await);
        }
        Ok(digest)
    }

    /// A monolithic upload: POST to open a session, PUT the whole blob to close it.
    async fn upload_blob(
        &self,
        repository: &str,
        digest: &Digest,
        bytes: Bytes,
    ) -> Result<(), RegistryError> {
        let what = format!("{repository}@{digest}");
        let url = format!("{}/v2/{repository}/blobs/uploads/", self.base);
        let resp = self.send(Method::POST, &url, &[], Bytes::new()).await?;
        if resp.status() != StatusCode::ACCEPTED {
            return Err(error_from(resp, &what).await);
        }
        let location = location(resp.headers()).ok_or_else(|| {
            RegistryError::Invalid(format!("upload of {what}: the registry gave no Location"))
        })?;
        let sep = if location.contains('?') { '&' } else { '?' };
        let url = format!("{}{sep}digest={digest}", self.absolute(&location));
        let headers = [(header::CONTENT_TYPE, "application/octet-stream")];
        let resp = self.send(Method::PUT, &url, &headers, bytes).await?;
        if !resp.status().is_success() {
            return Err(error_from(resp, &what).await);
        }
        Ok(())
    }

    /// Fetches the manifest for `reference` (a tag or digest); an index or manifest list is
    /// resolved to its linux/amd64 entry. Returns the digest of the image manifest itself.
    pub async fn resolve(
        &self,
        repository: &str,
        reference: &str,
    ) -> Result<(Digest, Manifest), RegistryError> {
        let (digest, _, manifest) = self.resolve_raw(repository, reference).await?;
        Ok((digest, manifest))
    }

    /// Like [`resolve`](Self::resolve), also returning the manifest's exact bytes so it can be
    /// stored under its digest.
    pub async fn resolve_raw(
        &self,
        repository: &str,
        reference: &str,
    ) -> Result<(Digest, Bytes, Manifest), RegistryError> {
        let (digest, raw, media_type) = self.fetch_manifest(repository, reference).await?;
        if media_type != OCI_INDEX && media_type != DOCKER_MANIFEST_LIST {
            return Ok((
                digest,
                raw.clone(),
                parse_manifest(&raw, &media_type, reference)?,
            ));
        }
        let index: Index = serde_json::from_slice(&raw)
            .map_err(|e| RegistryError::Invalid(format!("unreadable index {reference}: {e}")))?;
        let entry = index
            .manifests
            .iter()
            .find(|m| {
                m.platform
                    .as_ref()
                    .is_some_and(|p| p.os == "linux" && p.architecture == "amd64")
            })
            .ok_or_else(|| {
                RegistryError::Invalid(format!(
                    "{repository}:{reference} has no linux/amd64 image in its index"
                ))
            })?;
        let (digest, raw, media_type) = self
            .fetch_manifest(repository, entry.digest.as_str())
            .await?;
        Ok((
            digest,
            raw.clone(),
            parse_manifest(&raw, &media_type, entry.digest.as_str())?,
        ))
    }

    /// GETs a manifest or index; returns its digest, bytes and media type.
    async fn fetch_manifest(
        &self,
        repository: &str,
        reference: &str,
    ) -> Result<(Digest, Bytes, String), RegistryError> {
        let wanted: Option<Digest> = reference.parse().ok();
        let what = match &wanted {
            Some(_) => format!("{repository}@{reference}"),
            None => format!("{repository}:{reference}"),
        };
        let url = format!("{}/v2/{repository}/manifests/{reference}", self.base);
        let headers = [(header::ACCEPT, ACCEPT_MANIFESTS)];
        let resp = self.send(Method::GET, &url, &headers, Bytes::new()).await?;
        if !resp.status().is_success() {
            return Err(error_from(resp, &what).await);
        }
        let content_type = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.split(';').next().unwrap_or("").trim().to_string());
        let raw = read_limited(resp, &what).await?;
        let digest = Digest::of(&raw);
        if let Some(expected) = wanted
            && expected != digest
        {
            return Err(RegistryError::DigestMismatch {
                expected,
                actual: digest,
            });
        }
        // The document's own mediaType is authoritative; the header is the fallback.
        let in_body = serde_json::from_slice::<serde_json::Value>(&raw)
            .ok()
            .and_then(|v| v.get("mediaType")?.as_str().map(str::to_string));
        let media_type = in_body
            .or(content_type)
            .unwrap_or_else(|| OCI_MANIFEST.to_string());
        Ok((digest, raw, media_type))
    }

    /// Downloads a blob into `dest` through a temp file beside it, verifying its digest; on any
    /// failure nothing is left behind. Returns the byte count.
    pub async fn blob_to_file(
        &self,
        repository: &str,
        digest: &Digest,
        dest: &Path,
    ) -> Result<u64, RegistryError> {
        let what = format!("{repository}@{digest}");
        let resp = self.get_blob(repository, digest, &what).await?;
        let dir = dest.parent().unwrap_or(Path::new("."));
        tokio::fs::create_dir_all(dir).await?;
        let tmp = tempfile::NamedTempFile::new_in(dir)?;
        let mut file = tokio::fs::File::from_std(tmp.as_file().try_clone()?);
        let mut hasher = Hasher::default();
        let mut len = 0u64;
        let mut body = resp.into_body();
        while let Some(frame) = body.frame().await {
            let frame =
                frame.map_err(|e| RegistryError::Connect(format!("reading {what}: {e}")))?;
            if let Ok(data) = frame.into_data() {
                hasher.update(&data);
                len += data.len() as u64;
                file.write_all(&data).await?;
            }
        }
        file.flush().await?;
        file.sync_all().await?;
        drop(file);
        let actual = hasher.finish();
        if &actual != digest {
            return Err(RegistryError::DigestMismatch {
                expected: digest.clone(),
                actual,
            });
        }
        tmp.persist(dest).map_err(|e| e.error)?;
        Ok(len)
    }

    /// Fetches and verifies an image's config blob and returns its `config` section.
    pub async fn config(
        &self,
        repository: &str,
        manifest: &Manifest,
    ) -> Result<ImageConfig, RegistryError> {
        let digest = &manifest.config.digest;
        let what = format!("{repository}@{digest}");
        let resp = self.get_blob(repository, digest, &what).await?;
        let raw = read_limited(resp, &what).await?;
        let actual = Digest::of(&raw);
        if &actual != digest {
            return Err(RegistryError::DigestMismatch {
                expected: digest.clone(),
                actual,
            });
        }
        parse_config(&raw)
            .map_err(|e| RegistryError::Invalid(format!("unreadable config {what}: {e}")))
    }

    /// GET a blob, following redirects (registries may hand blobs off to another URL).
    async fn get_blob(
        &self,
        repository: &str,
        digest: &Digest,
        what: &str,
    ) -> Result<Response<Incoming>, RegistryError> {
        let mut url = format!("{}/v2/{repository}/blobs/{digest}", self.base);
        for _ in 0..=MAX_REDIRECTS {
            let resp = self.send(Method::GET, &url, &[], Bytes::new()).await?;
            if resp.status().is_redirection() {
                let next = location(resp.headers()).ok_or_else(|| {
                    RegistryError::Invalid(format!("{what}: redirect without Location"))
                })?;
                url = self.absolute(&next);
                continue;
            }
            if !resp.status().is_success() {
                return Err(error_from(resp, what).await);
            }
            return Ok(resp);
        }
        Err(RegistryError::Invalid(format!(
            "{what}: more than {MAX_REDIRECTS} redirects"
        )))
    }

    fn absolute(&self, location: &str) -> String {
        if location.starts_with("http://") || location.starts_with("https://") {
            location.to_string()
        } else {
            format!("{}/{}", self.base, location.trim_start_matches('/'))
        }
    }

    async fn send(
        &self,
        method: Method,
        url: &str,
        headers: &[(header::HeaderName, &str)],
        body: Bytes,
    ) -> Result<Response<Incoming>, RegistryError> {
        let mut req = Request::builder().method(method.clone()).uri(url);
        for (k, v) in headers {
            req = req.header(k, *v);
        }
        let req = req
            .body(Full::new(body))
            .map_err(|e| RegistryError::Invalid(format!("bad request {method} {url}: {e}")))?;
        match tokio::time::timeout(REQUEST_TIMEOUT, self.http.request(req)).await {
            Ok(Ok(resp)) => Ok(resp),
            Ok(Err(e)) => Err(RegistryError::Connect(format!(
                "{method} {url}: {}",
                chain(&e)
            ))),
            Err(_) => Err(RegistryError::Connect(format!(
                "{method} {url}: no answer in 30s"
            ))),
        }
    }
}

/// The config blob's `config` section; images without one get the defaults.
pub fn parse_config(raw: &[u8]) -> Result<ImageConfig, serde_json::Error> {
    #[derive(serde::Deserialize)]
    struct File {
        #[serde(default)]
        config: Option<ImageConfig>,
    }
    Ok(serde_json::from_slice::<File>(raw)?
        .config
        .unwrap_or_default())
}

fn parse_manifest(raw: &[u8], media_type: &str, what: &str) -> Result<Manifest, RegistryError> {
    if media_type != OCI_MANIFEST && media_type != DOCKER_MANIFEST {
        return Err(RegistryError::Invalid(format!(
            "{what}: unsupported manifest media type {media_type}"
        )));
    }
    serde_json::from_slice(raw)
        .map_err(|e| RegistryError::Invalid(format!("unreadable manifest {what}: {e}")))
}

fn location(headers: &HeaderMap) -> Option<String> {
    headers
        .get(header::LOCATION)?
        .to_str()
        .ok()
        .map(str::to_string)
}

async fn read_limited(resp: Response<Incoming>, what: &str) -> Result<Bytes, RegistryError> {
    Limited::new(resp.into_body(), MAX_DOCUMENT)
        .collect()
        .await
        .map(|c| c.to_bytes())
        .map_err(|e| RegistryError::Connect(format!("reading {what}: {e}")))
}

/// Turns a failed answer into an error carrying the registry's own words.
async fn error_from(resp: Response<Incoming>, what: &str) -> RegistryError {
    let status = resp.status();
    let body = Limited::new(resp.into_body(), 64 << 10)
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let message = error_message(&body);
    let what = what.to_string();
    if status == StatusCode::NOT_FOUND {
        RegistryError::NotFound { what, message }
    } else {
        RegistryError::Http {
            status: status.as_u16(),
            what,
            message,
        }
    }
}

/// `{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}` ->
/// `MANIFEST_UNKNOWN manifest unknown`; anything else is quoted as text.
pub fn error_message(body: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct Errors {
        errors: Vec<Entry>,
    }
    #[derive(serde::Deserialize)]
    struct Entry {
        #[serde(default)]
        code: String,
        #[serde(default)]
        message: String,
    }
    if let Ok(e) = serde_json::from_slice::<Errors>(body)
        && !e.errors.is_empty()
    {
        let parts: Vec<String> = e
            .errors
            .iter()
            .map(|x| format!("{} {}", x.code, x.message).trim().to_string())
            .collect();
        return parts.join("; ");
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        "(empty body)".to_string()
    } else {
        text.chars().take(300).collect()
    }
}

fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_bodies() {
        let body =
            br#"{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown","detail":{}}]}"#;
        assert_eq!(error_message(body), "MANIFEST_UNKNOWN manifest unknown");
        assert_eq!(error_message(b"  oops \n"), "oops");
        assert_eq!(error_message(b""), "(empty body)");
        let e = RegistryError::NotFound {
            what: "valkey/valkey:nope".into(),
            message: error_message(body),
        };
        assert_eq!(
            e.to_string(),
            "registry answered 404 Not Found for valkey/valkey:nope: MANIFEST_UNKNOWN manifest unknown"
        );
        let e = RegistryError::Http {
            status: 503,
            what: "x".into(),
            message: "busy".into(),
        };
        assert_eq!(
            e.to_string(),
            "registry answered 503 Service Unavailable for x: busy"
        );
    }
}
