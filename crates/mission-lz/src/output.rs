//! What a job gives back, for every runner: its stdout and stderr, streamed to the server as they
//! are written (from a pipe, or from a file that grows), and its results, the new or changed
//! files of its work dir.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use mission_api::JOB_LOGS_FOLDER;
use mission_api::paths::MissionPath;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::watch;
use uuid::Uuid;

use crate::client::{Failure, LzClient};
use crate::runner::JobError;
use crate::workdirs::Staged;

/// The size of the buffer a pipe is first read into; it grows (doubling) up to a log chunk.
const FIRST_READ: usize = 4096;

/// How often a log file is read for what was added to it.
const TAIL_EVERY: Duration = Duration::from_millis(250);

/// One output stream of a job on its way to the server: each chunk goes with its offset, retried
/// until the server takes it. Once the server refuses the output for good (the job is no longer
/// this LZ's, a 4xx), the rest is dropped.
struct LogSender<'a> {
    client: &'a LzClient,
    job_id: Uuid,
    stream: &'static str,
    offset: u64,
    refused: bool,
}

impl LogSender<'_> {
    async fn send(&mut self, chunk: &[u8]) {
        if self.refused || chunk.is_empty() {
            return;
        }
        match self.client.append_log(self.job_id, self.stream, self.offset, chunk.to_vec()).await {
            Ok(()) => {}
            // Delivery is retried until the server takes the chunk or refuses it for good.
            Err(e) => {
                tracing::warn!(job_id = %self.job_id, "the server refused the job's {} ({e}); dropping the rest", self.stream);
                self.refused = true;
            }
        }
        self.offset += chunk.len() as u64;
    }
}

/// Sends a pipe of the program's output to the server as it comes (the program blocks on a full
/// pipe while a chunk is retried); what the server refuses is read and dropped, so the program
/// is never left writing into a pipe nobody reads.
pub(crate) async fn forward_pipe(
    client: &LzClient,
    job_id: Uuid,
    stream: &'static str,
    offset: u64,
    pipe: Option<impl AsyncRead + Unpin>,
) {
    let Some(mut pipe) = pipe else { return };
    let mut sender = LogSender { client, job_id, stream, offset, refused: false };
    let max = client.timings().log_chunk;
    // Grown as output comes, up to a chunk: most jobs write little or nothing, and zeroing a
    // whole chunk for each of their two pipes cost more than anything else the agent does per job.
    let mut buf = vec![0u8; FIRST_READ.min(max)];
    loop {
        let mut n = match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        // Gather what follows closely, up to the chunk size.
        let deadline = tokio::time::Instant::now() + client.timings().log_gather;
        while n < max {
            if n == buf.len() {
                buf.resize((2 * n).min(max), 0);
            }
            match tokio::time::timeout_at(deadline, pipe.read(&mut buf[n..])).await {
                Ok(Ok(m)) if m > 0 => n += m,
                _ => break,
            }
        }
        sender.send(&buf[..n]).await;
    }
}

/// Sends a file the program's output goes to (on a cluster's shared filesystem) to the server as
/// it grows, from its start, until `ended` is set and what was written is sent. A file that does
/// not exist yet is waited for. Chunks the server already has are taken again harmlessly (it
/// keeps what is past its end), so a restarted agent simply starts over.
pub(crate) async fn forward_file(
    client: &LzClient,
    job_id: Uuid,
    stream: &'static str,
    offset: u64,
    path: PathBuf,
    mut ended: watch::Receiver<bool>,
) {
    let mut sender = LogSender { client, job_id, stream, offset, refused: false };
    let mut buf = vec![0u8; client.timings().log_chunk];
    let mut file = None;
    loop {
        let last = *ended.borrow_and_update();
        if file.is_none() {
            file = tokio::fs::File::open(&path).await.ok();
        }
        if let Some(f) = file.as_mut() {
            loop {
                match f.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => sender.send(&buf[..n]).await,
                }
            }
        }
        if last {
            return;
        }
        let _ = tokio::time::timeout(TAIL_EVERY, ended.changed()).await;
    }
}

/// Uploads the job's results: the new or changed files [`changed_files`] found.
pub(crate) async fn upload_results(
    client: &LzClient,
    job_id: Uuid,
    files: Vec<(PathBuf, String)>,
) -> Result<(), JobError> {
    for (path, relative) in files {
        let Ok(mission_path) = MissionPath::parse(&relative) else {
            tracing::warn!(%job_id, "not returning {relative:?}: not a valid result path");
            continue;
        };
        client.put_result(job_id, &mission_path, &path).await.map_err(|e| match e {
            Failure::Refused { detail, .. } => JobError::Upload(format!("{relative}: {detail}")),
            e => JobError::Upload(format!("{relative}: {e}")),
        })?;
    }
    Ok(())
}

/// Every new or changed regular file of the work dir, with its path relative to it (symbolic
/// links are not followed, so a job cannot return files from outside its work dir).
pub(crate) fn changed_files(root: &Path, staged: &Staged) -> Vec<(PathBuf, String)> {
    let mut found = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let Ok(kind) = entry.file_type() else { continue };
            let path = entry.path();
            if dir == root && entry.file_name() == JOB_LOGS_FOLDER {
                continue;
            }
            if kind.is_dir() {
                dirs.push(path);
            } else if kind.is_file() {
                let Ok(meta) = entry.metadata() else { continue };
                let now = (meta.len(), meta.modified().unwrap_or(SystemTime::UNIX_EPOCH));
                if staged.get(&path) == Some(&now) {
                    continue;
                }
                let Ok(relative) = path.strip_prefix(root) else { continue };
                let Some(relative) = relative.to_str() else { continue };
                found.push((path.clone(), relative.to_owned()));
            }
        }
    }
    found.sort();
    found
}
