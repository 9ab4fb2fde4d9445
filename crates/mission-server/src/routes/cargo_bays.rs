//! The cargo bays API: list, add, read, delete.
//!
//! Everyone sees the default bay; a user sees and uses their own bays; admins see all and may add
//! `local` bays (a directory on this host), also on behalf of a user. A new bay is checked by
//! listing its prefix before it is saved, so wrong credentials or a missing bucket are a 400 at
//! once rather than a failure at the first upload.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use mission_api::{CargoBay, CargoBayKind, CreateCargoBay, DEFAULT_CARGO_BAY_ID};
use uuid::Uuid;

use super::extract::{ApiJson, outbound_url, parse_id};
use crate::AppState;
use crate::audit::{self, Change};
use crate::auth::Principal;
use crate::cargo_bays::{CargoBays, Credentials, is_refusal, storage_segments};
use crate::domain::checked_name;
use crate::error::{ApiError, ApiResult};
use mission_store::{self as store, CargoBayRecord};

/// Longest S3 credential field, in bytes (AWS session tokens run to a few KiB).
const MAX_SECRET_BYTES: usize = 8192;

/// Loads a bay the caller may see, as a 404 otherwise.
async fn visible(app: &AppState, who: Principal, raw_id: &str) -> ApiResult<CargoBayRecord> {
    let id = parse_id("storage_id", raw_id)?;
    match app.store.cargo_bay(id).await? {
        Some(record) if who.admin || record.bay.user_id == Some(who.user_id) => Ok(record),
        _ => Err(ApiError::not_found("cargo bay", id)),
    }
}

/// Lists the default bay and the caller's bays (every bay, for admins).
#[utoipa::path(get, path = "/api/v1/cargo-bays", tag = "cargo-bays",
    responses((status = 200, body = [CargoBay])))]
pub async fn list(State(app): State<AppState>, who: Principal) -> ApiResult<Json<Vec<CargoBay>>> {
    let owner = (!who.admin).then_some(who.user_id);
    let rows = app.store.cargo_bays(owner).await?;
    Ok(Json(std::iter::once(CargoBays::default_bay()).chain(rows.into_iter().map(|r| r.bay)).collect()))
}

/// One bay.
#[utoipa::path(get, path = "/api/v1/cargo-bays/{id}", tag = "cargo-bays",
    params(("id" = uuid::Uuid, Path, description = "storage id")),
    responses((status = 200, body = CargoBay), (status = 404, body = mission_api::Problem)))]
pub async fn get(State(app): State<AppState>, who: Principal, Path(id): Path<String>) -> ApiResult<Json<CargoBay>> {
    if parse_id("storage_id", &id)? == DEFAULT_CARGO_BAY_ID {
        return Ok(Json(CargoBays::default_bay()));
    }
    Ok(Json(visible(&app, who, &id).await?.bay))
}

/// Deletes a bay no mission names any more. Its objects stay where they are.
#[utoipa::path(delete, path = "/api/v1/cargo-bays/{id}", tag = "cargo-bays",
    params(("id" = uuid::Uuid, Path, description = "storage id")),
    responses((status = 204), (status = 404, body = mission_api::Problem), (status = 409, body = mission_api::Problem)))]
