//! Mission files: upload (streamed `PUT`), download (with `Range`), delete, list, over
//! [`crate::domain::files`]; and start-up recovery ([`recover`]), which settles the intents an
//! interrupted upload or delete left.

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use mission_api::FileListing;
use mission_api::paths::MissionPath;
use object_store::GetRange;
use uuid::Uuid;

use super::extract::parse_id;
use crate::AppState;
use crate::domain::Principal;
use crate::domain::bay_storage::{CargoBays, storage_error};
use crate::domain::{files, missions};
use crate::http::error::{ApiError, ApiResult};
use crate::services::blobs::Location;
use mission_store::{self as store, FileRecord, Intent, IntentKind};

/// A file path from the URL, as a 400 naming `path` when it breaks the path rule.
pub(crate) fn parse_path(raw: &str) -> ApiResult<MissionPath> {
    MissionPath::parse(raw).map_err(|e| ApiError::invalid_field("path", format!("{raw:?}: {e}")))
}

/// The body size a request announces (its `Content-Length`), if it does.
pub(super) fn announced(headers: &HeaderMap) -> Option<u64> {
    headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
}

/// Lists a mission's files, by path.
#[utoipa::path(get, path = "/api/v1/missions/{id}/files", tag = "files",
    params(("id" = uuid::Uuid, Path, description = "mission id")),
    responses((status = 200, body = [FileListing]), (status = 404, body = mission_api::Problem)))]
pub async fn list(
    State(app): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
) -> ApiResult<Json<Vec<FileListing>>> {
    Ok(Json(files::list(&app, who, parse_id("mission_id", &id)?).await?))
}

/// Uploads a file: the raw request body becomes the file at `path` (created or replaced).
#[utoipa::path(put, path = "/api/v1/missions/{id}/files/{path}", tag = "files",
    params(("id" = uuid::Uuid, Path, description = "mission id"), ("path" = String, Path, description = "file path relative to the mission root")),
    request_body(content = Vec<u8>, content_type = "application/octet-stream"),
    responses((status = 201, body = FileListing, description = "created"), (status = 200, body = FileListing, description = "replaced"),
        (status = 400, body = mission_api::Problem), (status = 413, body = mission_api::Problem),
        (status = 409, body = mission_api::Problem, description = "a file of the mission is a folder of this path, or this path a folder of one")))]
pub async fn upload(
    State(app): State<AppState>,
    who: Principal,
    Path((id, raw_path)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let (mission_id, path) = (parse_id("mission_id", &id)?, parse_path(&raw_path)?);
    let uploaded = files::upload(&app, who, mission_id, &path, announced(&headers), body.into_data_stream()).await?;
    let status = if uploaded.replaced { StatusCode::OK } else { StatusCode::CREATED };
    Ok((status, Json(uploaded.file)).into_response())
}

/// Parses a single `bytes=` range; `Ok(None)` means "send the whole file".
fn parse_range(value: &HeaderValue, size: u64) -> Result<Option<std::ops::Range<u64>>, ()> {
    let Some(spec) = value.to_str().ok().and_then(|v| v.trim().strip_prefix("bytes=")) else { return Ok(None) };
    if spec.contains(',') {
        return Ok(None); // several ranges: answer with the whole file, which RFC 9110 allows
    }
    let (start, end) = spec.split_once('-').ok_or(())?;
    let range = match (start.trim(), end.trim()) {
        ("", "") => return Err(()),
        ("", n) => {
            let n: u64 = n.parse().map_err(|_| ())?;
            if n == 0 || size == 0 {
                return Err(());
            }
            size.saturating_sub(n)..size
        }
        (a, "") => {
            let a: u64 = a.parse().map_err(|_| ())?;
            if a >= size {
                return Err(());
            }
            a..size
        }
        (a, b) => {
            let (a, b): (u64, u64) = (a.parse().map_err(|_| ())?, b.parse().map_err(|_| ())?);
            if a > b || a >= size {
                return Err(());
            }
            a..b.min(size - 1) + 1
        }
    };
    Ok(Some(range))
}

/// Downloads a file; honours a single `Range: bytes=…`.
#[utoipa::path(get, path = "/api/v1/missions/{id}/files/{path}", tag = "files",
    params(("id" = uuid::Uuid, Path, description = "mission id"), ("path" = String, Path, description = "file path relative to the mission root")),
    responses((status = 200, description = "the file", content_type = "application/octet-stream"),
        (status = 206, description = "the requested range"), (status = 404, body = mission_api::Problem),
        (status = 416, description = "the range lies outside the file")))]
pub async fn download(
    State(app): State<AppState>,
    who: Principal,
    Path((id, raw_path)): Path<(String, String)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let mission = missions::readable(&app, who, parse_id("mission_id", &id)?).await?;
    serve_mission_file(&app, &mission, &parse_path(&raw_path)?, &headers).await
}

