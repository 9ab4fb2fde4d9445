//! The stations API: stations, their members and their landing zones.
//!
//! Admins create and delete stations and name their owner; an owner (or an admin) manages members
//! and landing zones. A user sees the stations they may run jobs on — open ones, owned ones and
//! those they are a member of — and gets a 404 for any other. Registering an LZ answers its agent
//! token once; only the token's SHA-256 is stored.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use mission_api::{
    CreateStation, LandingZone, RegisterLandingZone, RegisteredLandingZone, Station, StationMember, UpdateStation,
};
use uuid::Uuid;

use super::extract::{ApiJson, parse_id};
use crate::AppState;
use crate::audit::{self, Change};
use crate::auth::Principal;
use crate::domain::checked_name;
use crate::error::{ApiError, ApiResult};
use crate::idp::{hash_secret, random_secret};
use mission_store::{self as store, LzIdentity};

/// Longest station description, in characters.
const MAX_DESCRIPTION_CHARS: usize = 2000;

/// Loads a station the caller may see (and run jobs on), as a 404 otherwise.
pub(super) async fn visible(app: &AppState, who: Principal, raw_id: &str) -> ApiResult<Station> {
    let id = parse_id("station_id", raw_id)?;
    let station = app.store.station(id).await?.ok_or_else(|| ApiError::not_found("station", id))?;
    let allowed = who.admin
        || station.open
        || station.owner_id == Some(who.user_id)
        || app.store.is_station_member(id, who.user_id).await?;
    if allowed { Ok(station) } else { Err(ApiError::not_found("station", id)) }
}

/// Loads a station the caller manages: 404 if they cannot see it, 403 if they may only use it.
async fn managed(app: &AppState, who: Principal, raw_id: &str) -> ApiResult<Station> {
    let station = visible(app, who, raw_id).await?;
    if who.admin || station.owner_id == Some(who.user_id) {
        Ok(station)
    } else {
        Err(ApiError::forbidden(format!("only the owner of station {} or an admin may manage it", station.name)))
    }
}

/// The user named by id or username, if there is one.
pub(super) async fn user_named(app: &AppState, given: &str) -> ApiResult<Option<Uuid>> {
    let user = match Uuid::parse_str(given) {
        Ok(id) => app.store.user_by_id(id).await?,
        Err(_) => app.store.user_by_username(given).await?,
    };
    Ok(user.map(|u| u.user_id))
}

/// The member a path names: 404 when there is no such user.
pub(super) async fn member_named(app: &AppState, given: &str) -> ApiResult<Uuid> {
    user_named(app, given).await?.ok_or_else(|| ApiError::not_found("user", format!("{given:?}")))
}

/// The stations the caller may run jobs on (every station, for admins).
#[utoipa::path(get, path = "/api/v1/stations", tag = "stations", responses((status = 200, body = [Station])))]
pub async fn list(State(app): State<AppState>, who: Principal) -> ApiResult<Json<Vec<Station>>> {
    Ok(Json(app.store.stations((!who.admin).then_some(who.user_id)).await?))
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
    if !who.admin {
        return Err(ApiError::forbidden("only admins may create stations"));
    }
    let name = checked_name(&req.name)?;
    let description = checked_description(req.description.unwrap_or_default())?;
    let owner_id = match req.owner_id {
        Some(id) => Some(
            user_named(&app, &id.to_string())
                .await?
                .ok_or_else(|| ApiError::invalid_field("owner_id", format!("no user {id}")))?,
        ),
        None => Some(who.user_id),
    };
    let station = Station {
        station_id: Uuid::new_v4(),
        name,
        description,
        owner_id,
        open: req.open.unwrap_or(false),
        reclaim: req.reclaim.unwrap_or(true),
        created_at: store::now(),
    };
    audit::note(who, Change::new("station.create", "station", station.station_id).named(&station.name).with(&station));
    app.store.insert_station(&station).await?;
    Ok((StatusCode::CREATED, Json(station)))
}

/// A station's description, if it is one: at most [`MAX_DESCRIPTION_CHARS`], no NUL.
fn checked_description(description: String) -> ApiResult<String> {
    if description.chars().count() > MAX_DESCRIPTION_CHARS || description.contains('\0') {
        return Err(ApiError::invalid_field(
            "description",
            format!("at most {MAX_DESCRIPTION_CHARS} characters, no NUL"),
        ));
    }
    Ok(description)
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
    let station = managed(&app, who, &id).await?;
    let given = serde_json::to_value(&req).unwrap_or_default();
    let description = req.description.map(checked_description).transpose()?;
    let id = station.station_id;
    audit::note(who, Change::new("station.update", "station", id).named(&station.name).with(given));
    if !app.store.update_station(id, description.as_deref(), req.open, req.reclaim).await? {
        return Err(ApiError::not_found("station", id));
    }
    if req.reclaim.is_some_and(|reclaim| reclaim != station.reclaim) {
        app.scheduler.station_changed(id).await?;
    }
    Ok(Json(app.store.station(id).await?.ok_or_else(|| ApiError::not_found("station", id))?))
}

