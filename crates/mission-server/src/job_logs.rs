//! Jobs' stdout and stderr as their agents stream them: one file per stream under
//! `DATA_DIR/job-logs/{mission}/{job}/`, and a watch per job that wakes followers when bytes arrive
//! or the job ends.
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
use crate::store::{self, FileRecord};

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
    root: PathBuf,
    /// The same folder as an object store, so logs are listed and served like other results.
    files: FileStore,
    watchers: Mutex<HashMap<Uuid, watch::Sender<LogProgress>>>,
}

impl JobLogs {
    /// Logs under `root` (created if missing).
    pub fn new(root: PathBuf) -> std::io::Result<Self> {
        let files = FileStore::local(&root)?;
        Ok(Self { root, files, watchers: Mutex::new(HashMap::new()) })
    }

    /// Where a job's logs live, as a results location; the file path of a stream is its
    /// [`LogStream::file_name`].
    pub fn location(&self, mission_id: Uuid, job_id: Uuid) -> Location {
        Location::new(self.files.clone(), [mission_id.to_string(), job_id.to_string()], true)
    }

    /// The result record of one stream of a job's log (path `mission-logs/{stream}.log`), or
    /// `None` when nothing was written to it.
    pub async fn record(&self, job: &Job, stream: LogStream) -> Result<Option<FileRecord>, object_store::Error> {
        let place = self.location(job.mission_id, job.job_id);
        let name = MissionPath::parse(stream.file_name()).expect("a valid file name");
        let written = match place.files.hash(&place.key(&name)).await {
            Ok(written) => written,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        let modified = tokio::fs::metadata(self.path(job.mission_id, job.job_id, stream))
            .await
            .and_then(|m| m.modified())
            .map_or_else(|_| store::now(), chrono::DateTime::<chrono::Utc>::from);
        Ok(Some(FileRecord {
            mission_id: job.mission_id,
            path: stream.result_path().to_string(),
            user_id: job.user_id,
            size: written.size,
            sha256: written.sha256,
            e_tag: written.e_tag,
            modified_at: modified,
        }))
    }

    /// Copies a job's logs into `place` at their result paths (a stream never written is
    /// skipped): into a mission's destination cargo bay, beside the job's other results.
    pub async fn copy_to(&self, mission_id: Uuid, job_id: Uuid, place: &Location) -> Result<(), WriteError> {
        for stream in LogStream::ALL {
            let Ok(log) = tokio::fs::File::open(self.path(mission_id, job_id, stream)).await else { continue };
            let body = tokio_util::io::ReaderStream::new(log);
            place.files.write(&place.key(&stream.result_path()), body, u64::MAX).await?;
        }
        Ok(())
    }

    /// The file of one stream of a job.
    pub fn path(&self, mission_id: Uuid, job_id: Uuid, stream: LogStream) -> PathBuf {
        self.root.join(mission_id.to_string()).join(job_id.to_string()).join(stream.file_name())
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
    ) -> std::io::Result<u64> {
        let path = self.path(mission_id, job_id, stream);
        if let Some(dir) = path.parent() {
            tokio::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).await?;
        }
        let mut file = tokio::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(&path).await?;
        let size = file.metadata().await?.len();
        if offset > size {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("offset {offset} is past the end of the log ({size} bytes)"),
            ));
        }
        let new = &bytes[((size - offset) as usize).min(bytes.len())..];
        if new.is_empty() {
            return Ok(size);
        }
        let room = MAX_LOG_BYTES.saturating_sub(size);
        if room == 0 {
            return Ok(size);
        }
        if (new.len() as u64) <= room {
            file.write_all(new).await?;
        } else {
            let note = format!("\n[mission: log truncated at {MAX_LOG_BYTES} bytes]\n");
            let keep = (room as usize).saturating_sub(note.len());
            file.write_all(&new[..keep]).await?;
            file.write_all(&note.as_bytes()[..(room as usize - keep).min(note.len())]).await?;
        }
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

    /// Removes the logs of a mission's jobs.
    pub async fn delete_mission(&self, mission_id: Uuid) -> std::io::Result<()> {
        match tokio::fs::remove_dir_all(self.root.join(mission_id.to_string())).await {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// The folder logs live in.
    pub fn root(&self) -> &Path {
        &self.root
    }
}
