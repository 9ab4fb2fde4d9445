//! Jobs: starting them from missions (one, an array, again), reading and listing them, changing
//! their labels, stopping them, and listing their results.
//!
//! A user reads their own jobs, those charged to a project they are a member of (any role), or
//! any for an admin; any other job is not found. Only its owner (or an admin) changes or stops a
//! job. Running needs write access to the mission, the right to use the station (see
//! [`stations::visible`]) and to charge the project (see [`projects::ensure_may_run`]).

use std::collections::HashSet;

use mission_api::{
    FileListing, Job, JobArray, JobPage, JobRef, JobStatus, JobTransition, MAX_TIME_LIMIT, RerunJobs, RunJob,
    RunJobArray, UpdateJob,
};
use mission_scheduler::{JobControl, SchedulerError};
use mission_store::{self as store, JobFilter};
use serde_json::json;
use uuid::Uuid;

use super::{
    DomainError, DomainResult, MAX_FILTER_VALUES, checked_labels, checked_retry, images, missions, projects, stations,
};
use crate::AppState;
use crate::domain::Principal;
use crate::domain::audit::{self, Change};
use crate::domain::catalogue;
use crate::services::job_logs::LogStream;

/// How many elements of a job array one write queues.
const ARRAY_CHUNK: usize = 5_000;

/// The id of the job `named`. A number names a job only to those who may read it: to anyone
/// else it is as unknown as a number never given, and the refusal names the number.
pub async fn resolve(app: &AppState, who: Principal, named: JobRef) -> DomainResult<Uuid> {
    let number = match named {
        JobRef::Id(id) => return Ok(id),
        JobRef::Number(number) => number,
    };
    let unknown = || DomainError::NotFound { what: "job", id: number.to_string() };
    let job_id = app.store.job_numbered(number).await?.ok_or_else(unknown)?;
    match readable(app, who, job_id).await {
        Ok(_) => Ok(job_id),
        Err(DomainError::NotFound { .. }) => Err(unknown()),
        Err(e) => Err(e),
    }
}

/// A job the caller may read (without its history).
pub async fn readable(app: &AppState, who: Principal, job_id: Uuid) -> DomainResult<Job> {
    match app.store.job_row(job_id).await? {
        Some(job) if who.admin || job.user_id == who.user_id => Ok(job),
        Some(job) if projects::role(app, who, job.project_id).await?.is_some() => Ok(job),
        _ => Err(DomainError::not_found("job", job_id)),
    }
}

/// A job the caller may change (stop, relabel, start again): their own, or any for an admin;
/// not found if they may not read it, forbidden if they only may.
pub async fn changeable(app: &AppState, who: Principal, job_id: Uuid) -> DomainResult<Job> {
    let job = readable(app, who, job_id).await?;
    if who.admin || job.user_id == who.user_id {
        Ok(job)
    } else {
        Err(DomainError::Forbidden(format!(
            "job {} belongs to another member of its project and is read-only to you",
            job.job_id
        )))
    }
}

/// One job the caller may read, with its history and, while queued, its place in line.
pub async fn get(app: &AppState, who: Principal, job_id: Uuid) -> DomainResult<Job> {
    let mut job = readable(app, who, job_id).await?;
    job.history = app.store.job_history(job.job_id).await?;
    app.scheduler.place_in_line(&app.store, std::slice::from_mut(&mut job)).await?;
    Ok(job)
}

