//! The jobs API: start a job from a mission, list and read jobs, stop one, read or follow its
//! logs, list and download its results.
//!
//! A user sees their own jobs (admins all); anyone else's job is a 404. Running needs write access
//! to the mission and the right to use the station (open, owned, or a member).

use std::collections::HashSet;
use std::time::Duration;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use futures_util::StreamExt;
use mission_api::paths::MissionPath;
use mission_api::{FileListing, Job, JobPage, JobStatus, JobTransition, MAX_TIME_LIMIT, RunJob, UpdateJob};
use uuid::Uuid;

use super::async_stream;
use super::events::{Render, follow_log};
use super::extract::{ApiJson, QueryPairs, page_number, page_size, parse_id, push_label_filter};
use super::files::{parse_path, serve};
use super::stations::visible;
use serde_json::json;

use crate::AppState;
use crate::audit::{self, Change};
use crate::auth::Principal;
use crate::catalogue;
use crate::domain::{checked_labels, checked_retry, missions, projects};
use crate::error::{ApiError, ApiResult};
use crate::events::Watch;
use crate::job_logs::LogStream;
use mission_store::{self as store, JobFilter};

/// Loads a job the caller may read (without its history): their own, one charged to a project
/// they are a member of (any role), or any for an admin; a 404 otherwise.
pub(super) async fn readable_job(app: &AppState, who: Principal, raw_id: &str) -> ApiResult<Job> {
    let id = parse_id("job_id", raw_id)?;
    match app.store.job_row(id).await? {
        Some(job) if who.admin || job.user_id == who.user_id => Ok(job),
        Some(job) if projects::role(app, who, job.project_id).await?.is_some() => Ok(job),
        _ => Err(ApiError::not_found("job", id)),
    }
}

/// Loads a job the caller may change (stop, relabel, start again): their own, or any for an
/// admin; 404 if they may not read it, 403 if they only may.
pub(super) async fn own_job(app: &AppState, who: Principal, raw_id: &str) -> ApiResult<Job> {
    let job = readable_job(app, who, raw_id).await?;
    if who.admin || job.user_id == who.user_id {
        Ok(job)
    } else {
        Err(ApiError::forbidden(format!(
            "job {} belongs to another member of its project and is read-only to you",
            job.job_id
        )))
    }
}

/// Starts a job from a mission on a station, or on one landing zone of it.
#[utoipa::path(post, path = "/api/v1/missions/{id}/jobs", tag = "jobs", request_body = RunJob,
    params(("id" = uuid::Uuid, Path, description = "mission id")),
    responses((status = 201, body = Job), (status = 400, body = mission_api::Problem),
        (status = 404, body = mission_api::Problem)))]
pub async fn run(
    State(app): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<RunJob>,
) -> ApiResult<(StatusCode, Json<Job>)> {
    let given = serde_json::to_value(&req).unwrap_or_default();
    let job = new_job(&app, who, &id, req).await?;
    let change = Change::new("job.submit", "job", job.job_id).in_project(job.project_id);
    audit::note(who, change.with(merged(json!({ "mission_id": job.mission_id }), given)));
    let job = app.scheduler.submit(job).await?;
    Ok((StatusCode::CREATED, Json(job)))
}

/// Starts a job array: one job per element, each the run request with the element's index in
/// `MISSION_ARRAY_INDEX` and its arguments after the mission's; all queued at once.
#[utoipa::path(post, path = "/api/v1/missions/{id}/job-arrays", tag = "jobs", request_body = mission_api::RunJobArray,
    params(("id" = uuid::Uuid, Path, description = "mission id")),
    responses((status = 201, body = mission_api::JobArray), (status = 400, body = mission_api::Problem),
        (status = 404, body = mission_api::Problem)))]
