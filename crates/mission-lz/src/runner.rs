//! The process runner: one job from assignment to results.
//!
//! 1. staging: a fresh work dir gets the mission's files, each taken from the content cache
//!    (`DATA_DIR/cache/{sha256}`) or downloaded, checked against its SHA-256, and cached;
//! 2. running: the command runs in the work dir in its own process group (and cgroup, where the
//!    host has them) with `MISSION_ID`, `JOB_ID`, `OMP_NUM_THREADS` and `CUDA_VISIBLE_DEVICES`;
//!    stdout and stderr stream to the server as they are written;
//! 3. uploading: every new or changed regular file of the work dir goes to the server;
//! 4. the final report, and the work dir is removed.
//!
//! A stop order kills the whole process tree (group and cgroup) at once.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures_util::StreamExt;
use mission_api::JOB_LOGS_FOLDER;
use mission_api::JobStatus;
use mission_api::lz::{Assignment, InputFile};
use mission_api::paths::MissionPath;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;
use uuid::Uuid;

use crate::agent::Shared;
use crate::cgroups::JobCgroup;

/// Largest log chunk sent in one request.
const MAX_CHUNK: usize = 256 * 1024;
/// How long output is gathered before it is sent, so chatty programs make few requests.
const GATHER: Duration = Duration::from_millis(10);

/// Runs one job to its end and reports every move.
pub(crate) async fn run_job(shared: Arc<Shared>, job: Assignment, stop: watch::Receiver<bool>) {
    let job_id = job.job_id;
    let dir = shared.data_dir.join("jobs").join(job_id.to_string());
    let (status, exit_code, reason) = match run(&shared, &job, &dir, stop).await {
        Ok(outcome) => outcome,
        Err(reason) => (JobStatus::Failed, None, Some(reason)),
    };
    shared.report(job_id, status, exit_code, reason, None);
    let _ = tokio::fs::remove_dir_all(&dir).await;
    shared.jobs.lock().expect("not poisoned").remove(&job_id);
}

type Outcome = (JobStatus, Option<i32>, Option<String>);

async fn run(
    shared: &Arc<Shared>,
    job: &Assignment,
    dir: &Path,
    mut stop: watch::Receiver<bool>,
) -> Result<Outcome, String> {
    let work = dir.join("work");
    tokio::fs::create_dir_all(&work).await.map_err(|e| format!("cannot create the work dir: {e}"))?;
    shared.report(job.job_id, JobStatus::Staging, None, None, None);
    let staged = tokio::select! {
        staged = stage(shared, job, &work) => staged.map_err(|e| format!("staging the mission's files failed: {e}"))?,
        () = stop_ordered(&mut stop) => return Ok((JobStatus::Stopped, None, Some("stopped before it started".into()))),
    };

    let group = {
        let cgroups = shared.cgroups.clone();
        let (id, cpus, memory) = (job.job_id, job.cpu_count, job.memory_amount);
        tokio::task::spawn_blocking(move || cgroups.create(id, cpus, memory)).await.map_err(|e| e.to_string())?
    };
    let limits = match &group {
        Ok(_) => shared.cgroups.describe(),
        Err(why) => format!("limits not enforced: {why}"),
    };
    let group = group.ok();
    let (program, args) = job.command.split_first().ok_or("the job's command is empty")?;
    let mut command = match &group {
        // The shim joins the job's cgroups, then becomes the program: nothing runs outside them.
        Some(group) => {
            let files = group.procs_files();
            let mut c = tokio::process::Command::new("/bin/sh");
            c.arg("-c")
                .arg("n=$1; shift; while [ \"$n\" -gt 0 ]; do echo $$ > \"$1\" || exit 125; shift; n=$((n-1)); done; exec \"$@\"")
                .arg("mission-job")
                .arg(files.len().to_string())
                .args(files)
                .arg(program)
                .args(args);
            c
        }
        None => {
            let mut c = tokio::process::Command::new(program);
            c.args(args);
            c
        }
    };
    let gpus: Vec<String> = job.gpu_indices.iter().map(u32::to_string).collect();
    command
        .current_dir(&work)
        .env("MISSION_ID", job.mission_id.to_string())
        .env("JOB_ID", job.job_id.to_string())
        .env("OMP_NUM_THREADS", job.cpu_count.to_string())
        .env("CUDA_VISIBLE_DEVICES", gpus.join(","))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            if let Some(g) = &group {
                g.remove();
            }
            return Ok((JobStatus::Failed, None, Some(format!("could not start {program}: {e}"))));
        }
    };
    let pid = child.id().and_then(|p| rustix::process::Pid::from_raw(p as i32));
    shared.report(job.job_id, JobStatus::Running, None, None, Some(limits));
    let stdout = tokio::spawn(forward(shared.clone(), job.job_id, "stdout", child.stdout.take().expect("piped")));
    let stderr = tokio::spawn(forward(shared.clone(), job.job_id, "stderr", child.stderr.take().expect("piped")));

    let kill_tree = |group: &Option<JobCgroup>| {
        if let Some(pid) = pid {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
        if let Some(g) = group {
            g.kill_all();
        }
    };
    let (exit, stopped) = tokio::select! {
        exit = child.wait() => (exit, false),
        () = stop_ordered(&mut stop) => {
            kill_tree(&group);
            (child.wait().await, true)
        }
    };
    // Whatever the program left running in the background ends with it (and lets go of the
    // output pipes, so the forwarders finish).
    kill_tree(&group);
    let _ = stdout.await;
    let _ = stderr.await;
    let oom = group.as_ref().is_some_and(JobCgroup::oom_killed);
    if let Some(g) = group {
        let _ = tokio::task::spawn_blocking(move || {
            g.kill_all();
            g.remove();
        })
        .await;
    }
    let exit = exit.map_err(|e| format!("waiting for the program: {e}"))?;
    if stopped {
        return Ok((JobStatus::Stopped, exit.code(), Some("stopped".into())));
    }
    shared.report(job.job_id, JobStatus::Uploading, None, None, None);
    upload_results(shared, job.job_id, &work, &staged).await.map_err(|e| format!("uploading results failed: {e}"))?;
    use std::os::unix::process::ExitStatusExt;
    Ok(match (exit.code(), exit.signal()) {
        _ if oom => (JobStatus::Failed, exit.code(), Some("out of memory".into())),
        (Some(0), _) => (JobStatus::Completed, Some(0), None),
        (Some(code), _) => (JobStatus::Failed, Some(code), Some(format!("exit status {code}"))),
        (None, Some(signal)) => (JobStatus::Failed, None, Some(format!("killed by signal {signal}"))),
        (None, None) => (JobStatus::Failed, None, Some("ended without an exit status".into())),
    })
}