/// Answers a mission's file from the mission's source storage (404 when it has none at `path`).
pub(super) async fn serve_mission_file(
    app: &AppState,
    mission: &mission_api::Mission,
    path: &MissionPath,
    headers: &HeaderMap,
) -> ApiResult<Response> {
    let record = app
        .store
        .mission_file(mission.mission_id, path.as_str())
        .await?
        .ok_or_else(|| ApiError::not_found("file", format!("{path} in mission {}", mission.mission_id)))?;
    let place = app.bays.source(&app.store, mission).await?;
    serve(&place, path, &record, headers).await
}

/// Answers a stored file (of a mission or a job's results) with its content, honouring a single
/// `Range`; the object must still be the version `record` describes.
pub(super) async fn serve(
    place: &Location,
    path: &MissionPath,
    record: &FileRecord,
    headers: &HeaderMap,
) -> ApiResult<Response> {
    let range = match requested_range(headers, record.size) {
        Ok(range) => range,
        Err(refusal) => return Ok(*refusal),
    };
    let asked = range.clone().map(GetRange::Bounded);
    let result = match place.files.read(&place.key(path), asked, record.e_tag.clone()).await {
        Ok(result) => result,
        Err(object_store::Error::NotFound { .. }) => {
            return Err(ApiError::not_found("file content", format!("{path} (gone from the mission's storage)")));
        }
        Err(object_store::Error::Precondition { .. }) => {
            return Err(ApiError::conflict(format!(
                "{path} was changed in the mission's storage outside this service; upload it again"
            )));
        }
        Err(e) => return Err(storage_error(place, e).into()),
    };
    let served = result.range.clone();
    Ok(file_answer(Body::from_stream(result.into_stream()), served, record.size, &record.sha256, range.is_some()))
}

/// Answers the bytes of a file held in memory (a job's log kept in the database), honouring a
/// single `Range` as [`serve`] does.
pub(super) fn serve_bytes(bytes: Vec<u8>, sha256: &str, headers: &HeaderMap) -> Response {
    let size = bytes.len() as u64;
    let range = match requested_range(headers, size) {
        Ok(range) => range,
        Err(refusal) => return *refusal,
    };
    let served = range.clone().unwrap_or(0..size);
    let body = axum::body::Bytes::from(bytes).slice(served.start as usize..served.end as usize);
    file_answer(Body::from(body), served, size, sha256, range.is_some())
}

/// The single range a request's `Range` asks of a file of `size` bytes (`None`: all of it), or
/// the 416 answer where it lies outside.
fn requested_range(headers: &HeaderMap, size: u64) -> Result<Option<std::ops::Range<u64>>, Box<Response>> {
    headers.get(header::RANGE).map(|v| parse_range(v, size)).transpose().map(Option::flatten).map_err(|()| {
        let mut response = ApiError::range_not_satisfiable(format!("the file has {size} bytes")).into_response();
        response
            .headers_mut()
            .insert(header::CONTENT_RANGE, HeaderValue::from_str(&format!("bytes */{size}")).expect("ascii"));
        Box::new(response)
    })
}

/// The answer carrying bytes `served` of a file of `size` bytes: 206 with its `Content-Range`
/// where a range was asked.
fn file_answer(body: Body, served: std::ops::Range<u64>, size: u64, sha256: &str, ranged: bool) -> Response {
    let mut response = Response::new(body);
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    if let Ok(tag) = HeaderValue::from_str(&format!("\"{sha256}\"")) {
        h.insert(header::ETAG, tag);
    }
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(served.end - served.start));
    if ranged {
        *response.status_mut() = StatusCode::PARTIAL_CONTENT;
        let value = format!("bytes {}-{}/{size}", served.start, served.end.saturating_sub(1));
        response.headers_mut().insert(header::CONTENT_RANGE, HeaderValue::from_str(&value).expect("ascii"));
    }
    response
}

/// Deletes a file.
#[utoipa::path(delete, path = "/api/v1/missions/{id}/files/{path}", tag = "files",
    params(("id" = uuid::Uuid, Path, description = "mission id"), ("path" = String, Path, description = "file path relative to the mission root")),
    responses((status = 204), (status = 404, body = mission_api::Problem)))]
