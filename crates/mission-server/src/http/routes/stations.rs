//! The stations API: stations, their members and their landing zones, over
//! [`crate::domain::stations`] (who may do what). A station the caller may not see is a 404.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use mission_api::{
    CreateStation, LandingZone, RegisterLandingZone, RegisteredLandingZone, Station, StationMember, UpdateStation,
};

use super::extract::{ApiJson, parse_id};
use crate::AppState;
use crate::domain::Principal;
use crate::domain::stations;
use crate::http::error::ApiResult;

/// The stations the caller may run jobs on (every station, for admins).
#[utoipa::path(get, path = "/api/v1/stations", tag = "stations", responses((status = 200, body = [Station])))]
pub async fn list(State(app): State<AppState>, who: Principal) -> ApiResult<Json<Vec<Station>>> {
    Ok(Json(stations::list(&app, who).await?))
}

/// Creates a station (admins only).
#[utoipa::path(post, path = "/api/v1/stations", tag = "stations", request_body = CreateStation,
    responses((status = 201, body = Station), (status = 400, body = mission_api::Problem),
        (status = 403, body = mission_api::Problem), (status = 409, body = mission_api::Problem)))]
pub async fn create(
    State(app): State<AppState>,
    who: Principal,
    ApiJson(req): ApiJson<CreateStation>,
) -> ApiResult<(StatusCode, Json<Station>)> {
    Ok((StatusCode::CREATED, Json(stations::create(&app, who, req).await?)))
}

/// Changes a station's description, whether it is open, and whether it reclaims borrowed room
/// (its owner or an admin); answers the station as it is now.
#[utoipa::path(patch, path = "/api/v1/stations/{id}", tag = "stations", request_body = UpdateStation,
    params(("id" = uuid::Uuid, Path, description = "station id")),
    responses((status = 200, body = Station), (status = 400, body = mission_api::Problem),
        (status = 403, body = mission_api::Problem), (status = 404, body = mission_api::Problem)))]
pub async fn update(
    State(app): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<UpdateStation>,
) -> ApiResult<Json<Station>> {
    Ok(Json(stations::update(&app, who, parse_id("station_id", &id)?, req).await?))
}

/// One station.
#[utoipa::path(get, path = "/api/v1/stations/{id}", tag = "stations",
    params(("id" = uuid::Uuid, Path, description = "station id")),
    responses((status = 200, body = Station), (status = 404, body = mission_api::Problem)))]
pub async fn get(State(app): State<AppState>, who: Principal, Path(id): Path<String>) -> ApiResult<Json<Station>> {
    Ok(Json(stations::visible(&app, who, parse_id("station_id", &id)?).await?))
}

/// Deletes a station with its members and landing zones (admins only).
#[utoipa::path(delete, path = "/api/v1/stations/{id}", tag = "stations",
    params(("id" = uuid::Uuid, Path, description = "station id")),
    responses((status = 204), (status = 403, body = mission_api::Problem), (status = 404, body = mission_api::Problem)))]
pub async fn delete(State(app): State<AppState>, who: Principal, Path(id): Path<String>) -> ApiResult<StatusCode> {
    stations::delete(&app, who, parse_id("station_id", &id)?).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The members of a station (its owner and admins).
#[utoipa::path(get, path = "/api/v1/stations/{id}/members", tag = "stations",
    params(("id" = uuid::Uuid, Path, description = "station id")),
    responses((status = 200, body = [StationMember]), (status = 403, body = mission_api::Problem)))]
pub async fn members(
    State(app): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
) -> ApiResult<Json<Vec<StationMember>>> {
    Ok(Json(stations::members(&app, who, parse_id("station_id", &id)?).await?))
}

/// Adds a member, named by user id or username.
#[utoipa::path(put, path = "/api/v1/stations/{id}/members/{user}", tag = "stations",
    params(("id" = uuid::Uuid, Path, description = "station id"), ("user" = String, Path, description = "user id or username")),
    responses((status = 204), (status = 400, body = mission_api::Problem), (status = 403, body = mission_api::Problem)))]
pub async fn add_member(
    State(app): State<AppState>,
    who: Principal,
    Path((id, user)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    stations::add_member(&app, who, parse_id("station_id", &id)?, &user).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Removes a member.
#[utoipa::path(delete, path = "/api/v1/stations/{id}/members/{user}", tag = "stations",
    params(("id" = uuid::Uuid, Path, description = "station id"), ("user" = String, Path, description = "user id or username")),
    responses((status = 204), (status = 404, body = mission_api::Problem)))]
pub async fn remove_member(
    State(app): State<AppState>,
    who: Principal,
    Path((id, user)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    stations::remove_member(&app, who, parse_id("station_id", &id)?, &user).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The landing zones of a station.
#[utoipa::path(get, path = "/api/v1/stations/{id}/lzs", tag = "stations",
    params(("id" = uuid::Uuid, Path, description = "station id")),
    responses((status = 200, body = [LandingZone]), (status = 404, body = mission_api::Problem)))]
pub async fn landing_zones(
    State(app): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
) -> ApiResult<Json<Vec<LandingZone>>> {
    Ok(Json(stations::landing_zones(&app, who, parse_id("station_id", &id)?).await?))
}

/// Registers a landing zone and answers its agent token (shown this once).
#[utoipa::path(post, path = "/api/v1/stations/{id}/lzs", tag = "stations", request_body = RegisterLandingZone,
    params(("id" = uuid::Uuid, Path, description = "station id")),
    responses((status = 201, body = RegisteredLandingZone), (status = 403, body = mission_api::Problem),
        (status = 409, body = mission_api::Problem)))]
pub async fn register_landing_zone(
    State(app): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<RegisterLandingZone>,
) -> ApiResult<(StatusCode, Json<RegisteredLandingZone>)> {
    let registered = stations::register_landing_zone(&app, who, parse_id("station_id", &id)?, req).await?;
    Ok((StatusCode::CREATED, Json(registered)))
}

/// Removes a landing zone; its token stops working at once.
#[utoipa::path(delete, path = "/api/v1/stations/{id}/lzs/{lz_id}", tag = "stations",
    params(("id" = uuid::Uuid, Path, description = "station id"), ("lz_id" = uuid::Uuid, Path, description = "landing zone id")),
    responses((status = 204), (status = 403, body = mission_api::Problem), (status = 404, body = mission_api::Problem)))]
pub async fn remove_landing_zone(
    State(app): State<AppState>,
    who: Principal,
    Path((id, lz)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    let (station_id, lz_id) = (parse_id("station_id", &id)?, parse_id("lz_id", &lz)?);
    stations::remove_landing_zone(&app, who, station_id, lz_id).await?;
    Ok(StatusCode::NO_CONTENT)
}
