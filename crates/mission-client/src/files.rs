//! Mission files (spec §4 `upload`, `get_mission_files`, `delete_file`,
//! `create_and_upload_mission`, rules 1–3), plus downloads.
//!
//! Uploads stream each file from disk (memory stays flat for any size), run several files at
//! once, and skip files the mission already holds with the same size and SHA-256, so re-running
//! an upload of an unchanged tree costs one listing and a local hash per file.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures_util::{StreamExt, TryStreamExt};
use mission_api::{CreateMission, FileListing, Mission};
use uuid::Uuid;

use mission_api::paths::encode_segment;

use crate::client::check;
use crate::{Client, Error};

/// Files uploaded or downloaded at once by default: enough to keep a server busy with small
/// files while one request waits on its database write.
pub const DEFAULT_CONCURRENCY: usize = 16;

/// Hears about the progress of a transfer (the CLI draws progress bars with it). Every method
/// has an empty default.
pub trait TransferObserver: Send + Sync {
    /// The transfer will move `files` files of `bytes` bytes in all (skipped files included).
    fn start(&self, files: u64, bytes: u64) {
        let _ = (files, bytes);
    }
    /// `n` more bytes moved (or were found already in place).
    fn bytes(&self, n: u64) {
        let _ = n;
    }
    /// One file of `size` bytes is done; `skipped` when it was already there with the same
    /// content.
    fn file_done(&self, path: &str, size: u64, skipped: bool) {
        let _ = (path, size, skipped);
    }
}

/// The line a verbose transfer prints for one file: `uploaded a/b.txt (12 bytes)`, or
/// `unchanged a/b.txt (12 bytes)` when it was skipped. `moved` says what happened to the others.
///
/// ```
/// assert_eq!(mission_client::file_line("uploaded", "a/b.txt", 12, false), "uploaded a/b.txt (12 bytes)");
/// ```
pub fn file_line(moved: &str, path: &str, size: u64, skipped: bool) -> String {
    format!("{} {path} ({size} bytes)", if skipped { "unchanged" } else { moved })
}

/// Options of [`Client::upload_with`] and [`Client::download_with`].
///
/// ```
/// let options = mission_client::TransferOptions { concurrency: 4, ..Default::default() };
/// assert!(!options.verbose);
/// ```
#[derive(Clone)]
pub struct TransferOptions {
    /// Print one line per file to stderr.
    pub verbose: bool,
    /// Files moved at once.
    pub concurrency: usize,
    /// Progress callbacks.
    pub observer: Option<Arc<dyn TransferObserver>>,
}

impl Default for TransferOptions {
    fn default() -> Self {
        Self { verbose: false, concurrency: DEFAULT_CONCURRENCY, observer: None }
    }
}

impl std::fmt::Debug for TransferOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransferOptions")
            .field("verbose", &self.verbose)
            .field("concurrency", &self.concurrency)
            .finish()
    }
}

/// What a transfer did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct TransferSummary {
    /// Files moved.
    pub transferred: u64,
    /// Files left alone because the other side had the same content.
    pub skipped: u64,
    /// Bytes moved.
    pub bytes: u64,
}

impl TransferSummary {
    /// Tallies `(skipped, size)` per file.
    fn from_results(results: Vec<(bool, u64)>) -> Self {
        let mut summary = Self::default();
        for (skipped, size) in results {
            if skipped {
                summary.skipped += 1;
            } else {
                summary.transferred += 1;
                summary.bytes += size;
            }
        }
        summary
    }
}

/// Files up to this size are read whole and sent as one buffer.
const SMALL_FILE_BYTES: u64 = 1 << 20;

/// A local file and where it goes in the mission.
struct Planned {
    local: PathBuf,
    remote: String,
    size: u64,
}

/// URL path of a mission file, each segment percent-encoded.
fn file_path(mission_id: Uuid, path: &str) -> String {
    let encoded: Vec<String> = path.split('/').map(encode_segment).collect();
    format!("/missions/{mission_id}/files/{}", encoded.join("/"))
}

