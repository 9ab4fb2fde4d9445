//! The missions API: create, list, read, update, set arguments, delete.
//!
//! Ownership: the owner (or an admin) reads and writes a mission; anyone signed in reads a public
//! mission; a private mission of someone else is a 404, never revealing that it exists.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use mission_api::{CreateMission, DEFAULT_CARGO_BAY_ID, Mission, MissionPage, UpdateMission, UpdateMissionArgs};
use uuid::Uuid;

use super::extract::{
    ApiJson, QueryPairs, checked_labels, checked_retry, page_number, page_size, parse_id, push_label_filter,
};
use crate::AppState;
use crate::auth::Principal;
use crate::cargo_bays::storage_segments;
use crate::catalogue;
use crate::domain::{MAX_NAME_CHARS, check_description, checked_name, projects};
use crate::error::{ApiError, ApiResult};
use mission_store::{self as store, MissionChanges, MissionFilter};

/// Longest storage path, in bytes.
pub const MAX_STORAGE_PATH_BYTES: usize = 1024;
/// Most arguments a mission may have.
pub const MAX_ARGS: usize = 1000;
/// Longest single argument, in bytes.
pub const MAX_ARG_BYTES: usize = 4096;

fn check_storage_path(field: &str, path: &Option<String>) -> ApiResult<()> {
    match path {
        Some(p) if p.len() > MAX_STORAGE_PATH_BYTES => {
            Err(ApiError::invalid_field(field, format!("at most {MAX_STORAGE_PATH_BYTES} bytes")))
        }
        _ => storage_segments(field, path.as_deref()).map(drop),
    }
}

/// A mission may name the default bay or a bay of its owner's; anything else is a 400 that does
/// not say whether the bay exists.
async fn check_storage(app: &AppState, owner: Uuid, field: &str, id: Option<Uuid>) -> ApiResult<()> {
    let Some(id) = id.filter(|id| *id != DEFAULT_CARGO_BAY_ID) else { return Ok(()) };
    match app.store.cargo_bay(id).await? {
        Some(record) if record.bay.user_id == Some(owner) => Ok(()),
        _ => Err(ApiError::invalid_field(field, format!("the mission's owner has no cargo bay {id}"))),
    }
}

fn check_settings(mission_type_id: Option<Uuid>, settings: &BTreeMap<String, String>) -> ApiResult<()> {
    match mission_type_id {
        Some(id) => catalogue::find(id)
            .ok_or_else(|| ApiError::invalid_field("mission_type_id", format!("no mission type {id}")))?
            .check_settings(settings),
        None if settings.is_empty() => Ok(()),
        None => Err(ApiError::invalid_field("settings", "a mission without a mission_type_id takes no settings")),
    }
}

pub(crate) fn check_args(args: &[String]) -> ApiResult<()> {
    if args.len() > MAX_ARGS {
        return Err(ApiError::invalid_field("args", format!("at most {MAX_ARGS} arguments")));
    }
    for (i, arg) in args.iter().enumerate() {
        if arg.len() > MAX_ARG_BYTES {
            return Err(ApiError::invalid_field("args", format!("argument {i} is longer than {MAX_ARG_BYTES} bytes")));
        }
        if arg.contains('\0') {
            return Err(ApiError::invalid_field("args", format!("argument {i} contains NUL")));
        }
    }
    Ok(())
}

/// Loads a mission the caller may read, as a 404 otherwise: their own, a public one, one of a
/// project they are a member of (any role), or any for an admin.
pub(super) async fn readable(app: &AppState, who: Principal, raw_id: &str) -> ApiResult<Mission> {
    let id = parse_id("mission_id", raw_id)?;
    match app.store.mission(id).await? {
        Some(m) if who.admin || m.public || m.user_id == who.user_id => Ok(m),
        Some(m) if projects::role(app, who, m.project_id).await?.is_some() => Ok(m),
        _ => Err(ApiError::not_found("mission", id)),
    }
}

