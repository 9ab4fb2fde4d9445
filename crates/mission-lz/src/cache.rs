//! The content cache of input files (`DATA_DIR/cache/{sha256}`), shared by every runner: an
//! input is downloaded once per content, checked against its SHA-256, and copied from here into
//! each job's work dir. No job ever sees the cache.
//!
//! A TES task's inputs name no SHA-256 before they are fetched: each is cached by what names its
//! content where it is stored (`DATA_DIR/cache/url-{sha256 of the URL, path, version and size}`,
//! the version an entity tag or a modification time the service lists), or, fetched from the
//! web, by its URL, checked again with its validators (`If-None-Match`, `If-Modified-Since`)
//! each time a task needs it. One download of a key runs at a time: the tasks that need it
//! meanwhile wait for it, so an input shared by many tasks crosses the network once per
//! landing zone.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use mission_api::lz::InputFile;
use mission_api::paths::MissionPath;
use mission_api::tes::{InputSource, TaskAssignment};
use tokio::io::AsyncWriteExt;
use uuid::Uuid;

use crate::client::LzClient;

/// A job's inputs, staged by `Agent::stage_inputs`.
pub(crate) enum Inputs {
    /// Each input's path in the work dir, and its copy in the cache.
    Cached(Vec<(PathBuf, PathBuf)>),
    /// A stop came while they were downloaded.
    Stopped,
}

/// Why a job's inputs cannot be taken from the cache.
#[derive(Debug)]
pub(crate) enum Lookup {
    /// These inputs (indices into the assignment's files) are not in the cache yet.
    Missing(Vec<usize>),
    /// The assignment is not usable; why.
    Invalid(String),
}

/// Where a TES task's inputs are put in its work dir: input `n` at `TASK_INPUTS/{n}`, a file, or
/// a folder of a directory's files. The runner mounts each at its path inside the containers.
pub(crate) const TASK_INPUTS: &str = ".tes/inputs";

/// The cache in one agent's data dir.
pub(crate) struct InputCache {
    dir: PathBuf,
    /// The keys being downloaded now, each with the lock its download holds.
    fetching: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl InputCache {
    /// The cache in `dir` (which exists, private to the agent).
    pub fn new(dir: PathBuf) -> Self {
        Self { dir, fetching: Mutex::new(HashMap::new()) }
    }

    /// The cached copy of each of `files`, with its path in the work dir. Blocking (a `stat` per
    /// file).
    pub fn lookup(&self, files: &[InputFile]) -> Result<Vec<(PathBuf, PathBuf)>, Lookup> {
        let mut inputs = Vec::with_capacity(files.len());
        let mut missing = Vec::new();
        for (i, file) in files.iter().enumerate() {
            let path = MissionPath::parse(&file.path).map_err(|e| Lookup::Invalid(format!("{:?}: {e}", file.path)))?;
            if file.sha256.len() != 64 || !file.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(Lookup::Invalid(format!("{path}: the server sent no valid sha256")));
            }
            let entry = self.dir.join(&file.sha256);
            if !std::fs::metadata(&entry).is_ok_and(|m| m.len() == file.size) {
                missing.push(i);
            }
            inputs.push((path.segments().collect(), entry));
        }
        if missing.is_empty() { Ok(inputs) } else { Err(Lookup::Missing(missing)) }
    }

    /// Downloads `files` (inputs of job `job_id`) into the cache, each checked against its
    /// SHA-256 (whose form [`Self::lookup`] checked).
    pub async fn download(&self, client: &LzClient, job_id: Uuid, files: &[&InputFile]) -> Result<(), InputError> {
        for file in files {
            self.download_one(client, job_id, file).await?;
        }
        Ok(())
    }

    async fn download_one(&self, client: &LzClient, job_id: Uuid, file: &InputFile) -> Result<(), InputError> {
        let path = MissionPath::parse(&file.path).map_err(InputError::at(format!("{:?}", file.path)))?;
        let body = client.input(job_id, &path).await.map_err(InputError::at(&path))?;
        download_checked(body, &self.dir.join(&file.sha256), &file.sha256).await.map_err(InputError::at(&path))
    }
}

