//! The content cache of input files (`DATA_DIR/cache/{sha256}`), shared by every runner: an
//! input is downloaded once per content, checked against its SHA-256, and copied from here into
//! each job's work dir. No job ever sees the cache.

use std::path::PathBuf;

use futures_util::StreamExt;
use mission_api::lz::InputFile;
use mission_api::paths::MissionPath;
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

/// The cache in one agent's data dir.
pub(crate) struct InputCache {
    dir: PathBuf,
}

impl InputCache {
    /// The cache in `dir` (which exists, private to the agent).
    pub fn new(dir: PathBuf) -> Self {
        Self { dir }
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
    pub async fn download(&self, client: &LzClient, job_id: Uuid, files: &[&InputFile]) -> Result<(), String> {
        for file in files {
            self.download_one(client, job_id, file).await?;
        }
        Ok(())
    }

    async fn download_one(&self, client: &LzClient, job_id: Uuid, file: &InputFile) -> Result<(), String> {
        let path = MissionPath::parse(&file.path).map_err(|e| format!("{:?}: {e}", file.path))?;
        let body = client.input(job_id, &path).await.map_err(|e| format!("{path}: {e}"))?;
        download_checked(body, &self.dir.join(&file.sha256), &file.sha256).await.map_err(|e| format!("{path}: {e}"))
    }
}

/// Writes `body` to `dest` (0600) when its SHA-256 is `sha256` (lowercase hex), through a
/// partial file beside it that is renamed once the whole body is checked: `dest` is never
/// half-written, and a download that breaks off or does not match leaves nothing.
pub(crate) async fn download_checked(
    mut body: impl futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin,
    dest: &std::path::Path,
    sha256: &str,
) -> Result<(), String> {
    let name = dest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let partial = dest.with_file_name(format!("{name}.{}.partial", Uuid::new_v4().simple()));
    let mut out = tokio::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&partial)
        .await
        .map_err(|e| e.to_string())?;
    let mut hasher = ring::digest::Context::new(&ring::digest::SHA256);
    let result = async {
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| e.to_string())?;
            hasher.update(&chunk);
            out.write_all(&chunk).await.map_err(|e| e.to_string())?;
        }
        out.flush().await.map_err(|e| e.to_string())?;
        let digest: String = hasher.finish().as_ref().iter().map(|b| format!("{b:02x}")).collect();
        if digest != sha256 {
            return Err("the download does not match its sha256".to_owned());
        }
        tokio::fs::rename(&partial, dest).await.map_err(|e| e.to_string())
    }
    .await;
    if result.is_err() {
        let _ = tokio::fs::remove_file(&partial).await;
    }
    result
}
