//! GA4GH TES tasks (`/ga4gh/tes/v1`, see [`mission_api::tes`]): a task is a job of its caller.
//!
//! It needs no mission made first: it belongs to its user's `tes tasks` mission in the project it
//! is charged to (the tag or backend parameter `project`, by name or id; the caller's personal
//! project without one), made on first use, so it is listed, limited, charged, audited and
//! stopped like every other job, and placed only where its images can run. Its document is kept
//! with the job ([`mission_api::Job::task`]), each executor's image resolved at submission as a
//! run's image is; each attempt's log is kept as the attempt ends (`Store::save_task_log`).
//!
//! Where its inputs come from, and where its outputs go, is checked at submission, so that a task
//! that could not fetch or store them is refused before it queues:
//! - `http://`, `https://`: fetched by the landing zone itself, files only;
//! - `s3://BUCKET/KEY`: through the caller's own S3 cargo bay of that bucket (whose prefix, if it
//!   has one, the key must be under): the bay's credentials stay with the service, which reads and
//!   writes the objects for the landing zone;
//! - `file:///PATH`: a path on the service's host under a directory the server allows
//!   (`mission server --tes-file-root DIR`), read and written by the service;
//! - `mission://MISSION_ID/PATH`: a file (or folder) of a mission of the service's own storage,
//!   which the caller may read (inputs) or change (outputs).

use std::collections::{BTreeMap, HashMap};

use mission_api::paths::MissionPath;
use mission_api::tes::{
    self, BACKEND_PARAMETERS, JobTask, PROJECT_TAG, TesCreateTaskResponse, TesExecutorLog, TesFileType,
    TesListTasksResponse, TesState, TesTask, TesTaskLog, TesView,
};
use mission_api::tes::{InputListing, ListedFile};
use mission_api::{Job, JobStatus, PendingKind, RunJob};
use mission_store::{CargoBayRecord, JobFilter};
use object_store::ObjectMeta;
use object_store::path::Path as ObjectPath;
use serde_json::json;
use uuid::Uuid;

use super::audit::{self, Change};
use super::{DomainError, DomainResult, Principal, checked_labels, images, jobs, missions, projects, stations};
use crate::AppState;
use crate::services::blobs::FileStore;

/// The name of a user's mission of TES tasks in a project.
pub const TASK_MISSION: &str = "tes tasks";

/// The most executors one task runs.
pub const MAX_EXECUTORS: usize = 32;

/// The most inputs, outputs or volumes of one task, each.
pub const MAX_FILES: usize = 1_000;

/// The most bytes of inline input content in one task (the schema asks for at least 128 KiB;
/// a request body is at most 1 MiB here).
pub const MAX_INLINE_BYTES: usize = 512 << 10;

/// The longest path or URL a task names, in bytes.
const MAX_PATH_BYTES: usize = 4096;

/// The URL schemes inputs may come from.
pub const INPUT_SCHEMES: [&str; 5] = ["http", "https", "s3", "file", "mission"];

/// The URL schemes outputs may go to.
pub const OUTPUT_SCHEMES: [&str; 3] = ["s3", "file", "mission"];

