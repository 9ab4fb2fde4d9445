//! The missions API: create, list, read, update, set arguments, delete, over
//! [`crate::domain::missions`] (who may do what, and the rules of the fields).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use mission_api::{CreateMission, Mission, MissionPage, UpdateMission, UpdateMissionArgs};

use super::extract::{ApiJson, QueryPairs, page_number, page_size, parse_id, push_label_filter};
use crate::AppState;
use crate::domain::Principal;
use crate::domain::{MAX_NAME_CHARS, missions};
use crate::http::error::{ApiError, ApiResult};
use mission_store::MissionFilter;

/// Creates a mission owned by the caller.
#[utoipa::path(post, path = "/api/v1/missions", tag = "missions", request_body = CreateMission,
    responses((status = 201, body = Mission), (status = 400, body = mission_api::Problem)))]
pub async fn create(
    State(app): State<AppState>,
    who: Principal,
    ApiJson(req): ApiJson<CreateMission>,
) -> ApiResult<(StatusCode, Json<Mission>)> {
    Ok((StatusCode::CREATED, Json(missions::create(&app, who, req).await?)))
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
    let filter = mission_filter(&query)?;
    let (page, items) = (filter.page, filter.items);
    let (missions, has_more) = missions::list(&app, who, filter).await?;
    Ok(Json(MissionPage { missions, page, items, has_more }))
}

/// One mission.
#[utoipa::path(get, path = "/api/v1/missions/{id}", tag = "missions",
    params(("id" = uuid::Uuid, Path, description = "mission id")),
    responses((status = 200, body = Mission), (status = 404, body = mission_api::Problem)))]
pub async fn get(State(app): State<AppState>, who: Principal, Path(id): Path<String>) -> ApiResult<Json<Mission>> {
    Ok(Json(missions::readable(&app, who, parse_id("mission_id", &id)?).await?))
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
    Ok(Json(missions::update(&app, who, parse_id("mission_id", &id)?, req).await?))
}

/// Replaces the mission's arguments (deprecated: `PATCH` the mission's `args`).
#[utoipa::path(put, path = "/api/v1/missions/{id}/args", tag = "missions", request_body = UpdateMissionArgs,
    params(("id" = uuid::Uuid, Path, description = "mission id")),
    responses((status = 200, body = Mission), (status = 400, body = mission_api::Problem), (status = 404, body = mission_api::Problem)))]
pub async fn set_args(
    State(app): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<UpdateMissionArgs>,
) -> ApiResult<Json<Mission>> {
    let update = UpdateMission { args: Some(req.args), ..Default::default() };
    Ok(Json(missions::update(&app, who, parse_id("mission_id", &id)?, update).await?))
}

/// Deletes the mission.
#[utoipa::path(delete, path = "/api/v1/missions/{id}", tag = "missions",
    params(("id" = uuid::Uuid, Path, description = "mission id")),
    responses((status = 204), (status = 403, body = mission_api::Problem), (status = 404, body = mission_api::Problem),
        (status = 409, body = mission_api::Problem, description = "the mission has jobs that have not finished")))]
pub async fn delete(State(app): State<AppState>, who: Principal, Path(id): Path<String>) -> ApiResult<StatusCode> {
    missions::delete(&app, who, parse_id("mission_id", &id)?).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The filter of a missions query (as `GET /api/v1/missions` takes it; the console and the
/// galileo façade build theirs the same way), checked.
pub(crate) fn mission_filter(query: &[(String, String)]) -> ApiResult<MissionFilter> {
    let mut filter = MissionFilter { page: 1, items: 25, ..Default::default() };
    for (key, value) in query {
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
    Ok(filter)
}
