//! Jobs' stdout and stderr as their agents stream them, and a watch per job that wakes followers
//! when bytes arrive or the job ends.
//!
//! One process keeps each stream as a file under `{storage}/job-logs/{mission}/{job}/`. Replicas
//! on a shared database keep the chunks in the database instead (`job_log_chunks`): object
//! storage cannot append, and no replica's folder is the others'.
//!
//! Agents send each chunk with the offset it starts at, so a chunk retried after a lost answer is
//! not written twice. A stream is capped at [`MAX_LOG_BYTES`]; what comes after is dropped with a
//! note in the log.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use mission_api::paths::MissionPath;
use mission_api::{JOB_LOGS_FOLDER, Job};
use tokio::io::AsyncWriteExt;
use tokio::sync::watch;
use uuid::Uuid;

use crate::blobs::{FileStore, Location, WriteError};
use crate::store::{self, ClusterDb, FileRecord, StoreError};

/// Most bytes kept of one stream of one job.
pub const MAX_LOG_BYTES: u64 = 64 * 1024 * 1024;

/// Which output of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogStream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

impl LogStream {
    /// Parses `stdout` or `stderr`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "stdout" => Some(Self::Stdout),
            "stderr" => Some(Self::Stderr),
            _ => None,
        }
    }

    /// Both streams.
    pub const ALL: [Self; 2] = [Self::Stdout, Self::Stderr];

    /// The file name of the stream.
    pub fn file_name(self) -> &'static str {
        match self {
            Self::Stdout => "stdout.log",
            Self::Stderr => "stderr.log",
        }
    }

    /// `stdout` or `stderr`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Stdout => "stdout",
            Self::Stderr => "stderr",
        }
    }

    /// The stream's path among the job's results: `mission-logs/{file name}`.
    pub fn result_path(self) -> MissionPath {
        MissionPath::parse(&format!("{JOB_LOGS_FOLDER}/{}", self.file_name())).expect("a valid path")
    }
}

/// What followers of a job's logs watch: bumped on every write, `done` once the job ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogProgress {
    /// Writes so far.
    pub writes: u64,
    /// The job has ended; nothing more will be written.
    pub done: bool,
}

/// The logs of all jobs.
#[derive(Debug)]
pub struct JobLogs {
    keeping: Keeping,
    watchers: Mutex<HashMap<Uuid, watch::Sender<LogProgress>>>,
}

/// Where the logs are kept.
#[derive(Debug)]
enum Keeping {
    /// One file per stream under `root`, which is also an object store, so logs are listed and
    /// served like other results.
    Files { root: PathBuf, files: FileStore },
    /// Chunks in the database replicas share.
    Database(ClusterDb),
}

impl JobLogs {
    /// Logs as files under `root` (created if missing).
    pub fn new(root: PathBuf) -> std::io::Result<Self> {
        let files = FileStore::local(&root)?;
        Ok(Self { keeping: Keeping::Files { root, files }, watchers: Mutex::new(HashMap::new()) })
    }

    /// Logs kept in the database replicas share.
    pub fn in_database(db: ClusterDb) -> Self {
        Self { keeping: Keeping::Database(db), watchers: Mutex::new(HashMap::new()) }
    }

    /// Where a job's logs live as files, as a results location (the file path of a stream is
    /// its [`LogStream::file_name`]); `None` when they are kept in the database.
    pub fn location(&self, mission_id: Uuid, job_id: Uuid) -> Option<Location> {
        let Keeping::Files { files, .. } = &self.keeping else { return None };
        Some(Location::new(files.clone(), [mission_id.to_string(), job_id.to_string()], true))
    }