/// One page of the jobs `filter` matches that the caller may read, newest first: their own
/// (everyone's, for an admin), or with `project_ids` every job charged to those projects, which
/// the caller must be a member of. The filter's `user` is set here.
pub async fn list(app: &AppState, who: Principal, mut filter: JobFilter) -> DomainResult<JobPage> {
    if filter.mission_ids.len() + filter.station_ids.len() + filter.project_ids.len() > MAX_FILTER_VALUES {
        return Err(DomainError::invalid("filters", format!("at most {MAX_FILTER_VALUES} filter values per request")));
    }
    filter.user = (!who.admin).then_some(who.user_id);
    if !filter.project_ids.is_empty() {
        // A member reads every job charged to their projects, whoever started it.
        projects::ensure_member_of_each(app, who, &filter.project_ids, "project_ids").await?;
        filter.user = None;
    }
    // The queued jobs alone (of a station, of a user) are counted by the scheduler's queue where
    // this process runs it: counting a million rows would take longer than reading the page.
    let queued_only = filter.statuses == [JobStatus::Queued]
        && filter.mission_ids.is_empty()
        && filter.project_ids.is_empty()
        && filter.array_ids.is_empty()
        && filter.labels.is_empty();
    let known = queued_only.then(|| app.scheduler.queued_count(&filter.station_ids, filter.user)).flatten();
    let (mut jobs, total) = match known {
        Some(total) => {
            // A deep page is found by its first job's sequence number, from the queue, rather
            // than by the database skipping every row before it.
            let skip = u64::from(filter.page.saturating_sub(1)) * u64::from(filter.items);
            let page = match app.scheduler.queued_page_start(&filter.station_ids, filter.user, skip) {
                Some(start) => JobFilter { seq_at_most: Some(start), page: 1, ..filter.clone() },
                None => filter.clone(),
            };
            (app.store.job_page(&page).await?, total)
        }
        None => app.store.jobs(&filter).await?,
    };
    app.scheduler.place_in_line(&app.store, &mut jobs).await?;
    Ok(JobPage { jobs, page: filter.page, items: filter.items, total })
}

/// Starts a job from a mission the caller may change, on a station (or one landing zone of it)
/// they may use, charged to the mission's project or the one the request names.
pub async fn submit(app: &AppState, who: Principal, mission_id: Uuid, req: RunJob) -> DomainResult<Job> {
    let given = serde_json::to_value(&req).unwrap_or_default();
    let job = new_job(app, who, mission_id, req).await?;
    let change = Change::new("job.submit", "job", job.job_id).in_project(job.project_id);
    audit::note(who, change.with(merged(json!({ "mission_id": job.mission_id }), given)));
    Ok(app.scheduler.submit(job).await?)
}

/// Starts a job array: one job per element, each the run request with the element's index in
/// `MISSION_ARRAY_INDEX` and its arguments after the mission's; all queued at once.
pub async fn submit_array(
    app: &AppState,
    who: Principal,
    mission_id: Uuid,
    req: RunJobArray,
) -> DomainResult<JobArray> {
    let (size, elements) = req.elements().map_err(|(field, problem)| DomainError::invalid(field, problem))?;
    if req.run.session.is_some() {
        return Err(DomainError::invalid("run.session", "a session is one job, not an array; start it on its own"));
    }
    let template = new_job(app, who, mission_id, req.run.clone()).await?;
    let array_id = Uuid::new_v4();
    let given = merged(json!({ "mission_id": template.mission_id, "size": size }), &req.run);
    audit::note(
        who,
        Change::new("job_array.submit", "job_array", array_id).in_project(template.project_id).with(given),
    );
    let elements = elements.map(|(index, arguments)| {
        let mut job = template.clone();
        job.job_id = Uuid::new_v4();
        job.array_id = Some(array_id);
        job.array_index = Some(index);
        job.command.extend(arguments);
        job
    });
    queue_elements(app, array_id, size, elements).await
}

/// Queues the `size` `elements` of the array `array_id` and answers how it stands. In chunks,
/// each one write: memory stays flat however large the array. The elements differ in nothing
/// any check looks at, so the first chunk is accepted whole or refused whole, and with it the
/// array; should a later chunk fail, the elements queued so far are stopped. The first chunk's
/// first element numbers the array; the later chunks are told its number.
pub(super) async fn queue_elements(
    app: &AppState,
    array_id: Uuid,
    size: u32,
    mut elements: impl Iterator<Item = Job>,
) -> DomainResult<JobArray> {
    let mut array_number = None;
    let mut queued = 0;
    while queued < size {
        let mut chunk: Vec<Job> = elements.by_ref().take(ARRAY_CHUNK).collect();
        if chunk.is_empty() {
            break;
        }
        for job in &mut chunk {
            job.array_number = array_number;
        }
        let n = chunk.len() as u32;
        if let Err(e) = app.scheduler.submit_many(chunk).await {
            if queued > 0 {
                // The submission's failure is the answer, whether or not this stop succeeds.
                let by = "the server, as the rest of the array failed to queue";
                let _ = stop_unfinished_elements(app, array_id, by).await;
            }
            return Err(e.into());
        }
        queued += n;
        if array_number.is_none() && queued < size {
            array_number = app.store.job_array(array_id, None).await?.map(|array| array.number);
        }
    }
    if size as usize > ARRAY_CHUNK {
        crate::services::heap::release_free_pages();
    }
    let array = app.store.job_array(array_id, None).await?;
    array.ok_or_else(|| DomainError::internal(format!("job array {array_id} was queued but is not stored")))
}