/// One station.
#[utoipa::path(get, path = "/api/v1/stations/{id}", tag = "stations",
    params(("id" = uuid::Uuid, Path, description = "station id")),
    responses((status = 200, body = Station), (status = 404, body = mission_api::Problem)))]
pub async fn get(State(app): State<AppState>, who: Principal, Path(id): Path<String>) -> ApiResult<Json<Station>> {
    Ok(Json(visible(&app, who, &id).await?))
}

/// Deletes a station with its members and landing zones (admins only).
#[utoipa::path(delete, path = "/api/v1/stations/{id}", tag = "stations",
    params(("id" = uuid::Uuid, Path, description = "station id")),
    responses((status = 204), (status = 403, body = mission_api::Problem), (status = 404, body = mission_api::Problem)))]
pub async fn delete(State(app): State<AppState>, who: Principal, Path(id): Path<String>) -> ApiResult<StatusCode> {
    let station = visible(&app, who, &id).await?;
    if !who.admin {
        return Err(ApiError::forbidden("only admins may delete stations"));
    }
    audit::note(who, Change::new("station.delete", "station", station.station_id).named(&station.name));
    if app.scheduler.remove(station.station_id, None).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found("station", station.station_id))
    }
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
    let station = managed(&app, who, &id).await?;
    Ok(Json(app.store.station_members(station.station_id).await?))
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
    let station = managed(&app, who, &id).await?;
    let user_id = member_named(&app, &user).await?;
    let change = Change::new("station.member.add", "station", station.station_id).named(&station.name);
    audit::note(who, change.with(serde_json::json!({ "user_id": user_id })));
    app.store.add_station_member(station.station_id, user_id, store::now()).await?;
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
    let station = managed(&app, who, &id).await?;
    let user_id = member_named(&app, &user).await?;
    let change = Change::new("station.member.remove", "station", station.station_id).named(&station.name);
    audit::note(who, change.with(serde_json::json!({ "user_id": user_id })));
    if app.store.remove_station_member(station.station_id, user_id).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found("member", format!("{user} of station {}", station.name)))
    }
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
    let station = visible(&app, who, &id).await?;
    Ok(Json(app.store.landing_zones(Some(station.station_id), app.config.lz_lease, store::now()).await?))
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
    let station = managed(&app, who, &id).await?;
    let landing_zone = LandingZone {
        lz_id: Uuid::new_v4(),
        station_id: station.station_id,
        name: checked_name(&req.name)?,
        online: false,
        resources: None,
        in_use: Default::default(),
        last_seen_at: None,
        created_at: store::now(),
        cluster_account: req.cluster_account.as_deref().map(check_cluster_account).transpose()?,
        pilot_of: None,
    };
    // Its token is made in `register`, after this.
    let change = Change::new("landing_zone.register", "landing_zone", landing_zone.lz_id).named(&landing_zone.name);
    audit::note(who, change.with(&landing_zone));
    Ok((StatusCode::CREATED, Json(register(&app, landing_zone).await?)))
}

/// Stores a new landing zone with a token of its own, and tells the scheduler jobs may name it.
pub(super) async fn register(app: &AppState, landing_zone: LandingZone) -> ApiResult<RegisteredLandingZone> {
    let token = random_secret();
    app.store.insert_landing_zone(&landing_zone, &hash_secret(&token)).await?;
    app.scheduler.registered(LzIdentity {
        lz_id: landing_zone.lz_id,
        station_id: landing_zone.station_id,
        name: landing_zone.name.clone(),
        cluster_account: landing_zone.cluster_account.clone(),
    });
    Ok(RegisteredLandingZone { landing_zone, token })
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
    let station = managed(&app, who, &id).await?;
    let lz_id = parse_id("lz_id", &lz)?;
    let change = Change::new("landing_zone.remove", "landing_zone", lz_id);
    audit::note(who, change.with(serde_json::json!({ "station_id": station.station_id })));
    if app.scheduler.remove(station.station_id, Some(lz_id)).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found("landing zone", lz_id))
    }
}

/// A POSIX account name as a cluster account: 1 to 32 of `a-z`, `A-Z`, `0-9`, `_`, `.` and
/// `-`, not starting with `-`.
fn check_cluster_account(account: &str) -> ApiResult<String> {
    let valid = (1..=32).contains(&account.len())
        && !account.starts_with('-')
        && account.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
    if !valid {
        return Err(ApiError::invalid_field(
            "cluster_account",
            format!("expected a POSIX account name (1 to 32 of a-z, 0-9, _ . -), got {account:?}"),
        ));
    }
    Ok(account.to_owned())
}
