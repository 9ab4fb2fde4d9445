//! The landing-zone side of the API (`/api/v1/lz/…`), authenticated by an agent's token instead of
//! a user's. The protocol is described in [`mission_api::lz`].
//!
//! An agent may only touch the jobs placed on its own LZ: their input files, logs and results.

use std::time::Duration;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use futures_util::StreamExt;
use mission_api::lz::{Demand, Hello, Order, Report};
use mission_api::{DEFAULT_CARGO_BAY_ID, FileListing, JOB_LOGS_FOLDER, Job, LandingZone, RegisteredLandingZone};
use serde::Deserialize;

use super::async_stream;
use super::extract::{ApiJson, QueryPairs, parse_id};
use super::files::{parse_path, serve_mission_file};
use crate::AppState;
use crate::domain::bay_storage::storage_error;
use crate::http::auth::bearer_token;
use crate::http::error::{ApiError, ApiResult};
use crate::services::blobs::WriteError;
use crate::services::job_logs::{LogError, LogStream};
use mission_store::{self as store, FileRecord, LzIdentity, StoreError};

/// The landing zone whose agent sent the request, from `Authorization: Bearer <LZ token>`.
pub struct Agent(pub LzIdentity);

impl FromRequestParts<AppState> for Agent {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &AppState) -> Result<Self, Self::Rejection> {
        match app.agent_tokens.identify(bearer_token(parts)?).await? {
            Some(lz) => Ok(Agent(lz)),
            None => Err(ApiError::unauthorized("unknown landing-zone token (was the LZ removed or re-registered?)")),
        }
    }
}

/// A job placed on the agent's LZ, as a 404 otherwise.
async fn placed_job(app: &AppState, agent: &LzIdentity, raw_id: &str) -> ApiResult<Job> {
    let id = parse_id("job_id", raw_id)?;
    match app.store.job_row(id).await? {
        Some(job) if node_of(&job, agent).is_some() && job.status.is_placed() => Ok(job),
        _ => Err(ApiError::not_found("job on this landing zone", id)),
    }
}

/// The rank of the agent's LZ among those `job` is placed on: 0 for the one LZ of a job of
/// one, a gang's node's rank; `None` where the job is not placed there.
pub(crate) fn node_of(job: &Job, agent: &LzIdentity) -> Option<u32> {
    match &job.gang {
        Some(gang) => gang.lz_ids.iter().position(|id| *id == agent.lz_id).map(|rank| rank as u32),
        None => (job.lz_id == Some(agent.lz_id)).then_some(0),
    }
}

/// Connects an agent: the answer is a stream of JSON lines, a `Welcome` first, then orders, with a
/// ping whenever nothing else was sent for a third of the lease.
pub async fn connect(
    State(app): State<AppState>,
    Agent(lz): Agent,
    ApiJson(hello): ApiJson<Hello>,
) -> ApiResult<Response> {
    let lz_id = lz.lz_id;
    let mut session = app.scheduler.connect(lz, hello).await?;
    let welcome = serde_json::to_string(&session.welcome).expect("serialises");
    let ping_every = Duration::from_secs((session.welcome.lease_seconds / 3).max(1));
    let mut closing = app.closing.subscribe();
    let scheduler = app.scheduler.clone();
    let session_id = session.session_id;
    let lines = async_stream(move |tx| async move {
        if tx.send(Bytes::from(welcome + "\n")).await.is_ok() {
            loop {
                let order = tokio::select! {
                    order = session.orders.recv() => match order {
                        Some(order) => order,
                        None => break,
                    },
                    () = tokio::time::sleep(ping_every) => Order::Ping,
                    _ = closing.changed() => break,
                    () = tx.closed() => break,
                };
                let line = serde_json::to_string(&order).expect("serialises") + "\n";
                if tx.send(Bytes::from(line)).await.is_err() {
                    break;
                }
            }
        }
        scheduler.disconnected(lz_id, session_id);
    });
    let mut response = Response::new(Body::from_stream(lines.map(Ok::<_, std::convert::Infallible>)));
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/x-ndjson"));
    Ok(response)
}