/// Stops every element of an array that has not ended (those that end meanwhile are left be).
async fn stop_unfinished_elements(app: &AppState, array_id: Uuid, by: &str) -> DomainResult<()> {
    for job_id in app.store.unfinished_array_jobs(array_id).await? {
        match app.scheduler.stop(job_id, by.to_owned()).await {
            // Ended meanwhile.
            Err(SchedulerError::Conflict(_)) => {}
            other => other?,
        }
    }
    Ok(())
}

/// A job array the caller started (any, for an admin): how far its elements got.
pub async fn array(app: &AppState, who: Principal, array_id: Uuid) -> DomainResult<JobArray> {
    let user = (!who.admin).then_some(who.user_id);
    app.store.job_array(array_id, user).await?.ok_or_else(|| DomainError::not_found("job array", array_id))
}

/// Stops every element of a job array of the caller's that has not ended; answers the array
/// after.
pub async fn stop_array(app: &AppState, who: Principal, array_id: Uuid) -> DomainResult<JobArray> {
    let found = array(app, who, array_id).await?;
    audit::note(who, Change::new("job_array.stop", "job_array", found.array_id));
    stop_unfinished_elements(app, found.array_id, &display_name(app, who).await?).await?;
    array(app, who, array_id).await
}

/// Who stops a job, as its history says: the caller's username.
async fn display_name(app: &AppState, who: Principal) -> DomainResult<String> {
    Ok(app.store.user_by_id(who.user_id).await?.map_or_else(|| who.user_id.to_string(), |u| u.username))
}

/// A new queued job of the mission from a run request, checked.
pub(super) async fn new_job(app: &AppState, who: Principal, mission_id: Uuid, req: RunJob) -> DomainResult<Job> {
    let mission = missions::writable(app, who, mission_id).await?;
    let station = stations::visible(app, who, req.station_id).await?;
    let type_id = mission.mission_type_id.ok_or_else(|| {
        DomainError::invalid("mission_type_id", "the mission has no mission type to say how to run it; set one")
    })?;
    let mission_type = catalogue::find(type_id)
        .ok_or_else(|| DomainError::invalid("mission_type_id", format!("unknown mission type {type_id}")))?;
    let command = mission_type.command_line(&mission.settings, &mission.args)?;
    let defaults = mission_type.resources();
    let cpu_count = req.cpu_count.unwrap_or(defaults.cpu_count);
    let memory_amount = req.memory_amount.unwrap_or(defaults.memory_amount);
    let gpu_count = req.gpu_count.unwrap_or(defaults.gpu_count);
    if cpu_count == 0 {
        return Err(DomainError::invalid("cpu_count", "a job needs at least 1 CPU"));
    }
    if memory_amount == 0 || memory_amount > i64::MAX as u64 / (1024 * 1024) {
        return Err(DomainError::invalid("memory_amount", "expected megabytes, at least 1"));
    }
    let labels = checked_labels(req.labels)?;
    let time_limit = req.time_limit.or(defaults.time_limit);
    if time_limit.is_some_and(|minutes| !(1..=MAX_TIME_LIMIT).contains(&minutes)) {
        return Err(DomainError::invalid("time_limit", format!("expected minutes, 1 to {MAX_TIME_LIMIT}")));
    }
    let log_cap = req.log_cap;
    let server_cap = app.config.job_log_cap;
    if log_cap.is_some_and(|cap| !(mission_api::MIN_LOG_CAP..=server_cap).contains(&cap)) {
        return Err(DomainError::invalid(
            "log_cap",
            format!("expected bytes, {} to {server_cap} (the server's --job-log-cap)", mission_api::MIN_LOG_CAP),
        ));
    }
    let [after_ok, after_any, after_not_ok] = checked_dependencies([req.after_ok, req.after_any, req.after_not_ok])?;
    let retry = checked_retry(req.retry)?.or_else(|| mission.retry.clone());
    let project_id = req.project_id.unwrap_or(mission.project_id);
    projects::ensure_may_run(app, who, project_id, "project_id").await?;
    let image = match (&req.image, &mission.image) {
        (Some(image), _) => Some(images::resolve(app, who, "image", image).await?),
        (None, Some(image)) => Some(images::resolve(app, who, "mission.image", image).await?),
        (None, None) => None,
    };
    let session = req.session.map(checked_session).transpose()?;
    let gang = checked_gang(req.nodes, req.launch, req.lz_id.is_some(), session.is_some())?;
    let signal = req.signal.as_deref().map(mission_api::WarningSignal::parse).transpose();
    let signal = signal.map_err(|e| DomainError::invalid("signal", e))?;
    // Fail now, not after the run, when the results could not be stored.
    app.bays.results(&app.store, &mission, Uuid::nil()).await?;
    Ok(Job {
        project_id,
        requested_lz_id: req.lz_id,
        cpu_count,
        memory_amount,
        gpu_count,
        time_limit,
        labels,
        log_cap,
        after_ok,
        after_any,
        after_not_ok,
        retry,
        image,
        session,
        gang,
        signal,
        requeue: req.requeue.unwrap_or(false),
        ..Job::queued(mission.mission_id, who.user_id, station.station_id, command, store::now())
    })
}