/// SHA-256 of a local file, hex, read in a blocking task.
async fn sha256_of(path: &Path) -> std::io::Result<String> {
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || {
        use std::io::Read;
        let mut file = std::fs::File::open(&path)?;
        let mut context = ring::digest::Context::new(&ring::digest::SHA256);
        let mut buffer = vec![0u8; 1 << 20];
        loop {
            let n = file.read(&mut buffer)?;
            if n == 0 {
                break;
            }
            context.update(&buffer[..n]);
        }
        Ok(context.finish().as_ref().iter().map(|b| format!("{b:02x}")).collect())
    })
    .await
    .map_err(std::io::Error::other)?
}

pub(crate) fn io_error(path: &Path, e: std::io::Error) -> Error {
    Error::Io { path: path.to_owned(), source: e }
}

/// The files of `payload` and their mission paths, per spec rules 1 and 2.
fn plan(payload: &Path, rename: Option<&str>) -> Result<Vec<Planned>, Error> {
    let meta = std::fs::metadata(payload).map_err(|e| io_error(payload, e))?;
    if meta.is_file() {
        let remote = match rename {
            Some(r) => r.trim_start_matches("./").to_owned(),
            None => payload
                .file_name()
                .and_then(|n| n.to_str())
                .ok_or_else(|| Error::InvalidPath(payload.display().to_string()))?
                .to_owned(),
        };
        return Ok(vec![Planned { local: payload.to_owned(), remote, size: meta.len() }]);
    }
    let mut planned = Vec::new();
    let mut folders = vec![(payload.to_owned(), String::new())];
    while let Some((folder, prefix)) = folders.pop() {
        for entry in std::fs::read_dir(&folder).map_err(|e| io_error(&folder, e))? {
            let entry = entry.map_err(|e| io_error(&folder, e))?;
            let name = entry.file_name();
            let name = name.to_str().ok_or_else(|| Error::InvalidPath(entry.path().display().to_string()))?;
            let remote = if prefix.is_empty() { name.to_owned() } else { format!("{prefix}/{name}") };
            let kind = entry.file_type().map_err(|e| io_error(&entry.path(), e))?;
            if kind.is_dir() {
                folders.push((entry.path(), remote));
            } else if kind.is_file() {
                let size = entry.metadata().map_err(|e| io_error(&entry.path(), e))?.len();
                planned.push(Planned { local: entry.path(), remote, size });
            }
            // Symbolic links and special files are not followed: an upload never leaves the tree.
        }
    }
    planned.sort_by(|a, b| a.remote.cmp(&b.remote));
    Ok(planned)
}

impl Client {
    /// Uploads a file or a directory to a mission (spec rules 1 and 2): a file goes to the top
    /// level, or to `rename`; a directory's first level goes to the top level and its subfolders
    /// stay subfolders. Returns `false` when the mission does not exist. `verbose` prints one
    /// line per file.
    ///
    /// ```no_run
    /// # async fn demo(client: mission_client::Client, id: uuid::Uuid) -> Result<(), mission_client::Error> {
    /// assert!(client.upload(id, "inputs/", None, false).await?);
    /// client.upload(id, "params.yaml", Some("config/params.yaml"), true).await?;
    /// # Ok(()) }
    /// ```
    pub async fn upload(
        &self,
        mission_id: Uuid,
        payload: impl AsRef<Path>,
        rename: Option<&str>,
        verbose: bool,
    ) -> Result<bool, Error> {
        let options = TransferOptions { verbose, ..Default::default() };
        Ok(self.upload_with(mission_id, payload.as_ref(), rename, &options).await?.is_some())
    }

