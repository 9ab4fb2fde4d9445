//! The process runner: one job from assignment to results.
//!
//! 1. staging: inputs not in the content cache (`DATA_DIR/cache/{sha256}`) are downloaded and
//!    checked against their SHA-256; then one blocking step takes the job's user, copies the
//!    inputs into a work dir of that user, takes the job's cgroup and starts the program in its
//!    sandbox (few thread hand-offs: a trivial job's whole life is a few milliseconds);
//! 2. running: the command runs in the work dir in its own process group, sandbox (see
//!    `sandbox`) and cgroup (where the host has them), with nothing of the agent's environment
//!    but `PATH` and the locale: `HOME` (the work dir), `MISSION_ID`, `JOB_ID`,
//!    `OMP_NUM_THREADS` and `CUDA_VISIBLE_DEVICES`; stdout and stderr stream to the server as
//!    they are written;
//! 3. uploading: every new or changed regular file of the work dir goes to the server;
//! 4. the final report; the work dir is emptied of all but its input copies, for the user's next
//!    job (see `workdirs`), and the job's user is handed back.
//!
//! A stop order kills the whole process tree (group and cgroup) at once.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
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
use crate::sandbox::{JobProcess, JobUser};
use crate::workdirs::{Staged, WorkDir};

/// Largest log chunk sent in one request.
const MAX_CHUNK: usize = 256 * 1024;
/// How long output is gathered before it is sent, so chatty programs make few requests.
const GATHER: Duration = Duration::from_millis(10);

/// Runs one job to its end and reports every move.
pub(crate) async fn run_job(shared: Arc<Shared>, job: Assignment, stop: watch::Receiver<bool>) {
    let job_id = job.job_id;
    let mut work = None;
    let (status, exit_code, reason) = match run(&shared, &job, &mut work, stop).await {
        Ok(outcome) => outcome,
        Err(reason) => (JobStatus::Failed, None, Some(reason)),
    };
    shared.report(job_id, status, exit_code, reason, None);
    if let Some((dir, user)) = work {
        // The dir is the agent's again before its user may go to another job.
        let settling = shared.clone();
        let _ = tokio::task::spawn_blocking(move || {
            settling.work_dirs.give_back(dir);
            settling.sandbox.release(user);
        })
        .await;
    }
    shared.jobs.lock().expect("not poisoned").remove(&job_id);
}

type Outcome = (JobStatus, Option<i32>, Option<String>);

