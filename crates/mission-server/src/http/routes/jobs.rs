//! The jobs API: start a job from a mission, list and read jobs, stop one, read or follow its
//! logs, list and download its results, over [`crate::domain::jobs`] (who may do what, and the
//! rules of a run request). A job the caller may not read is a 404.

use std::time::Duration;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use futures_util::StreamExt;
use mission_api::paths::MissionPath;
use mission_api::{FileListing, Job, JobPage, RunJob, UpdateJob};

use super::async_stream;
use super::events::{Render, follow_log};
use super::extract::{ApiJson, QueryPairs, job_id, page_number, page_size, parse_id, push_label_filter};
use super::files::{parse_path, serve, serve_bytes};

use crate::AppState;
use crate::domain::Principal;
use crate::domain::{MAX_FILTER_VALUES, jobs};
use crate::http::error::{ApiError, ApiResult};
use crate::services::events::Watch;
use crate::services::job_logs::LogStream;
use crate::services::scheduler::JobControl;
use mission_store::JobFilter;

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
    Ok((StatusCode::CREATED, Json(jobs::submit(&app, who, parse_id("mission_id", &id)?, req).await?)))
}

/// Queues a batch job (what `sbatch` sends): a script run in the directory it was submitted
/// from, as its user's account on a landing zone sharing that directory, its output in files
/// there. It needs no mission: it goes in its user's `batch jobs` mission of its project.
#[utoipa::path(post, path = "/api/v1/jobs", tag = "jobs", request_body = mission_api::SubmitBatchJob,
    responses((status = 201, body = Job), (status = 400, body = mission_api::Problem),
        (status = 404, body = mission_api::Problem)))]
pub async fn submit_batch(
    State(app): State<AppState>,
    who: Principal,
    ApiJson(req): ApiJson<mission_api::SubmitBatchJob>,
) -> ApiResult<(StatusCode, Json<Job>)> {
    Ok((StatusCode::CREATED, Json(crate::domain::batch::submit(&app, who, req).await?)))
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
    Ok((StatusCode::CREATED, Json(jobs::submit_array(&app, who, parse_id("mission_id", &id)?, req).await?)))
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
    Ok(Json(jobs::array(&app, who, parse_id("array_id", &id)?).await?))
}

/// Stops every element of a job array that has not ended; answers the array after.
#[utoipa::path(post, path = "/api/v1/job-arrays/{id}/stop", tag = "jobs", params(("id" = uuid::Uuid, Path, description = "array id")),
    responses((status = 200, body = mission_api::JobArray), (status = 404, body = mission_api::Problem)))]
pub async fn stop_array(
    State(app): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
) -> ApiResult<Json<mission_api::JobArray>> {
    Ok(Json(jobs::stop_array(&app, who, parse_id("array_id", &id)?).await?))
}

/// Starts an ended job again as a new job (its `rerun_of` naming this one): the same mission,
/// station, landing zone, command, resources (as the last attempt asked for them), time limit,
/// labels, log cap and retry policy. Of the jobs it waited for, one that was started again is
/// replaced by its newest rerun.
#[utoipa::path(post, path = "/api/v1/jobs/{id}/rerun", tag = "jobs", params(("id" = String, Path, description = "the job's id (a UUID) or its number", pattern = r"^([0-9]{1,19}|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$")),
    responses((status = 201, body = Job), (status = 404, body = mission_api::Problem),
        (status = 409, body = mission_api::Problem, description = "the job has not ended")))]
pub async fn rerun(
    State(app): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
) -> ApiResult<(StatusCode, Json<Job>)> {
    Ok((StatusCode::CREATED, Json(jobs::rerun(&app, who, job_id(&app, who, &id).await?).await?)))
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
    Ok((StatusCode::CREATED, Json(jobs::rerun_failed(&app, who, parse_id("mission_id", &id)?).await?)))
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
    Ok(Json(jobs::list(&app, who, job_filter(&query)?).await?))
}