/// Queues a task for the caller, checked; answers its id.
pub async fn create(app: &AppState, who: Principal, mut task: TesTask) -> DomainResult<TesCreateTaskResponse> {
    // What the service gives is not the caller's to give.
    task.id = None;
    task.state = None;
    task.logs = None;
    task.creation_time = None;
    check(&task)?;
    for (n, input) in task.inputs.iter().flatten().enumerate() {
        if input.content.is_none() {
            check_source(app, who, &format!("inputs[{n}].url"), input.url.as_deref().unwrap_or_default(), true).await?;
        }
    }
    for (n, output) in task.outputs.iter().flatten().enumerate() {
        check_source(app, who, &format!("outputs[{n}].url"), &output.url, false).await?;
    }
    let mut images = Vec::with_capacity(task.executors.len());
    for executor in &task.executors {
        images.push(images::resolve(app, who, "executors.image", &executor.image).await?);
    }
    let mut resources = task.resources.clone().unwrap_or_default();
    check_sizes(&resources)?;
    let parameters = backend_parameters(&mut resources)?;
    let tags = task.tags.clone().unwrap_or_default();
    let project = parameters.get("project").or_else(|| tags.get(PROJECT_TAG));
    let project_id = match project {
        Some(named) => project_named(app, who, named).await?,
        None => who.user_id,
    };
    projects::ensure_may_run(app, who, project_id, "tags.project").await?;
    let station_id = station_of(app, who, resources.zones.as_deref().unwrap_or_default()).await?;
    let run = RunJob {
        station_id,
        cpu_count: resources.cpu_cores.map(|cpus| cpus as u32),
        memory_amount: resources.ram_gb.map(megabytes),
        gpu_count: parameters.get("gpus").map(|g| g.parse::<u32>()).transpose().map_err(|_| {
            DomainError::invalid("resources.backend_parameters.gpus", "expected a whole number of GPUs")
        })?,
        nodes: parameters.get("nodes").map(|n| n.parse::<u32>()).transpose().map_err(|_| {
            DomainError::invalid("resources.backend_parameters.nodes", "expected a whole number of landing zones")
        })?,
        time_limit: parameters.get("time_limit_minutes").map(|t| t.parse::<u32>()).transpose().map_err(|_| {
            DomainError::invalid("resources.backend_parameters.time_limit_minutes", "expected whole minutes")
        })?,
        labels: checked_labels(tags.into_iter().collect()).map_err(|e| match e {
            DomainError::Invalid { field, detail } => {
                DomainError::Invalid { field: field.replace("labels", "tags"), detail }
            }
            other => other,
        })?,
        project_id: Some(project_id),
        ..Default::default()
    };
    let disk_mb = resources.disk_gb.map_or(0, megabytes);
    task.resources = task.resources.is_some().then_some(resources);
    let description = "Tasks submitted through the GA4GH TES API: each runs its executors, one after another.";
    let mission_id = missions::own_mission(app, who, project_id, TASK_MISSION, description).await?;
    let mut job = jobs::new_job(app, who, mission_id, run).await?;
    job.command = task.executors[0].command.clone();
    job.image = Some(images[0].clone());
    let given = json!({
        "mission_id": mission_id,
        "name": task.name,
        "station_id": job.station_id,
        "cpu_count": job.cpu_count,
        "memory_amount": job.memory_amount,
        "gpu_count": job.gpu_count,
        "executors": task.executors.len(),
    });
    job.task = Some(Box::new(JobTask { task, images, disk_mb }));
    audit::note(who, Change::new("task.create", "job", job.job_id).in_project(job.project_id).with(given));
    let job = app.scheduler.submit(job).await?;
    Ok(TesCreateTaskResponse { id: job.job_id.to_string() })
}

/// Refuses CPUs, memory or disk no task could ask for: fewer than one CPU, a negative, infinite
/// or absurd amount. (`preemptible` asks nothing of us: every job may be requeued when room it
/// borrowed is reclaimed, and shows PREEMPTED then.)
fn check_sizes(resources: &mission_api::tes::TesResources) -> DomainResult<()> {
    if resources.cpu_cores.is_some_and(|cpus| cpus < 1) {
        return Err(DomainError::invalid("resources.cpu_cores", "expected at least 1 CPU"));
    }
    // A petabyte: more than any host has, and still exact in megabytes.
    const MOST_GB: f64 = 1e6;
    for (field, gb) in [("resources.ram_gb", resources.ram_gb), ("resources.disk_gb", resources.disk_gb)] {
        if gb.is_some_and(|gb| !(0.0..=MOST_GB).contains(&gb)) {
            return Err(DomainError::invalid(field, format!("expected gigabytes from 0 to {MOST_GB}")));
        }
    }
    Ok(())
}

/// Megabytes for `gb` gigabytes (as the schema means them, 10^9 bytes), rounded up.
fn megabytes(gb: f64) -> u64 {
    (gb * 1000.0).ceil().max(0.0) as u64
}