pub async fn run_array(
    State(app): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<mission_api::RunJobArray>,
) -> ApiResult<(StatusCode, Json<mission_api::JobArray>)> {
    let (size, elements) = req.elements().map_err(|(field, problem)| ApiError::invalid_field(field, problem))?;
    let template = new_job(&app, who, &id, req.run.clone()).await?;
    let array_id = Uuid::new_v4();
    let given = merged(json!({ "mission_id": template.mission_id, "size": size }), &req.run);
    audit::note(
        who,
        Change::new("job_array.submit", "job_array", array_id).in_project(template.project_id).with(given),
    );
    let mut elements = elements.map(|(index, arguments)| {
        let mut job = template.clone();
        job.job_id = Uuid::new_v4();
        job.array_id = Some(array_id);
        job.array_index = Some(index);
        job.command.extend(arguments);
        job
    });
    // In chunks, each one write: memory stays flat however large the array. The elements differ
    // in nothing any check looks at, so the first chunk is accepted whole or refused whole, and
    // with it the array; should a later chunk fail, the elements queued so far are stopped.
    let mut queued = 0;
    while queued < size {
        let chunk: Vec<Job> = elements.by_ref().take(ARRAY_CHUNK).collect();
        let n = chunk.len() as u32;
        if let Err(e) = app.scheduler.submit_many(chunk).await {
            if queued > 0 {
                stop_queued_elements(&app, array_id, "the server, as the rest of the array failed to queue").await;
            }
            return Err(e);
        }
        queued += n;
    }
    if size as usize > ARRAY_CHUNK {
        crate::heap::release_free_pages();
    }
    let array = app.store.job_array(array_id, None).await?;
    let array =
        array.ok_or_else(|| ApiError::internal(format!("job array {array_id} was queued but is not stored")))?;
    Ok((StatusCode::CREATED, Json(array)))
}

/// How many elements of a job array one write queues.
const ARRAY_CHUNK: usize = 5_000;

/// Stops every element of an array that has not ended (those that end meanwhile are left be).
async fn stop_queued_elements(app: &AppState, array_id: Uuid, by: &str) {
    let Ok(jobs) = app.store.unfinished_array_jobs(array_id).await else { return };
    for job_id in jobs {
        let _ = app.scheduler.stop(job_id, by.to_owned()).await;
    }
}

/// How far a job array's elements got: how many are queued, running, completed, failed (or
/// lost) and stopped.
#[utoipa::path(get, path = "/api/v1/job-arrays/{id}", tag = "jobs", params(("id" = uuid::Uuid, Path, description = "array id")),
    responses((status = 200, body = mission_api::JobArray), (status = 404, body = mission_api::Problem)))]
pub async fn get_array(
    State(app): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
) -> ApiResult<Json<mission_api::JobArray>> {
    Ok(Json(own_array(&app, who, &id).await?))
}

/// Stops every element of a job array that has not ended; answers the array after.
#[utoipa::path(post, path = "/api/v1/job-arrays/{id}/stop", tag = "jobs", params(("id" = uuid::Uuid, Path, description = "array id")),
    responses((status = 200, body = mission_api::JobArray), (status = 404, body = mission_api::Problem)))]
pub async fn stop_array(
    State(app): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
) -> ApiResult<Json<mission_api::JobArray>> {
    let array = own_array(&app, who, &id).await?;
    audit::note(who, Change::new("job_array.stop", "job_array", array.array_id));
    let by = app.store.user_by_id(who.user_id).await?.map_or_else(|| who.user_id.to_string(), |u| u.username);
    for job_id in app.store.unfinished_array_jobs(array.array_id).await? {
        match app.scheduler.stop(job_id, by.clone()).await {
            // Ended meanwhile.
            Err(e) if e.status() == StatusCode::CONFLICT => {}
            other => other?,
        }
    }
    Ok(Json(own_array(&app, who, &id).await?))
}

/// A job array the caller may see, as a 404 otherwise.
async fn own_array(app: &AppState, who: Principal, raw_id: &str) -> ApiResult<mission_api::JobArray> {
    let id = parse_id("array_id", raw_id)?;
    let user = (!who.admin).then_some(who.user_id);
    app.store.job_array(id, user).await?.ok_or_else(|| ApiError::not_found("job array", id))
}

