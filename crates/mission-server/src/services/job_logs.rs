//! Jobs' stdout and stderr as their agents stream them, and a watch per job that wakes followers
//! when bytes arrive or the job ends.
//!
//! One process keeps each stream as a file under `{storage}/job-logs/{mission}/{job}/`. Replicas
//! on a shared database keep the chunks in the database instead (`job_log_chunks`): object
//! storage cannot append, and no replica's folder is the others'.
//!
//! Agents send each chunk with the offset it starts at in all the stream's output, so a chunk
//! retried after a lost answer is not written twice.
//!
//! # The log cap
//! A stream keeps its first `cap` bytes (the job's [`Job::log_cap`], else the server's
//! `--job-log-cap`). Past them the log shows one marker line ([`truncation_marker`]) and the job
//! is flagged [`Job::log_truncated`]; of the output after the cap only the last quarter-cap bytes
//! are kept, aside as the *tail*, oldest dropped first. When the job ends ([`JobLogs::seal`]) the
//! tail is appended after the marker. So a log takes at most 1.25 × cap plus the marker, and
//! readers only ever see it grow: the head live, then the marker, then the tail at the end.
//!
//! As files, the tail is `{stream}.tail` beside the log: a header (the head's size, then where in
//! the output its first byte is) and the bytes, rewritten with only the last quarter-cap once it
//! holds twice that. In the database it is rows of `job_log_tails`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use mission_api::paths::MissionPath;
use mission_api::{JOB_LOGS_FOLDER, Job};
use tokio::io::AsyncWriteExt;
use tokio::sync::watch;
use uuid::Uuid;

use crate::services::blobs::{FileStore, Location, WriteError};
use mission_store::{self as store, ClusterDb, FileRecord, StoreError};

pub use crate::config::DEFAULT_LOG_CAP;

/// Bytes of output past the cap that are kept: the last quarter-cap.
fn tail_keep(cap: u64) -> u64 {
    cap / 4
}

/// The line between the head of a log that reached its cap `cap` and its tail.
pub fn truncation_marker(cap: u64) -> String {
    format!(
        "\n[mission: the log reached its cap of {cap} bytes here; of the output after it, only the last {} bytes \
         are kept, and they follow this line once the job has ended]\n",
        tail_keep(cap)
    )
}

/// Which output of a job: standard output or error, of one of its nodes (a gang's node `n` > 0
/// keeps its logs apart, under `node-{n}/`; every other job has node 0 alone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogStream {
    output: Output,
    node: u32,
}

/// Standard output or error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Output {
    Stdout,
    Stderr,
}

impl LogStream {
    /// Standard output (of node 0).
    pub const STDOUT: Self = Self { output: Output::Stdout, node: 0 };
    /// Standard error (of node 0).
    pub const STDERR: Self = Self { output: Output::Stderr, node: 0 };
    /// Both streams of node 0.
    pub const ALL: [Self; 2] = [Self::STDOUT, Self::STDERR];