/// Renews the agent's lease; a 409 means it must connect again.
pub async fn heartbeat(State(app): State<AppState>, Agent(lz): Agent) -> ApiResult<StatusCode> {
    app.scheduler.heartbeat(lz.lz_id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Records the moves of the agent's jobs. As a job ends, the logs that passed their cap are
/// sealed (before the end is recorded, so a follower that sees it has read the whole log), and
/// its logs are copied to its mission's destination cargo bay beside its other results (in the
/// background: the next job waits for this answer).
pub async fn reports(
    State(app): State<AppState>,
    Agent(lz): Agent,
    ApiJson(reports): ApiJson<Vec<Report>, false>,
) -> ApiResult<StatusCode> {
    let ended: Vec<_> = reports.iter().filter(|r| r.status.is_final()).map(|r| r.job_id).collect();
    let ending = app.store.ending_jobs(&ended, lz.lz_id).await?;
    for job in ending.iter().filter(|job| job.log_truncated) {
        app.logs.seal(job.mission_id, job.job_id, job.nodes).await.map_err(ApiError::internal)?;
    }
    // A task's log is kept before its end is, so that a task read as ended has it.
    for report in &reports {
        if let Some(log) = &report.task_log
            && ending.iter().any(|job| job.job_id == report.job_id)
        {
            app.store.save_task_log(report.job_id, report.attempt.unwrap_or(1), log).await?;
        }
    }
    app.scheduler.reports(lz, reports).await?;
    for job in ending {
        if let Some(bay) = job.destination_storage_id.filter(|bay| *bay != DEFAULT_CARGO_BAY_ID) {
            app.tasks.spawn(archive_logs(app.clone(), job.mission_id, job.job_id, job.nodes, bay));
        }
    }
    Ok(StatusCode::NO_CONTENT)
}

/// Copies an ended job's logs to `mission-logs/` among its results in its mission's destination
/// cargo bay `bay` (not the default storage, where the server's own copy is the one listed and
/// served). A failure is logged: the logs stay available through the API.
async fn archive_logs(app: AppState, mission_id: uuid::Uuid, job_id: uuid::Uuid, nodes: u32, bay: uuid::Uuid) {
    let copied = async {
        let Some(mission) = app.store.mission(mission_id).await? else { return Ok(()) };
        let place = app.bays.results(&app.store, &mission, job_id).await?;
        app.logs.copy_to(mission_id, job_id, nodes, &place).await.map_err(|e| match e {
            WriteError::Storage(e) => storage_error(&place, e).into(),
            e => ApiError::internal(e),
        })
    }
    .await;
    if let Err(e) = copied {
        tracing::warn!(%job_id, %bay, "copying the job's logs into its destination cargo bay failed: {}", e.problem().detail);
    }
}

/// Where a log chunk starts in its stream.
#[derive(Debug, Deserialize)]
pub struct LogOffset {
    offset: u64,
}

/// Appends output of a job to its log, under the job's log cap; answers how much of the output
/// arrived (`size`, kept or not), so an agent knows, and whether it passed the cap.
pub async fn append_log(
    State(app): State<AppState>,
    Agent(lz): Agent,
    Path((id, stream)): Path<(String, String)>,
    Query(LogOffset { offset }): Query<LogOffset>,
    body: Bytes,
) -> ApiResult<Json<serde_json::Value>> {
    let job = placed_job(&app, &lz, &id).await?;
    let stream = LogStream::parse(&stream)
        .ok_or_else(|| ApiError::invalid_field("stream", format!("expected stdout or stderr, got {stream:?}")))?
        .of_node(node_of(&job, &lz).unwrap_or(0));
    let cap = job.log_cap.map_or(app.config.job_log_cap, |cap| cap.min(app.config.job_log_cap));
    let appended =
        app.logs.append(job.mission_id, job.job_id, stream, offset, &body, cap).await.map_err(|e| match e {
            LogError::Gap { .. } => ApiError::invalid_field("offset", e.to_string()),
            LogError::Store(StoreError::Conflict(detail)) => ApiError::conflict(detail),
            e => ApiError::internal(e),
        })?;
    if appended.truncated && !job.log_truncated {
        app.store.mark_log_truncated(job.job_id).await?;
    }
    app.scheduler.log_written(job.job_id);
    Ok(Json(serde_json::json!({ "size": appended.received, "truncated": appended.truncated })))
}

/// Downloads an input file of a job placed on the agent's LZ.
pub async fn input_file(
    State(app): State<AppState>,
    Agent(lz): Agent,
    Path((id, raw_path)): Path<(String, String)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let job = placed_job(&app, &lz, &id).await?;
    let path = parse_path(&raw_path)?;
    // A requeued attempt's inputs are first what the earlier ones left among its results.
    if job.requeue && job.attempt > 1 && app.store.job_result(&job, &path.to_string()).await?.is_some() {
        return super::jobs::serve_result(&app, &job, &path, &headers).await;
    }
    let mission =
        app.store.mission(job.mission_id).await?.ok_or_else(|| ApiError::not_found("mission", job.mission_id))?;
    serve_mission_file(&app, &mission, &path, &headers).await
}

/// The files of input `n` of a TES task placed on the agent's LZ that the service fetches for
/// it, each with what names its content.
pub async fn task_input_listing(
    State(app): State<AppState>,
    Agent(lz): Agent,
    Path((id, n)): Path<(String, usize)>,
) -> ApiResult<Json<mission_api::tes::InputListing>> {
    let job = placed_job(&app, &lz, &id).await?;
    Ok(Json(crate::domain::tes::input_listing(&app, &job, n).await?))
}

/// The content of file input `n` of a TES task placed on the agent's LZ.
pub async fn task_input_content(
    State(app): State<AppState>,
    Agent(lz): Agent,
    Path((id, n)): Path<(String, usize)>,
) -> ApiResult<Response> {
    task_input(app, lz, id, n, String::new()).await
}

/// A file of directory input `n` of a TES task placed on the agent's LZ, by its path under it.
pub async fn task_input_file(
    State(app): State<AppState>,
    Agent(lz): Agent,
    Path((id, n, path)): Path<(String, usize, String)>,
) -> ApiResult<Response> {
    task_input(app, lz, id, n, path).await
}

/// A file of input `n` of a TES task placed on `lz` (`path` under a directory input, empty for a
/// file input), streamed from where it is stored.
async fn task_input(app: AppState, lz: LzIdentity, id: String, n: usize, path: String) -> ApiResult<Response> {
    let job = placed_job(&app, &lz, &id).await?;
    let result = crate::domain::tes::input_file(&app, &job, n, &path).await?;
    let size = result.meta.size;
    let body = axum::body::Body::from_stream(result.into_stream());
    Ok(axum::response::IntoResponse::into_response(([(axum::http::header::CONTENT_LENGTH, size.to_string())], body)))
}

/// Stores file output `n` of a TES task placed on the agent's LZ; answers where it went and its
/// size.
pub async fn task_output_content(
    State(app): State<AppState>,
    Agent(lz): Agent,
    Path((id, n)): Path<(String, usize)>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> ApiResult<Json<mission_api::tes::StoredOutput>> {
    task_output(app, lz, id, n, String::new(), headers, body).await
}

/// Stores a file of directory output `n` of a TES task placed on the agent's LZ, by its path
/// under the output's URL; answers where it went and its size.
pub async fn task_output_file(
    State(app): State<AppState>,
    Agent(lz): Agent,
    Path((id, n, path)): Path<(String, usize, String)>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> ApiResult<Json<mission_api::tes::StoredOutput>> {
    task_output(app, lz, id, n, path, headers, body).await
}

/// Stores a file of output `n` of a TES task placed on `lz` (`path` under a directory output,
/// empty for a file output).
async fn task_output(
    app: AppState,
    lz: LzIdentity,
    id: String,
    n: usize,
    path: String,
    headers: HeaderMap,
    body: axum::body::Body,
) -> ApiResult<Json<mission_api::tes::StoredOutput>> {
    let job = placed_job(&app, &lz, &id).await?;
    let announced = headers.get(axum::http::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let (url, size) =
        crate::domain::tes::store_output(&app, &job, n, &path, announced, body.into_data_stream()).await?;
    Ok(Json(mission_api::tes::StoredOutput { url, size }))
}

/// The port of a session running on the agent's LZ answers: its owner may open it, at the URL
/// its job now shows. Again of a ready session, it changes nothing; for a job that is no
/// running session, it is a 409.
pub async fn session_ready(
    State(app): State<AppState>,
    Agent(lz): Agent,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    let job = placed_job(&app, &lz, &id).await?;
    // A restarted agent says it again of a session it takes back.
    if job.status == mission_api::JobStatus::Running && job.session.as_ref().is_some_and(|s| s.ready_at.is_some()) {
        return Ok(StatusCode::NO_CONTENT);
    }
    let url = crate::http::sessions::session_url(&app, job.job_id);
    if app.store.mark_session_ready(job.job_id, lz.lz_id, &url, mission_store::now()).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::conflict(format!("job {} is no running session waiting for its port", job.job_id)))
    }
}

/// A session running on the agent's LZ nears its time limit: its owner gets a `session.ending`
/// event (and its webhooks), once.
pub async fn session_ending(
    State(app): State<AppState>,
    Agent(lz): Agent,
    Path(id): Path<String>,
    ApiJson(ending): ApiJson<mission_api::sessions::SessionEnding>,
) -> ApiResult<StatusCode> {
    let job = placed_job(&app, &lz, &id).await?;
    let minutes = ending.minutes_left;
    let data = serde_json::json!({
        "minutes_left": minutes,
        "time_limit": job.time_limit,
        "detail": format!("the session reaches its time limit in {minutes} minute(s); save your work"),
    });
    if app.store.warn_session_ending(job.job_id, lz.lz_id, &data, mission_store::now()).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::conflict(format!("job {} is no running session, or was warned already", job.job_id)))
    }
}

/// Downloads the image archive of a job placed on the agent's LZ (`?digest=`: of one of its
/// task's executors).
pub async fn job_image(
    State(app): State<AppState>,
    Agent(lz): Agent,
    Path(id): Path<String>,
    QueryPairs(query): QueryPairs,
) -> ApiResult<Response> {
    let job = placed_job(&app, &lz, &id).await?;
    // A TES task's executors may each run in an image of their own, named by its digest.
    let digest = query.into_iter().find(|(key, _)| key == "digest").map(|(_, digest)| digest);
    let image = match (digest, &job.task) {
        (Some(digest), Some(task)) => task.images.iter().find(|image| image.digest == digest).cloned(),
        _ => job.image,
    };
    let image = image.ok_or_else(|| ApiError::not_found("image of job", job.job_id))?;
    let key = crate::domain::images::archive_key(image.image_id);
    let read = app.bays.default_store().read(&key, None, None).await.map_err(|e| match e {
        object_store::Error::NotFound { .. } => ApiError::not_found("image", image.image_id),
        e => ApiError::internal(e),
    })?;
    let size = read.range.end - read.range.start;
    let mut response = Response::new(Body::from_stream(read.into_stream()));
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/x-tar"));
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(size));
    Ok(response)
}

