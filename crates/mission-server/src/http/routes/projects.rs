//! The projects API: projects, their members (see [`crate::domain::projects`] for who may do
//! what).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use mission_api::{
    BudgetStatus, CreateProject, Project, ProjectBudget, ProjectLimits, ProjectMember, ProjectPage, SetProjectMember,
    StationLimits, UpdateProject,
};

use super::extract::{ApiJson, QueryPairs, page_number, page_size, parse_id, rfc3339};
use crate::AppState;
use crate::domain::Principal;
use crate::domain::member_named;
use crate::domain::projects;
use crate::http::error::{ApiError, ApiResult};

/// Creates a shared project (admins only).
#[utoipa::path(post, path = "/api/v1/projects", tag = "projects", request_body = CreateProject,
    responses((status = 201, body = Project), (status = 400, body = mission_api::Problem),
        (status = 403, body = mission_api::Problem), (status = 409, body = mission_api::Problem)))]
pub async fn create(
    State(app): State<AppState>,
    who: Principal,
    ApiJson(req): ApiJson<CreateProject>,
) -> ApiResult<(StatusCode, Json<Project>)> {
    Ok((StatusCode::CREATED, Json(projects::create(&app, who, req).await?)))
}

/// The projects the caller is a member of (every project, for admins), by name.
#[utoipa::path(get, path = "/api/v1/projects", tag = "projects",
    params(
        ("page" = Option<u32>, Query, minimum = 1, maximum = 1000000, description = "page number, 1 to 1,000,000 (default 1)"),
        ("items" = Option<u32>, Query, minimum = 1, maximum = 200, description = "projects per page, 1 to 200 (default 25)"),
    ),
    responses((status = 200, body = ProjectPage), (status = 400, body = mission_api::Problem)))]
pub async fn list(
    State(app): State<AppState>,
    who: Principal,
    QueryPairs(query): QueryPairs,
) -> ApiResult<Json<ProjectPage>> {
    let (mut page, mut items) = (1, 25);
    for (key, value) in &query {
        match key.as_str() {
            "page" => page = page_number(value)?,
            "items" => items = page_size(value)?,
            other => return Err(ApiError::invalid(format!("unknown query parameter {other:?}; it takes page, items"))),
        }
    }
    let (projects, has_more) = projects::list(&app, who, page, items).await?;
    Ok(Json(ProjectPage { projects, page, items, has_more }))
}

/// One project.
#[utoipa::path(get, path = "/api/v1/projects/{id}", tag = "projects",
    params(("id" = uuid::Uuid, Path, description = "project id")),
    responses((status = 200, body = Project), (status = 404, body = mission_api::Problem)))]
pub async fn get(State(app): State<AppState>, who: Principal, Path(id): Path<String>) -> ApiResult<Json<Project>> {
    Ok(Json(projects::visible(&app, who, parse_id("project_id", &id)?).await?))
}

/// Renames a project (admins) or changes its description (its managers too).
#[utoipa::path(patch, path = "/api/v1/projects/{id}", tag = "projects", request_body = UpdateProject,
    params(("id" = uuid::Uuid, Path, description = "project id")),
    responses((status = 200, body = Project), (status = 400, body = mission_api::Problem),
        (status = 403, body = mission_api::Problem), (status = 404, body = mission_api::Problem),
        (status = 409, body = mission_api::Problem, description = "the name is taken, or the project is personal")))]
pub async fn update(
    State(app): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<UpdateProject>,
) -> ApiResult<Json<Project>> {
    Ok(Json(projects::update(&app, who, parse_id("project_id", &id)?, req).await?))
}

/// Deletes a shared project that holds no missions and no unfinished jobs (admins only).
#[utoipa::path(delete, path = "/api/v1/projects/{id}", tag = "projects",
    params(("id" = uuid::Uuid, Path, description = "project id")),
    responses((status = 204), (status = 403, body = mission_api::Problem), (status = 404, body = mission_api::Problem),
        (status = 409, body = mission_api::Problem, description = "it is personal, or holds missions or unfinished jobs")))]