    /// Parses `stdout` or `stderr` (of node 0).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "stdout" => Some(Self::STDOUT),
            "stderr" => Some(Self::STDERR),
            _ => None,
        }
    }

    /// The same stream of node `node`.
    pub fn of_node(self, node: u32) -> Self {
        Self { node, ..self }
    }

    /// Both streams of each of a job's `nodes`.
    pub fn all_of(nodes: u32) -> impl Iterator<Item = Self> {
        (0..nodes.max(1)).flat_map(|node| Self::ALL.map(|stream| stream.of_node(node)))
    }

    /// Both streams of each node of `job`.
    pub fn of_job(job: &Job) -> impl Iterator<Item = Self> + use<> {
        Self::all_of(job.nodes())
    }

    /// The file name of the stream, under its node's folder: `stdout.log`, `node-2/stderr.log`.
    pub fn file_name(self) -> String {
        format!("{}{}.log", self.folder(), self.output_name())
    }

    /// Its name, as the database keeps it: `stdout`, `node-2/stderr`.
    pub fn name(self) -> String {
        format!("{}{}", self.folder(), self.output_name())
    }

    /// `stdout` or `stderr`.
    fn output_name(self) -> &'static str {
        match self.output {
            Output::Stdout => "stdout",
            Output::Stderr => "stderr",
        }
    }

    /// Where a node's logs are kept apart: `node-{n}/`, nothing for node 0.
    fn folder(self) -> String {
        if self.node == 0 { String::new() } else { format!("node-{}/", self.node) }
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
                let name = MissionPath::parse(&stream.file_name()).expect("a valid file name");
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
                let Some((size, sha256, written_at)) = db.log_summary(job.job_id, &stream.name()).await? else {
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
    pub async fn copy_to(
        &self,
        mission_id: Uuid,
        job_id: Uuid,
        nodes: u32,
        place: &Location,
    ) -> Result<(), WriteError> {
        for stream in LogStream::all_of(nodes) {
            let key = place.key(&stream.result_path());
            match &self.keeping {
                Keeping::Files { root, .. } => {
                    let Ok(log) = tokio::fs::File::open(file_of(root, mission_id, job_id, stream)).await else {
                        continue;
                    };
                    place.files.write(&key, tokio_util::io::ReaderStream::new(log), u64::MAX).await?;
                }
                Keeping::Database(_) => {
                    let bytes = self
                        .read(mission_id, job_id, stream, 0)
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
    /// written): the head, the marker once it passed its cap, and the tail once it was sealed.
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
                let path = file_of(root, mission_id, job_id, stream);
                // The log is opened before the tail is looked at: sealing replaces the log and
                // then removes the tail, so a log of exactly the head's size with a tail beside
                // it is one not sealed yet.
                let mut file = match tokio::fs::File::open(&path).await {
                    Ok(file) => file,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
                    Err(e) => return Err(e.into()),
                };
                let size = file.metadata().await?.len();
                let unsealed = TailFile::open(&tail_of(&path)).await?.is_some_and(|tail| tail.head == size);
                file.seek(std::io::SeekFrom::Start(from)).await?;
                let mut bytes = Vec::new();
                file.read_to_end(&mut bytes).await?;
                Ok(with_marker(bytes, from, size, unsealed))
            }
            Keeping::Database(db) => {
                let (bytes, unsealed_head) = db.read_log(job_id, &stream.name(), from).await?;
                Ok(match unsealed_head {
                    Some(size) => with_marker(bytes, from, size, true),
                    None => bytes,
                })
            }
        }
    }

    /// How many bytes of the stream's output were received, those dropped past the cap
    /// included: where the next output starts (a retried job's next attempt goes on from there).
    pub async fn received(&self, mission_id: Uuid, job_id: Uuid, stream: LogStream) -> Result<u64, LogError> {
        match &self.keeping {
            Keeping::Files { root, .. } => {
                let path = file_of(root, mission_id, job_id, stream);
                let size = match tokio::fs::metadata(&path).await {
                    Ok(meta) => meta.len(),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
                    Err(e) => return Err(e.into()),
                };
                let tail = TailFile::open(&tail_of(&path)).await?;
                Ok(tail.filter(|tail| tail.head == size).map_or(size, |tail| tail.end()))
            }
            Keeping::Database(db) => {
                let (size, tail_end) = db.log_state(job_id, &stream.name()).await?;
                Ok(tail_end.unwrap_or(size))
            }
        }
    }

    /// Appends `bytes`, which start at `offset` of the stream's output, under the log cap `cap`.
    /// Bytes before what was received are skipped; past the cap they go to the tail.
    pub async fn append(
        &self,
        mission_id: Uuid,
        job_id: Uuid,
        stream: LogStream,
        offset: u64,
        bytes: &[u8],
        cap: u64,
    ) -> Result<Appended, LogError> {
        let root = match &self.keeping {
            Keeping::Files { root, .. } => root,
            Keeping::Database(db) => {
                let (size, tail_end) = db.log_state(job_id, &stream.name()).await?;
                let plan = Plan::of(size, tail_end, offset, bytes, cap)?;
                if !plan.head.is_empty() {
                    db.append_log(job_id, &stream.name(), size, plan.head).await?;
                }
                if !plan.tail.is_empty() {
                    db.append_log_tail(job_id, &stream.name(), plan.tail_start, plan.tail, tail_keep(plan.cap)).await?;
                }
                return Ok(self.appended(job_id, &plan));
            }
        };
        let path = file_of(root, mission_id, job_id, stream);
        if let Some(dir) = path.parent() {
            tokio::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).await?;
        }
        let mut file = tokio::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(&path).await?;
        let size = file.metadata().await?.len();
        let tail_path = tail_of(&path);
        let mut tail = match TailFile::open(&tail_path).await? {
            // Sealed, but the tail was left behind: the log is complete.
            Some(tail) if tail.head != size => {
                remove_if_there(&tail_path).await?;
                None
            }
            tail => tail,
        };
        let plan = Plan::of(size, tail.as_ref().map(TailFile::end), offset, bytes, cap)?;
        if !plan.head.is_empty() {
            file.write_all(plan.head).await?;
            file.flush().await?;
        }
        if !plan.tail.is_empty() {
            match tail.as_mut() {
                Some(tail) if tail.end() == plan.tail_start => tail.append(plan.tail, tail_keep(plan.cap)).await?,
                // A new tail, or one the chunk's last quarter-cap replaces whole.
                _ => TailFile::create(&tail_path, plan.cap, plan.tail_start, plan.tail).await?,
            }
        }
        Ok(self.appended(job_id, &plan))
    }

    /// What [`JobLogs::append`] answers once `plan` is written, waking the log's followers when
    /// it wrote anything.
    fn appended(&self, job_id: Uuid, plan: &Plan<'_>) -> Appended {
        if !plan.head.is_empty() || !plan.tail.is_empty() {
            self.written(job_id);
        }
        Appended { received: plan.tail_start + plan.tail.len() as u64, truncated: plan.past_cap }
    }

    /// Ends the logs of a job that passed its cap: each tail goes after the marker. Idempotent,
    /// and safe to repeat after a crash part-way.
    pub async fn seal(&self, mission_id: Uuid, job_id: Uuid, nodes: u32) -> Result<(), LogError> {
        for stream in LogStream::all_of(nodes) {
            match &self.keeping {
                Keeping::Files { root, .. } => {
                    let path = file_of(root, mission_id, job_id, stream);
                    let tail_path = tail_of(&path);
                    let Some(tail) = TailFile::open(&tail_path).await? else { continue };
                    let size = tokio::fs::metadata(&path).await?.len();
                    if size == tail.head {
                        // The sealed log is written aside and moved over the log, so a reader
                        // sees the old one or the whole new one.
                        let sealing = path.with_extension("sealing");
                        tokio::fs::copy(&path, &sealing).await?;
                        let mut sealed = tokio::fs::OpenOptions::new().append(true).open(&sealing).await?;
                        sealed.write_all(&marker_and_tail(tail.head, &tail.last(tail_keep(tail.head)).await?)).await?;
                        sealed.flush().await?;
                        tokio::fs::rename(&sealing, &path).await?;
                    }
                    remove_if_there(&tail_path).await?;
                }
                Keeping::Database(db) => {
                    db.seal_log(job_id, &stream.name(), |head, tail| marker_and_tail(head, &tail)).await?
                }
            }
        }
        self.written(job_id);
        Ok(())
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

/// The tail file of the log at `path`.
fn tail_of(path: &Path) -> PathBuf {
    path.with_extension("tail")
}

async fn remove_if_there(path: &Path) -> std::io::Result<()> {
    match tokio::fs::remove_file(path).await {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// What sealing appends to a head of `head` bytes: the marker, then the last quarter-cap of
/// `tail`.
fn marker_and_tail(head: u64, tail: &[u8]) -> Vec<u8> {
    let mut sealed = truncation_marker(head).into_bytes();
    sealed.extend_from_slice(&tail[tail.len().saturating_sub(tail_keep(head) as usize)..]);
    sealed
}

/// `bytes`, read from `from` of a log `size` long, with what `from` reaches of the marker
/// after it when the log passed its cap and is not sealed yet.
fn with_marker(mut bytes: Vec<u8>, from: u64, size: u64, unsealed: bool) -> Vec<u8> {
    if unsealed {
        let marker = truncation_marker(size);
        let skip = (from.saturating_sub(size) as usize).min(marker.len());
        bytes.extend_from_slice(&marker.as_bytes()[skip..]);
    }
    bytes
}

/// What [`JobLogs::append`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// Bytes of the stream's output received so far, kept or not.
    pub received: u64,
    /// The stream has passed its cap.
    pub truncated: bool,
}

/// Where the new bytes of a chunk go (nowhere when none is new, or the log is sealed).
#[derive(Debug, PartialEq, Eq)]
struct Plan<'a> {
    /// The stream's cap: once past it, the head's size.
    cap: u64,
    /// Onto the log, up to the cap.
    head: &'a [u8],
    /// Onto the tail: at most the last quarter-cap of what is past the cap.
    tail: &'a [u8],
    /// Where in the output the tail's bytes start.
    tail_start: u64,
    /// The stream is past its cap.
    past_cap: bool,
}

impl<'a> Plan<'a> {
    /// Places `bytes`, starting at `offset` of the output, on a log `size` long under `cap`,
    /// whose tail (once it passed the cap, which is then the log's size) ends at `tail_end`. An
    /// offset past what was received is refused.
    fn of(size: u64, tail_end: Option<u64>, offset: u64, bytes: &'a [u8], cap: u64) -> Result<Self, LogError> {
        let cap = if tail_end.is_some() { size } else { cap };
        let received = tail_end.unwrap_or(size);
        let nothing = Self { cap, head: &[], tail: &[], tail_start: received, past_cap: tail_end.is_some() };
        if size > cap {
            return Ok(nothing); // sealed
        }
        if offset > received {
            return Err(LogError::Gap { offset, size: received });
        }
        let new = &bytes[((received - offset) as usize).min(bytes.len())..];
        let room = if tail_end.is_some() { 0 } else { cap - size };
        let (head, past) = new.split_at((room as usize).min(new.len()));
        let drop = past.len().saturating_sub(tail_keep(cap) as usize);
        Ok(Self {
            head,
            tail: &past[drop..],
            tail_start: received + head.len() as u64 + drop as u64,
            past_cap: nothing.past_cap || !past.is_empty(),
            ..nothing
        })
    }
}

/// A tail file: a 16-byte header (the head's size and where in the output the first kept byte
/// is, little-endian) and the kept bytes.
#[derive(Debug)]
struct TailFile {
    path: PathBuf,
    /// The size of the log's head: its cap.
    head: u64,
    /// Where the first byte kept is in the output.
    start: u64,
    /// Bytes kept.
    len: u64,
}

const TAIL_HEADER: u64 = 16;

impl TailFile {
    /// The tail at `path`, if there is one.
    async fn open(path: &Path) -> std::io::Result<Option<Self>> {
        use tokio::io::AsyncReadExt;
        let mut file = match tokio::fs::File::open(path).await {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut header = [0u8; TAIL_HEADER as usize];
        file.read_exact(&mut header).await?;
        let len = file.metadata().await?.len() - TAIL_HEADER;
        let number = |at: usize| u64::from_le_bytes(header[at..at + 8].try_into().expect("8 bytes"));
        Ok(Some(Self { path: path.to_owned(), head: number(0), start: number(8), len }))
    }

    /// Writes a new tail (aside, then moved into place, so it is never seen half-written).
    async fn create(path: &Path, head: u64, start: u64, bytes: &[u8]) -> std::io::Result<()> {
        let mut content = Vec::with_capacity(TAIL_HEADER as usize + bytes.len());
        content.extend_from_slice(&head.to_le_bytes());
        content.extend_from_slice(&start.to_le_bytes());
        content.extend_from_slice(bytes);
        let aside = path.with_extension("tail-new");
        let mut file =
            tokio::fs::OpenOptions::new().create(true).truncate(true).write(true).mode(0o600).open(&aside).await?;
        file.write_all(&content).await?;
        file.flush().await?;
        tokio::fs::rename(&aside, path).await
    }

    /// Where the output received so far ends.
    fn end(&self) -> u64 {
        self.start + self.len
    }

    /// Adds bytes; once it holds more than twice `keep`, it is rewritten with the last `keep`.
    async fn append(&mut self, bytes: &[u8], keep: u64) -> std::io::Result<()> {
        let mut file = tokio::fs::OpenOptions::new().append(true).open(&self.path).await?;
        file.write_all(bytes).await?;
        file.flush().await?;
        self.len += bytes.len() as u64;
        if self.len > 2 * keep {
            let kept = self.last(keep).await?;
            let start = self.end() - kept.len() as u64;
            Self::create(&self.path, self.head, start, &kept).await?;
            (self.start, self.len) = (start, kept.len() as u64);
        }
        Ok(())
    }

    /// The last `n` bytes kept.
    async fn last(&self, n: u64) -> std::io::Result<Vec<u8>> {
        use tokio::io::{AsyncReadExt, AsyncSeekExt};
        let mut file = tokio::fs::File::open(&self.path).await?;
        file.seek(std::io::SeekFrom::Start(TAIL_HEADER + self.len.saturating_sub(n))).await?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).await?;
        Ok(bytes)
    }
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
    use uuid::Uuid;

    use mission_api::Job;
    use mission_store::Store;
    use mission_store::now;
    use mission_store::test_support::{PostgresDatabase, add_user, mission};

    use super::{Appended, JobLogs, LogError, LogStream, Plan, TAIL_HEADER, tail_of, truncation_marker};

    #[test]
    fn a_chunk_goes_to_the_head_up_to_the_cap_and_then_to_the_tail() {
        let plan =
            |size, tail_end, offset, bytes: &'static [u8], cap| Plan::of(size, tail_end, offset, bytes, cap).unwrap();
        let place = |head: &'static [u8], tail: &'static [u8], tail_start, past_cap| Plan {
            cap: 1024,
            head,
            tail,
            tail_start,
            past_cap,
        };
        assert_eq!(plan(0, None, 0, b"hello", 1024), place(b"hello", b"", 5, false));
        // A retried chunk: what arrived already is skipped.
        assert_eq!(plan(5, None, 0, b"hello world", 1024), place(b" world", b"", 11, false));
        assert_eq!(plan(11, None, 0, b"hello world", 1024), place(b"", b"", 11, false), "nothing new");
        // A chunk past what was received leaves a gap: refused.
        assert!(matches!(Plan::of(5, None, 6, b"x", 1024), Err(LogError::Gap { offset: 6, size: 5 })));
        // Across the cap: the head fills, the rest starts the tail.
        assert_eq!(plan(1020, None, 1020, b"abcdefgh", 1024), place(b"abcd", b"efgh", 1024, true));
        // Past it, everything goes to the tail, offsets counting all the output.
        assert_eq!(plan(1024, Some(1030), 1028, b"0123456789", 1024), place(b"", b"23456789", 1030, true));
        // A chunk longer than the tail keeps only its last quarter-cap.
        let long: &'static [u8] = Box::leak(vec![b'x'; 1000].into_boxed_slice());
        let placed = plan(1024, Some(1024), 1024, long, 1024);
        assert_eq!((placed.tail.len(), placed.tail_start, placed.past_cap), (256, 1024 + 744, true));
        assert_eq!(placed.tail_start + placed.tail.len() as u64, 2024, "all the output received");
        // Past the cap, the cap is the head's size, whatever the job's is now.
        assert_eq!(plan(1024, Some(1030), 1030, b"ab", 4096).cap, 1024);
        // A sealed log (longer than its cap, no tail) takes nothing more.
        assert_eq!(plan(1400, None, 2000, b"late", 1024), place(b"", b"", 1400, false));
    }

    /// Feeds `output` to a log with cap 1024 in chunks of `chunk` bytes, sending each chunk
    /// twice as an agent retrying after a lost answer would.
    async fn feed(logs: &JobLogs, ids: (Uuid, Uuid), output: &[u8], chunk: usize) -> Appended {
        let mut last = None;
        for (i, piece) in output.chunks(chunk).enumerate() {
            let offset = (i * chunk) as u64;
            for _ in 0..2 {
                last = Some(logs.append(ids.0, ids.1, LogStream::STDOUT, offset, piece, 1024).await.unwrap());
            }
        }
        last.unwrap()
    }

    #[tokio::test]
    async fn a_log_past_its_cap_keeps_its_head_a_marker_and_its_tail() {
        // Chunks longer than the tail replace it; shorter ones add to it until it is rewritten.
        for chunk in [300, 70] {
            past_the_cap_in_chunks_of(chunk).await;
        }
    }

    async fn past_the_cap_in_chunks_of(chunk: usize) {
        let dir = tempfile::tempdir().unwrap();
        let logs = JobLogs::new(dir.path().to_owned()).unwrap();
        let ids = (Uuid::new_v4(), Uuid::new_v4());
        let output: Vec<u8> = (0..10_000u32).map(|i| b'a' + (i % 26) as u8).collect();
        let read = |from| logs.read(ids.0, ids.1, LogStream::STDOUT, from);

        // Under the cap, the log is the output.
        assert_eq!(feed(&logs, ids, &output[..1000], chunk).await, Appended { received: 1000, truncated: false });
        assert_eq!(read(0).await.unwrap(), &output[..1000]);

        // Past it, readers see the head and the marker while the job runs; the tail stays small.
        let marker = truncation_marker(1024);
        assert_eq!(feed(&logs, ids, &output, chunk).await, Appended { received: 10_000, truncated: true });
        let running = read(0).await.unwrap();
        assert_eq!(running, [&output[..1024], marker.as_bytes()].concat());
        let tail_path = tail_of(&dir.path().join(ids.0.to_string()).join(ids.1.to_string()).join("stdout.log"));
        assert!(std::fs::metadata(&tail_path).unwrap().len() <= TAIL_HEADER + 2 * 256);
        // A follower part-way through the marker reads the rest of it.
        assert_eq!(read(1030).await.unwrap(), &marker.as_bytes()[6..]);

        // Sealed: the last quarter-cap follows the marker, and a follower that read up to the
        // marker reads on from there.
        logs.seal(ids.0, ids.1, 1).await.unwrap();
        let sealed = read(0).await.unwrap();
        assert_eq!(sealed, [&output[..1024], marker.as_bytes(), &output[10_000 - 256..]].concat());
        assert_eq!(read(running.len() as u64).await.unwrap(), &output[10_000 - 256..]);
        assert!(!tail_path.exists());

        // Sealing again, and output arriving late, change nothing.
        logs.seal(ids.0, ids.1, 1).await.unwrap();
        logs.append(ids.0, ids.1, LogStream::STDOUT, 10_000, b"late", 1024).await.unwrap();
        assert_eq!(read(0).await.unwrap(), sealed);

        // A tail left behind by a crash after the sealed log was moved in is only removed.
        std::fs::write(&tail_path, [1024u64.to_le_bytes(), 9000u64.to_le_bytes()].concat()).unwrap();
        assert_eq!(read(0).await.unwrap(), sealed);
        logs.seal(ids.0, ids.1, 1).await.unwrap();
        assert_eq!((read(0).await.unwrap(), tail_path.exists()), (sealed, false));
    }

    /// Replicas keep the tail of a log past its cap in the database too, and seal it there.
    #[tokio::test]
    async fn postgres_keeps_the_head_and_tail_of_a_log_past_its_cap() {
        let Some(database) = PostgresDatabase::create().await else { return };
        let store = Store::open(&database.url).await.unwrap();
        let logs = JobLogs::in_database(store.cluster().unwrap());
        let mission = mission(add_user(&store, "ada").await.user_id, "m");
        store.insert_mission(&mission).await.unwrap();
        let job = Job::queued(
            mission.mission_id,
            mission.user_id,
            mission_store::DEFAULT_STATION_ID,
            vec!["true".into()],
            now(),
        );
        store.save_jobs(&[(store.next_job_seq().await.unwrap(), job.clone())], &[], &[]).await.unwrap();
        let ids = (mission.mission_id, job.job_id);
        let output: Vec<u8> = (0..10_000u32).map(|i| b'a' + (i % 26) as u8).collect();
        // Chunks shorter than the tail, each sent twice as a retrying agent would.
        for (i, piece) in output.chunks(70).enumerate() {
            for _ in 0..2 {
                logs.append(ids.0, ids.1, LogStream::STDOUT, (i * 70) as u64, piece, 1024).await.unwrap();
            }
        }
        let marker = truncation_marker(1024);
        let read = |from| logs.read(ids.0, ids.1, LogStream::STDOUT, from);
        let running = read(0).await.unwrap();
        assert_eq!(running, [&output[..1024], marker.as_bytes()].concat());
        assert_eq!(read(1030).await.unwrap(), &marker.as_bytes()[6..]);
        // The head stays at the cap, while the output received counts everything.
        let db = store.cluster().unwrap();
        assert_eq!(db.log_state(ids.1, "stdout").await.unwrap(), (1024, Some(10_000)));
        logs.seal(ids.0, ids.1, 1).await.unwrap();
        let sealed = read(0).await.unwrap();
        assert_eq!(sealed, [&output[..1024], marker.as_bytes(), &output[10_000 - 256..]].concat());
        assert_eq!(read(running.len() as u64).await.unwrap(), &output[10_000 - 256..]);
        // Sealing again, and late output, change nothing.
        logs.seal(ids.0, ids.1, 1).await.unwrap();
        logs.append(ids.0, ids.1, LogStream::STDOUT, 10_000, b"late", 1024).await.unwrap();
        assert_eq!(read(0).await.unwrap(), sealed);
        assert_eq!(db.log_state(ids.1, "stdout").await.unwrap(), (sealed.len() as u64, None));
    }
}