/// The filter and page a `GET /jobs` query asks for.
fn job_filter(query: &[(String, String)]) -> ApiResult<JobFilter> {
    let mut filter = JobFilter { page: 1, items: 25, ..Default::default() };
    for (key, value) in query {
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
    Ok(filter)
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
    if missions.len() > MAX_FILTER_VALUES {
        return Err(ApiError::invalid(format!("at most {MAX_FILTER_VALUES} filter values per request")));
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
    responses((status = 200, description = "job events (server-sent events)", content_type = "text/event-stream", body = mission_api::events::ServerSentEvent),
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
    if missions.len() + stations.len() > MAX_FILTER_VALUES {
        return Err(ApiError::invalid(format!("at most {MAX_FILTER_VALUES} filter values per request")));
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
#[utoipa::path(get, path = "/api/v1/jobs/{id}", tag = "jobs", params(("id" = String, Path, description = "the job's id (a UUID) or its number", pattern = r"^([0-9]{1,19}|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$")),
    responses((status = 200, body = Job), (status = 404, body = mission_api::Problem)))]
pub async fn get(State(app): State<AppState>, who: Principal, Path(id): Path<String>) -> ApiResult<Json<Job>> {
    Ok(Json(jobs::get(&app, who, job_id(&app, who, &id).await?).await?))
}

/// Changes a job: its labels (the whole map is replaced). Answers the job as it stands.
#[utoipa::path(patch, path = "/api/v1/jobs/{id}", tag = "jobs", request_body = UpdateJob,
    params(("id" = String, Path, description = "the job's id (a UUID) or its number", pattern = r"^([0-9]{1,19}|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$")),
    responses((status = 200, body = Job), (status = 400, body = mission_api::Problem),
        (status = 404, body = mission_api::Problem)))]
pub async fn update(
    State(app): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<UpdateJob>,
) -> ApiResult<Json<Job>> {
    Ok(Json(jobs::update(&app, who, job_id(&app, who, &id).await?, req).await?))
}

/// Stops a job: a queued one leaves the queue, a placed one has its process tree killed by its
/// landing zone. Answers the job as it stands after the request (a placed job turns `stopped`
/// once its LZ confirms).
#[utoipa::path(post, path = "/api/v1/jobs/{id}/stop", tag = "jobs", params(("id" = String, Path, description = "the job's id (a UUID) or its number", pattern = r"^([0-9]{1,19}|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$")),
    responses((status = 200, body = Job), (status = 404, body = mission_api::Problem),
        (status = 409, body = mission_api::Problem, description = "the job has ended already")))]
pub async fn stop(State(app): State<AppState>, who: Principal, Path(id): Path<String>) -> ApiResult<Json<Job>> {
    Ok(Json(jobs::stop(&app, who, job_id(&app, who, &id).await?).await?))
}

/// Holds a queued job: it keeps its place in line but does not start until released (Slurm's
/// `scontrol hold`); its pending reason says `held`. Holding a held job changes nothing.
#[utoipa::path(post, path = "/api/v1/jobs/{id}/hold", tag = "jobs", params(("id" = String, Path, description = "the job's id (a UUID) or its number", pattern = r"^([0-9]{1,19}|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$")),
    responses((status = 200, body = Job), (status = 404, body = mission_api::Problem),
        (status = 409, body = mission_api::Problem, description = "the job is not queued")))]
pub async fn hold(State(app): State<AppState>, who: Principal, Path(id): Path<String>) -> ApiResult<Json<Job>> {
    Ok(Json(jobs::control(&app, who, job_id(&app, who, &id).await?, JobControl::Hold).await?))
}

/// Releases a held job: it starts once what else it waits for has ended (Slurm's `scontrol
/// release`). Releasing a job that is not held changes nothing.
#[utoipa::path(post, path = "/api/v1/jobs/{id}/release", tag = "jobs", params(("id" = String, Path, description = "the job's id (a UUID) or its number", pattern = r"^([0-9]{1,19}|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$")),
    responses((status = 200, body = Job), (status = 404, body = mission_api::Problem),
        (status = 409, body = mission_api::Problem, description = "the job is not queued")))]
pub async fn release(State(app): State<AppState>, who: Principal, Path(id): Path<String>) -> ApiResult<Json<Job>> {
    Ok(Json(jobs::control(&app, who, job_id(&app, who, &id).await?, JobControl::Release).await?))
}

/// Puts a running job back in line at its old place (Slurm's `scontrol requeue`): its landing
/// zone stops it (`SIGTERM`, then the reclaim grace) and it runs again when placed, its output
/// going on after the earlier run's. A queued job stays where it is. Answers the job as it stands
/// (`queued` once its landing zone has stopped it).
#[utoipa::path(post, path = "/api/v1/jobs/{id}/requeue", tag = "jobs", params(("id" = String, Path, description = "the job's id (a UUID) or its number", pattern = r"^([0-9]{1,19}|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$")),
    responses((status = 200, body = Job), (status = 404, body = mission_api::Problem),
        (status = 409, body = mission_api::Problem, description = "the job has ended, or is being stopped")))]
pub async fn requeue(State(app): State<AppState>, who: Principal, Path(id): Path<String>) -> ApiResult<Json<Job>> {
    Ok(Json(jobs::control(&app, who, job_id(&app, who, &id).await?, JobControl::Requeue).await?))
}