/// A new queued job of the mission `raw_id` from a run request, checked.
async fn new_job(app: &AppState, who: Principal, id: &str, req: RunJob) -> ApiResult<Job> {
    let mission = missions::writable(app, who, parse_id("mission_id", id)?).await?;
    let station = visible(app, who, &req.station_id.to_string()).await?;
    let type_id = mission.mission_type_id.ok_or_else(|| {
        ApiError::invalid_field("mission_type_id", "the mission has no mission type to say how to run it; set one")
    })?;
    let mission_type = catalogue::find(type_id)
        .ok_or_else(|| ApiError::invalid_field("mission_type_id", format!("unknown mission type {type_id}")))?;
    let command = mission_type.command_line(&mission.settings, &mission.args)?;
    let defaults = mission_type.resources();
    let cpu_count = req.cpu_count.unwrap_or(defaults.cpu_count);
    let memory_amount = req.memory_amount.unwrap_or(defaults.memory_amount);
    let gpu_count = req.gpu_count.unwrap_or(defaults.gpu_count);
    if cpu_count == 0 {
        return Err(ApiError::invalid_field("cpu_count", "a job needs at least 1 CPU"));
    }
    if memory_amount == 0 || memory_amount > i64::MAX as u64 / (1024 * 1024) {
        return Err(ApiError::invalid_field("memory_amount", "expected megabytes, at least 1"));
    }
    let labels = checked_labels(req.labels)?;
    let time_limit = req.time_limit.or(defaults.time_limit);
    if time_limit.is_some_and(|minutes| !(1..=MAX_TIME_LIMIT).contains(&minutes)) {
        return Err(ApiError::invalid_field("time_limit", format!("expected minutes, 1 to {MAX_TIME_LIMIT}")));
    }
    let log_cap = req.log_cap;
    let server_cap = app.config.job_log_cap;
    if log_cap.is_some_and(|cap| !(mission_api::MIN_LOG_CAP..=server_cap).contains(&cap)) {
        return Err(ApiError::invalid_field(
            "log_cap",
            format!("expected bytes, {} to {server_cap} (the server's --job-log-cap)", mission_api::MIN_LOG_CAP),
        ));
    }
    let (after_ok, after_any) = checked_dependencies(req.after_ok, req.after_any)?;
    let retry = checked_retry(req.retry)?.or_else(|| mission.retry.clone());
    let project_id = req.project_id.unwrap_or(mission.project_id);
    projects::ensure_may_run(app, who, project_id, "project_id").await?;
    // Fail now, not after the run, when the results could not be stored.
    app.bays.results(&app.store, &mission, Uuid::nil()).await?;
    let job = Job {
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
        retry,
        ..Job::queued(mission.mission_id, who.user_id, station.station_id, command, store::now())
    };
    Ok(job)
}

/// Starts an ended job again as a new job (its `rerun_of` naming this one): the same mission,
/// station, landing zone, command, resources (as the last attempt asked for them), time limit,
/// labels, log cap and retry policy. Of the jobs it waited for, one that was started again is
/// replaced by its newest rerun.
#[utoipa::path(post, path = "/api/v1/jobs/{id}/rerun", tag = "jobs", params(("id" = uuid::Uuid, Path, description = "job id")),
    responses((status = 201, body = Job), (status = 404, body = mission_api::Problem),
        (status = 409, body = mission_api::Problem, description = "the job has not ended")))]
pub async fn rerun(
    State(app): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
) -> ApiResult<(StatusCode, Json<Job>)> {
    let job = own_job(&app, who, &id).await?;
    if !job.status.is_final() {
        return Err(ApiError::conflict(format!(
            "the job has not ended ({}); wait for it, or stop it first",
            job.status
        )));
    }
    missions::writable(&app, who, job.mission_id).await?;
    visible(&app, who, &job.station_id.to_string()).await?;
    projects::ensure_may_run(&app, who, job.project_id, "project_id").await?;
    Ok((StatusCode::CREATED, Json(start_again(&app, who, job).await?)))
}

