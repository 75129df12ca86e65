//! Client and store against an in-process fake registry speaking just enough of the
//! distribution API.

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::Response;
use oci_image::manifest::OCI_INDEX;
use oci_image::{
    Built, Digest, ImageConfig, ImageStore, PullError, PullPolicy, RegistryClient, RegistryError,
    build_layout,
};

#[derive(Default)]
struct Fake {
    blobs: HashMap<String, Bytes>,
    manifests: HashMap<(String, String), (String, Bytes)>,
    uploads: usize,
    // Counts of GETs per request path, to see what was fetched twice.
    gets: HashMap<String, usize>,
    corrupt: Option<String>,
}

type Shared = Arc<Mutex<Fake>>;

fn answer(status: StatusCode, headers: &[(&str, String)], body: impl Into<Body>) -> Response {
    let mut r = Response::builder().status(status);
    for (k, v) in headers {
        r = r.header(*k, v);
    }
    r.body(body.into()).unwrap()
}

fn error(status: StatusCode, code: &str, message: &str) -> Response {
    let body = format!(r#"{{"errors":[{{"code":"{code}","message":"{message}","detail":null}}]}}"#);
    answer(status, &[("content-type", "application/json".into())], body)
}

async fn handle(
    State(s): State<Shared>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_string();
    let mut f = s.lock().unwrap();
    if method == Method::GET {
        *f.gets.entry(path.clone()).or_default() += 1;
    }
    // Where blob GETs get redirected, as some registries hand off to storage.
    if let Some(d) = path.strip_prefix("/_storage/") {
        let Some(mut b) = f.blobs.get(d).cloned() else {
            return error(StatusCode::NOT_FOUND, "BLOB_UNKNOWN", "blob unknown");
        };
        if f.corrupt.as_deref() == Some(d) {
            let mut v = b.to_vec();
            v[0] ^= 1;
            b = v.into();
        }
        return answer(StatusCode::OK, &[], b);
    }
    let Some(rest) = path.strip_prefix("/v2/") else {
        return error(StatusCode::NOT_FOUND, "NAME_UNKNOWN", "not a v2 path");
    };
    if let Some((repo, _)) = rest.split_once("/blobs/uploads/") {
        if method == Method::POST {
            f.uploads += 1;
            let loc = format!("/v2/{repo}/blobs/uploads/{}?state=x", f.uploads);
            return answer(StatusCode::ACCEPTED, &[("location", loc)], Body::empty());
        }
        let digest = uri
            .query()
            .unwrap_or("")
            .split('&')
            .find_map(|kv| kv.strip_prefix("digest="))
            .unwrap_or("")
            .to_string();
        if Digest::of(&body).to_string() != digest {
            return error(StatusCode::BAD_REQUEST, "DIGEST_INVALID", "digest mismatch");
        }
        f.blobs.insert(digest.clone(), body);
        return answer(
            StatusCode::CREATED,
            &[("docker-content-digest", digest)],
            Body::empty(),
        );
    }
    if let Some((_, digest)) = rest.rsplit_once("/blobs/") {
        if !f.blobs.contains_key(digest) {
            return error(
                StatusCode::NOT_FOUND,
                "BLOB_UNKNOWN",
                "blob unknown to registry",
            );
        }
        if method == Method::HEAD {
            return answer(StatusCode::OK, &[], Body::empty());
        }
        return answer(
            StatusCode::TEMPORARY_REDIRECT,
            &[("location", format!("/_storage/{digest}"))],
            Body::empty(),
        );
    }
    if let Some((repo, reference)) = rest.rsplit_once("/manifests/") {
        let key = (repo.to_string(), reference.to_string());
        if method == Method::PUT {
            let ct = headers
                .get(header::CONTENT_TYPE)
                .unwrap()
                .to_str()
                .unwrap()
                .to_string();
            let digest = Digest::of(&body).to_string();
            f.manifests.insert(key, (ct.clone(), body.clone()));
            f.manifests
                .insert((repo.to_string(), digest.clone()), (ct, body));
            return answer(
                StatusCode::CREATED,
                &[("docker-content-digest", digest)],
                Body::empty(),
            );
        }
        return match f.manifests.get(&key) {
            Some((ct, b)) => answer(
                StatusCode::OK,
                &[
                    ("content-type", ct.clone()),
                    ("docker-content-digest", Digest::of(b).to_string()),
                ],
                b.clone(),
            ),
            None => error(
                StatusCode::NOT_FOUND,
                "MANIFEST_UNKNOWN",
                "manifest unknown",
            ),
        };
    }
    error(StatusCode::NOT_FOUND, "UNSUPPORTED", "unsupported")
}

async fn start() -> (String, Shared, tokio::task::JoinHandle<()>) {
    let shared = Shared::default();
    let app = Router::new().fallback(handle).with_state(shared.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (base, shared, task)
}

fn image(tmp: &Path) -> (std::path::PathBuf, Built, ImageConfig) {
    let rootfs = tmp.join("src");
    fs::create_dir_all(rootfs.join("usr/local/bin")).unwrap();
    fs::create_dir_all(rootfs.join("data")).unwrap();
    fs::write(rootfs.join("usr/local/bin/valkey-server"), b"#!/bin/sh\n").unwrap();
    fs::set_permissions(
        rootfs.join("usr/local/bin/valkey-server"),
        fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    symlink(
        "valkey-server",
        rootfs.join("usr/local/bin/valkey-check-aof"),
    )
    .unwrap();
    let config = ImageConfig {
        user: Some("999".into()),
        entrypoint: vec!["valkey-server".into()],
        working_dir: Some("/data".into()),
        ..Default::default()
    };
    let layout = tmp.join("layout");
    let built = build_layout(&rootfs, &config, &layout, "8.1").unwrap();
    (layout, built, config)
}

#[tokio::test]
async fn push_pull_and_policies() {
    let tmp = tempfile::tempdir().unwrap();
    let (layout, built, config) = image(tmp.path());
    let (base, fake, server) = start().await;

    let client = RegistryClient::new(&base);
    let pushed = client
        .push_layout(&layout, "valkey/valkey", "8.1")
        .await
        .unwrap();
    assert_eq!(pushed, built.manifest);
    assert_eq!(fake.lock().unwrap().uploads, 2);
    // Blobs the registry has are not uploaded again.
    client
        .push_layout(&layout, "valkey/valkey", "8.1")
        .await
        .unwrap();
    assert_eq!(fake.lock().unwrap().uploads, 2);

    let (digest, manifest) = client.resolve("valkey/valkey", "8.1").await.unwrap();
    assert_eq!(digest, built.manifest);
    assert_eq!(
        client.config("valkey/valkey", &manifest).await.unwrap(),
        config
    );

    // Two concurrent pulls of one image fetch its layer once.
    let store_dir = tmp.path().join("store");
    let store = ImageStore::new(store_dir.clone(), base.clone());
    let (a, b) = tokio::join!(
        store.ensure("valkey/valkey:8.1", PullPolicy::IfNotPresent),
        store.ensure("docker.io/valkey/valkey:8.1", PullPolicy::Always),
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.rootfs, b.rootfs);
    assert_eq!(a.manifest, built.manifest);
    assert_eq!(a.config, config);
    assert_eq!(a.reference.to_string(), "docker.io/valkey/valkey:8.1");
    assert_eq!(
        a.rootfs,
        store_dir.join("rootfs").join(built.manifest.hex())
    );
    let rootfs = &a.rootfs;
    assert_eq!(
        fs::read(rootfs.join("usr/local/bin/valkey-server")).unwrap(),
        b"#!/bin/sh\n"
    );
    assert_eq!(
        fs::read_link(rootfs.join("usr/local/bin/valkey-check-aof")).unwrap(),
        Path::new("valkey-server")
    );
    assert!(rootfs.join("data").is_dir());
    let layer_gets = fake.lock().unwrap().gets[&format!("/_storage/{}", built.layers[0])];
    assert_eq!(layer_gets, 1);

    // By digest too.
    let by_digest = store
        .ensure(
            &format!("valkey/valkey@{}", built.manifest),
            PullPolicy::IfNotPresent,
        )
        .await
        .unwrap();
    assert_eq!(by_digest.rootfs, a.rootfs);

    match store
        .ensure("valkey/valkey:nope", PullPolicy::IfNotPresent)
        .await
    {
        Err(PullError::Pull(msg)) => {
            assert!(msg.contains("valkey/valkey:nope"), "{msg}");
            assert!(msg.contains("MANIFEST_UNKNOWN"), "{msg}");
            assert!(msg.contains("404"), "{msg}");
        }
        other => panic!("expected a pull error, got {other:?}"),
    }
    assert!(matches!(
        store.ensure("other/image:1", PullPolicy::Never).await,
        Err(PullError::NeverPull(_))
    ));
    assert!(matches!(
        store.ensure("Not/Valid", PullPolicy::IfNotPresent).await,
        Err(PullError::InvalidName(_))
    ));

    // With the registry gone, what was pulled before is still found by tag or digest.
    server.abort();
    let _ = server.await;
    let offline = ImageStore::new(store_dir.clone(), base.clone());
    let again = offline
        .ensure("valkey/valkey:8.1", PullPolicy::IfNotPresent)
        .await
        .unwrap();
    assert_eq!(again, a);
    let never = offline
        .ensure("valkey/valkey:8.1", PullPolicy::Never)
        .await
        .unwrap();
    assert_eq!(never.rootfs, a.rootfs);
    offline
        .ensure(
            &format!("valkey/valkey@{}", built.manifest),
            PullPolicy::Never,
        )
        .await
        .unwrap();
    match offline
        .ensure("valkey/valkey:8.1", PullPolicy::Always)
        .await
    {
        Err(PullError::Pull(msg)) => assert!(msg.contains("cannot reach the registry"), "{msg}"),
        other => panic!("expected a pull error, got {other:?}"),
    }
}

#[tokio::test]
async fn index_resolves_to_linux_amd64() {
    let tmp = tempfile::tempdir().unwrap();
    let (layout, built, _) = image(tmp.path());
    let (base, _fake, _server) = start().await;
    let client = RegistryClient::new(&base);
    client
        .push_layout(&layout, "multi/arch", "1-amd64")
        .await
        .unwrap();
    let manifest_size = fs::metadata(layout.join("blobs/sha256").join(built.manifest.hex()))
        .unwrap()
        .len();
    let index = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_INDEX,
        "manifests": [
            { "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": Digest::of(b"arm"),
              "size": 3, "platform": { "architecture": "arm64", "os": "linux" } },
            { "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": built.manifest,
              "size": manifest_size, "platform": { "architecture": "amd64", "os": "linux" } },
        ],
    });
    let resp = put_document(
        &base,
        "/v2/multi/arch/manifests/1",
        OCI_INDEX,
        index.to_string(),
    )
    .await;
    assert_eq!(resp, 201);
    let (digest, _) = client.resolve("multi/arch", "1").await.unwrap();
    assert_eq!(digest, built.manifest);

    let store = ImageStore::new(tmp.path().join("store"), base);
    let pulled = store
        .ensure("multi/arch:1", PullPolicy::IfNotPresent)
        .await
        .unwrap();
    assert_eq!(pulled.manifest, built.manifest);
}

#[tokio::test]
async fn corrupt_and_missing_blobs() {
    let tmp = tempfile::tempdir().unwrap();
    let (layout, built, _) = image(tmp.path());
    let (base, fake, _server) = start().await;
    let client = RegistryClient::new(&base);
    client.push_layout(&layout, "a/b", "1").await.unwrap();

    fake.lock().unwrap().corrupt = Some(built.layers[0].to_string());
    let dir = tmp.path().join("dl");
    fs::create_dir(&dir).unwrap();
    let dest = dir.join("layer");
    match client.blob_to_file("a/b", &built.layers[0], &dest).await {
        Err(RegistryError::DigestMismatch { expected, .. }) => {
            assert_eq!(expected, built.layers[0])
        }
        other => panic!("expected a digest mismatch, got {other:?}"),
    }
    assert_eq!(
        fs::read_dir(&dir).unwrap().count(),
        0,
        "nothing left behind"
    );

    let store = ImageStore::new(tmp.path().join("store"), base.clone());
    match store.ensure("a/b:1", PullPolicy::IfNotPresent).await {
        Err(PullError::Pull(msg)) => assert!(msg.contains("digest mismatch"), "{msg}"),
        other => panic!("expected a pull error, got {other:?}"),
    }
    assert!(
        !tmp.path()
            .join("store/rootfs")
            .join(built.manifest.hex())
            .exists()
    );
    // Once the registry serves good bytes, the same store recovers.
    fake.lock().unwrap().corrupt = None;
    store
        .ensure("a/b:1", PullPolicy::IfNotPresent)
        .await
        .unwrap();

    let missing = Digest::of(b"missing");
    let err = client
        .blob_to_file("a/b", &missing, &dir.join("x"))
        .await
        .unwrap_err();
    assert!(matches!(err, RegistryError::NotFound { .. }), "{err}");
    assert!(err.to_string().contains("BLOB_UNKNOWN"), "{err}");
}

/// A bare PUT, for documents the client does not push itself.
async fn put_document(base: &str, path: &str, content_type: &str, body: String) -> u16 {
    use http_body_util::Full;
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let req = axum::http::Request::put(format!("{base}{path}"))
        .header("content-type", content_type)
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    client.request(req).await.unwrap().status().as_u16()
}