impl InputCache {
    /// Fetches the inputs of a TES task (job `job_id`) into the cache; answers each file's path
    /// in the work dir ([`TASK_INPUTS`]) and its copy in the cache. An input that cannot be
    /// fetched fails it naming the input's URL and what it got.
    pub async fn stage_task(
        &self,
        client: &LzClient,
        job_id: Uuid,
        task: &TaskAssignment,
    ) -> Result<Vec<(PathBuf, PathBuf)>, InputError> {
        let mut staged = Vec::new();
        for (n, input) in task.inputs.iter().enumerate() {
            let at = Path::new(TASK_INPUTS).join(n.to_string());
            match &input.source {
                InputSource::Content { text } => {
                    let sha256 = sha256_hex(text.as_bytes());
                    let entry = self.dir.join(&sha256);
                    let _fetching = self.fetching(&sha256).await;
                    if !entry.exists() {
                        let body = futures_util::stream::iter([Ok(bytes::Bytes::from(text.clone()))]);
                        download_checked(body, &entry, &sha256)
                            .await
                            .map_err(InputError::at(format!("inputs[{n}]")))?;
                    }
                    staged.push((at, entry));
                }
                InputSource::Web { url } => staged.push((at, self.fetch_web(client, url).await?)),
                InputSource::Service { url } => {
                    let listing = client.task_input_listing(job_id, n).await.map_err(InputError::at(url))?;
                    for file in listing.files {
                        let key = format!("{url}\n{}\n{}\n{}", file.path, file.version, file.size);
                        let key = format!("url-{}", sha256_hex(key.as_bytes()));
                        let entry = self.dir.join(&key);
                        let _fetching = self.fetching(&key).await;
                        if !std::fs::metadata(&entry).is_ok_and(|m| m.len() == file.size) {
                            let what = if file.path.is_empty() { url.clone() } else { format!("{url}/{}", file.path) };
                            let body = client.task_input(job_id, n, &file.path).await.map_err(InputError::at(&what))?;
                            download_sized(body, &entry, Some(file.size)).await.map_err(InputError::at(&what))?;
                        }
                        let under = if file.path.is_empty() {
                            at.clone()
                        } else {
                            let path = MissionPath::parse(&file.path)
                                .map_err(InputError::at(format!("{url}: {:?}", file.path)))?;
                            path.segments().fold(at.clone(), |dir, segment| dir.join(segment))
                        };
                        staged.push((under, entry));
                    }
                }
            }
        }
        Ok(staged)
    }

    /// The lock of `key`'s download: held, no other task downloads it.
    async fn fetching(&self, key: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = self.fetching.lock().expect("not poisoned").entry(key.to_owned()).or_default().clone();
        lock.lock_owned().await
    }

    /// A web input in the cache: fetched, or checked against its validators where an earlier
    /// task fetched it.
    async fn fetch_web(&self, client: &LzClient, url: &str) -> Result<PathBuf, InputError> {
        use reqwest::header::{ETAG, IF_MODIFIED_SINCE, IF_NONE_MATCH, LAST_MODIFIED};
        let key = format!("url-{}", sha256_hex(format!("web\n{url}").as_bytes()));
        let (entry, kept) = (self.dir.join(&key), self.dir.join(format!("{key}.validators")));
        let _fetching = self.fetching(&key).await;
        let cached: Option<WebValidators> = entry
            .exists()
            .then(|| std::fs::read(&kept).ok().and_then(|bytes| serde_json::from_slice(&bytes).ok()))
            .flatten();
        let mut validators = Vec::new();
        if let Some(cached) = &cached {
            validators.extend(cached.etag.clone().map(|tag| (IF_NONE_MATCH, tag)));
            validators.extend(cached.last_modified.clone().map(|at| (IF_MODIFIED_SINCE, at)));
        }
        let response = client.fetch_web(url, &validators).await.map_err(InputError::at(url))?;
        let status = response.status();
        if status == reqwest::StatusCode::NOT_MODIFIED && cached.is_some() {
            return Ok(entry);
        }
        if !status.is_success() {
            return Err(InputError { input: url.to_owned(), cause: InputCause::Status(status) });
        }
        let header = |name| {
            response.headers().get(name).and_then(|v: &reqwest::header::HeaderValue| v.to_str().ok()).map(str::to_owned)
        };
        let fresh = WebValidators { etag: header(ETAG), last_modified: header(LAST_MODIFIED) };
        let size = response.content_length();
        download_sized(response.bytes_stream(), &entry, size).await.map_err(InputError::at(url))?;
        let _ = std::fs::write(&kept, serde_json::to_vec(&fresh).expect("validators serialise"));
        Ok(entry)
    }
}