/// Starts again, as [`rerun`] does each, every job of the mission that failed or was lost and
/// was not started again yet (the caller's; an admin's: everyone's), oldest first, up to
/// [`mission_api::MAX_RERUNS`]. Completed and stopped jobs are left alone. A job that waited
/// for another one rerun by the same call waits for that one's rerun.
#[utoipa::path(post, path = "/api/v1/missions/{id}/jobs/rerun-failed", tag = "jobs",
    params(("id" = uuid::Uuid, Path, description = "mission id")),
    responses((status = 201, body = mission_api::RerunJobs), (status = 404, body = mission_api::Problem)))]
pub async fn rerun_failed(
    State(app): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
) -> ApiResult<(StatusCode, Json<mission_api::RerunJobs>)> {
    let mission = missions::writable(&app, who, parse_id("mission_id", &id)?).await?;
    let user = (!who.admin).then_some(who.user_id);
    let failed = app.store.failed_jobs_not_rerun(mission.mission_id, user, mission_api::MAX_RERUNS).await?;
    let (mut jobs, mut usable, mut chargeable) = (Vec::with_capacity(failed.len()), HashSet::new(), HashSet::new());
    for job in failed {
        // One look at each station and project, not one per job.
        if usable.insert(job.station_id) {
            visible(&app, who, &job.station_id.to_string()).await?;
        }
        if chargeable.insert(job.project_id) {
            projects::ensure_may_run(&app, who, job.project_id, "project_id").await?;
        }
        jobs.push(start_again(&app, who, job).await?);
    }
    Ok((StatusCode::CREATED, Json(mission_api::RerunJobs { jobs })))
}

/// Submits a new job made from an ended one (see [`rerun`]), whose station the caller may use.
async fn start_again(app: &AppState, who: Principal, old: Job) -> ApiResult<Job> {
    let (mut after_ok, mut after_any) = (old.after_ok.clone(), old.after_any.clone());
    for dep in after_ok.iter_mut().chain(after_any.iter_mut()) {
        *dep = app.store.newest_rerun(*dep).await?.unwrap_or(*dep);
    }
    let fresh = Job::queued(old.mission_id, old.user_id, old.station_id, Vec::new(), store::now());
    let job = Job {
        after_ok,
        after_any,
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
        array_id: old.array_id,
        array_index: old.array_index,
        ..fresh
    };
    let change = Change::new("job.rerun", "job", job.job_id).in_project(job.project_id);
    audit::note(who, change.with(json!({ "mission_id": job.mission_id, "rerun_of": old.job_id })));
    app.scheduler.submit(job).await
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
fn checked_dependencies(mut after_ok: Vec<Uuid>, mut after_any: Vec<Uuid>) -> ApiResult<(Vec<Uuid>, Vec<Uuid>)> {
    for list in [&mut after_ok, &mut after_any] {
        list.sort_unstable();
        list.dedup();
    }
    if let Some(both) = after_ok.iter().find(|id| after_any.binary_search(id).is_ok()) {
        return Err(ApiError::invalid_field("after_any", format!("job {both} is in after_ok too; name it once")));
    }
    if after_ok.len() + after_any.len() > mission_api::MAX_DEPENDENCIES {
        return Err(ApiError::invalid_field(
            "after_ok",
            format!("a job may wait for at most {} jobs", mission_api::MAX_DEPENDENCIES),
        ));
    }
    Ok((after_ok, after_any))
}

/// Lists the caller's jobs (everyone's, for admins; with `project_ids`, every job charged to
/// those projects of the caller's), newest first. Filters repeat: `mission_ids`, `station_ids`,
/// `project_ids`, `array_ids`, `statuses` (any of the values given), `label` (`key=value`,
/// every one given); paging by `page` (from 1) and `items` (1 to 200).
#[utoipa::path(get, path = "/api/v1/jobs", tag = "jobs",
    params(("mission_ids" = Option<Vec<uuid::Uuid>>, Query, description = "only these missions' jobs"),
        ("station_ids" = Option<Vec<uuid::Uuid>>, Query, description = "only jobs on these stations"),
        ("project_ids" = Option<Vec<uuid::Uuid>>, Query, description = "only jobs charged to these projects of yours, whoever started them"),
        ("array_ids" = Option<Vec<uuid::Uuid>>, Query, description = "only elements of these job arrays"),
        ("statuses" = Option<Vec<mission_api::JobStatus>>, Query, description = "only jobs in these states"),
        ("label" = Option<Vec<String>>, Query, description = "only jobs with this label, as key=value (repeat: all of them)"),
        ("page" = Option<u32>, Query, minimum = 1, maximum = 1000000, description = "page number, 1 to 1,000,000 (default 1)"),
        ("items" = Option<u32>, Query, minimum = 1, maximum = 200, description = "jobs per page, 1 to 200 (default 25)")),
    responses((status = 200, body = JobPage), (status = 400, body = mission_api::Problem)))]