/// Uploads one result file of a job placed on the agent's LZ (into the mission's destination):
/// a gang's node `n` > 0's under `node-{n}/`, so that its nodes' files of one name are all kept.
pub async fn upload_result(
    State(app): State<AppState>,
    Agent(lz): Agent,
    Path((id, raw_path)): Path<(String, String)>,
    body: Body,
) -> ApiResult<(StatusCode, Json<FileListing>)> {
    let job = placed_job(&app, &lz, &id).await?;
    let path = parse_path(&raw_path)?;
    if path.segments().next() == Some(JOB_LOGS_FOLDER) {
        return Err(ApiError::invalid_field("path", format!("{JOB_LOGS_FOLDER}/ holds the job's logs")));
    }
    let path = match node_of(&job, &lz) {
        Some(node) if node > 0 => parse_path(&format!("node-{node}/{path}"))?,
        _ => path,
    };
    let mission =
        app.store.mission(job.mission_id).await?.ok_or_else(|| ApiError::not_found("mission", job.mission_id))?;
    let place = app.bays.results(&app.store, &mission, job.job_id).await?;
    let max = app.config.file_limits.max_file_bytes;
    let key = place.new_key(&path).map_err(|e| ApiError::invalid_field("path", e.to_string()))?;
    let written = place.files.write(&key, body.into_data_stream(), max).await.map_err(|e| match e {
        WriteError::TooLarge(_) => ApiError::too_large(format!("the file is larger than max_file_size = {max} bytes")),
        WriteError::Body(detail) => ApiError::invalid(format!("the upload did not complete: {detail}")),
        WriteError::Storage(e) => storage_error(&place, e).into(),
    })?;
    let record = FileRecord {
        mission_id: job.mission_id,
        path: path.to_string(),
        user_id: job.user_id,
        size: written.size,
        sha256: written.sha256,
        e_tag: written.e_tag,
        modified_at: store::now(),
    };
    app.store.insert_job_result(job.job_id, &record).await?;
    Ok((StatusCode::CREATED, Json(FileListing::from(record))))
}