/// Loads a mission the caller may change: 404 if they cannot see it, 403 if they only may read it.
pub(crate) async fn writable(app: &AppState, who: Principal, raw_id: &str) -> ApiResult<Mission> {
    let mission = readable(app, who, raw_id).await?;
    if who.admin || mission.user_id == who.user_id {
        Ok(mission)
    } else {
        Err(ApiError::forbidden(format!(
            "mission {} belongs to another user and is read-only to you",
            mission.mission_id
        )))
    }
}

/// Creates a mission owned by the caller.
#[utoipa::path(post, path = "/api/v1/missions", tag = "missions", request_body = CreateMission,
    responses((status = 201, body = Mission), (status = 400, body = mission_api::Problem)))]
pub async fn create(
    State(app): State<AppState>,
    who: Principal,
    ApiJson(req): ApiJson<CreateMission>,
) -> ApiResult<(StatusCode, Json<Mission>)> {
    let name = checked_name(&req.name)?;
    let description = req.description.unwrap_or_default();
    check_description(&description)?;
    check_storage_path("source_path", &req.source_path)?;
    check_storage_path("destination_path", &req.destination_path)?;
    let settings = req.settings.unwrap_or_default();
    check_settings(req.mission_type_id, &settings)?;
    let labels = checked_labels(req.labels)?;
    let retry = checked_retry(req.retry)?;
    check_storage(&app, who.user_id, "source_storage_id", req.source_storage_id).await?;
    check_storage(&app, who.user_id, "destination_storage_id", req.destination_storage_id).await?;
    let project_id = req.project_id.unwrap_or(who.user_id);
    projects::ensure_may_run(&app, who, project_id, "project_id").await?;
    let now = store::now();
    let mission = Mission {
        mission_id: Uuid::new_v4(),
        name,
        description,
        mission_type_id: req.mission_type_id,
        source_storage_id: req.source_storage_id,
        destination_storage_id: req.destination_storage_id,
        source_path: req.source_path,
        destination_path: req.destination_path,
        settings,
        public: req.public.unwrap_or(false),
        archived: false,
        args: Vec::new(),
        labels,
        retry,
        user_id: who.user_id,
        project_id,
        created_at: now,
        updated_at: now,
    };
    app.store.insert_mission(&mission).await?;
    Ok((StatusCode::CREATED, Json(mission)))
}

/// Lists the missions the caller may read, newest first.
///
/// Query: `ids`, `names`, `user_ids`, `project_ids`, `mission_type_ids` (each may repeat; a row
/// matches one of the values; `project_ids` must be projects of the caller's, and lists every
/// mission of theirs, whoever owns it), `archived` (`true`/`false`), `label` (`key=value`, repeats: every one given),
/// `page` (from 1, default 1), `items` (1 to 200,
/// default 25).
#[utoipa::path(get, path = "/api/v1/missions", tag = "missions",
    params(
        ("ids" = Option<Vec<uuid::Uuid>>, Query, description = "mission ids (repeat the key)"),
        ("names" = Option<Vec<String>>, Query, description = "exact names (repeat the key)"),
        ("user_ids" = Option<Vec<uuid::Uuid>>, Query, description = "owners (repeat the key)"),
        ("project_ids" = Option<Vec<uuid::Uuid>>, Query, description = "projects of yours (repeat the key): every mission of theirs, whoever owns it"),
        ("mission_type_ids" = Option<Vec<uuid::Uuid>>, Query, description = "mission types (repeat the key)"),
        ("archived" = Option<bool>, Query, description = "archived or not; both when absent"),
        ("search" = Option<String>, Query, max_length = 256, description = "names containing this text, ignoring case"),
        ("label" = Option<Vec<String>>, Query, description = "only missions with this label, as key=value (repeat: all of them)"),
        ("page" = Option<u32>, Query, minimum = 1, maximum = 1000000, description = "page number, 1 to 1,000,000 (default 1)"),
        ("items" = Option<u32>, Query, minimum = 1, maximum = 200, description = "missions per page, 1 to 200 (default 25)"),
    ),
    responses((status = 200, body = MissionPage), (status = 400, body = mission_api::Problem)))]