    /// [`Client::upload`] with concurrency and progress options; `None` when the mission does
    /// not exist, else what was uploaded and skipped.
    pub async fn upload_with(
        &self,
        mission_id: Uuid,
        payload: &Path,
        rename: Option<&str>,
        options: &TransferOptions,
    ) -> Result<Option<TransferSummary>, Error> {
        let existing = match self.get_mission_files(mission_id).await {
            Ok(files) => files,
            Err(Error::NotFound(_)) => return Ok(None),
            Err(e) => return Err(e),
        };
        let existing: std::collections::HashMap<String, FileListing> =
            existing.into_iter().map(|f| (f.relative_path(), f)).collect();
        let planned = plan(payload, rename)?;
        if let Some(o) = &options.observer {
            o.start(planned.len() as u64, planned.iter().map(|p| p.size).sum());
        }
        let existing = &existing;
        let results: Vec<(bool, u64)> = futures_util::stream::iter(planned)
            .map(|file| async move {
                let same = match existing.get(&file.remote) {
                    Some(remote) if remote.file_size == file.size => {
                        sha256_of(&file.local).await.map_err(|e| io_error(&file.local, e))? == remote.sha256
                    }
                    _ => false,
                };
                if !same {
                    self.upload_file(mission_id, &file, options).await?;
                } else if let Some(o) = &options.observer {
                    o.bytes(file.size);
                }
                if let Some(o) = &options.observer {
                    o.file_done(&file.remote, file.size, same);
                }
                if options.verbose {
                    eprintln!("{}", file_line("uploaded", &file.remote, file.size, same));
                }
                Ok::<_, Error>((same, file.size))
            })
            .buffer_unordered(options.concurrency.max(1))
            .try_collect()
            .await?;
        Ok(Some(TransferSummary::from_results(results)))
    }

    async fn upload_file(&self, mission_id: Uuid, file: &Planned, options: &TransferOptions) -> Result<(), Error> {
        // Small files go as one buffer (no stream machinery per request); larger ones stream
        // from disk so memory stays flat.
        let (body, length) = if file.size <= SMALL_FILE_BYTES {
            let bytes = tokio::fs::read(&file.local).await.map_err(|e| io_error(&file.local, e))?;
            if let Some(o) = &options.observer {
                o.bytes(bytes.len() as u64);
            }
            let length = bytes.len() as u64;
            (reqwest::Body::from(bytes), length)
        } else {
            let handle = tokio::fs::File::open(&file.local).await.map_err(|e| io_error(&file.local, e))?;
            let observer = options.observer.clone();
            let stream = tokio_util::io::ReaderStream::with_capacity(handle, 256 * 1024).inspect_ok(move |chunk| {
                if let Some(o) = &observer {
                    o.bytes(chunk.len() as u64);
                }
            });
            (reqwest::Body::wrap_stream(stream), file.size)
        };
        let response = self
            .send_once(&file_path_checked(mission_id, &file.remote)?, |http, url| {
                http.put(url).header(reqwest::header::CONTENT_LENGTH, length).body(body)
            })
            .await?;
        check(response).await?;
        Ok(())
    }