    /// The result record of one stream of a job's log (path `mission-logs/{stream}.log`), or
    /// `None` when nothing was written to it.
    pub async fn record(&self, job: &Job, stream: LogStream) -> Result<Option<FileRecord>, LogError> {
        let (size, sha256, e_tag, modified_at) = match &self.keeping {
            Keeping::Files { root, files } => {
                let place = Location::new(files.clone(), [job.mission_id.to_string(), job.job_id.to_string()], true);
                let name = MissionPath::parse(stream.file_name()).expect("a valid file name");
                let written = match place.files.hash(&place.key(&name)).await {
                    Ok(written) => written,
                    Err(object_store::Error::NotFound { .. }) => return Ok(None),
                    Err(e) => return Err(e.into()),
                };
                let modified = tokio::fs::metadata(file_of(root, job.mission_id, job.job_id, stream))
                    .await
                    .and_then(|m| m.modified())
                    .map_or_else(|_| store::now(), chrono::DateTime::<chrono::Utc>::from);
                (written.size, written.sha256, written.e_tag, modified)
            }
            Keeping::Database(db) => {
                let Some((size, sha256, written_at)) = db.log_summary(job.job_id, stream.name()).await? else {
                    return Ok(None);
                };
                (size, sha256, None, store::from_micros(written_at)?)
            }
        };
        Ok(Some(FileRecord {
            mission_id: job.mission_id,
            path: stream.result_path().to_string(),
            user_id: job.user_id,
            size,
            sha256,
            e_tag,
            modified_at,
        }))
    }

    /// Copies a job's logs into `place` at their result paths (a stream never written is
    /// skipped): into a mission's destination cargo bay, beside the job's other results.
    pub async fn copy_to(&self, mission_id: Uuid, job_id: Uuid, place: &Location) -> Result<(), WriteError> {
        for stream in LogStream::ALL {
            let key = place.key(&stream.result_path());
            match &self.keeping {
                Keeping::Files { root, .. } => {
                    let Ok(log) = tokio::fs::File::open(file_of(root, mission_id, job_id, stream)).await else {
                        continue;
                    };
                    place.files.write(&key, tokio_util::io::ReaderStream::new(log), u64::MAX).await?;
                }
                Keeping::Database(db) => {
                    let bytes = db
                        .read_log(job_id, stream.name(), 0)
                        .await
                        .map_err(|e| WriteError::Body(format!("reading the log: {e}")))?;
                    if !bytes.is_empty() {
                        let body =
                            futures_util::stream::iter([Ok::<_, std::io::Error>(axum::body::Bytes::from(bytes))]);
                        place.files.write(&key, body, u64::MAX).await?;
                    }
                }
            }
        }
        Ok(())
    }

    /// The bytes of one stream of a job from `from` to its end (nothing when it was never
    /// written).
    pub async fn read(
        &self,
        mission_id: Uuid,
        job_id: Uuid,
        stream: LogStream,
        from: u64,
    ) -> Result<Vec<u8>, LogError> {
        match &self.keeping {
            Keeping::Files { root, .. } => {
                use tokio::io::{AsyncReadExt, AsyncSeekExt};
                let mut file = match tokio::fs::File::open(file_of(root, mission_id, job_id, stream)).await {
                    Ok(file) => file,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
                    Err(e) => return Err(e.into()),
                };
                file.seek(std::io::SeekFrom::Start(from)).await?;
                let mut bytes = Vec::new();
                file.read_to_end(&mut bytes).await?;
                Ok(bytes)
            }
            Keeping::Database(db) => Ok(db.read_log(job_id, stream.name(), from).await?),
        }
    }