/// Stages, runs and settles the job; the work dir it ran in and its user are left in `work`.
async fn run(
    shared: &Arc<Shared>,
    job: &Assignment,
    work: &mut Option<(WorkDir, JobUser)>,
    mut stop: watch::Receiver<bool>,
) -> Result<Outcome, String> {
    if let Some(refusal) = shared.sandbox.refusal(job) {
        return Err(refusal);
    }
    shared.report(job.job_id, JobStatus::Staging, None, None, None);
    let mut downloaded = false;
    let Launched { mut child, group, limits, dir, user } = loop {
        let launched = {
            let (shared, job) = (shared.clone(), job.clone());
            tokio::task::spawn_blocking(move || launch(&shared, &job)).await.map_err(|e| e.to_string())?
        };
        match launched {
            Ok(launched) => break launched,
            Err(LaunchError::Failed(reason)) => return Err(reason),
            Err(LaunchError::NotCached(_)) if downloaded => {
                return Err("staging the mission's files failed: the input cache changed meanwhile".into());
            }
            Err(LaunchError::NotCached(missing)) => {
                let fetch = async {
                    for i in missing {
                        download(shared, job.job_id, &job.files[i]).await?;
                    }
                    Ok::<(), String>(())
                };
                tokio::select! {
                    fetched = fetch => fetched.map_err(|e| format!("staging the mission's files failed: {e}"))?,
                    () = stop_ordered(&mut stop) => {
                        return Ok((JobStatus::Stopped, None, Some("stopped before it started".into())));
                    }
                }
                downloaded = true;
            }
        }
    };
    let (root, staged) = (dir.path().to_path_buf(), dir.inputs().clone());
    let uid = user.ids().map(|(uid, _)| uid);
    *work = Some((dir, user));
    let pid = rustix::process::Pid::from_raw(child.pid as i32);
    shared.report(job.job_id, JobStatus::Running, None, None, Some(limits));
    let stdout = tokio::spawn(forward(shared.clone(), job.job_id, "stdout", output_pipe(child.stdout.take())));
    let stderr = tokio::spawn(forward(shared.clone(), job.job_id, "stderr", output_pipe(child.stderr.take())));

    let kill_group = || {
        if let Some(pid) = pid {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
    };
    // A stop ordered while the job was being launched takes effect here, at once.
    let (exit, stopped) = tokio::select! {
        exit = child.wait() => (exit, false),
        () = stop_ordered(&mut stop) => {
            kill_group();
            if let Some(g) = &group {
                g.kill_all();
            }
            (child.wait().await, true)
        }
    };
    // Whatever the program left running in the background ends with it (and lets go of the
    // output pipes, so the forwarders finish); then the group is handed back (which kills what is
    // left in it) and the work dir is searched for results, in one blocking step.
    kill_group();
    let settling = shared.clone();
    let (oom, results) = tokio::task::spawn_blocking(move || {
        let oom = group.is_some_and(|g| {
            let oom = g.oom_killed();
            settling.cgroups.give_back(g);
            oom
        });
        settling.sandbox.end(uid);
        (oom, changed_files(&root, &staged))
    })
    .await
    .map_err(|e| e.to_string())?;
    let _ = stdout.await;
    let _ = stderr.await;
    let exit = exit.map_err(|e| format!("waiting for the program: {e}"))?;
    if stopped {
        return Ok((JobStatus::Stopped, exit.code(), Some("stopped".into())));
    }
    shared.report(job.job_id, JobStatus::Uploading, None, None, None);
    upload_results(shared, job.job_id, results).await.map_err(|e| format!("uploading results failed: {e}"))?;
    use std::os::unix::process::ExitStatusExt;
    Ok(match (exit.code(), exit.signal()) {
        _ if oom => (JobStatus::Failed, exit.code(), Some("out of memory".into())),
        (Some(0), _) => (JobStatus::Completed, Some(0), None),
        (Some(code), _) => (JobStatus::Failed, Some(code), Some(format!("exit status {code}"))),
        (None, Some(signal)) => (JobStatus::Failed, None, Some(format!("killed by signal {signal}"))),
        (None, None) => (JobStatus::Failed, None, Some("ended without an exit status".into())),
    })
}

/// A job's program, started.
struct Launched {
    child: JobProcess,
    group: Option<JobCgroup>,
    /// How its limits are enforced, or why they are not.
    limits: String,
    /// Where it runs.
    dir: WorkDir,
    /// Whom it runs as.
    user: JobUser,
}

enum LaunchError {
    /// These inputs (indices into the assignment's files) are not in the cache yet.
    NotCached(Vec<usize>),
    /// The job cannot start; the reason.
    Failed(String),
}

/// Stages the job and starts its program, in one blocking step: a work dir gets the mission's
/// files from the content cache, the job gets its cgroup, and the program starts in the work dir
/// in its own process group with `MISSION_ID`, `JOB_ID`, `OMP_NUM_THREADS` and
/// `CUDA_VISIBLE_DEVICES`. Nothing is made when an input is not cached yet.
fn launch(shared: &Shared, job: &Assignment) -> Result<Launched, LaunchError> {
    let staging_failed = |e: String| LaunchError::Failed(format!("staging the mission's files failed: {e}"));
    let program = job.command.first().ok_or_else(|| LaunchError::Failed("the job's command is empty".into()))?;
    let cache = shared.data_dir.join("cache");
    let mut inputs = Vec::with_capacity(job.files.len());
    let mut missing = Vec::new();
    for (i, file) in job.files.iter().enumerate() {
        let path = MissionPath::parse(&file.path).map_err(|e| staging_failed(format!("{:?}: {e}", file.path)))?;
        if file.sha256.len() != 64 || !file.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(staging_failed(format!("{path}: the server sent no valid sha256")));
        }
        let entry = cache.join(&file.sha256);
        if !std::fs::metadata(&entry).is_ok_and(|m| m.len() == file.size) {
            missing.push(i);
        }
        inputs.push((path.segments().collect(), entry));
    }
    if !missing.is_empty() {
        return Err(LaunchError::NotCached(missing));
    }
    let user = shared.sandbox.job_user().map_err(LaunchError::Failed)?;
    // Copies, not links: the job may change its inputs, and the cache must not change.
    let dir = match shared.work_dirs.stage(job.user_id, user.ids(), &inputs) {
        Ok(dir) => dir,
        Err(e) => {
            shared.sandbox.release(user);
            return Err(staging_failed(e.to_string()));
        }
    };

    let group = shared.cgroups.take(job.cpu_count, job.memory_amount);
    let limits = match &group {
        Ok(_) => shared.cgroups.describe(),
        Err(why) => format!("limits not enforced: {why}"),
    };
    let limits = format!("{limits}; {}", shared.sandbox.describe_job(&user));
    let group = group.ok();
    let gpus: Vec<String> = job.gpu_indices.iter().map(u32::to_string).collect();
    let procs = group.as_ref().map(JobCgroup::procs_files).unwrap_or_default();
    let (mission_id, job_id) = (job.mission_id.to_string(), job.job_id.to_string());
    let (threads, gpus) = (job.cpu_count.to_string(), gpus.join(","));
    let own: [(&str, &OsStr); 5] = [
        ("HOME", dir.path().as_os_str()),
        ("MISSION_ID", mission_id.as_ref()),
        ("JOB_ID", job_id.as_ref()),
        ("OMP_NUM_THREADS", threads.as_ref()),
        ("CUDA_VISIBLE_DEVICES", gpus.as_ref()),
    ];
    let env = shared.job_env.iter().map(|(name, value)| (*name, value.as_os_str())).chain(own);
    let plan = shared.sandbox.plan(&job.command, env, dir.path(), &user, &procs);
    let spawned = shared.launcher.start_job(&plan);
    match spawned {
        Ok(child) => Ok(Launched { child, group, limits, dir, user }),
        Err(e) => {
            if let Some(g) = group {
                shared.cgroups.give_back(g);
            }
            shared.work_dirs.give_back(dir);
            shared.sandbox.release(user);
            Err(LaunchError::Failed(format!("could not start {program}: {e}")))
        }
    }
}