/// A run request's gang (`nodes` landing zones at once, started as `launch` says), checked;
/// none for a job of one landing zone.
fn checked_gang(
    nodes: Option<u32>,
    launch: Option<mission_api::Launch>,
    names_lz: bool,
    session: bool,
) -> DomainResult<Option<mission_api::JobGang>> {
    use mission_api::MAX_NODES;
    let nodes = nodes.unwrap_or(1);
    if !(1..=MAX_NODES).contains(&nodes) {
        return Err(DomainError::invalid("nodes", format!("expected landing zones, 1 to {MAX_NODES}")));
    }
    if nodes == 1 {
        return Ok(None);
    }
    if names_lz {
        return Err(DomainError::invalid(
            "lz_id",
            format!("a job on {nodes} landing zones cannot name one; leave lz_id out, or ask for one node"),
        ));
    }
    if session {
        return Err(DomainError::invalid("session", "a session runs on one landing zone; leave nodes out"));
    }
    Ok(Some(mission_api::JobGang { nodes, launch: launch.unwrap_or_default(), lz_ids: Vec::new() }))
}

/// A run request's session, checked.
fn checked_session(request: mission_api::SessionRequest) -> DomainResult<mission_api::JobSession> {
    use mission_api::sessions::MAX_IDLE_TIMEOUT;
    if request.idle_timeout.is_some_and(|minutes| !(1..=MAX_IDLE_TIMEOUT).contains(&minutes)) {
        return Err(DomainError::invalid("session.idle_timeout", format!("expected minutes, 1 to {MAX_IDLE_TIMEOUT}")));
    }
    Ok(mission_api::JobSession::requested(request))
}

/// Starts an ended job of the caller's again as a new job (its `rerun_of` naming this one): the
/// same mission, station, landing zone, command, resources (as the last attempt asked for them),
/// time limit, labels, log cap and retry policy. Of the jobs it waited for, one that was started
/// again is replaced by its newest rerun.
pub async fn rerun(app: &AppState, who: Principal, job_id: Uuid) -> DomainResult<Job> {
    let job = changeable(app, who, job_id).await?;
    if !job.status.is_final() {
        return Err(DomainError::Conflict(format!(
            "the job has not ended ({}); wait for it, or stop it first",
            job.status
        )));
    }
    missions::writable(app, who, job.mission_id).await?;
    stations::visible(app, who, job.station_id).await?;
    projects::ensure_may_run(app, who, job.project_id, "project_id").await?;
    start_again(app, who, job).await
}