    /// Appends `bytes`, which start at `offset` of the stream; answers the stream's size after.
    /// Bytes before the current size were written already and are skipped.
    pub async fn append(
        &self,
        mission_id: Uuid,
        job_id: Uuid,
        stream: LogStream,
        offset: u64,
        bytes: &[u8],
    ) -> Result<u64, LogError> {
        let root = match &self.keeping {
            Keeping::Files { root, .. } => root,
            Keeping::Database(db) => {
                let size = db.log_size(job_id, stream.name()).await?.map_or(0, |(size, _)| size);
                let Some(kept) = kept_of(size, offset, bytes)? else { return Ok(size) };
                db.append_log(job_id, stream.name(), size, &kept).await?;
                self.written(job_id);
                return Ok(size + kept.len() as u64);
            }
        };
        let path = file_of(root, mission_id, job_id, stream);
        if let Some(dir) = path.parent() {
            tokio::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).await?;
        }
        let mut file = tokio::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(&path).await?;
        let size = file.metadata().await?.len();
        let Some(kept) = kept_of(size, offset, bytes)? else { return Ok(size) };
        file.write_all(&kept).await?;
        file.flush().await?;
        let size = file.metadata().await?.len();
        self.written(job_id);
        Ok(size)
    }

    /// Wakes the followers of a job's logs: bytes arrived (here, or through another replica).
    pub fn written(&self, job_id: Uuid) {
        if let Some(sender) = self.watchers.lock().expect("not poisoned").get(&job_id) {
            sender.send_modify(|p| p.writes += 1);
        }
    }

    /// Watches a job's logs. Check the job's status after subscribing: a job that had ended
    /// before will not signal `done` again.
    pub fn subscribe(&self, job_id: Uuid) -> watch::Receiver<LogProgress> {
        let mut watchers = self.watchers.lock().expect("not poisoned");
        watchers.entry(job_id).or_insert_with(|| watch::channel(LogProgress::default()).0).subscribe()
    }

    /// Marks a job's logs complete and wakes its followers.
    pub fn finish(&self, job_id: Uuid) {
        if let Some(sender) = self.watchers.lock().expect("not poisoned").remove(&job_id) {
            sender.send_modify(|p| p.done = true);
        }
    }

    /// Removes the logs of a mission's jobs (in the database they went with the jobs' rows).
    pub async fn delete_mission(&self, mission_id: Uuid) -> std::io::Result<()> {
        let Keeping::Files { root, .. } = &self.keeping else { return Ok(()) };
        match tokio::fs::remove_dir_all(root.join(mission_id.to_string())).await {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

/// The file of one stream of a job under `root`.
fn file_of(root: &Path, mission_id: Uuid, job_id: Uuid, stream: LogStream) -> PathBuf {
    root.join(mission_id.to_string()).join(job_id.to_string()).join(stream.file_name())
}

/// What of `bytes`, starting at `offset` of a stream now `size` long, is new and fits under
/// [`MAX_LOG_BYTES`] (with a note where the stream is cut); `None` when nothing is. An offset past
/// the end is refused.
fn kept_of(size: u64, offset: u64, bytes: &[u8]) -> Result<Option<Vec<u8>>, LogError> {
    if offset > size {
        return Err(LogError::Gap { offset, size });
    }
    let new = &bytes[((size - offset) as usize).min(bytes.len())..];
    let room = MAX_LOG_BYTES.saturating_sub(size);
    if new.is_empty() || room == 0 {
        return Ok(None);
    }
    if (new.len() as u64) <= room {
        return Ok(Some(new.to_vec()));
    }
    let note = format!("\n[mission: log truncated at {MAX_LOG_BYTES} bytes]\n");
    let keep = (room as usize).saturating_sub(note.len());
    let mut kept = new[..keep].to_vec();
    kept.extend_from_slice(&note.as_bytes()[..(room as usize - keep).min(note.len())]);
    Ok(Some(kept))
}

/// Why a log could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// A chunk starts past the end of what was written.
    #[error("offset {offset} is past the end of the log ({size} bytes)")]
    Gap {
        /// Where the chunk starts.
        offset: u64,
        /// How long the stream is.
        size: u64,
    },
    /// The log's file failed.
    #[error("the log's file: {0}")]
    Io(#[from] std::io::Error),
    /// The log's rows failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The log's folder, as an object store, failed.
    #[error("the logs' folder: {0}")]
    Storage(#[from] object_store::Error),
}

#[cfg(test)]
mod tests {
    use super::{LogError, MAX_LOG_BYTES, kept_of};

    #[test]
    fn a_chunk_keeps_only_what_is_new_and_fits() {
        assert_eq!(kept_of(0, 0, b"hello").unwrap(), Some(b"hello".to_vec()));
        // A retried chunk: what arrived already is skipped.
        assert_eq!(kept_of(5, 0, b"hello world").unwrap(), Some(b" world".to_vec()));
        assert_eq!(kept_of(11, 0, b"hello world").unwrap(), None);
        // A chunk past the end leaves a gap: refused.
        assert!(matches!(kept_of(5, 6, b"x"), Err(LogError::Gap { offset: 6, size: 5 })));
        // At the cap, the stream ends with a note and takes nothing more.
        let near = MAX_LOG_BYTES - 10;
        let kept = kept_of(near, near, &[b'a'; 100]).unwrap().unwrap();
        assert_eq!(kept.len(), 10);
        assert_eq!(kept_of(MAX_LOG_BYTES, MAX_LOG_BYTES, b"more").unwrap(), None);
    }
}