/// Why an input could not be brought into the cache: which one (its path in the mission, or
/// its URL), and why.
#[derive(Debug, thiserror::Error)]
#[error("{input}: {cause}")]
pub(crate) struct InputError {
    /// The input's path or URL.
    pub input: String,
    /// Why.
    pub cause: InputCause,
}

impl InputError {
    /// Makes errors of the input `input` (for `map_err`).
    fn at<E: Into<InputCause>>(input: impl std::fmt::Display) -> impl FnOnce(E) -> Self {
        let input = input.to_string();
        move |cause| Self { input, cause: cause.into() }
    }
}

/// Why an input could not be fetched.
#[derive(Debug, thiserror::Error)]
pub(crate) enum InputCause {
    /// Its path is no path in a mission.
    #[error(transparent)]
    Path(#[from] mission_api::paths::PathError),
    /// The service would not give it.
    #[error(transparent)]
    Service(#[from] crate::client::Failure),
    /// Its web server could not be reached.
    #[error(transparent)]
    Web(#[from] reqwest::Error),
    /// Its web server answered with this status.
    #[error("{0}")]
    Status(reqwest::StatusCode),
    /// The download failed, or was not what it should be.
    #[error(transparent)]
    Download(#[from] DownloadError),
}

/// Why a download into the cache left nothing there.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DownloadError {
    /// The body broke off.
    #[error(transparent)]
    Body(#[from] reqwest::Error),
    /// The cache could not be written.
    #[error(transparent)]
    Write(#[from] std::io::Error),
    /// Fewer or more bytes came than were announced.
    #[error("{came} bytes came, {announced} were announced")]
    Size {
        /// Bytes that came.
        came: u64,
        /// Bytes announced.
        announced: u64,
    },
    /// Its SHA-256 is not the one it should have.
    #[error("the download does not match its sha256")]
    Digest,
}

/// What a web server said names the content it sent.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct WebValidators {
    etag: Option<String>,
    last_modified: Option<String>,
}

/// `bytes`' SHA-256, lowercase hex.
fn sha256_hex(bytes: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, bytes).as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes `body` to `dest` (0600) through a partial file renamed once it is whole, and of `size`
/// bytes where that is known: `dest` is never half-written.
async fn download_sized(
    body: impl futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin,
    dest: &Path,
    size: Option<u64>,
) -> Result<(), DownloadError> {
    download_to(body, dest, |_, came| match size {
        Some(announced) if announced != came => Err(DownloadError::Size { came, announced }),
        _ => Ok(()),
    })
    .await
}

/// Writes `body` to `dest` (0600) when its SHA-256 is `sha256` (lowercase hex), through a
/// partial file beside it that is renamed once the whole body is checked: `dest` is never
/// half-written, and a download that breaks off or does not match leaves nothing.
pub(crate) async fn download_checked(
    body: impl futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin,
    dest: &std::path::Path,
    sha256: &str,
) -> Result<(), DownloadError> {
    download_to(body, dest, |digest, _| if digest == sha256 { Ok(()) } else { Err(DownloadError::Digest) }).await
}

/// Writes `body` to `dest` (0600) through a partial file beside it, renamed once `check` takes
/// the whole body's SHA-256 (lowercase hex) and size; a download that breaks off or is not
/// taken leaves nothing.
async fn download_to(
    mut body: impl futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin,
    dest: &std::path::Path,
    check: impl FnOnce(&str, u64) -> Result<(), DownloadError>,
) -> Result<(), DownloadError> {
    let name = dest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let partial = dest.with_file_name(format!("{name}.{}.partial", Uuid::new_v4().simple()));
    let mut out = tokio::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&partial).await?;
    let mut hasher = ring::digest::Context::new(&ring::digest::SHA256);
    let mut size = 0;
    let result = async {
        while let Some(chunk) = body.next().await {
            let chunk = chunk?;
            hasher.update(&chunk);
            size += chunk.len() as u64;
            out.write_all(&chunk).await?;
        }
        out.flush().await?;
        let digest: String = hasher.finish().as_ref().iter().map(|b| format!("{b:02x}")).collect();
        check(&digest, size)?;
        Ok(tokio::fs::rename(&partial, dest).await?)
    }
    .await;
    if result.is_err() {
        let _ = tokio::fs::remove_file(&partial).await;
    }
    result
}