pub async fn list(
    State(app): State<AppState>,
    who: Principal,
    QueryPairs(query): QueryPairs,
) -> ApiResult<Json<MissionPage>> {
    let mut filter =
        MissionFilter { visible_to: (!who.admin).then_some(who.user_id), page: 1, items: 25, ..Default::default() };
    for (key, value) in &query {
        match key.as_str() {
            "ids" | "mission_ids" => filter.mission_ids.push(parse_id(key, value)?),
            "names" => filter.names.push(value.clone()),
            "user_ids" => filter.user_ids.push(parse_id(key, value)?),
            "project_ids" => filter.project_ids.push(parse_id(key, value)?),
            "mission_type_ids" => filter.mission_type_ids.push(parse_id(key, value)?),
            "archived" => {
                filter.archived = Some(value.parse().map_err(|_| {
                    ApiError::invalid_field("archived", format!("expected true or false, got {value:?}"))
                })?)
            }
            "search" => {
                if value.chars().count() > MAX_NAME_CHARS || value.chars().any(char::is_control) {
                    let rule = format!("at most {MAX_NAME_CHARS} characters, none of them control characters");
                    return Err(ApiError::invalid_field("search", rule));
                }
                filter.name_contains = Some(value.trim().to_owned()).filter(|v| !v.is_empty());
            }
            "label" => push_label_filter(&mut filter.labels, value)?,
            "page" => filter.page = page_number(value)?,
            "items" => filter.items = page_size(value)?,
            other => {
                return Err(ApiError::invalid(format!(
                    "unknown query parameter {other:?}; filters are ids, names, user_ids, project_ids, mission_type_ids, \
                     archived, search, label, page, items"
                )));
            }
        }
    }
    const MAX_FILTER_VALUES: usize = 500;
    let values = filter.mission_ids.len()
        + filter.names.len()
        + filter.user_ids.len()
        + filter.project_ids.len()
        + filter.mission_type_ids.len();
    if values > MAX_FILTER_VALUES {
        return Err(ApiError::invalid(format!("at most {MAX_FILTER_VALUES} filter values per request")));
    }
    if !filter.project_ids.is_empty() {
        // A member reads every mission of their projects, whoever owns it.
        projects::ensure_member_of_each(&app, who, &filter.project_ids, "project_ids").await?;
        filter.visible_to = None;
    }
    let (missions, has_more) = app.store.list_missions(&filter).await?;
    Ok(Json(MissionPage { missions, page: filter.page, items: filter.items, has_more }))
}

/// One mission.
#[utoipa::path(get, path = "/api/v1/missions/{id}", tag = "missions",
    params(("id" = uuid::Uuid, Path, description = "mission id")),
    responses((status = 200, body = Mission), (status = 404, body = mission_api::Problem)))]
pub async fn get(State(app): State<AppState>, who: Principal, Path(id): Path<String>) -> ApiResult<Json<Mission>> {
    Ok(Json(readable(&app, who, &id).await?))
}

/// Changes the fields given; the rest stay as they are.
#[utoipa::path(patch, path = "/api/v1/missions/{id}", tag = "missions", request_body = UpdateMission,
    params(("id" = uuid::Uuid, Path, description = "mission id")),
    responses((status = 200, body = Mission), (status = 400, body = mission_api::Problem),
        (status = 403, body = mission_api::Problem), (status = 404, body = mission_api::Problem),
        (status = 409, body = mission_api::Problem, description = "the mission's source moves while it holds files")))]