/// The agent's LZ, when it is a gateway into a batch system (registered with a cluster account).
fn gateway(agent: &LzIdentity) -> ApiResult<&LzIdentity> {
    match agent.cluster_account {
        Some(_) => Ok(agent),
        None => Err(ApiError::forbidden(
            "only a gateway into a batch system (a landing zone registered with a cluster account) runs pilots",
        )),
    }
}

/// What the gateway's station has queued that its pilots could run.
pub async fn demand(State(app): State<AppState>, Agent(lz): Agent) -> ApiResult<Json<Demand>> {
    Ok(Json(app.scheduler.demand(gateway(&lz)?.lz_id).await?))
}

/// Registers a pilot of the gateway: an ephemeral landing zone of its station, with a token of
/// its own, which the pilot's agent connects with from inside its batch job.
pub async fn register_pilot(
    State(app): State<AppState>,
    Agent(lz): Agent,
) -> ApiResult<(StatusCode, Json<RegisteredLandingZone>)> {
    let gateway = gateway(&lz)?;
    let lz_id = uuid::Uuid::new_v4();
    let landing_zone = LandingZone {
        lz_id,
        station_id: gateway.station_id,
        name: format!("{}.pilot-{}", gateway.name, &lz_id.simple().to_string()[..8]),
        online: false,
        resources: None,
        in_use: Default::default(),
        last_seen_at: None,
        cluster_account: None,
        pilot_of: Some(gateway.lz_id),
        images: false,
        created_at: store::now(),
    };
    Ok((StatusCode::CREATED, Json(crate::domain::stations::register(&app, landing_zone).await?)))
}

/// Removes a pilot of the gateway whose batch job ended; the jobs it had not finished go back in
/// the queue.
pub async fn remove_pilot(
    State(app): State<AppState>,
    Agent(lz): Agent,
    Path(raw_id): Path<String>,
) -> ApiResult<StatusCode> {
    let gateway = gateway(&lz)?;
    let pilot_id = parse_id("lz_id", &raw_id)?;
    let lzs = app.store.landing_zones(Some(gateway.station_id), app.config.lz_lease, store::now()).await?;
    if !lzs.iter().any(|p| p.lz_id == pilot_id && p.pilot_of == Some(gateway.lz_id)) {
        return Err(ApiError::not_found("pilot of this gateway", pilot_id));
    }
    app.scheduler.remove_pilot(gateway.station_id, pilot_id).await?;
    Ok(StatusCode::NO_CONTENT)
}