/// The part of every job's environment that comes from the agent's: `PATH` (a standard one if
/// the agent has none) and the locale; nothing else of it (its token, the server's settings)
/// passes. Read once, when the agent starts.
pub(crate) fn base_env() -> Vec<(&'static str, std::ffi::OsString)> {
    let mut env: Vec<_> =
        ["PATH", "LANG", "LC_ALL", "TZ"].into_iter().filter_map(|name| Some((name, std::env::var_os(name)?))).collect();
    if !env.iter().any(|(name, _)| *name == "PATH") {
        env.push(("PATH", "/usr/local/bin:/usr/bin:/bin".into()));
    }
    env
}

/// Downloads an input into the content cache, checked against its SHA-256 (whose form
/// [`launch`] checked).
async fn download(shared: &Shared, job_id: Uuid, file: &InputFile) -> Result<(), String> {
    let path = MissionPath::parse(&file.path).map_err(|e| format!("{:?}: {e}", file.path))?;
    let cache = shared.data_dir.join("cache");
    let entry = cache.join(&file.sha256);
    let url_path = format!("/jobs/{job_id}/files/{}", path.to_url_path());
    let response = shared.request(reqwest::Method::GET, &url_path).send().await.map_err(|e| format!("{path}: {e}"))?;
    if !response.status().is_success() {
        return Err(format!("{path}: the server answered {}", response.status()));
    }
    let partial = cache.join(format!("{}.{}.partial", file.sha256, Uuid::new_v4()));
    let mut out = tokio::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&partial)
        .await
        .map_err(|e| e.to_string())?;
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
    result
}

/// The read end of a job's stdout or stderr, for [`forward`] (nothing to read where it is gone).
fn output_pipe(fd: Option<std::os::fd::OwnedFd>) -> Option<tokio::net::unix::pipe::Receiver> {
    tokio::net::unix::pipe::Receiver::from_owned_fd(fd?).ok()
}

/// Sends a stream of the program's output to the server as it comes, each chunk with its offset;
/// retries until the server takes it (the program blocks on a full pipe meanwhile). When the
/// server refuses the output for good (the job is no longer this LZ's, a 4xx), the rest is read
/// and dropped, so the program is never left writing into a pipe nobody reads.
async fn forward(shared: Arc<Shared>, job_id: Uuid, stream: &'static str, pipe: Option<impl AsyncRead + Unpin>) {
    let Some(mut pipe) = pipe else { return };
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

/// Uploads the job's results: the new or changed files [`changed_files`] found.
async fn upload_results(shared: &Shared, job_id: Uuid, files: Vec<(PathBuf, String)>) -> Result<(), String> {
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

/// Every new or changed regular file of the work dir, with its path relative to it (symbolic
/// links are not followed, so a job cannot return files from outside its work dir).
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