pub async fn list(
    State(app): State<AppState>,
    who: Principal,
    QueryPairs(query): QueryPairs,
) -> ApiResult<Json<JobPage>> {
    let mut filter = JobFilter { user: (!who.admin).then_some(who.user_id), page: 1, items: 25, ..Default::default() };
    for (key, value) in &query {
        match key.as_str() {
            "mission_ids" => filter.mission_ids.push(parse_id(key, value)?),
            "station_ids" => filter.station_ids.push(parse_id(key, value)?),
            "project_ids" => filter.project_ids.push(parse_id(key, value)?),
            "array_ids" => filter.array_ids.push(parse_id(key, value)?),
            "statuses" => filter.statuses.push(value.parse().map_err(|e: String| ApiError::invalid_field(key, e))?),
            "label" => push_label_filter(&mut filter.labels, value)?,
            "page" => filter.page = page_number(value)?,
            "items" => filter.items = page_size(value)?,
            other => {
                return Err(ApiError::invalid(format!(
                    "unknown query parameter {other:?}; filters are mission_ids, station_ids, project_ids, array_ids, \
                     statuses, label, page, items"
                )));
            }
        }
    }
    if filter.mission_ids.len() + filter.station_ids.len() + filter.project_ids.len() > 500 {
        return Err(ApiError::invalid("at most 500 filter values per request"));
    }
    if !filter.project_ids.is_empty() {
        // A member reads every job charged to their projects, whoever started it.
        projects::ensure_member_of_each(&app, who, &filter.project_ids, "project_ids").await?;
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
    Ok(Json(JobPage { jobs, page: filter.page, items: filter.items, total }))
}

/// What the caller's ended jobs used, summed: count, wall and CPU hours, CPU-hours held, mean CPU
/// efficiency, and how many asked for more than twice the memory they used at their peak.
/// Filters: `mission_ids` (repeat for several), `since` (an RFC 3339 time the jobs ended at or
/// after).
#[utoipa::path(get, path = "/api/v1/jobs/usage", tag = "jobs",
    params(("mission_ids" = Option<Vec<uuid::Uuid>>, Query, description = "only these missions' jobs"),
        ("since" = Option<String>, Query, description = "only jobs that ended at or after this time (RFC 3339)")),
    responses((status = 200, body = mission_api::UsageSummary), (status = 400, body = mission_api::Problem)))]
pub async fn usage(
    State(app): State<AppState>,
    who: Principal,
    QueryPairs(query): QueryPairs,
) -> ApiResult<Json<mission_api::UsageSummary>> {
    let (mut missions, mut since) = (Vec::new(), None);
    for (key, value) in &query {
        match key.as_str() {
            "mission_ids" => missions.push(parse_id(key, value)?),
            "since" => since = Some(super::extract::rfc3339(key, value)?),
            other => {
                return Err(ApiError::invalid(format!(
                    "unknown query parameter {other:?}; filters are mission_ids, since"
                )));
            }
        }
    }
    if missions.len() > 500 {
        return Err(ApiError::invalid("at most 500 filter values per request"));
    }
    Ok(Json(app.store.usage_summary(who.user_id, &missions, since).await?))
}