pub async fn delete(State(app): State<AppState>, who: Principal, Path(id): Path<String>) -> ApiResult<StatusCode> {
    projects::delete(&app, who, parse_id("project_id", &id)?).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The members of a project, with their roles, by username.
#[utoipa::path(get, path = "/api/v1/projects/{id}/members", tag = "projects",
    params(("id" = uuid::Uuid, Path, description = "project id")),
    responses((status = 200, body = [ProjectMember]), (status = 404, body = mission_api::Problem)))]
pub async fn members(
    State(app): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
) -> ApiResult<Json<Vec<ProjectMember>>> {
    Ok(Json(projects::members(&app, who, parse_id("project_id", &id)?).await?))
}

/// Adds a member (named by user id or username) with a role, or changes their role.
#[utoipa::path(put, path = "/api/v1/projects/{id}/members/{user}", tag = "projects", request_body = SetProjectMember,
    params(("id" = uuid::Uuid, Path, description = "project id"), ("user" = String, Path, description = "user id or username")),
    responses((status = 200, body = ProjectMember), (status = 400, body = mission_api::Problem),
        (status = 403, body = mission_api::Problem), (status = 404, body = mission_api::Problem),
        (status = 409, body = mission_api::Problem, description = "the project is personal")))]
pub async fn set_member(
    State(app): State<AppState>,
    who: Principal,
    Path((id, user)): Path<(String, String)>,
    ApiJson(req): ApiJson<SetProjectMember>,
) -> ApiResult<Json<ProjectMember>> {
    let project_id = parse_id("project_id", &id)?;
    // Whether the caller may see the project comes before whether the user exists.
    projects::visible(&app, who, project_id).await?;
    let user_id = member_named(&app, &user).await?;
    Ok(Json(projects::set_member(&app, who, project_id, user_id, req.role).await?))
}

/// Removes a member.
#[utoipa::path(delete, path = "/api/v1/projects/{id}/members/{user}", tag = "projects",
    params(("id" = uuid::Uuid, Path, description = "project id"), ("user" = String, Path, description = "user id or username")),
    responses((status = 204), (status = 403, body = mission_api::Problem), (status = 404, body = mission_api::Problem),
        (status = 409, body = mission_api::Problem, description = "the project is personal")))]
pub async fn remove_member(
    State(app): State<AppState>,
    who: Principal,
    Path((id, user)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    let project_id = parse_id("project_id", &id)?;
    projects::visible(&app, who, project_id).await?;
    let user_id = member_named(&app, &user).await?;
    projects::remove_member(&app, who, project_id, user_id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The project's limits on each station that has some, with what it holds and has queued there
/// (and the stations where it has jobs but no limits).
#[utoipa::path(get, path = "/api/v1/projects/{id}/limits", tag = "projects",
    params(("id" = uuid::Uuid, Path, description = "project id")),
    responses((status = 200, body = [StationLimits]), (status = 404, body = mission_api::Problem)))]
pub async fn limits(
    State(app): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
) -> ApiResult<Json<Vec<StationLimits>>> {
    Ok(Json(projects::limits(&app, who, parse_id("project_id", &id)?).await?))
}

/// Sets what the project may hold on a station (admins only), replacing what was set; its jobs
/// past a limit wait, their pending reason naming it.
#[utoipa::path(put, path = "/api/v1/projects/{id}/limits/{station_id}", tag = "projects", request_body = ProjectLimits,
    params(("id" = uuid::Uuid, Path, description = "project id"), ("station_id" = uuid::Uuid, Path, description = "station id")),
    responses((status = 200, body = StationLimits), (status = 400, body = mission_api::Problem),
        (status = 403, body = mission_api::Problem), (status = 404, body = mission_api::Problem)))]
pub async fn set_limits(
    State(app): State<AppState>,
    who: Principal,
    Path((id, station)): Path<(String, String)>,
    ApiJson(req): ApiJson<ProjectLimits>,
) -> ApiResult<Json<StationLimits>> {
    let (project_id, station_id) = (parse_id("project_id", &id)?, parse_id("station_id", &station)?);
    Ok(Json(projects::set_limits(&app, who, project_id, station_id, req).await?))
}

/// Removes the project's limits on a station (admins only).
#[utoipa::path(delete, path = "/api/v1/projects/{id}/limits/{station_id}", tag = "projects",
    params(("id" = uuid::Uuid, Path, description = "project id"), ("station_id" = uuid::Uuid, Path, description = "station id")),
    responses((status = 204), (status = 403, body = mission_api::Problem), (status = 404, body = mission_api::Problem)))]
