//! A container registry on 127.0.0.1 for tests: the pull side of the OCI distribution API
//! (`/v2/`, manifests by digest, blobs) over plain http, serving the one image of an OCI archive
//! (as `podman save --format oci-archive` writes it). No test reaches a real registry.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, Uri, header};
use axum::response::Response;

/// The registry, serving until dropped.
pub struct Registry {
    /// `127.0.0.1:PORT`.
    pub host: String,
    /// The image's manifest digest, `sha256:HEX`.
    pub manifest_digest: String,
    task: tokio::task::JoinHandle<()>,
}

/// What the registry serves: blobs by digest, and the manifest's media type.
struct Content {
    blobs: HashMap<String, Vec<u8>>,
    manifest_digest: String,
    manifest_type: String,
}

impl Registry {
    /// Serves the image of the OCI archive at `archive` on a free port.
    pub async fn serve(archive: &Path) -> Self {
        let files = read_tar(&std::fs::read(archive).expect("the archive"));
        let index: serde_json::Value = serde_json::from_slice(&files["index.json"]).expect("index.json");
        let manifest = &index["manifests"][0];
        let manifest_digest = manifest["digest"].as_str().expect("a manifest digest").to_owned();
        let manifest_type = manifest["mediaType"].as_str().unwrap_or("application/vnd.oci.image.manifest.v1+json");
        let blobs = files
            .into_iter()
            .filter_map(|(name, bytes)| Some((format!("sha256:{}", name.strip_prefix("blobs/sha256/")?), bytes)))
            .collect();
        let content =
            Arc::new(Content { blobs, manifest_digest: manifest_digest.clone(), manifest_type: manifest_type.into() });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let host = listener.local_addr().unwrap().to_string();
        let app = axum::Router::new().fallback(answer).with_state(content);
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { host, manifest_digest, task }
    }

    /// The image's reference in this registry, in repository `repository`, pinned by digest.
    pub fn reference(&self, repository: &str) -> String {
        format!("{}/{repository}@{}", self.host, self.manifest_digest)
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `GET`/`HEAD` of `/v2/`, `/v2/{repository}/manifests/{digest}` and
/// `/v2/{repository}/blobs/{digest}`.
async fn answer(State(content): State<Arc<Content>>, uri: Uri) -> Response {
    let path = uri.path();
    let found = if path == "/v2/" || path == "/v2" {
        Some((b"{}".to_vec(), "application/json".to_owned(), None))
    } else if let Some((_, digest)) = path.rsplit_once("/manifests/") {
        (digest == content.manifest_digest)
            .then(|| (content.blobs[digest].clone(), content.manifest_type.clone(), Some(digest.to_owned())))
    } else if let Some((_, digest)) = path.rsplit_once("/blobs/") {
        content.blobs.get(digest).map(|b| (b.clone(), "application/octet-stream".to_owned(), Some(digest.to_owned())))
    } else {
        None
    };
    let Some((bytes, kind, digest)) = found else {
        let mut missing = Response::new(Body::from(r#"{"errors":[{"code":"NOT_FOUND"}]}"#));
        *missing.status_mut() = StatusCode::NOT_FOUND;
        return missing;
    };
    let length = bytes.len();
    let mut response = Response::new(Body::from(bytes));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_str(&kind).unwrap());
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    headers.insert("docker-distribution-api-version", HeaderValue::from_static("registry/2.0"));
    if let Some(digest) = digest {
        headers.insert("docker-content-digest", HeaderValue::from_str(&digest).unwrap());
    }
    response
}

/// The regular files of a tar archive, by name.
fn read_tar(bytes: &[u8]) -> HashMap<String, Vec<u8>> {
    let mut files = HashMap::new();
    let mut at = 0;
    while at + 512 <= bytes.len() {
        let header = &bytes[at..at + 512];
        if header.iter().all(|&b| b == 0) {
            break;
        }
        let text = |range: std::ops::Range<usize>| {
            let field = &header[range];
            let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
            String::from_utf8_lossy(&field[..end]).trim().to_owned()
        };
        let size = usize::from_str_radix(&text(124..136), 8).unwrap_or(0);
        let (prefix, name) = (text(345..500), text(0..100));
        let name = if prefix.is_empty() { name } else { format!("{prefix}/{name}") };
        let start = at + 512;
        if matches!(header[156], b'0' | 0) {
            files.insert(name.trim_start_matches("./").to_owned(), bytes[start..start + size].to_vec());
        }
        at = start + size.div_ceil(512) * 512;
    }
    files
}