/// The caller's jobs (everyone's, for admins) as they change: a `text/event-stream` whose `job`
/// events each carry a job as `GET /jobs/{id}` answers it without its history, sent when the job
/// is created, moves or ends. Filters as in `GET /jobs`: `mission_ids`, `station_ids`. It starts
/// now: a watcher that reconnects reads the list first (or follows `GET /events`, which resumes).
#[utoipa::path(get, path = "/api/v1/jobs/events", tag = "jobs",
    params(("mission_ids" = Option<Vec<uuid::Uuid>>, Query, description = "only these missions' jobs"),
        ("station_ids" = Option<Vec<uuid::Uuid>>, Query, description = "only jobs on these stations")),
    responses((status = 200, description = "job events (server-sent events)", content_type = "text/event-stream"),
        (status = 400, body = mission_api::Problem)))]
pub async fn events(State(app): State<AppState>, who: Principal, QueryPairs(query): QueryPairs) -> ApiResult<Response> {
    let (mut missions, mut stations) = (Vec::new(), Vec::new());
    for (key, value) in &query {
        match key.as_str() {
            "mission_ids" => missions.push(parse_id(key, value)?),
            "station_ids" => stations.push(parse_id(key, value)?),
            other => {
                return Err(ApiError::invalid(format!(
                    "unknown query parameter {other:?}; filters are mission_ids, station_ids"
                )));
            }
        }
    }
    if missions.len() + stations.len() > 500 {
        return Err(ApiError::invalid("at most 500 filter values per request"));
    }
    let watch = Watch {
        user_id: (!who.admin).then_some(who.user_id),
        mission_ids: missions,
        kinds: vec!["job".into()],
        ..Default::default()
    };
    let render = Render::Jobs { station_ids: stations };
    let events = async_stream(move |tx| follow_log(app, watch, None, tx, render));
    Ok(event_stream(events))
}

/// A response streaming server-sent `events`, uncached.
pub(super) fn event_stream(events: impl futures_util::Stream<Item = Bytes> + Send + 'static) -> Response {
    let mut response = Response::new(Body::from_stream(events.map(Ok::<_, std::convert::Infallible>)));
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// One job, with its history.
#[utoipa::path(get, path = "/api/v1/jobs/{id}", tag = "jobs", params(("id" = uuid::Uuid, Path, description = "job id")),
    responses((status = 200, body = Job), (status = 404, body = mission_api::Problem)))]
pub async fn get(State(app): State<AppState>, who: Principal, Path(id): Path<String>) -> ApiResult<Json<Job>> {
    let mut job = readable_job(&app, who, &id).await?;
    job.history = app.store.job_history(job.job_id).await?;
    app.scheduler.place_in_line(&app.store, std::slice::from_mut(&mut job)).await?;
    Ok(Json(job))
}

/// Changes a job: its labels (the whole map is replaced). Answers the job as it stands.
#[utoipa::path(patch, path = "/api/v1/jobs/{id}", tag = "jobs", request_body = UpdateJob,
    params(("id" = uuid::Uuid, Path, description = "job id")),
    responses((status = 200, body = Job), (status = 400, body = mission_api::Problem),
        (status = 404, body = mission_api::Problem)))]
pub async fn update(
    State(app): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<UpdateJob>,
) -> ApiResult<Json<Job>> {
    let job = own_job(&app, who, &id).await?;
    if let Some(labels) = req.labels {
        let labels = checked_labels(labels)?;
        let change = Change::new("job.update", "job", job.job_id).in_project(job.project_id);
        audit::note(who, change.with(json!({ "labels": labels })));
        app.store.set_job_labels(job.job_id, &labels).await?;
    }
    Ok(Json(app.store.job(job.job_id).await?.ok_or_else(|| ApiError::not_found("job", job.job_id))?))
}

/// Stops a job: a queued one leaves the queue, a placed one has its process tree killed by its
/// landing zone. Answers the job as it stands after the request (a placed job turns `stopped`
/// once its LZ confirms).
#[utoipa::path(post, path = "/api/v1/jobs/{id}/stop", tag = "jobs", params(("id" = uuid::Uuid, Path, description = "job id")),
    responses((status = 200, body = Job), (status = 404, body = mission_api::Problem),
        (status = 409, body = mission_api::Problem, description = "the job has ended already")))]