/// What is wrong with a task's document, if anything: the checks that need no lookup.
fn check(task: &TesTask) -> DomainResult<()> {
    if task.executors.is_empty() {
        return Err(DomainError::invalid("executors", "a task runs at least one executor"));
    }
    if task.executors.len() > MAX_EXECUTORS {
        return Err(DomainError::invalid("executors", format!("at most {MAX_EXECUTORS} executors")));
    }
    for (n, executor) in task.executors.iter().enumerate() {
        if executor.image.trim().is_empty() {
            return Err(DomainError::invalid(format!("executors[{n}].image"), "names no image"));
        }
        if executor.command.is_empty() || executor.command[0].is_empty() {
            return Err(DomainError::invalid(format!("executors[{n}].command"), "names no program"));
        }
        if executor.command.iter().any(|argument| argument.contains('\0')) {
            return Err(DomainError::invalid(format!("executors[{n}].command"), "holds a NUL byte"));
        }
        for (field, path) in [
            ("workdir", &executor.workdir),
            ("stdin", &executor.stdin),
            ("stdout", &executor.stdout),
            ("stderr", &executor.stderr),
        ] {
            if let Some(path) = path {
                check_container_path(&format!("executors[{n}].{field}"), path, false)?;
            }
        }
        for (name, value) in executor.env.iter().flatten() {
            let valid = !name.is_empty() && !name.contains('=') && !name.contains('\0') && !value.contains('\0');
            if !valid {
                return Err(DomainError::invalid(
                    format!("executors[{n}].env"),
                    format!("{name:?} is not a variable an environment can hold"),
                ));
            }
        }
    }
    let inputs = task.inputs.as_deref().unwrap_or_default();
    let outputs = task.outputs.as_deref().unwrap_or_default();
    let volumes = task.volumes.as_deref().unwrap_or_default();
    for (field, count) in [("inputs", inputs.len()), ("outputs", outputs.len()), ("volumes", volumes.len())] {
        if count > MAX_FILES {
            return Err(DomainError::invalid(field, format!("at most {MAX_FILES}")));
        }
    }
    let mut inline = 0;
    for (n, input) in inputs.iter().enumerate() {
        check_container_path(&format!("inputs[{n}].path"), &input.path, false)?;
        match (&input.content, &input.url) {
            (Some(content), _) => {
                if input.kind == Some(TesFileType::Directory) {
                    return Err(DomainError::invalid(
                        format!("inputs[{n}].content"),
                        "a directory cannot be given inline",
                    ));
                }
                inline += content.len();
            }
            (None, Some(url)) => {
                check_url(&format!("inputs[{n}].url"), url, &INPUT_SCHEMES)?;
            }
            (None, None) => {
                return Err(DomainError::invalid(format!("inputs[{n}]"), "gives neither a url nor its content"));
            }
        }
    }
    if inline > MAX_INLINE_BYTES {
        return Err(DomainError::invalid(
            "inputs.content",
            format!("{inline} bytes of inline content; at most {MAX_INLINE_BYTES} (name larger inputs by URL)"),
        ));
    }
    for (n, output) in outputs.iter().enumerate() {
        let glob = check_container_path(&format!("outputs[{n}].path"), &output.path, true)?;
        check_url(&format!("outputs[{n}].url"), &output.url, &OUTPUT_SCHEMES)?;
        if glob {
            let prefix = output.path_prefix.as_deref().unwrap_or_default();
            if prefix.is_empty() || !output.path.starts_with(prefix) {
                return Err(DomainError::invalid(
                    format!("outputs[{n}].path_prefix"),
                    "a path with wildcards needs a path_prefix it starts with",
                ));
            }
        }
    }
    for (n, volume) in volumes.iter().enumerate() {
        check_container_path(&format!("volumes[{n}]"), volume, false)?;
    }
    for (field, text) in [("name", &task.name), ("description", &task.description)] {
        if text.as_ref().is_some_and(|t| t.len() > 64 << 10 || t.contains('\0')) {
            return Err(DomainError::invalid(field, "at most 64 KiB, without NUL"));
        }
    }
    Ok(())
}

/// A path inside the containers: absolute, no NUL, no `..`, and not `/` itself; wildcards
/// (`*`, `?`, `[`) only where `glob`. Answers whether it has any.
fn check_container_path(field: &str, path: &str, glob: bool) -> DomainResult<bool> {
    if !path.starts_with('/') || path.len() > MAX_PATH_BYTES || path.contains('\0') || path.trim_matches('/').is_empty()
    {
        return Err(DomainError::invalid(
            field,
            format!("{path:?} is not an absolute path below / inside the container"),
        ));
    }
    if path.split('/').any(|segment| segment == "..") {
        return Err(DomainError::invalid(field, format!("{path:?} goes up a directory (..)")));
    }
    let wild = path.contains(['*', '?', '[']);
    if wild && !glob {
        return Err(DomainError::invalid(field, format!("{path:?} holds a wildcard, which only an output's path may")));
    }
    Ok(wild)
}

/// A URL of one of `schemes`, parsed.
fn check_url(field: &str, url: &str, schemes: &[&str]) -> DomainResult<url::Url> {
    if url.len() > MAX_PATH_BYTES {
        return Err(DomainError::invalid(field, format!("longer than {MAX_PATH_BYTES} bytes")));
    }
    let parsed = url::Url::parse(url).map_err(|e| DomainError::invalid(field, format!("{url:?} is not a URL: {e}")))?;
    if !schemes.contains(&parsed.scheme()) {
        return Err(DomainError::invalid(
            field,
            format!(
                "{url:?}: the scheme {:?} is not one this service takes here ({})",
                parsed.scheme(),
                schemes.join(", ")
            ),
        ));
    }
    Ok(parsed)
}