    /// The files of a mission, by path.
    ///
    /// ```no_run
    /// # async fn demo(client: mission_client::Client, id: uuid::Uuid) -> Result<(), mission_client::Error> {
    /// for f in client.get_mission_files(id).await? {
    ///     println!("{} {} bytes", f.relative_path(), f.file_size);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn get_mission_files(&self, mission_id: Uuid) -> Result<Vec<FileListing>, Error> {
        self.get_json(&format!("/missions/{mission_id}/files"), &[]).await
    }

    /// Deletes a file given by its path relative to the mission root: `true` when it was
    /// deleted, `false` when there was no such file.
    ///
    /// ```no_run
    /// # async fn demo(client: mission_client::Client, id: uuid::Uuid) -> Result<(), mission_client::Error> {
    /// for f in client.get_mission_files(id).await? {
    ///     if f.name.ends_with(".tmp") {
    ///         client.delete_file(id, &f.relative_path()).await?;
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn delete_file(&self, mission_id: Uuid, file_path: &str) -> Result<bool, Error> {
        self.delete_found(&file_path_checked(mission_id, file_path)?).await
    }

    /// Downloads one file to `dest` (written to a temporary file beside it and renamed once its
    /// SHA-256 is checked, so `dest` is never half-written).
    ///
    /// ```no_run
    /// # async fn demo(client: mission_client::Client, id: uuid::Uuid) -> Result<(), mission_client::Error> {
    /// client.download_file(id, "results/summary.csv", "summary.csv".as_ref()).await?;
    /// # Ok(()) }
    /// ```
    pub async fn download_file(&self, mission_id: Uuid, file_path: &str, dest: &Path) -> Result<u64, Error> {
        self.download_one(&file_path_checked(mission_id, file_path)?, file_path, dest, None).await
    }

    /// Downloads the file at the API path `url_path` (whose listing path is `file_path`) to `dest`.
    pub(crate) async fn download_one(
        &self,
        url_path: &str,
        file_path: &str,
        dest: &Path,
        observer: Option<&Arc<dyn TransferObserver>>,
    ) -> Result<u64, Error> {
        use tokio::io::AsyncWriteExt;
        let response = check(self.send(url_path, |http, url| http.get(url)).await?).await?;
        let expected = response
            .headers()
            .get(reqwest::header::ETAG)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.trim_matches('"').to_owned());
        if let Some(dir) = dest.parent().filter(|d| !d.as_os_str().is_empty()) {
            tokio::fs::create_dir_all(dir).await.map_err(|e| io_error(dir, e))?;
        }
        let name = dest.file_name().and_then(|n| n.to_str()).unwrap_or("download");
        let tmp = dest.with_file_name(format!(".{name}.part-{}", Uuid::new_v4().simple()));
        let result = async {
            let mut out = tokio::fs::File::create(&tmp).await.map_err(|e| io_error(&tmp, e))?;
            let mut context = ring::digest::Context::new(&ring::digest::SHA256);
            let mut stream = response.bytes_stream();
            let mut size = 0u64;
            while let Some(chunk) = stream.next().await {
                let chunk = chunk?;
                context.update(&chunk);
                out.write_all(&chunk).await.map_err(|e| io_error(&tmp, e))?;
                size += chunk.len() as u64;
                if let Some(o) = observer {
                    o.bytes(chunk.len() as u64);
                }
            }
            out.flush().await.map_err(|e| io_error(&tmp, e))?;
            let actual: String = context.finish().as_ref().iter().map(|b| format!("{b:02x}")).collect();
            if expected.as_ref().is_some_and(|e| *e != actual) {
                return Err(Error::Protocol(format!(
                    "{file_path}: the download's SHA-256 does not match the server's"
                )));
            }
            tokio::fs::rename(&tmp, dest).await.map_err(|e| io_error(dest, e))?;
            Ok(size)
        }
        .await;
        if result.is_err() {
            let _ = tokio::fs::remove_file(&tmp).await;
        }
        result
    }

    /// Mirrors a mission's files into `dest_dir` (created if needed), skipping files already
    /// there with the same content.
    ///
    /// ```no_run
    /// # async fn demo(client: mission_client::Client, id: uuid::Uuid) -> Result<(), mission_client::Error> {
    /// let summary = client.download(id, "mission-copy".as_ref()).await?;
    /// println!("{} files, {} bytes", summary.transferred, summary.bytes);
    /// # Ok(()) }
    /// ```
    pub async fn download(&self, mission_id: Uuid, dest_dir: &Path) -> Result<TransferSummary, Error> {
        self.download_with(mission_id, None, dest_dir, &TransferOptions::default()).await
    }

    /// [`Client::download`] of the whole mission, or of the files under `prefix` (a file or a
    /// folder), with options.
    pub async fn download_with(
        &self,
        mission_id: Uuid,
        prefix: Option<&str>,
        dest_dir: &Path,
        options: &TransferOptions,
    ) -> Result<TransferSummary, Error> {
        let files = self.get_mission_files(mission_id).await?;
        let place = |path: &mission_api::paths::MissionPath| file_path(mission_id, path.as_str());
        let what = format!("mission {mission_id}");
        self.download_listing(files, &place, &what, prefix, dest_dir, options).await
    }

    /// Mirrors the files of `files` (under `prefix`, if given) into `dest_dir`, each fetched
    /// from the API path `place` gives it, skipping files already there with the same content.
    pub(crate) async fn download_listing(
        &self,
        files: Vec<FileListing>,
        place: &(dyn Fn(&mission_api::paths::MissionPath) -> String + Sync),
        what: &str,
        prefix: Option<&str>,
        dest_dir: &Path,
        options: &TransferOptions,
    ) -> Result<TransferSummary, Error> {
        let prefix = prefix.map(|p| p.trim_matches('/').to_owned()).filter(|p| !p.is_empty());
        let files: Vec<FileListing> = files
            .into_iter()
            .filter(|f| {
                let path = f.relative_path();
                prefix.as_ref().is_none_or(|p| path == *p || path.starts_with(&format!("{p}/")))
            })
            .collect();
        if let (Some(p), true) = (&prefix, files.is_empty()) {
            return Err(Error::Protocol(format!("{what} has no file or folder {p:?}")));
        }
        if let Some(o) = &options.observer {
            o.start(files.len() as u64, files.iter().map(|f| f.file_size).sum());
        }
        let results: Vec<(bool, u64)> = futures_util::stream::iter(files)
            .map(|file| async move {
                let relative = file.relative_path();
                // The server's paths are already normalised; refuse anything else all the same.
                let checked = mission_api::paths::MissionPath::parse(&relative)
                    .map_err(|_| Error::InvalidPath(relative.clone()))?;
                let dest = checked.segments().fold(dest_dir.to_owned(), |p, s| p.join(s));
                let same = match tokio::fs::metadata(&dest).await {
                    Ok(m) if m.len() == file.file_size => {
                        sha256_of(&dest).await.map_err(|e| io_error(&dest, e))? == file.sha256
                    }
                    _ => false,
                };
                if same {
                    if let Some(o) = &options.observer {
                        o.bytes(file.file_size);
                    }
                } else {
                    self.download_one(&place(&checked), &relative, &dest, options.observer.as_ref()).await?;
                }
                if let Some(o) = &options.observer {
                    o.file_done(&relative, file.file_size, same);
                }
                if options.verbose {
                    eprintln!("{}", file_line("downloaded", &relative, file.file_size, same));
                }
                Ok::<_, Error>((same, file.file_size))
            })
            .buffer_unordered(options.concurrency.max(1))
            .try_collect()
            .await?;
        Ok(TransferSummary::from_results(results))
    }

    /// Creates a mission and uploads `directory` to it (spec rule 3). If the upload fails the
    /// mission stays, with what did arrive, and the error is returned.
    ///
    /// ```no_run
    /// # async fn demo(client: mission_client::Client) -> Result<(), mission_client::Error> {
    /// use mission_client::CreateMission;
    /// let request = CreateMission { name: "from folder".into(), ..Default::default() };
    /// let mission = client.create_and_upload_mission(&request, "experiment/".as_ref()).await?;
    /// # Ok(()) }
    /// ```
    pub async fn create_and_upload_mission(&self, request: &CreateMission, directory: &Path) -> Result<Mission, Error> {
        if !directory.is_dir() {
            return Err(Error::InvalidPath(format!("{} is not a directory", directory.display())));
        }
        let mission = self.create_mission(request).await?;
        self.upload_with(mission.mission_id, directory, None, &TransferOptions::default()).await?;
        Ok(mission)
    }
}