pub async fn stop(State(app): State<AppState>, who: Principal, Path(id): Path<String>) -> ApiResult<Json<Job>> {
    let job = own_job(&app, who, &id).await?;
    if job.status.is_final() {
        return Err(ApiError::conflict(format!("the job has ended already ({})", job.status)));
    }
    let by = app.store.user_by_id(who.user_id).await?.map_or_else(|| who.user_id.to_string(), |u| u.username);
    audit::note(who, Change::new("job.stop", "job", job.job_id).in_project(job.project_id));
    app.scheduler.stop(job.job_id, by).await?;
    Ok(Json(app.store.job(job.job_id).await?.ok_or_else(|| ApiError::not_found("job", job.job_id))?))
}

/// How long a log follower or event stream waits in silence before sending a keep-alive comment.
pub(super) const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// A job's `stdout` (default) or `stderr`, as text; with `follow=true` a `text/event-stream`
/// whose `data` events carry chunks as JSON strings and whose last event, `end`, carries the
/// job's final status.
#[utoipa::path(get, path = "/api/v1/jobs/{id}/logs", tag = "jobs",
    params(("id" = uuid::Uuid, Path, description = "job id"),
        ("stream" = Option<String>, Query, description = "stdout (default) or stderr"),
        ("follow" = Option<bool>, Query, description = "stream new output until the job ends (server-sent events)")),
    responses((status = 200, description = "the log", content_type = "text/plain"),
        (status = 404, body = mission_api::Problem)))]
pub async fn logs(
    State(app): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
    QueryPairs(query): QueryPairs,
) -> ApiResult<Response> {
    let job = readable_job(&app, who, &id).await?;
    let mut stream = LogStream::Stdout;
    let mut follow = false;
    for (key, value) in &query {
        match key.as_str() {
            "stream" => {
                stream = LogStream::parse(value).ok_or_else(|| {
                    ApiError::invalid_field("stream", format!("expected stdout or stderr, got {value:?}"))
                })?
            }
            "follow" => {
                follow = value
                    .parse()
                    .map_err(|_| ApiError::invalid_field("follow", format!("expected true or false, got {value:?}")))?
            }
            other => return Err(ApiError::invalid(format!("unknown query parameter {other:?}; use stream, follow"))),
        }
    }
    if !follow {
        let bytes = app.logs.read(job.mission_id, job.job_id, stream, 0).await.map_err(ApiError::internal)?;
        let mut response = Response::new(Body::from(bytes));
        response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
        return Ok(response);
    }
    let mut progress = app.logs.subscribe(job.job_id);
    let mut closing = app.closing.subscribe();
    let app = app.clone();
    let events = async_stream(move |tx| async move {
        let mut sent = 0u64; // bytes of the stream read so far
        let mut pending = Vec::new(); // bytes of a UTF-8 character cut by a chunk boundary
        loop {
            // Ended? Read once more after seeing it, so nothing written before the end is missed.
            let ended = progress.borrow_and_update().done
                || app.store.job_row(job.job_id).await.ok().flatten().is_none_or(|j| j.status.is_final());
            let fresh = app.logs.read(job.mission_id, job.job_id, stream, sent).await.unwrap_or_default();
            sent += fresh.len() as u64;
            for chunk in fresh.chunks(64 * 1024) {
                pending.extend_from_slice(chunk);
                let valid = match std::str::from_utf8(&pending) {
                    Ok(s) => s.len(),
                    Err(e) if e.error_len().is_none() => e.valid_up_to(),
                    Err(_) => pending.len(), // not UTF-8 at all: send it lossily
                };
                let text = String::from_utf8_lossy(&pending[..valid]).into_owned();
                pending.drain(..valid);
                let data = serde_json::to_string(&text).expect("strings serialise");
                if tx.send(Bytes::from(format!("data: {data}\n\n"))).await.is_err() {
                    return;
                }
            }
            if ended {
                let status = app.store.job_row(job.job_id).await.ok().flatten().map(|j| j.status);
                let data = serde_json::json!({ "status": status });
                let _ = tx.send(Bytes::from(format!("event: end\ndata: {data}\n\n"))).await;
                return;
            }
            tokio::select! {
                _ = progress.changed() => {} // an error means the job ended: the next turn sees it
                () = tokio::time::sleep(KEEP_ALIVE) => {
                    if tx.send(Bytes::from_static(b": keep-alive\n\n")).await.is_err() { return; }
                }
                _ = closing.changed() => return,
            }
        }
    });
    Ok(event_stream(events))
}