pub async fn delete(State(app): State<AppState>, who: Principal, Path(id): Path<String>) -> ApiResult<StatusCode> {
    if parse_id("storage_id", &id)? == DEFAULT_CARGO_BAY_ID {
        return Err(ApiError::conflict("the default cargo bay is the server's own storage and cannot be deleted"));
    }
    let record = visible(&app, who, &id).await?;
    let id = record.bay.storage_id;
    audit::note(who, Change::new("cargo_bay.delete", "cargo_bay", id).named(&record.bay.name));
    if !app.store.delete_cargo_bay(id).await? {
        return Err(ApiError::not_found("cargo bay", id));
    }
    app.bays.forget(id);
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
    let name = checked_name(&req.name)?;
    let owner = match req.user_id {
        None => who.user_id,
        Some(user) if user == who.user_id => user,
        Some(_) if !who.admin => return Err(ApiError::forbidden("only admins may add cargo bays for other users")),
        Some(user) => {
            app.store
                .user_by_id(user)
                .await?
                .ok_or_else(|| ApiError::invalid_field("user_id", format!("no user {user}")))?;
            user
        }
    };
    let storage_id = Uuid::new_v4();
    let mut bay = CargoBays::bare_bay(storage_id, name, req.kind, Some(owner), Some(store::now()));
    let mut sealed_credentials = None;
    let mut prefix = Vec::new();
    match req.kind {
        CargoBayKind::Default => {
            return Err(ApiError::invalid_field(
                "kind",
                format!("the default cargo bay ({DEFAULT_CARGO_BAY_ID}) always exists; add \"s3\" or \"local\" bays"),
            ));
        }
        CargoBayKind::Local => {
            if !who.admin {
                return Err(ApiError::forbidden(
                    "only admins may add local cargo bays (a directory on the server host)",
                ));
            }
            for (field, given) in [
                ("bucket", req.bucket.is_some()),
                ("prefix", req.prefix.is_some()),
                ("endpoint", req.endpoint.is_some()),
                ("region", req.region.is_some()),
                ("access_key_id", req.access_key_id.is_some()),
                ("secret_access_key", req.secret_access_key.is_some()),
                ("session_token", req.session_token.is_some()),
            ] {
                if given {
                    return Err(ApiError::invalid_field(field, "applies to s3 cargo bays only"));
                }
            }
            bay.path = Some(check_local_dir(req.path.as_deref())?);
        }
        CargoBayKind::S3 => {
            if req.path.is_some() {
                return Err(ApiError::invalid_field("path", "applies to local cargo bays only; s3 bays take a prefix"));
            }
            bay.bucket = Some(check_bucket(req.bucket.as_deref())?);
            prefix = storage_segments("prefix", req.prefix.as_deref())?;
            bay.prefix = (!prefix.is_empty()).then(|| prefix.join("/"));
            bay.region = req.region.as_deref().map(check_region).transpose()?;
            bay.endpoint = req.endpoint.as_deref().map(|e| check_endpoint(&app, who, e)).transpose()?;
            let credentials = match (req.access_key_id, req.secret_access_key, req.session_token) {
                (None, None, None) => None,
                (Some(access_key_id), Some(secret_access_key), session_token) => {
                    for (field, value) in [
                        ("access_key_id", Some(&access_key_id)),
                        ("secret_access_key", Some(&secret_access_key)),
                        ("session_token", session_token.as_ref()),
                    ] {
                        if value.is_some_and(|v| {
                            v.is_empty() || v.len() > MAX_SECRET_BYTES || v.chars().any(char::is_control)
                        }) {
                            return Err(ApiError::invalid_field(
                                field,
                                format!("must be 1 to {MAX_SECRET_BYTES} bytes without control characters"),
                            ));
                        }
                    }
                    Some(Credentials { access_key_id, secret_access_key, session_token })
                }
                (None, _, _) => {
                    return Err(ApiError::invalid_field("access_key_id", "a secret or token needs its access_key_id"));
                }
                (Some(_), None, _) => {
                    return Err(ApiError::invalid_field(
                        "secret_access_key",
                        "access_key_id needs its secret_access_key",
                    ));
                }
            };
            sealed_credentials = credentials.as_ref().map(|c| app.bays.seal(storage_id, c));
            bay.has_credentials = credentials.is_some();
        }
    }
    let record = CargoBayRecord { bay, sealed_credentials };
    let files = app.bays.open(&record)?;
    if let Err(e) = files.probe(&prefix).await {
        app.bays.forget(storage_id);
        let hint =
            if is_refusal(&e) { "the storage refused the credentials" } else { "the storage could not be listed" };
        return Err(ApiError::invalid(format!("cargo bay check failed, {hint}: {e}")));
    }
    // The bay as answered: its credentials are never in it.
    let change = Change::new("cargo_bay.create", "cargo_bay", storage_id).named(&record.bay.name);
    audit::note(who, change.with(&record.bay));
    app.store.insert_cargo_bay(&record).await?;
    Ok((StatusCode::CREATED, Json(record.bay)))
}

fn check_local_dir(path: Option<&str>) -> ApiResult<String> {
    let path = path.ok_or_else(|| ApiError::invalid_field("path", "a local cargo bay needs a directory"))?;
    let dir = std::path::Path::new(path);
    if !dir.is_absolute() {
        return Err(ApiError::invalid_field("path", format!("{path:?} is not an absolute path")));
    }
    let real = dir.canonicalize().map_err(|e| ApiError::invalid_field("path", format!("{path:?}: {e}")))?;
    if !real.is_dir() {
        return Err(ApiError::invalid_field("path", format!("{path:?} is not a directory")));
    }
    real.to_str()
        .map(str::to_owned)
        .ok_or_else(|| ApiError::invalid_field("path", format!("{path:?} is not valid UTF-8")))
}

/// S3 bucket names: 3–63 lower-case letters, digits, dots and hyphens, starting and ending with a
/// letter or digit.
fn check_bucket(bucket: Option<&str>) -> ApiResult<String> {
    let bucket = bucket.ok_or_else(|| ApiError::invalid_field("bucket", "an s3 cargo bay needs a bucket"))?;
    let edge_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    let valid = (3..=63).contains(&bucket.len())
        && bucket.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-')
        && edge_ok(bucket.chars().next())
        && edge_ok(bucket.chars().last());
    if !valid {
        return Err(ApiError::invalid_field(
            "bucket",
            format!("{bucket:?} is not an S3 bucket name (3-63 of a-z, 0-9, '.', '-')"),
        ));
    }
    Ok(bucket.to_owned())
}

fn check_region(region: &str) -> ApiResult<String> {
    if region.is_empty() || region.len() > 64 || !region.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
        return Err(ApiError::invalid_field("region", format!("{region:?} is not a region name")));
    }
    Ok(region.to_owned())
}

/// An endpoint is an http(s) URL without credentials, query or fragment; users other than
/// admins may name only the ones the server allows.
fn check_endpoint(app: &AppState, who: Principal, endpoint: &str) -> ApiResult<String> {
    let url = outbound_url("endpoint", endpoint)?;
    let bad = |why: &str| ApiError::invalid_field("endpoint", format!("{endpoint:?}: {why}"));
    if url.query().is_some() {
        return Err(bad("must not carry a query"));
    }
    let normalised = url.as_str().trim_end_matches('/').to_owned();
    let allowed = app.config.s3_endpoints.iter().any(|a| a.as_str().trim_end_matches('/') == normalised);
    if !who.admin && !allowed {
        return Err(bad("this server does not allow it; an admin can allow it with `mission server --s3-endpoint`"));
    }
    Ok(normalised)
}