pub async fn delete_limits(
    State(app): State<AppState>,
    who: Principal,
    Path((id, station)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    let (project_id, station_id) = (parse_id("project_id", &id)?, parse_id("station_id", &station)?);
    projects::delete_limits(&app, who, project_id, station_id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The project's budget and what it spent this period (its members and admins).
#[utoipa::path(get, path = "/api/v1/projects/{id}/budget", tag = "projects",
    params(("id" = uuid::Uuid, Path, description = "project id")),
    responses((status = 200, body = BudgetStatus), (status = 404, body = mission_api::Problem)))]
pub async fn budget(
    State(app): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
) -> ApiResult<Json<BudgetStatus>> {
    Ok(Json(projects::budget(&app, who, parse_id("project_id", &id)?).await?))
}

/// Sets what the project may spend per period (admins only), replacing what was set: at 80% its
/// members get a `project.budget_warning` event, at 100% its jobs wait until the next period.
#[utoipa::path(put, path = "/api/v1/projects/{id}/budget", tag = "projects", request_body = ProjectBudget,
    params(("id" = uuid::Uuid, Path, description = "project id")),
    responses((status = 200, body = BudgetStatus), (status = 400, body = mission_api::Problem),
        (status = 403, body = mission_api::Problem), (status = 404, body = mission_api::Problem)))]
pub async fn set_budget(
    State(app): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<ProjectBudget>,
) -> ApiResult<Json<BudgetStatus>> {
    Ok(Json(projects::set_budget(&app, who, parse_id("project_id", &id)?, req).await?))
}

/// Removes the project's budget (admins only).
#[utoipa::path(delete, path = "/api/v1/projects/{id}/budget", tag = "projects",
    params(("id" = uuid::Uuid, Path, description = "project id")),
    responses((status = 204), (status = 403, body = mission_api::Problem), (status = 404, body = mission_api::Problem)))]
pub async fn delete_budget(
    State(app): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    projects::delete_budget(&app, who, parse_id("project_id", &id)?).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// What the ended jobs the caller may see used, per group: admins see every job, a project's
/// managers the jobs charged to it, everyone their own. `group_by`: `project` (the default),
/// `user` or `label:KEY`; `since` and `until` (RFC 3339) bound when the jobs ended; `format`:
/// `json` (the default) or `csv`, a header and a row per group whose first columns are named
/// after the grouping (`project,project_id,…`).
#[utoipa::path(get, path = "/api/v1/usage", tag = "projects",
    params(
        ("group_by" = Option<String>, Query, description = "project (default), user or label:KEY"),
        ("since" = Option<String>, Query, description = "only jobs that ended at or after this time (RFC 3339)"),
        ("until" = Option<String>, Query, description = "only jobs that ended before this time (RFC 3339)"),
        ("format" = Option<String>, Query, description = "json (default) or csv"),
    ),
    responses((status = 200, description = "the report, as JSON or (format=csv) CSV",
            content((mission_api::UsageReport = "application/json"), (String = "text/csv"))),
        (status = 400, body = mission_api::Problem)))]
pub async fn usage(State(app): State<AppState>, who: Principal, QueryPairs(query): QueryPairs) -> ApiResult<Response> {
    let (mut group_by, mut since, mut until, mut csv) = ("project".to_owned(), None, None, false);
    for (key, value) in &query {
        match key.as_str() {
            "group_by" => group_by.clone_from(value),
            "since" => since = Some(rfc3339(key, value)?),
            "until" => until = Some(rfc3339(key, value)?),
            "format" => {
                csv = match value.as_str() {
                    "json" => false,
                    "csv" => true,
                    _ => return Err(ApiError::invalid_field("format", "json or csv")),
                }
            }
            other => {
                return Err(ApiError::invalid(format!(
                    "unknown query parameter {other:?}; parameters are group_by, since, until, format"
                )));
            }
        }
    }
    let report = projects::usage(&app, who, &group_by, since, until).await?;
    if csv {
        let headers = [(header::CONTENT_TYPE, "text/csv; charset=utf-8")];
        return Ok((headers, report.to_csv()).into_response());
    }
    Ok(Json(report).into_response())
}
