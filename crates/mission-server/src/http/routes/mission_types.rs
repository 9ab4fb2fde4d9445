//! `GET /mission-types`, `/mission-types/{id}`, `/mission-types/{id}/settings`: the catalogue.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::Path;
use mission_api::{MissionType, MissionTypeSummary};

use super::extract::parse_id;
use crate::domain::Principal;
use crate::domain::catalogue::{self, MissionTypeDef};
use crate::http::error::{ApiError, ApiResult};

fn lookup(raw: &str) -> ApiResult<&'static MissionTypeDef> {
    let id = parse_id("mission_type_id", raw)?;
    catalogue::find(id).ok_or_else(|| ApiError::not_found("mission type", id))
}

/// Lists the mission types.
#[utoipa::path(get, path = "/api/v1/mission-types", tag = "mission-types",
    responses((status = 200, body = [MissionTypeSummary]), (status = 401, body = mission_api::Problem)))]
pub async fn list(_: Principal) -> Json<Vec<MissionTypeSummary>> {
    Json(catalogue::all().iter().map(MissionTypeDef::summary).collect())
}

/// One mission type in detail.
#[utoipa::path(get, path = "/api/v1/mission-types/{id}", tag = "mission-types",
    params(("id" = uuid::Uuid, Path, description = "mission type id")),
    responses((status = 200, body = MissionType), (status = 404, body = mission_api::Problem)))]
pub async fn get(_: Principal, Path(id): Path<String>) -> ApiResult<Json<MissionType>> {
    Ok(Json(lookup(&id)?.detail()))
}

/// The settings a mission of this type accepts: name to expected type or options.
#[utoipa::path(get, path = "/api/v1/mission-types/{id}/settings", tag = "mission-types",
    params(("id" = uuid::Uuid, Path, description = "mission type id")),
    responses((status = 200, body = BTreeMap<String, String>), (status = 404, body = mission_api::Problem)))]
pub async fn settings(_: Principal, Path(id): Path<String>) -> ApiResult<Json<BTreeMap<String, String>>> {
    Ok(Json(lookup(&id)?.settings_info()))
}