/// What staging put in the work dir: path → (size, modification time), to tell changed files.
type Staged = HashMap<PathBuf, (u64, SystemTime)>;

async fn stage(shared: &Shared, job: &Assignment, work: &Path) -> Result<Staged, String> {
    let mut staged = HashMap::new();
    for file in &job.files {
        let path = MissionPath::parse(&file.path).map_err(|e| format!("{:?}: {e}", file.path))?;
        let cached = cached(shared, job.job_id, &path, file).await?;
        let target = path.segments().fold(work.to_path_buf(), |p, s| p.join(s));
        if let Some(parent) = target.parent() {
            tokio::fs::create_dir_all(parent).await.map_err(|e| e.to_string())?;
        }
        // A copy, not a link: the job may change its inputs, and the cache must not change.
        tokio::fs::copy(&cached, &target).await.map_err(|e| format!("{path}: {e}"))?;
        let meta = tokio::fs::metadata(&target).await.map_err(|e| e.to_string())?;
        staged.insert(target, (meta.len(), meta.modified().unwrap_or(SystemTime::UNIX_EPOCH)));
    }
    Ok(staged)
}

/// The cached copy of an input, downloading and checking it first when it is not cached.
async fn cached(shared: &Shared, job_id: Uuid, path: &MissionPath, file: &InputFile) -> Result<PathBuf, String> {
    if file.sha256.len() != 64 || !file.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("{path}: the server sent no valid sha256"));
    }
    let cache = shared.data_dir.join("cache");
    let entry = cache.join(&file.sha256);
    if tokio::fs::metadata(&entry).await.is_ok_and(|m| m.len() == file.size) {
        return Ok(entry);
    }
    let url_path = format!("/jobs/{job_id}/files/{}", path.to_url_path());
    let response = shared.request(reqwest::Method::GET, &url_path).send().await.map_err(|e| format!("{path}: {e}"))?;
    if !response.status().is_success() {
        return Err(format!("{path}: the server answered {}", response.status()));
    }
    let partial = cache.join(format!("{}.{}.partial", file.sha256, Uuid::new_v4()));
    let mut out = tokio::fs::File::create(&partial).await.map_err(|e| e.to_string())?;
    let mut hasher = ring::digest::Context::new(&ring::digest::SHA256);
    let mut body = response.bytes_stream();
    let result = async {
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| format!("{path}: {e}"))?;
            hasher.update(&chunk);
            out.write_all(&chunk).await.map_err(|e| e.to_string())?;
        }
        out.flush().await.map_err(|e| e.to_string())?;
        let digest: String = hasher.finish().as_ref().iter().map(|b| format!("{b:02x}")).collect();
        if digest != file.sha256 {
            return Err(format!("{path}: the download does not match its sha256"));
        }
        tokio::fs::rename(&partial, &entry).await.map_err(|e| e.to_string())
    }
    .await;
    if result.is_err() {
        let _ = tokio::fs::remove_file(&partial).await;
    }
    result.map(|()| entry)
}