/// Where an input comes from (`input`) or an output goes, checked for the caller: a bay of
/// theirs for `s3://`, an allowed directory for `file://`, a mission they may read or change for
/// `mission://`. `http(s)://` is the landing zone's to fetch.
async fn check_source(app: &AppState, who: Principal, field: &str, url: &str, input: bool) -> DomainResult<()> {
    let parsed = check_url(field, url, if input { &INPUT_SCHEMES } else { &OUTPUT_SCHEMES })?;
    match parsed.scheme() {
        "s3" => s3_bay(app, who, field, &parsed).await.map(|_| ()),
        "file" => file_path(app, field, &parsed).map(|_| ()),
        "mission" => {
            let (mission_id, _) = mission_path(field, &parsed)?;
            if input {
                missions::readable(app, who, mission_id).await?;
            } else {
                missions::writable(app, who, mission_id).await?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// The caller's S3 cargo bay an `s3://BUCKET/KEY` URL is reached through: one of their bays of
/// that bucket whose prefix (if any) the key is under.
async fn s3_bay(app: &AppState, who: Principal, field: &str, url: &url::Url) -> DomainResult<CargoBayRecord> {
    let bucket = url.host_str().unwrap_or_default();
    let key = url.path().trim_start_matches('/');
    let bays = app.store.cargo_bays(Some(who.user_id)).await?;
    let found = bays.into_iter().find(|record| {
        let bay = &record.bay;
        bay.kind == mission_api::CargoBayKind::S3
            && bay.bucket.as_deref() == Some(bucket)
            && bay.prefix.as_deref().is_none_or(|prefix| prefix.is_empty() || key.starts_with(&format!("{prefix}/")))
    });
    found.ok_or_else(|| {
        DomainError::invalid(
            field,
            format!("no S3 cargo bay of yours reaches the bucket {bucket:?}: add one (`mission cargo-bays create`)"),
        )
    })
}

/// The host path a `file://` URL names, under a directory the server allows.
fn file_path(app: &AppState, field: &str, url: &url::Url) -> DomainResult<std::path::PathBuf> {
    let refused = || {
        DomainError::invalid(
            field,
            format!("{url} is not under a directory this server takes files from (`mission server --tes-file-root`)"),
        )
    };
    if url.host_str().is_some_and(|host| !host.is_empty() && host != "localhost") {
        return Err(refused());
    }
    let path = url.to_file_path().map_err(|()| refused())?;
    if path.components().any(|c| matches!(c, std::path::Component::ParentDir)) {
        return Err(refused());
    }
    let allowed = app.config.tes_file_roots.iter().any(|root| path.starts_with(root));
    if allowed { Ok(path) } else { Err(refused()) }
}

/// The mission and the path in it a `mission://MISSION_ID/PATH` URL names.
fn mission_path(field: &str, url: &url::Url) -> DomainResult<(Uuid, String)> {
    let mission_id = url.host_str().and_then(|host| Uuid::parse_str(host).ok()).ok_or_else(|| {
        DomainError::invalid(field, format!("{url}: expected mission://MISSION_ID/PATH, the mission by its id"))
    })?;
    let path =
        percent_encoding::percent_decode_str(url.path().trim_start_matches('/')).decode_utf8_lossy().into_owned();
    Ok((mission_id, path))
}

/// The backend parameters a task gives, by lower-case key; those this service does not take are
/// dropped (the schema: "shall not store or return unsupported keys"), or refuse the task where
/// it asked to be strict.
fn backend_parameters(resources: &mut mission_api::tes::TesResources) -> DomainResult<BTreeMap<String, String>> {
    let strict = resources.backend_parameters_strict.unwrap_or(false);
    let mut taken = BTreeMap::new();
    let Some(given) = resources.backend_parameters.take() else { return Ok(taken) };
    let mut kept = BTreeMap::new();
    for (key, value) in given {
        let lower = key.to_ascii_lowercase();
        if BACKEND_PARAMETERS.contains(&lower.as_str()) {
            taken.insert(lower, value.clone());
            kept.insert(key, value);
        } else if strict {
            return Err(DomainError::invalid(
                format!("resources.backend_parameters.{key}"),
                format!("not a backend parameter of this service ({})", BACKEND_PARAMETERS.join(", ")),
            ));
        }
    }
    resources.backend_parameters = (!kept.is_empty()).then_some(kept);
    Ok(taken)
}

/// The project `named` (by id or name) the caller may charge.
async fn project_named(app: &AppState, who: Principal, named: &str) -> DomainResult<Uuid> {
    if let Ok(id) = Uuid::parse_str(named) {
        return Ok(id);
    }
    let mut page = 1;
    loop {
        let (projects, more) = projects::list(app, who, page, mission_api::MAX_ITEMS_PER_PAGE).await?;
        if let Some(project) = projects.iter().find(|p| p.name == named) {
            return Ok(project.project_id);
        }
        if !more {
            return Err(DomainError::invalid("tags.project", format!("no project {named:?} of yours")));
        }
        page += 1;
    }
}

/// The station a task runs on: the first of `zones` the caller may use, or the default station.
async fn station_of(app: &AppState, who: Principal, zones: &[String]) -> DomainResult<Uuid> {
    let stations = stations::list(app, who).await?;
    let wanted: Vec<&str> = if zones.is_empty() {
        vec![mission_api::DEFAULT_STATION_NAME]
    } else {
        zones.iter().map(String::as_str).collect()
    };
    wanted.iter().find_map(|zone| stations.iter().find(|s| s.name == *zone)).map(|s| s.station_id).ok_or_else(|| {
        DomainError::invalid("resources.zones", format!("no station named {} that you may use", wanted.join(" or ")))
    })
}

/// A task the caller may read, by its id.
async fn readable_task(app: &AppState, who: Principal, id: &str) -> DomainResult<Job> {
    let unknown = || DomainError::NotFound { what: "task", id: id.to_owned() };
    let job_id = Uuid::parse_str(id).map_err(|_| unknown())?;
    match jobs::readable(app, who, job_id).await {
        Ok(job) if job.task.is_some() => Ok(job),
        Ok(_) | Err(DomainError::NotFound { .. }) => Err(unknown()),
        Err(e) => Err(e),
    }
}

/// A task the caller may read, as `view` shows it.
pub async fn get(app: &AppState, who: Principal, id: &str, view: TesView) -> DomainResult<TesTask> {
    let job = readable_task(app, who, id).await?;
    let logs = app.store.task_logs(&[job.job_id]).await?.remove(&job.job_id).unwrap_or_default();
    Ok(task_view(job, logs, view))
}

/// Cancels a task of the caller's: one that has not ended stops as a job does; one that has
/// ended stays as it is.
pub async fn cancel(app: &AppState, who: Principal, id: &str) -> DomainResult<()> {
    let job = readable_task(app, who, id).await?;
    if job.status.is_final() {
        return Ok(());
    }
    match jobs::stop(app, who, job.job_id).await {
        // It ended meanwhile.
        Err(DomainError::Conflict(_)) => Ok(()),
        other => other.map(|_| ()),
    }
}

/// What `GET /tasks` filters by, and where its page starts.
#[derive(Debug, Clone, Default)]
pub struct TaskQuery {
    /// Tasks whose name starts with this.
    pub name_prefix: Option<String>,
    /// Tasks in this state.
    pub state: Option<TesState>,
    /// Tags a task has, every one; an empty value matches any value of its key.
    pub tags: Vec<(String, String)>,
    /// Tasks per page: 0 for the default, more than [`tes::MAX_PAGE_SIZE`] for that many.
    pub page_size: u32,
    /// Where the page starts: a `next_page_token` given before.
    pub page_token: Option<String>,
    /// How much of each task to show.
    pub view: TesView,
}

/// Job rows read per round while a page is filled: a filter the store cannot apply (a name's
/// prefix, a tag of any value, the states one job status may show as) is applied to them here.
const SCAN_ROWS: u32 = 500;

/// The most rounds one page reads: a page that filters out more rows ends early, with a token
/// that goes on from where it stopped.
const SCAN_ROUNDS: u32 = 20;

/// A page of the tasks the caller may read (everyone's, for an admin), newest first.
pub async fn list(app: &AppState, who: Principal, query: TaskQuery) -> DomainResult<TesListTasksResponse> {
    // Funnel's reading of the schema's "must be less than 2048; defaults to 256".
    let page_size = match query.page_size {
        0 => tes::DEFAULT_PAGE_SIZE,
        size => size.min(tes::MAX_PAGE_SIZE),
    };
    let mut next = match &query.page_token {
        Some(token) => Some(token.parse::<u64>().map_err(|_| {
            DomainError::invalid("page_token", "not a page token this service gave: pass next_page_token as it came")
        })?),
        None => None,
    };
    let mut filter = JobFilter {
        user: (!who.admin).then_some(who.user_id),
        tasks_only: true,
        labels: query.tags.iter().filter(|(_, value)| !value.is_empty()).cloned().collect(),
        statuses: query.state.map(statuses_of).unwrap_or_default(),
        page: 1,
        items: SCAN_ROWS,
        ..Default::default()
    };
    let mut tasks = Vec::new();
    let mut rounds = 0;
    loop {
        if next == Some(0) {
            next = None;
            break;
        }
        filter.seq_at_most = next;
        let rows = app.store.job_page(&filter).await?;
        let exhausted = (rows.len() as u32) < SCAN_ROWS;
        let logs = app.store.task_logs(&rows.iter().map(|job| job.job_id).collect::<Vec<_>>()).await?;
        let mut logs: HashMap<Uuid, Vec<TesTaskLog>> = logs;
        for job in rows {
            next = Some(job.number.saturating_sub(1));
            let job_logs = logs.remove(&job.job_id).unwrap_or_default();
            if !matches(&job, &job_logs, &query) {
                continue;
            }
            tasks.push(task_view(job, job_logs, query.view));
            if tasks.len() as u32 == page_size {
                break;
            }
        }
        rounds += 1;
        if tasks.len() as u32 == page_size || rounds == SCAN_ROUNDS {
            break;
        }
        if exhausted {
            next = None;
            break;
        }
    }
    Ok(TesListTasksResponse { tasks, next_page_token: next.filter(|n| *n > 0).map(|n| n.to_string()) })
}

/// Whether `job`, a task, passes the filters the store did not apply.
fn matches(job: &Job, logs: &[TesTaskLog], query: &TaskQuery) -> bool {
    let task = &job.task.as_ref().expect("listed as a task").task;
    let named =
        query.name_prefix.as_deref().is_none_or(|prefix| task.name.as_deref().unwrap_or_default().starts_with(prefix));
    let tagged = query.tags.iter().all(|(key, value)| match job.labels.get(key) {
        Some(has) => value.is_empty() || has == value,
        None => false,
    });
    named && tagged && query.state.is_none_or(|state| state_of(job, logs) == state)
}

/// The job statuses a job in TES state `state` may have.
fn statuses_of(state: TesState) -> Vec<JobStatus> {
    match state {
        TesState::Queued | TesState::Paused => vec![JobStatus::Queued],
        TesState::Initializing => vec![JobStatus::Assigned, JobStatus::Staging],
        TesState::Running => vec![JobStatus::Running, JobStatus::Uploading],
        TesState::Canceling => vec![JobStatus::Assigned, JobStatus::Staging, JobStatus::Running, JobStatus::Uploading],
        TesState::Complete => vec![JobStatus::Completed],
        TesState::ExecutorError => vec![JobStatus::Failed],
        TesState::SystemError => vec![JobStatus::Failed, JobStatus::Lost],
        TesState::Canceled | TesState::Preempted => vec![JobStatus::Stopped],
        // No job is ever in it: a status no job has.
        TesState::Unknown => vec![JobStatus::Lost, JobStatus::Completed],
    }
}

/// The TES state of a task's job, given the logs of its attempts.
pub fn state_of(job: &Job, logs: &[TesTaskLog]) -> TesState {
    match job.status {
        JobStatus::Queued if job.pending_reason.as_ref().is_some_and(|p| p.kind == PendingKind::Held) => {
            TesState::Paused
        }
        JobStatus::Queued => TesState::Queued,
        JobStatus::Assigned | JobStatus::Staging | JobStatus::Running | JobStatus::Uploading
            if job.stop_ordered_at.is_some() =>
        {
            TesState::Canceling
        }
        JobStatus::Assigned | JobStatus::Staging => TesState::Initializing,
        JobStatus::Running | JobStatus::Uploading => TesState::Running,
        JobStatus::Completed => TesState::Complete,
        JobStatus::Failed if executor_failed(logs) => TesState::ExecutorError,
        JobStatus::Failed | JobStatus::Lost => TesState::SystemError,
        JobStatus::Stopped if job.reason.as_deref().is_some_and(|r| r.contains("reclaim")) => TesState::Preempted,
        JobStatus::Stopped => TesState::Canceled,
    }
}

/// Whether the last attempt ended because an executor failed: its last executor's exit code is
/// not 0 and that executor did not ignore its errors (a later one would have run).
fn executor_failed(logs: &[TesTaskLog]) -> bool {
    logs.last().and_then(|log| log.logs.last()).is_some_and(|last: &TesExecutorLog| last.exit_code != 0)
}

/// A task's job as `view` shows it.
fn task_view(job: Job, logs: Vec<TesTaskLog>, view: TesView) -> TesTask {
    let state = state_of(&job, &logs);
    let id = job.job_id.to_string();
    if view == TesView::Minimal {
        return TesTask { id: Some(id), state: Some(state), ..Default::default() };
    }
    let mut logs = if logs.is_empty() { ended_without_log(&job) } else { logs };
    let JobTask { mut task, .. } = *job.task.expect("a task's job");
    task.id = Some(id);
    task.state = Some(state);
    task.creation_time = Some(job.created_at.to_rfc3339());
    if view == TesView::Basic {
        for input in task.inputs.iter_mut().flatten() {
            input.content = None;
        }
        for log in &mut logs {
            log.system_logs = None;
            for executor in &mut log.logs {
                executor.stdout = None;
                executor.stderr = None;
            }
        }
    }
    task.logs = (!logs.is_empty()).then_some(logs);
    task
}

/// The log of a task that ended before its landing zone could say anything (refused, lost,
/// cancelled while queued): where and why, in words.
fn ended_without_log(job: &Job) -> Vec<TesTaskLog> {
    if job.started_at.is_none() && job.reason.is_none() {
        return Vec::new();
    }
    vec![TesTaskLog {
        start_time: job.started_at.map(|at| at.to_rfc3339()),
        end_time: job.finished_at.map(|at| at.to_rfc3339()),
        system_logs: job.reason.clone().map(|reason| vec![reason]),
        ..Default::default()
    }]
}

/// What `GET /service-info` answers: who we are, the URL schemes tasks may use and the backend
/// parameters they may give.
pub fn service_info(app: &AppState) -> serde_json::Value {
    let mut storage: Vec<String> = vec!["s3://".into(), "mission://".into(), "http://".into(), "https://".into()];
    storage.extend(app.config.tes_file_roots.iter().map(|root| format!("file://{}", root.display())));
    json!({
        "id": "org.mission-compute.tes",
        "name": "Mission Compute Service",
        "type": {"group": "org.ga4gh", "artifact": "tes", "version": "1.1.0"},
        "description": "GA4GH TES tasks run as jobs of Mission Compute Service, on its stations' landing zones.",
        "organization": {"name": "Mission Compute Service", "url": app.public_url},
        "version": env!("CARGO_PKG_VERSION"),
        "storage": storage,
        "tesResources_backend_parameters": BACKEND_PARAMETERS,
    })
}

/// Where the files of a task's input come from, or its output goes to, for its job's user: an
/// object store and the key of the file (or of the folder, for a directory) there.
struct Place {
    files: FileStore,
    key: ObjectPath,
}

/// The job's user, as they act through their task.
async fn owner_of(app: &AppState, job: &Job) -> DomainResult<Principal> {
    let user = app.store.user_by_id(job.user_id).await?;
    Ok(Principal { user_id: job.user_id, admin: user.is_some_and(|u| u.admin) })
}

/// Where `url` leads for `who`: an S3 bay's bucket, a directory the server allows, or the
/// storage of a mission (which they may read). Outputs to a mission go through its file index
/// instead ([`store_output`]).
async fn place(app: &AppState, who: Principal, field: &str, url: &str) -> DomainResult<Place> {
    let parsed = check_url(field, url, &INPUT_SCHEMES)?;
    let key_of = |path: &str| {
        ObjectPath::parse(path.trim_matches('/'))
            .map_err(|e| DomainError::invalid(field, format!("{url}: not a path this service can store: {e}")))
    };
    match parsed.scheme() {
        "s3" => {
            let bay = s3_bay(app, who, field, &parsed).await?;
            let key = percent_encoding::percent_decode_str(parsed.path()).decode_utf8_lossy().into_owned();
            Ok(Place { files: app.bays.open(&bay)?, key: key_of(&key)? })
        }
        "file" => {
            let path = file_path(app, field, &parsed)?;
            let root = app.config.tes_file_roots.iter().find(|root| path.starts_with(root)).expect("checked");
            let files = FileStore::existing_local(root).map_err(DomainError::internal)?;
            let relative = path.strip_prefix(root).expect("under it").to_string_lossy().into_owned();
            Ok(Place { files, key: key_of(&relative)? })
        }
        "mission" => {
            let (mission_id, path) = mission_path(field, &parsed)?;
            let mission = missions::readable(app, who, mission_id).await?;
            let location = app.bays.source(&app.store, &mission).await?;
            let path = MissionPath::parse(&path).map_err(|e| DomainError::invalid(field, format!("{url}: {e}")))?;
            Ok(Place { files: location.files.clone(), key: location.key(&path) })
        }
        other => Err(DomainError::invalid(field, format!("{url}: the landing zone fetches {other}:// itself"))),
    }
}

/// Input `n` of a task's job, which the service fetches for its landing zone.
fn service_input(job: &Job, n: usize) -> DomainResult<&mission_api::tes::TesInput> {
    let task = &job.task.as_ref().ok_or_else(|| DomainError::not_found("task", job.job_id))?.task;
    let input = task.inputs.as_deref().unwrap_or_default().get(n);
    input
        .filter(|input| input.content.is_none() && input.url.as_deref().is_some_and(|url| !url.starts_with("http")))
        .ok_or_else(|| DomainError::not_found("task input", format!("{n} of task {}", job.job_id)))
}

/// The files of input `n` of a task's job, each with what names its content (for the agent's
/// cache); one that is not there is refused naming its URL.
pub async fn input_listing(app: &AppState, job: &Job, n: usize) -> DomainResult<InputListing> {
    let input = service_input(job, n)?;
    let url = input.url.as_deref().unwrap_or_default();
    let field = format!("inputs[{n}].url");
    let place = place(app, owner_of(app, job).await?, &field, url).await?;
    let version = |meta: &ObjectMeta| {
        meta.e_tag.clone().unwrap_or_else(|| format!("{}-{}", meta.size, meta.last_modified.timestamp_micros()))
    };
    let files = if input.kind == Some(TesFileType::Directory) {
        let listed = place.files.list_meta(&place.key).await.map_err(|e| unreachable_input(url, e))?;
        let prefix = place.key.as_ref().len();
        let files: Vec<ListedFile> = listed
            .iter()
            .map(|meta| ListedFile {
                path: meta.location.as_ref()[prefix..].trim_start_matches('/').to_owned(),
                size: meta.size,
                version: version(meta),
            })
            .collect();
        if files.is_empty() {
            return Err(DomainError::invalid(field, format!("{url}: no files under it")));
        }
        files
    } else {
        let meta = place.files.head(&place.key).await.map_err(|e| unreachable_input(url, e))?;
        vec![ListedFile { path: String::new(), size: meta.size, version: version(&meta) }]
    };
    Ok(InputListing { files })
}

/// A file of input `n` of a task's job (`path` under a directory input, empty for a file input):
/// its content, as its store gives it.
pub async fn input_file(app: &AppState, job: &Job, n: usize, path: &str) -> DomainResult<object_store::GetResult> {
    let input = service_input(job, n)?;
    let url = input.url.as_deref().unwrap_or_default();
    let place = place(app, owner_of(app, job).await?, &format!("inputs[{n}].url"), url).await?;
    let key = if path.is_empty() {
        place.key
    } else {
        let path = MissionPath::parse(path).map_err(|e| DomainError::invalid("path", e.to_string()))?;
        path.segments().fold(place.key, |key, segment| key.child(segment))
    };
    place.files.read(&key, None, None).await.map_err(|e| unreachable_input(url, e))
}

/// Why an input could not be read, in words that name it.
fn unreachable_input(url: &str, e: object_store::Error) -> DomainError {
    match e {
        object_store::Error::NotFound { .. } => DomainError::not_found("input", format!("{url} (not there: 404)")),
        other => DomainError::Storage(format!("{url} could not be read: {other}")),
    }
}

/// Stores a file a task's job uploads as output `n` (`path` under a directory output, empty for
/// a file output); answers the URL it went to and its size.
pub async fn store_output<S, E>(
    app: &AppState,
    job: &Job,
    n: usize,
    path: &str,
    announced: Option<u64>,
    body: S,
) -> DomainResult<(String, u64)>
where
    S: futures_util::Stream<Item = Result<bytes::Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    let task = &job.task.as_ref().ok_or_else(|| DomainError::not_found("task", job.job_id))?.task;
    let output = task
        .outputs
        .as_deref()
        .unwrap_or_default()
        .get(n)
        .ok_or_else(|| DomainError::not_found("task output", format!("{n} of task {}", job.job_id)))?;
    let url = if path.is_empty() {
        output.url.clone()
    } else {
        MissionPath::parse(path).map_err(|e| DomainError::invalid("path", e.to_string()))?;
        format!("{}/{path}", output.url.trim_end_matches('/'))
    };
    let who = owner_of(app, job).await?;
    let field = format!("outputs[{n}].url");
    let parsed = check_url(&field, &url, &OUTPUT_SCHEMES)?;
    if parsed.scheme() == "mission" {
        let (mission_id, mission_file) = mission_path(&field, &parsed)?;
        let mission_file =
            MissionPath::parse(&mission_file).map_err(|e| DomainError::invalid(field, format!("{url}: {e}")))?;
        let uploaded = super::files::upload(app, who, mission_id, &mission_file, announced, body).await?;
        return Ok((url, uploaded.file.file_size));
    }
    let place = place(app, who, &field, &url).await?;
    let written = place
        .files
        .write(&place.key, body, app.config.file_limits.max_file_bytes)
        .await
        .map_err(|e| DomainError::Storage(format!("{url} could not be written: {e}")))?;
    Ok((url, written.size))
}