/// A result path of a job's logs (`mission-logs/stdout.log`), if `path` names one.
fn log_of(path: &MissionPath) -> Option<LogStream> {
    LogStream::ALL.into_iter().find(|stream| stream.result_path() == *path)
}

/// Lists a job's results: every new or changed file of its work dir, and its two logs under
/// `mission-logs/`.
#[utoipa::path(get, path = "/api/v1/jobs/{id}/results", tag = "jobs", params(("id" = uuid::Uuid, Path, description = "job id")),
    responses((status = 200, body = [FileListing]), (status = 404, body = mission_api::Problem)))]
pub async fn results(
    State(app): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
) -> ApiResult<Json<Vec<FileListing>>> {
    let job = readable_job(&app, who, &id).await?;
    Ok(Json(result_listing(&app, &job).await?))
}

/// A job's results: its result files, then its logs.
pub(super) async fn result_listing(app: &AppState, job: &Job) -> ApiResult<Vec<FileListing>> {
    let mut listing: Vec<FileListing> = app.store.job_results(job).await?.into_iter().map(FileListing::from).collect();
    for stream in LogStream::ALL {
        if let Some(record) = app.logs.record(job, stream).await.map_err(ApiError::internal)? {
            listing.push(FileListing::from(record));
        }
    }
    Ok(listing)
}

/// Downloads one result file (honours a single `Range`).
#[utoipa::path(get, path = "/api/v1/jobs/{id}/results/{path}", tag = "jobs",
    params(("id" = uuid::Uuid, Path, description = "job id"), ("path" = String, Path, description = "result path")),
    responses((status = 200, description = "the file", content_type = "application/octet-stream"),
        (status = 404, body = mission_api::Problem)))]
pub async fn result(
    State(app): State<AppState>,
    who: Principal,
    Path((id, raw_path)): Path<(String, String)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let job = readable_job(&app, who, &id).await?;
    serve_result(&app, &job, &parse_path(&raw_path)?, &headers).await
}

/// Answers one result of `job` (a file, or one of its logs) for a caller who may read it.
pub(super) async fn serve_result(
    app: &AppState,
    job: &Job,
    path: &MissionPath,
    headers: &HeaderMap,
) -> ApiResult<Response> {
    let not_found = || ApiError::not_found("result", format!("{path} of job {}", job.job_id));
    if let Some(stream) = log_of(path) {
        let record = app.logs.record(job, stream).await.map_err(ApiError::internal)?.ok_or_else(not_found)?;
        let name = MissionPath::parse(stream.file_name()).expect("a valid file name");
        return match app.logs.location(job.mission_id, job.job_id) {
            Some(place) => serve(&place, &name, &record, headers).await,
            // Kept in the database: the whole log (a `Range` is not honoured).
            None => {
                let bytes = app.logs.read(job.mission_id, job.job_id, stream, 0).await.map_err(ApiError::internal)?;
                let mut response = Response::new(Body::from(bytes));
                response
                    .headers_mut()
                    .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
                Ok(response)
            }
        };
    }
    let record = app.store.job_result(job, path.as_str()).await?.ok_or_else(not_found)?;
    let mission = app.store.mission(job.mission_id).await?.ok_or_else(not_found)?;
    let place = app.bays.results(&app.store, &mission, job.job_id).await?;
    serve(&place, path, &record, headers).await
}