/// Starts again, as [`rerun`] does each, every job of the mission that failed or was lost and
/// was not started again yet (the caller's; an admin's: everyone's), oldest first, up to
/// [`mission_api::MAX_RERUNS`]. Completed and stopped jobs are left alone. A job that waited
/// for another one rerun by the same call waits for that one's rerun.
pub async fn rerun_failed(app: &AppState, who: Principal, mission_id: Uuid) -> DomainResult<RerunJobs> {
    let mission = missions::writable(app, who, mission_id).await?;
    let user = (!who.admin).then_some(who.user_id);
    let failed = app.store.failed_jobs_not_rerun(mission.mission_id, user, mission_api::MAX_RERUNS).await?;
    let (mut jobs, mut usable, mut chargeable) = (Vec::with_capacity(failed.len()), HashSet::new(), HashSet::new());
    for job in failed {
        // One look at each station and project, not one per job.
        if usable.insert(job.station_id) {
            stations::visible(app, who, job.station_id).await?;
        }
        if chargeable.insert(job.project_id) {
            projects::ensure_may_run(app, who, job.project_id, "project_id").await?;
        }
        jobs.push(start_again(app, who, job).await?);
    }
    Ok(RerunJobs { jobs })
}

/// Submits a new job made from an ended one (see [`rerun`]), whose station the caller may use.
async fn start_again(app: &AppState, who: Principal, old: Job) -> DomainResult<Job> {
    let (mut after_ok, mut after_any, mut after_not_ok) =
        (old.after_ok.clone(), old.after_any.clone(), old.after_not_ok.clone());
    for dep in after_ok.iter_mut().chain(after_any.iter_mut()).chain(after_not_ok.iter_mut()) {
        *dep = app.store.newest_rerun(*dep).await?.unwrap_or(*dep);
    }
    let fresh = Job::queued(old.mission_id, old.user_id, old.station_id, Vec::new(), store::now());
    let job = Job {
        after_ok,
        after_any,
        after_not_ok,
        rerun_of: Some(old.job_id),
        history: vec![JobTransition {
            status: JobStatus::Queued,
            at: fresh.created_at,
            detail: Some(format!("a rerun of job {}", old.job_id)),
        }],
        // What it runs and asks for, and whom it is charged to, are the old job's; where it
        // stands is a new job's.
        project_id: old.project_id,
        requested_lz_id: old.requested_lz_id,
        cpu_count: old.cpu_count,
        memory_amount: old.memory_amount,
        gpu_count: old.gpu_count,
        time_limit: old.time_limit,
        command: old.command,
        labels: old.labels,
        log_cap: old.log_cap,
        retry: old.retry,
        image: old.image,
        array_id: old.array_id,
        array_index: old.array_index,
        session: old.session.map(|session| mission_api::JobSession { url: None, ready_at: None, ..session }),
        gang: old.gang.map(|gang| mission_api::JobGang { lz_ids: Vec::new(), ..gang }),
        signal: old.signal,
        requeue: old.requeue,
        ..fresh
    };
    let change = Change::new("job.rerun", "job", job.job_id).in_project(job.project_id);
    audit::note(who, change.with(json!({ "mission_id": job.mission_id, "rerun_of": old.job_id })));
    Ok(app.scheduler.submit(job).await?)
}

/// `fields` with the fields of `given` (a request, as JSON) added.
fn merged(fields: serde_json::Value, given: impl serde::Serialize) -> serde_json::Value {
    let mut fields = fields;
    if let (Some(into), Ok(serde_json::Value::Object(given))) = (fields.as_object_mut(), serde_json::to_value(given)) {
        into.extend(given);
    }
    fields
}