/// [`file_path`] of a caller-given path, refused locally when it could not name a mission file.
fn file_path_checked(mission_id: Uuid, path: &str) -> Result<String, Error> {
    let checked =
        mission_api::paths::MissionPath::parse(path).map_err(|e| Error::InvalidPath(format!("{path:?}: {e}")))?;
    Ok(file_path(mission_id, checked.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_urls_encode_each_segment() {
        let id = Uuid::nil();
        assert_eq!(
            file_path(id, "a b/ü#1?.txt"),
            "/missions/00000000-0000-0000-0000-000000000000/files/a%20b/%C3%BC%231%3F.txt"
        );
    }

    #[test]
    fn plans_follow_the_upload_rules() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("sub/deeper")).unwrap();
        std::fs::write(dir.path().join("top.txt"), "t").unwrap();
        std::fs::write(dir.path().join("sub/deeper/x.bin"), "xx").unwrap();
        let remote: Vec<String> = plan(dir.path(), None).unwrap().into_iter().map(|p| p.remote).collect();
        assert_eq!(remote, ["sub/deeper/x.bin", "top.txt"]);
        let single = plan(&dir.path().join("top.txt"), None).unwrap();
        assert_eq!(single[0].remote, "top.txt");
        let renamed = plan(&dir.path().join("top.txt"), Some("docs/readme.txt")).unwrap();
        assert_eq!(renamed[0].remote, "docs/readme.txt");
    }
}