pub async fn update(
    State(app): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<UpdateMission>,
) -> ApiResult<Json<Mission>> {
    let mission = writable(&app, who, &id).await?;
    let name = req.name.as_deref().map(checked_name).transpose()?;
    if let Some(d) = &req.description {
        check_description(d)?;
    }
    check_storage_path("source_path", &req.source_path)?;
    check_storage_path("destination_path", &req.destination_path)?;
    if let Some(settings) = &req.settings {
        check_settings(mission.mission_type_id, settings)?;
    }
    let labels = req.labels.map(checked_labels).transpose()?;
    let retry = checked_retry(req.retry)?;
    check_storage(&app, mission.user_id, "source_storage_id", req.source_storage_id).await?;
    check_storage(&app, mission.user_id, "destination_storage_id", req.destination_storage_id).await?;
    if let Some(project_id) = req.project_id {
        projects::ensure_may_run(&app, who, project_id, "project_id").await?;
    }
    let moves_source =
        req.source_storage_id.is_some_and(|id| id != mission.source_storage_id.unwrap_or(DEFAULT_CARGO_BAY_ID))
            || req.source_path.as_ref().is_some_and(|p| Some(p) != mission.source_path.as_ref());
    if moves_source {
        let files = app.store.mission_file_activity(mission.mission_id).await?;
        if files > 0 {
            return Err(ApiError::conflict(format!(
                "the mission holds {files} file(s) in its current source storage; delete them before moving \
                 source_storage_id or source_path"
            )));
        }
    }
    let changes = MissionChanges {
        name,
        description: req.description,
        source_storage_id: req.source_storage_id,
        destination_storage_id: req.destination_storage_id,
        source_path: req.source_path,
        destination_path: req.destination_path,
        settings: req.settings,
        archived: req.archived,
        args: None,
        labels,
        retry,
        project_id: req.project_id,
    };
    let updated = app.store.update_mission(mission.mission_id, &changes, store::now()).await?;
    updated.map(Json).ok_or_else(|| ApiError::not_found("mission", mission.mission_id))
}

/// Replaces the mission's arguments.
#[utoipa::path(put, path = "/api/v1/missions/{id}/args", tag = "missions", request_body = UpdateMissionArgs,
    params(("id" = uuid::Uuid, Path, description = "mission id")),
    responses((status = 200, body = Mission), (status = 400, body = mission_api::Problem), (status = 404, body = mission_api::Problem)))]
pub async fn set_args(
    State(app): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<UpdateMissionArgs>,
) -> ApiResult<Json<Mission>> {
    let mission = writable(&app, who, &id).await?;
    check_args(&req.args)?;
    let changes = MissionChanges { args: Some(req.args), ..Default::default() };
    let updated = app.store.update_mission(mission.mission_id, &changes, store::now()).await?;
    updated.map(Json).ok_or_else(|| ApiError::not_found("mission", mission.mission_id))
}

/// Deletes the mission.
#[utoipa::path(delete, path = "/api/v1/missions/{id}", tag = "missions",
    params(("id" = uuid::Uuid, Path, description = "mission id")),
    responses((status = 204), (status = 403, body = mission_api::Problem), (status = 404, body = mission_api::Problem)))]
pub async fn delete(State(app): State<AppState>, who: Principal, Path(id): Path<String>) -> ApiResult<StatusCode> {
    let mission = writable(&app, who, &id).await?;
    let running = app.store.mission_unfinished_jobs(mission.mission_id).await?;
    if running > 0 {
        return Err(ApiError::conflict(format!("the mission has {running} jobs that have not ended; stop them first")));
    }
    let place = app.bays.source(&app.store, &mission).await.ok();
    // In a cargo bay only the files the mission indexed are its own; note them before the rows go.
    let indexed = match &place {
        Some(place) if !place.owned_folder => app.store.mission_files(mission.mission_id).await?,
        _ => Vec::new(),
    };
    if app.store.delete_mission(mission.mission_id).await? {
        // The rows went with the mission. A failure here leaves objects behind: in the default
        // storage start-up recovery removes the folder; in a cargo bay they stay (logged).
        let result = match &place {
            Some(place) if !place.owned_folder => {
                let mut result = Ok(());
                for file in &indexed {
                    let path = mission_api::paths::MissionPath::parse(&file.path).expect("stored paths are valid");
                    result = result.and(place.files.delete(&place.key(&path)).await);
                }
                result
            }
            _ => app.bays.default_store().delete_mission(mission.mission_id).await,
        };
        if let Err(e) = result {
            tracing::warn!(mission = %mission.mission_id, error = %e, "could not delete the mission's files");
        }
        if let Err(e) = app.logs.delete_mission(mission.mission_id).await {
            tracing::warn!(mission = %mission.mission_id, error = %e, "could not delete the mission's job logs");
        }
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found("mission", mission.mission_id))
    }
}