/// The jobs a new job waits for, each named once; whether they exist and are the caller's is
/// the scheduler's to check, since only it knows which have ended, and how, at that moment.
fn checked_dependencies(mut lists: [Vec<Uuid>; 3]) -> DomainResult<[Vec<Uuid>; 3]> {
    const FIELDS: [&str; 3] = ["after_ok", "after_any", "after_not_ok"];
    for list in &mut lists {
        list.sort_unstable();
        list.dedup();
    }
    for (later, field) in FIELDS.iter().enumerate().skip(1) {
        for earlier in 0..later {
            if let Some(both) = lists[later].iter().find(|id| lists[earlier].binary_search(id).is_ok()) {
                let other = FIELDS[earlier];
                return Err(DomainError::invalid(*field, format!("job {both} is in {other} too; name it once")));
            }
        }
    }
    if lists.iter().map(Vec::len).sum::<usize>() > mission_api::MAX_DEPENDENCIES {
        return Err(DomainError::invalid(
            "after_ok",
            format!("a job may wait for at most {} jobs", mission_api::MAX_DEPENDENCIES),
        ));
    }
    Ok(lists)
}

/// Changes a job of the caller's: its labels (the whole map is replaced). Answers the job as it
/// stands.
pub async fn update(app: &AppState, who: Principal, job_id: Uuid, req: UpdateJob) -> DomainResult<Job> {
    let job = changeable(app, who, job_id).await?;
    if let Some(labels) = req.labels {
        let labels = checked_labels(labels)?;
        let change = Change::new("job.update", "job", job.job_id).in_project(job.project_id);
        audit::note(who, change.with(json!({ "labels": labels })));
        app.store.set_job_labels(job.job_id, &labels).await?;
    }
    app.store.job(job.job_id).await?.ok_or_else(|| DomainError::not_found("job", job.job_id))
}

/// Stops a job of the caller's: a queued one leaves the queue, a placed one has its process
/// tree killed by its landing zone. Answers the job as it stands after (a placed job turns
/// `stopped` once its landing zone confirms); a conflict if it has ended already.
pub async fn stop(app: &AppState, who: Principal, job_id: Uuid) -> DomainResult<Job> {
    let job = changeable(app, who, job_id).await?;
    if job.status.is_final() {
        return Err(DomainError::Conflict(format!("the job has ended already ({})", job.status)));
    }
    let by = display_name(app, who).await?;
    audit::note(who, Change::new("job.stop", "job", job.job_id).in_project(job.project_id));
    if job.status.is_placed() {
        app.store.note_stop_ordered(job.job_id, store::now()).await?;
    }
    app.scheduler.stop(job.job_id, by).await?;
    app.store.job(job.job_id).await?.ok_or_else(|| DomainError::not_found("job", job.job_id))
}

/// Holds a queued job of the caller's, releases a held one, or requeues a placed one
/// ([`JobControl`]). Answers the job as it stands after (a requeued job turns `queued` once its
/// landing zone has stopped it); a conflict if it has ended, or cannot be so changed now.
pub async fn control(app: &AppState, who: Principal, job_id: Uuid, control: JobControl) -> DomainResult<Job> {
    let job = changeable(app, who, job_id).await?;
    if job.status.is_final() {
        return Err(DomainError::Conflict(format!("the job has ended already ({})", job.status)));
    }
    let by = display_name(app, who).await?;
    let action = match control {
        JobControl::Hold => "job.hold",
        JobControl::Release => "job.release",
        JobControl::Requeue => "job.requeue",
    };
    audit::note(who, Change::new(action, "job", job.job_id).in_project(job.project_id));
    app.scheduler.control(job.job_id, control, by).await?;
    app.store.job(job.job_id).await?.ok_or_else(|| DomainError::not_found("job", job.job_id))
}

/// The results of a job the caller may read: every new or changed file of its work dir (a
/// gang's node `n` > 0's under `node-{n}/`), then its two logs under `mission-logs/` (a gang's
/// node's under `mission-logs/node-{n}/`).
pub async fn results(app: &AppState, who: Principal, job_id: Uuid) -> DomainResult<Vec<FileListing>> {
    result_listing(app, &readable(app, who, job_id).await?).await
}

/// A job's results (see [`results`]), for a job the caller was found to read.
pub async fn result_listing(app: &AppState, job: &Job) -> DomainResult<Vec<FileListing>> {
    let mut listing: Vec<FileListing> = app.store.job_results(job).await?.into_iter().map(FileListing::from).collect();
    for stream in LogStream::of_job(job) {
        if let Some(record) = app.logs.record(job, stream).await.map_err(DomainError::internal)? {
            listing.push(FileListing::from(record));
        }
    }
    Ok(listing)
}