/// How long a log follower or event stream waits in silence before sending a keep-alive comment.
pub(super) const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// A job's `stdout` (default) or `stderr`, as text, of its node `node` where it runs on several
/// (a gang: 0, its first, by default); with `follow=true` a `text/event-stream` whose `data`
/// events carry chunks as JSON strings and whose last event, `end`, carries the job's final
/// status.
#[utoipa::path(get, path = "/api/v1/jobs/{id}/logs", tag = "jobs",
    params(("id" = String, Path, description = "the job's id (a UUID) or its number", pattern = r"^([0-9]{1,19}|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$"),
        ("stream" = Option<String>, Query, description = "stdout (default) or stderr"),
        ("node" = Option<u32>, Query, description = "of a job on several landing zones (a gang): the node, by rank (0, the first, by default)"),
        ("follow" = Option<bool>, Query, description = "stream new output until the job ends (server-sent events)")),
    responses((status = 200, description = "the log as text; with follow=true, server-sent events",
            content((String = "text/plain"), (mission_api::events::ServerSentEvent = "text/event-stream"))),
        (status = 404, body = mission_api::Problem)))]
pub async fn logs(
    State(app): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
    QueryPairs(query): QueryPairs,
) -> ApiResult<Response> {
    let job = jobs::readable(&app, who, job_id(&app, who, &id).await?).await?;
    let mut stream = LogStream::STDOUT;
    let (mut node, mut follow) = (0, false);
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
            "node" => {
                node = value
                    .parse()
                    .map_err(|_| ApiError::invalid_field("node", format!("expected a rank, got {value:?}")))?
            }
            other => {
                return Err(ApiError::invalid(format!("unknown query parameter {other:?}; use stream, node, follow")));
            }
        }
    }
    if let Some(problem) = job.node_problem(node) {
        return Err(ApiError::invalid_field("node", problem));
    }
    let stream = stream.of_node(node);
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

/// A result path of a job's logs (`mission-logs/stdout.log`, a gang's `mission-logs/node-1/…`),
/// if `path` names one.
fn log_of(job: &Job, path: &MissionPath) -> Option<LogStream> {
    LogStream::of_job(job).find(|stream| stream.result_path() == *path)
}

/// Lists a job's results: every new or changed file of its work dir, and its two logs under
/// `mission-logs/`.
#[utoipa::path(get, path = "/api/v1/jobs/{id}/results", tag = "jobs", params(("id" = String, Path, description = "the job's id (a UUID) or its number", pattern = r"^([0-9]{1,19}|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$")),
    responses((status = 200, body = [FileListing]), (status = 404, body = mission_api::Problem)))]
pub async fn results(
    State(app): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
) -> ApiResult<Json<Vec<FileListing>>> {
    Ok(Json(jobs::results(&app, who, job_id(&app, who, &id).await?).await?))
}

/// Downloads one result file (honours a single `Range`).
#[utoipa::path(get, path = "/api/v1/jobs/{id}/results/{path}", tag = "jobs",
    params(("id" = String, Path, description = "the job's id (a UUID) or its number", pattern = r"^([0-9]{1,19}|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$"), ("path" = String, Path, description = "result path")),
    responses((status = 200, description = "the file", content_type = "application/octet-stream"),
        (status = 404, body = mission_api::Problem)))]
pub async fn result(
    State(app): State<AppState>,
    who: Principal,
    Path((id, raw_path)): Path<(String, String)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let job = jobs::readable(&app, who, job_id(&app, who, &id).await?).await?;
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
    if let Some(stream) = log_of(job, path) {
        let record = app.logs.record(job, stream).await.map_err(ApiError::internal)?.ok_or_else(not_found)?;
        let name = MissionPath::parse(&stream.file_name()).expect("a valid file name");
        return match app.logs.location(job.mission_id, job.job_id) {
            Some(place) => serve(&place, &name, &record, headers).await,
            // Kept in the database: read whole, then the range asked of it.
            None => {
                let bytes = app.logs.read(job.mission_id, job.job_id, stream, 0).await.map_err(ApiError::internal)?;
                Ok(serve_bytes(bytes, &record.sha256, headers))
            }
        };
    }
    let record = app.store.job_result(job, path.as_str()).await?.ok_or_else(not_found)?;
    let mission = app.store.mission(job.mission_id).await?.ok_or_else(not_found)?;
    let place = app.bays.results(&app.store, &mission, job.job_id).await?;
    serve(&place, path, &record, headers).await
}
