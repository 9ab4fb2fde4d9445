//! The cargo bays API: list, add, read, delete, over [`crate::domain::cargo_bays`].

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use mission_api::{CargoBay, CreateCargoBay};

use super::extract::{ApiJson, parse_id};
use crate::AppState;
use crate::domain::Principal;
use crate::domain::cargo_bays;
use crate::http::error::ApiResult;

/// Lists the default bay and the caller's bays (every bay, for admins).
#[utoipa::path(get, path = "/api/v1/cargo-bays", tag = "cargo-bays",
    responses((status = 200, body = [CargoBay])))]
pub async fn list(State(app): State<AppState>, who: Principal) -> ApiResult<Json<Vec<CargoBay>>> {
    Ok(Json(cargo_bays::list(&app, who).await?))
}

/// One bay.
#[utoipa::path(get, path = "/api/v1/cargo-bays/{id}", tag = "cargo-bays",
    params(("id" = uuid::Uuid, Path, description = "storage id")),
    responses((status = 200, body = CargoBay), (status = 404, body = mission_api::Problem)))]
pub async fn get(State(app): State<AppState>, who: Principal, Path(id): Path<String>) -> ApiResult<Json<CargoBay>> {
    Ok(Json(cargo_bays::get(&app, who, parse_id("storage_id", &id)?).await?))
}

/// Deletes a bay no mission names any more. Its objects stay where they are.
#[utoipa::path(delete, path = "/api/v1/cargo-bays/{id}", tag = "cargo-bays",
    params(("id" = uuid::Uuid, Path, description = "storage id")),
    responses((status = 204), (status = 404, body = mission_api::Problem), (status = 409, body = mission_api::Problem)))]
pub async fn delete(State(app): State<AppState>, who: Principal, Path(id): Path<String>) -> ApiResult<StatusCode> {
    cargo_bays::delete(&app, who, parse_id("storage_id", &id)?).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Adds a bay after checking that it answers.
#[utoipa::path(post, path = "/api/v1/cargo-bays", tag = "cargo-bays", request_body = CreateCargoBay,
    responses((status = 201, body = CargoBay), (status = 400, body = mission_api::Problem),
        (status = 403, body = mission_api::Problem)))]
pub async fn create(
    State(app): State<AppState>,
    who: Principal,
    ApiJson(req): ApiJson<CreateCargoBay>,
) -> ApiResult<(StatusCode, Json<CargoBay>)> {
    Ok((StatusCode::CREATED, Json(cargo_bays::create(&app, who, req).await?)))
}