/// Sends a stream of the program's output to the server as it comes, each chunk with its offset;
/// retries until the server takes it (the program blocks on a full pipe meanwhile). When the
/// server refuses the output for good (the job is no longer this LZ's, a 4xx), the rest is read
/// and dropped, so the program is never left writing into a pipe nobody reads.
async fn forward(shared: Arc<Shared>, job_id: Uuid, stream: &'static str, mut pipe: impl AsyncRead + Unpin) {
    let mut offset = 0u64;
    let mut buf = vec![0u8; MAX_CHUNK];
    let mut refused = false;
    loop {
        if refused {
            match pipe.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => continue,
            }
        }
        let mut n = match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        // Gather what follows closely, up to the chunk size.
        let deadline = tokio::time::Instant::now() + GATHER;
        while n < MAX_CHUNK {
            match tokio::time::timeout_at(deadline, pipe.read(&mut buf[n..])).await {
                Ok(Ok(m)) if m > 0 => n += m,
                _ => break,
            }
        }
        let chunk = buf[..n].to_vec();
        let mut backoff = Duration::from_millis(50);
        loop {
            let sent = shared
                .request(reqwest::Method::POST, &format!("/jobs/{job_id}/logs/{stream}?offset={offset}"))
                .body(chunk.clone())
                .send()
                .await;
            match sent {
                Ok(r) if r.status().is_success() => break,
                Ok(r) if r.status().is_client_error() && r.status() != reqwest::StatusCode::CONFLICT => {
                    tracing::warn!(%job_id, "the server refused the job's {stream} ({}); dropping the rest", r.status());
                    refused = true;
                    break;
                }
                Ok(r) => tracing::warn!(%job_id, "log chunk not taken ({}); retrying", r.status()),
                Err(e) => tracing::warn!(%job_id, "log chunk not delivered ({e}); retrying"),
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(2));
        }
        offset += n as u64;
    }
}

/// Uploads every new or changed regular file of the work dir (symbolic links are not followed,
/// so a job cannot return files from outside its work dir).
async fn upload_results(shared: &Shared, job_id: Uuid, work: &Path, staged: &Staged) -> Result<(), String> {
    let root = work.to_path_buf();
    let staged = staged.clone();
    let files = tokio::task::spawn_blocking(move || changed_files(&root, &staged)).await.map_err(|e| e.to_string())?;
    for (path, relative) in files {
        let Ok(mission_path) = MissionPath::parse(&relative) else {
            tracing::warn!(%job_id, "not returning {relative:?}: not a valid result path");
            continue;
        };
        let url_path = format!("/jobs/{job_id}/results/{}", mission_path.to_url_path());
        let mut backoff = Duration::from_millis(100);
        for attempt in 1.. {
            let file = tokio::fs::File::open(&path).await.map_err(|e| format!("{relative}: {e}"))?;
            let body = reqwest::Body::wrap_stream(tokio_util::io::ReaderStream::new(file));
            match shared.request(reqwest::Method::PUT, &url_path).body(body).send().await {
                Ok(r) if r.status().is_success() => break,
                Ok(r) if r.status().is_client_error() => {
                    return Err(format!("{relative}: {}", r.text().await.unwrap_or_default()));
                }
                Ok(r) if attempt >= 20 => return Err(format!("{relative}: the server answered {}", r.status())),
                Err(e) if attempt >= 20 => return Err(format!("{relative}: {e}")),
                _ => {}
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
    }
    Ok(())
}

fn changed_files(root: &Path, staged: &Staged) -> Vec<(PathBuf, String)> {
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

/// Resolves once a stop is ordered (never, if the switch is gone).
async fn stop_ordered(stop: &mut watch::Receiver<bool>) {
    if stop.wait_for(|s| *s).await.is_err() {
        std::future::pending::<()>().await;
    }
}