pub async fn delete(
    State(app): State<AppState>,
    who: Principal,
    Path((id, raw_path)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    files::delete(&app, who, parse_id("mission_id", &id)?, &parse_path(&raw_path)?).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Settles what a stopped server left: unfinished uploads and deletes (from their intents),
/// staging files of interrupted writes (all of them in the default storage, those of unfinished
/// uploads in local cargo bays), and the folders of deleted missions. Runs at start-up,
/// before the server accepts requests. An intent whose cargo bay does not answer is kept for the
/// next start.
pub async fn recover(store: &store::Store, bays: &CargoBays) -> Result<(), RecoveryError> {
    let default = bays.default_store();
    let staging = default.remove_staging_files().await?;
    let intents = store.pending_intents().await?;
    let mut settled = 0;
    for intent in &intents {
        match settle_intent(store, bays, intent).await {
            Ok(()) => settled += 1,
            Err(e) => tracing::warn!(mission = %intent.mission_id, path = %intent.path, error = %e.problem().detail,
                "cannot settle an unfinished file change now; will retry on the next start"),
        }
    }
    let mut orphans = 0;
    for folder in default.mission_folders().await? {
        if let Ok(id) = Uuid::parse_str(&folder)
            && !store.mission_exists(id).await?
        {
            default.delete_mission(id).await?;
            orphans += 1;
        }
    }
    if staging + settled + orphans > 0 {
        tracing::info!(staging, intents = settled, orphan_missions = orphans, "recovered file storage");
    }
    Ok(())
}

/// How long a replica may go unseen before the leader settles the file changes it began.
const REPLICA_STOPPED_AFTER: std::time::Duration = std::time::Duration::from_secs(30);

/// How often the leader looks for them.
const SETTLE_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// While this replica leads, settles the unfinished file changes of replicas that stopped (a
/// kill -9 mid-upload), each under its file's lock, every few seconds until `shutdown`. (At
/// start-up a replica cannot settle anything: others may be mid-change.)
pub async fn settle_stopped_replicas(app: AppState, shutdown: tokio_util::sync::CancellationToken) {
    loop {
        tokio::select! {
            () = tokio::time::sleep(SETTLE_EVERY) => {}
            () = shutdown.cancelled() => return,
        }
        if !app.scheduler.leads() {
            continue;
        }
        let intents = match app.store.intents_of_stopped_replicas(REPLICA_STOPPED_AFTER).await {
            Ok(intents) => intents,
            Err(e) => {
                tracing::warn!("finding the file changes of stopped replicas: {e}");
                continue;
            }
        };
        for intent in intents {
            let settled = match app.path_locks.lock(intent.mission_id, &intent.path).await {
                Ok(_guard) => settle_intent(&app.store, &app.bays, &intent).await,
                Err(e) => Err(e.into()),
            };
            match settled {
                Ok(()) => tracing::info!(mission = %intent.mission_id, path = %intent.path,
                    "settled a file change a stopped replica left"),
                Err(e) => {
                    tracing::warn!(mission = %intent.mission_id, path = %intent.path, error = %e.problem().detail,
                    "cannot settle a file change a stopped replica left now; will retry")
                }
            }
        }
    }
}

/// Settles one unfinished file change: finds where its file lives and brings row and object
/// into agreement.
async fn settle_intent(store: &store::Store, bays: &CargoBays, intent: &Intent) -> ApiResult<()> {
    let path = parse_path(&intent.path)?;
    let mission = store.mission(intent.mission_id).await?;
    let place = match &mission {
        Some(mission) => bays.source(store, mission).await?,
        // The mission is gone with its rows; its default-storage folder goes too.
        None => bays.default_store().default_location(intent.mission_id),
    };
    settle(store, &place, intent, &path, mission.as_ref()).await
}

/// Why the file changes a stopped server left could not be settled; the cause is kept.
#[derive(Debug, thiserror::Error)]
pub enum RecoveryError {
    /// The database failed.
    #[error(transparent)]
    Store(#[from] store::StoreError),
    /// The default storage failed.
    #[error("the default storage: {0}")]
    Storage(#[from] object_store::Error),
    /// The default storage's folder could not be cleaned.
    #[error("the default storage's folder: {0}")]
    Folder(#[from] std::io::Error),
}

/// Brings one file's row and object into agreement after an interrupted change.
async fn settle(
    store: &store::Store,
    place: &Location,
    intent: &Intent,
    path: &MissionPath,
    mission: Option<&mission_api::Mission>,
) -> ApiResult<()> {
    let key = place.key(path);
    let storage = |e| storage_error(place, e);
    if intent.kind == IntentKind::Upload {
        // Staging files of the interrupted write (in the default storage they went already).
        place.files.remove_staging_files_of(&key).await.map_err(ApiError::internal)?;
    }
    match (intent.kind, mission) {
        (IntentKind::Upload, Some(mission)) => {
            let row = store.mission_file(intent.mission_id, &intent.path).await?;
            let object = place.files.e_tag(&key).await.map_err(storage)?;
            match (object, row) {
                // The object is what the row says (the write never completed): nothing to do.
                (Some(tag), Some(row)) if row.e_tag.as_deref() == Some(tag.as_str()) => {}
                (None, None) => {}
                // The write completed but was not committed: adopt the complete object.
                (Some(_), _) => {
                    let written = place.files.hash(&key).await.map_err(storage)?;
                    let record = FileRecord {
                        mission_id: mission.mission_id,
                        path: intent.path.clone(),
                        user_id: mission.user_id,
                        size: written.size,
                        sha256: written.sha256,
                        e_tag: written.e_tag,
                        modified_at: store::now(),
                    };
                    store.commit_file(intent.intent_id, &record).await?;
                    return Ok(());
                }
                // A row whose object is gone cannot be served: drop it.
                (None, Some(_)) => {
                    store.delete_file_row(intent.mission_id, &intent.path).await?;
                }
            }
        }
        (IntentKind::Delete, _) | (IntentKind::Upload, None) => {
            store.delete_file_row(intent.mission_id, &intent.path).await?;
            place.delete(path).await.map_err(storage)?;
        }
    }
    store.drop_intent(intent.intent_id).await?;
    Ok(())
}
